"""mptrain's own small models (`mlp`, the guide's model, and `cnn`), and where every mptrain
model meets its backbone: the input stem and the classification head.

The head ends in the guide's "CORRECT" pattern: a Dense layer producing logits in the
policy's dtype, then a separate `Activation(output_activation, dtype="float32")`, so the
softmax and the loss see float32 whatever the policy.
"""

from __future__ import annotations

from mptrain.config.schema import CNNConfig, ExperimentConfig, MLPConfig
from mptrain.data.dataset import InputSpec


def build_basic(config: ExperimentConfig, spec: InputSpec):
    """`mlp` and `cnn`: a cnn's convolutions, then both kinds' Dense stack and head."""
    import keras
    from keras import layers

    cfg: MLPConfig | CNNConfig = config.model
    inputs = keras.Input(shape=spec.shape, name="inputs")
    x = augmentation(inputs, config.data) if len(spec.shape) == 3 else inputs
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
    return keras.Model(inputs=inputs, outputs=classification_head(x, cfg), name=cfg.kind), []


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


def classification_head(features, cfg):
    """Pool (a feature map or a sequence), optional dropout, Dense logits, float32 output."""
    from keras import layers

    x = features
    use_max = getattr(cfg, "pooling", "avg") == "max"
    if len(x.shape) == 4:
        x = (layers.GlobalMaxPooling2D if use_max else layers.GlobalAveragePooling2D)(name="pool")(x)
    elif len(x.shape) == 3:
        x = (layers.GlobalMaxPooling1D if use_max else layers.GlobalAveragePooling1D)(name="pool")(x)
    if getattr(cfg, "dropout", 0.0):
        x = layers.Dropout(cfg.dropout, name="head_dropout")(x)
    logits = layers.Dense(cfg.num_classes, name="logits")(x)
    return layers.Activation(cfg.output_activation, dtype="float32", name="predictions")(logits)
