"""Pins the bytes of the traces the real exports and a synthetic job convert to.

Any change to these hashes changes what users load in Paraver: it must be deliberate, made in
one commit that says why (the mapping changed, a bug was fixed), never a side effect.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.conftest import REAL_DATA

__all__: list[str] = []

#: export stem (or "synth") -> sha256 of the .prv, .pcf and .row that `convert` writes
PINNED: dict[str, tuple[str, str, str]] = {
    "nsys2022.2_saxpy_mpi_rank0_a100": (
        "9d4c0ec1bdf12fde1cfad2286f053ba560e8316a27709e024e6507076a6d001b",
        "27e99002f52cae40afa3ecee6ebdc682f7ce09c80a1daf11878d58041eb4f380",
        "bec790ca5d334c00babd4c12f58f9f542b48f75f085686540d78746f40c2233e",
    ),
    "nsys2022.2cap_2024.5exp_cloverleaf_a100": (
        "d663c6090b948e8031f2015f10d69a13fa109f814212930f852069e27d99ecac",
        "34a31adc38abe7df4dd5b21483379d7c3e141b98bb07b903eeec506842e911e7",
        "6a792e4f6c7e0c42ae1a2f50e8888df37c3d95ac8614df7bdcfc0771fe5d686c",
    ),
    "nsys2026.1_torch_tiny_rtx3080": (
        "ec57139affae95d77c59afaeab2b8b31ee440060d1fbea005140ce62b32a047c",
        "96b17bbf16044c95bedf7a58196ef780556ccde73ff0624825f7b0461b493c9f",
        "bac9ff8210446b8ec1b239e686e8d3fa724db5ba0bc73a0c1845a291d3bb2a8e",
    ),
    "nsys2026.2_fastvideo_2gpu_noTARGETGPU_h100": (
        "29239bfe693cf6acbbc66a5d8af46424d9f07f95f8dd67acd7aef08b35cbd8e4",
        "40044552f7d1d71aef5eac2a73a931f35c33036ba44e4c31e81e7741fb821662",
        "583314b9b04c5fcdb2136bf2561dbe42572037a81167fa90404ee00e4856384a",
    ),
    "nsys2026.2_torchrun2gpu_nccl_nvtx_h100": (
        "aa0861035ea1b9ec894a15f50f9efb244360100ca3f4a2d234e3d4ac5e4e4913",
        "dd113de62db4d7f4d495691eee9d77e2ad9f242c9c3e069c43fa5b98f2806eef",
        "6b4347003d34fed5e13e4bb7a324a3d23d660391e7e24683fcd5bbeb40088bf1",
    ),
    "synth": (
        "433218afb970ca60f2d2594b3ba4cf4ba50fe0d790e3e13bbc6a3f21317cc07a",
        "959844f478a987519138677e1732f16e691a2f4107e3744ead0be2a944442bae",
        "cb0b998e4dbfcc9a6bd0e81f58c64561ed11a96e64576bb712250d4a2ba42f9a",
    ),
}


def _hashes(out: Path) -> tuple[str, str, str]:
    return tuple(  # type: ignore[return-value]
        hashlib.sha256(out.with_name(out.name + s).read_bytes()).hexdigest()
        for s in (".prv", ".pcf", ".row")
    )


@pytest.mark.parametrize("stem", [s for s in PINNED if s != "synth"])
def test_real_export_bytes_are_pinned(stem: str, tmp_path: Path) -> None:
    export = REAL_DATA / f"{stem}.sqlite"
    if not export.is_file():
        pytest.skip(f"real export {export} not found (set PRVSTREAM_TEST_DATA)")
    out = tmp_path / stem
    assert cli("convert", str(export), "-o", str(out), "--no-progress") == 0
    assert _hashes(out) == PINNED[stem]


def test_synthetic_job_bytes_are_pinned(tmp_path: Path) -> None:
    job = tmp_path / "synthjob"
    write_job(job, SynthSpec(ranks=4, steps=3))
    out = tmp_path / "synth"
    assert cli("convert", str(job), "-o", str(out), "--no-progress") == 0
    assert _hashes(out) == PINNED["synth"]
