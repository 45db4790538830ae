"""Training with `Model.fit`, observed step by step through a Keras callback."""

from __future__ import annotations

import keras  # this module is imported only when a fit run starts (training.make_loop)

from mptrain.data.pipeline import Batches
from mptrain.errors import MptrainError
from mptrain.precision.policy import PolicyChoice
from mptrain.training.class_weights import weight_per_class, weighted_loss
from mptrain.training.loss_scale import scale_variable
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import build_optimizer_state, value_of

BATCH_LOSS = "batch_loss"


class FitLoop:
    """`Model.fit` / `Model.evaluate`. Under mixed_float16, `compile` keeps the
    LossScaleOptimizer we pass (Keras would otherwise wrap one with default settings); we
    check that it is the very one, because a silently replaced optimizer would train with
    other loss-scale settings than the experiment says."""

    def __init__(self, model, optimizer, objective, choice: PolicyChoice, strategy=None):
        """`objective`: the loss, metrics and class weights (`training.Objective`)."""
        # Model.fit distributes itself: a model compiled in a strategy's scope trains under it
        loss, metrics = objective.loss, objective.metrics
        # Keras logs only the epoch's running mean of the loss, which one NaN (a step skipped
        # under loss scaling) turns into NaN for the rest of the epoch. This mean over a single
        # batch (reset before each step) is the step's own loss; a built-in Keras metric, so a
        # saved model.keras loads without mptrain. Keras gives compiled metrics no class
        # weights: with them, the metric weighs each example's loss itself, as the loss does.
        weights = weight_per_class(objective.class_weight, model)
        self.batch_loss = keras.metrics.MeanMetricWrapper(
            loss if weights is None else weighted_loss(loss, weights), name=BATCH_LOSS)
        model.compile(optimizer=optimizer, loss=loss, metrics=[*metrics, self.batch_loss],
                      jit_compile=choice.jit_compile)
        if model.optimizer is not optimizer:
            raise MptrainError("internal error: Model.compile replaced the configured optimizer "
                               f"({type(optimizer).__name__}) by a {type(model.optimizer).__name__}")
        build_optimizer_state(optimizer, model.trainable_variables, choice.xla_optimizer_update)
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss
        self.class_weight = objective.class_weight  # Keras weighs the loss by it

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        """One stream of every epoch's batches (see data/pipeline.py): with steps_per_epoch
        set, Keras keeps the iterator across epochs; shuffle=False, the stream is in order. A
        run resumed inside an epoch first finishes that epoch with its remaining steps."""
        callback = _MonitorCallback(monitor, batches, scale_variable(self.optimizer), self.batch_loss)
        same = dict(validation_data=batches.val, class_weight=self.class_weight, callbacks=[callback],
                    shuffle=False, verbose=0)
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
        results = self.model.evaluate(dataset, return_dict=True, verbose=0)
        return {k: float(v) for k, v in results.items() if k != BATCH_LOSS}


class _MonitorCallback(keras.callbacks.Callback):
    """Feeds the monitor with each step's own loss, running metrics and loss scale."""

    def __init__(self, monitor: TrainingMonitor, batches: Batches, loss_scale, batch_loss):
        super().__init__()
        self.monitor, self.batches, self.loss_scale = monitor, batches, loss_scale
        self.batch_loss = batch_loss
        self.first_step = 0  # > 0 while finishing an epoch a resumed run started inside
        self.replicas = 1

    def on_train_begin(self, logs=None):
        # read once, outside the timed steps: under a strategy, Keras' loss (so this metric)
        # is divided by the number of replicas
        self.replicas = self.model.distribute_strategy.num_replicas_in_sync

    def on_epoch_begin(self, epoch, logs=None):
        self.monitor.epoch_begin(epoch, self.first_step)
        self.first_step = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.batch_loss.reset_state()
        self.monitor.step_begin()

    def on_train_batch_end(self, batch, logs=None):
        metrics = {k: float(v) for k, v in logs.items() if k not in ("loss", BATCH_LOSS)}
        scale = None if self.loss_scale is None else value_of(self.loss_scale)
        self.monitor.step_end(float(logs[BATCH_LOSS]) * self.replicas,
                              self.batches.batch_size_at(self.monitor.step_in_epoch), metrics, scale)
        if self.monitor.stop_requested:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        hidden = (BATCH_LOSS, "val_" + BATCH_LOSS)
        self.monitor.epoch_end({k: v for k, v in (logs or {}).items() if k not in hidden})
        if self.monitor.stop_requested:  # a signal during validation: stop before the next epoch
            self.model.stop_training = True
