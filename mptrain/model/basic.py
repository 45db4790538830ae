"""mptrain's own small models: `mlp` (the guide's model) and `cnn`."""

from __future__ import annotations

from mptrain.config.schema import CNNConfig, ExperimentConfig, MLPConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError


def build_mlp(config: ExperimentConfig, spec: InputSpec):
    return _build(config.model, spec, config.data), []


def build_cnn(config: ExperimentConfig, spec: InputSpec):
    if len(spec.shape) != 3:
        raise ConfigError(
            f"model.kind cnn needs image inputs (height, width, channels); this data set's "
            f"examples have shape {spec.shape}")
    return _build(config.model, spec, config.data), []


def _build(cfg: MLPConfig | CNNConfig, spec: InputSpec, data_cfg):
    import keras
    from keras import layers

    from mptrain.model.head import augmentation

    inputs = keras.Input(shape=spec.shape, name="inputs")
    x = augmentation(inputs, data_cfg) if len(spec.shape) == 3 else inputs
    if cfg.kind == "cnn":
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
    return keras.Model(inputs=inputs, outputs=outputs, name=cfg.kind)
