"""What a run measured, as one typed `RunSummary` (from the records of `training/records.py`):
summary.json, `--json`, the renderers, compare's and plan's children and the benchmarks all
read it. The arithmetic that turns raw measurements into the numbers people compare
(step-time statistics, throughput, MFU) is here, once.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING, Literal

from pydantic import TypeAdapter

from mptrain.hardware.kernels import cached_kernels
from mptrain.model.flops import ForwardProfile, Peak, machine_peak
from mptrain.model.own_step import evaluates
from mptrain.model.size import MemoryStats
from mptrain.objective import Quality
from mptrain.precision.axes import ONEDNN_MODES
from mptrain.record import FrozenRecord
from mptrain.training.records import Status, StepRecord, StopKind

if TYPE_CHECKING:
    from mptrain.runs.experiment import Prepared
    from mptrain.training.monitor import TrainingMonitor

# Fewer timed steps than this and a median says little on a shared machine: no speed verdict.
MIN_TIMED_STEPS = 5


class StepTimes(FrozenRecord):
    """Step-time statistics in milliseconds over the *timed* steps: after the warm-up steps
    (tracing, compilation, first allocations) and over full batches only (a short last batch
    does less work, and under XLA its new shape compiles again)."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    timed_steps: int
    warmup_steps_excluded: int
    short_batches_excluded: int
    enough: bool  # at least MIN_TIMED_STEPS timed steps: enough for a speed comparison


def time_to_first_step(monitor, started_at: float) -> float | None:
    """The one-off costs: from the process's start to the end of the first step, whose own
    time is the tracing, XLA's compile and the first kernels' creation (None: no step ran)."""
    if monitor.first_start is None or not monitor.steps:
        return None
    return monitor.first_start + monitor.steps[0].seconds - started_at


def timed_steps(steps: list[StepRecord], warmup_steps: int) -> list[StepRecord]:
    """The steps whose times count (see `StepTimes`). When warm-up leaves nothing, the last
    full step is kept, so a run cut short still says how long its step took."""
    if not steps:
        return []
    full = max(r.examples for r in steps)
    kept = [r for r in steps[warmup_steps:] if r.examples == full]
    return kept or [next(r for r in reversed(steps) if r.examples == full)]


def step_times(steps: list[StepRecord], warmup_steps: int) -> StepTimes | None:
    import numpy as np  # here: `mptrain runs` reads summaries without it

    timed = timed_steps(steps, warmup_steps)
    if not timed:
        return None
    ms = sorted(r.seconds * 1000.0 for r in timed)
    short = sum(1 for r in steps[warmup_steps:] if r.examples != timed[0].examples)
    return StepTimes(
        median_ms=statistics.median(ms),
        p10_ms=float(np.percentile(ms, 10)),
        p90_ms=float(np.percentile(ms, 90)),
        mean_ms=statistics.fmean(ms),
        timed_steps=len(ms),
        warmup_steps_excluded=len(steps) - len(ms) - short,
        short_batches_excluded=short,
        enough=len(ms) >= MIN_TIMED_STEPS,
    )


class LossScaleStats(FrozenRecord):
    """Dynamic loss scaling under mixed_float16: where the scale ended, how many steps were
    skipped because a gradient was inf/NaN (each skip halves the scale), and how long it sat
    at or below 1, where scaling no longer protects small gradients (it shrinks them)."""

    final: float | None
    skipped_steps: int
    skip_rate: float  # skipped / steps run
    min_scale: float | None
    steps_at_floor: int  # steps with a scale <= 1


class QualityFigure(FrozenRecord):
    """The test figure an objective is judged by: accuracy for classifiers, AUC over several
    labels, mean IoU for a label per position, MAE for a regression (in the targets' own
    units when they were standardised)."""

    metric: str  # its key in test_metrics
    label: str  # as tables name it
    value: float | None
    higher_is_better: bool
    proportion: bool  # a share of the test examples: its noise is binomial


# metrics in the targets' units, which standardised targets divide by their deviation
TARGET_UNITS = ("mae", "mean_absolute_error", "root_mean_squared_error", "rmse")


class RunSummary(FrozenRecord):
    """summary.json. Every key is documented in docs/outputs.md (a test keeps the two in step)."""

    name: str
    status: Status
    policy: str
    policy_requested: str
    candidate: str | None = None  # the precision candidate, as plan and compare name it
    policy_reason: str
    compute_dtype: str
    variable_dtype: str
    output_dtype: str
    loop: str
    jit_compile: bool
    jit_compile_reason: str
    xla_optimizer_update: bool
    xla_optimizer_update_reason: str
    # the CPU's math library that ran (None: a GPU or TPU did the math), and what chose it
    math_library: Literal["onednn", "eigen"] | None = None
    math_library_reason: str = ""
    device: str
    distribution: str  # tf.distribute: how the run was placed
    replicas: int  # batch_size is the global batch, split across these
    dataset: str
    batch_size: int
    epochs_run: int
    steps_run: int
    stop_reason: str | None
    stopped_by: StopKind | None  # what stopped the run before its end, if anything
    step_time: StepTimes | None
    examples_per_sec: float | None
    flops_per_example: int | None
    achieved_tflops: float | None
    peak_tflops: float | None
    peak_unit: str | None
    peak_measured: bool = False  # the peak is this machine's fastest product measured (else nominal)
    mfu: float | None
    speed_warning: str | None
    notes: list[str]  # what mptrain did to the model (resized inputs, appended a float32 output...)
    # what the step's loss is (first_step_loss, the records' `loss`): "loss", the model's, or
    # for a step of the model's own that reports none, the sum of those it does ("d_loss + g_loss")
    step_loss: str = "loss"
    first_step_loss: float | None
    non_finite_loss_steps: int
    final_train_loss: float | None
    final_metrics: dict[str, float | None]
    test_loss: float | None
    test_accuracy: float | None
    test_metrics: dict[str, float | None]
    objective: str | None = None  # what kind of problem, its labels and loss (`objective`)
    quality: QualityFigure | None = None  # the test figure a verdict reads (`objective.kinds.Quality`)
    test_examples: int | None  # what the test figures were measured on
    loss_scale: LossScaleStats | None
    # several optimizers scaling their losses (a GAN's): each one's (`loss_scale`: the first's)
    loss_scales: dict[str, LossScaleStats] | None = None
    memory: MemoryStats
    wall_time_s: float  # its own work: time spent waiting for its turn (compare, plan) left out
    time_to_first_step_s: float | None  # to the first step's end: start, data, model, tracing, compiling
    turn_wait_s: float = 0.0  # how long it waited for other variants' turns (compare, plan)
    evaluation_s: float | None = None  # the final evaluation on the test set (None: not run)
    checkpoint_save_s: float | None = None  # the mean time a checkpoint save took (None: none)
    model_save_s: float | None = None  # saving the trained model, after this summary's clock
    tensorflow_version: str | None
    keras_version: str | None
    seed: int
    run_dir: str


def quality_of(objective, figures: dict[str, float], monitor: str | None = None) -> QualityFigure | None:
    """The figure a run is judged by, from its test `figures` (or, for a model Keras cannot
    evaluate, its last epoch's): the one `train.monitor` names, else the objective's quality;
    where `train.metrics` left the objective's own figure out (a multi-label model judged by
    AUC, given `metrics: [categorical_accuracy]` as keras.io's example gives it), the first
    figure the user named, else the loss: a figure the run has, never "n/a". None where
    nothing judges it (a GAN's losses are no quality: `objective.OwnStep`)."""
    wanted = objective.quality
    if monitor is not None:
        wanted = Quality.named(monitor)
    if wanted is None:
        return None
    if wanted.metric not in figures and monitor is None:
        named = next((k for k in figures if k != "loss" and not k.endswith("_loss")), "loss")
        wanted = Quality.named(named)
    value = finite_or_none(figures.get(wanted.metric))
    scale = getattr(objective.labels, "scale", None)
    if value is not None and scale is not None and wanted.metric in TARGET_UNITS and len(scale.std) == 1:
        value *= scale.std[0]
    return QualityFigure(metric=wanted.metric, label=wanted.label, value=value,
                         higher_is_better=wanted.higher_is_better, proportion=wanted.proportion)


def learned_nothing(quality: QualityFigure | None, stats, objective=None, raw_features=()) -> list[str]:
    """A regression's test MAE beside what always predicting the training targets' mean
    scores (`LabelStats.mean_mae`): a run that learned nothing exits 0 with a number that
    looks like any other. Its likely cause is named from what the run did: targets left
    unscaled (`objective.labels.scale` None: train.target_scaling none), features as stored
    (`raw_features`: data.normalize off), or else too few epochs or too high a rate (a
    CSV's house prices in the 100,000s, unscaled, ended at the mean's MAE, and the note
    blamed the features, which data.normalize had already standardised)."""
    baseline = getattr(stats, "mean_mae", ())
    if quality is None or quality.value is None or quality.metric not in TARGET_UNITS[:2] \
            or len(baseline) != 1 or quality.value < 0.9 * baseline[0]:
        return []
    labels = getattr(objective, "labels", None)
    causes = ([f"its targets were trained as stored (train.target_scaling: none), about {stats.mean[0]:,.6g} "
               "each: set train.target_scaling: standard (auto does, by default)"]
              if labels is not None and labels.scale is None and getattr(stats, "mean", ()) else [])
    if raw_features:
        causes.append("its features are on scales orders of magnitude apart (`mptrain lint` names "
                      "them): data.normalize standardises them")
    causes += ["too few epochs (train.epochs)", "too high a learning rate "
               "(train.optimizer.kwargs.learning_rate)"]
    return [f"test MAE {quality.value:,.4g} is no better than always predicting the training "
            f"targets' mean ({baseline[0]:,.4g}): the model learned nothing from its inputs. "
            f"Likely: {'; or '.join(causes)}"]


def output_losses_note(test: dict[str, float], examples: int, batch_size: int) -> list[str]:
    """Why a model's output losses need not add up to its test loss: Keras' `CompileLoss`
    weighs each batch's output loss by the batch's static size, unknown in a traced step, so
    every batch counts once, where the test loss weighs each by its examples (its
    `_loss_tracker`: `tf.shape`). Only a short last batch sets them apart."""
    outputs = [k for k in test if k.endswith("_loss")]
    if not outputs or examples % batch_size == 0:
        return []
    return [f"the output losses ({', '.join(outputs)}) are Keras' means over the test batches, "
            f"each batch counted once, and its test loss weighs each by its examples: with a last "
            f"batch of {examples % batch_size} beside batches of {batch_size}, their weighted sum "
            "differs from the test loss (a test set a multiple of train.batch_size makes them agree)"]


def throughput(times: StepTimes | None, batch_size: int, flops_per_example: int | None,
               peak: Peak | None) -> dict[str, float | None]:
    """The summary's speed keys. Steady state: a full batch per median step. A mean over all
    steps would let one recompilation dominate. MFU = achieved FLOP/s over the peak of the
    unit that runs the policy's matmuls (`peak`), so each policy is measured against its own
    ceiling."""
    speed = dict(examples_per_sec=None, achieved_tflops=None, mfu=None)
    if times is not None and times.median_ms > 0:
        speed["examples_per_sec"] = batch_size / times.median_ms * 1e3
        if flops_per_example:
            achieved = flops_per_example * speed["examples_per_sec"]
            speed["achieved_tflops"] = achieved / 1e12
            speed["mfu"] = achieved / peak.flops_per_second if peak else None
    return speed


def finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def summarize_run(session, profile: ForwardProfile, started_at: float) -> RunSummary:
    """The run's summary, built once at its end, from its `runner.TrainingSession`: what was
    decided (`session.prepared`), what training measured and how it ended, and the model's
    save; and the model's FLOPs (`profile`). Its wall time is the run's own work: another
    variant's turns (compare, plan) and the model's save are timed on their own."""
    prepared, monitor = session.prepared, session.monitor
    config, choice, machine = prepared.config, prepared.choice, prepared.machine
    flops_per_example = profile.training_flops
    test, saved_s, saves = session.test, session.model_save_s, session.checkpointer.save_seconds
    times = step_times(monitor.steps, config.train.warmup_steps)
    # a oneDNN math mode runs float32's matmuls in bfloat16: their ceiling is bfloat16's (a
    # float32+graph_bf16 run read 203% of float32's)
    matmuls = ("bfloat16" if config.train.math_mode in ONEDNN_MODES and machine.onednn_bfloat16
               else choice.compute_dtype)
    peak = None if machine.accelerated else machine_peak(machine.cpu, matmuls, cached_kernels(machine))
    last_epoch = monitor.epoch_records[-1] if monitor.epoch_records else None
    judged = test or (last_epoch.metrics if last_epoch and not evaluates(prepared.model) else {})
    quality = quality_of(prepared.objective, judged, config.train.monitor) if judged else None
    from mptrain.precision.policy import unlike_plain_keras

    return RunSummary(
        name=config.name,
        status=session.status,
        **_decided(prepared),
        batch_size=config.train.batch_size,
        epochs_run=len(monitor.epoch_records), steps_run=len(monitor.steps),
        stop_reason=monitor.stop_reason,
        stopped_by=monitor.stop_kind,
        step_time=times,
        **throughput(times, config.train.batch_size, flops_per_example, peak),
        flops_per_example=flops_per_example,
        peak_tflops=peak.flops_per_second / 1e12 if peak else None,
        peak_unit=peak.unit if peak else None, peak_measured=bool(peak and peak.measured),
        speed_warning=prepared.speed_warning,
        notes=[*prepared.notes, *session.notes,
               *unlike_plain_keras(choice, config.deterministic, prepared.objective.loss_name),
               *profile.notes(), *learned_nothing(quality, prepared.data.labels, prepared.objective,
                                                  prepared.data.raw_features),
               *(output_losses_note(test, prepared.data.test.size, config.train.batch_size) if test
                 else []),
               *([session.save_note] if session.save_note else [])],
        step_loss=prepared.loop.step_loss,
        first_step_loss=finite_or_none(monitor.steps[0].loss) if monitor.steps else None,
        non_finite_loss_steps=sum(finite_or_none(r.loss) is None for r in monitor.steps),
        final_train_loss=finite_or_none(last_epoch.metrics.get("loss")) if last_epoch else None,
        final_metrics={k: finite_or_none(v) for k, v in last_epoch.metrics.items()} if last_epoch else {},
        test_loss=finite_or_none(test.get("loss")), test_accuracy=finite_or_none(test.get("accuracy")),
        test_metrics={k: finite_or_none(v) for k, v in test.items()},
        objective=prepared.objective.describe(),
        quality=quality,
        test_examples=prepared.data.test.size if test else None,
        **loss_scale_keys(monitor), memory=prepared.memory.stats(),
        checkpoint_save_s=statistics.fmean(saves) if saves else None,
        wall_time_s=time.perf_counter() - started_at - session.waited_s - (saved_s or 0.0),
        turn_wait_s=session.waited_s, evaluation_s=session.evaluation_s, model_save_s=saved_s,
        time_to_first_step_s=time_to_first_step(monitor, started_at),
        tensorflow_version=machine.tensorflow_version, keras_version=machine.keras_version,
        seed=config.seed, run_dir=str(session.folder.path),
    )


def _decided(prepared: Prepared) -> dict:
    """What the run was set up as: its policy and candidate, dtypes, loop, XLA, device."""
    from mptrain.hardware.machine import describe_library, library_of
    from mptrain.model import output_dtype
    from mptrain.precision.candidates import candidate_name

    config, choice, machine = prepared.config, prepared.choice, prepared.machine
    on_cpu = not machine.accelerated
    return dict(
        math_library=library_of(machine.onednn) if on_cpu else None,
        math_library_reason=describe_library(machine.onednn, machine.cpu.flags,
                                             config.train.math_library) if on_cpu else "",
        policy=choice.name, policy_requested=choice.requested,
        candidate=candidate_name(config, choice.name),
        policy_reason=choice.reason,
        compute_dtype=choice.compute_dtype, variable_dtype=choice.variable_dtype,
        output_dtype=output_dtype(prepared.model),
        loop=config.train.loop,
        jit_compile=choice.jit_compile,
        jit_compile_reason=choice.jit_reason,
        xla_optimizer_update=choice.xla_optimizer_update,
        xla_optimizer_update_reason=choice.xla_optimizer_reason,
        device=machine.device_label,
        distribution=prepared.place.description,
        replicas=prepared.place.replicas,
        dataset=prepared.data.source,
    )


def loss_scale_keys(monitor: TrainingMonitor) -> dict:
    """The summary's `loss_scale` (the first loss-scaling optimizer's) and `loss_scales`
    (each one's, where several scale their losses)."""
    each = {name: loss_scale_stats(monitor, name) for name in monitor.loss_scales}
    return dict(loss_scale=next(iter(each.values()), None), loss_scales=each if len(each) > 1 else None)


def loss_scale_stats(monitor: TrainingMonitor, name: str) -> LossScaleStats:
    """One loss-scaling optimizer's figures, by its name on the model."""
    tracker = monitor.loss_scales[name]
    scales = [s for r in monitor.steps if (s := r.scale_of(name)) is not None]
    return LossScaleStats(
        final=tracker.scale, skipped_steps=tracker.skipped_steps,
        skip_rate=tracker.skipped_steps / len(monitor.steps) if monitor.steps else 0.0,
        min_scale=min(scales) if scales else None,
        steps_at_floor=sum(1 for s in scales if s <= 1.0))


class RunState(FrozenRecord):
    """summary.json while a run has no summary: `running` (with the process id, so a folder
    whose process died is recognisable), or ended without one (`failed`, or `interrupted`
    when a second Ctrl-C abandoned it)."""

    status: Literal["running", "failed", "interrupted"]
    name: str
    pid: int | None
    host: str
    started: str
    ended: str | None = None
    reason: str | None = None


# summary.json, in every state a run can be in
RunRecord = RunSummary | RunState
RUN_RECORD = TypeAdapter(RunRecord)
