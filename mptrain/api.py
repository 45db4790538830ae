"""mptrain from Python: the functions the command line calls, for notebooks and sweeps.

```python
import mptrain

experiment = mptrain.load_experiment("synthetic", {"train.epochs": 1})
for rate in (1e-3, 3e-3, 1e-2):
    point = mptrain.variant(experiment, {"train.optimizer.kwargs.learning_rate": rate})
    summary = mptrain.run(point)
    print(rate, summary.test_accuracy, summary.run_dir)
```

Each returns the typed result the CLI renders (`RunSummary`, `CompareRecord`, `PlanRecord`,
`CheckReport`); bad input raises mptrain's own errors (`mptrain.ConfigError`,
`mptrain.DataError`, ...) with the messages the CLI prints; nothing exits the interpreter.
Progress shows as it does in a terminal (Rich renders in notebooks too); `progress=False`
turns it off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mptrain.config import ExperimentConfig, load_config, validate
from mptrain.config.loading import apply_overrides, parsed_changes, resolve_paths
from mptrain.config.loading import variant as config_variant

if TYPE_CHECKING:
    from mptrain.measure.compare import CompareRecord
    from mptrain.measure.plan import PlanRecord
    from mptrain.precision.check import CheckReport
    from mptrain.runs.summary import RunSummary

Overrides = Mapping[str, Any] | list[str] | None  # {"train.epochs": 1}, or --set strings


def load_experiment(source: str | Path | Mapping[str, Any], overrides: Overrides = None, *,
                    builder: Callable | None = None) -> ExperimentConfig:
    """The typed, validated experiment from a file, a built-in's name or a mapping, with
    `overrides` applied as `--set` applies them ({"train.epochs": 1}, or `--set` strings). `builder`: your own
    model as a Python function `builder(input_shape, num_classes, **kwargs) -> keras.Model`
    (model.kind python), so a notebook needs no builder file; such an experiment runs in this
    process only (`run`, not `compare` or `plan`)."""
    from mptrain.model.in_process import register

    sets = {".".join(keys): value for keys, value, _ in parsed_changes(overrides)}
    if builder is not None:
        sets = {"model.kind": "python", "model.builder": register(builder), **sets}
    if isinstance(source, Mapping):
        raw = apply_overrides(dict(source), sets)
        raw.setdefault("name", "experiment")
        return resolve_paths(validate(raw, "<mapping>", sets), Path.cwd())  # as --set paths are
    return load_config(source, sets)


def variant(experiment: ExperimentConfig, overrides: Overrides) -> ExperimentConfig:
    """A new validated experiment: this one with `overrides` ({"train.batch_size": 256}), as
    `--set` would give them; the original is unchanged."""
    return config_variant(experiment, overrides or {})


def run(experiment: ExperimentConfig, *, resume: str | Path | None = None, progress: bool = True,
        verbose: bool = False) -> RunSummary:
    """Train and evaluate one experiment, as `mptrain run`; its run folder is written as the
    CLI writes it. `resume`: a run folder to continue from its last checkpoint."""
    import contextlib

    from mptrain.report.progress import LiveProgress
    from mptrain.runs.runner import Start, run_experiment

    with LiveProgress() if progress else contextlib.nullcontext() as live:
        result = run_experiment(experiment, Start(resume=Path(resume) if resume else None),
                                listeners=[live] if live is not None else [], verbose=verbose)
    return result.summary


def compare(experiment: ExperimentConfig, candidates: list[str] | None = None, *,
            loops: list[str] | None = None, progress: bool = True,
            verbose: bool = False) -> CompareRecord:
    """The experiment under several precision candidates (policies, or any name plan
    prints), in turns, as `mptrain compare`; default: float32 and what `policy: auto` picks
    here."""
    from mptrain.measure.compare import default_policies, plan_variants, run_compare

    chosen = candidates or default_policies(experiment, verbose)
    from mptrain.report.progress import print_turn

    on_turn = print_turn if progress else None
    return run_compare(experiment, plan_variants(experiment, chosen, loops), verbose=verbose,
                       on_turn=on_turn).record


def plan(experiment: ExperimentConfig, *, progress: bool = True, verbose: bool = False,
         **settings: Any) -> PlanRecord:
    """The fastest safe precision for the experiment on this machine, as `mptrain plan`.
    `settings` are `PlanSettings`' fields, as the CLI's options: `candidates` (names to
    try), `steps`, `tolerance_pct`, `budget_minutes`, `evaluate`, and `out`: where to write
    the runnable plan (default: none from Python)."""
    from mptrain.measure.plan import PlanSettings, run_plan, start_plan
    from mptrain.report.progress import print_turn

    if settings.get("out") is not None:
        settings["out"] = Path(settings["out"]).resolve()
    record, folder = start_plan(experiment, PlanSettings(**settings), verbose=verbose)
    return run_plan(record, folder, verbose=verbose,
                    on_turn=print_turn if progress else None).record


def check_machine(*, bench: bool = False, verbose: bool = False) -> CheckReport:
    """This machine's accelerators and CPU, and the policy that will be fast here (measured),
    as `mptrain check-gpu`."""
    from mptrain.precision.check import check_machine as check

    return check(bench=bench, verbose=verbose)

