"""What a parent tells one of mptrain's own child processes, and what it reads back.

compare's and plan's variants and `run --workers`' workers each train in a process of their
own (why: `runs/workers.py`). The parent writes a `ChildSpec` and starts the module the
child runs (`commands/child.py`) with it; the child trains as `mptrain run` would and writes
its summary to the spec's `summary_file`, which the parent reads (`read_summary`). So the
user's `mptrain run` has only the user's options, nothing a child prints is parsed (a model
that prints cannot break a compare), and a stale summary.json in a resumed run's folder is
never taken for the child's: the parent removes the summary file before the child starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

import mptrain.errors
from mptrain.record import Record
from mptrain.runs.runner import Start
from mptrain.runs.summary import RunSummary
from mptrain.training.turns import TurnLink


class ChildSpec(Record):
    """One child's run."""

    experiment: str | None = None  # an experiment file or built-in's name; None: the resumed run's own
    overrides: list[str] = []  # --set changes (a local worker's: the user's, and --workers')
    run_dir: str  # the run's folder: made there, or with `resume` continued from its checkpoint
    resume: bool = False
    initial_weights: str | None = None  # an .npz every variant of a compare or plan starts from
    summary_file: str | None = None  # where the child writes its summary as it ends (None: nowhere)
    supervised: bool = False  # one of `run --workers N`'s workers: a lost peer is said by the parent
    turn_steps: int | None = None  # in turns with others (`training.turns`): steps a turn,
    report_fd: int | None = None  # and the pipe its turn reports go to
    verbose: bool = False

    def command(self) -> list[str]:
        """The child's command line: this interpreter, the child's module, this spec."""
        return [sys.executable, "-m", "mptrain.commands.child", self.model_dump_json()]

    def start(self, started_at: float) -> Start:
        """Where and from what the child's run starts (`started_at`: its process's start)."""
        run_dir = Path(self.run_dir)
        turns = (TurnLink(self.turn_steps, self.report_fd)
                 if self.turn_steps is not None and self.report_fd is not None else None)
        return Start(resume=run_dir if self.resume else None,
                     run_dir=None if self.resume else run_dir,
                     initial_weights=Path(self.initial_weights) if self.initial_weights else None,
                     started_at=started_at, turns=turns)

    def clear(self) -> None:
        """Remove what a child of this spec wrote before: the summary read back is this one's."""
        if self.summary_file is not None:
            Path(self.summary_file).unlink(missing_ok=True)


class ChildError(Record):
    """What a local worker's chief writes instead of its summary when it stops on an error a
    user can fix: `run --workers` raises it again, so it is said once, by the command, and
    `mptrain.run` raises it as a run in one process would (not as a lost worker)."""

    error: str  # its class's name in `mptrain.errors`
    message: str

    def again(self) -> mptrain.errors.MptrainError:
        return getattr(mptrain.errors, self.error, mptrain.errors.MptrainError)(self.message)


WRITTEN = TypeAdapter(RunSummary | ChildError)  # what a child leaves in its summary file


def read_summary(spec: ChildSpec, code: int) -> RunSummary | str:
    """The summary the child wrote, or why there is none; an error it wrote instead
    (`ChildError`) is raised."""
    why = f"exit code {code}" if code else "wrote no run summary"
    if spec.summary_file is None:
        return why
    try:
        written = WRITTEN.validate_json(Path(spec.summary_file).read_text())
    except (OSError, ValidationError):
        return why
    if isinstance(written, ChildError):
        raise written.again()
    return written
