"""The optimizer from `train.optimizer`: a Keras optimizer, its learning-rate schedule.

Loss scaling is not added here: it is a dtype decision, made by `loss_scale.wrap_optimizer`.
Gradient clipping (`clipnorm`, `global_clipnorm`) and accumulation
(`gradient_accumulation_steps`) are the Keras optimizer's own arguments, and stay correct
under loss scaling: `LossScaleOptimizer.apply` unscales the gradients before the inner
optimizer clips or accumulates them, and does not call it at all for a skipped step.
"""

from __future__ import annotations

from mptrain.config.optimizers import OPTIMIZERS
from mptrain.config.schema import OptimizerConfig
from mptrain.errors import ConfigError
from mptrain.training import value_of


def build_optimizer(cfg: OptimizerConfig, total_steps: int):
    """`total_steps` (epochs x steps per epoch) is where a cosine decay ends by default."""
    import keras

    name = OPTIMIZERS[cfg.name][0]
    kwargs = dict(cfg.kwargs)
    if cfg.schedule is not None:
        kwargs["learning_rate"] = learning_rate_schedule(cfg.schedule, total_steps)
    try:
        return getattr(keras.optimizers, name)(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"train.optimizer.kwargs {cfg.kwargs}: {name} rejects them ({exc})") from None


def learning_rate_at(optimizer, cfg: OptimizerConfig, total_steps: int):
    """step → the learning rate at that step (for telemetry), without touching the optimizer."""
    if cfg.schedule is None:
        constant = value_of(optimizer.learning_rate)
        return lambda step: constant
    schedule = learning_rate_schedule(cfg.schedule, total_steps)
    if isinstance(schedule, float):
        return lambda step: schedule
    return lambda step: float(schedule(step))


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
        return schedules.CosineDecay(0.0, 1, alpha=1.0, warmup_target=schedule.learning_rate,
                                     warmup_steps=warmup)
    decay_steps = schedule.decay_steps or max(1, total_steps - warmup)
    if not warmup:
        return schedules.CosineDecay(schedule.learning_rate, decay_steps, alpha=schedule.alpha)
    return schedules.CosineDecay(0.0, decay_steps, alpha=schedule.alpha,
                                 warmup_target=schedule.learning_rate, warmup_steps=warmup)
