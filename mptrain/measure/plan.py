"""`mptrain plan`'s library: the fastest safe precision for this model on this machine, measured.

CPU flags and GPU compute capabilities say what a machine *has*; they do not say what is fast
for a given model: bfloat16 on a Xeon with AVX512_BF16 but no AMX was measured 1.9x slower
than float32 on the guide's MLP, and on AMX the same MLP runs 3x faster while a ResNet gains
1.15x. So plan measures:

1. Candidates this machine can run (`precision.candidates`): float32; mixed_bfloat16 through
   oneDNN and with XLA; mixed_float16 where it can be fast (Tensor Cores, or XLA on a CPU);
   on CPUs float32 with oneDNN's bfloat16 math and with TensorFlow's bfloat16 graph rewrite,
   and the math library TensorFlow does not run here (oneDNN on an AVX2-only CPU, where it
   leaves oneDNN off); on Ampere+ GPUs float32 without TF32. What cannot win here is skipped
   with its reason, read from the kernels of the model's own kinds of layer, which also order
   the rest, most promising first.
2. Float32 islands: for the most promising 16-bit candidate, each layer's forward and
   backward is timed in 16 bits and in float32 (`measure.islands`); the layers slower in 16
   bits, and under float16 those whose activations overflow, become `model.float32_layers`
   in one more candidate.
3. A trial of each, in turns (`measure.engine`), most promising first, float32 twice (its twin is
   the A/A test of the machine's noise); a trial that cannot be picked stops taking turns once
   its interval says so, and the trials end once the pick is decided (`trials.race`: a plan of
   the guide's MLP took 8 minutes running every trial to its end); no round starts after the
   budget: what was measured is judged.
4. The judgement (`measure.verdicts`): each candidate's speed-up over
   float32 beyond the twin's noise, its loss progress against float32's, no non-finite loss a
   loss scaler does not explain, and not slower over the experiment's whole length.
5. The choice (`trials.choose`), written as a runnable experiment (plan.yaml) whose header
   says what was measured, when and on which machine (`precision.planned`: `policy: auto`
   follows it there).
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
from typing import ClassVar

import yaml

from mptrain.config import ExperimentConfig, load_config, variant
from mptrain.config.batch_scaling import at_batch
from mptrain.config.loading import as_file_in
from mptrain.errors import ConfigError
from mptrain.hardware.kernels import plan_key
from mptrain.hardware.machine import CPU_FEATURES, Machine
from mptrain.measure.engine import past
from mptrain.measure.islands import LayerTiming, islands, layer_timings
from mptrain.measure.memory import too_big_alone
from mptrain.measure.plot import plot_study
from mptrain.measure.study import Measurement, Staging, StudyRecord, new_study, run_study, steps_of
from mptrain.measure.trials import choose, race
from mptrain.measure.variant import Variant
from mptrain.measure.verdicts import DEFAULT_TOLERANCE_PCT, TWIN, Rules, judge_rows
from mptrain.measure.whole_run import RunLength
from mptrain.precision.candidates import Candidate, candidate, file_label, model_candidates
from mptrain.precision.planned import plan_file_for, stamp
from mptrain.record import write_atomic
from mptrain.runs.resume import refuse_resume
from mptrain.telling import LOGGED, Telling
from mptrain.training.turns import planned_steps

DEFAULT_STEPS = 30
DEFAULT_BUDGET_MINUTES = 20.0
SLOWEST_RATIO = 2.0  # a trial stepping this many times float32's in a round is stopped: it cannot win
FIRST_STEP_RATIO = 4.0  # nor one whose first step (XLA compiling) takes this many times float32's
LAYERS_SHARE = 0.1  # of the budget, for timing layers (the heaviest first), and at most:
LAYERS_SECONDS = 90.0


class PlanRecord(StudyRecord):
    """plan.json."""

    KIND: ClassVar[str] = "plan"
    ROWS: ClassVar[str] = "trials"
    STAGED: ClassVar[str] = "trial.yaml"  # the experiment at a trial's length
    machine: str  # where it was measured, in words
    machine_key: str = ""  # the same, as `policy: auto` checks it (`hardware.kernels.plan_key`)
    measured_at: str
    steps: int
    tolerance_pct: float
    evaluate: bool
    budget_minutes: float
    race: bool = True  # a trial that cannot be picked stops taking turns, a decided plan ends
    experiment_steps: int = 0  # the experiment's own length, for the whole-run estimates
    train_examples: int = 0  # an epoch's, for a step limit at another batch (`at_batch`)
    experiment_eval_batches: int = 0  # its validation batches over its epochs, and its test's
    experiment_checkpoints: int = 0  # the checkpoints it saves
    candidates: list[Candidate]  # in the order tried; skipped ones carry why_not
    # the model's kinds of layer and their FLOP shares, whose kernels ordered the candidates
    kernel_kinds: dict[str, float] = {}
    batch_sizes: list[int] | None = None  # --batch-sizes (None: the experiment's, and 2x for one)
    cells_not_tried: list[str] = []  # candidates at a batch size that was not tried, and why
    trials: list[Variant] = []  # float32, its A/A twin, then each candidate tried, in that order
    layers: list[LayerTiming] = []
    island_layers: list[str] = []
    winner: str | None = None
    reason: str = ""
    plan_file: str | None = None

    def params(self) -> dict[str, str]:
        return {"plan.steps": str(self.steps), "plan.tolerance_pct": str(self.tolerance_pct),
                "plan.budget_minutes": str(self.budget_minutes), "plan.evaluate": str(self.evaluate)}

    def nothing_left(self) -> str | None:
        return "the plan has finished" if self.status == "finished" else None

    def turn_rules(self) -> dict[str, object]:
        return {"slowest_ratio": SLOWEST_RATIO, "first_step_ratio": FIRST_STEP_RATIO,
                # never stopped early: float32, and its twin whose spread is the noise floor
                "controls": frozenset({"float32", TWIN}),
                "rerun_failed": False,  # a failed trial stays failed: its row says why
                "race": race if self.race else None}

    def draw(self, path: Path) -> None:
        plot_study(self, path, f"mptrain plan: {self.experiment} → {self.winner} ({self.machine})",
                   self.layers)

    def closed(self, signal: int | None) -> tuple[PlanRecord, dict[str, str], dict[str, str]]:
        """Judged (`judge_plan`), the choice made (`trials.choose`), and unless interrupted
        the chosen experiment written where `plan_file` says."""
        record = judge_plan(self)
        winner, reason = choose(record.trials, [c.name for c in record.candidates if c.why_not])
        status = ("interrupted" if signal is not None else
                  "out of budget" if record.untried or record.cut else "finished")
        record = record.model_copy(update={"winner": winner, "reason": reason, "status": status})
        files = ({"plan.yaml": write_plan_file(record, Path(record.folder), Path(record.plan_file))}
                 if record.plan_file and status != "interrupted" else {})
        return record, files, {"winner": record.winner or ""}

    @property
    def untried(self) -> list[str]:
        """Trials never run, or stopped by an interrupt: what a resume runs (a trial that
        ended on its own, or failed, has its row and verdict)."""
        return [t.label for t in self.trials if t.summary is None and t.failed is None
                or t.summary is not None and t.summary.status == "interrupted"]

    @property
    def cut(self) -> list[str]:
        """Trials the budget stopped before their end (judged on the rounds they ran)."""
        return [t.label for t in self.trials if t.summary and t.summary.stopped_by == "budget"]


@dataclass(frozen=True)
class PlanSettings:
    """What a user asks of a plan: the candidates by name (None: every one this machine can run),
    steps per trial, the loss tolerance, the time budget, whether to judge test accuracy, and
    where plan.yaml goes (None: EXPERIMENT.plan.yaml beside the experiment's file, a
    built-in's in the current folder; nowhere for an experiment from a mapping)."""

    candidates: list[str] | None = None
    batch_sizes: list[int] | None = None  # None: the experiment's, and twice it for one 16-bit candidate
    steps: int = DEFAULT_STEPS
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    budget_minutes: float = DEFAULT_BUDGET_MINUTES
    evaluate: bool = False
    race: bool = True  # stop a trial once it cannot be picked, and the trials once the pick is decided
    out: Path | None = None
    sets: list[str] = field(default_factory=list)  # changes to the experiment (`--set`)

    def resumed(self, record: PlanRecord, folder: Path,
                experiment: str | ExperimentConfig | None) -> tuple[PlanRecord, list[str]]:
        """The plan in `folder` as this resume runs it, and what it applied: a budget and
        where plan.yaml goes are this resume's to set; anything that changes what the trials
        measure (the candidates, their steps, the tolerance, --eval, the experiment) is
        refused unless it is what the plan has (`runs.resume.refuse_resume`)."""
        default = PlanSettings()
        refuse_resume(folder, "plan", experiment, self.sets, options={
            "--candidates": ",".join(self.candidates) if self.candidates else None,
            "--batch-sizes": ",".join(map(str, self.batch_sizes)) if self.batch_sizes else None,
            **{flag: mine for flag, mine, theirs, unset in (
                ("--steps", self.steps, record.steps, default.steps),
                ("--tolerance", self.tolerance_pct, record.tolerance_pct, default.tolerance_pct),
                ("--eval", self.evaluate, record.evaluate, default.evaluate))
               if mine not in (theirs, unset)}})
        applied, said = {}, []
        if self.budget_minutes != default.budget_minutes:
            applied["budget_minutes"] = self.budget_minutes
            said.append(f"--budget {self.budget_minutes:g}: this resume's budget (the plan "
                        f"started with {record.budget_minutes:g} minutes)")
        if not self.race and record.race:
            applied["race"] = False
            said.append("--no-race: the trials left run to their ends")
        if self.out is not None and str(self.out) != record.plan_file:
            applied["plan_file"] = str(self.out)
            said.append(f"--out {self.out}: the plan's experiment is written there")
        return record.model_copy(update=applied), said

    def check(self) -> None:
        if self.tolerance_pct < 0:
            raise ConfigError(f"--tolerance {self.tolerance_pct:g}: give a percentage of float32's "
                              "loss progress, 0 or more")
        if self.budget_minutes <= 0:
            raise ConfigError(f"--budget {self.budget_minutes:g}: give the minutes plan may take, "
                              "more than 0")
        if self.steps < 8:
            raise ConfigError(f"--steps {self.steps}: a trial needs at least 8 steps to be timed")


def run_plan(experiment: str | ExperimentConfig | None, settings: PlanSettings = PlanSettings(), *,
             resume: Path | None = None, telling: Telling = LOGGED, verbose: bool = False,
             as_text: Callable[[PlanRecord], str] | None = None) -> Measurement:
    """`mptrain plan` and `mptrain.plan`: start a plan of the experiment named or given, or
    with `resume` finish the one in that folder, and run it to its choice within its budget
    (counted from now: staging, layer timings and trials alike): the float32 islands decided
    first, then the trials not yet run, in turns (`measure.study`)."""
    started = time.monotonic()
    if settings.out is not None:  # from where it was given, whatever a child's folder is
        settings = replace(settings, out=Path(settings.out).resolve())
    if resume is not None:
        record, said = settings.resumed(PlanRecord.load(resume), resume, experiment)
        for line in said:
            telling.say("resume", line)
    elif experiment is None:
        raise ConfigError("mptrain plan: give an experiment (CONFIG) or --resume PLAN_DIR")
    else:
        config = load_config(experiment, settings.sets)
        if settings.out is None:
            with contextlib.suppress(ConfigError):  # beside the experiment's file, when it has one
                settings = replace(settings, out=plan_file_for(config.source))
        record = start_plan(config, settings, verbose=verbose, status=telling.status)
    deadline = started + 60 * record.budget_minutes
    if not record.layers and record.untried and not past(deadline):
        seconds = min(LAYERS_SECONDS, LAYERS_SHARE * 60 * record.budget_minutes)
        record = _add_islands(record, seconds, telling.status, verbose)
        record.write()
    return run_study(record, telling, verbose, as_text, deadline)


def start_plan(config: ExperimentConfig, settings: PlanSettings = PlanSettings(), *,
               verbose: bool = False, status: Callable[[str], object] | None = None) -> PlanRecord:
    """A new plan (`study.new_study`): the candidates this machine can run (those named), each
    at its batch sizes, float32 and its A/A twin first; the trials run the experiment at a
    trial's length (trial.yaml). Bad input fails here, before any folder exists."""
    settings.check()

    def chosen(prepared) -> Staging:  # an unknown --candidates name fails here, too
        machine, config = prepared.machine, prepared.config
        found, kinds = model_candidates(prepared, settings.candidates, status)
        not_tried: list[str] = []
        cells = batch_cells(prepared, [c for c in found if c.why_not is None], settings.batch_sizes,
                            not_tried)
        per_epoch = prepared.batches.steps_per_epoch
        return Staging(_trials(cells), dict(
            machine=describe_machine(machine), machine_key=plan_key(machine),
            measured_at=datetime.now().isoformat(timespec="seconds"), steps=settings.steps,
            tolerance_pct=settings.tolerance_pct, evaluate=settings.evaluate, race=settings.race,
            budget_minutes=settings.budget_minutes,
            experiment_steps=planned_steps(config.train, per_epoch),
            train_examples=prepared.data.train.size, batch_sizes=settings.batch_sizes,
            cells_not_tried=not_tried, experiment_eval_batches=eval_batches(prepared),
            experiment_checkpoints=checkpoint_saves(config.train, per_epoch), candidates=found,
            kernel_kinds=kinds,
            plan_file=str(settings.out) if settings.out else None),
            trial_experiment(config, settings.steps, per_epoch, settings.evaluate), settings.steps)

    return new_study(PlanRecord, config, chosen, verbose)


def batch_cells(prepared, tried: list[Candidate], batch_sizes: list[int] | None,
                not_tried: list[str]) -> list[Candidate]:
    """Each candidate tried at each batch size (the batch axis: `axes.BatchSizeAxis`): by
    default the experiment's, and the guide's double for the most promising 16-bit policy
    (16-bit tensors take half the memory); with --batch-sizes every candidate at each size,
    and float32 at the experiment's batch (every cell is judged against it). A size beyond the
    training examples, or one the memory estimate says would not fit, is named in
    `not_tried` with why, and not run."""
    own, examples = prepared.config.train.batch_size, prepared.data.train.size
    if batch_sizes is None:
        best = next((c for c in tried if c.policy != "float32"), None)
        wanted = [*tried, *([best.changed(batch_size=2 * own)] if best is not None else [])]
    else:
        wanted = [c.changed(batch_size=b) for b in batch_sizes for c in tried]
        if not any(c.name == "float32" for c in wanted if c.batch_size == own):
            wanted.insert(0, candidate("float32"))
    cells = []
    for option in wanted:
        batch = option.batch_size or own
        why = (f"batch {batch} is more than the {examples:,} training examples" if batch > examples
               else too_big_alone(prepared, option.policy, batch) if batch != own else None)
        if why:
            not_tried.append(f"{option.name}: {why}")
        else:
            cells.append(option.changed(batch_size=None) if batch == own else option)
    return cells


def _trials(cells: list[Candidate]) -> list[Variant]:
    """The trials to run: float32, its A/A twin when there is a candidate to judge, then each
    cell (at another batch: its batch, which `study.new_study` turns into the changes)."""
    rows = [("float32", candidate("float32"))]
    if len(cells) > 1:
        rows.append((TWIN, candidate("float32")))
    rows += [(c.name, c) for c in cells if c.name != "float32"]
    return [Variant(label=label, candidate=c,
                    batch={"train.batch_size": c.batch_size} if c.batch_size else {})
            for label, c in rows]


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
    changes = {"train.epochs": math.ceil(steps / per_epoch), "train.max_steps": steps,
               "train.checkpoint": {"every_epochs": None, "every_steps": None, "keep": 1}}
    if not evaluate:
        changes["data.max_test_examples"] = 2 * config.train.batch_size
    return variant(config, changes)


def describe_machine(machine: Machine) -> str:
    if machine.gpus:
        what = machine.gpus[0].describe()
    elif machine.tpu:
        what = "TPU"
    else:
        has = [label for flag, label in CPU_FEATURES.items() if flag in machine.cpu.flags]
        what = (f"{machine.cpu.name}, {machine.cpu.physical_cores} cores, "
                f"{', '.join(has) or 'no AVX-512'}{'' if 'AMX-BF16' in has else ' (no AMX)'}")
    return f"{what}; TensorFlow {machine.tensorflow_version}"


def judge_plan(record: PlanRecord) -> PlanRecord:
    """Every trial judged (`verdicts.judge_rows`) on its runs' step records, with the plan's
    tolerance, and the experiment's length for the whole-run estimate, the process's start
    and exit taken as the median over the trials' processes (the same program for each: one
    trial's exit once took 46 s longer)."""
    steps = steps_of(record.trials)
    overheads = [t.overhead_s for t in record.trials if t.overhead_s is not None]
    length = RunLength(record.experiment_steps, record.experiment_eval_batches,
                       record.experiment_checkpoints,
                       statistics.median(overheads) if overheads else 0.0)
    rules = Rules(record.tolerance_pct, record.evaluate, record.turn_steps, record.input_ms_per_batch,
                  length)
    return record.model_copy(update={"trials": judge_rows(record.trials, steps, rules)})


def _add_islands(record: PlanRecord, seconds: float, on_layers, verbose: bool) -> PlanRecord:
    """The most promising 16-bit candidate (the first listed: by this machine's measured
    kernels) with its slow (or overflowing) layers kept in float32, as one more trial, so it
    runs in the same rounds as the others. Decided before the trials from each layer's own
    timing, in 16 bits and in float32, the heaviest first, for at most `seconds`."""
    # (its layers are timed in this process, in its math library: not a candidate of the other)
    best = next((t.candidate for t in record.trials if t.candidate.sixteen_bit
                 and t.candidate.policy != "float32" and not t.candidate.float32_layers
                 and t.candidate.math_library == "default"), None)
    if best is None:
        return record
    folder = Path(record.folder)
    config = load_config(folder / "experiment.yaml")
    what = f"timing each layer of {record.experiment} in {best.policy} and float32…"
    with on_layers(what) if on_layers is not None else contextlib.nullcontext():
        timings = layer_timings(config, best, seconds, verbose=verbose)
    overflowing = []
    if best.sixteen_bit_dtype == "float16":
        from mptrain.diagnostics.numerics import diagnose

        overflowing = diagnose(config, steps=2, verbose=verbose).overflowing_layers
    chosen = islands(timings, overflowing)
    record = record.model_copy(update={"layers": timings, "island_layers": chosen})
    if not chosen:
        return record
    option = best.changed(float32_layers=chosen, batch_size=None)  # at the experiment's batch
    trial = Variant(label=option.name, candidate=option,
                    run_dir=str(folder / f"{record.experiment}-{file_label(option.name)}"))
    return record.model_copy(update={"candidates": [*record.candidates, option],
                                     "trials": [*record.trials, trial]})


def write_plan_file(record: PlanRecord, folder: Path, path: Path) -> str:
    """The experiment as plan chose to run it (the winner's settings in ordinary keys), with a
    header saying what was measured, and the stamp `policy: auto` reads (`precision.planned`);
    returns what was written."""
    winner = next(t for t in record.trials if t.label == record.winner)
    experiment = load_config(folder / "experiment.yaml")
    batch = winner.batch_size
    changes = at_batch(experiment, batch, record.experiment_steps, record.train_examples) if batch else {}
    # the math library the pick ran, named: a run that follows the plan runs what was measured,
    # whatever its shell's TF_ENABLE_ONEDNN_OPTS says (`precision.planned`)
    ran = winner.summary.math_library if winner.summary is not None else None
    # (but for a oneDNN math mode named where oneDNN was off: it ran as plain float32)
    moot = winner.candidate.needs_onednn and ran == "eigen"
    if winner.candidate.math_library == "default" and ran is not None and not moot:
        changes["train.math_library"] = ran
    chosen = variant(experiment, {**winner.candidate.settings, **changes})
    lines = [f"# mptrain plan for {record.experiment}: {record.winner} ({record.reason}).",
             f"# Measured {record.measured_at} on {record.machine}:",
             f"# {record.steps}-step trials from the same initial weights, in turns, tolerance "
             f"{record.tolerance_pct:g}% of float32's loss progress.", "# trial: speed-up, verdict"]
    for t in record.trials:
        speed = f"{t.speedup:.2f}x" if t.speedup is not None else "-"
        lines.append(f"#   {t.label}: {speed}, {t.verdict.words()}")
    lines += [f"#   {c.name}: not tried ({c.why_not})" for c in record.candidates if c.why_not]
    lines += [f"#   {cell}" for cell in record.cells_not_tried]
    lines += [f"#   {label}: not tried (the budget was spent)" for label in record.untried]
    lines.append(f"# The plan's folder: {folder}")
    lines.append("# `policy: auto` runs this plan's pick on the machine it was measured on; "
                 "another machine may choose differently: run `mptrain plan` there.")
    lines.append(stamp(record.machine_key, winner.label,
                       experiment.train.batch_size if batch else None))
    text = "\n".join(lines) + "\n" + yaml.safe_dump(as_file_in(chosen, path.parent), sort_keys=False)
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"--out {path}: cannot write ({exc.strerror})") from None
    return text
