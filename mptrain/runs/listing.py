"""The run folders in a folder, and the state each is in (`mptrain runs`).

A run folder holds config.yaml and summary.json; compare and plan keep their runs one level
down (compare-*/, plan-*/). A folder's state is what `RunFolder.state()` reads: a summary
(finished, interrupted, diverged) or a `RunState` (running, failed, abandoned). A folder
still `running` whose process is gone from this host was killed (SIGKILL, a power cut);
killed, interrupted and failed runs with a checkpoint are resumable (`mptrain run --resume`).

Putting chosen runs side by side is `measure.side_by_side`.
"""

from __future__ import annotations

import socket
from datetime import datetime
from pathlib import Path
from typing import Literal

from mptrain.errors import ConfigError, DataError
from mptrain.precision.candidates import candidate_name
from mptrain.record import Record
from mptrain.runs.folder import RunFolder, resumable
from mptrain.runs.summary import RunState, RunSummary

DEFAULT_FOLDER = Path("runs")
NESTED = ("compare-", "plan-")  # folders whose runs are listed too

RunStatus = Literal["finished", "interrupted", "diverged", "failed", "running", "killed"]


class RunRow(Record):
    """One run folder, as `mptrain runs` lists it."""

    name: str  # the folder, relative to the folder listed
    path: str
    status: RunStatus
    resumable: bool  # `mptrain run --resume PATH` continues it
    reason: str | None = None  # why it stopped or failed
    policy: str | None = None  # what ran (a run without a summary: what its config asked)
    candidate: str | None = None  # the precision candidate, as plan and compare name it
    loop: str | None = None
    epochs: int | None = None  # epochs run
    median_step_ms: float | None = None
    test_quality: str | None = None  # its objective's test figure, named: "accuracy 0.9123", "MAE 2.41"
    when: str  # when summary.json last changed: the run's start, or its end


class RunsReport(Record):
    folder: str
    runs: list[RunRow]  # newest first


def is_run_folder(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "summary.json").is_file()


def run_folders(folder: Path) -> list[Path]:
    """The run folders in `folder`, and in its compare and plan folders."""
    found = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if is_run_folder(child):
            found.append(child)
        elif child.name.startswith(NESTED):
            found += sorted(p for p in child.iterdir() if p.is_dir() and is_run_folder(p))
    return found


def list_runs(folder: Path = DEFAULT_FOLDER) -> RunsReport:
    """Every run folder in `folder` (one whose summary.json is damaged too, said so), newest
    first."""
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder; give the folder your runs are in (an "
                          "experiment's output.dir, by default runs)")
    rows = [run_row(path, folder) for path in run_folders(folder)]
    return RunsReport(folder=str(folder), runs=sorted(rows, key=lambda r: r.when, reverse=True))


def run_row(path: Path, root: Path) -> RunRow:
    run = RunFolder(path)
    state = run.state()
    mtime = (path / "summary.json").stat().st_mtime
    where = dict(name=str(path.relative_to(root)), path=str(path),
                 when=datetime.fromtimestamp(mtime).isoformat(timespec="seconds"))
    if state is None:  # its summary.json does not read: listed as such, not left out
        return RunRow(**where, status="failed",
                      resumable=any((path / "checkpoints").glob("ckpt-*.index")),
                      reason="summary.json cannot be read (damaged); --resume continues from "
                             "the last checkpoint", epochs=_epochs_recorded(run))
    if isinstance(state, RunSummary):
        times = state.step_time
        return RunRow(**where, status=state.status, resumable=resumable(path),
                      reason=state.stop_reason, policy=state.policy, loop=state.loop,
                      candidate=state.candidate or state.policy,
                      epochs=state.epochs_run, median_step_ms=times.median_ms if times else None,
                      test_quality=_quality(state))
    status = run_state_status(state)
    config = run_config(path)
    return RunRow(**where, status=status,
                  resumable=status != "running" and resumable(path),
                  reason=state.reason if status != "killed" else
                  f"process {state.pid} on {state.host} is gone",
                  policy=config.policy if config else None,
                  candidate=candidate_name(config) if config else None,
                  loop=config.train.loop if config else None,
                  epochs=_epochs_recorded(run))


def _epochs_recorded(run: RunFolder) -> int | None:
    """How many epochs metrics.jsonl records; None when it is damaged (`--resume` says where):
    one damaged folder does not stop the listing of the others."""
    try:
        return len(run.read_epochs())
    except DataError:
        return None


def run_state_status(state: RunState) -> RunStatus:
    """`running` is only true while its process lives; on another host we cannot check."""
    from mptrain.runs.resume import alive

    if state.status != "running":
        return state.status
    return "running" if alive(state) or state.host != socket.gethostname() else "killed"


def run_config(path: Path):
    """The run's config.yaml, validated; None when this version cannot read it."""
    from mptrain.config import validate
    from mptrain.config.loading import read_yaml

    try:
        return validate(read_yaml(path / "config.yaml"), str(path / "config.yaml"))
    except ConfigError:  # a config this version cannot read: the row says less, nothing more
        return None


def _quality(summary: RunSummary) -> str | None:
    """The figure a run's objective is judged by, with its name (an older summary: accuracy)."""
    if summary.quality is not None and summary.quality.value is not None:
        return f"{summary.quality.label} {summary.quality.value:.4g}"
    return f"accuracy {summary.test_accuracy:.4f}" if summary.test_accuracy is not None else None
