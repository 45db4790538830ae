"""`saved`: a model you already have (`model.keras`), re-trained under the chosen policy.

A loaded model keeps the dtype policy of each layer as saved, so loading alone would train a
float32 model in float32 whatever the experiment says. mptrain rebuilds the model from its
config with every layer's policy replaced by the experiment's, keeps the layers that were
deliberately different from the rest (e.g. the guide's float32 output activation), makes the
output float32, and copies the saved weights into the rebuilt model.
"""

from __future__ import annotations

from mptrain.config.kinds import SavedConfig
from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError
from mptrain.model.dtypes import rebuild_with_policies


def check_saved(cfg: SavedConfig) -> None:
    if not cfg.path.is_file():
        raise ConfigError(f"model.path {cfg.path}: no such file")
    if cfg.path.suffix != ".keras":
        raise ConfigError(f"model.path {cfg.path}: expected a .keras file (model.save('x.keras'))")


def build_saved(config: ExperimentConfig, spec: InputSpec, objective):
    import keras

    cfg: SavedConfig = config.model
    check_saved(cfg)
    try:
        original = keras.saving.load_model(cfg.path, compile=False)
    except Exception as exc:
        raise ConfigError(f"model.path {cfg.path}: cannot load it ({type(exc).__name__}: {exc}); "
                          "a model with custom layers needs them registered "
                          "(keras.saving.register_keras_serializable) in an importable module; "
                          "--verbose shows where") from exc
    policy = keras.mixed_precision.global_policy().name
    last = original.layers[-1]
    keep = frozenset({last.name} if type(last).__name__ in ("Activation", "Softmax") else ())
    rebuilt, kept = rebuild_with_policies(original, {}, default=policy, keep=keep)
    notes = [f"loaded {cfg.path} and rebuilt it under {policy}"]
    if cfg.unfreeze:
        _unfreeze(rebuilt)
        notes.append("every layer trainable (model.unfreeze)")
    if kept:
        notes.append("layers kept at their own policy: " + ", ".join(kept))
    return rebuilt, notes


def _unfreeze(layer) -> None:
    """Make a layer and every layer inside it trainable. (A functional model's `trainable`
    setter does not reach into a nested model, such as an application backbone.)"""
    layer.trainable = True
    for inner in getattr(layer, "layers", []):
        _unfreeze(inner)
