"""Checks of the model an experiment names against its files, its data and this machine:
`check_model` (no TensorFlow), then `check_fits`, made by `validate` and by `run` (before
anything heavy runs, and again on the data `run` loads: `fit_to_data`). A model that cannot
fit is refused before TensorFlow allocates it.
"""

from __future__ import annotations

from mptrain.config.kinds import OWN_MODELS
from mptrain.config.schema import EPOCH_RULES, ExperimentConfig
from mptrain.data.dataset import Dataset, InputSpec
from mptrain.errors import ConfigError, DataError, MptrainError
from mptrain.hardware.machine import machine_memory_bytes
from mptrain.model.kinds import model_kind
from mptrain.model.size import training_bytes_lower_bound
from mptrain.model.walk import input_structure


def check_model(config: ExperimentConfig) -> None:
    """Raise a ConfigError on a model `run` could not build (its files)."""
    model_kind(config.model).check(config.model)


def objective_of(config: ExperimentConfig, labels, compiled: dict | None = None,
                 tentative: bool = False, algorithm: str | None = None):
    """The experiment's objective (`objective.objective_for`) and notes on it: the model's
    own training algorithm (`algorithm`: the class of a model that carries one,
    `own_step.carries_algorithm`); the builder's own compile when it compiled the model and
    `train.loss` is left out (what mptrain cannot honour of it refused by name); else from
    the loss and the labels. `tentative`: before a python builder has run, whose model may be
    what decides (None then, where the default loss does not suit the labels, or there are
    none)."""
    from mptrain.objective import Compiled, OwnStep, objective_for

    if algorithm is not None:
        objective = OwnStep(algorithm, compiled, labels)
        return objective, [f"trained and judged as {algorithm}'s own step has it: its losses, its "
                           "figures" + ("" if labels is not None else ", on the data's inputs alone")]
    if labels is None:
        if tentative and model_kind(config.model).runs_code:
            return None, []
        raise ConfigError("the data has no labels (its inputs alone), and a model mptrain "
                          "compiles learns from labels: give the data its labels, or train a "
                          "model whose own train_step needs none (model.kind python: a GAN, an "
                          "autoencoder of its own; docs/models.md)")
    if compiled is not None and config.train.loss is None:
        if (steps := compiled.get("steps_per_execution") or 1) != 1:
            raise ConfigError(f"model.builder compiled the model with steps_per_execution={steps}: "
                              "mptrain times and records every step; compile it without")
        if compiled.get("run_eagerly"):
            raise ConfigError("model.builder compiled the model with run_eagerly=True: mptrain "
                              "measures compiled steps (and XLA); compile it without")
        objective = objective_for(None, labels, compiled)
        notes = [f"trained on the model's own compile ({objective.loss_name}; its metrics and "
                 "loss weights), with train.optimizer and mptrain's precision and loss scaling"]
        if compiled.get("optimizer") is not None:
            notes.append(f"the {type(compiled['optimizer']).__name__} the model was compiled with "
                         "is replaced by train.optimizer")
        return objective, notes
    try:
        objective = objective_for(config.train.loss, labels,
                                  target_scaling=config.train.target_scaling)
    except MptrainError:
        if tentative and config.train.loss is None and model_kind(config.model).runs_code:
            return None, []
        raise
    if isinstance(objective, Compiled):
        return objective, []
    notes = []
    if getattr(objective.labels, "one_hot", False) and not objective.one_hot:
        notes.append(f"one-hot labels read as class ids, which {objective.loss_name} takes")
    if (scale := objective.labels.scale) is not None:
        shown = ", ".join(f"{m:.4g} ± {d:.4g}" for m, d in zip(scale.mean, scale.std, strict=True))
        notes.append(f"targets standardised (train.target_scaling): (y - mean) / std with mean ± "
                     f"std {shown}, fitted on the training split; the loss and metrics are in "
                     "those units (an MAE times std is in the targets' own)")
    return objective, notes


def fit_to_data(config: ExperimentConfig, data: Dataset, objective) -> ExperimentConfig:
    """The experiment with `model.num_classes` what the objective's head must output when it
    was left out (and an image folder's `data.image_size` the size its images were given at),
    checked against what the data turned out to be (`check_fits`); an error names the
    experiment file, as `validate`'s do. Labels the model cannot output are an error before
    training, not a NaN loss in it."""
    from mptrain.config import variant
    from mptrain.objective import Classes

    if getattr(config.data, "image_size", False) is None:
        config = variant(config, {"data.image_size": list(data.spec.shape[:2])})
    try:
        if objective is not None and objective.one_head:
            wanted = config.model.num_classes
            if wanted is None:
                config = variant(config, {"model.num_classes": objective.units})
            elif isinstance(objective, Classes) and objective.units > wanted:
                raise DataError(
                    f"{data.source}: labels go up to {objective.units - 1} but "
                    f"model.num_classes is {wanted}; set model.num_classes to at least "
                    f"{objective.units} (or leave it out: the data's classes)")
        check_fits(config, data.spec, data.train.size)
        _check_monitors(config, objective, validation=data.val is not None)
    except MptrainError as exc:
        raise type(exc)(f"{config.source}: {exc}") from exc.__cause__
    return config


def _check_monitors(config: ExperimentConfig, objective, validation: bool) -> None:
    """An epoch rule watches the loss or a metric the run reports: the ones `train.metrics`
    names (checked with the file), else the objective's own (known once the data is); and a
    validation figure only where the data has a validation split."""
    # (a model's own figures, several outputs' or its compile's, are known at its first step:
    # `runner.NamedFigures` checks them there)
    names = (objective.default_metrics() if objective is not None and objective.one_head
             and config.train.metrics is None else None)
    for key in EPOCH_RULES:
        rule = getattr(config.train, key)
        if rule is None:
            continue
        watched = rule.monitor.removeprefix("val_")
        if names is not None and watched != "loss" and watched not in names:
            raise ConfigError(f"train.{key}.monitor {rule.monitor}: not an epoch figure of this "
                              f"{objective.name}; allowed: loss, {', '.join(names)}, each with "
                              "val_ first (train.metrics names others)")
        if rule.monitor.startswith("val_") and not validation:
            raise ConfigError(f"train.{key} watches a validation figure and the data has no "
                              "validation split; set data.validation_split (e.g. 0.2) or watch a "
                              "training figure (monitor: loss)")


def check_built(config: ExperimentConfig, model, objective) -> list[str]:
    """The built model against its objective, before a step runs (its inputs were checked
    against the data as it was built: `check_model_inputs`): its outputs are what the
    objective needs (`Objective.check`: refused, naming the layer and the fix, where training
    would fail after set-up or train with exit 0 on something that cannot learn; said, not
    refused, what is merely odd)."""
    from mptrain.model.outputs import read_output
    from mptrain.model.own_step import has_graph
    from mptrain.model.walk import named_outputs
    from mptrain.objective import Several

    if not has_graph(model):  # its own step takes the data, and computes its own losses
        return []
    if isinstance(objective, Several):
        named = named_outputs(model)
        missing = [k for k in objective.parts if k not in named]
        if missing:
            raise ConfigError(f"train.loss names output {missing[0]!r}, and the model's outputs are "
                              f"{', '.join(named)}")
        notes = []
        for name, tensor in named.items():
            if name in objective.parts:
                index = next(i for i, t in enumerate(model.outputs) if t is tensor)
                objective.parts[name].check_positions(tuple(tensor.shape))
                notes += objective.parts[name].check(tensor.shape[-1], read_output(model, index=index),
                                                     None)
        return notes
    units = model.outputs[0].shape[-1]
    if len(model.outputs) > 1 and objective.one_head:
        raise ConfigError(f"the model has {len(model.outputs)} outputs ({', '.join(named_outputs(model))}) "
                          f"and train.loss is one loss: give one per output (train.loss: "
                          "{OUTPUT: LOSS, ...}), or compile the model in its builder")
    notes = objective.check(units, read_output(model), config.train.class_weight)
    objective.check_positions(tuple(model.outputs[0].shape))
    return notes


def check_model_inputs(model, spec: InputSpec) -> None:
    """A built model takes the data's inputs: one input, of the data's shape (a dimension
    the model leaves open takes any size); for several named inputs (a CSV's columns, an
    .npz's x_train_NAME arrays), one input of each name, of its shape. `build_model` asks, for
    every kind, before anything calls the model."""
    structure = input_structure(model)
    if spec.kind == "named":
        taken = ({name: t for name, t in structure.items()} if isinstance(structure, dict)
                 else {t.name: t for t in model.inputs})
        wanted = {n.name: n.shape for n in spec.named}
        if sorted(taken) != sorted(wanted):
            raise ConfigError(
                f"model: it takes inputs named {', '.join(taken)} and the data gives the inputs "
                f"{', '.join(wanted)} (a CSV's columns with data.inputs: columns, an .npz's "
                "x_train_NAME arrays); name one keras.Input for each "
                "(keras.Input(shape=..., name=NAME)), or, for a CSV, set data.feature_columns to "
                "those the model takes")
        for name, shape in wanted.items():
            if shape != (1,):  # a CSV's cell: Keras takes (1,) and () alike
                _same_shape(tuple(taken[name].shape[1:]), shape, f"input {name!r}")
        return
    if isinstance(structure, dict) or len(model.inputs) != 1:
        names = [getattr(t, "name", "?") for t in model.inputs]
        raise ConfigError(f"model: it takes {len(model.inputs)} inputs ({', '.join(names)}) and "
                          "the data gives each example as one array; give the model one input "
                          "(or give the data one array per input: a CSV's columns with "
                          "data.inputs: columns, an .npz's x_train_NAME and x_test_NAME)")
    _same_shape(tuple(model.inputs[0].shape[1:]), spec.shape, "inputs")


def _same_shape(declared: tuple, stored: tuple, what: str) -> None:
    """The model's declared shape of one example against the data's (None: any size)."""
    if len(declared) != len(stored) or any(
            want is not None and want != got for want, got in zip(declared, stored, strict=False)):
        raise ConfigError(f"model: it takes {what} of shape {_shape(declared)} and the data's "
                          f"examples have shape {_shape(stored)}")


def _shape(dims) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in dims) + ")"


def check_fits(config: ExperimentConfig, spec: InputSpec | None, train_examples: int | None) -> None:
    """Does the experiment fit its data and this machine, as far as is known (`spec` None:
    the inputs are not known yet)? An error names the key to change. The model's inputs come
    first: the memory estimate assumes inputs the model takes."""
    if spec is not None:
        check_inputs(config, spec)
    batch = config.train.batch_size
    if train_examples is not None and batch > train_examples:
        raise ConfigError(f"train.batch_size {batch} is larger than the {train_examples} "
                          f"training examples; lower it to at most {train_examples} (Keras would "
                          f"train on one batch of {train_examples} an epoch: the batch the "
                          "experiment names would never run, nor could a step be timed at it)")
    if spec is None:
        return
    estimate = training_bytes_lower_bound(config, spec)
    available = machine_memory_bytes()
    if estimate is not None and available and estimate > available:
        raise ConfigError(
            f"this experiment needs about {estimate / 2**30:,.1f} GiB to train (weights, "
            f"gradients, optimizer state and activations of batch {batch}) and this machine "
            f"has {available / 2**30:,.1f} GiB; make the model (model.hidden_units, "
            "model.filters, model.embed_dim...) or train.batch_size smaller")


def check_inputs(config: ExperimentConfig, spec: InputSpec) -> None:
    """Does the data's input suit the model (image size, channels, vocabulary, sequence
    length)? `check_fits` asks, and `build_model` again, whoever builds."""
    kind = config.model.kind
    if spec.kind == "named" and kind not in OWN_MODELS:
        raise ConfigError(f"the data gives several named inputs ({', '.join(n.name for n in spec.named)}: "
                          "a CSV's data.inputs: columns, an .npz's x_train_NAME arrays), for a model "
                          f"of your own (model.kind python or saved) that takes them; model.kind {kind} "
                          "takes one input (a CSV's data.inputs: vector, an .npz's x_train)")
    model_kind(config.model).check_fits(config.model, spec)
