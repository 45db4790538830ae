"""Errors a user can fix. The CLI prints their message (no traceback) and exits non-zero."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MptrainError(Exception):
    """Base class: the message alone must tell the user what is wrong and how to fix it;
    `run_dir`: the run folder it concerns, where one is known (`--json` gives it)."""

    exit_code = 1

    def __init__(self, message: str = "", run_dir=None):
        super().__init__(message)
        self.run_dir = run_dir


class ConfigError(MptrainError):
    """The experiment file or a command-line option is invalid."""

    exit_code = 2


class DataError(MptrainError):
    """A dataset cannot be found or read."""

    exit_code = 2


class WorkerLost(MptrainError):
    """Another worker of a multi-worker run died or stopped: TensorFlow's collectives cannot
    continue without it ("Restart your program to reset"), so every worker stops and all
    restart from the last checkpoint. Its own exit code tells a scheduler (or `run --workers`)
    that the run can be restarted, like the restart code TensorFlow's PreemptionCheckpointHandler
    exits with (`TerminationConfig.exit_fn`)."""

    exit_code = 4


class AlreadyFinished(MptrainError):
    """The run folder to resume holds a finished run: there is nothing to do (the command line
    says so and exits 0); the message says how to train it further."""

    exit_code = 0


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a run started from Python, after its checkpoint and summary
    were saved. A `KeyboardInterrupt`, so a script stops as on any Ctrl-C; a sweep that wants
    to go on catches it: `summary` is the run's (status `interrupted`), `run_dir` the folder
    `mptrain.run(experiment, resume=run_dir)` continues."""

    def __init__(self, summary):
        super().__init__(f"{summary.stop_reason}; its checkpoint is saved: continue it with "
                         f"mptrain.run(experiment, resume={summary.run_dir!r})")
        self.summary = summary

    @property
    def run_dir(self):
        from pathlib import Path

        return Path(self.summary.run_dir)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean train?)' for the closest choice, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""

