"""One experiment, end to end: config → data → policy → model → training loop → results.

This is the sequence the guide walks through, in one place:
set the global dtype policy, build the model with a float32 output, compile (Model.fit wraps
the optimizer in a LossScaleOptimizer under mixed_float16) or write the custom loop, train,
evaluate. Everything that can fail on bad input happens before the run folder is created.
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mptrain.config import ExperimentConfig
from mptrain.data import load_dataset
from mptrain.errors import DataError
from mptrain.hardware import Machine, peak_flops, probe
from mptrain.model import (
    build_loss,
    build_metrics,
    build_model,
    build_optimizer,
    count_training_flops,
    output_dtype,
)
from mptrain.policy import PolicyChoice, apply_policy, choose_policy, speed_warning
from mptrain.run_folder import RunFolder
from mptrain.tf_runtime import import_tensorflow, seed_everything
from mptrain.timing import summarize
from mptrain.training.batches import make_batches
from mptrain.training.monitor import EpochRecord, StepRecord, TrainingListener, TrainingMonitor


@dataclass
class RunResult:
    """Everything a run measured; `summary` is what summary.json and `--json` hold."""

    summary: dict[str, Any]
    run_dir: Path
    steps: list[StepRecord] = field(default_factory=list)
    epochs: list[EpochRecord] = field(default_factory=list)


def run_experiment(
    config: ExperimentConfig,
    *,
    listeners: list[TrainingListener] | None = None,
    verbose: bool = False,
    initial_weights: Path | None = None,
    output_dir: Path | None = None,
    started_at: float | None = None,
    on_start: Callable[[PolicyChoice, str | None], None] | None = None,
) -> RunResult:
    """Train and evaluate one experiment; write its run folder; return what it measured.

    `on_start(choice, speed_warning)` is called once the policy and XLA choices are made and
    before training, so a user learns what will run (and what is known to be slow) first.
    `initial_weights` (an .npz written by `save_initial_weights`) makes several runs start
    from identical weights; `output_dir` overrides `output.dir` (compare puts its variants
    in its own folder).
    """
    started_at = started_at if started_at is not None else time.perf_counter()
    # Data first: a missing file is reported before paying for TensorFlow's import.
    data = load_dataset(config.data, config.seed)
    if data.num_classes_seen > config.model.num_classes and config.train.loss != "binary_crossentropy":
        raise DataError(
            f"{data.source}: labels go up to {data.num_classes_seen - 1} but model.num_classes is "
            f"{config.model.num_classes}; set model.num_classes to at least {data.num_classes_seen}"
        )
    tf = import_tensorflow(verbose)

    machine = probe(tf, check_xla=False)
    choice = choose_policy(config.policy, config.train.jit_compile, machine,
                           config.train.xla_optimizer_update)

    seed_everything(config.seed)
    apply_policy(choice.name)
    model = build_model(config.model, data.input_shape)
    if initial_weights is not None:
        load_initial_weights(model, initial_weights)
    optimizer = build_optimizer(config.train.optimizer, choice.loss_scaling, config)
    loop_cls = _loop_class(config.train.loop)
    loop = loop_cls(model, optimizer, build_loss(config), build_metrics(config),
                    jit_compile=choice.jit_compile, loss_scaling=choice.loss_scaling,
                    xla_optimizer_update=choice.xla_optimizer_update)
    batches = make_batches(data, config.train.batch_size, config.seed,
                           binary_labels=config.train.loss == "binary_crossentropy")

    warning = speed_warning(choice, machine)
    if on_start is not None:
        on_start(choice, warning)
    folder = RunFolder.create(output_dir or config.output.dir, config.name)
    try:
        folder.write_config(config.to_yaml_dict(), _config_header(choice))
        monitor = TrainingMonitor(
            epochs=config.train.epochs,
            steps_per_epoch=batches.steps_per_epoch,
            loss_scaling=choice.loss_scaling,
            max_steps=config.train.max_steps,
            max_step_seconds=config.train.max_step_seconds,
            listeners=[*(listeners or []), folder],
        )
        _reset_device_peak(tf, machine)
        loop.train(batches, config.train.epochs, monitor)
        test = loop.evaluate(batches.test)
        summary = _summary(config, choice, machine, monitor, batches, test, model=model,
                           source=data.source, speed_warning=warning, started_at=started_at,
                           device_peak=_device_peak(tf, machine))
        folder.write_steps(monitor.steps)
        if config.output.save_model:
            folder.save_model(model)
        summary["run_dir"] = str(folder.path)
        folder.write_summary(summary)
    except BaseException:
        folder.discard()
        raise
    return RunResult(summary, folder.path, monitor.steps, monitor.epoch_records)


def _loop_class(name: str):
    if name == "custom":
        from mptrain.training.custom_loop import CustomLoop

        return CustomLoop
    from mptrain.training.fit_loop import FitLoop

    return FitLoop


def save_initial_weights(config: ExperimentConfig, path: Path, verbose: bool = False) -> None:
    """Build the experiment's model once under float32 and save its weights (the guide's
    `initial_weights = model.get_weights()`), so every policy variant starts from them."""
    data_shape = _input_shape(config)
    import_tensorflow(verbose)
    seed_everything(config.seed)
    apply_policy("float32")
    model = build_model(config.model, data_shape)
    np.savez(path, *model.get_weights())


def load_initial_weights(model, path: Path) -> None:
    with np.load(path) as archive:
        weights = [archive[f"arr_{i}"] for i in range(len(archive.files))]
    model.set_weights([w.astype(v.dtype) for w, v in zip(weights, model.get_weights(), strict=True)])


def _input_shape(config: ExperimentConfig) -> tuple[int, ...]:
    if config.data.dataset == "synthetic":
        return tuple(config.data.synthetic.input_shape)
    return load_dataset(config.data, config.seed).input_shape


def _config_header(choice: PolicyChoice) -> str:
    lines = ["# Resolved experiment, as run by mptrain."]
    if choice.requested != choice.name:
        lines.append(f"# policy: {choice.requested} resolved to {choice.name} ({choice.reason})")
    lines.append(f"# jit_compile: {choice.jit_compile} ({choice.jit_reason})")
    lines.append(f"# xla_optimizer_update: {choice.xla_optimizer_update} ({choice.xla_optimizer_reason})")
    return "\n".join(lines)


def _device_name(machine: Machine) -> str:
    if machine.tpu:
        return "TPU"
    if machine.gpus:
        return f"GPU: {machine.gpus[0].name}"
    return f"CPU: {machine.cpu.model}"


def _memory_device(machine: Machine) -> str:
    return "GPU:0" if machine.gpus else "CPU:0"


def _reset_device_peak(tf, machine: Machine) -> None:
    # Some allocators keep no statistics (a CPU with oneDNN off): then there is nothing to reset.
    with contextlib.suppress(ValueError, RuntimeError):
        tf.config.experimental.reset_memory_stats(_memory_device(machine))


def _device_peak(tf, machine: Machine) -> int | None:
    try:
        return int(tf.config.experimental.get_memory_info(_memory_device(machine))["peak"])
    except (ValueError, RuntimeError):
        return None


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _summary(config: ExperimentConfig, choice: PolicyChoice, machine: Machine,
             monitor: TrainingMonitor, batches, test: dict[str, float], *, model, source: str,
             speed_warning: str | None, started_at: float,
             device_peak: int | None) -> dict[str, Any]:
    """summary.json: what ran, how fast, how well (keys documented in the README)."""
    flops_per_example = count_training_flops(model)
    stats = summarize([r.seconds for r in monitor.steps], config.train.warmup_steps)
    first_step = monitor.timer.first_start
    examples_per_sec = achieved = None
    if stats is not None and stats.median_ms > 0:
        # Steady state: a full batch per median step. A mean over all steps would let one
        # recompilation (XLA meets the short last batch) dominate the throughput.
        examples_per_sec = min(config.train.batch_size, batches.train_examples) / stats.median_ms * 1e3
        achieved = flops_per_example * examples_per_sec / 1e12
    peak = None if machine.gpus or machine.tpu else peak_flops(machine.cpu, choice.compute_dtype)
    last_epoch = monitor.epoch_records[-1] if monitor.epoch_records else None
    return {
        "name": config.name,
        "policy": choice.name,
        "policy_requested": choice.requested,
        "policy_reason": choice.reason,
        "compute_dtype": choice.compute_dtype,
        "variable_dtype": choice.variable_dtype,
        "output_dtype": output_dtype(model),
        "loop": config.train.loop,
        "jit_compile": choice.jit_compile,
        "jit_compile_reason": choice.jit_reason,
        "xla_optimizer_update": choice.xla_optimizer_update,
        "xla_optimizer_update_reason": choice.xla_optimizer_reason,
        "device": _device_name(machine),
        "dataset": source,
        "batch_size": config.train.batch_size,
        "epochs_run": len(monitor.epoch_records),
        "steps_run": len(monitor.steps),
        "bounded": monitor.stop_reason,
        "step_time_ms": stats.to_dict() if stats else None,
        "timed_steps": stats.timed_steps if stats else 0,
        "warmup_steps_excluded": stats.warmup_steps if stats else 0,
        "examples_per_sec": examples_per_sec,
        "flops_per_example": flops_per_example,
        "achieved_tflops": achieved,
        "peak_tflops": peak / 1e12 if peak else None,
        "mfu": achieved * 1e12 / peak if achieved is not None and peak else None,
        "speed_warning": speed_warning,
        "first_step_loss": monitor.steps[0].loss if monitor.steps else None,
        "non_finite_loss_steps": sum(1 for r in monitor.steps if not math.isfinite(r.loss)),
        "final_train_loss": last_epoch.metrics.get("loss") if last_epoch else None,
        "final_metrics": last_epoch.metrics if last_epoch else {},
        "test_loss": test.get("loss"),
        "test_accuracy": test.get("accuracy"),
        "test_metrics": test,
        "loss_scale": (
            {"final": monitor.loss_scale, "skipped_steps": monitor.skipped_steps}
            if choice.loss_scaling else None
        ),
        "peak_memory_bytes": _peak_rss_bytes(),
        "device_peak_memory_bytes": device_peak,
        "wall_time_s": time.perf_counter() - started_at,
        "time_to_first_step_s": first_step - started_at if first_step is not None else None,
        "tensorflow_version": machine.tensorflow_version,
        "keras_version": machine.keras_version,
        "seed": config.seed,
    }

