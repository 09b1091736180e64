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
        "690c476715fde6eee32175215e976b1b61a860f8b652c35b337beeea16c2268b",
        "bdf8171961628a7a8490b590313307a31010cd7d57d4406295d4af8f489b2bd3",
        "f35bcd3f9f1c2f3e52d4f0f28dcdae64dd0de36e3a242eea588b8e986fe8a518",
    ),
    "nsys2022.2cap_2024.5exp_cloverleaf_a100": (
        "e834457dfab35624838dc0514f91347b8f635ee7391afd6938fcb709b19faa67",
        "af66fa3419eebf2c3379162dabd0a645f7a4df9dc430dfe700e9016c82ae7106",
        "0398c52823642574fa5d2c84ae1b75b85c86a4c5e8c96902a1dbeadb7dd4142b",
    ),
    "nsys2026.1_torch_tiny_rtx3080": (
        "9853490c28cd3a0b5dce384a8438cd7620e05fe12b38bbe440067bc124febbc0",
        "434c6eb3a156624cdf2403b6c8d595f66ff2d466994a7753e91bd8ece36dc60e",
        "7dcde7af257bb2124187f93af5d1f95462a1cb64264b97645c0a0797ed27acb1",
    ),
    "nsys2026.2_fastvideo_2gpu_noTARGETGPU_h100": (
        "96488c4a7345b2f20bc588339674189ecf361447c0ae0581fe2dc581c6a9c31e",
        "789bd13ac5cc2d2c0210ff06e2753ba64d866337d2172f5e70338d3c38a84f36",
        "da2cd0d92ee08665416711e16b4a8a04f1f053b2712affe438052c9237b83ea4",
    ),
    "nsys2026.2_torchrun2gpu_nccl_nvtx_h100": (
        "c8d75ff07d874fe1d9bcb2843878eb0929583e2fa8bdeec18f610dee734ed815",
        "267ebc0c08f032648313eb04dc591b6deb2df19afc93f6785917267bd6c008cd",
        "4295e7533c410ded9eaef5c25ed2e36241fd964b3e48038a03d493e04d383d52",
    ),
    "synth": (
        "144f24c89324b81eb72cdf110f73ca239ec46a46763927a886effb519bd17ef4",
        "6ddf3265922af02944a093729eb7bbd8b741cd02b9171c80a4774c54392782f9",
        "b3130840a4f62e147fee96368ac9031f6583b7de50dc4b39b1671db709acebb1",
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
