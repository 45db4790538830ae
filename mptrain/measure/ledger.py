"""A compare's or plan's folder and record: what the measuring engine (`engine.py`) runs
variants from, and what a `--resume` continues.

OUTPUT_DIR/KIND-NAME-TIMESTAMP/ holds the experiment as prepared and the initial weights every
variant starts from (`study.stage`), the record rewritten whole as things end (`Ledger`,
KIND.json; `load_record` for `--resume`), and with `output.mlflow` one MLflow parent run each
variant's run is nested in. Which rows a compare or plan still has to run is decided here too
(`to_run`), one way for both, new or resumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mptrain.errors import ConfigError
from mptrain.record import to_json, write_atomic
from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import RunSummary

if TYPE_CHECKING:
    from mptrain.measure.variant import Variant
    from mptrain.record import Record

@dataclass(frozen=True)
class Measurement:
    """What a compare or plan returns."""

    record: Record
    folder: Path
    signal: int | None = None  # the signal that interrupted it
    notes: list[str] = field(default_factory=list)  # what MLflow tracking could not log


class Ledger:
    """A compare's or plan's record (KIND.json, rewritten whole as things end) and, with
    `output.mlflow`, its MLflow parent run: `env` nests each variant's run in it. `staged`:
    the experiment file in the folder that every row runs with its own settings (a plan's
    rows run its trial-length `trial.yaml`)."""

    def __init__(self, folder: Path, kind: str, params: dict[str, str],
                 staged: str = "experiment.yaml"):
        from mptrain.runs.tracking import start_parent

        self.folder, self.kind, self.staged = folder, kind, staged
        self.tracking = start_parent(folder, kind, params)  # a `Connection`, or None (off)

    @property
    def env(self) -> dict[str, str]:
        return self.tracking.env if self.tracking else {}

    def write(self, record: Record) -> None:
        write_record(self.folder, self.kind, record)

    def close(self, record, plot: Callable | None, texts: dict[str, str], signal: int | None,
              tags: dict[str, str] | None = None) -> Measurement:
        """The picture (KIND.png, when `plot` is given), the record, and the parent run
        ended with both (with the record's status); what the compare or plan returns, with
        what MLflow could not log."""
        picture = self.folder / f"{self.kind}.png"
        if plot is not None:
            record.plot = str(picture)
            plot(record, picture)
        self.write(record)
        notes = []
        if self.tracking is not None:
            self.tracking.finish(record.status, [self.folder / f"{self.kind}.json", picture], texts,
                                 tags)
            notes = self.tracking.notes
        return Measurement(record, self.folder, signal, notes)


def write_record(folder: Path, kind: str, record: Record) -> None:
    """KIND.json, whole or not at all (a reader never sees half a record)."""
    write_atomic(folder / f"{kind}.json", to_json(record.model_dump(), indent=2) + "\n")


def load_record(folder: Path, kind: str, record_type: type[Record]):
    """The record a `--resume` continues, or an error naming the folder."""
    try:
        return record_type.model_validate_json((folder / f"{kind}.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume {folder}: not a {kind} folder ({exc})") from None


def steps_of(row: Variant | None) -> list:
    """The step records of the run a row measured; none when it has not run."""
    if row is None or row.summary is None or row.run_dir is None:
        return []
    return RunFolder(Path(row.run_dir)).read_steps()


def to_run(rows: list[Variant]) -> list[Variant]:
    """The rows a compare or plan runs now, one way for both, new or resumed: every row whose
    run has not ended (finished, or diverged), in a new session of turns; a run stopped with
    a checkpoint continues from it (`command_for`), one never started starts. Rounds pair only
    within a session, so a row resumed after its baseline ended is judged on the two runs'
    medians (`verdicts.speed`)."""
    session = max((r.session for r in rows if r.summary is not None or r.failed is not None),
                  default=0) + 1
    return [row.model_copy(update={"session": session}) for row in rows if not _ended(row)]


def _ended(row: Variant) -> bool:
    state = RunFolder(Path(row.run_dir)).state() if row.run_dir else None
    return isinstance(state, RunSummary) and state.status in ("finished", "diverged")
