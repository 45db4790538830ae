"""Training with `Model.fit`, observed step by step through a Keras callback."""

from __future__ import annotations

import math

import keras  # this module is imported only when a fit run starts (training.make_loop)

from mptrain.data.pipeline import Batches
from mptrain.errors import ConfigError
from mptrain.training.compiled import step_loss
from mptrain.training.loss_scale import ScalingWatch
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import value_of


class FitLoop:
    """`Model.fit` / `Model.evaluate` of the model `training.make_loop` compiled. Under
    mixed_float16, `compile` keeps the LossScaleOptimizer we pass (Keras would otherwise wrap
    one with default settings), or a model's own compile has each of its optimizers wrapped
    (`scaling`: name → LossScaleOptimizer); and at the first step, each optimizer the step
    applied must have had its loss scaled: a model's own `train_step` that never calls
    `scale_loss` (even through a helper method) would train on gradients divided by the loss
    scale, in silence (`loss_scale.ScalingWatch`)."""

    def __init__(self, model, scaling: dict, class_weight):
        self.model, self.optimizer, self.class_weight = model, model.optimizer, class_weight
        self.scaling, self.watch = scaling, ScalingWatch(scaling)
        self.figures = StepFigures(model)

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        """One stream of every epoch's batches (see data/pipeline.py): with steps_per_epoch
        set, Keras keeps the iterator across epochs; shuffle=False, the stream is in order. A
        run resumed inside an epoch first finishes that epoch with its remaining steps."""
        callback = _MonitorCallback(monitor, batches, self)
        same = dict(class_weight=self.class_weight, callbacks=[callback], shuffle=False, verbose=0)
        if start_step:
            callback.first_step = start_step
            self.model.fit(batches.train_from(start_epoch, start_step, start_epoch + 1),
                           initial_epoch=start_epoch, epochs=start_epoch + 1,
                           steps_per_epoch=batches.steps_per_epoch - start_step, **same)
            start_epoch += 1
        if start_epoch < batches.epochs and not monitor.stop_requested:
            self.model.fit(batches.train_from(start_epoch, 0), initial_epoch=start_epoch,
                           epochs=batches.epochs, steps_per_epoch=batches.steps_per_epoch, **same)

    def evaluate(self, dataset) -> dict[str, float]:
        return self.figures.kept(_evaluated(self.model, dataset))

    @property
    def step_loss(self) -> str:
        """What the step's loss is (`StepFigures.described`; the summary's `step_loss`)."""
        return self.figures.described

    def check_scaling(self) -> None:
        """After the first step: every optimizer it applied scaled its loss (the class docstring)."""
        unscaled = self.watch.unscaled()
        if not unscaled:
            return
        cls = type(self.model).__name__
        applied = ", ".join(f"self.{name} without calling self.{name}.scale_loss(loss)" for name in unscaled)
        lines = " and ".join(f"scaled = self.{name}.scale_loss(loss)" for name in unscaled)
        raise ConfigError(
            f"policy mixed_float16 scales the loss, and {cls}'s train step applied {applied} "
            "first: its gradients would be divided by the loss scale (32,768 at first) and train "
            f"almost nothing. Inside the GradientTape add {lines} (each optimizer's own loss) and "
            "take tape.gradient(scaled, ...), as Keras' train_step does (under other policies "
            "scale_loss returns the loss as it is), or use mixed_bfloat16: no loss scaling")


class StepFigures:
    """What a step reports, and which of it is its loss. Keras' own step and compile's
    metrics report `loss`; a model's own step reports what it returns (a GAN's d_loss and
    g_loss; a distiller's student_loss, distillation_loss and accuracy), and a `loss` it
    never updated stays 0.0 in Keras' logs (its loss tracker counted nothing): that one is
    left out. The step's loss, what the monitor follows (divergence, the live line,
    steps.jsonl), is then the sum of the losses it reports (`described`)."""

    def __init__(self, model):
        self.tracker = step_loss(model)
        self.described = "loss"  # the step's loss, in words (the summary's `step_loss`)

    def read(self, logs: dict) -> tuple[float, dict[str, float]]:
        """The step's loss and its other figures, from Keras' logs after the step."""
        figures = self.kept({k: float(v) for k, v in logs.items()})
        if "loss" in figures:
            return figures.pop("loss"), figures
        losses = [k for k in figures if k.endswith("loss")] or list(figures)
        self.described = " + ".join(losses)
        return math.fsum(figures[k] for k in losses) if losses else math.nan, figures

    def kept(self, figures: dict[str, float]) -> dict[str, float]:
        """`figures` without a `loss` the step never tracked (Keras' tracker counted nothing)."""
        untracked = self.tracker is None or not float(self.tracker.count.numpy())
        return {k: v for k, v in figures.items() if not (k == "loss" and untracked)}


def _evaluated(model, dataset, prefix: str = "") -> dict[str, float]:
    results = model.evaluate(dataset, return_dict=True, verbose=0)
    return {f"{prefix}{k}": float(v) for k, v in results.items()}


class _MonitorCallback(keras.callbacks.Callback):
    """Feeds the monitor with each step's own loss, figures and loss scales, and each
    epoch's metrics with its validation, which the callback runs rather than fit: fit
    validates every epoch it ends, and one a run stopped early cut short is not
    (`TrainingMonitor.validates_epoch`)."""

    def __init__(self, monitor: TrainingMonitor, batches: Batches, loop: FitLoop):
        super().__init__()
        self.monitor, self.batches, self.loop = monitor, batches, loop
        self.first_step = 0  # > 0 while finishing an epoch a resumed run started inside
        self.tracker = loop.figures.tracker
        self.checked = False  # the first step's loss scaling (`FitLoop.check_scaling`)

    def on_epoch_begin(self, epoch, logs=None):
        self.monitor.epoch_begin(epoch, self.first_step)
        self.first_step = 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.tracker is not None:  # its value after the step is the step's own loss
            self.tracker.reset_state()
        self.monitor.step_begin()

    def on_train_batch_end(self, batch, logs=None):
        if not self.checked:
            self.loop.check_scaling()
            self.checked = True
        loss, figures = self.loop.figures.read(logs)
        # the scale of each optimizer the step applies (a GAN's two; not an unused one's)
        scales = {name: value_of(self.loop.scaling[name].dynamic_scale)
                  for name in self.loop.watch.applied}
        self.monitor.step_end(loss, self.batches.batch_size_at(self.monitor.step_in_epoch),
                              figures, scales or None)
        if self.monitor.stop_requested:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        logs = self.loop.figures.kept(dict(logs or {}))
        if self.batches.val is not None and self.monitor.validates_epoch:
            logs.update(self.loop.figures.kept(_evaluated(self.model, self.batches.val, "val_")))
        self.monitor.epoch_end(logs)
        if self.monitor.stop_requested:  # a signal during validation: stop before the next epoch
            self.model.stop_training = True
