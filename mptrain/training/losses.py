"""The loss and metrics from `train.loss` / `train.metrics`, named the same in both loops."""

from __future__ import annotations

from typing import Any

from mptrain.config.schema import ExperimentConfig
from mptrain.model.outputs import OutputKind


def build_loss(config: ExperimentConfig, output: OutputKind):
    """The loss object, told whether the model emits probabilities or logits."""
    import keras

    from_logits = output == "logits"
    if config.train.loss == "binary_crossentropy":
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def build_metrics(config: ExperimentConfig, output: OutputKind) -> list[Any]:
    """Metric objects with fixed names, so both training loops report the same keys."""
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
