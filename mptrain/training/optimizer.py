"""The optimizer from `train.optimizer`: a Keras optimizer, its learning-rate schedule.

Loss scaling is not added here: it is a dtype decision, made by `loss_scale.wrap_optimizer`.
Gradient clipping (`clipnorm`, `global_clipnorm`) and accumulation
(`gradient_accumulation_steps`) are the Keras optimizer's own arguments, and stay correct
under loss scaling: `LossScaleOptimizer.apply` unscales the gradients before the inner
optimizer clips or accumulates them, and does not call it at all for a skipped step.

The update can run as one XLA computation (`train.xla_optimizer_update`). Under a mixed policy
the variables, gradients and optimizer slots stay float32, so the update (RMSprop: read and
write three float32 tensors per weight) does not get faster with 16-bit compute: on the
guide's MLP on a 2-core AMX CPU it is ~50 ms of a ~265 ms bfloat16 step. TensorFlow runs it as
a chain of element-wise kernels, each a full pass over memory; XLA fuses them. Measured side
by side: float32 step -4%, mixed_bfloat16 step -8 to -12% (bench/NOTES.md). The rest of the
step stays on oneDNN, which keeps AMX for bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable

from mptrain.config.optimizers import OPTIMIZERS
from mptrain.config.schema import OptimizerConfig
from mptrain.errors import ConfigError


def build_optimizer(cfg: OptimizerConfig, total_steps: int):
    """`total_steps` (epochs x steps per epoch) is where a cosine decay ends by default."""
    import keras

    name = OPTIMIZERS[cfg.name].keras_name
    kwargs = dict(cfg.kwargs)
    if cfg.schedule is not None:
        kwargs["learning_rate"] = learning_rate_schedule(cfg.schedule, total_steps)
    try:
        return getattr(keras.optimizers, name)(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"train.optimizer.kwargs {cfg.kwargs}: {name} rejects them ({exc})") from None


def value_of(variable) -> float:
    """A scalar variable's value (a learning rate, a loss scale) as a float, wherever it lives:
    read with `.numpy()`, since float() does not take a tf.distribute strategy's mirrored
    variable and NumPy's conversion of a Keras variable warns under NumPy 2 (its `__array__`
    takes no `copy`), at every step it is read."""
    return float(variable.numpy() if hasattr(variable, "numpy") else variable)


def applied_updates(optimizer) -> int:
    """The steps whose gradients the optimizer has applied, as its schedule counts them:
    Keras' own counter (`_iterations`; a step a LossScaleOptimizer skipped applies none, and
    the public `iterations` is divided by gradient_accumulation_steps, which the schedule's
    count is not)."""
    return int(value_of(getattr(optimizer, "inner_optimizer", optimizer)._iterations))


def scheduled_rate(cfg: OptimizerConfig, total_steps: int) -> Callable[[int], float] | None:
    """The schedule's learning rate after a number of applied updates (`applied_updates`; for
    telemetry), without touching the optimizer; None without a schedule: the optimizer's own
    rate then changes only between epochs (reduce_lr_on_plateau, a resume's checkpoint), and
    each epoch's record carries it."""
    if cfg.schedule is None:
        return None
    rate = learning_rate_schedule(cfg.schedule, total_steps)
    return (lambda step: float(rate(step))) if callable(rate) else (lambda step: rate)


def learning_rate_schedule(schedule, total_steps: int):
    """A `keras.optimizers.schedules` object (steps count applied updates)."""
    from keras.optimizers import schedules

    if schedule.kind == "exponential":
        return schedules.ExponentialDecay(schedule.learning_rate, schedule.decay_steps,
                                          schedule.decay_rate, staircase=schedule.staircase)
    if schedule.kind == "piecewise":
        return schedules.PiecewiseConstantDecay(schedule.boundaries, schedule.values)
    warmup = schedule.warmup_steps
    if schedule.kind == "constant":
        if not warmup:
            return schedule.learning_rate
        # CosineDecay with alpha=1 decays to itself: a linear warm-up, then constant
        return schedules.CosineDecay(schedule.warmup_from, 1, alpha=1.0,
                                     warmup_target=schedule.learning_rate,
                                     warmup_steps=warmup)
    decay_steps = schedule.decay_steps or max(1, total_steps - warmup)
    if not warmup:
        return schedules.CosineDecay(schedule.learning_rate, decay_steps, alpha=schedule.alpha)
    return schedules.CosineDecay(0.0, decay_steps, alpha=schedule.alpha,
                                 warmup_target=schedule.learning_rate, warmup_steps=warmup)


def build_optimizer_state(optimizer, variables, xla_update: bool) -> None:
    """The optimizer's state (its slots, and the loss scale) created now, before training:
    lazy creation inside a tf.function or a distribution strategy fails (XLA cannot create
    slot variables while tracing either), the first timed step should not pay for it, and the
    monitor and checkpoints read it from the start.

    With `xla_update`, `optimizer.apply` (and so `apply_gradients`, which Model.fit calls) then
    runs under XLA. The variables are captured rather than passed, because Keras variables
    cannot cross a `tf.function` boundary as arguments; callers must update exactly these."""
    variables = list(variables)
    optimizer.build(variables)
    if not xla_update:
        return
    import tensorflow as tf

    unbound_apply = type(optimizer).apply
    ids = list(map(id, variables))
    compiled = tf.function(lambda grads: unbound_apply(optimizer, grads, variables),
                           jit_compile=True, autograph=False)

    def apply(grads, trainable_variables=None):
        if trainable_variables is not None and list(map(id, trainable_variables)) != ids:
            raise ValueError("the XLA optimizer update was built for a different variable list")
        return compiled(list(grads))

    optimizer.apply = apply
