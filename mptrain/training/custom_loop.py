"""The guide's custom training loop on the Keras 3 API.

Keras 3 renamed the guide's calls: `get_scaled_loss(loss)` is now `optimizer.scale_loss(loss)`,
and there is no `get_unscaled_gradients`: `LossScaleOptimizer.apply` divides the gradients by
the scale itself, skips the update when any gradient is inf/NaN (halving the scale), and
doubles the scale after `dynamic_growth_steps` finite steps. Any other optimizer's
`scale_loss` returns the loss unchanged, so the step has one form for every policy.
"""

from __future__ import annotations

import math

from mptrain.data.pipeline import Batches
from mptrain.policy import PolicyChoice
from mptrain.training import loss_scale_of
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer_update import compile_optimizer_update


def make_train_step(model, optimizer, loss_fn, metrics, loss_tracker, jit_compile: bool):
    """One compiled training step: forward, scaled loss, gradients, apply, metrics.

    Returns a float32 vector [loss, loss scale (NaN without scaling), *running metric values],
    so the loop fetches every per-step value in one device-to-host transfer (one sync per
    step).
    """
    import tensorflow as tf

    scale = loss_scale_of(optimizer)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = loss_fn(y, predictions)
            scaled_loss = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        loss_tracker.update_state(loss, sample_weight=tf.shape(x)[0])
        for metric in metrics:
            metric.update_state(y, predictions)
        current_scale = tf.constant(float("nan")) if scale is None else scale
        return tf.stack([tf.cast(loss, tf.float32), tf.cast(current_scale, tf.float32),
                         *(tf.cast(metric.result(), tf.float32) for metric in metrics)])

    return tf.function(train_step, jit_compile=jit_compile)


class CustomLoop:
    def __init__(self, model, optimizer, loss, metrics, choice: PolicyChoice):
        import keras
        import tensorflow as tf

        self.model, self.optimizer, self.loss_fn, self.metrics = model, optimizer, loss, metrics
        self.loss_tracker = keras.metrics.Mean(name="loss")
        # Build optimizer state up front: lazy creation inside a tf.function (or a
        # distribution strategy) fails, and the first timed step should not pay for it.
        if choice.xla_optimizer_update:
            compile_optimizer_update(optimizer, model.trainable_variables)
        else:
            optimizer.build(model.trainable_variables)
        self.train_step = make_train_step(model, optimizer, loss, metrics, self.loss_tracker,
                                          choice.jit_compile)

        def test_step(x, y):
            predictions = model(x, training=False)
            self.loss_tracker.update_state(loss(y, predictions), sample_weight=tf.shape(x)[0])
            for metric in metrics:
                metric.update_state(y, predictions)

        self.test_step = tf.function(test_step, jit_compile=choice.jit_compile)

    def _reset(self) -> None:
        self.loss_tracker.reset_state()
        for metric in self.metrics:
            metric.reset_state()

    def _results(self, prefix: str = "") -> dict[str, float]:
        out = {f"{prefix}loss": float(self.loss_tracker.result())}
        out.update({f"{prefix}{m.name}": float(m.result()) for m in self.metrics})
        return out

    def train(self, batches: Batches, monitor: TrainingMonitor) -> None:
        iterator = iter(batches.train)
        for epoch in range(batches.epochs):
            monitor.epoch_begin(epoch)
            self._reset()
            for _ in range(batches.steps_per_epoch):
                monitor.step_begin()
                x, y = next(iterator)
                loss, scale, *values = self.train_step(x, y).numpy()
                running = {m.name: float(v) for m, v in zip(self.metrics, values, strict=True)}
                monitor.step_end(float(loss), int(len(x)), running,
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
        self._reset()
        for x, y in dataset:
            self.test_step(x, y)
        return self._results(prefix)
