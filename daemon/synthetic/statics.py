"""The fixed rows of a synthetic export: its string table, the enum tables nsys writes, and
``META_DATA_EXPORT`` as the chosen nsys version words it."""

from __future__ import annotations

import time

from prvstream.daemon.synthetic.model import API_NAMES, KERNELS
from prvstream.daemon.synthetic.spec import (
    EVT_THREAD,
    LOADER_THREAD,
    MAIN_THREAD,
    NSYS_VERSIONS,
    OSRT_CALLS,
    RankLayout,
    SynthSpec,
)

__all__ = ["ENUMS", "iso_time", "mangle", "metadata_rows", "string_table"]


def string_table(spec: SynthSpec) -> list[str]:
    names: list[str] = list(API_NAMES)
    for short, demangled, *_ in KERNELS:
        names += [short, demangled, mangle(short)]
    names += [*OSRT_CALLS, MAIN_THREAD, LOADER_THREAD, EVT_THREAD, "ncclAllReduce"]
    return list(dict.fromkeys(names))   # unique, first-seen order


def mangle(short: str) -> str:
    if short.startswith("nccl"):
        return f"_Z{len(short)}{short}24ncclDevKernelArgsStorageILm4096EE"
    if short.startswith(("ampere_", "sm80_", "cutlass_")):   # extern "C" kernels
        return short
    return f"_ZN2at6native{len(short)}{short}IfEEvT_"


ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [(i, f"CUDA_MEMCPY_KIND_{n}", label) for i, n, label in (
        (0, "UNKNOWN", "Unknown"), (1, "HTOD", "Host-to-Device"), (2, "DTOH", "Device-to-Host"),
        (3, "HTOA", "Host-to-Array"), (4, "ATOH", "Array-to-Host"), (5, "ATOA", "Array-to-Array"),
        (6, "ATOD", "Array-to-Device"), (7, "DTOA", "Device-to-Array"),
        (8, "DTOD", "Device-to-Device"), (9, "HTOH", "Host-to-Host"), (10, "PTOP", "Peer-to-Peer"),
        (11, "UVM_HTOD", "Unified Host-to-Device"), (12, "UVM_DTOH", "Unified Device-to-Host"),
        (13, "UVM_DTOD", "Unified Device-to-Device"))],
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": [
        (0, "CUDA_KERNEL_LAUNCH_TYPE_UNKNOWN", "Unknown"),
        (1, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"),
        (2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Coop Single Device"),
        (3, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Coop Multi Device")],
    "ENUM_NSYS_EVENT_TYPE": [(i, n, n) for i, n in (
        (27, "Command"), (33, "NvtxCategory"), (34, "NvtxMark"), (35, "NvtxPushRange"),
        (36, "NvtxPopRange"), (37, "NvtxStartRange"), (38, "NvtxEndRange"), (39, "NvtxThread"),
        (59, "NvtxPushPopRange"), (60, "NvtxStartEndRange"), (75, "NvtxDomainCreate"),
        (76, "NvtxDomainDestroy"))],
    "ENUM_NSYS_EVENT_CLASS": [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (26, "TRACE_PROCESS_EVENT_CUDA_API", "CUDA API"),
        (27, "TRACE_PROCESS_EVENT_OS_RUNTIME", "OSRT runtime"),
        (31, "TRACE_PROCESS_EVENT_OS_RUNTIME_START", "OSRT start"),
        (32, "TRACE_PROCESS_EVENT_OS_RUNTIME_FINISH", "OSRT finish")],
    "ENUM_CUPTI_SYNC_TYPE": [
        (i, f"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_{n}", label) for i, n, label in (
        (0, "UNKNOWN", "Unknown"), (1, "EVENT_SYNCHRONIZE", "Event sync"),
        (2, "STREAM_WAIT_EVENT", "Stream wait sync"), (3, "STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CONTEXT_SYNCHRONIZE", "Context sync"))],
    "ENUM_CUDA_MEM_KIND": [(i, f"CUDA_MEMOPR_MEMORY_KIND_{n}", label) for i, n, label in (
        (0, "PAGEABLE", "Pageable"), (1, "PINNED", "Pinned"), (2, "DEVICE", "Device"),
        (3, "ARRAY", "Array"), (4, "MANAGED", "Managed"), (5, "DEVICE_STATIC", "Device Static"),
        (6, "MANAGED_STATIC", "Managed Static"), (7, "UNKNOWN", "Unknown"))],
    "ENUM_CUPTI_STREAM_TYPE": [
        (0, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_UNKNOWN", "Unknown stream type"),
        (1, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT", "Default stream"),
        (2, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING", "Non-blocking stream"),
        (3, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL", "Null stream")],
}


def iso_time(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9))


def metadata_rows(spec: SynthSpec, lay: RankLayout, name: str, end_wall: int,
              elapsed: str) -> list[tuple[str, str]]:
    product, schema, cksum = NSYS_VERSIONS[spec.nsys_version]
    major, minor, micro = schema.split(".")
    rep = name.removesuffix(".sqlite") + ".nsys-rep"
    head = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", product),
            ("EXPORT_PRODUCT_DATE", spec.nsys_version), ("EXPORT_SCHEMA_VERSION", schema),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_SCHEMA_VERSION_CKSUM", cksum),
            ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64")]
    when = [("EXPORT_TIME_UTC", iso_time(end_wall)), ("EXPORT_TIME_LOCAL", iso_time(end_wall)),
            ("EXPORT_HOST", lay.host), ("EXPORT_USER", "synth")]
    if spec.nsys_version == "2022.2":
        return [*head, ("EXPORT_TIME", elapsed), *when,
                       ("EXPORT_INPUT_FILE", rep), ("EXPORT_OUTUPT_FILE", name),
                       ("EXPORT_INPUT_PATH", rep), ("EXPORT_OUTUPT_PATH", name),
                       ("EXPORT_INPUT_PATH_ABS", rep), ("EXPORT_OUTUPT_PATH_ABS", name),
                       ("EXPORT_OVERWRITE", "false"), ("EXPORT_LAZY", "false")]
    params = [("INPUT_FILE", rep), ("OUTPUT_FILE", name), ("INPUT_PATH", rep),
              ("OUTPUT_PATH", name), ("INPUT_PATH_ABS", rep), ("OUTPUT_PATH_ABS", name)]
    if spec.nsys_version == "2026.2":
        params = [("EXPORT_TYPE", "SQLite"), *params, ("PROGRESS", "false")]
    params += [("OVERWRITE", "true"), ("APPEND", "false"), ("LAZY", "true")]
    if spec.nsys_version == "2026.2":
        params += [("USE_SHUFFLE", "true"), ("INCLUDE_JSON", "false"), ("INCLUDE_BLOBS", "false")]
    params += [("TIME_NORMALIZE", "false"), ("TIME_SHIFT", "0"), ("TABLES_TO_EXPORT", ""),
               ("TIMES_TO_EXPORT", "")]
    return (head + when + [(f"EXPORT_PARAM_{k}", v) for k, v in params]
            + [("EXPORT_CONFIG_TIME_SHIFT", "0"), ("EXPORT_TIME", f"{elapsed} sec")])
