"""One experiment, end to end, in the guide's order.

Set the global dtype policy, build the model with a float32 output, wrap the optimizer in a
LossScaleOptimizer under mixed_float16, train with Model.fit or the custom loop, evaluate.
Everything that can fail on bad input happens before the run folder is created.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mptrain.config import ExperimentConfig
from mptrain.data import check_labels_fit_model, load_dataset
from mptrain.data.pipeline import make_batches
from mptrain.diagnostics.lint import lint, worth_saying
from mptrain.distribute import placement, prepare_devices, scope
from mptrain.errors import RunAbandoned
from mptrain.flops import forward_profile
from mptrain.hardware import probe
from mptrain.memory import MemoryMeter
from mptrain.model import build_model, check_model_fits, output_dtype
from mptrain.policy import PolicyChoice, apply_policy, choose_policy, speed_warning, wrap_optimizer
from mptrain.preflight import check_batch_fits, check_experiment, check_sizes
from mptrain.run_folder import RunFolder
from mptrain.summary import EpochRecord, RunSummary, StepRecord, summarize_run
from mptrain.tf_runtime import import_tensorflow, seed_everything
from mptrain.training import make_loop
from mptrain.training.guard import stop_on_signals
from mptrain.training.losses import build_loss, build_metrics
from mptrain.training.monitor import TrainingListener
from mptrain.training.optimizer import build_optimizer
from mptrain.training.session import TrainingSession


@dataclass
class RunResult:
    summary: RunSummary
    steps: list[StepRecord] = field(default_factory=list)
    epochs: list[EpochRecord] = field(default_factory=list)
    signal: int | None = None  # the signal that interrupted the run

    @property
    def run_dir(self) -> Path:
        return Path(self.summary.run_dir)


def run_experiment(
    config: ExperimentConfig,
    *,
    resume: Path | None = None,
    listeners: list[TrainingListener] | None = None,
    verbose: bool = False,
    initial_weights: Path | None = None,
    output_dir: Path | None = None,
    started_at: float | None = None,
    on_start: Callable[[PolicyChoice, str | None, list[str]], None] | None = None,
) -> RunResult:
    """Train and evaluate one experiment; write its run folder; return what it measured.

    `resume` continues the run in that folder from its latest checkpoint.
    `on_start(choice, speed_warning, notes)` is called once the policy and XLA choices are
    made and the model is built, before training, so a user learns what will run (and what is
    known to be slow) first. `initial_weights` (an .npz written by `save_initial_weights`)
    makes several runs start from identical weights; `output_dir` overrides `output.dir`
    (compare puts its variants in its own folder).
    """
    started_at = started_at if started_at is not None else time.perf_counter()
    check_experiment(config)  # missing files and impossible shapes, before TensorFlow's import
    tf = import_tensorflow(verbose)
    prepare_devices(config.distribute, tf)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    data = load_dataset(config.data, config.seed)
    check_labels_fit_model(data, config)
    check_model_fits(config, data.spec)
    check_sizes(config, data.spec)
    check_batch_fits(config, data.train.size)
    machine = probe(tf, check_xla=False)
    place = placement(config.distribute, tf)
    choice = choose_policy(config.policy, config.train.jit_compile, machine,
                           config.train.xla_optimizer_update, replicas=place.replicas)
    batches = make_batches(data, config.train.batch_size, config.train.epochs, config.seed,
                           binary_labels=config.train.loss == "binary_crossentropy",
                           shuffle_buffer=getattr(config.data, "shuffle_buffer", 10_000))
    memory = MemoryMeter(tf, machine.memory_device).start()

    seed_everything(config.seed)
    apply_policy(choice.name)
    with scope(place):  # model, optimizer, metrics (and checkpoints) live on the replicas
        built = build_model(config, data.spec)
        model = built.model
        if initial_weights is not None:
            load_initial_weights(model, initial_weights)
        scale = config.train.loss_scale
        optimizer = wrap_optimizer(
            build_optimizer(config.train.optimizer, config.train.epochs * batches.steps_per_epoch),
            choice, scale.initial_scale, scale.dynamic_growth_steps)
        loop = make_loop(config.train.loop, model, optimizer, build_loss(config),
                         build_metrics(config), choice, place.strategy)

    profile = forward_profile(model)
    findings = worth_saying(lint(model, config, choice, machine, profile, built.notes))
    warning = speed_warning(choice, machine)
    if on_start is not None:
        on_start(choice, warning, built.notes + [f"lint: {f}" for f in findings])
    # only the chief writes the run; other workers train into a scratch folder
    parent = (output_dir or config.output.dir) if place.chief else Path(tempfile.mkdtemp())
    folder = RunFolder(resume) if resume else RunFolder.create(parent, config.name)
    folder.mark_running(config.name)
    try:
        folder.write_config(config.to_yaml_dict(), _config_header(choice))
        folder.write_files(data.files)
        with scope(place):
            session = TrainingSession.open(config, folder, model, optimizer, batches,
                                           listeners or [], resume=resume is not None)
        monitor = session.monitor
        with stop_on_signals(monitor):
            loop.train(batches, monitor, session.start.epoch, session.start.step)
        session.close()
        # an interrupted run is not evaluated: its user wants it to stop, now
        test = {} if monitor.stop_status == "interrupted" else loop.evaluate(batches.test)
        summary = summarize_run(config, choice, machine, monitor, test,
                                output_dtype=output_dtype(model),
                                flops_per_example=3 * profile.flops,
                                dataset=data.source, speed_warning=warning, memory=memory.stats(),
                                notes=built.notes + session.guard.recoveries,
                                started_at=started_at, run_dir=folder.path,
                                distribution=place.description, replicas=place.replicas)
        folder.flush_steps()
        if config.output.save_model and summary.status == "finished":
            folder.save_model(model)
        folder.write_summary(summary)
    except KeyboardInterrupt:
        folder.write_status("interrupted", "abandoned by a second Ctrl-C; the last checkpoint "
                            "is kept: resume from it")
        raise RunAbandoned(folder.path) from None
    except BaseException as exc:
        folder.write_status("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if not place.chief:
            shutil.rmtree(parent, ignore_errors=True)
    return RunResult(summary, monitor.steps, monitor.epoch_records, monitor.signal)


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


def _config_header(choice: PolicyChoice) -> str:
    lines = ["# Resolved experiment, as run by mptrain."]
    if choice.requested != choice.name:
        lines.append(f"# policy: {choice.requested} resolved to {choice.name} ({choice.reason})")
    lines.append(f"# jit_compile: {choice.jit_compile} ({choice.jit_reason})")
    lines.append(f"# xla_optimizer_update: {choice.xla_optimizer_update} ({choice.xla_optimizer_reason})")
    return "\n".join(lines)
