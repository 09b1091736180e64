"""Discovery with native events and with polling: new, pre-existing and renamed exports are
found once per burst; temporary names, prvstream's outputs and escaping symlinks are not.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
from structlog.testing import capture_logs

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.locate import DONE_MARKER, Candidate, DiscoveryScope, scan_once
from prvstream.daemon.service.discover import EventBridge, open_discovery
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.files import OWNED_MARKER

DEBOUNCE = 0.05

MODES = [pytest.param(0.0, id="native"), pytest.param(0.05, id="poll")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "job1").mkdir(parents=True)
    return r


def export(path: Path, size: int = 100) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * size)
    return path


@asynccontextmanager
async def discovering(root: Path, poll: float, **kw: object
                      ) -> AsyncIterator[MemoryObjectReceiveStream[Candidate]]:
    with anyio.fail_after(10):
        async with open_discovery([root], poll=poll, debounce=DEBOUNCE, nsys=None,
                                  **kw) as found:  # type: ignore[arg-type]
            yield found


async def take(found: MemoryObjectReceiveStream[Candidate], n: int = 1,
               quiet: float = 0.3) -> list[Candidate]:
    """The next ``n`` candidates, then make sure nothing else arrives for ``quiet`` s."""
    got = [await found.receive() for _ in range(n)]
    with anyio.move_on_after(quiet):
        extra = await found.receive()
        got.append(extra)
    return got


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_initial_scan_and_new_file(root: Path, poll: float) -> None:
    early = export(root / "job1" / "rank0.sqlite")
    async with discovering(root, poll) as found:
        [first] = await take(found)
        assert first == Candidate(early, root / "job1", root, "sqlite")
        assert first.job_id == "job1" and first.job_name == "job1"
        late = export(root / "a" / "b" / "rank1.sqlite")
        [second] = await take(found)
        assert second.path == late and second.job_id == os.path.join("a", "b")


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_burst_is_one_unit_of_work(root: Path, poll: float) -> None:
    async with discovering(root, poll) as found:
        path = root / "job1" / "rank0.sqlite"
        with path.open("wb") as fh:
            for _ in range(50):
                fh.write(b"x" * 1000)
                fh.flush()
        got = await take(found)
        assert [c.path for c in got] == [path]


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_renamed_into_place(root: Path, poll: float) -> None:
    async with discovering(root, poll) as found:
        for tmp_name, final_name in ((".rank0.sqlite.partial", "rank0.sqlite"),
                                     ("rank1.sqlite.tmp", "rank1.sqlite")):
            tmp = export(root / "job1" / tmp_name)
            await anyio.sleep(0.1)
            final = root / "job1" / final_name
            tmp.rename(final)
            got = await take(found)
            assert [c.path for c in got] == [final]


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_job_folder_moved_in(root: Path, tmp_path: Path, poll: float) -> None:
    staging = tmp_path / "staging" / "job9"
    export(staging / "rank0.sqlite")
    export(staging / "rank1.sqlite")
    async with discovering(root, poll) as found:
        staging.rename(root / "job9")
        got = await take(found, 2)
        assert sorted(c.path.name for c in got) == ["rank0.sqlite", "rank1.sqlite"]
        assert {c.job_dir for c in got} == {root / "job9"}


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_ignores_temporary_names_and_outputs(root: Path, tmp_path: Path,
                                                   poll: float) -> None:
    out = root / "collected"
    marked = root / "custom-out"
    marked.mkdir()
    (marked / OWNED_MARKER).write_text("t.prv\n")
    ignored = [
        root / "job1" / ".hidden.sqlite",
        root / "job1" / "rank0.sqlite.tmp",
        root / "job1" / "rank0.sqlite-journal",
        root / "job1" / "rank0.sqlite-wal",
        root / "job1" / "rank0.sqlite-shm",
        root / "job1" / "notes.txt",
        root / "job1" / "prvstream" / "copy.sqlite",
        root / ".cache" / "x.sqlite",
        out / "job1" / "copy.sqlite",
        marked / "copy.sqlite",
    ]
    async with discovering(root, poll, out_dir=out) as found:
        for p in ignored:
            export(p)
        await anyio.sleep(0.2)
        sentinel = export(root / "job1" / "rank0.sqlite")
        got = await take(found)
        assert [c.path for c in got] == [sentinel]


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_symlinks_out_of_the_root_are_refused(root: Path, tmp_path: Path,
                                                    poll: float) -> None:
    outside = tmp_path / "outside"
    secret = export(outside / "secret.sqlite")
    (root / "linked-dir").symlink_to(outside, target_is_directory=True)
    inside_target = export(root / "job1" / "rank0.sqlite")
    with capture_logs() as logs:
        async with discovering(root, poll) as found:
            assert [c.path for c in await take(found)] == [inside_target]
            (root / "job1" / "evil.sqlite").symlink_to(secret)
            sentinel = export(root / "job1" / "rank1.sqlite")
            got = await take(found)
            assert [c.path for c in got] == [sentinel]
    refused = [e for e in logs if e["event"] == "symlink_refused"]
    assert {Path(e["path"]).name for e in refused} == {"linked-dir", "evil.sqlite"}
    assert len(refused) == 2  # each logged once


@pytest.mark.anyio
@pytest.mark.parametrize("poll", MODES)
async def test_done_marker(root: Path, poll: float) -> None:
    async with discovering(root, poll) as found:
        (root / "job1" / DONE_MARKER).touch()
        [done] = await take(found)
        assert done.kind == "done" and done.job_dir == root / "job1"


@pytest.mark.anyio
async def test_settings_select_polling(root: Path) -> None:
    export(root / "job1" / "rank0.sqlite")
    with anyio.fail_after(10), capture_logs() as logs:
        async with open_discovery([root], settings=Settings(poll=0.05), debounce=DEBOUNCE,
                                  nsys=None) as found:
            await found.receive()
    started = [e for e in logs if e["event"] == "discovery_started"]
    assert started[0]["mode"] == "poll"


def test_symlink_inside_the_root_resolves_to_its_real_job(root: Path) -> None:
    real = export(root / "job1" / "rank0.sqlite")
    (root / "job2").mkdir()
    (root / "job2" / "alias.sqlite").symlink_to(real)
    (root / "alias-dir").symlink_to(root / "job1")
    found = scan_once([root], nsys=None)
    assert [c.path for c in found] == [real]  # the alias resolves to the same file
    scope = DiscoveryScope([root], nsys=None)
    cand = scope.classify(str(root / "job2" / "alias.sqlite"))
    assert cand is not None and cand.path == real and cand.job_dir == root / "job1"


@pytest.mark.parametrize(("nsys", "with_sqlite", "expected"), [
    pytest.param("/opt/nsys/bin/nsys", False, ["rank0.nsys-rep"], id="offered"),
    pytest.param("/opt/nsys/bin/nsys", True, ["rank0.sqlite"], id="sqlite-beside"),
    pytest.param(None, False, [], id="no-nsys"),
])
def test_nsys_rep_candidates(root: Path, nsys: str | None, with_sqlite: bool,
                             expected: list[str]) -> None:
    (root / "job1" / "rank0.nsys-rep").write_bytes(b"rep")
    if with_sqlite:
        export(root / "job1" / "rank0.sqlite")
    with capture_logs() as logs:
        found = scan_once([root], nsys=nsys)
        scan_once([root], nsys=nsys)
    assert [c.path.name for c in found] == expected
    if expected and expected[0].endswith(".nsys-rep"):
        assert found[0].kind == "nsys-rep"
    waiting = [e for e in logs if e["event"] == "nsys_rep_waiting"]
    assert len(waiting) == (2 if nsys is None else 0)  # once per scope


def test_missing_root_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an existing directory"):
        scan_once([tmp_path / "nope"])


@pytest.mark.anyio
async def test_service_loop_shape(root: Path, tmp_path: Path) -> None:
    """discover -> wait_ready in a worker -> journal: the shape the service runs."""
    from prvstream.daemon.live.journal import JobJournal, ReportEntry
    from prvstream.daemon.service.readiness import Invalid, Ready, wait_ready
    from prvstream.daemon.synthetic.synth import SynthSpec, write_export

    state = tmp_path / "state"
    good = write_export(root / "job1" / "rank0.sqlite", SynthSpec(ranks=1, steps=1), 0)
    (root / "job1" / "junk.sqlite").write_bytes(b"not sqlite at all" * 100)
    outcomes: dict[str, str] = {}
    journals: dict[Path, JobJournal] = {}  # one writer per job: one journal object per job

    async def worker(cand: Candidate) -> None:
        verdict = await wait_ready(cand.path, settle=0.05, max_wait=5)
        journal = journals.setdefault(cand.job_dir,
                                      JobJournal.open(state, cand.job_dir, root=cand.root))
        if isinstance(verdict, Ready):
            if not journal.has_report(verdict.identity):
                journal.add_report(ReportEntry(identity=verdict.identity, name=cand.path.name,
                                               path=str(cand.path), block_start=0,
                                               block_end=0, records=0))
        elif isinstance(verdict, Invalid) and not verdict.gone:
            journal.quarantine(cand.path, verdict.reason)
        journal.commit()
        outcomes[cand.path.name] = type(verdict).__name__

    with anyio.fail_after(10):
        async with (open_discovery([root], poll=0.05, debounce=DEBOUNCE, nsys=None) as found,
                    anyio.create_task_group() as tg):
            for _ in range(2):
                tg.start_soon(worker, await found.receive())
    assert outcomes == {"rank0.sqlite": "Ready", "junk.sqlite": "Invalid"}
    journal = JobJournal.open(state, root / "job1")
    assert [r.name for r in journal.reports] == [good.name]
    assert journal.is_quarantined(root / "job1" / "junk.sqlite")


def test_a_burst_of_watch_events_wakes_the_loop_once() -> None:
    """Events pushed from watchdog's thread while the loop is busy cost one wake-up of the
    loop (one byte in its self-pipe, which the signal handlers share: a byte per event once
    filled it and a SIGTERM was lost), and all of them arrive, in order."""
    send, receive = anyio.create_memory_object_stream[tuple[str, bool]](float("inf"))
    loop = asyncio.new_event_loop()
    wakeups = 0
    real = loop.call_soon_threadsafe

    def counted(*args: object) -> asyncio.Handle:
        nonlocal wakeups
        wakeups += 1
        return real(*args)  # type: ignore[arg-type]

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    bridge = EventBridge(loop, send)

    def burst(first: int) -> None:
        for n in range(first, first + 50_000):
            bridge.push((f"f{n}", False))

    try:
        for first in (0, 50_000):  # the loop idle while a thread pushes, then drains
            pusher = threading.Thread(target=burst, args=(first,))
            pusher.start()
            pusher.join()
            loop.run_until_complete(asyncio.sleep(0))
        got = [receive.receive_nowait()[0] for _ in range(100_000)]
    finally:
        loop.close()
        send.close()
        receive.close()
    assert wakeups == 2
    assert got == [f"f{n}" for n in range(100_000)]
