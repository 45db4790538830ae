"""Dynamic loss scaling, in one place: the optimizer that does it, and what its scale tells us.

Under mixed_float16 small gradients underflow float16, so Keras 3's `LossScaleOptimizer`
multiplies the loss by a scale (`scale_loss`) and divides the gradients by it (`apply`),
skipping the update and halving the scale when a gradient is inf/NaN, and doubling it after
`dynamic_growth_steps` finite steps in a row. Keras keeps no count of skipped steps, so it is
read from the scale: it goes down exactly when a step was skipped (the optimizer's
`iterations` cannot tell: with gradient accumulation Keras divides them).

What a skip means for the run:
- one skipped step is the scaler doing its job: its NaN loss is explained, not divergence;
- many skips in a recent window waste steps: the user is told once (`skip_rate_notice`);
- `collapse_steps` skips in a row mean no scale works: the run stops (`collapse`).
`train.recovery.loss_upper_bound` means the same under every policy: a *finite* loss above it
is divergence. Under loss scaling a non-finite loss is a skipped step, so only the bound and
the collapse rule can call a float16 run diverged.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

SKIP_WINDOW, SKIP_WARNING_RATE, SKIP_WARNING_MIN_STEPS = 50, 0.2, 10


def wrap_optimizer(optimizer, scales_loss: bool, initial_scale: float, growth_steps: int):
    """The optimizer that applies the updates: a dynamic `LossScaleOptimizer` around
    `optimizer` when the policy scales its loss (mixed_float16), else `optimizer` itself."""
    if not scales_loss:
        return optimizer
    import keras

    return keras.optimizers.LossScaleOptimizer(
        optimizer, initial_scale=initial_scale, dynamic_growth_steps=growth_steps)


def scale_every_optimizer(model, initial_scale: float, growth_steps: int) -> dict[str, object]:
    """Dynamic loss scaling, with the experiment's settings, for every optimizer a model with
    a compile of its own holds (`own_step.optimizers_of`: a GAN's `d_optimizer` and
    `g_optimizer` beside the `optimizer` its compile may leave unused), each set back on the
    model under its own name, where its step finds it: {attribute: LossScaleOptimizer}. One
    Keras' compile already wrapped (with Keras' defaults) is wrapped anew around its inner
    optimizer."""
    from mptrain.model.own_step import optimizers_of

    scaling = {}
    for name, optimizer in optimizers_of(model).items():
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        scaling[name] = wrap_optimizer(inner, True, initial_scale, growth_steps)
        setattr(model, name, scaling[name])
    return scaling


class ScalingWatch:
    """Which loss-scaling optimizers a traced training step applied, and which of those had
    their loss scaled first (`scale_loss`). Watched where scaling happens, not by reading a
    step's source: a model's own `train_step` may scale in a helper method, or not at all;
    then `LossScaleOptimizer.apply` divides its gradients by the scale (32,768 at first) and
    nothing fails, in plain Keras too. The methods are replaced on each instance (past Keras'
    attribute tracking), so a saved model's optimizers are Keras' own class."""

    def __init__(self, optimizers: dict[str, object]):
        self.applied: list[str] = []  # at trace time: Python side effects of building the step
        self.scaled: set[str] = set()
        for name, optimizer in optimizers.items():
            self._watch(name, optimizer)

    def _watch(self, name: str, optimizer) -> None:
        scale_loss, apply = optimizer.scale_loss, optimizer.apply

        def scaled(loss):
            self.scaled.add(name)
            return scale_loss(loss)

        def applied(*args, **kwargs):
            if name not in self.applied:
                self.applied.append(name)
            return apply(*args, **kwargs)

        object.__setattr__(optimizer, "scale_loss", scaled)
        object.__setattr__(optimizer, "apply", applied)

    def unscaled(self) -> list[str]:
        """The optimizers the step applied without scaling their loss."""
        return [name for name in self.applied if name not in self.scaled]


@dataclass
class LossScaleTracker:
    """Follows the scale step by step: skips, skips in a row, the recent skip rate."""

    scale: float
    skipped_steps: int = 0
    in_a_row: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=SKIP_WINDOW))
    _warned: bool = False

    def step(self, new_scale: float) -> bool:
        """Record the scale after a step; True when that step was skipped. The skips before
        the first applied step are the scale coming down from its start (32,768 halves to
        what the gradients allow), not the recent rate's: they say nothing is wrong."""
        skipped = new_scale < self.scale
        self.scale = new_scale
        self.skipped_steps += skipped
        self.in_a_row = self.in_a_row + 1 if skipped else 0
        if self.recent or not skipped:
            self.recent.append(skipped)
        return skipped

    def skip_rate_notice(self) -> str | None:
        """Once per run: most recent steps were skipped, so training is wasting them."""
        if self._warned or len(self.recent) < SKIP_WARNING_MIN_STEPS:
            return None
        rate = sum(self.recent) / len(self.recent)
        if rate <= SKIP_WARNING_RATE:
            return None
        self._warned = True
        return (f"{rate:.0%} of the last {len(self.recent)} steps were skipped (non-finite "
                f"gradients under float16); the loss scale is at {self.scale:g}. Persistent "
                "skipping wastes the steps: try mixed_bfloat16, or `mptrain diagnose` to see "
                "which layer overflows")

    def collapse(self, limit: int, where: str) -> str | None:
        """Why the run must stop, when `limit` steps in a row were skipped."""
        if self.in_a_row < limit:
            return None
        return (f"the loss scale collapsed: {self.in_a_row} steps in a row had non-finite "
                f"gradients (scale now {self.scale:g}) at {where}; float16 cannot represent "
                "this model's values: use mixed_bfloat16 (float32's range) or float32")
