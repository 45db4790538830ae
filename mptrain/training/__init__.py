"""Training loops behind one interface: `Model.fit` (`fit_loop`) and the guide's custom loop
(`custom_loop`), both reporting every step to a `monitor.TrainingMonitor`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

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


class Objective(NamedTuple):
    """What a loop's step minimises and reports: the loss, the metrics, and each class's
    weight in the loss (`train.class_weight`, or None; the metrics are unweighted, as in fit)."""

    loss: Any
    metrics: list[Any]
    class_weight: dict[int, float] | None = None


def make_loop(config, model, output: str, optimizer, choice: PolicyChoice,
              strategy=None) -> TrainingLoop:
    """The experiment's loop (`train.loop`) with its loss and metrics for the model's `output`
    kind, constructed (inside the strategy's scope, when there is one); its module is
    imported only when used."""
    if config.train.loop == "fit":
        from mptrain.training.fit_loop import FitLoop as Loop
    else:
        from mptrain.training.custom_loop import CustomLoop as Loop
    objective = Objective(build_loss(config, output), build_metrics(config, output),
                          config.train.class_weight)
    return Loop(model, optimizer, objective, choice, strategy)


def build_loss(config: ExperimentConfig, output: OutputKind):
    """The loss object (`train.loss`), told whether the model emits probabilities or logits."""
    import keras

    from_logits = output == "logits"
    if config.train.loss == "binary_crossentropy":
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    # categorical_crossentropy too: on class ids (one-hot labels are read as ids), the sparse
    # form is the same loss, without a one-hot tensor of every batch
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def build_metrics(config: ExperimentConfig, output: OutputKind) -> list[Any]:
    """Metric objects (`train.metrics`) with fixed names, so both loops report the same keys."""
    import keras

    threshold = 0.0 if output == "logits" else 0.5  # a logit of 0 is a probability of 0.5
    binary = {  # of class 1 (the schema allows them with binary_crossentropy only)
        "accuracy": lambda: keras.metrics.BinaryAccuracy(name="accuracy", threshold=threshold),
        "precision": lambda: keras.metrics.Precision(thresholds=threshold, name="precision"),
        "recall": lambda: keras.metrics.Recall(thresholds=threshold, name="recall"),
        "auc": lambda: keras.metrics.AUC(from_logits=output == "logits", name="auc"),
    }
    metrics = []
    for name in config.train.metrics:
        if name == "top5_accuracy":
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=5, name=name))
        elif config.train.loss == "binary_crossentropy":
            metrics.append(binary[name]())
        else:
            metrics.append(keras.metrics.SparseCategoricalAccuracy(name=name))
    return metrics
