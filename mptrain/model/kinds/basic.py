"""mptrain's own small models (`mlp`, the guide's model, and `cnn`), and where every mptrain
model meets its backbone: the input stem and the head the objective asks for.

The head ends in the guide's "CORRECT" pattern: a Dense layer producing logits in the
policy's dtype, then a separate `Activation(output_activation, dtype="float32")`, so the
softmax and the loss see float32 whatever the policy. A regression's Dense computes in float32
too: its outputs are the answer, and a 16-bit one rounds them (bfloat16's values near 1,000
are 8 apart; float16 stops at 65,504).
"""

from __future__ import annotations

import math

from mptrain.config.kinds import CNNConfig, MLPConfig
from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError
from mptrain.model.kinds import ModelKind


class MLP(ModelKind, kind="mlp"):
    """Dense layers on the flattened inputs: the guide's model."""

    def build(self, config, spec, objective, train_inputs=None):
        return build_basic(config, spec, objective, config.model.hidden_units)

    def parameters_and_activations(self, config, spec):
        cfg, batch = config.model, config.train.batch_size
        widths = [math.prod(spec.shape), *cfg.hidden_units, cfg.num_classes or 1]
        return _dense(widths), batch * sum(widths)

    def resize_hint(self, layer: str, what: str) -> str:
        if layer.startswith("dense_") or layer == "logits":
            return "change it in model.hidden_units"
        return super().resize_hint(layer, what)


class CNN(ModelKind, kind="cnn"):
    """Convolutions (each pooled in two), then Dense layers: images only."""

    def check_fits(self, cfg: CNNConfig, spec: InputSpec) -> None:
        if len(spec.shape) != 3:
            raise ConfigError(f"model.kind cnn needs image inputs (height, width, channels); this "
                              f"data set's examples have shape {spec.shape}")

    def build(self, config, spec, objective, train_inputs=None):
        return build_basic(config, spec, objective, config.model.dense_units, convolutions=True)

    def parameters_and_activations(self, config, spec):
        cfg, batch = config.model, config.train.batch_size
        height, width, channels = spec.shape
        params, activations = 0, batch * math.prod(spec.shape)
        for filters in cfg.filters:
            params += cfg.kernel_size ** 2 * channels * filters + filters
            activations += batch * height * width * filters
            channels = filters
            if cfg.pooling != "none":
                height, width = max(1, height // 2), max(1, width // 2)
        widths = [height * width * channels, *cfg.dense_units, cfg.num_classes or 1]
        return params + _dense(widths), activations + batch * sum(widths)

    def resize_hint(self, layer: str, what: str) -> str:
        return "change it in model.filters" if layer.startswith("conv_") else \
            "change it in model.dense_units"


def _dense(widths: list[int]) -> int:
    """The parameters of Dense layers from one width to the next (kernels and biases)."""
    return sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))


def build_basic(config: ExperimentConfig, spec: InputSpec, objective, hidden: list[int],
                convolutions: bool = False):
    """`mlp` and `cnn`: a cnn's convolutions, then both kinds' Dense stack (`hidden`) and head."""
    import keras
    from keras import layers

    cfg: MLPConfig | CNNConfig = config.model
    inputs = keras.Input(shape=spec.shape, name="inputs")
    x = augmentation(inputs, config.data) if len(spec.shape) == 3 else inputs
    for i, filters in enumerate(cfg.filters if convolutions else [], start=1):
        x = layers.Conv2D(filters, cfg.kernel_size, padding="same",
                          activation=cfg.activation, name=f"conv_{i}")(x)
        if cfg.pooling != "none" and min(x.shape[1], x.shape[2]) >= 2:
            pool = layers.MaxPooling2D if cfg.pooling == "max" else layers.AveragePooling2D
            x = pool(2, name=f"pool_{i}")(x)
    if len(x.shape) > 2:
        x = layers.Flatten(name="flatten")(x)
    for i, units in enumerate(hidden, start=1):
        x = layers.Dense(units, activation=cfg.activation, name=f"dense_{i}")(x)
    return keras.Model(inputs=inputs, outputs=head(x, cfg, objective), name=cfg.kind), []


def augmentation(x, data_cfg):
    """Random flips and shifts from `data.random_flip` / `data.random_crop` (image folders),
    as float32 layers that act in training only: part of the model, so they run on the device
    and their random state is the model's. `random_crop: p` is the classic pad-by-p-and-crop,
    done as a random shift of up to p pixels with zero fill (Keras' RandomCrop would return
    the padded size at inference)."""
    from keras import layers

    flip = getattr(data_cfg, "random_flip", "none")
    pixels = getattr(data_cfg, "random_crop", 0)
    if flip != "none":
        x = layers.RandomFlip(flip, dtype="float32", name="random_flip")(x)
    if pixels:
        height, width = x.shape[1], x.shape[2]
        x = layers.RandomTranslation(pixels / height, pixels / width, fill_mode="constant",
                                     dtype="float32", name="random_crop")(x)
    return x


def head(features, cfg, objective):
    """Pool (a feature map or a sequence; not where the objective has a label per
    position), optional dropout, Dense logits (float32 for a regression), float32 output."""
    from keras import layers

    x = features
    wanted = objective.labels.dense
    if wanted:
        if tuple(x.shape[1:-1]) != wanted:
            raise ConfigError(
                f"model.kind {cfg.kind} ends in features of shape {tuple(x.shape[1:-1])} per "
                f"example and the data has a label at each of {'x'.join(map(str, wanted))} "
                "positions: a label per pixel needs a model that keeps (or restores) the "
                "image's size, your own (model.kind python), e.g. keras.io's U-Net "
                "(docs/models.md); mptrain's transformer tags each token")
    else:
        use_max = getattr(cfg, "pooling", "avg") == "max"
        if len(x.shape) == 4:
            x = (layers.GlobalMaxPooling2D if use_max else layers.GlobalAveragePooling2D)(name="pool")(x)
        elif len(x.shape) == 3:
            x = (layers.GlobalMaxPooling1D if use_max else layers.GlobalAveragePooling1D)(name="pool")(x)
    if getattr(cfg, "dropout", 0.0):
        x = layers.Dropout(cfg.dropout, name="head_dropout")(x)
    values = objective.activation == "linear" and cfg.output_activation == "linear"
    logits = layers.Dense(cfg.num_classes, name="logits", dtype="float32" if values else None)(x)
    return layers.Activation(cfg.output_activation, dtype="float32", name="predictions")(logits)
