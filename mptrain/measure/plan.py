"""`mptrain plan`'s library: the fastest safe precision for this model on this machine, measured.

CPU flags and GPU compute capabilities say what a machine *has*; they do not say what is fast
for a given model: bfloat16 on a Xeon with AVX512_BF16 but no AMX was measured 1.9x slower
than float32 on the guide's MLP, and on AMX the same MLP runs 3x faster while a ResNet gains
1.15x. So plan measures:

1. Candidates this machine can run (`precision.candidates`): float32; mixed_bfloat16 through
   oneDNN and with XLA; mixed_float16 where it can be fast (Tensor Cores, or XLA on a CPU);
   on CPUs float32 with oneDNN's bfloat16 math and with TensorFlow's bfloat16 graph rewrite;
   on Ampere+ GPUs float32 without TF32. What cannot win here is skipped with its reason.
2. A trial of each, all in turns (`measure.engine`: each a child `mptrain run`, since some
   switches are read once when TensorFlow starts): the same initial weights, the same
   batches, enough steps to time with compare's rules (`measure.verdicts`), most promising
   first, within the budget.
3. The accuracy guard: a candidate counts only if its training loss over the trial stays
   within the tolerance of float32's (and, with `--eval`, its test accuracy), with no
   non-finite loss that a loss scaler did not explain.
4. Float32 islands: for the best 16-bit candidate, each layer's forward and backward is timed
   in 16 bits and in float32 (`measure.islands`); the layers slower in 16 bits, and under
   float16 those whose activations overflow, become `model.float32_layers` in one more trial,
   kept only if it is measured faster (or safer).
5. The choice (`measure.trials.choose`): the fastest counted candidate that is faster than float32 beyond
   the noise, else float32; written as a runnable experiment (plan.yaml) whose header says
   what was measured, when, and on which machine.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Literal

import yaml

from mptrain.config import ExperimentConfig, load_config
from mptrain.config.loading import as_file_in, plan_file_for
from mptrain.data.pipeline import input_ms_per_batch
from mptrain.errors import ConfigError
from mptrain.hardware.machine import Machine
from mptrain.measure.engine import (
    Entry,
    Ledger,
    Turns,
    load_record,
    measure,
    stage,
    too_big_together,
    turn_steps,
    write_record,
)
from mptrain.measure.islands import LayerTiming, islands, layer_timings
from mptrain.measure.trials import (
    DEFAULT_TOLERANCE_PCT,
    Rules,
    Trial,
    choose,
    compared_losses,
    judge,
)
from mptrain.measure.verdicts import input_bound
from mptrain.precision.candidates import Candidate, candidates, select
from mptrain.record import Record
from mptrain.runs.folder import RunFolder, write_atomic
from mptrain.telling import QUIET, Telling
from mptrain.training.turns import planned_steps

DEFAULT_STEPS = 30
DEFAULT_BUDGET_MINUTES = 20.0
SLOWEST_RATIO = 5.0  # a trial stepping this many times float32's in a round is stopped: it cannot win


class PlanRecord(Record):
    """plan.json."""

    experiment: str
    folder: str
    status: Literal["running", "finished", "interrupted", "out of budget"] = "running"
    machine: str  # where it was measured
    measured_at: str
    steps: int
    tolerance_pct: float
    evaluate: bool
    budget_minutes: float
    experiment_steps: int = 0  # the experiment's own length, for the whole-run estimates
    experiment_eval_batches: int = 0  # its validation batches over its epochs, and its test's
    experiment_checkpoints: int = 0  # the checkpoints it saves
    pairs: str | None = None  # why the trials ran two by two with float32 (memory)
    input_ms_per_batch: float | None = None  # the input pipeline alone, measured before the trials
    turn_steps: int = 0  # steps each trial ran per turn
    candidates: list[Candidate]  # in the order tried; skipped ones carry why_not
    trials: list[Trial] = []
    layers: list[LayerTiming] = []
    island_layers: list[str] = []
    winner: str | None = None
    reason: str = ""
    plan_file: str | None = None
    plot: str | None = None

    def trial(self, name: str) -> Trial | None:
        return next((t for t in self.trials if t.candidate.name == name), None)

    @property
    def untried(self) -> list[Candidate]:
        """Candidates still to try: never started, or stopped by an interrupt (a trial that
        failed on its own has its row and verdict)."""
        tried = {t.candidate.name for t in self.trials if t.failed != "interrupted"}
        return [c for c in self.candidates if c.why_not is None and c.name not in tried]


# --- running a plan -----------------------------------------------------------------------


@dataclass(frozen=True)
class PlanResult:
    record: PlanRecord
    folder: Path
    signal: int | None = None
    notes: list[str] = field(default_factory=list)  # what MLflow tracking could not log


@dataclass(frozen=True)
class PlanSettings:
    """What a user asks of a plan: the candidates by name (None: every one this machine can run),
    steps per trial, the loss tolerance, the time budget, whether to judge test accuracy, and
    where plan.yaml goes (None: EXPERIMENT.plan.yaml beside the experiment's file, a
    built-in's in the current folder; nowhere for an experiment from a mapping)."""

    candidates: list[str] | None = None
    steps: int = DEFAULT_STEPS
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    budget_minutes: float = DEFAULT_BUDGET_MINUTES
    evaluate: bool = False
    out: Path | None = None

    def check(self) -> None:
        if self.tolerance_pct < 0:
            raise ConfigError(f"--tolerance {self.tolerance_pct:g}: give a percentage of float32's "
                              "loss, 0 or more")
        if self.budget_minutes <= 0:
            raise ConfigError(f"--budget {self.budget_minutes:g}: give the minutes plan may take, "
                              "more than 0")
        if self.steps < 8:
            raise ConfigError(f"--steps {self.steps}: a trial needs at least 8 steps to be timed")


def plan(experiment: str | ExperimentConfig, settings: PlanSettings = PlanSettings(), *,
         resume: Path | None = None, telling: Telling = QUIET, verbose: bool = False,
         as_text: Callable[[PlanRecord], str] | None = None) -> PlanResult:
    """`mptrain plan` and `mptrain.plan`: start a plan of the experiment named or given, or
    with `resume` finish the one in that folder, and run it to its choice."""
    if resume is not None:
        record, folder = resume_plan(resume), resume
    else:
        config = experiment if isinstance(experiment, ExperimentConfig) else load_config(experiment)
        if settings.out is None:
            settings = replace(settings, out=_beside(config.source))
        record, folder = start_plan(config, settings, verbose=verbose, status=telling.status)
    return run_plan(record, folder, verbose=verbose, on_turn=telling.turn,
                    on_layers=telling.status, as_text=as_text)


def _beside(source: str) -> Path | None:
    """Where a plan goes by default: beside the experiment's file (`plan_file_for`); None for
    an experiment that has no file."""
    try:
        return plan_file_for(source)
    except ConfigError:
        return None


def start_plan(config: ExperimentConfig, settings: PlanSettings = PlanSettings(), *,
               verbose: bool = False,
               status: Callable[[str], object] | None = None) -> tuple[PlanRecord, Path]:
    """Check everything, save the shared initial weights, write the plan folder with the
    trials to run. Bad input fails here, before any folder exists."""
    from mptrain.hardware.kernels import measured_kernels
    from mptrain.model.python_builder import check_builder_travels

    check_builder_travels(config, "plan")
    settings.check()
    names, steps, evaluate = settings.candidates, settings.steps, settings.evaluate
    found: list[Candidate] = []

    def choose_candidates(prepared) -> None:  # an unknown --candidates name fails here, too
        kernels = measured_kernels(prepared.tf, prepared.machine, status)
        found.extend(select(candidates(prepared.machine, kernels), names))

    folder, prepared = stage(config, "plan", verbose, before_folder=choose_candidates)
    machine, config = prepared.machine, prepared.config
    per_epoch = prepared.batches.steps_per_epoch
    input_ms = input_ms_per_batch(prepared.batches)
    write_atomic(folder / "trial.yaml", yaml.safe_dump(
        trial_experiment(config, steps, per_epoch, evaluate).to_yaml_dict(), sort_keys=False))
    record = PlanRecord(
        experiment=config.name, folder=str(folder), machine=describe_machine(machine),
        measured_at=datetime.now().isoformat(timespec="seconds"), steps=steps,
        tolerance_pct=settings.tolerance_pct, evaluate=evaluate,
        budget_minutes=settings.budget_minutes,
        experiment_steps=planned_steps(config.train, per_epoch),
        experiment_eval_batches=eval_batches(prepared),
        experiment_checkpoints=checkpoint_saves(config.train, per_epoch), turn_steps=turn_steps(steps),
        pairs=too_big_together(prepared, {c.name: c.policy for c in found if c.why_not is None},
                               "float32"),
        input_ms_per_batch=input_ms,
        candidates=found, plan_file=str(settings.out) if settings.out else None)
    write_record(folder, "plan", record)
    return record, folder


def eval_batches(prepared) -> int:
    """The batches the experiment as written evaluates: its validation set after each epoch,
    and its test set once."""
    batch, data = prepared.config.train.batch_size, prepared.data
    per_epoch = prepared.batches.steps_per_epoch
    epochs = math.ceil(planned_steps(prepared.config.train, per_epoch) / per_epoch)
    validation = math.ceil(data.val.size / batch) if data.val is not None else 0
    return validation * epochs + math.ceil(data.test.size / batch)


def checkpoint_saves(train, per_epoch: int) -> int:
    """The checkpoints the experiment as written saves: every `every_epochs` epochs and every
    `every_steps` steps inside an epoch, and one more where training stops."""
    steps = planned_steps(train, per_epoch)
    epochs = steps // per_epoch  # whole epochs run
    saves = 1
    if train.checkpoint.every_epochs:
        saves += epochs // train.checkpoint.every_epochs
    if every := train.checkpoint.every_steps:  # an epoch's end is saved by the epoch's rule
        saves += steps // every - steps // math.lcm(every, per_epoch)
    return saves


def trial_experiment(config: ExperimentConfig, steps: int, per_epoch: int,
                     evaluate: bool) -> ExperimentConfig:
    """A trial: `steps` steps, no checkpoints but the one as it stops (its time stands for
    the experiment's), the model saved when the experiment saves it (the whole-run estimate
    counts that too); without --eval, a small test set (its figures are not judged, and
    evaluating a whole one would cost the budget)."""
    from mptrain.config import variant

    changes = {"train.epochs": math.ceil(steps / per_epoch), "train.max_steps": steps,
               "train.checkpoint": {"every_epochs": None, "every_steps": None, "keep": 1}}
    if not evaluate:
        changes["data.max_test_examples"] = 2 * config.train.batch_size
    return variant(config, changes)


def describe_machine(machine: Machine) -> str:
    from mptrain.hardware.machine import CPU_FEATURES

    if machine.gpus:
        what = machine.gpus[0].describe()
    elif machine.tpu:
        what = "TPU"
    else:
        has = [label for flag, label in CPU_FEATURES.items() if flag in machine.cpu.flags]
        amx = "AMX-BF16" if "amx_bf16" in machine.cpu.flags else "no AMX"
        what = (f"{machine.cpu.model}, {machine.cpu.physical_cores} cores, "
                f"{', '.join(has) or 'no AVX-512'}{'' if 'AMX-BF16' in has else f' ({amx})'}")
    return f"{what}; TensorFlow {machine.tensorflow_version}"


def run_plan(record: PlanRecord, folder: Path, *, verbose: bool = False,
             on_turn: Callable[[int, str, list[float]], None] | None = None,
             on_layers: Callable[[str], object] | None = None,
             as_text: Callable[[PlanRecord], str] | None = None) -> PlanResult:
    """Decide the float32 islands, run the trials not yet run in turns (`measure.engine`), then
    choose; resumable. `as_text(record)`: the table as text, for MLflow (`output.mlflow`)."""
    from mptrain.measure.plot import plot_plan

    started = time.perf_counter()
    ledger = Ledger(folder, "plan", {
        "plan.steps": str(record.steps), "plan.tolerance_pct": str(record.tolerance_pct),
        "plan.budget_minutes": str(record.budget_minutes), "plan.evaluate": str(record.evaluate)})
    if not record.layers and record.untried:
        record = _add_islands(record, folder, verbose, on_layers)
        ledger.write(record)
    signal = None
    if record.untried and time.perf_counter() - started <= 60 * record.budget_minutes:
        record, signal = _run_trials(record, ledger, verbose, on_turn)
    winner, reason = choose(record.trials)
    status = ("interrupted" if signal is not None else
              "out of budget" if record.untried else "finished")
    record = record.model_copy(update={"winner": winner, "reason": reason, "status": status})
    texts = {"plan.txt": as_text(record)} if as_text else {}
    if record.plan_file and status != "interrupted":
        texts["plan.yaml"] = write_plan_file(record, folder, Path(record.plan_file))
    notes = ledger.close(record, status, plot_plan if record.trials else None, texts,
                         tags={"winner": record.winner or ""})
    return PlanResult(record, folder, signal, notes)


def _run_trials(record: PlanRecord, ledger: Ledger, verbose: bool,
                on_turn) -> tuple[PlanRecord, int | None]:
    """Every untried candidate, and float32 with them (every speed-up is a ratio within a
    round, so the baseline runs in the same rounds, also when a plan resumes); the record
    with their trials judged, and the signal that interrupted them."""
    from mptrain.config import load_config, variant

    queue = record.untried
    if all(c.name != "float32" for c in queue):
        queue = [next(c for c in record.candidates if c.name == "float32"), *queue]
    folder = ledger.folder
    trial = load_config(folder / "trial.yaml")
    entries = []
    for option in queue:
        name = f"{record.experiment}-{option.name.replace('+', '-')}"  # its run and its folder
        entries.append(Entry(option.name, variant(trial, {"name": name, **option.settings}),
                             folder / name))
    turns = Turns(record.turn_steps, SLOWEST_RATIO, "float32" if record.pairs else None)
    ran, signal = measure(ledger, entries, turns, verbose=verbose, on_turn=on_turn)
    trials = {t.candidate.name: t for t in record.trials}
    for option, entry in zip(queue, entries, strict=True):
        end = ran.get(option.name)
        if end is None:
            continue  # never started: still to try
        summary, failed = end.summary, end.failed
        if summary is not None and summary.status == "interrupted":
            summary, failed = None, "interrupted"
        trials[option.name] = Trial(candidate=option, run_dir=str(entry.run_dir),
                                    summary=summary, failed=failed, rounds=end.rounds,
                                    baseline_rounds=end.baseline_rounds, overhead_s=end.overhead_s)
    ordered = [trials[c.name] for c in record.candidates if c.name in trials]
    return record.model_copy(update={"trials": _judged(ordered, record)}), signal


def _judged(trials: list[Trial], record: PlanRecord) -> list[Trial]:
    steps = {t.candidate.name: RunFolder(Path(t.run_dir)).read_steps() for t in trials
             if t.summary is not None}
    base = next((t for t in trials if t.candidate.name == "float32"), None)
    rules = plan_rules(record, trials)
    judged = []
    for t in trials:
        records = steps.get(t.candidate.name, [])
        unexplained = sum(1 for r in records if not math.isfinite(r.loss) and not r.skipped)
        t = t.model_copy(update={"unexplained_non_finite": unexplained})
        t = judge(t, base, compared_losses(steps.get("float32", []), records), rules)
        waits = input_bound(t.summary.step_time.median_ms if t.summary and t.summary.step_time
                            else None, record.input_ms_per_batch)
        judged.append(t.model_copy(update={"verdict": f"{t.verdict}; {waits}"}) if waits else t)
    return judged


def plan_rules(record: PlanRecord, trials: list[Trial]) -> Rules:
    """How the plan's trials are judged: its tolerance, and the experiment's length for the
    whole-run estimate, with the process's start and exit taken as the median over the
    trials' processes (the same program for each: one trial's exit once took 46 s longer)."""
    overheads = [t.overhead_s for t in trials if t.overhead_s is not None]
    return Rules(record.tolerance_pct, record.evaluate, record.experiment_steps,
                 record.experiment_eval_batches, record.experiment_checkpoints,
                 statistics.median(overheads) if overheads else 0.0)


def _add_islands(record: PlanRecord, folder: Path, verbose: bool, on_layers) -> PlanRecord:
    """The most promising 16-bit candidate (the first listed: by this machine's measured
    kernels) with its slow (or overflowing) layers kept in float32, as one more candidate,
    so it runs in the same rounds as the others. Decided before the trials from each
    layer's own timing, in 16 bits and in float32."""
    from mptrain.config import load_config

    best = next((c for c in record.untried if c.sixteen_bit and c.policy != "float32"
                 and not c.float32_layers), None)
    if best is None:
        return record
    config = load_config(folder / "experiment.yaml")
    what = f"timing each layer of {record.experiment} in {best.policy} and float32…"
    with on_layers(what) if on_layers is not None else contextlib.nullcontext():
        timings = layer_timings(config, best, verbose=verbose)
    overflowing = _overflowing_layers(config, verbose) if best.sixteen_bit_dtype == "float16" else []
    chosen = islands(timings, overflowing)
    record = record.model_copy(update={"layers": timings, "island_layers": chosen})
    if not chosen:
        return record
    candidate = best.model_copy(update={"name": f"{best.name}+islands", "float32_layers": chosen})
    return record.model_copy(update={"candidates": [*record.candidates, candidate]})


def _overflowing_layers(config: ExperimentConfig, verbose: bool) -> list[str]:
    from mptrain.diagnostics.numerics import diagnose

    return diagnose(config, steps=2, verbose=verbose).overflowing_layers


def resume_plan(folder: Path) -> PlanRecord:
    record = load_record(folder, "plan", PlanRecord)
    if record.status == "finished":
        raise ConfigError(f"--resume {folder}: the plan has finished; nothing to resume")
    return record


def write_plan_file(record: PlanRecord, folder: Path, path: Path) -> str:
    """The experiment as plan chose to run it (the winner's settings in ordinary keys), with a
    header saying what was measured; returns what was written."""
    from mptrain.config import load_config, variant

    winner = next(c for c in record.candidates if c.name == record.winner)
    chosen = variant(load_config(folder / "experiment.yaml"), winner.settings)
    lines = [f"# mptrain plan for {record.experiment}: {record.winner} ({record.reason}).",
             f"# Measured {record.measured_at} on {record.machine}:",
             f"# {record.steps}-step trials from the same initial weights, tolerance "
             f"{record.tolerance_pct:g}% of float32's loss.", "# candidate: speed-up, verdict"]
    for t in record.trials:
        speed = f"{t.speedup:.2f}x" if t.speedup is not None else "-"
        lines.append(f"#   {t.candidate.name}: {speed}, {t.verdict}")
    lines += [f"#   {c.name}: not tried ({c.why_not or 'budget spent'})"
              for c in record.candidates if c.why_not or c in record.untried]
    lines.append(f"# The plan's folder: {folder}")
    lines.append("# Another machine may choose differently: run `mptrain plan` there.")
    text = "\n".join(lines) + "\n" + yaml.safe_dump(as_file_in(chosen, path.parent), sort_keys=False)
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"--out {path}: cannot write ({exc.strerror})") from None
    return text
