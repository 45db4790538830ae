"""Training with `Model.fit`, observed step by step through a Keras callback."""

from __future__ import annotations

import keras  # this module is imported only when a fit run starts (runner._loop_class)

from mptrain.errors import MptrainError
from mptrain.training.batches import Batches
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer_update import compile_optimizer_update


class FitLoop:
    """`Model.fit` / `Model.evaluate`. Under mixed_float16, `compile` keeps the
    LossScaleOptimizer we pass (Keras would otherwise wrap one with default settings); we
    check that it is really there, because without it float16 gradients silently underflow."""

    def __init__(self, model, optimizer, loss, metrics, jit_compile: bool, loss_scaling: bool,
                 xla_optimizer_update: bool = False):
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=jit_compile)
        if loss_scaling and not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
            raise MptrainError("internal error: mixed_float16 model compiled without loss scaling")
        if xla_optimizer_update:
            compile_optimizer_update(model.optimizer, model.trainable_variables)
        self.model = model
        self.loss_scaling = loss_scaling

    @property
    def optimizer(self):
        return self.model.optimizer

    def train(self, batches: Batches, epochs: int, monitor: TrainingMonitor) -> None:
        callback = _MonitorCallback(monitor, batches, self.loss_scaling)
        # shuffle=False: the dataset shuffles itself, seeded (see batches.py).
        self.model.fit(batches.train, epochs=epochs, validation_data=batches.val,
                       callbacks=[callback], shuffle=False, verbose=0)

    def evaluate(self, dataset) -> dict[str, float]:
        results = self.model.evaluate(dataset, return_dict=True, verbose=0)
        return {k: float(v) for k, v in results.items()}


class _MonitorCallback(keras.callbacks.Callback):
    """Feeds the monitor. Keras logs the epoch's running mean loss (weighted by batch size);
    the step's own loss is recovered from two consecutive means."""

    def __init__(self, monitor: TrainingMonitor, batches: Batches, loss_scaling: bool):
        super().__init__()
        self.monitor, self.batches, self.loss_scaling = monitor, batches, loss_scaling
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
        if self.loss_scaling:
            optimizer = self.model.optimizer
            self.monitor.step_end(step_loss, float(optimizer.dynamic_scale.numpy()),
                                  int(optimizer.iterations.numpy()), metrics)
        else:
            self.monitor.step_end(step_loss, metrics=metrics)
        if self.monitor.stop_requested:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self.monitor.epoch_end(logs or {})
