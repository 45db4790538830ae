"""The guide's custom training loop on the Keras 3 API.

Keras 3 renamed the guide's calls: `get_scaled_loss(loss)` is now `optimizer.scale_loss(loss)`,
and there is no `get_unscaled_gradients`: `LossScaleOptimizer.apply` unscales (`loss_scale.py`).
Any other optimizer's `scale_loss` returns the loss unchanged, so the step has one form for
every policy. The loss and metrics are those `training.make_loop` compiled the model with
(`Model.compute_loss` adds the model's own losses, its regularisers, as fit's step does), so
both loops minimise and report the same thing for every objective.

Without a tf.distribute strategy the loop runs under TensorFlow's default one, as Keras' fit
does (its `run` calls the step in a replica context of one, its `reduce` and
`experimental_distribute_dataset` hand back what they are given): one code path for one
device and for several.
"""

from __future__ import annotations

import math
import signal

from mptrain.data.pipeline import Batches
from mptrain.precision.policy import PolicyChoice
from mptrain.training.compiled import step_loss
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.records import STOP_SIGNALS


def make_train_step(model, optimizer, class_weight, jit_compile: bool, strategy=None):
    """One compiled training step: forward, scaled loss, gradients, apply, and the updates of
    the model's loss tracker and compiled metrics.

    Takes a batch and the signal that asked this worker to stop (its number; 0.0 by default:
    none), and returns a float32 vector [loss, loss scale (NaN without scaling), the share of
    workers each of `STOP_SIGNALS` reached (`agreed_signal` reads them), *running metric
    values in `metric_names(model)`'s order], so the loop fetches every per-step value in one
    device-to-host transfer (one sync per step). The step runs on every replica of `strategy`
    (None: TensorFlow's default, one replica) through `strategy.run`: Keras' losses divide
    each replica's mean by the number of replicas, so the gradients the optimizer sums across
    replicas are those of the loss averaged over the global batch; the replicas agree on
    whether to skip a non-finite step (`distribute.agree_on_finite`).
    """
    import tensorflow as tf

    from mptrain.training.distribute import agree_on_finite

    # `class_weight`: every class's (`training.every_class_weight`), looked up by label
    class_weights = None if class_weight is None else tf.constant(
        [class_weight[c] for c in range(len(class_weight))])
    scale = getattr(optimizer, "dynamic_scale", None)  # a LossScaleOptimizer's (mixed_float16)
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    tracker = step_loss(model)

    def replica_step(x, y, asked):
        # each example's class weight, by its label (a one-hot row's: its class), as Model.fit
        # gives it to the loss
        weights = None if class_weights is None else tf.gather(class_weights, class_ids(tf, y))
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
        # beside it, whether each stop signal reached this worker: reduced with the loss, the
        # workers learn of any worker's signal without a collective of its own (one cost 11%
        # of a small model's step on two local workers)
        return tf.stack([tf.cast(local_loss, tf.float32),
                         *(tf.cast(tf.equal(asked, float(s)), tf.float32) for s in STOP_SIGNALS)])

    def step(x, y, asked=0.0):
        per_replica = strategy.run(replica_step, args=(x, y, asked))
        loss, *asked_by = tf.unstack(strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None))
        current_scale = tf.constant(float("nan")) if scale is None else scale
        results = model.get_metrics_result()
        return tf.stack([loss, tf.cast(current_scale, tf.float32), *asked_by,
                         *(tf.cast(results[name], tf.float32) for name in metric_names(model))])

    return tf.function(step, jit_compile=jit_compile)


def agreed_signal(shares) -> int:
    """The signal every worker stops for, from the share of workers each of `STOP_SIGNALS`
    reached (the same on each: reduced with the loss): the most pressing one any worker got
    (SIGTERM over SIGINT), so all end with one exit code; 0 for none."""
    return next((int(s) for s, share in reversed(list(zip(STOP_SIGNALS, shares, strict=True)))
                 if share > 0), 0)


def class_ids(tf, y):
    """Each example's class, as Model.fit reads it for its class weights: a one-hot row's
    index (a categorical loss's labels), else the label itself ((N,) or (N, 1))."""
    if len(y.shape) >= 2 and y.shape[-1] > 1:
        return tf.argmax(y, axis=-1, output_type=tf.int32)
    return tf.cast(tf.reshape(y, [-1]), tf.int32)


def build_compiled(model, x, y, strategy=None) -> None:
    """The model's compiled loss and metrics built on one batch, then reset, before a step is
    traced: they create their variables on first use, which a traced or distributed step
    cannot (Keras' fit does the same first, `_symbolic_build`); in the strategy's scope."""
    import tensorflow as tf

    with (strategy or tf.distribute.get_strategy()).scope():
        predictions = model(x, training=False)
        model.compute_loss(x=x, y=y, y_pred=predictions, training=False)
        model.compute_metrics(x, y, predictions)
    model.reset_metrics()


def metric_names(model) -> list[str]:
    """The compiled metrics' names, as Keras' logs key them (output name first for a model
    with several outputs), in a fixed order; the loss is the loop's own."""
    return sorted(k for k in model.get_metrics_result() if k != "loss")


class CustomLoop:
    step_loss = "loss"  # what the step's loss is: the compiled model's (the summary's `step_loss`)

    def __init__(self, model, optimizer, class_weight, choice: PolicyChoice, strategy=None):
        """`model` compiled by `training.make_loop` (its loss, metrics and loss tracker), its
        optimizer's state built. XLA as `policy.choose_jit_compile` decided, on one replica
        (a TPU's strategy compiles its replicas' steps itself)."""
        import tensorflow as tf

        self.model, self.strategy = model, strategy or tf.distribute.get_strategy()
        self.optimizer, self.built = optimizer, False
        # the optimizer that scales its loss, by its name on the model (`monitor.loss_scales`)
        self.scaling = {"optimizer": optimizer} if choice.loss_scaling else {}
        self.workers = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        replicas = self.strategy.num_replicas_in_sync
        jit_compile = choice.jit_compile and replicas == 1
        self.train_step = make_train_step(model, optimizer, class_weight, jit_compile, self.strategy)
        tracker = step_loss(model)

        def test_step(x, y):
            predictions = model(x, training=False)
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, training=False)
            tracker.update_state(loss * replicas, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
            model.compute_metrics(x, y, predictions)

        self.test_step = tf.function(lambda x, y: self.strategy.run(test_step, args=(x, y)),
                                     jit_compile=jit_compile)

    def _results(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": float(v) for k, v in self.model.get_metrics_result().items()}

    def _build(self, dataset) -> None:
        if not self.built:
            build_compiled(self.model, *next(iter(dataset)), self.strategy)
            self.built = True

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        import tensorflow as tf

        self._build(batches.test)
        names = metric_names(self.model)
        iterator = iter(self.strategy.experimental_distribute_dataset(
            batches.train_from(start_epoch, start_step)))
        for epoch in range(start_epoch, batches.epochs):
            first = start_step if epoch == start_epoch else 0
            monitor.epoch_begin(epoch, first)
            self.model.reset_metrics()
            stopping = False
            for _ in range(first, batches.steps_per_epoch):
                monitor.step_begin()
                x, y = next(iterator)
                asked = tf.constant(float(monitor.signal or 0))
                loss, scale, interrupted, terminated, *values = self.train_step(x, y, asked).numpy()
                running = {name: float(v) for name, v in zip(names, values, strict=True)}
                monitor.step_end(float(loss), batches.batch_size_at(monitor.step_in_epoch), running,
                                 None if math.isnan(scale) else {"optimizer": float(scale)})
                if stopping := self._stops(monitor, agreed_signal((interrupted, terminated))):
                    break
            logs = self._results()
            if batches.val is not None and monitor.validates_epoch:
                logs.update(self.evaluate(batches.val, prefix="val_"))
            monitor.epoch_end(logs)
            if stopping or self._stops(monitor, 0):
                break

    def _stops(self, monitor: TrainingMonitor, agreed: int) -> bool:
        """Whether training stops here. On one worker, when anything asked. On several, a
        signal reaches each at its own moment (scancel's SIGTERM, 20 ms apart, stopped one
        worker a step before the other, and their collectives failed as a lost worker's), so
        a signal stops them only when the step agreed on it (`agreed_signal`, `agreed`: its
        number): every worker after the same step, each with its checkpoint and the signal's
        exit code; other stops (the step limit, the guard, epoch rules) read the same global
        figures on each and stop them alike."""
        if not self.workers:
            return monitor.stop_requested
        if agreed:
            where = f"epoch {monitor.epoch}, step {monitor.step_in_epoch}"
            if monitor.stop_kind != "signal":
                monitor.request_stop(f"interrupted: another worker was stopped by "
                                     f"{signal.Signals(agreed).name}; every worker stopped after "
                                     f"{where}", "signal")
            else:  # (once: training stops here)
                monitor.stop_reason += f"; every worker stopped after {where}"
            monitor.signal = agreed  # one exit code on every worker
            return True
        return monitor.stop_requested and monitor.stop_kind != "signal"

    def evaluate(self, dataset, prefix: str = "") -> dict[str, float]:
        self._build(dataset)
        self.model.reset_metrics()
        for x, y in self.strategy.experimental_distribute_dataset(dataset):
            self.test_step(x, y)
        return self._results(prefix)
