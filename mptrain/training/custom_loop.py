"""The guide's custom training loop on the Keras 3 API.

Keras 3 renamed the guide's calls: `get_scaled_loss(loss)` is now `optimizer.scale_loss(loss)`,
and there is no `get_unscaled_gradients`: `LossScaleOptimizer.apply` unscales (`loss_scale.py`).
Any other optimizer's `scale_loss` returns the loss unchanged, so the step has one form for
every policy. The loss and metrics are those `training.make_loop` compiled the model with
(`Model.compute_loss` adds the model's own losses, its regularisers, as fit's step does), so
both loops minimise and report the same thing for every objective.
"""

from __future__ import annotations

import math

from mptrain.data.pipeline import Batches
from mptrain.precision.policy import PolicyChoice
from mptrain.training.class_weights import example_weights, weight_per_class
from mptrain.training.compiled import step_loss
from mptrain.training.loss_scale import scale_variable
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import build_optimizer_state


def make_train_step(model, optimizer, class_weight, jit_compile: bool, strategy=None):
    """One compiled training step: forward, scaled loss, gradients, apply, and the updates of
    the model's loss tracker and compiled metrics.

    Returns a float32 vector [loss, loss scale (NaN without scaling), *running metric values
    in `metric_names(model)`'s order], so the loop fetches every per-step value in one
    device-to-host transfer (one sync per step). With a tf.distribute strategy the step runs
    on every replica (`strategy.run`): Keras' losses divide each replica's mean by the number
    of replicas, so the gradients the optimizer sums across replicas are those of the loss
    averaged over the global batch; the replicas agree on whether to skip a non-finite step
    (`distribute.agree_on_finite`).
    """
    import tensorflow as tf

    from mptrain.training.distribute import agree_on_finite

    class_weights = weight_per_class(class_weight, model)
    scale = scale_variable(optimizer)
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    tracker = step_loss(model)

    def replica_step(x, y):
        # each example's class weight, as Model.fit gives it to the loss (not to the metrics)
        weights = None if class_weights is None else example_weights(class_weights, y)
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            # under a strategy, Keras losses already divide by the number of replicas
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, sample_weight=weights)
            scaled_loss = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, model.trainable_variables)
        if scale is not None:
            gradients = agree_on_finite(gradients, tf)
        optimizer.apply(gradients, model.trainable_variables)
        local_loss = loss * replicas  # this replica's mean loss, for the records
        tracker.update_state(local_loss, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
        model.compute_metrics(x, y, predictions, sample_weight=weights)
        return local_loss

    def outputs(loss):
        current_scale = tf.constant(float("nan")) if scale is None else scale
        results = model.get_metrics_result()
        return tf.stack([tf.cast(loss, tf.float32), tf.cast(current_scale, tf.float32),
                         *(tf.cast(results[name], tf.float32) for name in metric_names(model))])

    if strategy is None:
        return tf.function(lambda x, y: outputs(replica_step(x, y)), jit_compile=jit_compile)

    def distributed_step(x, y):  # no XLA with several replicas (policy.choose_jit_compile)
        losses = strategy.run(replica_step, args=(x, y))
        return outputs(strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None))

    return tf.function(distributed_step)


def build_compiled(model, x, y, strategy=None) -> None:
    """The model's compiled loss and metrics built on one batch, then reset, before a step is
    traced: they create their variables on first use, which a traced or distributed step
    cannot (Keras' fit does the same first, `_symbolic_build`); in the strategy's scope."""
    import contextlib

    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        predictions = model(x, training=False)
        model.compute_loss(x=x, y=y, y_pred=predictions, training=False)
        model.compute_metrics(x, y, predictions)
    model.reset_metrics()


def metric_names(model) -> list[str]:
    """The compiled metrics' names, as Keras' logs key them (output name first for a model
    with several outputs), in a fixed order; the loss is the loop's own."""
    return sorted(k for k in model.get_metrics_result() if k != "loss")


class CustomLoop:
    def __init__(self, model, optimizer, class_weight, choice: PolicyChoice, strategy=None):
        """`model` compiled by `training.make_loop` (its loss, metrics and loss tracker)."""
        import tensorflow as tf

        self.model, self.optimizer, self.strategy = model, optimizer, strategy
        self.built = False
        self.loss_tracker = step_loss(model)
        build_optimizer_state(optimizer, model.trainable_variables, choice.xla_optimizer_update)
        self.train_step = make_train_step(model, optimizer, class_weight, choice.jit_compile, strategy)
        replicas = strategy.num_replicas_in_sync if strategy is not None else 1

        def test_step(x, y):
            predictions = model(x, training=False)
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, training=False)
            self.loss_tracker.update_state(loss * replicas,
                                           sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
            model.compute_metrics(x, y, predictions)

        if strategy is None:
            self.test_step = tf.function(test_step, jit_compile=choice.jit_compile)
        else:
            self.test_step = tf.function(lambda x, y: strategy.run(test_step, args=(x, y)))

    @property
    def loss_fn(self):
        return lambda y, y_pred: self.model.compute_loss(y=y, y_pred=y_pred)

    def _reset(self) -> None:
        self.model.reset_metrics()

    def _results(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": float(v) for k, v in self.model.get_metrics_result().items()}

    def _build(self, dataset) -> None:
        if not self.built:
            build_compiled(self.model, *next(iter(dataset)), self.strategy)
            self.built = True

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        self._build(batches.test)
        names = metric_names(self.model)
        iterator = iter(self._distributed(batches.train_from(start_epoch, start_step)))
        for epoch in range(start_epoch, batches.epochs):
            first = start_step if epoch == start_epoch else 0
            monitor.epoch_begin(epoch, first)
            self._reset()
            for _ in range(first, batches.steps_per_epoch):
                monitor.step_begin()
                x, y = next(iterator)
                loss, scale, *values = self.train_step(x, y).numpy()
                running = {name: float(v) for name, v in zip(names, values, strict=True)}
                monitor.step_end(float(loss), batches.batch_size_at(monitor.step_in_epoch), running,
                                 None if math.isnan(scale) else float(scale))
                if monitor.stop_requested:
                    break
            logs = self._results()
            if batches.val is not None:
                logs.update(self.evaluate(batches.val, prefix="val_"))
            monitor.epoch_end(logs)
            if monitor.stop_requested:
                break

    def evaluate(self, dataset, prefix: str = "") -> dict[str, float]:
        self._build(dataset)
        self._reset()
        for x, y in self._distributed(dataset):
            self.test_step(x, y)
        return self._results(prefix)

    def _distributed(self, dataset):
        return dataset if self.strategy is None else self.strategy.experimental_distribute_dataset(dataset)
