"""The guide's custom training loop on the Keras 3 API.

Keras 3 renamed the guide's calls: `get_scaled_loss(loss)` is now `optimizer.scale_loss(loss)`,
and there is no `get_unscaled_gradients`: `LossScaleOptimizer.apply` divides the gradients by
the scale itself, skips the update when any gradient is inf/NaN (halving the scale), and
doubles the scale after `dynamic_growth_steps` finite steps.
"""

from __future__ import annotations

from mptrain.training.batches import Batches
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer_update import compile_optimizer_update


def make_train_step(model, optimizer, loss_fn, metrics, loss_tracker, loss_scaling: bool,
                    jit_compile: bool):
    """One compiled training step: forward, (scaled) loss, gradients, apply, metrics.

    Returns a float32 vector [loss, loss scale, applied updates, *running metric values] so
    the loop fetches every per-step value in one device-to-host transfer (one sync per step).
    """
    import tensorflow as tf

    def train_step(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = loss_fn(y, predictions)
            scaled_loss = optimizer.scale_loss(loss) if loss_scaling else loss
        gradients = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        loss_tracker.update_state(loss, sample_weight=tf.shape(x)[0])
        for metric in metrics:
            metric.update_state(y, predictions)
        scale = optimizer.dynamic_scale if loss_scaling else tf.constant(1.0)
        return tf.stack([tf.cast(loss, tf.float32), tf.cast(scale, tf.float32),
                         tf.cast(optimizer.iterations, tf.float32),
                         *(tf.cast(metric.result(), tf.float32) for metric in metrics)])

    return tf.function(train_step, jit_compile=jit_compile)


class CustomLoop:
    def __init__(self, model, optimizer, loss, metrics, jit_compile: bool, loss_scaling: bool,
                 xla_optimizer_update: bool = False):
        import keras
        import tensorflow as tf

        self.model, self.optimizer, self.loss_fn, self.metrics = model, optimizer, loss, metrics
        self.loss_scaling = loss_scaling
        self.loss_tracker = keras.metrics.Mean(name="loss")
        # Build optimizer state up front: lazy creation inside a tf.function (or a
        # distribution strategy) fails, and the first timed step should not pay for it.
        if xla_optimizer_update:
            compile_optimizer_update(optimizer, model.trainable_variables)
        else:
            optimizer.build(model.trainable_variables)
        self.train_step = make_train_step(model, optimizer, loss, metrics, self.loss_tracker,
                                          loss_scaling, jit_compile)

        def test_step(x, y):
            predictions = model(x, training=False)
            self.loss_tracker.update_state(loss(y, predictions), sample_weight=tf.shape(x)[0])
            for metric in metrics:
                metric.update_state(y, predictions)

        self.test_step = tf.function(test_step, jit_compile=jit_compile)

    def _reset(self) -> None:
        self.loss_tracker.reset_state()
        for metric in self.metrics:
            metric.reset_state()

    def _results(self, prefix: str = "") -> dict[str, float]:
        out = {f"{prefix}loss": float(self.loss_tracker.result())}
        out.update({f"{prefix}{m.name}": float(m.result()) for m in self.metrics})
        return out

    def train(self, batches: Batches, epochs: int, monitor: TrainingMonitor) -> None:
        for epoch in range(epochs):
            monitor.epoch_begin(epoch)
            self._reset()
            iterator = iter(batches.train)
            for _ in range(batches.steps_per_epoch):
                monitor.step_begin()
                x, y = next(iterator)
                loss, scale, applied, *values = self.train_step(x, y).numpy()
                running = {m.name: float(v) for m, v in zip(self.metrics, values, strict=True)}
                if self.loss_scaling:
                    monitor.step_end(float(loss), float(scale), int(applied), running)
                else:
                    monitor.step_end(float(loss), metrics=running)
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
