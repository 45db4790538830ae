"""Models: each `model.kind` builds its own (`kinds`), then the same steps for all, ending in
a float32 output (the guide's rule).

Kinds build after `policy.apply_policy`, so every layer they create follows the global
policy; each returns the model and notes on what mptrain did to it (shown before training and
kept in the summary).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mptrain.config.schema import OWN_MODELS, ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError
from mptrain.model.inputs import PixelRange, pixel_range
from mptrain.model.kinds import model_kind
from mptrain.model.outputs import PROBABILITY_ACTIVATIONS, OutputKind, read_output, sixteen_bit_probabilities


@dataclass
class BuiltModel:
    model: Any  # keras.Model
    output: OutputKind  # what the loss receives: probabilities or logits (its first output's)
    notes: list[str] = field(default_factory=list)
    pixel_range: PixelRange | None = None  # pixel data: the range the model takes (`inputs.py`)
    compiled: dict | None = None  # what its builder compiled it with (`keras_internals.compiled_with`)


def build_model(config: ExperimentConfig, spec: InputSpec, objective,
                initial_weights: Path | None = None,
                train_inputs: Callable[[], Any] | None = None) -> BuiltModel:
    """The experiment's model under the current global policy, with float32 outputs, its head
    what `objective` asks (a python builder is given its `num_classes`; None only for a
    builder whose own compile decides it, and without data `objective.for_head` says what a
    head of `model.num_classes` serves); `initial_weights`
    (from `save_initial_weights`) makes several builds start from the same weights;
    `train_inputs()`: the training split's inputs, for a `python` builder that declares
    them. A model its builder compiled keeps what it was compiled with (`BuiltModel.compiled`)."""
    import mptrain.model.fused  # noqa: F401  (registers mptrain's layers for saving/loading)
    from mptrain.model.checks import check_inputs, check_model_inputs
    from mptrain.model.keras_internals import compiled_with, reset_name_counters
    from mptrain.model.own_step import check_own_step, has_graph, own_methods, sub_models

    # every build names its layers alike (`dense`, `dense_1`...), however many models the
    # process built before: the names plan, diagnose, lint and memory show are those
    # `model.float32_layers` matches in `run`. (`keras.backend.clear_session()` would also
    # reset the global dtype policy and every traced graph.)
    reset_name_counters()
    check_inputs(config, spec)
    # only a user's builder reads the training data (to adapt its preprocessing layers)
    model, notes = model_kind(config.model).build(config, spec, objective, train_inputs)
    if has_graph(model):
        check_model_inputs(model, spec)  # before anything calls it on the data's inputs
    elif model.weights and all(sub.built for sub in sub_models(model).values()):
        # a model of its own algorithm's sub-models takes what its step takes; built as they
        # are (Keras asks it of the model itself to save or load its weights)
        model.built = True
    compiled = compiled_with(model) if getattr(model, "compiled", False) else None
    notes += check_own_step(config, model)
    rules = config.model.layer_rules
    if rules:
        from mptrain.model.dtypes import rebuild_with_policies

        model, changed = rebuild_with_policies(model, rules)
        notes.append("per-layer policies: " + ", ".join(changed))
    if not own_methods(model):
        model, kept = _float32_probabilities(model)
        notes += kept
    if config.model.fused_layers:
        from mptrain.model.fused import fuse

        model, swapped = fuse(model)
        notes.append(f"fused layers (model.fused_layers): {', '.join(swapped) or 'none to fuse'}")
    model, more = ensure_float32_output(model)
    if initial_weights is not None:
        _load_initial_weights(model, initial_weights)
    output, said = _output_kind(config, model, spec, objective)
    pixels, fed = None, []
    if spec.pixels:
        pixels, fed = pixel_range(model, config.model.pixel_range, config.model.kind in OWN_MODELS)
    elif config.model.pixel_range != "auto":
        raise ConfigError(f"model.pixel_range {config.model.pixel_range}: this data set's inputs "
                          "are not pixels (uint8 images); leave it out")
    return BuiltModel(model, output, notes + more + said + fed, pixels, compiled)


def _float32_probabilities(model):
    """The model with the layers that make its probabilities computing in float32
    (`outputs.sixteen_bit_probabilities`), as the guide keeps a softmax, and a note saying so;
    a model that cannot be rebuilt (a layer Keras cannot serialize) is kept as it is, and
    `lint` says what its 16-bit softmax costs."""
    from mptrain.model.dtypes import rebuild_with_policies

    probabilities = sixteen_bit_probabilities(model)
    if not probabilities:
        return model, []
    try:
        model, _ = rebuild_with_policies(model, dict.fromkeys(probabilities, "float32"))
    except Exception:  # noqa: BLE001  (kept as built: lint's note says the rest)
        return model, []
    return model, [f"the layer(s) making the model's probabilities ({', '.join(probabilities)}) "
                   "compute in float32, as the guide keeps a softmax: in 16 bits they round to 0 "
                   "and 1"]


def _output_kind(config: ExperimentConfig, model, spec: InputSpec,
                 objective) -> tuple[OutputKind, list[str]]:
    """Probabilities or logits, what a cross-entropy is computed on: mptrain's heads say; a
    user's model is read (`outputs.py`) unless `model.output_activation` declares it. A
    regression's values, and a model with its own compile or several outputs (each loss as
    named), are not read (their first output's reading, where it says, is kept)."""
    from mptrain.model.own_step import has_graph

    declared = config.model.output_activation
    if not has_graph(model):  # its own step computes its own losses: nothing of them to read
        return "logits", []
    if declared is not None:
        return "probabilities" if declared in PROBABILITY_ACTIVATIONS else "logits", []
    if objective is None or objective.activation == "linear":
        return read_output(model).kind or "logits", []
    reading = read_output(model, _sample_inputs(spec))
    if reading.kind is None:
        raise ConfigError(
            f"model: cannot tell whether the model's output is probabilities or logits "
            f"({reading.evidence}); set model.output_activation: softmax (or sigmoid) when it "
            "ends in that activation, linear when it returns logits")
    loss = "with from_logits=True" if reading.kind == "logits" else "on them"
    return reading.kind, [f"the model's output is {reading.kind} ({reading.evidence}): the loss "
                          f"is computed {loss}"]


def _sample_inputs(spec: InputSpec):
    """A few inputs of the data's shape and type, to call a model on."""
    import numpy as np

    batch = 8
    rng = np.random.default_rng(0)
    if spec.kind == "named":  # text as strings, whole numbers 0 or 1 (a lookup's ids), values
        return {n.name: np.full((batch, *n.shape), "?") if n.dtype == "string"
                else rng.integers(0, 2, size=(batch, *n.shape)).astype(n.dtype)
                if np.issubdtype(np.dtype(n.dtype), np.integer)
                else rng.uniform(0.0, 1.0, size=(batch, *n.shape)).astype(np.float32)
                for n in spec.named}
    if spec.kind == "tokens":
        return rng.integers(0, spec.vocab_size or 2, size=(batch, *spec.shape)).astype(np.int32)
    return rng.uniform(0.0, 1.0, size=(batch, *spec.shape)).astype(np.float32)


def output_dtype(model) -> str:
    """The dtype of the model's outputs: float32 only when every one is (a model of its own
    algorithm's sub-models: every sub-model's)."""
    import keras

    from mptrain.model.own_step import casts_in_place, has_graph, sub_models

    if casts_in_place(model):
        return "float32"
    if not has_graph(model):
        found = {output_dtype(sub) for sub in sub_models(model).values()}
        return "float32" if found <= {"float32"} else ", ".join(sorted(found - {"float32"}))
    dtypes = {keras.backend.standardize_dtype(t.dtype) for t in model.outputs}
    return "float32" if dtypes == {"float32"} else ", ".join(sorted(dtypes - {"float32"}))


def ensure_float32_output(model):
    """The model unchanged when its outputs are float32; else the model followed by a float32
    linear `Activation` on each output that is not (several outputs keep their names, which
    a loss per output is keyed by), and a note saying so. A model with its own training step
    is kept (`own_step.py`): its own call casts its output."""
    import keras

    from mptrain.model.own_step import cast_output_in_place, has_graph, own_methods, sub_models

    found = output_dtype(model)
    if found == "float32":
        return model, []
    if not has_graph(model):  # its own algorithm, over sub-models: each returns float32
        cast = [name for name, sub in sub_models(model).items() if output_dtype(sub) != "float32"]
        for name in cast:
            cast_output_in_place(getattr(model, name))
        return model, [f"the outputs of {type(model).__name__}'s {', '.join(cast)} were {found}; "
                       "mptrain casts each to float32 at the end of its own call, keeping the "
                       "model and its training step (the guide's rule)"]
    if own_methods(model):
        cast_output_in_place(model)
        return model, [f"the model's output was {found}; mptrain casts it to float32 at the end of "
                       f"the model's own call, keeping {type(model).__name__} and its training "
                       "step (the guide's rule)"]
    if len(model.outputs) == 1:
        outputs = keras.layers.Activation("linear", dtype="float32",
                                          name="float32_output")(model.outputs[0])
        wrapped = keras.Model(model.inputs, outputs, name=model.name)
    else:  # the model nested, so each float32 output can keep its output's name
        from mptrain.model.keras_internals import producer
        from mptrain.model.walk import input_structure, named_outputs

        inputs = keras.tree.map_structure(
            lambda t: keras.Input(shape=t.shape[1:], dtype=t.dtype, name=producer(t).name),
            input_structure(model))
        called = model(inputs)  # by the names a loss per output is keyed by (`named_outputs`)
        results = (dict(called) if isinstance(called, dict) else
                   dict(zip(named_outputs(model), keras.tree.flatten(called), strict=True)))
        outputs = {name: keras.layers.Activation("linear", dtype="float32", name=name)(t)
                   for name, t in results.items()}
        wrapped = keras.Model(inputs, outputs, name=f"{model.name}_float32")
    return wrapped, [f"the model's output was {found}; mptrain appended a float32 linear Activation "
                     "so the loss is computed in float32 (the guide's rule)"]


def save_initial_weights(model, path: Path) -> None:
    """The model's weights as an .npz of `model.get_weights()`, for several builds (compare's
    and plan's variants, under any policy) to start from."""
    import numpy as np

    np.savez(path, *model.get_weights())


def _load_initial_weights(model, path: Path) -> None:
    """Weights from `save_initial_weights`, cast to this model's variables: its policy may
    differ."""
    import numpy as np

    with np.load(path) as archive:
        weights = [archive[f"arr_{i}"] for i in range(len(archive.files))]
    model.set_weights([w.astype(v.dtype) for w, v in zip(weights, model.get_weights(), strict=True)])
