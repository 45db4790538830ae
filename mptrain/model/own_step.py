"""A model that brings its own training algorithm: its class defines `train_step` (or
`test_step`, `compute_loss`, `compute_metrics`), as keras.io's "Customizing what happens in
fit()" teaches, and perhaps its own `compile` with arguments of its own and optimizers under
names of its own (a distiller's `student_loss_fn`, a GAN's `d_optimizer` and `g_optimizer`).

That step *is* the training algorithm, under every policy: a comparison of float32 against
mixed_bfloat16 must compare the same algorithm. So mptrain never replaces such a model by
another one: its output is made float32 inside its own `call` (`cast_output_in_place`), not by
a wrapping model, which would train with Keras' default step; a model built of sub-models
(`sub_models`) keeps them, each made to return float32 the same way; a model with its own
`compile` keeps what its builder compiled it with (mptrain never calls that `compile`: its
arguments are the model's), and what cannot keep the step is refused before anything runs
(`check_own_step`).
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


def has_graph(model) -> bool:
    """Whether the model is a graph of layers mptrain can read (a functional model): a
    subclassed model's `call` is Python, and it may have none (a GAN's)."""
    try:
        return bool(model.outputs)
    except (AttributeError, ValueError):
        return False


def has_own_step(model) -> bool:
    """Whether the model trains with a step of its own (its methods, or its own compile):
    whatever rebuilds it as a plain Keras model would lose that step."""
    return bool(own_methods(model)) or own_compile(model)


def own_compile(model) -> bool:
    """Whether the model's class defines its own `compile` (arguments mptrain cannot give)."""
    import keras

    return type(model).compile is not keras.Model.compile


def optimizers_of(model) -> dict[str, object]:
    """Every Keras optimizer the model holds, by attribute: `optimizer`, and those a compile
    of its own stores under other names (a GAN's `d_optimizer`, `g_optimizer`)."""
    import keras

    return {name: value for name, value in vars(model).items()
            if isinstance(value, keras.optimizers.Optimizer)}


def sub_models(model) -> dict[str, object]:
    """The Keras models a model holds by attribute (a distiller's teacher and student)."""
    import keras

    return {name: value for name, value in vars(model).items() if isinstance(value, keras.Model)}


def evaluates(model) -> bool:
    """Whether Keras' evaluate can run the model: it has its own `test_step`, or a `call`
    Keras' own test_step calls (a keras.io GAN has neither: it is judged by its training)."""
    import keras

    cls = type(model)
    return cls.test_step is not keras.Model.test_step or cls.call is not keras.Model.call


def carries_algorithm(model, labelled: bool) -> bool:
    """Whether the model's own algorithm decides what it trains on and how it is judged
    (`objective.OwnStep`): it has a compile of its own, or its own step trains it on data
    without labels (a GAN's images, an autoencoder's inputs)."""
    return own_compile(model) or (not labelled and bool(own_methods(model)))


def check_own_step(config: ExperimentConfig, model) -> list[str]:
    """Refuse what would not train with the model's own step, or what mptrain would accept
    and not honour; else a note saying it trains with it (empty for a model without one).
    Whether its step scales the loss under mixed_float16 is checked where the scaling
    happens, at its first step (`loss_scale.ScalingWatch`): its source may do it in a helper
    method, which reading `train_step` cannot see."""
    if not has_own_step(model):
        return []
    methods = own_methods(model)
    cls = type(model).__name__
    own = ", ".join(methods) or f"{cls}.compile"
    if config.train.loop == "custom":
        raise ConfigError(f"train.loop custom trains with mptrain's own step, and the model "
                          f"defines {own}, which it would never call; use train.loop: fit "
                          "(Model.fit calls it, under every policy)")
    rebuilt = [key for key, on in (("model.float32_layers", config.model.layer_rules),
                                   ("model.fused_layers", config.model.fused_layers)) if on]
    if rebuilt:
        raise ConfigError(f"{rebuilt[0]} rebuilds the model as a plain Keras model, which would "
                          f"train without {own}; leave {rebuilt[0]} out for this model")
    if own_compile(model):
        _check_own_compile(config, model)
    return [f"the model trains with its own {own} (Model.fit calls it under every policy)"]


def _check_own_compile(config: ExperimentConfig, model) -> None:
    """A compile of the model's own takes arguments mptrain cannot give, so its builder calls
    it and mptrain keeps it (`training.keep_own_compile`): what the experiment would set
    there is refused by name, never accepted and ignored."""
    import inspect

    from mptrain.config.optimizers import OptimizerConfig

    cls = type(model).__name__
    signature = f"{cls}.compile{inspect.signature(type(model).compile)}".replace("(self, ", "(")
    if not getattr(model, "compiled", False):
        raise ConfigError(f"model.builder returned a {cls} that defines its own compile "
                          f"({signature}), not compiled: mptrain cannot give its arguments; call "
                          "it in the builder, as keras.io does, and return the compiled model")
    train, optimizers = config.train, list(optimizers_of(model))
    kept = [("train.loss", train.loss is not None), ("train.metrics", train.metrics is not None),
            ("train.loss_weights", train.loss_weights is not None),
            ("train.class_weight", train.class_weight is not None),
            ("train.optimizer", train.optimizer != OptimizerConfig()),
            ("train.xla_optimizer_update", bool(train.xla_optimizer_update)),
            ("train.reduce_lr_on_plateau",
             train.reduce_lr_on_plateau is not None and len(optimizers) > 1)]
    refused = next((key for key, set_ in kept if set_), None)
    if refused is not None:
        raise ConfigError(f"{refused}: {cls} was compiled by its own {signature}, which chose its "
                          f"losses, metrics and optimizers ({', '.join(optimizers)}); mptrain keeps that "
                          f"compile and cannot honour {refused}: leave it out (or set it in the "
                          "builder's compile call)")


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
