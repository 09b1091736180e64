"""The efficiency model's checkpoint beside a job's journal: written with every commit, read at
restart, so that recovery is O(1) in the job's size and never re-reads an export.
"""

from __future__ import annotations

import hashlib

import msgspec

from prvstream.daemon.live.journal import JobJournal
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.efficiency.partial import decode_partial, encode_partial
from prvstream.sinks.errors import StateDirUnusable
from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger

__all__ = ["commit_with_checkpoint", "restore_checkpoint"]

log = get_logger(__name__)


def commit_with_checkpoint(journal: JobJournal, model: EfficiencyModel) -> None:
    """Write the model's state to a new file named by its content, commit the journal naming
    it, then drop older checkpoints: a crash at any point leaves the journal naming a whole
    checkpoint of exactly its reports."""
    data = encode_partial(model.partial())
    name = f"{journal.path.stem}.model.{hashlib.sha256(data).hexdigest()[:20]}"
    folder = journal.path.parent
    if name != journal.state.model_checkpoint:
        try:
            atomic_write(folder / name, data)
        except OSError as exc:
            raise StateDirUnusable(
                f"cannot write the model checkpoint in {folder} ({exc.strerror or exc}); "
                "free space or fix the permissions of --state, then restart") from exc
    journal.state.model_checkpoint = name
    journal.commit()
    for old in folder.glob(f"{journal.path.stem}.model.*"):
        if old.name != name:
            old.unlink(missing_ok=True)


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
