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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mptrain.config import ExperimentConfig
from mptrain.errors import ConfigError, DataError
from mptrain.measure.engine import Contender, run_in_turns, stage, turn_steps
from mptrain.measure.verdicts import (
    accuracy_noise_pt,
    difference,
    input_bound,
    paired_speedup,
    ratio,
    speedup,
    verdict,
)
from mptrain.precision.candidates import candidate
from mptrain.runs.folder import RunFolder, resumable, to_json, write_atomic
from mptrain.runs.summary import Record, RunSummary
from mptrain.runs.workers import read_child_summary, resume_command, run_command
from mptrain.signals import ForwardSignals
from mptrain.training.turns import planned_steps

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
        base = f"{self.policy.replace('+', '-')}-{self.loop}"  # names folders and runs
        return base if self.strategy == "none" else f"{base}-{self.strategy}"

    @property
    def overrides(self) -> list[str]:
        """`policy` is a precision candidate's name (`mixed_bfloat16+xla`), as plan prints it."""
        return [*candidate(self.policy).overrides, f"train.loop={self.loop}",
                f"distribute.strategy={self.strategy}"]


def default_policies(config: ExperimentConfig, verbose: bool = False,
                     status: Callable[[str], object] | None = None) -> list[str]:
    """`compare`'s policies when none are given: `policies_worth_comparing` on this machine,
    with its kernels measured (or the cached measurement)."""
    from mptrain.hardware.kernels import measured_kernels
    from mptrain.hardware.machine import probe
    from mptrain.hardware.runtime import import_tensorflow
    from mptrain.runs.experiment import math_environment

    tf = import_tensorflow(verbose, environment=math_environment(config.train.math_mode))
    machine = probe(tf, check_xla=False)
    return policies_worth_comparing(machine, measured_kernels(tf, machine, status))


def policies_worth_comparing(machine, kernels) -> list[str]:
    """float32 and what `policy: auto` picks here: the comparison a user without
    `--policies` is asking for. When auto picks float32, the 16-bit policy it weighed
    (bfloat16, unless a GPU lacks fast bfloat16), so the default compare still shows what 16
    bits would cost here. Never mixed_float16 on a CPU, where it is known to be slow."""
    from mptrain.precision.policy import recommend

    picked = recommend(machine, kernels).policy
    if picked != "float32":
        return ["float32", picked]
    float16_only = machine.gpus and not all(g.fast_bfloat16 for g in machine.gpus)
    return ["float32", "mixed_float16" if float16_only else "mixed_bfloat16"]


def plan_variants(config: ExperimentConfig, policies: list[str], loops: list[str] | None = None,
                  strategies: list[str] | None = None) -> list[Variant]:
    """Every policy (a precision candidate's name) under every loop and strategy; a name
    that is no candidate is an error before anything runs."""
    for name in policies:
        candidate(name)
    return [Variant(p, loop, s) for s in (strategies or [config.distribute.strategy])
            for loop in (loops or [config.train.loop]) for p in policies]


class CompareRow(Record):
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
    rounds: list[float | None] = []  # its median step (ms) in each round run in turns
    session: int = 0  # which session of turns (a resume starts another): rounds pair within one
    verdict: str


class CompareRecord(Record):
    """compare.json."""

    experiment: str
    folder: str
    status: Literal["running", "finished", "interrupted"] = "finished"
    baseline_policy: str
    turn_steps: int = 0  # steps each variant ran per turn (0: not run in turns)
    input_ms_per_batch: float | None = None  # the input pipeline alone, measured before the runs
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
    from mptrain.hardware.kernels import cached_kernels
    from mptrain.precision.policy import choose_policy, speed_warning
    from mptrain.training.distribute import replicas_for

    kernels = cached_kernels(machine)
    notes = {}
    for v in variants:
        replicas = replicas_for(v.strategy, config.distribute.devices, machine)
        option = candidate(v.policy)
        jit = option.jit_compile if option.jit_compile is not None else config.train.jit_compile
        choice = choose_policy(option.policy, jit, machine, config.train.xla_optimizer_update,
                               replicas, kernels)
        warning = speed_warning(choice, machine, kernels)
        if warning:
            notes[v.label] = warning
    return notes


def grouped(warnings: dict[str, str]) -> list[tuple[str, str]]:
    """(labels, warning) for each distinct warning, once, with every variant it is about."""
    return [(", ".join(label for label, w in warnings.items() if w == warning), warning)
            for warning in dict.fromkeys(warnings.values())]


OnTurn = Callable[[int, str, list[float]], None]  # (round, variant label, its steps' ms)


def run_compare(
    config: ExperimentConfig,
    variants: list[Variant],
    *,
    verbose: bool = False,
    on_notes: Callable[[dict[str, str]], None] | None = None,
    on_turn: OnTurn | None = None,
    as_text: Callable[[CompareRecord], str] | None = None,
) -> CompareResult:
    """Run every variant in a process of its own from shared initial weights, all in turns
    (`engine`); write compare.json and compare.png into OUTPUT_DIR/compare-<name>-<timestamp>/
    and return the record. `on_turn` is told of each turn as it ends; `as_text(record)`: the
    tables as text, for MLflow (with `output.mlflow`)."""
    from mptrain.data.pipeline import input_ms_per_batch
    from mptrain.model.python_builder import check_builder_travels

    check_builder_travels(config, "compare")

    def say_notes(prepared) -> None:  # what is known to be slow here, before anything runs
        if on_notes is not None:
            on_notes(preflight_notes(config, variants, prepared.machine))

    folder, prepared = stage(config, "compare", verbose, before_folder=say_notes)
    run_dirs = {v.label: folder / f"{config.name}-{v.label}" for v in variants}
    steps = turn_steps(planned_steps(prepared.config.train, prepared.batches.steps_per_epoch))
    record = build_record(config.name, folder, variants, {}, run_dirs, status="running",
                          turn_steps=steps, input_ms=input_ms_per_batch(prepared.batches))
    return _run_variants(record, folder, variants, run_dirs, {}, verbose, on_turn, as_text)


def resume_compare(folder: Path, *, verbose: bool = False, on_turn: OnTurn | None = None,
                   as_text: Callable[[CompareRecord], str] | None = None) -> CompareResult:
    """Finish a compare that stopped: variants that finished (or diverged) stay; one that was
    stopped resumes from its checkpoint; the others run now, in turns."""
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
    return _run_variants(record, folder, variants, run_dirs, done, verbose, on_turn, as_text)


def _run_variants(record: CompareRecord, folder: Path, variants: list[Variant],
                  run_dirs: dict[str, Path], done: dict[str, RunSummary], verbose: bool,
                  on_turn, as_text) -> CompareResult:
    """The variants not yet done, run in turns by the engine; compare.json rewritten as they
    end, with each variant's per-round step times (`rounds`), so every verdict can be
    recomputed from the record."""
    from mptrain.runs.tracking import start_parent

    name = record.experiment
    outcomes: dict[str, RunSummary | str] = dict(done)
    rounds = {row.variant: row.rounds for row in record.variants if row.variant in done}
    # rounds pair only within one session of turns: a variant resumed now did not run in the
    # same rounds as one that finished before the interruption
    sessions = {row.variant: row.session for row in record.variants if row.variant in done}
    session = max([row.session for row in record.variants], default=0) + 1
    sessions.update({v.label: session for v in variants if v.label not in done})
    # with output.mlflow: a parent run, each variant's run nested in it
    tracking = start_parent(folder, "compare", {"variants": ",".join(v.label for v in variants)})
    env = tracking.env if tracking else {}
    contenders = [Contender(v.label, _variant_command(folder, name, v, run_dirs[v.label], verbose),
                            folder / "logs" / f"{v.label}.log", env)
                  for v in variants if v.label not in done]
    _write(folder, build_record(name, folder, variants, outcomes, run_dirs, rounds, "running",
                                record.turn_steps, record.input_ms_per_batch, sessions))
    with ForwardSignals() as signals:
        ran = run_in_turns(contenders, record.turn_steps, signals, on_turn)
    for contender in contenders:
        outcome = ran.get(contender.label)
        if outcome is None:
            outcomes[contender.label] = NOT_RUN
            continue
        summary = read_child_summary(outcome.code, outcome.stdout)
        if isinstance(summary, str) and outcome.log_tail:
            summary = f"{summary}: {outcome.log_tail}"
        outcomes[contender.label] = summary
        rounds[contender.label] = outcome.rounds
    status = "interrupted" if signals.received is not None else "finished"
    record = build_record(name, folder, variants, outcomes, run_dirs, rounds, status, record.turn_steps,
                          record.input_ms_per_batch, sessions)
    if any(row.summary for row in record.variants):
        from mptrain.measure.plot import plot_compare

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


def _variant_command(folder: Path, name: str, variant: Variant, run_dir: Path,
                     verbose: bool) -> list[str]:
    """`mptrain run` of the variant: a resume when it stopped with a checkpoint, else anew."""
    if resumable(run_dir):
        return resume_command(run_dir, verbose)
    shutil.rmtree(run_dir, ignore_errors=True)  # started, but stopped before its first checkpoint
    return run_command(folder / "experiment.yaml", [f"name={name}-{variant.label}", *variant.overrides],
                       run_dir=run_dir, initial_weights=folder / "initial_weights.npz",
                       verbose=verbose)




def explain_missing_default(error: DataError) -> DataError:
    """`mptrain compare` without CONFIG runs the guide's MNIST experiment; when MNIST is not
    here, say that and name the experiments that do run offline."""
    offline = ", ".join(f"`mptrain compare {name}`" for name in OFFLINE_EXPERIMENTS)
    return DataError(f"{error}\nNo CONFIG was given, so compare ran the guide's experiment "
                     f"({DEFAULT_EXPERIMENT}), which needs MNIST. Experiments that run here "
                     f"without a download: {offline}.")


def build_record(name: str, folder: Path, variants: list[Variant],
                 outcomes: dict[str, RunSummary | str], run_dirs: dict[str, Path] | None = None,
                 rounds: dict[str, list[float | None]] | None = None, status: str = "finished",
                 turn_steps: int = 0, input_ms: float | None = None,
                 sessions: dict[str, int] | None = None) -> CompareRecord:
    """compare.json: one row per variant (label → its summary, or why it has none), with
    ratios to the baseline: the float32 variant of the same loop, or the first policy listed
    when float32 is not compared."""
    run_dirs, rounds, sessions = run_dirs or {}, rounds or {}, sessions or {}
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
            together = sessions.get(variant.label) == sessions.get(baseline.label)
            row = compare_row(variant, outcome, summaries.get(baseline.label),
                              variant.label == baseline.label, run_dir, rounds.get(variant.label, []),
                              rounds.get(baseline.label, []) if together else None, input_ms)
            rows.append(row.model_copy(update={"session": sessions.get(variant.label, 0)}))
    return CompareRecord(experiment=name, folder=str(folder), status=status,
                         baseline_policy=baseline_policy, turn_steps=turn_steps,
                         input_ms_per_batch=input_ms, variants=rows)


def compare_row(variant: Variant, s: RunSummary, base: RunSummary | None, is_baseline: bool,
                run_dir: str | None = None, rounds: list[float | None] | None = None,
                base_rounds: list[float | None] | None = None,
                input_ms: float | None = None) -> CompareRow:
    """The variant against the baseline: the speed-up from the rounds both ran in turns
    (`verdicts.paired_speedup`); from the two runs' own medians only where there are no such
    rounds (`runs --compare`, which sets side by side runs made at different times, or a
    variant resumed after the baseline had finished)."""
    rounds = rounds or []
    measured = paired_speedup(base_rounds or [], rounds) if base is not None else None
    if measured is None and base is not None and not (rounds and base_rounds):
        measured = speedup(base, s)
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
        test_loss_delta=loss_delta, rounds=rounds,
        verdict="; ".join(filter(None, [
            verdict(s, measured[1] if measured else None, accuracy_delta, is_baseline),
            input_bound(s.step_time.median_ms if s.step_time else None, input_ms)])),
    )
