"""`saved`: a model you already have (`model.keras`), re-trained under the chosen policy.

A loaded model keeps the dtype policy of each layer as saved, so loading alone would train a
float32 model in float32 whatever the experiment says. mptrain rebuilds the model from its
config with every layer's policy replaced by the experiment's, keeps the layers that were
deliberately different from the rest (e.g. the guide's float32 output activation), makes the
output float32, and copies the saved weights into the rebuilt model.
"""

from __future__ import annotations

import importlib.util
import json
import zipfile

from mptrain.config.kinds import SavedConfig
from mptrain.errors import ConfigError
from mptrain.model.dtypes import objects, rebuild_with_policies
from mptrain.model.exported import trained_part
from mptrain.model.kinds import ModelKind


def _importable(module: str | None) -> bool:
    if module is None or module in ("__main__", "builtins"):
        return False
    if module == "keras" or module.startswith("keras."):
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class Saved(ModelKind, kind="saved"):
    def check(self, cfg: SavedConfig) -> None:
        """A .keras file, every class of which can be found here: Keras' own, or one from a
        module that imports. A custom layer saved from a script (not registered in an importable
        module) cannot be loaded, and `run` would fail on it."""
        path = cfg.path
        if not path.is_file():
            raise ConfigError(f"model.path {path}: no such file")
        if path.suffix != ".keras":
            raise ConfigError(f"model.path {path}: expected a .keras file (model.save('x.keras'))")
        try:
            with zipfile.ZipFile(path) as archive:
                saved = json.loads(archive.read("config.json"))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise ConfigError(f"model.path {path}: not a readable .keras file ({exc})") from None
        missing = sorted({node.get("registered_name") or node["class_name"] for node in objects(saved)
                          if "class_name" in node and "module" in node and not _importable(node["module"])})
        if missing:
            raise ConfigError(
                f"model.path {path}: the model uses {', '.join(missing)}, which cannot be loaded "
                "here: a custom layer must be registered (keras.saving.register_keras_serializable) "
                "in a module this Python can import, e.g. the package of your builder")

    def build(self, config, spec, objective, train_inputs=None):
        import keras

        cfg: SavedConfig = config.model
        self.check(cfg)
        try:
            original = keras.saving.load_model(cfg.path, compile=False)
        except Exception as exc:
            raise ConfigError(f"model.path {cfg.path}: cannot load it ({type(exc).__name__}: {exc}); "
                              "a model with custom layers needs them registered "
                              "(keras.saving.register_keras_serializable) in an importable module; "
                              "--verbose shows where") from exc
        original = trained_part(original)  # a model mptrain saved: the steps its pipeline takes
        policy = keras.mixed_precision.global_policy().name
        last = original.layers[-1]
        keep = frozenset({last.name} if type(last).__name__ in ("Activation", "Softmax") else ())
        rebuilt, kept = rebuild_with_policies(original, {}, default=policy, keep=keep)
        notes = [f"loaded {cfg.path} and rebuilt it under {policy}"]
        if cfg.unfreeze:
            # Keras' trainable setter reaches every layer, a nested backbone's too, but on
            # TensorFlow setting the value an attribute already holds is skipped (the model is
            # trainable, its backbone not): False first, so that True is set
            rebuilt.trainable = False
            rebuilt.trainable = True
            notes.append("every layer trainable (model.unfreeze)")
        if kept:
            notes.append("layers kept at their own policy: " + ", ".join(kept))
        return rebuilt, notes


