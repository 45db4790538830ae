"""A model that brings its own training step: its class defines `train_step` (or `test_step`,
`compute_loss`, `compute_metrics`), as keras.io's "Customizing what happens in fit()" teaches.

That step *is* the training algorithm, under every policy: a comparison of float32 against
mixed_bfloat16 must compare the same algorithm. So mptrain never replaces such a model by
another one: its output is made float32 inside its own `call` (`cast_output_in_place`), not by
a wrapping model, which would train with Keras' default step; and what cannot keep the step is
refused before anything runs (`check_own_step`).
"""

from __future__ import annotations

import functools

from mptrain.config.schema import ExperimentConfig
from mptrain.errors import ConfigError

TRAINING_METHODS = ("train_step", "test_step", "compute_loss", "compute_metrics")


def own_methods(model) -> list[str]:
    """`Class.method` for each training method the model's class defines over Keras' own."""
    import keras

    cls = type(model)
    return [f"{cls.__name__}.{name}" for name in TRAINING_METHODS
            if getattr(cls, name, None) is not getattr(keras.Model, name, None)]


def check_own_step(config: ExperimentConfig, model) -> list[str]:
    """Refuse what would not train with the model's own step; else a note saying it does
    (empty for a model without one). Whether its step scales the loss under mixed_float16 is
    checked where the scaling happens, at its first step (`loss_scale.watch_scaling`): its
    source may do it in a helper method, which reading `train_step` cannot see."""
    methods = own_methods(model)
    if not methods:
        return []
    own = ", ".join(methods)
    if config.train.loop == "custom":
        raise ConfigError(f"train.loop custom trains with mptrain's own step, and the model "
                          f"defines {own}, which it would never call; use train.loop: fit "
                          "(Model.fit calls it, under every policy)")
    rebuilt = [key for key, on in (("model.float32_layers", config.model.layer_rules),
                                   ("model.fused_layers", config.model.fused_layers)) if on]
    if rebuilt:
        raise ConfigError(f"{rebuilt[0]} rebuilds the model as a plain Keras model, which would "
                          f"train without {own}; leave {rebuilt[0]} out for this model")
    return [f"the model trains with its own {own} (Model.fit calls it under every policy)"]


def cast_output_in_place(model) -> None:
    """The model's own `call` made to return float32 (the guide's rule), keeping the model,
    its class and its training step: Keras' `__call__` looks `call` up on the instance."""
    import keras

    call = model.call

    @functools.wraps(call)
    def float32_call(*args, **kwargs):
        return keras.tree.map_structure(lambda t: keras.ops.cast(t, "float32"), call(*args, **kwargs))

    float32_call.casts_to_float32 = True
    model.call = float32_call


def casts_in_place(model) -> bool:
    """Whether `cast_output_in_place` made the model's output float32 (its symbolic outputs,
    read from its graph, still carry the 16-bit dtype)."""
    return getattr(model.call, "casts_to_float32", False)
