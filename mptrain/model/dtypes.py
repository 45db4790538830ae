"""Per-layer dtype policies on a built model, by layer name.

Keras gives each layer its policy when the layer is created; changing it afterwards means
rebuilding. So a model is serialized, the `dtype` of the chosen layers' configs is rewritten,
the model is rebuilt from that config and its weights are copied back. That works for every
model kind, nested models (an application's backbone) included, and for models mptrain did
not write (`python`, `saved`), whose layers it knows only by name.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from typing import Any

from mptrain.errors import ConfigError, did_you_mean


def objects(serialized: Any):
    """Every dict in a serialized Keras object (a saved model's config), nested ones included,
    each before those inside it."""
    if isinstance(serialized, dict):
        yield serialized
        serialized = list(serialized.values())
    if isinstance(serialized, list):
        for value in serialized:
            yield from objects(value)


def layer_configs(serialized: Any):
    """Every layer config in a serialized model, nested ones included (not the inputs: an
    InputLayer's `dtype` is its tensor's type, not a policy)."""
    for node in objects(serialized):
        inner = node.get("config")
        if isinstance(inner, dict) and "dtype" in inner and node.get("class_name") != "InputLayer":
            yield node


def policy_name(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("class_name") == "DTypePolicy":
        return value.get("config", {}).get("name")
    return None


def rebuild(model, edit):
    """The model serialized, `edit(layer_config)` applied to each layer's config (in place),
    rebuilt from that and its weights copied back."""
    import keras

    serialized = keras.saving.serialize_keras_object(model)
    for layer in list(layer_configs(serialized)):
        edit(layer)
    rebuilt = keras.saving.deserialize_keras_object(serialized)
    rebuilt.set_weights(model.get_weights())
    return rebuilt


def rebuild_with_policies(model, rules: dict[str, str], default: str | None = None,
                          keep: frozenset[str] = frozenset()):
    """The model rebuilt with layer policies changed, its weights copied back.

    `rules` map layer-name globs to policies (first match wins; every glob must match a
    layer). `default`, when given, is the policy of every other layer, except those in `keep`
    and those whose saved policy differs from the model's own (most common) one: deliberate
    exceptions such as the guide's float32 output. Returns (model, [changed or kept layers]).
    """
    import keras

    layers = list(layer_configs(keras.saving.serialize_keras_object(model)))
    names = [c["config"].get("name", "") for c in layers]
    for pattern in rules:
        if not fnmatch.filter(names, pattern):
            raise ConfigError(f"model layer policy {pattern!r} matches no layer"
                              f"{did_you_mean(pattern, names)}; the layers are "
                              f"{', '.join(names[:30])}{', ...' if len(names) > 30 else ''}")
    saved = Counter(policy_name(c["config"]["dtype"]) for c in layers)
    own = saved.most_common(1)[0][0] if saved else None
    report = []

    def edit(layer: dict) -> None:
        name = layer["config"].get("name", "")
        current = policy_name(layer["config"]["dtype"])
        if current is None:
            return
        rule = next((policy for pattern, policy in rules.items() if fnmatch.fnmatch(name, pattern)), None)
        if rule is not None:
            layer["config"]["dtype"] = rule
            report.append(f"{name} ({rule})")
        elif default is not None:
            if name in keep or current != own:
                report.append(f"{name} ({current})")
            else:
                layer["config"]["dtype"] = default

    return rebuild(model, edit), report
