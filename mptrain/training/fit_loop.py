"""Training with `Model.fit`, observed step by step through a Keras callback."""

from __future__ import annotations

import keras  # this module is imported only when a fit run starts (training.make_loop)

from mptrain.errors import MptrainError
from mptrain.policy import PolicyChoice
from mptrain.training import loss_scale_of
from mptrain.training.batches import Batches
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer_update import compile_optimizer_update


class FitLoop:
    """`Model.fit` / `Model.evaluate`. Under mixed_float16, `compile` keeps the
    LossScaleOptimizer we pass (Keras would otherwise wrap one with default settings); we
    check that it is the very one, because a silently replaced optimizer would train with
    other loss-scale settings than the experiment says."""

    def __init__(self, model, optimizer, loss, metrics, choice: PolicyChoice):
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=choice.jit_compile)
        if model.optimizer is not optimizer:
            raise MptrainError("internal error: Model.compile replaced the configured optimizer "
                               f"({type(optimizer).__name__}) by a {type(model.optimizer).__name__}")
        # Built now, not lazily in the first step: its state (and the loss scale) exists before
        # training, for the monitor to read and for checkpoints to hold.
        if choice.xla_optimizer_update:
            compile_optimizer_update(optimizer, model.trainable_variables)
        else:
            optimizer.build(model.trainable_variables)
        self.model, self.optimizer = model, optimizer

    def train(self, batches: Batches, monitor: TrainingMonitor) -> None:
        callback = _MonitorCallback(monitor, batches, loss_scale_of(self.optimizer))
        # One stream of every epoch's batches (see batches.py): with steps_per_epoch set, Keras
        # keeps the iterator across epochs. shuffle=False: the stream is already in order.
        self.model.fit(batches.train, epochs=batches.epochs, steps_per_epoch=batches.steps_per_epoch,
                       validation_data=batches.val, callbacks=[callback], shuffle=False, verbose=0)

    def evaluate(self, dataset) -> dict[str, float]:
        results = self.model.evaluate(dataset, return_dict=True, verbose=0)
        return {k: float(v) for k, v in results.items()}


class _MonitorCallback(keras.callbacks.Callback):
    """Feeds the monitor. Keras logs the epoch's running mean loss (weighted by batch size);
    the step's own loss is recovered from two consecutive means."""

    def __init__(self, monitor: TrainingMonitor, batches: Batches, loss_scale):
        super().__init__()
        self.monitor, self.batches, self.loss_scale = monitor, batches, loss_scale
        self._loss_sum = 0.0
        self._weight = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._loss_sum, self._weight = 0.0, 0
        self.monitor.epoch_begin(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        self.monitor.step_begin()

    def on_train_batch_end(self, batch, logs=None):
        running_mean = float(logs["loss"])
        size = self.batches.batch_size_at(batch)
        new_sum = running_mean * (self._weight + size)
        step_loss = (new_sum - self._loss_sum) / size
        self._loss_sum, self._weight = new_sum, self._weight + size
        metrics = {k: float(v) for k, v in logs.items() if k != "loss"}
        scale = None if self.loss_scale is None else float(self.loss_scale.numpy())
        self.monitor.step_end(step_loss, size, metrics, scale,
                              int(self.model.optimizer.iterations.numpy()))
        if self.monitor.stop_requested:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self.monitor.epoch_end(logs or {})
