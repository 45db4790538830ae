"""Keras' losses, each claimed by the objective that judges it: the one table a loss name is
read by (`resolve`), without TensorFlow (`mptrain validate` reads it too).

A loss is what Keras compiles from the name the experiment gives (a function's name, its
class's, or one of Keras' short names: `bce`, `mse`), with the arguments given
(`train.loss: {name: binary_focal_crossentropy, kwargs: {gamma: 3}}`). Which objective it
belongs to is this table's, never a test on the name's letters (one read every name holding
"binary" and "crossentropy" as plain binary cross-entropy, and trained a focal loss as one).
mptrain makes the loss object itself (`Loss.build`) only to say what the model's output is
(`from_logits`), keeping every argument, and gives the loss its labels as it takes them
(class ids, or one-hot rows for a categorical loss). A loss no objective of mptrain's can
judge is refused by name, with what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mptrain.errors import ConfigError, did_you_mean

FamilyName = Literal["classes", "binary", "values"]  # `families.FAMILIES` keys


@dataclass(frozen=True)
class LossKind:
    """One of Keras' losses: its class, its function's name, the objective family that
    judges it (None: none of mptrain's, and `refused` says why), whether its labels are
    one-hot rows (a categorical loss; class ids for a sparse one), whether it takes
    `from_logits`, and the activation mptrain's own heads end in for it."""

    keras_class: str
    function: str
    family: FamilyName | None
    one_hot: bool = False
    logits: bool = False
    head: str | None = None  # None: the family's (softmax, sigmoid, linear)
    refused: str = ""
    # its own keyword arguments (besides `LOSS_COMMON` and mptrain's from_logits), checked by
    # `validate` without Keras; a test holds them to the installed Keras' signatures
    arguments: tuple[str, ...] = ()


LOSSES = (
    LossKind("SparseCategoricalCrossentropy", "sparse_categorical_crossentropy", "classes", logits=True,
             arguments=("ignore_class", "axis")),
    LossKind("CategoricalCrossentropy", "categorical_crossentropy", "classes", one_hot=True, logits=True,
             arguments=("label_smoothing", "axis")),
    LossKind("CategoricalFocalCrossentropy", "categorical_focal_crossentropy", "classes", one_hot=True,
             logits=True, arguments=("alpha", "gamma", "label_smoothing", "axis")),
    LossKind("CategoricalHinge", "categorical_hinge", "classes", one_hot=True, head="linear"),
    LossKind("CategoricalGeneralizedCrossEntropy", "categorical_generalized_cross_entropy", "classes",
             arguments=("q",)),
    LossKind("BinaryCrossentropy", "binary_crossentropy", "binary", logits=True,
             arguments=("label_smoothing", "axis")),
    LossKind("BinaryFocalCrossentropy", "binary_focal_crossentropy", "binary", logits=True,
             arguments=("apply_class_balancing", "alpha", "gamma", "label_smoothing", "axis")),
    LossKind("Hinge", "hinge", "binary", head="linear"),
    LossKind("SquaredHinge", "squared_hinge", "binary", head="linear"),
    LossKind("MeanSquaredError", "mean_squared_error", "values"),
    LossKind("MeanAbsoluteError", "mean_absolute_error", "values"),
    LossKind("MeanAbsolutePercentageError", "mean_absolute_percentage_error", "values"),
    LossKind("MeanSquaredLogarithmicError", "mean_squared_logarithmic_error", "values"),
    LossKind("Huber", "huber", "values", arguments=("delta",)),
    LossKind("LogCosh", "log_cosh", "values"),
    LossKind("CosineSimilarity", "cosine_similarity", "values", arguments=("axis",)),
    LossKind("Poisson", "poisson", None, refused=(
        "its predictions must be positive rates (an exponential or softplus head), and "
        "mptrain's regression heads are linear")),
    LossKind("KLDivergence", "kl_divergence", None, refused=(
        "its targets are distributions over classes, which no data kind of mptrain's gives")),
    LossKind("Dice", "dice", None, refused="it scores overlapping masks, not mptrain's labels"),
    LossKind("Tversky", "tversky", None, refused="it scores overlapping masks, not mptrain's labels"),
    LossKind("Circle", "circle", None, refused="it learns embeddings from pairs, not labels"),
    LossKind("CTC", "ctc", None, refused="it aligns sequences of unequal length, not labels"),
)
# Keras' own short names (`keras.losses.get`: `ALL_OBJECTS_DICT`), each in lower and upper case
ALIASES = {"bce": "BinaryCrossentropy", "kld": "KLDivergence", "mae": "MeanAbsoluteError",
           "mse": "MeanSquaredError", "mape": "MeanAbsolutePercentageError",
           "msle": "MeanSquaredLogarithmicError"}
BY_NAME = {**{k.keras_class: k for k in LOSSES}, **{k.function: k for k in LOSSES}}
BY_NAME |= {case(alias): BY_NAME[cls] for alias, cls in ALIASES.items() for case in (str.lower, str.upper)}
DEFAULT_LOSS = "sparse_categorical_crossentropy"
# set by mptrain from the model's output, never by the experiment
MPTRAIN_ARGUMENTS = ("from_logits",)
LOSS_COMMON = ("reduction", "name", "dtype")  # every Keras loss's


@dataclass(frozen=True)
class Loss:
    """A loss as the experiment names it (`written`, with its `kwargs`), and its kind."""

    written: str
    kind: LossKind
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> FamilyName:
        return self.kind.family  # (resolve refuses a loss that has none)

    def describe(self) -> str:
        """'binary_focal_crossentropy (gamma=3)': what the summary's objective says."""
        given = ", ".join(f"{k}={v}" for k, v in self.kwargs.items())
        return self.written + (f" ({given})" if given else "")

    def build(self, output: str) -> Any:
        """The Keras loss object, with every argument given, `from_logits` as the model's
        output is (`output`: probabilities or logits) where the loss takes it."""
        import keras

        arguments = dict(self.kwargs)
        if self.kind.logits:
            arguments["from_logits"] = output == "logits"
        loss_class = getattr(keras.losses, self.kind.keras_class)
        try:
            return loss_class(**arguments)
        except TypeError as exc:  # an argument the class does not take
            import inspect

            taken = [p for p in inspect.signature(loss_class).parameters
                     if p not in ("self", "reduction", "name", "dtype", *MPTRAIN_ARGUMENTS)]
            raise ConfigError(f"train.loss {self.written}: {exc}; its arguments: "
                              f"{', '.join(taken)}") from None


def resolve(spec, key: str = "train.loss") -> Loss:
    """The loss a name, or a `{name, kwargs}` mapping (`config.schema.LossConfig`, or as
    written), means; a ConfigError naming `key` for a name no Keras loss has, one no
    objective of mptrain's judges (with why and what to do), or an argument mptrain sets
    itself."""
    if isinstance(spec, str):
        name, kwargs = spec, {}
    elif isinstance(spec, dict):
        name, kwargs = spec.get("name"), dict(spec.get("kwargs") or {})
    else:
        name, kwargs = spec.name, dict(spec.kwargs)
    kind = BY_NAME.get(name)
    if kind is None:
        names = sorted(k.function for k in LOSSES if k.family is not None)
        raise ConfigError(f"{key} {name!r}: not a loss Keras knows{did_you_mean(name, list(BY_NAME))}; "
                          f"the ones mptrain trains: {', '.join(names)} (their classes too, e.g. "
                          "MeanAbsoluteError, and Keras' short names: mse, mae, bce)")
    if kind.family is None:
        raise ConfigError(f"{key} {name}: mptrain has no objective to judge it ({kind.refused}); "
                          "compile it in your model's builder and leave train.loss out (the "
                          "builder's own compile is trained as it is)")
    mine = [a for a in kwargs if a in MPTRAIN_ARGUMENTS]
    if mine:
        raise ConfigError(f"{key} {name}: kwargs {mine[0]} is mptrain's to set, from the model's "
                          "output (its last activation): leave it out")
    unknown = [a for a in kwargs if a not in (*kind.arguments, *LOSS_COMMON)]
    if unknown:
        raise ConfigError(f"{key} {name}: kwargs {unknown[0]!r} is not an argument of "
                          f"{kind.keras_class}{did_you_mean(unknown[0], list(kind.arguments))}; its "
                          f"arguments: {', '.join(kind.arguments + LOSS_COMMON)}")
    return Loss(name, kind, kwargs)
