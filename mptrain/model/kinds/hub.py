"""`keras_hub`: a KerasHub backbone (built from `kwargs`, or pretrained from a `preset`) with
mptrain's head. Needs the optional extra: `pip install mptrain[hub]`.

KerasHub builds every sublayer with the global policy, so a backbone's outputs are 16-bit
under a mixed policy; mptrain's head ends in a float32 activation, as the guide requires.
Token backbones get their `padding_mask` from the token ids (0 is padding) and zero
`segment_ids`; image backbones get the image.
"""

from __future__ import annotations

from mptrain.config.kinds import KerasHubConfig
from mptrain.errors import ConfigError, DataError
from mptrain.model.kinds import ModelKind


def import_keras_hub():
    try:
        import keras_hub
    except ImportError:
        raise ConfigError("model.kind keras_hub needs KerasHub: pip install 'mptrain[hub]'") from None
    return keras_hub


def build_backbone(cfg: KerasHubConfig):
    from mptrain.errors import did_you_mean

    keras_hub = import_keras_hub()
    names = sorted(n for n in dir(keras_hub.models) if n.endswith("Backbone")
                   and n not in ("Backbone", "FeaturePyramidBackbone"))
    if cfg.backbone not in names:
        raise ConfigError(f"model.backbone {cfg.backbone!r} is not a KerasHub backbone"
                          f"{did_you_mean(cfg.backbone, names)}; choose from {', '.join(names)}")
    cls = getattr(keras_hub.models, cfg.backbone)
    if cfg.preset is None:
        try:
            return cls(**cfg.kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"model.kwargs {cfg.kwargs}: {cfg.backbone} rejects them ({exc})") from None
    try:
        return cls.from_preset(cfg.preset, **cfg.kwargs)
    except ValueError as exc:
        raise ConfigError(f"model.preset {cfg.preset!r}: {exc}") from None
    except OSError as exc:  # requests' connection errors are OSErrors
        raise DataError(
            f"model.preset {cfg.preset!r} must be downloaded once (from Kaggle or Hugging Face), "
            f"and the download failed ({type(exc).__name__}). Offline: download it on a connected "
            "machine (keras_hub caches it under ~/.cache/kagglehub) and copy the cache, or give "
            "the preset's local folder as model.preset") from None


class KerasHub(ModelKind, kind="keras_hub"):
    def build(self, config, spec, objective, train_inputs=None):
        import keras

        from mptrain.model.kinds.basic import augmentation, head

        cfg: KerasHubConfig = config.model
        backbone = build_backbone(cfg)
        backbone.trainable = cfg.trainable_backbone
        # frozen: normalisation layers keep their statistics (inference mode), as for applications
        training = None if cfg.trainable_backbone else False
        names = [t.name.split(":")[0] for t in backbone.inputs]
        if spec.kind == "tokens":
            token_ids = keras.Input(shape=spec.shape, dtype="int32", name="token_ids")
            feeds = {"token_ids": token_ids, "padding_mask": token_ids != 0,
                     "segment_ids": keras.ops.zeros_like(token_ids)}
            unknown = [n for n in names if n not in feeds]
            if unknown or "token_ids" not in names:
                raise ConfigError(f"model.backbone {cfg.backbone} takes inputs {', '.join(names)}; "
                                  "mptrain feeds token backbones token_ids, padding_mask and segment_ids")
            inputs, features = token_ids, backbone({n: feeds[n] for n in names}, training=training)
        elif spec.kind == "image" and len(backbone.inputs) == 1 and len(backbone.inputs[0].shape) == 4:
            inputs = keras.Input(shape=spec.shape, name="inputs")
            features = backbone(augmentation(inputs, config.data), training=training)
        else:
            raise ConfigError(f"model.backbone {cfg.backbone} takes {', '.join(names)}; this data "
                              f"set's examples are {spec.kind} of shape {spec.shape}")
        if isinstance(features, dict):
            features = features.get("pooled_output", features.get("sequence_output"))
            if features is None:
                raise ConfigError(f"model.backbone {cfg.backbone}: no pooled_output or "
                                  "sequence_output to put a classifier on")
        outputs = head(features, cfg, objective)
        source = f"preset {cfg.preset}" if cfg.preset else "kwargs"
        return keras.Model(inputs, outputs, name=cfg.backbone.lower()), [f"{cfg.backbone} from {source}"]

