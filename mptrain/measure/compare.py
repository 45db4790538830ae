"""`mptrain compare`: one experiment under several policies (and loops), side by side.

Every variant runs in its own process (`runs.workers`): Keras' global dtype policy,
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

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mptrain.config import ExperimentConfig
from mptrain.errors import ConfigError, DataError
from mptrain.measure.engine import (
    Entry,
    Ledger,
    Turns,
    load_record,
    measure,
    stage,
    too_big_together,
    turn_steps,
)
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
from mptrain.record import Record
from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import RunSummary
from mptrain.telling import QUIET, Telling
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
    def settings(self) -> dict[str, object]:
        """`policy` is a precision candidate's name (`mixed_bfloat16+xla`), as plan prints it."""
        return {**candidate(self.policy).settings, "train.loop": self.loop,
                "distribute.strategy": self.strategy}


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
    baseline_rounds: list[float | None] | None = None  # in pairs (memory): its baseline's rounds
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
    pairs: str | None = None  # why the variants ran two by two with the baseline (memory)
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




@dataclass(frozen=True)
class CompareSettings:
    """What a user asks of a compare, with `mptrain compare`'s defaults: the candidates
    (None: float32 and what `policy: auto` picks here), loops and strategies (None: the
    experiment's), changes to the experiment (`--set` strings), and the shortcuts for how
    long each variant trains (`epochs`, `steps`) and when a step too slow to wait for stops
    it (`max_step_seconds`, None: never)."""

    policies: list[str] | None = None
    loops: list[str] | None = None
    strategies: list[str] | None = None
    sets: list[str] = field(default_factory=list)
    epochs: int | None = None
    steps: int | None = None
    max_step_seconds: float | None = 60.0

    @property
    def overrides(self) -> list[str]:
        shortcuts = {"train.epochs": self.epochs, "train.max_steps": self.steps,
                     "train.max_step_seconds": self.max_step_seconds}
        return [*self.sets, *(f"{key}={value}" for key, value in shortcuts.items()
                              if value is not None)]


def compare(experiment: str | ExperimentConfig | None, settings: CompareSettings = CompareSettings(),
            *, resume: Path | None = None, telling: Telling = QUIET, verbose: bool = False,
            as_text: Callable[[CompareRecord], str] | None = None) -> CompareResult:
    """`mptrain compare` and `mptrain.compare`: the experiment named or given (default: the
    guide's) under each candidate, loop and strategy, every variant in a process of its own
    from shared initial weights, all in turns (`measure.engine`); or, with `resume`, the
    compare in that folder finished. Writes compare.json and compare.png into
    OUTPUT_DIR/compare-<name>-<timestamp>/. `as_text(record)`: the tables as text, for MLflow
    (with `output.mlflow`)."""
    if resume is not None:
        return resume_compare(resume, telling, verbose, as_text)
    try:
        config = _experiment(experiment, settings.overrides)
        policies = settings.policies or default_policies(config, verbose, telling.status)
        variants = plan_variants(config, policies, settings.loops, settings.strategies)
        return run_compare(config, variants, telling, verbose, as_text)
    except DataError as exc:
        raise (explain_missing_default(exc) if experiment is None else exc) from None


def _experiment(experiment: str | ExperimentConfig | None, overrides: list[str]):
    from mptrain.config import load_config, variant

    if isinstance(experiment, ExperimentConfig):
        return variant(experiment, overrides)
    return load_config(experiment or DEFAULT_EXPERIMENT, overrides)


def run_compare(config: ExperimentConfig, variants: list[Variant], telling: Telling = QUIET,
                verbose: bool = False,
                as_text: Callable[[CompareRecord], str] | None = None) -> CompareResult:
    """Every variant of a new compare: staged (what is known to be slow here said first),
    then measured in turns."""
    from mptrain.data.pipeline import input_ms_per_batch
    from mptrain.model.python_builder import check_builder_travels

    check_builder_travels(config, "compare")

    def say_notes(prepared) -> None:  # what is known to be slow here, before anything runs
        for labels, warning in grouped(preflight_notes(config, variants, prepared.machine)):
            telling.say(f"note ({labels})", warning)

    folder, prepared = stage(config, "compare", verbose, before_folder=say_notes)
    pairs = too_big_together(prepared, {v.label: candidate(v.policy).policy for v in variants},
                             _paired_baseline(variants))
    known = Known(pairs=pairs, run_dirs={v.label: folder / f"{config.name}-{v.label}" for v in variants},
                  turn_steps=turn_steps(planned_steps(prepared.config.train,
                                                      prepared.batches.steps_per_epoch)),
                  input_ms=input_ms_per_batch(prepared.batches))
    return _run_variants(build_record(config.name, folder, variants, known, "running"),
                         variants, known, verbose, telling, as_text)


def resume_compare(folder: Path, telling: Telling = QUIET, verbose: bool = False,
                   as_text: Callable[[CompareRecord], str] | None = None) -> CompareResult:
    """Finish a compare that stopped: variants that finished (or diverged) stay; one that was
    stopped resumes from its checkpoint; the others run now, in turns."""
    record = load_record(folder, "compare", CompareRecord)
    variants = [Variant(row.policy, row.loop, row.strategy) for row in record.variants]
    known = Known(run_dirs={row.variant: Path(row.run_dir) if row.run_dir else
                            folder / f"{record.experiment}-{row.variant}" for row in record.variants},
                  turn_steps=record.turn_steps, input_ms=record.input_ms_per_batch,
                  pairs=record.pairs)
    for row in record.variants:
        state = RunFolder(known.run_dirs[row.variant]).state()
        if isinstance(state, RunSummary) and state.status in ("finished", "diverged"):
            known.outcomes[row.variant] = state
            known.rounds[row.variant] = row.rounds
            known.sessions[row.variant] = row.session
            if row.baseline_rounds is not None:
                known.baseline_rounds[row.variant] = row.baseline_rounds
    if len(known.outcomes) == len(variants):
        raise ConfigError(f"--resume {folder}: every variant has finished; nothing to resume")
    return _run_variants(record, variants, known, verbose, telling, as_text)


def _run_variants(record: CompareRecord, variants: list[Variant], known: Known, verbose: bool,
                  telling: Telling, as_text) -> CompareResult:
    """The variants not yet done, run in turns by the engine; compare.json rewritten as they
    end, with each variant's per-round step times (`rounds`), so every verdict can be
    recomputed from the record."""
    from mptrain.config import load_config, variant
    from mptrain.measure.plot import plot_compare

    folder, name = Path(record.folder), record.experiment
    # rounds pair only within one session of turns: a variant resumed now did not run in the
    # same rounds as one that finished before the interruption
    session = max([row.session for row in record.variants], default=0) + 1
    to_run = [v for v in variants if v.label not in known.outcomes]
    known.sessions.update({v.label: session for v in to_run})
    staged = load_config(folder / "experiment.yaml")
    entries = [Entry(v.label, variant(staged, {"name": f"{name}-{v.label}", **v.settings}),
                     known.run_dirs[v.label], resume=True) for v in to_run]
    ledger = Ledger(folder, "compare", {"variants": ",".join(v.label for v in variants)})
    ledger.write(build_record(name, folder, variants, known, "running"))
    turns = Turns(known.turn_steps, paired_with=_paired_baseline(variants) if known.pairs else None)
    ran, signal = measure(ledger, entries, turns, verbose=verbose, on_turn=telling.turn)
    for entry in entries:
        end = ran.get(entry.label)
        known.outcomes[entry.label] = NOT_RUN if end is None else end.summary or end.failed
        if end is not None:
            known.rounds[entry.label] = end.rounds
            if end.baseline_rounds is not None:
                known.baseline_rounds[entry.label] = end.baseline_rounds
    status = "interrupted" if signal is not None else "finished"
    record = build_record(name, folder, variants, known, status)
    notes = ledger.close(record, status, plot_compare if any(r.summary for r in record.variants)
                         else None, {"compare.txt": as_text(record)} if as_text else {})
    return CompareResult(record, folder, signal, notes)


def explain_missing_default(error: DataError) -> DataError:
    """`mptrain compare` without CONFIG runs the guide's MNIST experiment; when MNIST is not
    here, say that and name the experiments that do run offline."""
    offline = ", ".join(f"`mptrain compare {name}`" for name in OFFLINE_EXPERIMENTS)
    return DataError(f"{error}\nNo CONFIG was given, so compare ran the guide's experiment "
                     f"({DEFAULT_EXPERIMENT}), which needs MNIST. Experiments that run here "
                     f"without a download: {offline}.")


@dataclass
class Known:
    """What is known of a compare's variants so far, by label: each one's end (its summary,
    or why it has none), run folder, per-round step times and session of turns; and what
    the engine measured for them all (steps a turn, the input pipeline alone)."""

    outcomes: dict[str, RunSummary | str] = field(default_factory=dict)
    run_dirs: dict[str, Path] = field(default_factory=dict)
    rounds: dict[str, list[float | None]] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)
    baseline_rounds: dict[str, list[float | None]] = field(default_factory=dict)  # in pairs
    turn_steps: int = 0
    input_ms: float | None = None
    pairs: str | None = None  # why the variants run two by two with the baseline (memory)


def _paired_baseline(variants: list[Variant]) -> str:
    """The variant each other one runs with when they go in pairs: the first loop's and
    strategy's baseline."""
    return Variant(_baseline_policy(variants), variants[0].loop, variants[0].strategy).label


def _baseline_policy(variants: list[Variant]) -> str:
    """float32 when it is compared, else the first policy listed."""
    return "float32" if any(v.policy == "float32" for v in variants) else variants[0].policy


def build_record(name: str, folder: Path, variants: list[Variant], known: Known,
                 status: str = "finished") -> CompareRecord:
    """compare.json: one row per variant (label → its summary, or why it has none), with
    ratios to the baseline: the float32 variant of the same loop, or the first policy listed
    when float32 is not compared."""
    baseline_policy = _baseline_policy(variants)
    summaries = {label: o for label, o in known.outcomes.items() if isinstance(o, RunSummary)}
    rows = []
    for variant in variants:
        outcome = known.outcomes.get(variant.label, WAITING)
        baseline = Variant(baseline_policy, variant.loop, variants[0].strategy)
        run_dir = str(known.run_dirs[variant.label]) if variant.label in known.run_dirs else None
        if isinstance(outcome, str):
            failed = outcome in (NOT_RUN, WAITING)
            rows.append(CompareRow(variant=variant.label, policy=variant.policy, loop=variant.loop,
                                   strategy=variant.strategy, run_dir=run_dir, summary=None,
                                   failed=outcome,
                                   verdict=outcome if failed else f"failed ({outcome})"))
            continue
        together = known.sessions.get(variant.label) == known.sessions.get(baseline.label)
        base_rounds = known.rounds.get(baseline.label, []) if together else None
        paired = known.baseline_rounds.get(variant.label)  # its own pair's baseline (memory)
        timing = Timing(known.rounds.get(variant.label, []),
                        paired if paired is not None else base_rounds, known.input_ms)
        row = compare_row(variant, outcome, summaries.get(baseline.label),
                          variant.label == baseline.label, run_dir, timing)
        rows.append(row.model_copy(update={"session": known.sessions.get(variant.label, 0),
                                           "baseline_rounds": paired}))
    return CompareRecord(experiment=name, folder=str(folder), status=status,
                         baseline_policy=baseline_policy, turn_steps=known.turn_steps,
                         input_ms_per_batch=known.input_ms, pairs=known.pairs, variants=rows)


@dataclass(frozen=True)
class Timing:
    """A variant's per-round step times, the baseline's from the same rounds (None: they did
    not run in turns together), and the input pipeline's time a batch."""

    rounds: list[float | None] = field(default_factory=list)
    base_rounds: list[float | None] | None = None
    input_ms: float | None = None


def compare_row(variant: Variant, s: RunSummary, base: RunSummary | None, is_baseline: bool,
                run_dir: str | None = None, timing: Timing = Timing()) -> CompareRow:
    """The variant against the baseline: the speed-up from the rounds both ran in turns
    (`measure.verdicts.paired_speedup`); from the two runs' own medians only where there are no such
    rounds (`runs --compare`, which sets side by side runs made at different times, or a
    variant resumed after the baseline had finished)."""
    rounds, base_rounds = timing.rounds, timing.base_rounds
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
            input_bound(s.step_time.median_ms if s.step_time else None, timing.input_ms)])),
    )
