"""Training loops behind one interface: `Model.fit` (`fit_loop`) and the guide's custom loop
(`custom_loop`). Both report every step to a `monitor.TrainingMonitor`, which is where timing,
stop conditions and per-step listeners live, so a new capability is written once, not per loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mptrain.config.schema import ExperimentConfig
    from mptrain.data.pipeline import Batches
    from mptrain.model.outputs import OutputKind
    from mptrain.precision.policy import PolicyChoice
    from mptrain.training.monitor import TrainingMonitor


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
    kind, constructed (inside the strategy's scope, when there is one); its module is
    imported only when used."""
    if config.train.loop == "fit":
        from mptrain.training.fit_loop import FitLoop as Loop
    else:
        from mptrain.training.custom_loop import CustomLoop as Loop
    return Loop(model, optimizer, build_loss(config, output), build_metrics(config, output), choice,
                strategy)


def build_loss(config: ExperimentConfig, output: OutputKind):
    """The loss object (`train.loss`), told whether the model emits probabilities or logits."""
    import keras

    from_logits = output == "logits"
    if config.train.loss == "binary_crossentropy":
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def build_metrics(config: ExperimentConfig, output: OutputKind) -> list[Any]:
    """Metric objects (`train.metrics`) with fixed names, so both loops report the same keys."""
    import keras

    metrics = []
    for name in config.train.metrics:
        if name == "top5_accuracy":
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=5, name=name))
        elif config.train.loss == "binary_crossentropy":
            threshold = 0.0 if output == "logits" else 0.5
            metrics.append(keras.metrics.BinaryAccuracy(name=name, threshold=threshold))
        else:
            metrics.append(keras.metrics.SparseCategoricalAccuracy(name=name))
    return metrics
