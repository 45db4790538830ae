"""mptrain from Python: the functions the command line calls, for notebooks and sweeps, each
making the same library call as its command and returning the typed result the CLI renders
(docs/python-api.md: what each does, its errors, and examples)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mptrain.config import ExperimentConfig, load_config, validate
from mptrain.config.loading import apply_overrides, parsed_changes, resolve_paths, variant  # noqa: F401
from mptrain.errors import RunInterrupted, WorkerLost
from mptrain.telling import LOGGED

if TYPE_CHECKING:
    from mptrain.measure.compare import CompareRecord
    from mptrain.measure.plan import PlanRecord
    from mptrain.precision.check import CheckReport
    from mptrain.runs.summary import RunSummary

Overrides = Mapping[str, Any] | list[str] | None  # {"train.epochs": 1}, or --set strings


def load_experiment(source: str | Path | Mapping[str, Any], overrides: Overrides = None, *,
                    builder: Callable | None = None) -> ExperimentConfig:
    """The typed, validated experiment from a file, a built-in's name or a mapping, with
    `overrides` applied as `--set` applies them ({"train.epochs": 1}, or `--set` strings).
    `builder`: your own model as a Python function returning a `keras.Model` (model.kind
    python), called with the arguments it declares of `input_shape`, `num_classes` and
    `model.kwargs`, so a notebook needs no builder file; such an experiment runs in this
    process only (`run`, not `compare` or `plan`)."""
    from mptrain.model.in_process import register

    sets = overrides or []
    if builder is not None:
        given = {".".join(keys): value for keys, value, _ in parsed_changes(overrides)}
        sets = {"model.kind": "python", "model.builder": register(builder), **given}
    if isinstance(source, Mapping):
        raw = apply_overrides(dict(source), sets)
        raw.setdefault("name", "experiment")
        return resolve_paths(validate(raw, "<mapping>", sets), Path.cwd())  # as --set paths are
    return load_config(source, sets)


def run(experiment: ExperimentConfig, *, resume: str | Path | None = None, workers: int | None = None,
        max_restarts: int = 0, progress: bool = True, verbose: bool = False) -> RunSummary:
    """Train and evaluate one experiment, as `mptrain run`, through the same library call
    (`runs.launch.launch`) and so with the same checks; its run folder is written as the
    CLI writes it. `resume`: a run folder to continue from its last checkpoint; the experiment
    given must be that run's (only train.epochs, train.max_steps, train.max_step_seconds and
    distribute.workers may differ), else a `ConfigError` names what differs and the folder is
    left as it was. A finished run raises `AlreadyFinished` (an `MptrainError`).

    Ctrl-C (or SIGTERM) stops training after its current step, saves a checkpoint and the
    run's summary, then raises `RunInterrupted` (a `KeyboardInterrupt`, so a script stops as
    it would on Ctrl-C), which carries that summary and the run folder to resume.

    `workers` (or the experiment's `distribute.workers`): train on that many local worker
    processes, as `--workers`, restarting them all up to `max_restarts` times when one is lost;
    the chief's summary is returned, and a lost worker raises `WorkerLost` with the line the
    command would print (the chief's own error, such as a missing data file, is raised as a
    run in this process would raise it). Several hosts are the command's alone (`mptrain run --hosts`): each
    is a process of its own, and TensorFlow's collectives must be set up before anything in
    that process touches TensorFlow."""
    from mptrain.runs.launch import RunOptions, launch
    from mptrain.runs.runner import Start

    options = RunOptions(workers=workers, max_restarts=max_restarts, verbose=verbose,
                         start=Start(resume=_path(resume or None)))
    with _live(progress) as (telling, listeners):
        result = launch(experiment, options, telling, listeners)
    summary = result.summary  # a run's, or the chief's of local workers
    if result.message is not None or isinstance(summary, str):
        raise WorkerLost(result.message or f"the local workers ended without a summary ({summary})")
    if summary.status == "interrupted":
        raise RunInterrupted(summary)
    return summary


def compare(experiment: ExperimentConfig | None = None, policies: list[str] | None = None, *,
            resume: str | Path | None = None, progress: bool = True, verbose: bool = False,
            **settings: Any) -> CompareRecord:
    """The experiment under several policies (as `--policies`: a policy, or any candidate
    name plan prints), in turns, as `mptrain compare`, through the same library call:
    default policies float32 and what `policy: auto` picks here; default experiment the guide's.
    `settings` are the command's options, `CompareSettings`' fields: `loops`, `strategies`,
    `batch_sizes`, `epochs`, `steps`, `max_step_seconds` (default 60; None: never). `resume`: finish the
    compare in that folder."""
    import mptrain.measure.compare
    from mptrain.report.console import as_text
    from mptrain.report.tables import compare_tables

    settings = mptrain.measure.compare.CompareSettings(policies=policies, **settings)
    with _live(progress) as (telling, _):
        result = mptrain.measure.compare.run_compare(experiment, settings, resume=_path(resume),
                                                 telling=telling, verbose=verbose,
                                                 as_text=as_text(compare_tables))
    return result.record


def plan(experiment: ExperimentConfig | None = None, *, resume: str | Path | None = None,
         progress: bool = True, verbose: bool = False, **settings: Any) -> PlanRecord:
    """The fastest safe precision for the experiment on this machine, as `mptrain plan`,
    through the same library call. `settings` are `PlanSettings`' fields, as the CLI's
    options: `candidates` (names to try), `batch_sizes`, `steps`, `tolerance_pct`, `budget_minutes`,
    `evaluate`, `race` (False: every trial to its end), and `out`: where to write the runnable
    plan (default, as the command's:
    EXPERIMENT.plan.yaml beside the experiment's file). `resume`: finish the plan in that
    folder."""
    import mptrain.measure.plan
    from mptrain.report.console import as_text
    from mptrain.report.tables import plan_tables

    with _live(progress) as (telling, _):
        result = mptrain.measure.plan.run_plan(experiment, mptrain.measure.plan.PlanSettings(**settings),
                                           resume=_path(resume), telling=telling, verbose=verbose,
                                           as_text=as_text(plan_tables))
    return result.record


def check_machine(*, bench: bool = False, verbose: bool = False) -> CheckReport:
    """This machine's accelerators and CPU, and the policy that will be fast here (measured),
    as `mptrain check-gpu`."""
    import mptrain.precision.check

    return mptrain.precision.check.machine_report(bench=bench, verbose=verbose)


@contextlib.contextmanager
def _live(progress: bool):
    """What a call says as it goes, and its live training progress: on stderr as in a
    terminal, or nothing (`progress=False`)."""
    if not progress:
        yield LOGGED, []
        return
    from mptrain.report.progress import ConsoleTelling, LiveProgress

    with LiveProgress() as live:
        yield ConsoleTelling(), [live]


def _path(value: str | Path | None) -> Path | None:
    return Path(value) if value is not None else None
