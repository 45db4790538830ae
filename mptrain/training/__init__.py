"""Training loops behind one interface: `Model.fit` (`fit_loop`) and the guide's custom loop
(`custom_loop`). Both report every step to a `monitor.TrainingMonitor`, which is where timing,
stop conditions and per-step listeners live, so a new capability is written once, not per loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mptrain.data.pipeline import Batches
    from mptrain.precision.policy import PolicyChoice
    from mptrain.training.monitor import TrainingMonitor

# name in the experiment (train.loop, `config.schema.LOOPS`) → the class that runs it,
# imported only when used.
LOOP_CLASSES = {
    "fit": "mptrain.training.fit_loop:FitLoop",
    "custom": "mptrain.training.custom_loop:CustomLoop",
}


class TrainingLoop(Protocol):
    """What a run needs from a loop. `optimizer` is the one that applies the updates: a
    `LossScaleOptimizer` under mixed_float16, which is how a loop knows to scale the loss."""

    model: Any
    optimizer: Any
    loss_fn: Any  # the loss the step minimises (diagnose differentiates it too)

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        """Train from (start_epoch, start_step) to the end of `batches.epochs`, reporting each
        step to the monitor and stopping after the step where it asks to."""

    def evaluate(self, dataset) -> dict[str, float]:
        """Loss and metrics over a dataset, keyed like Keras' logs ("loss", "accuracy")."""


def make_loop(config, model, output: str, optimizer, choice: PolicyChoice,
              strategy=None) -> TrainingLoop:
    """The experiment's loop (`train.loop`) with its loss and metrics for the model's `output`
    kind, constructed (inside the strategy's scope, when there is one)."""
    from mptrain.training.losses import build_loss, build_metrics

    module, _, cls = LOOP_CLASSES[config.train.loop].partition(":")
    return getattr(importlib.import_module(module), cls)(
        model, optimizer, build_loss(config, output), build_metrics(config, output), choice, strategy)


def value_of(variable) -> float:
    """A scalar variable's value as a float, wherever it lives (a tf.distribute strategy's
    mirrored variables do not convert with float())."""
    import keras

    return float(keras.ops.convert_to_numpy(variable))
