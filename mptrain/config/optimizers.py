"""The experiment's optimizer (`train.optimizer`: its name, its arguments, a learning-rate
schedule), and the keyword arguments each Keras optimizer accepts, checked without importing
Keras.

`mptrain validate` must answer in well under a second, and importing Keras imports TensorFlow
(seconds). So the optimizers' signatures are written down here, and a test compares this table
with `inspect.signature` of the installed Keras: if Keras adds or renames an argument, the test
fails instead of users meeting a confusing optimizer error after the data has loaded.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mptrain.config.names import Positive, _Strict
from mptrain.errors import did_you_mean

Kind = Literal["number", "bool", "int"]


def _args(numbers: str, flags: str = "", whole: str = "") -> dict[str, Kind]:
    """Keyword arguments by kind, from their names: numbers, booleans and whole numbers."""
    return {**dict.fromkeys(numbers.split(), "number"), **dict.fromkeys(flags.split(), "bool"),
            **dict.fromkeys(whole.split(), "int")}


# Arguments every Keras 3 optimizer takes (`keras.optimizers.Optimizer.__init__`).
COMMON = _args("weight_decay clipnorm clipvalue global_clipnorm ema_momentum", flags="use_ema",
               whole="ema_overwrite_frequency gradient_accumulation_steps")


class KerasOptimizer(NamedTuple):
    """What an optimizer's name in an experiment stands for in Keras."""

    keras_name: str  # its class in keras.optimizers
    # its learning rate when kwargs give none: Keras' default (checked by a test), what a
    # batch-size change scales (`config.batch_scaling`)
    default_rate: float
    arguments: dict[str, Kind]  # its own keyword arguments (besides `COMMON`), by kind


_ADAM_LIKE = "learning_rate beta_1 beta_2 epsilon"
OPTIMIZERS: dict[str, KerasOptimizer] = {
    "rmsprop": KerasOptimizer("RMSprop", 0.001, _args("learning_rate rho momentum epsilon", "centered")),
    "adam": KerasOptimizer("Adam", 0.001, _args(_ADAM_LIKE, "amsgrad")),
    "adamw": KerasOptimizer("AdamW", 0.001, _args(_ADAM_LIKE, "amsgrad")),
    "sgd": KerasOptimizer("SGD", 0.01, _args("learning_rate momentum", "nesterov")),
    "nadam": KerasOptimizer("Nadam", 0.001, _args(_ADAM_LIKE)),
    "adamax": KerasOptimizer("Adamax", 0.001, _args(_ADAM_LIKE)),
    "adagrad": KerasOptimizer("Adagrad", 0.001, _args("learning_rate epsilon initial_accumulator_value")),
    "lion": KerasOptimizer("Lion", 0.001, _args("learning_rate beta_1 beta_2")),
    "lamb": KerasOptimizer("Lamb", 0.001, _args(_ADAM_LIKE)),
}

MINIMUM = {"gradient_accumulation_steps": 2}  # Keras refuses 1

# Arguments mptrain sets itself: accepting them from YAML would fight the run's own settings.
RESERVED = {
    "loss_scale_factor": "loss scaling is set by the policy (mixed_float16) and train.loss_scale",
    "name": "mptrain names the optimizer",
}


def check_kwargs(optimizer: str, kwargs: dict[str, Any]) -> list[str]:
    """Problems with `kwargs` for `optimizer`, one sentence each (empty when all is well)."""
    keras_name, _, own = OPTIMIZERS[optimizer]
    accepted = {**own, **COMMON}
    problems = []
    for key, value in kwargs.items():
        if key in RESERVED:
            problems.append(f"{key}: not allowed here ({RESERVED[key]})")
        elif key not in accepted:
            hint = did_you_mean(key, accepted)
            problems.append(f"{key}: {keras_name} has no such argument{hint}; "
                            f"it accepts {', '.join(sorted(accepted))}")
        elif value is not None and not _is_kind(value, accepted[key]):
            problems.append(f"{key} = {value!r}: expected {_KIND_TEXT[accepted[key]]}")
        elif accepted[key] == "number" and isinstance(value, int | float) and value < 0:
            problems.append(f"{key} = {value!r}: must not be negative")
        elif key in MINIMUM and value is not None and value < MINIMUM[key]:
            problems.append(f"{key} = {value!r}: must be at least {MINIMUM[key]} (or null)")
    return problems


_KIND_TEXT = {"number": "a number (e.g. 0.001 or 1e-3)", "bool": "true or false",
              "int": "a whole number"}


def _is_kind(value: Any, kind: Kind) -> bool:
    if isinstance(value, bool):  # an int to Python, not to an optimizer
        return kind == "bool"
    return isinstance(value, {"number": int | float, "int": int}.get(kind, ()))


# --- train.optimizer ------------------------------------------------------------------------


class ConstantSchedule(_Strict):
    kind: Literal["constant"] = Field(description="One learning rate, after an optional warm-up.")
    learning_rate: float = Field(gt=0, description="The learning rate after warm-up.")
    warmup_steps: int = Field(0, ge=0, description="Steps of linear warm-up from warmup_from.")
    warmup_from: float = Field(0.0, ge=0, description=(
        "The learning rate the warm-up starts from (a batch scaled by train.lr_scaling: linear "
        "warms up from the learning rate of the batch it was set for, as Goyal et al. do)."))


class CosineSchedule(_Strict):
    """Linear warm-up to `learning_rate`, then cosine decay to `alpha` x it."""

    kind: Literal["cosine"] = Field(description="Cosine decay (Keras' CosineDecay).")
    learning_rate: float = Field(gt=0, description="The peak learning rate, after warm-up.")
    warmup_steps: int = Field(0, ge=0, description="Steps of linear warm-up from 0.")
    decay_steps: int | None = Field(None, ge=1, description="Default: every step after warm-up.")
    alpha: float = Field(0.0, ge=0.0, le=1.0, description=(
        "The final learning rate, as a fraction of learning_rate."))


class ExponentialSchedule(_Strict):
    kind: Literal["exponential"] = Field(description="Exponential decay (Keras' ExponentialDecay).")
    learning_rate: float = Field(gt=0, description="The learning rate at step 0.")
    decay_steps: int = Field(ge=1, description="Steps over which it is multiplied by decay_rate.")
    decay_rate: float = Field(gt=0, description=(
        "learning_rate x decay_rate ^ (step / decay_steps)."))
    staircase: bool = Field(False, description=(
        "Decay at whole multiples of decay_steps (a staircase), not smoothly."))


class PiecewiseSchedule(_Strict):
    kind: Literal["piecewise"] = Field(description=(
        "Constant between step boundaries (Keras' PiecewiseConstantDecay)."))
    boundaries: list[Positive] = Field(min_length=1, description=(
        "The steps at which the learning rate changes, increasing."))
    values: list[Annotated[float, Field(gt=0)]] = Field(description=(
        "The learning rate before the first boundary, then after each: one more than "
        "boundaries."))

    @model_validator(mode="after")
    def _one_more_value(self) -> PiecewiseSchedule:
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError(f"piecewise: {len(self.boundaries)} boundaries need "
                             f"{len(self.boundaries) + 1} values, got {len(self.values)}")
        if self.boundaries != sorted(set(self.boundaries)):
            raise ValueError("piecewise: boundaries must increase")
        return self


Schedule = Annotated[ConstantSchedule | CosineSchedule | ExponentialSchedule | PiecewiseSchedule,
                     Field(discriminator="kind")]

LrScaling = Literal["none", "linear", "sqrt"]
OptimizerName = Literal[tuple(OPTIMIZERS)]  # type: ignore[valid-type]


class OptimizerConfig(_Strict):
    name: OptimizerName = Field("rmsprop", description="The Keras optimizer (the guide's: rmsprop).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "The optimizer's arguments, e.g. {learning_rate: 0.001, weight_decay: 0.01}; checked "
        "against its Keras signature."))
    schedule: Schedule | None = Field(None, description=(
        "A learning-rate schedule, in place of kwargs.learning_rate."))

    @field_validator("kwargs")
    @classmethod
    def _keras_accepts_kwargs(cls, kwargs: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "name" in info.data:  # else the name itself was invalid, and said so
            problems = check_kwargs(info.data["name"], kwargs)
            if problems:
                raise ValueError("; ".join(problems))
        return kwargs

    @model_validator(mode="after")
    def _one_learning_rate(self) -> OptimizerConfig:
        if self.schedule is not None and "learning_rate" in self.kwargs:
            raise ValueError("train.optimizer: give the learning rate in kwargs or a schedule, "
                             "not both")
        return self
