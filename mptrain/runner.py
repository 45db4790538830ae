"""One experiment, end to end, in the guide's order.

Set the global dtype policy, build the model with a float32 output, wrap the optimizer in a
LossScaleOptimizer under mixed_float16, train with Model.fit or the custom loop, evaluate.
Everything that can fail on bad input happens before the run folder is created.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mptrain.config import ExperimentConfig
from mptrain.data import check_labels_fit_model, load_dataset
from mptrain.data.pipeline import make_batches
from mptrain.flops import count_training_flops
from mptrain.hardware import probe
from mptrain.memory import MemoryMeter
from mptrain.model import build_model, check_model_fits, output_dtype
from mptrain.policy import PolicyChoice, apply_policy, choose_policy, speed_warning, wrap_optimizer
from mptrain.preflight import check_experiment
from mptrain.run_folder import RunFolder
from mptrain.summary import EpochRecord, RunSummary, StepRecord, summarize_run
from mptrain.tf_runtime import import_tensorflow, seed_everything
from mptrain.training import loss_scale_of, make_loop
from mptrain.training.losses import build_loss, build_metrics
from mptrain.training.monitor import TrainingListener, TrainingMonitor
from mptrain.training.optimizer import build_optimizer


@dataclass
class RunResult:
    summary: RunSummary
    steps: list[StepRecord] = field(default_factory=list)
    epochs: list[EpochRecord] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return Path(self.summary.run_dir)


def run_experiment(
    config: ExperimentConfig,
    *,
    listeners: list[TrainingListener] | None = None,
    verbose: bool = False,
    initial_weights: Path | None = None,
    output_dir: Path | None = None,
    started_at: float | None = None,
    on_start: Callable[[PolicyChoice, str | None, list[str]], None] | None = None,
) -> RunResult:
    """Train and evaluate one experiment; write its run folder; return what it measured.

    `on_start(choice, speed_warning, notes)` is called once the policy and XLA choices are
    made and the model is built, before training, so a user learns what will run (and what is
    known to be slow) first.
    `initial_weights` (an .npz written by `save_initial_weights`) makes several runs start
    from identical weights; `output_dir` overrides `output.dir` (compare puts its variants
    in its own folder).
    """
    started_at = started_at if started_at is not None else time.perf_counter()
    check_experiment(config)  # missing files and impossible shapes, before TensorFlow's import
    tf = import_tensorflow(verbose)
    data = load_dataset(config.data, config.seed)
    check_labels_fit_model(data, config)
    check_model_fits(config, data.spec)
    machine = probe(tf, check_xla=False)
    choice = choose_policy(config.policy, config.train.jit_compile, machine,
                           config.train.xla_optimizer_update)
    batches = make_batches(data, config.train.batch_size, config.train.epochs, config.seed,
                           binary_labels=config.train.loss == "binary_crossentropy",
                           shuffle_buffer=getattr(config.data, "shuffle_buffer", 10_000))
    memory = MemoryMeter(tf, machine.memory_device).start()

    seed_everything(config.seed)
    apply_policy(choice.name)
    built = build_model(config, data.spec)
    model = built.model
    if initial_weights is not None:
        load_initial_weights(model, initial_weights)
    scale = config.train.loss_scale
    optimizer = wrap_optimizer(
        build_optimizer(config.train.optimizer, config.train.epochs * batches.steps_per_epoch),
        choice, scale.initial_scale, scale.dynamic_growth_steps)
    loop = make_loop(config.train.loop, model, optimizer, build_loss(config),
                     build_metrics(config), choice)

    warning = speed_warning(choice, machine)
    if on_start is not None:
        on_start(choice, warning, built.notes)
    folder = RunFolder.create(output_dir or config.output.dir, config.name)
    try:
        folder.write_config(config.to_yaml_dict(), _config_header(choice))
        folder.write_files(data.files)
        monitor = TrainingMonitor(
            epochs=config.train.epochs,
            steps_per_epoch=batches.steps_per_epoch,
            max_steps=config.train.max_steps,
            max_step_seconds=config.train.max_step_seconds,
            listeners=[*(listeners or []), folder],
            learning_rate=lambda: float(optimizer.learning_rate),
            initial_loss_scale=_current_scale(optimizer),
        )
        loop.train(batches, monitor)
        test = loop.evaluate(batches.test)
        summary = summarize_run(config, choice, machine, monitor, test,
                                output_dtype=output_dtype(model),
                                flops_per_example=count_training_flops(model),
                                dataset=data.source, speed_warning=warning, memory=memory.stats(),
                                notes=built.notes, started_at=started_at, run_dir=folder.path)
        folder.write_steps(monitor.steps)
        if config.output.save_model:
            folder.save_model(model)
        folder.write_summary(summary)
    except BaseException:
        folder.discard()
        raise
    return RunResult(summary, monitor.steps, monitor.epoch_records)


def save_initial_weights(config: ExperimentConfig, path: Path, verbose: bool = False) -> None:
    """Build the experiment's model once under float32 and save its weights (the guide's
    `initial_weights = model.get_weights()`), so every policy variant starts from them."""
    check_experiment(config)
    import_tensorflow(verbose)
    data = load_dataset(config.data, config.seed)
    check_labels_fit_model(data, config)
    check_model_fits(config, data.spec)
    seed_everything(config.seed)
    apply_policy("float32")
    np.savez(path, *build_model(config, data.spec).model.get_weights())


def load_initial_weights(model, path: Path) -> None:
    with np.load(path) as archive:
        weights = [archive[f"arr_{i}"] for i in range(len(archive.files))]
    model.set_weights([w.astype(v.dtype) for w, v in zip(weights, model.get_weights(), strict=True)])


def _current_scale(optimizer) -> float | None:
    scale = loss_scale_of(optimizer)
    return None if scale is None else float(scale.numpy())


def _config_header(choice: PolicyChoice) -> str:
    lines = ["# Resolved experiment, as run by mptrain."]
    if choice.requested != choice.name:
        lines.append(f"# policy: {choice.requested} resolved to {choice.name} ({choice.reason})")
    lines.append(f"# jit_compile: {choice.jit_compile} ({choice.jit_reason})")
    lines.append(f"# xla_optimizer_update: {choice.xla_optimizer_update} ({choice.xla_optimizer_reason})")
    return "\n".join(lines)
