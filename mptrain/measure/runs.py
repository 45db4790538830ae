"""`mptrain runs`: the run folders in a folder, the state each is in, and any of them side by
side.

A run folder holds config.yaml and summary.json; compare and plan keep their runs one level
down (compare-*/, plan-*/). A folder's state is what `RunFolder.state()` reads: a summary
(finished, interrupted, diverged) or a `RunState` (running, failed, abandoned). A folder
still `running` whose process is gone from this host was killed (SIGKILL, a power cut);
killed, interrupted and failed runs with a checkpoint are resumable (`mptrain run --resume`).

`compare_runs` puts chosen runs side by side with compare's rows and verdicts
(`compare.compare_row`), even when no one compare made them.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from mptrain.errors import ConfigError
from mptrain.measure.compare import CompareRecord, CompareRow, Variant, compare_row, resumable
from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import RunState, RunSummary

DEFAULT_FOLDER = Path("runs")
NESTED = ("compare-", "plan-")  # folders whose runs are listed too

RunStatus = Literal["finished", "interrupted", "diverged", "failed", "running", "killed"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunRow(_Record):
    """One run folder, as `mptrain runs` lists it."""

    name: str  # the folder, relative to the folder listed
    path: str
    status: RunStatus
    resumable: bool  # `mptrain run --resume PATH` continues it
    reason: str | None = None  # why it stopped or failed
    policy: str | None = None  # what ran (a run without a summary: what its config asked)
    loop: str | None = None
    epochs: int | None = None  # epochs run
    median_step_ms: float | None = None
    test_accuracy: float | None = None
    when: str  # when summary.json last changed: the run's start, or its end


class RunsReport(_Record):
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
    """Every run folder in `folder` (a folder that is not one of ours is left out), newest
    first."""
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder; give the folder your runs are in (an "
                          "experiment's output.dir, by default runs)")
    rows = [row for path in run_folders(folder) if (row := run_row(path, folder)) is not None]
    return RunsReport(folder=str(folder), runs=sorted(rows, key=lambda r: r.when, reverse=True))


def run_row(path: Path, root: Path) -> RunRow | None:
    run = RunFolder(path)
    state = run.state()
    if state is None:
        return None
    when = datetime.fromtimestamp((path / "summary.json").stat().st_mtime).isoformat(timespec="seconds")
    name = str(path.relative_to(root))
    if isinstance(state, RunSummary):
        times = state.step_time
        return RunRow(name=name, path=str(path), status=state.status,
                      resumable=state.status == "interrupted" and resumable(path),
                      reason=state.stop_reason, policy=state.policy, loop=state.loop,
                      epochs=state.epochs_run, median_step_ms=times.median_ms if times else None,
                      test_accuracy=state.test_accuracy, when=when)
    status = run_state_status(state)
    config = _config(path)
    return RunRow(name=name, path=str(path), status=status,
                  resumable=status != "running" and resumable(path),
                  reason=state.reason if status != "killed" else
                  f"process {state.pid} on {state.host} is gone",
                  policy=config.policy if config else None,
                  loop=config.train.loop if config else None,
                  epochs=len(run.read_epochs()), when=when)


def run_state_status(state: RunState) -> RunStatus:
    """`running` is only true while its process lives; on another host we cannot check."""
    from mptrain.runs.resume import alive

    if state.status != "running":
        return state.status
    return "running" if alive(state) or state.host != socket.gethostname() else "killed"


def _config(path: Path):
    from mptrain.config import validate
    from mptrain.config.loading import read_yaml

    try:
        return validate(read_yaml(path / "config.yaml"), str(path / "config.yaml"))
    except Exception:  # a config this version cannot read: the row says less, nothing more
        return None


# --- side by side ------------------------------------------------------------------------


@dataclass(frozen=True)
class _NamedRun(Variant):
    """A run chosen by name: its row is labelled with the name, not policy-loop (two runs
    may share both)."""

    name: str = ""

    @property
    def label(self) -> str:
        return self.name


def find_run(ref: str, folder: Path) -> Path:
    """RUN as a path, or a folder name inside `folder`."""
    for path in (Path(ref), folder / ref):
        if is_run_folder(path):
            return path
    raise ConfigError(f"{ref}: not a run folder (looked for config.yaml and summary.json in "
                      f"{Path(ref).resolve()} and {(folder / ref).resolve()}); `mptrain runs "
                      f"{folder}` lists the runs there")


def split_arguments(arguments: list[str]) -> tuple[Path, list[str]]:
    """`[DIR] [RUN...]`: DIR is the first argument when it is a folder but not a run, else
    the default folder."""
    if arguments and Path(arguments[0]).is_dir() and not is_run_folder(Path(arguments[0])):
        return Path(arguments[0]), arguments[1:]
    return DEFAULT_FOLDER, arguments


def compare_runs(refs: list[str], folder: Path = DEFAULT_FOLDER) -> CompareRecord:
    """The runs named, side by side with compare's rows and verdicts. The baseline is the
    first float32 run named, else the first run; a run without a summary is a row saying so."""
    if len(refs) < 2:
        raise ConfigError("--compare: name at least two runs (folder names in "
                          f"{folder}, or paths)")
    paths = [find_run(ref, folder) for ref in refs]
    if len(set(p.resolve() for p in paths)) < len(paths):
        raise ConfigError("--compare: a run is named twice")
    states = [RunFolder(p).state() for p in paths]
    summaries = [s for s in states if isinstance(s, RunSummary)]
    if not summaries:
        raise ConfigError("--compare: none of these runs has a summary (each stopped before it "
                          "ended: resume them first)")
    base = next((s for s in summaries if s.policy == "float32"), summaries[0])
    rows = []
    for path, state in zip(paths, states, strict=True):
        name = _name(path, folder)
        if isinstance(state, RunSummary):
            variant = _NamedRun(state.policy, state.loop, name=name)
            rows.append(compare_row(variant, state, base, state is base, str(path)))
        else:
            status, config = run_state_status(state), _config(path)
            rows.append(CompareRow(variant=name, policy=config.policy if config else "?",
                                   loop=config.train.loop if config else "?", run_dir=str(path),
                                   summary=None, failed=f"no summary ({status})",
                                   verdict=f"no summary: {status}"))
    experiments = ", ".join(dict.fromkeys(s.name for s in summaries))
    return CompareRecord(experiment=experiments, folder=str(folder), baseline_policy=base.policy,
                         variants=rows)


def _name(path: Path, folder: Path) -> str:
    try:
        return str(path.resolve().relative_to(folder.resolve()))
    except ValueError:
        return path.name

