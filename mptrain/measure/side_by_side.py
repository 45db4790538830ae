"""Chosen runs side by side (`mptrain runs --compare`), with compare's rows and verdicts
(`compare.compare_row`), even when no one compare made them: runs made at different times,
so each speed-up comes from the two runs' own medians, not from rounds run in turns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mptrain.errors import ConfigError
from mptrain.measure.compare import CompareRecord, CompareRow, Variant, compare_row
from mptrain.runs.folder import RunFolder
from mptrain.runs.listing import DEFAULT_FOLDER, is_run_folder, run_config, run_state_status
from mptrain.runs.summary import RunSummary


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
            status, config = run_state_status(state), run_config(path)
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

