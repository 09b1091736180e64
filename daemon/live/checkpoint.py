"""The efficiency model's checkpoint beside a job's journal: written with every commit, read at
restart, so that recovery is O(1) in the job's size and never re-reads an export.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import msgspec

from prvstream.daemon.live.journal import JobJournal
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.efficiency.partial import decode_partial, encode_state_chunks
from prvstream.sinks.errors import StateDirUnusable
from prvstream.sinks.files import fsync_dir
from prvstream.sinks.logger import get_logger

__all__ = ["commit_with_checkpoint", "restore_checkpoint"]

log = get_logger(__name__)

#: bytes of a checkpoint buffered before each write: a commit at thousands of devices writes
#: megabytes, and each megabyte of buffer is a megabyte more of the commit's peak
_WRITE_BUFFER = 1 << 18


def commit_with_checkpoint(journal: JobJournal, model: EfficiencyModel) -> None:
    """Write the model's state to a new file named by its content, commit the journal naming
    it, then drop older checkpoints: a crash at any point leaves the journal naming a whole
    checkpoint of exactly its reports. The state is encoded and written a device at a time
    (``encode_state_chunks``): a commit never holds the job's whole state as objects."""
    folder = journal.path.parent
    try:
        name = _write_named(folder, f"{journal.path.stem}.model.",
                            encode_state_chunks(model), journal.state.model_checkpoint)
    except OSError as exc:
        raise StateDirUnusable(
            f"cannot write the model checkpoint in {folder} ({exc.strerror or exc}); "
            "free space or fix the permissions of --state, then restart") from exc
    journal.state.model_checkpoint = name
    journal.commit()
    for old in folder.glob(f"{journal.path.stem}.model.*"):
        if old.name != name:
            old.unlink(missing_ok=True)


def _write_named(folder: Path, prefix: str, chunks: Iterable[bytes], current: str) -> str:
    """Write ``chunks`` to a temporary file in ``folder``, then (fsynced) rename it to
    ``prefix`` and the first 20 hex digits of the SHA-256 of its bytes; the name. When
    that is ``current`` (the same content) the file already there is kept."""
    digest = hashlib.sha256()
    tmp = folder / f".{prefix}{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)
    try:
        with os.fdopen(fd, "wb", buffering=_WRITE_BUFFER) as fh:
            for chunk in chunks:
                digest.update(chunk)
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        name = f"{prefix}{digest.hexdigest()[:20]}"
        if name == current:
            tmp.unlink()
            return name
        os.replace(tmp, folder / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)
    return name


def restore_checkpoint(journal: JobJournal, recent: int) -> EfficiencyModel | None:
    """The model as of the journal's last commit, or None when it has no usable checkpoint."""
    name = journal.state.model_checkpoint
    if not name:
        return None
    try:
        state = decode_partial((journal.path.parent / name).read_bytes())
        model = EfficiencyModel.from_partial(state, recent=recent)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        log.warning("model_checkpoint_unusable", checkpoint=name, error=str(exc),
                    hint="rebuilding the summaries from the committed reports")
        return None
    model.discard_updates()
    return model
