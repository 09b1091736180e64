"""Each kind's converter on hand-made chunks: the Paraver lines docs/mapping.md specifies, the
efficiency data, and the state that spans chunks (a failure names the kind)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prvstream.daemon.kinds import (
    comm,
    gpu_metrics,
    kernel,
    memcpy,
    memset,
    mpi,
    nvtx,
    osrt,
    runtime,
    sync,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.sinks.base import ActivityKind
from tests.daemon.kinds.conftest import G, T, chunk_of, lines

GPU = {"gpid": G, "device": 0, "stream": 7}


def test_kernel_state_begin_with_attributes_and_end(ctx: ReportContext) -> None:
    chunk = chunk_of("kernel", [dict(GPU, start=100, end=200, corr=9, name=1, grid_x=4,
                                     grid_y=1, grid_z=1, block_x=32, block_y=1, block_z=1,
                                     registers=16, smem_static=0, smem_dynamic=-1)])
    result = kernel.convert(ctx, chunk)
    assert lines(result.records) == [
        "2:0:1:1:1:100:63000006:1:9200:9:9101:4:9102:1:9103:1:9104:32:9105:1:9106:1"
        ":9107:0:9108:0:9109:0:9110:16",  # NULLs and negatives become 0
        "2:0:1:1:1:200:63000006:0:9200:0" + "".join(f":{t}:0" for t in range(9101, 9111)),
        "1:0:1:1:1:100:200:1",
    ]
    assert result.activity is not None and result.activity["kind"].tolist() == [
        ActivityKind.COMPUTE]
    assert ctx.ids.value("kernel", "saxpy") == 1  # type: ignore[attr-defined]


def test_nccl_kernel_is_group_communication(ctx: ReportContext) -> None:
    chunk = chunk_of("kernel", [dict(GPU, start=10, end=20, corr=1, name=2)])
    result = kernel.convert(ctx, chunk)
    text = lines(result.records)
    assert text[0].startswith("2:0:1:1:1:10:63000007:1:")
    assert text[2] == "1:0:1:1:1:10:20:13"
    assert result.activity is not None and result.activity["kind"][0] == ActivityKind.NCCL


def test_overlapping_kernels_show_from_the_previous_end_across_chunks(
        ctx: ReportContext) -> None:
    kernel.convert(ctx, chunk_of("kernel", [dict(GPU, start=100, end=300, name=1)]))
    second = kernel.convert(ctx, chunk_of("kernel", [dict(GPU, start=250, end=400, name=1)]))
    assert lines(second.records)[2] == "1:0:1:1:1:300:400:1"
    assert second.activity is not None and second.activity["start"][0] == 250  # true interval


def test_memcpy_directions_and_memset_values(ctx: ReportContext) -> None:
    copies = chunk_of("memcpy", [dict(GPU, start=10, end=20, bytes=64, copy_kind=1, corr=3),
                                 dict(GPU, start=30, end=40, bytes=8, copy_kind=0, corr=4)])
    text = lines(memcpy.convert(ctx, copies).records)
    assert text[0] == "2:0:1:1:1:10:63000001:1:63000002:64:9200:3"
    assert text[1] == "2:0:1:1:1:30:63000001:20:63000002:8:9200:4"
    assert text[2] == "2:0:1:1:1:20:63000001:0:63000002:0:9200:0"
    assert text[4] == "1:0:1:1:1:10:20:17"
    sets = memset.convert(ctx, chunk_of("memset", [dict(GPU, start=50, end=60, bytes=4,
                                                        value=0, corr=5)]))
    assert lines(sets.records)[0] == "2:0:1:1:1:50:63000001:21:63000002:4:9200:5"
    assert sets.activity is not None and sets.activity["kind"][0] == ActivityKind.MEMSET


def test_sync_value_is_type_plus_one_on_the_placed_device(
        make_context: Callable[..., ReportContext]) -> None:
    ctx = make_context(sync_devices={(G, -1, 0): 1})
    chunk = chunk_of("sync", [dict(gpid=G, device=0, stream=-1, start=5, end=9, corr=2,
                                   sync_type=3)])
    assert lines(sync.convert(ctx, chunk).records) == [
        "2:0:1:1:1:5:63000004:4", "2:0:1:1:1:9:63000004:0"]
    assert ctx.ids.tasks[0].thread_names == ["CUDA-D1.sync"]  # type: ignore[attr-defined]


def test_runtime_call_on_its_cpu_thread_with_host_states(ctx: ReportContext) -> None:
    chunk = chunk_of("runtime", [dict(start=1, end=4, gtid=T, corr=11, name=5)])
    text = lines(runtime.convert(ctx, chunk).records)
    assert text[:2] == ["2:0:1:1:1:1:63000000:1:9200:11", "2:0:1:1:1:4:63000000:0:9200:0"]
    assert "1:0:1:1:1:1:4:7" in text[2:]  # inside a Launch call: Scheduling and Fork/Join
    assert ctx.ids.tasks[0].thread_names == ["thread 7"]  # type: ignore[attr-defined]


def test_named_cpu_kinds_use_their_types(ctx: ReportContext) -> None:
    calls = chunk_of("osrt", [dict(start=1, end=2, gtid=T, name=9)])
    assert lines(osrt.convert(ctx, calls).records)[0] == "2:0:1:1:1:1:9300:1"
    sends = chunk_of("mpi", [dict(start=3, end=1, gtid=T, name=6)])  # end before start
    assert lines(mpi.convert(ctx, sends).records) == [
        "2:0:1:1:1:3:50000001:1", "2:0:1:1:1:3:50000001:0"]
    assert mpi.mpi_type("MPI_Allreduce") == 50000002 and mpi.mpi_type("MPI_Init") == 50000003


def test_nvtx_inner_range_end_restores_the_outer_value(ctx: ReportContext) -> None:
    chunk = chunk_of("nvtx", [
        dict(start=10, end=100, gtid=T, event_type=nvtx.NVTX_PUSH_POP, domain=0, text=7),
        dict(start=20, end=30, gtid=T, event_type=nvtx.NVTX_PUSH_POP, domain=0, text=8),
        dict(start=40, end=-1, gtid=T, event_type=nvtx.NVTX_MARK, domain=3, text=8),
    ])
    result = nvtx.convert(ctx, chunk)
    text = lines(result.records)
    # labels are numbered in arrival order here (live): "step 1" 1, "inner" 2
    assert text[:3] == ["2:0:1:1:1:10:9600:1", "2:0:1:1:1:20:9600:2", "2:0:1:1:1:40:9005:2"]
    assert text[3:] == ["2:0:1:1:1:100:9600:0", "2:0:1:1:1:30:9600:1"]  # the mark has no end
    assert result.phases is not None and result.phases["start"].tolist() == [10]


def test_gpu_metrics_on_the_gpus_metrics_thread(ctx: ReportContext) -> None:
    chunk = chunk_of("gpu_metrics", [dict(start=5, end=5, gpu=0, metric=7, value=42)])
    assert lines(gpu_metrics.convert(ctx, chunk).records) == ["2:0:1:1:1:5:9407:42"]
    assert ctx.ids.tasks[0].thread_names == ["Metrics GPU0"]  # type: ignore[attr-defined]
    assert ctx.ids.values["gpu_metric"] == ["7:SM Active"]  # type: ignore[attr-defined]


def test_comm_arrows_launch_to_kernel_and_api_to_memcpy(ctx: ReportContext) -> None:
    chunk = chunk_of("comm", [dict(start=1, gtid=T, recv=5, gpid=G, device=0, stream=7,
                                   size_kind=0),
                              dict(start=2, gtid=T, recv=6, gpid=G, device=0, stream=7,
                                   size_kind=(64 << 1) | 1)])
    text = lines(comm.convert(ctx, chunk).records)
    assert text == ["3:0:1:1:1:1:1:0:1:1:2:5:5:0:55001", "3:0:1:1:1:2:2:0:1:1:2:6:6:64:55002"]


def test_sequence_numbers_continue_across_chunks(ctx: ReportContext) -> None:
    first = osrt.convert(ctx, chunk_of("osrt", [dict(start=1, end=2, gtid=T, name=9)]))
    second = osrt.convert(ctx, chunk_of("osrt", [dict(start=3, end=4, gtid=T, name=9)]))
    order = [(b.keys[:, 2] & ((1 << 40) - 1)).tolist() for b in (first.records,
                                                                 second.records)]
    assert order == [[0, 0], [1, 1]]
    assert np.all(second.records.keys[:, 0] >= 3)
