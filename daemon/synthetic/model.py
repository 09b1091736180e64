# ruff: noqa: E501
"""The training-step model behind ``synth``: one step's CPU calls and GPU work as arrays, and a
vectorised scheduler that times a batch of steps (streams serialise, launches precede kernels,
NCCL waits for the slowest rank, the step ends with a stream synchronisation).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["API_NAMES", "KERNELS", "Schedule", "Template", "schedule", "template"]

log = get_logger(__name__)

# kernel table: (short name, demangled name, registers, grid, block, static smem, dynamic smem,
# base duration in ns). Names are what PyTorch/cuBLAS/flash-attention/NCCL kernels look like.
_ELEMWISE = "void at::native::vectorized_elementwise_kernel<(int)4, {}, std::array<char *, (unsigned long)3>>(int, T2, T3)"
KERNELS: tuple[tuple[str, str, int, tuple[int, int, int], tuple[int, int, int], int, int, int], ...] = (
    # forward, even layers
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn", 122, (48, 32, 1), (128, 1, 1), 16384, 0, 210_000),
    ("flash_fwd_kernel", "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, cutlass::half_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::half_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)", 255, (16, 32, 8), (128, 1, 1), 0, 49152, 260_000),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_tn", "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_tn", 238, (32, 16, 1), (256, 1, 1), 0, 73728, 150_000),
    ("vectorized_layer_norm_kernel", "void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::Half, float, (bool)0>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)", 40, (4096, 1, 1), (128, 1, 1), 0, 0, 30_000),
    ("vectorized_elementwise_kernel", _ELEMWISE.format("at::native::GeluCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)::[lambda() (instance 2)]::operator ()() const::[lambda() (instance 4)]::operator ()() const::[lambda(c10::Half) (instance 1)]"), 24, (8192, 1, 1), (128, 1, 1), 0, 0, 40_000),
    # forward, odd layers (other tile choices)
    ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", 232, (24, 32, 1), (128, 1, 1), 0, 65536, 200_000),
    ("cutlass_80_tensorop_f16_s16816gemm_relu_f16_256x128_32x3_nn_align8", "cutlass_80_tensorop_f16_s16816gemm_relu_f16_256x128_32x3_nn_align8", 230, (16, 16, 1), (256, 1, 1), 0, 81920, 160_000),
    ("vectorized_elementwise_kernel", _ELEMWISE.format("at::native::CUDAFunctor_add<c10::Half>"), 20, (8192, 1, 1), (128, 1, 1), 0, 0, 35_000),
    # loss
    ("cunn_SoftMaxForward", "void at::native::<unnamed>::cunn_SoftMaxForward<(int)4, c10::Half, float, c10::Half, at::native::<unnamed>::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, int)", 37, (2048, 1, 1), (1024, 1, 1), 0, 0, 90_000),
    ("nll_loss_forward_reduce_cuda_kernel_2d", "void at::native::<unnamed>::nll_loss_forward_reduce_cuda_kernel_2d<c10::Half, float, long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long, long)", 30, (1, 1, 1), (1024, 1, 1), 8192, 0, 20_000),
    ("nll_loss_backward_reduce_cuda_kernel_2d", "void at::native::<unnamed>::nll_loss_backward_reduce_cuda_kernel_2d<c10::Half, long>(T1 *, const T1 *, const T2 *, const T1 *, const T1 *, bool, int, int, long, long)", 28, (1, 1, 1), (1024, 1, 1), 0, 0, 15_000),
    ("cunn_SoftMaxBackward", "void at::native::<unnamed>::cunn_SoftMaxBackward<(int)4, c10::Half, float, c10::Half, at::native::<unnamed>::LogSoftMaxBackwardEpilogue>(T1 *, const T3 *, const T3 *, long)", 32, (2048, 1, 1), (1024, 1, 1), 0, 0, 95_000),
    # backward, even layers
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn", 122, (48, 32, 1), (128, 1, 1), 16384, 0, 230_000),
    ("ampere_sgemm_64x64_nt", "ampere_sgemm_64x64_nt", 126, (64, 64, 1), (64, 1, 1), 8192, 0, 250_000),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<(int)128, (int)64, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::half_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)8, cutlass::half_t>>, (bool)1, (bool)0, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(Flash_bwd_params)", 255, (16, 32, 8), (256, 1, 1), 0, 114688, 520_000),
    ("layer_norm_grad_input_kernel", "void at::native::<unnamed>::layer_norm_grad_input_kernel<c10::Half, float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, long)", 48, (4096, 1, 1), (128, 1, 1), 0, 0, 45_000),
    ("GammaBetaBackwardCUDAKernel", "void at::native::<unnamed>::GammaBetaBackwardCUDAKernel<c10::Half, float>(long, long, const T1 *, const T1 *, const T2 *, const T2 *, T1 *, T1 *)", 64, (32, 1, 1), (32, 32, 1), 8448, 0, 35_000),
    ("vectorized_elementwise_kernel", _ELEMWISE.format("at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)::[lambda() (instance 2)]::operator ()() const::[lambda() (instance 4)]::operator ()() const::[lambda(c10::Half, c10::Half) (instance 1)]"), 26, (8192, 1, 1), (128, 1, 1), 0, 0, 55_000),
    ("reduce_kernel", "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<c10::Half, at::native::sum_functor<c10::Half, float, c10::Half>::operator ()(at::TensorIterator &)::[lambda(float, float) (instance 1)]>, unsigned int, c10::Half, (int)4, (int)4>>(T3)", 32, (64, 1, 1), (32, 16, 1), 0, 4112, 25_000),
    # backward, odd layers
    ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", 232, (24, 32, 1), (128, 1, 1), 0, 65536, 220_000),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize64x128x32_stage5_warpsize2x2x1_tensor16x8x16_kernel", "sm80_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize64x128x32_stage5_warpsize2x2x1_tensor16x8x16_kernel", 168, (48, 32, 1), (128, 1, 1), 0, 61440, 240_000),
    ("vectorized_elementwise_kernel", _ELEMWISE.format("at::native::CUDAFunctor_add<float>"), 20, (8192, 1, 1), (128, 1, 1), 0, 0, 30_000),
    # optimizer
    ("multi_tensor_apply_kernel", "void multi_tensor_apply_kernel<TensorListMetadata<(int)2>, LpNormFunctor<c10::Half, float>, float *, int>(long, int *, T1, T2, T3...)", 40, (320, 1, 1), (512, 1, 1), 0, 0, 180_000),
    ("multi_tensor_apply_kernel", "void multi_tensor_apply_kernel<TensorListMetadata<(int)4>, AdamFunctor<c10::Half, float>, float, float, float, float, float, float, adamMode_t, float>(long, int *, T1, T2, T3...)", 56, (320, 1, 1), (512, 1, 1), 0, 0, 650_000),
    ("vectorized_elementwise_kernel", _ELEMWISE.format("at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>"), 22, (4096, 1, 1), (128, 1, 1), 0, 0, 20_000),
    ("reduce_kernel", "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::MaxNanFunctor<float>>, unsigned int, float, (int)4, (int)4>>(T3)", 32, (1, 1, 1), (32, 16, 1), 0, 4112, 12_000),
    # communication
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)", 96, (16, 1, 1), (640, 1, 1), 21568, 82240, 0),
)
_FWD = ((0, 1, 2, 3, 4), (5, 1, 6, 3, 7))
_LOSS_FWD = (8, 9)
_LOSS_BWD = (10, 11)
_BWD = ((12, 13, 14, 15, 16, 17, 18), (19, 20, 14, 15, 16, 21, 18))
_OPT = (22, 23, 24, 25)
_NCCL = 26

#: CUDA runtime API names as nsys records them
API_NAMES: tuple[str, ...] = (
    "cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "cudaMemsetAsync_v3020",
    "cudaEventRecord_v3020", "cudaStreamWaitEvent_v3020", "cudaStreamSynchronize_v3020",
)
_LAUNCH, _MEMCPY, _MEMSET, _RECORD, _WAIT, _SYNC = range(6)
_API_NS = (4_500, 6_000, 5_000, 2_500, 2_000, 3_000)

# slot kinds (main-thread events in issue order)
SLOT_API, SLOT_PUSH, SLOT_POP = 0, 1, 2
# GPU op kinds and stream roles
OP_KERNEL, OP_MEMCPY, OP_MEMSET = 0, 1, 2
ROLE_COMPUTE, ROLE_SIDE, ROLE_COMM = 0, 1, 2
#: stream ids per role for the first device; device k adds 16*k
STREAM_IDS = (7, 13, 14)
LAUNCH_LATENCY_NS = 2_500
_BUCKET_BYTES = 25 * 2**20
_NCCL_NS_PER_BYTE = 0.045  # ~22 GB/s ring bus bandwidth


@dataclass(frozen=True)
class Template:
    """One step of one rank: CPU slots and GPU ops, in issue order."""

    # slots (main thread)
    slot_kind: np.ndarray      # SLOT_*
    slot_api: np.ndarray       # API_NAMES index or -1
    slot_text: tuple[str | None, ...]   # NVTX text (default domain) for pushes
    slot_domain: np.ndarray    # NVTX domain of a push (0 default, 1 NCCL)
    slot_pop: np.ndarray       # for a push: the index of its pop slot
    slot_ns: np.ndarray        # base CPU duration
    slot_op: np.ndarray        # GPU op launched, or -1
    slot_sync: np.ndarray      # 0, 2 (stream wait event) or 3 (stream synchronize)
    slot_dev: np.ndarray       # device index of an API call's stream
    slot_role: np.ndarray      # stream role of an API call
    n_pre: int                 # slots before the final stream synchronisations
    # ops (GPU)
    op_kind: np.ndarray
    op_dev: np.ndarray
    op_role: np.ndarray
    op_seg: np.ndarray         # 0 side, 1 compute before the optimizer, 2 comm, 3 compute after
    op_kernel: np.ndarray      # KERNELS index or -1
    op_copy: np.ndarray        # copyKind for memcpy
    op_bytes: np.ndarray
    op_ns: np.ndarray          # base duration
    op_scaled: np.ndarray      # compute work: scales with the rank's slowness
    op_slot: np.ndarray        # launching slot
    op_bucket: np.ndarray      # NCCL: gradient bucket; compute op: bucket it completes, else -1
    devices: int
    layers: int

    @property
    def n_api(self) -> int:
        return int(np.count_nonzero(self.slot_kind == SLOT_API))

    @property
    def n_kernels(self) -> int:
        return int(np.count_nonzero(self.op_kind == OP_KERNEL))

    @property
    def n_events(self) -> int:
        return int(np.count_nonzero(self.slot_api == _RECORD))


@lru_cache(maxsize=16)
def template(layers: int, devices: int) -> Template:
    """Build the step template for ``layers`` transformer layers on ``devices`` GPUs."""
    slots: list[dict[str, Any]] = []
    ops: list[dict[str, Any]] = []
    stack: list[int] = []

    def push(text: str | None, domain: int = 0) -> None:
        stack.append(len(slots))
        slots.append(dict(kind=SLOT_PUSH, text=text, domain=domain, ns=700))

    def pop() -> None:
        start = stack.pop()
        slots[start]["pop"] = len(slots)
        slots.append(dict(kind=SLOT_POP, ns=500))

    def api(name: int, dev: int, role: int, *, sync: int = 0, op: dict[str, Any] | None = None,
            ns: int | None = None) -> None:
        slot = dict(kind=SLOT_API, api=name, dev=dev, role=role, sync=sync,
                    ns=_API_NS[name] if ns is None else ns)
        if op is not None:
            op.update(dev=dev, role=role, slot=len(slots))
            slot["op"] = len(ops)
            ops.append(op)
        slots.append(slot)

    def kernel(k: int, dev: int, seg: int, bucket: int = -1) -> None:
        api(_LAUNCH, dev, ROLE_COMPUTE, op=dict(kind=OP_KERNEL, seg=seg, kernel=k, ns=KERNELS[k][7],
                                                scaled=1, bucket=bucket))

    def copy(kind: int, nbytes: int, dev: int, role: int, seg: int, gbps: float) -> None:
        api(_MEMCPY, dev, role, op=dict(kind=OP_MEMCPY, seg=seg, copy=kind, bytes=nbytes,
                                        ns=int(1_500 + nbytes / gbps)))

    devs = range(devices)
    push("train_step")
    for d in devs:
        copy(1, 8 * 2**20, d, ROLE_SIDE, 0, 24.0)       # input batch HtoD on the side stream
        api(_RECORD, d, ROLE_SIDE)
        api(_WAIT, d, ROLE_COMPUTE, sync=2)
    push("forward")
    for layer in range(layers):
        push(f"layer_{layer:02d}")
        for k in _FWD[layer % 2]:
            for d in devs:
                kernel(k, d, 1)
        if layer == 0:
            for d in devs:
                copy(8, 16 * 2**20, d, ROLE_COMPUTE, 1, 900.0)   # DtoD copy (embedding)
        pop()
    for k in _LOSS_FWD:
        for d in devs:
            kernel(k, d, 1)
    pop()
    push("backward")
    for d in devs:
        api(_MEMSET, d, ROLE_COMPUTE, op=dict(kind=OP_MEMSET, seg=1, bytes=4 * 2**20, ns=9_000))
    for k in _LOSS_BWD:
        for d in devs:
            kernel(k, d, 1)
    for bucket, layer in enumerate(reversed(range(layers))):
        push(f"layer_{layer:02d}")
        names = _BWD[layer % 2]
        for i, k in enumerate(names):
            for d in devs:
                kernel(k, d, 1, bucket if i == len(names) - 1 else -1)
        for d in devs:
            api(_RECORD, d, ROLE_COMPUTE)
            api(_WAIT, d, ROLE_COMM, sync=2)
            push(None, 1)   # "ncclAllReduce" in the NCCL domain
            api(_LAUNCH, d, ROLE_COMM, ns=7_000, op=dict(
                kind=OP_KERNEL, seg=2, kernel=_NCCL, bucket=bucket,
                ns=int(_BUCKET_BYTES * _NCCL_NS_PER_BYTE)))
            pop()
        pop()
    pop()
    push("optimizer")
    for d in devs:
        api(_RECORD, d, ROLE_COMM)
        api(_WAIT, d, ROLE_COMPUTE, sync=2)
    for k in _OPT:
        for d in devs:
            kernel(k, d, 3)
    for d in devs:
        copy(2, 4, d, ROLE_COMPUTE, 3, 1.0)                   # loss DtoH
    pop()
    n_pre = len(slots)
    for d in devs:
        api(_SYNC, d, ROLE_COMPUTE, sync=3)
    pop()
    assert not stack

    def col(rows: list[dict[str, Any]], key: str, default: int = -1) -> np.ndarray:
        return np.array([r.get(key, default) for r in rows], dtype=np.int64)

    return Template(
        slot_kind=col(slots, "kind"), slot_api=col(slots, "api"),
        slot_text=tuple(s.get("text") for s in slots),
        slot_domain=col(slots, "domain", 0), slot_pop=col(slots, "pop"),
        slot_ns=col(slots, "ns"), slot_op=col(slots, "op"), slot_sync=col(slots, "sync", 0),
        slot_dev=col(slots, "dev", 0), slot_role=col(slots, "role", 0), n_pre=n_pre,
        op_kind=col(ops, "kind"), op_dev=col(ops, "dev"), op_role=col(ops, "role"),
        op_seg=col(ops, "seg"), op_kernel=col(ops, "kernel"), op_copy=col(ops, "copy", 0),
        op_bytes=col(ops, "bytes", 0), op_ns=col(ops, "ns"), op_scaled=col(ops, "scaled", 0),
        op_slot=col(ops, "slot"), op_bucket=col(ops, "bucket"), devices=devices, layers=layers,
    )


@dataclass
class Schedule:
    """Times (ns, relative to each step's start) of a batch of steps: arrays [steps, n]."""

    slot_start: np.ndarray
    slot_end: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    cpu_end: np.ndarray        # [steps] when the step's last NVTX pop returns
    bucket_ready: np.ndarray   # [steps, buckets] latest gradient-ready time over devices


def _serial(lb: np.ndarray, dur: np.ndarray, gap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start/end of work items run in order on one stream: start_i = max(lb_i, end_{i-1}+gap)."""
    step = dur + gap
    before = np.cumsum(step, axis=1) - step
    start = before + np.maximum.accumulate(lb - before, axis=1)
    return start, start + dur


def schedule(t: Template, slot_ns: np.ndarray, gap_ns: np.ndarray, op_ns: np.ndarray,
             op_gap: np.ndarray, global_ready: np.ndarray | None) -> Schedule:
    """Time a batch of steps given per-step durations (arrays [steps, slots] / [steps, ops]).

    ``global_ready`` (per bucket) is when the slowest rank's gradients are ready: NCCL kernels
    spin until then. Every time is monotone in every duration, so a schedule computed with
    upper-bound durations bounds every rank's.
    """
    n = slot_ns.shape[0]
    slot_start = np.zeros_like(slot_ns)
    pre = slice(0, t.n_pre)
    step = slot_ns[:, pre] + gap_ns[:, pre]
    slot_start[:, pre] = np.cumsum(step, axis=1) - step
    op_start = np.zeros_like(op_ns)
    op_end = np.zeros_like(op_ns)
    lb = slot_start[:, t.op_slot] + LAUNCH_LATENCY_NS
    buckets = t.layers
    ready = np.zeros((n, buckets), dtype=np.int64)
    done = np.zeros((n, t.devices), dtype=np.int64)
    for d in range(t.devices):
        mine = t.op_dev == d
        side = np.flatnonzero(mine & (t.op_seg == 0))
        op_start[:, side] = lb[:, side]
        op_end[:, side] = lb[:, side] + op_ns[:, side]
        side_end = op_end[:, side].max(axis=1)
        part1 = np.flatnonzero(mine & (t.op_seg == 1))
        lb1 = lb[:, part1].copy()
        lb1[:, 0] = np.maximum(lb1[:, 0], side_end)
        s, e = _serial(lb1, op_ns[:, part1], op_gap[:, part1])
        op_start[:, part1], op_end[:, part1] = s, e
        last = part1[t.op_bucket[part1] >= 0]
        own_ready = op_end[:, last]                       # [n, buckets] in bucket order
        ready = np.maximum(ready, own_ready)
        comm = np.flatnonzero(mine & (t.op_seg == 2))
        prev = np.zeros(n, dtype=np.int64)
        for b, i in enumerate(comm):
            start = np.maximum(np.maximum(lb[:, i], own_ready[:, b]), prev)
            wait = start if global_ready is None else np.maximum(start, global_ready[:, b])
            op_start[:, i] = start
            op_end[:, i] = wait + op_ns[:, i]
            prev = op_end[:, i] + op_gap[:, i]
        part2 = np.flatnonzero(mine & (t.op_seg == 3))
        lb2 = lb[:, part2].copy()
        lb2[:, 0] = np.maximum.reduce([lb2[:, 0], op_end[:, comm[-1]], op_end[:, part1[-1]]])
        s, e = _serial(lb2, op_ns[:, part2], op_gap[:, part2])
        op_start[:, part2], op_end[:, part2] = s, e
        done[:, d] = op_end[:, part2[-1]]
    # the final stream synchronisations block until their device is done, then the last pop
    now = slot_start[:, t.n_pre - 1] + slot_ns[:, t.n_pre - 1] + gap_ns[:, t.n_pre - 1]
    for j in range(t.n_pre, len(t.slot_kind)):
        slot_start[:, j] = now
        end: Any = now + slot_ns[:, j]
        if t.slot_sync[j] == 3:
            end = np.maximum(end, done[:, t.slot_dev[j]] + 1_200)
        now = end + gap_ns[:, j]
    slot_end = slot_start + slot_ns
    sync_rows = np.flatnonzero(t.slot_sync == 3)
    slot_end[:, sync_rows] = slot_start[:, sync_rows + 1] - gap_ns[:, sync_rows]
    cpu_end = slot_end[:, -1]
    return Schedule(slot_start, slot_end, op_start, op_end, cpu_end, ready)
