"""The module mptrain's own child processes run: `python -m mptrain.commands.child SPEC`.

SPEC is a `runs.child.ChildSpec` as JSON, written by the parent (compare's and plan's
engine, `run --workers`). The child trains as `mptrain run` does, with its live progress on
stderr, writes its summary to the spec's file, and exits with the code `run` would: the
parent reads the file, and a user's `mptrain run` keeps only the user's options.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import typer

from mptrain.commands.options import STARTED_AT, leave, user_errors


def run_child(spec_json: str) -> int:
    """Run the child's spec; the process's exit code."""
    from mptrain.errors import MptrainError, WorkerLost
    from mptrain.record import write_atomic
    from mptrain.report.progress import ConsoleTelling, LiveProgress
    from mptrain.runs.child import ChildError, ChildSpec
    from mptrain.runs.launch import RunOptions, launch

    spec = ChildSpec.model_validate_json(spec_json)
    options = RunOptions(spec.overrides, verbose=spec.verbose, supervised=spec.supervised,
                         start=spec.start(STARTED_AT))
    try:
        # a local worker's error is said once, by `run --workers`: a lost peer, and the
        # chief's own error, which it relays in its summary file
        with (user_errors("interrupted (the run folder, if made, keeps its last checkpoint)",
                          spec.verbose, unsaid=spec.supervised),
              LiveProgress() as progress):
            try:
                result = launch(spec.experiment, options, ConsoleTelling(), listeners=[progress])
            except MptrainError as exc:
                if spec.supervised and spec.summary_file is not None and not isinstance(exc, WorkerLost):
                    relayed = ChildError(error=type(exc).__name__, message=str(exc))
                    write_atomic(Path(spec.summary_file), relayed.model_dump_json())
                raise
    except typer.Exit as stopped:
        return stopped.exit_code
    # trained: a signal now (a scheduler's SIGTERM to every task, later here than elsewhere)
    # has nothing left to stop, and must not cut the summary its parent reads
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if spec.summary_file is not None:
        write_atomic(Path(spec.summary_file), result.summary.model_dump_json())
    return result.code


if __name__ == "__main__":
    try:
        code = run_child(sys.argv[1])
    except SystemExit as done:
        code = done.code
    leave(code)
