"""`mptrain compare`: one experiment under several policies (and loops), side by side.

Every variant runs in its own process (`local_workers`): Keras' global dtype policy,
TensorFlow's traced graphs, the XLA and oneDNN caches and the process peak memory are all per
process, so one variant's state cannot leak into the next or into the memory column.

All variants start from the same weights: the experiment's model is built once under float32
(the guide's `initial_weights = model.get_weights()`), saved, and loaded by every variant;
the input pipeline's order depends only on the seed, so they also see the same batches.

The folder is always resumable: compare.json names every variant and the run folder it will
have before the first one starts, and is rewritten after each, so `compare --resume` finds
what finished, continues what was stopped (a Ctrl-C, or a parent killed outright: its child
is stopped with it and keeps a checkpoint) and runs the rest.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from mptrain.config import ExperimentConfig
from mptrain.errors import ConfigError, DataError
from mptrain.local_workers import read_child_summary, resume_command, run_child, run_command
from mptrain.run_folder import RunFolder, to_json, unique_folder, write_atomic
from mptrain.signals import ForwardSignals
from mptrain.summary import RunState, RunSummary
from mptrain.verdicts import accuracy_noise_pt, difference, ratio, speedup, verdict

DEFAULT_EXPERIMENT = "mnist_mixed"  # the guide's experiment
OFFLINE_EXPERIMENTS = ("synthetic", "fashion_mnist_mixed")
NOT_RUN = "not run: the compare was interrupted (mptrain compare --resume runs it)"
WAITING = "waiting to run"


@dataclass(frozen=True)
class Variant:
    policy: str
    loop: str
    strategy: str = "none"  # distribute.strategy

    @property
    def label(self) -> str:
        base = f"{self.policy}-{self.loop}"
        return base if self.strategy == "none" else f"{base}-{self.strategy}"

    @property
    def overrides(self) -> list[str]:
        return [f"policy={self.policy}", f"train.loop={self.loop}",
                f"distribute.strategy={self.strategy}"]


def plan_variants(config: ExperimentConfig, policies: list[str], loops: list[str] | None = None,
                  strategies: list[str] | None = None) -> list[Variant]:
    return [Variant(p, loop, s) for s in (strategies or [config.distribute.strategy])
            for loop in (loops or [config.train.loop]) for p in policies]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompareRow(_Record):
    """One variant of compare.json: its run summary (null when it has none) and what it is
    worth against the baseline, computed here from the measured numbers."""

    variant: str
    policy: str
    loop: str
    strategy: str = "none"
    run_dir: str | None = None  # where its run folder is (named before it starts)
    summary: RunSummary | None
    failed: str | None = None  # why there is no summary
    speedup: float | None = None  # baseline median step time / this median
    speedup_range: tuple[float, float] | None = None  # its 95% interval (verdicts.speedup)
    memory_ratio: float | None = None  # training memory / the baseline's
    accuracy_delta_pt: float | None = None
    accuracy_noise_pt: float | None = None  # what the test set's size cannot resolve
    test_loss_delta: float | None = None
    verdict: str


class CompareRecord(_Record):
    """compare.json."""

    experiment: str
    folder: str
    status: Literal["running", "finished", "interrupted"] = "finished"
    baseline_policy: str
    variants: list[CompareRow]
    plot: str | None = None


@dataclass(frozen=True)
class CompareResult:
    record: CompareRecord
    folder: Path
    signal: int | None = None  # the signal that interrupted the compare
    notes: list[str] = field(default_factory=list)  # what MLflow tracking could not log


def preflight_notes(config: ExperimentConfig, variants: list[Variant], machine) -> dict[str, str]:
    """Variant label → why it is known to be slow on this machine, said before anything runs,
    with each variant's own number of replicas (XLA is off with several)."""
    from mptrain.distribute import replicas_for
    from mptrain.microbench import cached_kernels
    from mptrain.policy import choose_policy, speed_warning

    kernels = cached_kernels(machine)
    notes = {}
    for v in variants:
        replicas = replicas_for(v.strategy, config.distribute.devices, machine)
        choice = choose_policy(v.policy, config.train.jit_compile, machine,
                               config.train.xla_optimizer_update, replicas, kernels)
        warning = speed_warning(choice, machine, kernels)
        if warning:
            notes[v.label] = warning
    return notes


def run_compare(
    config: ExperimentConfig,
    variants: list[Variant],
    *,
    verbose: bool = False,
    on_notes: Callable[[dict[str, str]], None] | None = None,
    on_variant: Callable[[int, int, Variant], None] | None = None,
    as_text: Callable[[CompareRecord], str] | None = None,
) -> CompareResult:
    """Run every variant in a fresh process from shared initial weights; write compare.json
    and compare.png into OUTPUT_DIR/compare-<name>-<timestamp>/ and return the record.
    `as_text(record)`: the tables as text, for MLflow (with `output.mlflow`)."""
    from mptrain.experiment import prepare

    # Everything that can fail on bad input (data not found, model not buildable) happens
    # before the compare folder exists, so a failed compare leaves nothing behind.
    with tempfile.TemporaryDirectory() as scratch:
        import numpy as np

        staged = Path(scratch) / "initial_weights.npz"
        prepared = prepare(config, policy="float32", verbose=verbose)
        np.savez(staged, *prepared.model.get_weights())
        if on_notes is not None:
            on_notes(preflight_notes(config, variants, prepared.machine))
        folder = unique_folder(config.output.dir, f"compare-{config.name}")
        shutil.move(staged, folder / "initial_weights.npz")
    write_atomic(folder / "experiment.yaml", yaml.safe_dump(config.to_yaml_dict(), sort_keys=False))
    run_dirs = {v.label: folder / f"{config.name}-{v.label}" for v in variants}
    return _run_variants(config.name, folder, variants, run_dirs, {}, verbose, on_variant, as_text)


def resume_compare(folder: Path, *, verbose: bool = False,
                   on_variant: Callable[[int, int, Variant], None] | None = None,
                   as_text: Callable[[CompareRecord], str] | None = None) -> CompareResult:
    """Finish a compare that stopped: variants that finished (or diverged) stay; one that was
    stopped resumes from its checkpoint; the others run now."""
    try:
        record = CompareRecord.model_validate_json((folder / "compare.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume {folder}: not a compare folder ({exc})") from None
    variants = [Variant(row.policy, row.loop, row.strategy) for row in record.variants]
    run_dirs = {row.variant: Path(row.run_dir) if row.run_dir else
                folder / f"{record.experiment}-{row.variant}" for row in record.variants}
    done = {label: state for label, path in run_dirs.items()
            if isinstance(state := RunFolder(path).state(), RunSummary)
            and state.status in ("finished", "diverged")}
    if len(done) == len(variants):
        raise ConfigError(f"--resume {folder}: every variant has finished; nothing to resume")
    return _run_variants(record.experiment, folder, variants, run_dirs, done, verbose, on_variant,
                         as_text)


def _run_variants(name: str, folder: Path, variants: list[Variant], run_dirs: dict[str, Path],
                  done: dict[str, RunSummary], verbose: bool, on_variant, as_text) -> CompareResult:
    from mptrain.tracking import start_parent

    outcomes: dict[str, RunSummary | str] = dict(done)
    # with output.mlflow: a parent run, each variant's run nested in it
    tracking = start_parent(folder, "compare", {"variants": ",".join(v.label for v in variants)})
    env = tracking.env if tracking else {}
    _write(folder, build_record(name, folder, variants, outcomes, run_dirs, status="running"))
    with ForwardSignals() as signals:
        for index, variant in enumerate(variants, start=1):
            if variant.label in outcomes:
                continue
            if signals.received is not None:
                outcomes[variant.label] = NOT_RUN
                continue
            if on_variant:
                on_variant(index, len(variants), variant)
            outcomes[variant.label] = _run_variant(folder, name, variant, run_dirs[variant.label],
                                                   verbose, signals, env)
            _write(folder, build_record(name, folder, variants, outcomes, run_dirs, status="running"))
    status = "interrupted" if signals.received is not None else "finished"
    record = build_record(name, folder, variants, outcomes, run_dirs, status=status)
    if any(row.summary for row in record.variants):
        from mptrain.plot import plot_compare

        record.plot = str(folder / "compare.png")
        plot_compare(record, folder / "compare.png")
    _write(folder, record)
    if tracking is None:
        return CompareResult(record, folder, signals.received)
    tracking.finish(status, [folder / "compare.json", folder / "compare.png"],
                    {"compare.txt": as_text(record)} if as_text else {})
    return CompareResult(record, folder, signals.received, tracking.notes)


def _write(folder: Path, record: CompareRecord) -> None:
    write_atomic(folder / "compare.json", to_json(record.model_dump(), indent=2) + "\n")


def _run_variant(folder: Path, name: str, variant: Variant, run_dir: Path, verbose: bool,
                 signals: ForwardSignals, env: dict[str, str]) -> RunSummary | str:
    """The variant's summary (finished, diverged or interrupted), or why it has none."""
    if resumable(run_dir):
        command = resume_command(run_dir, verbose)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # started, but stopped before its first checkpoint
        command = run_command(folder / "experiment.yaml",
                              [f"name={name}-{variant.label}", *variant.overrides],
                              run_dir=run_dir, initial_weights=folder / "initial_weights.npz",
                              verbose=verbose)
    code, stdout = run_child(command, signals, env)
    return read_child_summary(code, stdout)


def resumable(run_dir: Path) -> bool:
    """A run folder with a config and a checkpoint that did not finish."""
    state = RunFolder(run_dir).state()
    stopped = isinstance(state, RunState) or (isinstance(state, RunSummary)
                                              and state.status == "interrupted")
    return stopped and (run_dir / "config.yaml").is_file() and \
        any((run_dir / "checkpoints").glob("ckpt-*.index"))


def explain_missing_default(error: DataError) -> DataError:
    """`mptrain compare` without CONFIG runs the guide's MNIST experiment; when MNIST is not
    here, say that and name the experiments that do run offline."""
    offline = ", ".join(f"`mptrain compare {name}`" for name in OFFLINE_EXPERIMENTS)
    return DataError(f"{error}\nNo CONFIG was given, so compare ran the guide's experiment "
                     f"({DEFAULT_EXPERIMENT}), which needs MNIST. Experiments that run here "
                     f"without a download: {offline}.")


def build_record(name: str, folder: Path, variants: list[Variant],
                 outcomes: dict[str, RunSummary | str], run_dirs: dict[str, Path] | None = None,
                 status: str = "finished") -> CompareRecord:
    """compare.json: one row per variant (label → its summary, or why it has none), with
    ratios to the baseline: the float32 variant of the same loop, or the first policy listed
    when float32 is not compared."""
    run_dirs = run_dirs or {}
    baseline_policy = "float32" if any(v.policy == "float32" for v in variants) else variants[0].policy
    summaries = {label: o for label, o in outcomes.items() if isinstance(o, RunSummary)}
    rows = []
    for variant in variants:
        outcome = outcomes.get(variant.label, WAITING)
        baseline = Variant(baseline_policy, variant.loop, variants[0].strategy)
        run_dir = str(run_dirs[variant.label]) if variant.label in run_dirs else None
        if isinstance(outcome, str):
            failed = outcome in (NOT_RUN, WAITING)
            rows.append(CompareRow(variant=variant.label, policy=variant.policy, loop=variant.loop,
                                   strategy=variant.strategy, run_dir=run_dir, summary=None,
                                   failed=outcome,
                                   verdict=outcome if failed else f"failed ({outcome})"))
        else:
            rows.append(compare_row(variant, outcome, summaries.get(baseline.label),
                                    variant.label == baseline.label, run_dir))
    return CompareRecord(experiment=name, folder=str(folder), status=status,
                         baseline_policy=baseline_policy, variants=rows)


def compare_row(variant: Variant, s: RunSummary, base: RunSummary | None, is_baseline: bool,
                run_dir: str | None = None) -> CompareRow:
    measured = speedup(base, s) if base is not None else None
    accuracy_delta = loss_delta = memory_ratio = None
    if base is not None and "diverged" not in (s.status, base.status):
        accuracy_delta = difference(s.test_accuracy, base.test_accuracy, scale=100.0)
        loss_delta = difference(s.test_loss, base.test_loss)
        memory_ratio = ratio(s.memory.training_peak_bytes, base.memory.training_peak_bytes)
    return CompareRow(
        variant=variant.label, policy=variant.policy, loop=variant.loop, strategy=variant.strategy,
        run_dir=run_dir or s.run_dir, summary=s,
        speedup=measured[0] if measured else None, speedup_range=measured[1] if measured else None,
        memory_ratio=memory_ratio, accuracy_delta_pt=accuracy_delta,
        accuracy_noise_pt=accuracy_noise_pt(s.test_accuracy, s.test_examples),
        test_loss_delta=loss_delta,
        verdict=verdict(s, measured[1] if measured else None, accuracy_delta, is_baseline),
    )
