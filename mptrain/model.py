"""Keras models, optimizers, losses and metrics built from the experiment config.

The head is always a Dense layer producing logits, then a separate
`Activation(..., dtype="float32")`: the guide's "CORRECT" pattern. A softmax computed in
float16 (or a float16 tensor flowing into the loss) loses precision, so the model's output is
float32 whatever the policy, and `build_model` checks that it is.
"""

from __future__ import annotations

from typing import Any

from mptrain.config import CNNConfig, ExperimentConfig, MLPConfig, OptimizerConfig
from mptrain.config.optimizers import OPTIMIZERS
from mptrain.errors import ConfigError, MptrainError


def build_model(cfg: MLPConfig | CNNConfig, input_shape: tuple[int, ...]):
    """A functional Keras model under the current global dtype policy, float32 outputs."""
    import keras
    from keras import layers

    inputs = keras.Input(shape=input_shape, name="inputs")
    x = inputs
    if cfg.kind == "cnn":
        if len(input_shape) != 3:
            raise ConfigError(
                f"model.kind cnn needs image inputs (height, width, channels); "
                f"this dataset's examples have shape {input_shape}"
            )
        for i, filters in enumerate(cfg.filters, start=1):
            x = layers.Conv2D(filters, cfg.kernel_size, padding="same",
                              activation=cfg.activation, name=f"conv_{i}")(x)
            if cfg.pooling != "none" and min(x.shape[1], x.shape[2]) >= 2:
                pool = layers.MaxPooling2D if cfg.pooling == "max" else layers.AveragePooling2D
                x = pool(2, name=f"pool_{i}")(x)
        hidden = cfg.dense_units
    else:
        hidden = cfg.hidden_units
    if len(x.shape) > 2:
        x = layers.Flatten(name="flatten")(x)
    for i, units in enumerate(hidden, start=1):
        x = layers.Dense(units, activation=cfg.activation, name=f"dense_{i}")(x)
    logits = layers.Dense(cfg.num_classes, name="logits")(x)
    outputs = layers.Activation(cfg.output_activation, dtype="float32", name="predictions")(logits)
    model = keras.Model(inputs=inputs, outputs=outputs, name=f"{cfg.kind}")
    if output_dtype(model) != "float32":
        raise MptrainError(f"internal error: model output is {output_dtype(model)}, not float32")
    return model


def output_dtype(model) -> str:
    import keras

    return keras.backend.standardize_dtype(model.outputs[0].dtype)


def build_optimizer(cfg: OptimizerConfig):
    """The configured Keras optimizer (loss scaling is the policy's to add: `policy.wrap_optimizer`)."""
    import keras

    cls = getattr(keras.optimizers, OPTIMIZERS[cfg.name][0])
    try:
        return cls(**cfg.kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"train.optimizer.kwargs {cfg.kwargs}: {OPTIMIZERS[cfg.name][0]} rejects them ({exc})"
        ) from None


def build_loss(config: ExperimentConfig):
    """The loss object; a `linear` head means the model emits logits."""
    import keras

    from_logits = config.model.output_activation == "linear"
    if config.train.loss == "binary_crossentropy":
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def build_metrics(config: ExperimentConfig) -> list[Any]:
    """Metric objects with fixed names, so both training loops report the same keys."""
    import keras

    metrics = []
    for name in config.train.metrics:
        if name == "top5_accuracy":
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=5, name=name))
        elif config.train.loss == "binary_crossentropy":
            threshold = 0.0 if config.model.output_activation == "linear" else 0.5
            metrics.append(keras.metrics.BinaryAccuracy(name=name, threshold=threshold))
        else:
            metrics.append(keras.metrics.SparseCategoricalAccuracy(name=name))
    return metrics
