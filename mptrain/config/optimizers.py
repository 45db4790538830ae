"""The keyword arguments each Keras optimizer accepts, checked without importing Keras.

`mptrain validate` must answer in well under a second, and importing Keras imports TensorFlow
(seconds). So the optimizers' signatures are written down here, and a test compares this table
with `inspect.signature` of the installed Keras: if Keras adds or renames an argument, the test
fails instead of users meeting a confusing optimizer error after the data has loaded.
"""

from __future__ import annotations

from typing import Any, Literal

from mptrain.errors import did_you_mean

Kind = Literal["number", "bool", "int"]

# Arguments every Keras 3 optimizer takes (`keras.optimizers.Optimizer.__init__`).
COMMON: dict[str, Kind] = {
    "weight_decay": "number",
    "clipnorm": "number",
    "clipvalue": "number",
    "global_clipnorm": "number",
    "use_ema": "bool",
    "ema_momentum": "number",
    "ema_overwrite_frequency": "int",
    "gradient_accumulation_steps": "int",
}

# name in the experiment → (Keras class, its own arguments)
OPTIMIZERS: dict[str, tuple[str, dict[str, Kind]]] = {
    "rmsprop": ("RMSprop", {"learning_rate": "number", "rho": "number", "momentum": "number",
                            "epsilon": "number", "centered": "bool"}),
    "adam": ("Adam", {"learning_rate": "number", "beta_1": "number", "beta_2": "number",
                      "epsilon": "number", "amsgrad": "bool"}),
    "adamw": ("AdamW", {"learning_rate": "number", "beta_1": "number", "beta_2": "number",
                        "epsilon": "number", "amsgrad": "bool"}),
    "sgd": ("SGD", {"learning_rate": "number", "momentum": "number", "nesterov": "bool"}),
    "nadam": ("Nadam", {"learning_rate": "number", "beta_1": "number", "beta_2": "number",
                        "epsilon": "number"}),
    "adamax": ("Adamax", {"learning_rate": "number", "beta_1": "number", "beta_2": "number",
                          "epsilon": "number"}),
    "adagrad": ("Adagrad", {"learning_rate": "number", "initial_accumulator_value": "number",
                            "epsilon": "number"}),
    "lion": ("Lion", {"learning_rate": "number", "beta_1": "number", "beta_2": "number"}),
    "lamb": ("Lamb", {"learning_rate": "number", "beta_1": "number", "beta_2": "number",
                      "epsilon": "number"}),
}

# each optimizer's learning rate when kwargs give none (Keras' defaults, checked by a test):
# what a batch-size change scales (`config.batch_scaling`)
DEFAULT_LEARNING_RATE = {"rmsprop": 0.001, "adam": 0.001, "adamw": 0.001, "sgd": 0.01,
                         "nadam": 0.001, "adamax": 0.001, "adagrad": 0.001, "lion": 0.001,
                         "lamb": 0.001}

MINIMUM = {"gradient_accumulation_steps": 2}  # Keras refuses 1

# Arguments mptrain sets itself: accepting them from YAML would fight the run's own settings.
RESERVED = {
    "loss_scale_factor": "loss scaling is set by the policy (mixed_float16) and train.loss_scale",
    "name": "mptrain names the optimizer",
}


def check_kwargs(optimizer: str, kwargs: dict[str, Any]) -> list[str]:
    """Problems with `kwargs` for `optimizer`, one sentence each (empty when all is well)."""
    _, own = OPTIMIZERS[optimizer]
    accepted = {**own, **COMMON}
    problems = []
    for key, value in kwargs.items():
        if key in RESERVED:
            problems.append(f"{key}: not allowed here ({RESERVED[key]})")
        elif key not in accepted:
            hint = did_you_mean(key, accepted)
            problems.append(f"{key}: {OPTIMIZERS[optimizer][0]} has no such argument{hint}; "
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
    if isinstance(value, bool):
        return kind == "bool"
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "int":
        return isinstance(value, int)
    return False

