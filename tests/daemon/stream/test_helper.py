"""A batch converted with a helper process (``stream.helper``) gives the bytes of one process:
exports of several nsys versions split between them, and every way the helper can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream import batch, helper
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.efficiency import EfficiencyModel, partial
from tests.conftest import real_exports


def _convert(inputs: list[str], out: Path, *, helped: bool) -> tuple[bytes, list[bool]]:
    """The outputs' bytes (trace, history, summary) and, per attempt, whether it had a
    helper."""
    conf = load_settings(None, {"log_level": "error"}, environ={})
    out.parent.mkdir(parents=True)
    model = EfficiencyModel(out.name, window_ns=int(conf.window * 1e9))
    attempts: list[bool] = []
    real = batch._convert_paths

    def counted(*args: Any, **kwargs: Any) -> Any:
        attempts.append(kwargs["helped"])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch, "_convert_paths", counted)
        batch.convert(inputs, out, conf, model=model, helper=helped,
                      summary_jsonl=out.with_name(out.name + ".summary.jsonl"))
    data = b"".join(out.with_name(out.name + ext).read_bytes()
                    for ext in (".prv", ".pcf", ".row", ".summary.jsonl"))
    return data + msgspec.json.encode(model.state()), attempts


@pytest.fixture
def mixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Generated exports of three nsys versions, two ranks each (the helper takes the later
    half: a version of its own and one it shares); a helper from two reports on, whatever
    threads earlier tests left running."""
    monkeypatch.setattr(batch, "use_helper", lambda paths, settings: len(paths) >= 2)
    inputs = []
    for i, version in enumerate(["2022.2", "2024.5", "2026.2"]):
        inputs += [str(p) for p in write_job(tmp_path / f"src{i}", SynthSpec(
            ranks=2, steps=1, layers=2, seed=i, nsys_version=version))]
    return inputs


def _same_with_a_helper(inputs: list[str], tmp_path: Path) -> None:
    alone, attempts = _convert(inputs, tmp_path / "alone" / "out", helped=False)
    assert attempts == [False]
    helped, attempts = _convert(inputs, tmp_path / "helped" / "out", helped=True)
    assert attempts == [True]  # the helper converted its part: nothing was done again
    assert helped == alone


def _absorbed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reports of each helper model state the converter's model absorbs."""
    absorbed: list[int] = []
    real = partial.absorb

    def counted(model: EfficiencyModel, state: partial.EfficiencyState, *args: Any) -> None:
        absorbed.append(state.reports)
        real(model, state, *args)

    monkeypatch.setattr(partial, "absorb", counted)
    return absorbed


def test_a_batch_of_mixed_nsys_versions_gives_one_process_bytes_with_a_helper(
        tmp_path: Path, mixed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    absorbed = _absorbed(monkeypatch)
    _same_with_a_helper(mixed, tmp_path)
    assert absorbed == []  # both halves have GPU 0 of one host: the helper sends its feeds


def test_a_helper_of_other_gpus_feeds_a_model_whose_state_the_converter_absorbs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks on hosts of their own (the helper's half shares no GPU with the converter's):
    the helper feeds its reports into its own model, the converter's absorbs its state, and
    the trace, history and summary are one process's."""
    monkeypatch.setattr(batch, "use_helper", lambda paths, settings: len(paths) >= 2)
    inputs = [str(p) for p in write_job(tmp_path / "src", SynthSpec(
        ranks=6, hosts=3, gpus_per_rank=2, steps=2, layers=2, seed=5))]
    absorbed = _absorbed(monkeypatch)
    _same_with_a_helper(inputs, tmp_path)
    assert absorbed == [3]


@pytest.mark.slow
def test_the_real_exports_with_generated_ones_give_one_process_bytes_with_a_helper(
        tmp_path: Path, mixed: list[str]) -> None:
    """The real exports (five nsys versions, some read by the helper's reader process)."""
    real = [str(p) for p in real_exports()]
    if not real:
        pytest.skip("the real exports are not here (PRVSTREAM_TEST_DATA)")
    _same_with_a_helper(mixed + real, tmp_path)


def test_a_helper_that_fails_or_diverges_leaves_the_batch_to_one_process(
        tmp_path: Path, mixed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper dies before its plans or in the final merge, or ids grow: the batch is
    converted again in one process, with its bytes."""
    alone, _ = _convert(mixed, tmp_path / "alone" / "out", helped=False)

    def broken(*args: Any) -> None:
        raise RuntimeError("the helper broke")

    with monkeypatch.context() as mp:  # the helper dies before its plans
        mp.setattr(helper, "_helper_main", broken)
        failed, attempts = _convert(mixed, tmp_path / "failed" / "out", helped=True)
    assert attempts == [True, False]
    assert failed == alone
    with monkeypatch.context() as mp:  # it dies in the final merge (its runs and ours)
        mp.setattr(helper, "_final_merge", broken)
        failed, attempts = _convert(mixed, tmp_path / "merge" / "out", helped=True)
    assert attempts == [True, False]
    assert failed == alone
    # ids grew while converting (the helper's or the converter's): the model, fed part of
    # the batch already, starts again from nothing
    with monkeypatch.context() as mp:
        mp.setattr(Numbering, "grown_since", lambda self, mark: True)
        grew, attempts = _convert(mixed, tmp_path / "grew" / "out", helped=True)
    assert attempts == [True, False]
    assert grew == alone
