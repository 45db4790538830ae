"""Training with `Model.fit`, observed step by step through a Keras callback."""

from __future__ import annotations

import keras  # this module is imported only when a fit run starts (training.make_loop)

from mptrain.data.pipeline import Batches
from mptrain.errors import ConfigError
from mptrain.training.compiled import step_loss
from mptrain.training.loss_scale import scale_variable, watch_scaling
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import value_of


class FitLoop:
    """`Model.fit` / `Model.evaluate` of the model `training.make_loop` compiled. Under
    mixed_float16, `compile` keeps the LossScaleOptimizer we pass (Keras would otherwise wrap
    one with default settings), and the first step must have scaled its loss: a model's own
    `train_step` that never calls `scale_loss` (even through a helper method) would train on
    gradients divided by the loss scale, in silence (`loss_scale.watch_scaling`)."""

    def __init__(self, model, optimizer, class_weight):
        self.model, self.optimizer, self.class_weight = model, optimizer, class_weight
        self.scaled = watch_scaling(optimizer)

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        """One stream of every epoch's batches (see data/pipeline.py): with steps_per_epoch
        set, Keras keeps the iterator across epochs; shuffle=False, the stream is in order. A
        run resumed inside an epoch first finishes that epoch with its remaining steps."""
        callback = _MonitorCallback(monitor, batches, scale_variable(self.optimizer), self.scaled)
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
        return _evaluated(self.model, dataset)


def _evaluated(model, dataset, prefix: str = "") -> dict[str, float]:
    results = model.evaluate(dataset, return_dict=True, verbose=0)
    return {f"{prefix}{k}": float(v) for k, v in results.items()}


class _MonitorCallback(keras.callbacks.Callback):
    """Feeds the monitor with each step's own loss, running metrics and loss scale, and each
    epoch's metrics with its validation, which the callback runs rather than fit: fit
    validates every epoch it ends, and one a run stopped early cut short is not
    (`TrainingMonitor.validates_epoch`)."""

    def __init__(self, monitor: TrainingMonitor, batches: Batches, loss_scale, scaled):
        super().__init__()
        self.monitor, self.batches, self.loss_scale, self.scaled = monitor, batches, loss_scale, scaled
        self.first_step = 0  # > 0 while finishing an epoch a resumed run started inside
        self.tracker = None

    def on_train_begin(self, logs=None):
        self.tracker = step_loss(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self.monitor.epoch_begin(epoch, self.first_step)
        self.first_step = 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.tracker is not None:  # its value after the step is the step's own loss
            self.tracker.reset_state()
        self.monitor.step_begin()

    def on_train_batch_end(self, batch, logs=None):
        if self.loss_scale is not None and not self.scaled():
            raise ConfigError(
                f"policy mixed_float16 scales the loss (a LossScaleOptimizer unscales every "
                f"gradient it applies) and {type(self.model).__name__}'s train step never called "
                "self.optimizer.scale_loss(loss): its gradients would be divided by the loss "
                "scale. Scale the loss before taking gradients, as Keras' own train_step does "
                "(loss = self.optimizer.scale_loss(loss)), or use mixed_bfloat16, which needs no "
                "loss scaling")
        metrics = {k: float(v) for k, v in logs.items() if k != "loss"}
        scale = None if self.loss_scale is None else value_of(self.loss_scale)
        self.monitor.step_end(float(logs["loss"]), self.batches.batch_size_at(self.monitor.step_in_epoch),
                              metrics, scale)
        if self.monitor.stop_requested:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        if self.batches.val is not None and self.monitor.validates_epoch:
            logs.update(_evaluated(self.model, self.batches.val, "val_"))
        self.monitor.epoch_end(logs)
        if self.monitor.stop_requested:  # a signal during validation: stop before the next epoch
            self.model.stop_training = True
