"""Chosen runs side by side (`mptrain runs --compare`), judged as compare judges its variants
(`compare.judge_compare`), even when no one compare made them. Runs from one compare folder are
judged on the rounds they ran in turns there, and with what that compare measured beside them
(its input pipeline's time, why they ran in pairs), so `runs --compare` says what that compare
said; runs made at different times are compared on their own medians (and not on their
losses: they need not have started from the same weights), and their folders hold no input
pipeline's time to call a step input-bound by."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

from mptrain.errors import ConfigError
from mptrain.measure.compare import CompareRecord, judge_compare
from mptrain.measure.variant import Variant
from mptrain.precision.candidates import Candidate, candidate, candidate_name
from mptrain.runs.folder import DEFAULT_FOLDER, RunFolder, is_run_folder, run_config, run_state_status
from mptrain.runs.summary import RunSummary


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
    """The runs named, side by side, judged as compare judges, each by the candidate it ran
    (`float32+graph_bf16` is bfloat16 math, not float32). The baseline is the first plain
    float32 run named, else the first run; a run without a summary is a row saying so."""
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
    base = next((s for s in summaries if _candidate(s.candidate, s.policy).name == "float32"),
                summaries[0])
    made_by = {p.resolve().parent for p in paths}
    compare = _compare_record(next(iter(made_by))) if len(made_by) == 1 else None
    rows = [_row(path, state, folder, compare) for path, state in zip(paths, states, strict=True)]
    base_row = rows[states.index(base)]
    experiments = ", ".join(dict.fromkeys(s.name for s in summaries))
    # what the compare that made them measured beside its runs: how they took turns, the input
    # pipeline's own time (input-bound verdicts), why they ran in pairs
    measured = compare.model_dump(include={"turn_steps", "input_ms_per_batch", "pairs"}) if compare else {}
    record = CompareRecord(experiment=experiments, folder=str(folder), baseline=base_row.label,
                           baseline_policy=base_row.candidate.name, variants=rows, **measured)
    return judge_compare(record, same_start=compare is not None)


def _compare_record(folder: Path) -> CompareRecord | None:
    """The compare that made the runs in `folder`, when it is a compare folder."""
    with suppress(ConfigError):
        return CompareRecord.load(folder)
    return None


def _row(path: Path, state, folder: Path, compare: CompareRecord | None) -> Variant:
    """A run as a compare row, with its rounds in turns when its compare kept them."""
    name = _name(path, folder)
    made = next((r for r in compare.variants if r.run_dir and Path(r.run_dir).resolve()
                 == path.resolve()), None) if compare else None
    turns = {"rounds": made.rounds, "baseline_rounds": made.baseline_rounds,
             "session": made.session} if made else {}
    if isinstance(state, RunSummary):
        return Variant(label=name, run_dir=str(path), summary=state, loop=state.loop,
                       candidate=_candidate(state.candidate, state.policy), **turns)
    config = run_config(path)
    return Variant(label=name, run_dir=str(path),
                   candidate=_candidate(candidate_name(config), config.policy) if config else
                   Candidate(name="?", policy="?"),
                   loop=config.train.loop if config else "?",
                   failed=f"no summary ({run_state_status(state)})")


def _candidate(name: str | None, policy: str) -> Candidate:
    """The candidate a run ran, by the name its summary gives (a summary before 2026-12-03
    names none: its policy); a name no longer known, as it was written."""
    with suppress(ConfigError):
        return candidate(name or policy)
    return Candidate(name=name or policy, policy=policy)


def _name(path: Path, folder: Path) -> str:
    try:
        return str(path.resolve().relative_to(folder.resolve()))
    except ValueError:
        return path.name

