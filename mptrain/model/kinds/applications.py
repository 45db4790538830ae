"""`application`: any architecture in `keras.applications`, with mptrain's head.

The backbone is built with `include_top=False` on the data's image size (or `model.image_size`,
resized inside the model), behind the application's own input preprocessing as a float32
layer (`layers.ImagePreprocessing`); mptrain's head (pooling, dropout, Dense, float32
activation) replaces the 1000-class ImageNet top.
"""

from __future__ import annotations

from pathlib import Path

from mptrain.config.kinds import APPLICATIONS, ApplicationConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError, DataError
from mptrain.model.kinds import ModelKind


class KerasApplication(ModelKind, kind="application"):
    def check(self, cfg: ApplicationConfig) -> None:
        if cfg.weights not in (None, "imagenet") and not Path(cfg.weights).is_file():
            raise ConfigError(f"model.weights {cfg.weights}: no such file")

    def check_fits(self, cfg: ApplicationConfig, spec: InputSpec) -> None:
        """Image inputs, 1 or 3 channels, at least the architecture's minimum size."""
        if spec.kind != "image":
            raise ConfigError(f"model.kind application needs image inputs (height, width, channels); "
                              f"this data set's examples have shape {spec.shape}")
        channels = spec.shape[2]
        if channels not in (1, 3):
            raise ConfigError(f"model.name {cfg.name} takes RGB images (grayscale is repeated to "
                              f"RGB); this data set's images have {channels} channels")
        height, width = cfg.image_size or spec.shape[:2]
        least = APPLICATIONS[cfg.name].min_size
        if min(height, width) < least:
            raise ConfigError(
                f"model.name {cfg.name} needs images of at least {least}x{least}; these are "
                f"{height}x{width}. Set model.image_size: [{max(least, height)}, {max(least, width)}] "
                "to resize them inside the model, or use larger images")

    def build(self, config, spec, objective, train_inputs=None):
        import keras
        from keras import layers

        from mptrain.model.kinds.basic import augmentation, head
        from mptrain.model.layers import ImagePreprocessing

        cfg: ApplicationConfig = config.model
        notes = []
        inputs = keras.Input(shape=spec.shape, name="inputs")
        x = augmentation(inputs, config.data)
        if cfg.image_size and tuple(cfg.image_size) != tuple(spec.shape[:2]):
            x = layers.Resizing(*cfg.image_size, dtype="float32", name="resize")(x)
            notes.append(f"images resized from {spec.shape[0]}x{spec.shape[1]} to "
                         f"{cfg.image_size[0]}x{cfg.image_size[1]} inside the model")
        x = ImagePreprocessing(APPLICATIONS[cfg.name].preprocessing, name="preprocessing")(x)
        if spec.shape[2] == 1:
            notes.append("grayscale images repeated to 3 channels for the application")
        try:
            backbone = getattr(keras.applications, cfg.name)(
                include_top=False, weights=cfg.weights, input_shape=x.shape[1:], **cfg.kwargs)
        except TypeError as exc:
            raise ConfigError(f"model.kwargs {cfg.kwargs}: {cfg.name} rejects them ({exc})") from None
        except ValueError as exc:
            raise ConfigError(f"model {cfg.name}: {exc}") from None
        except Exception as exc:  # a download that failed: offline, proxy, bad hash
            if cfg.weights == "imagenet":
                raise DataError(
                    f"model.weights imagenet: the ImageNet weights of {cfg.name} must be downloaded "
                    f"once, and the download failed ({type(exc).__name__}: {exc}). Offline: copy "
                    "the weights file into ~/.keras/models/ from a connected machine, or set "
                    "model.weights to null (random) or to a local .weights.h5 file") from None
            raise
        backbone.trainable = cfg.trainable_backbone
        if not cfg.trainable_backbone:
            notes.append(f"{cfg.name} is frozen (model.trainable_backbone: false): only the head trains")
        # frozen: BatchNorm keeps its statistics (inference mode), as Keras' fine-tuning guide says
        features = backbone(x, training=None if cfg.trainable_backbone else False)
        outputs = head(features, cfg, objective)
        return keras.Model(inputs, outputs, name=cfg.name.lower()), notes

