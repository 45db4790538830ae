"""What a model is compiled with, the same in both loops: the objective's loss, its metrics,
the loss weights (`compile_arguments`), and the loss tracker each step's own loss is read
from (`step_loss`)."""

from __future__ import annotations

from typing import Any


def compile_arguments(config, objective, output: str) -> dict[str, Any]:
    """The objective's loss (for a model whose output is `output`: probabilities or logits),
    its loss weights, and the metrics `train.metrics` names (the objective's own when it names
    none), each resolved as Keras' compile resolves it but where the output changes a name's
    meaning (`Objective.metric`). A model its builder compiled keeps its own loss, loss
    weights and metrics (`objective.Compiled`)."""
    from mptrain.objective import Compiled, Several

    if isinstance(objective, Compiled):
        return objective.compile_arguments()
    check_names(config)
    named = config.train.metrics
    if isinstance(objective, Several):
        parts = objective.parts
        chosen = named if isinstance(named, dict) else {k: o.default_metrics() for k, o in parts.items()}
        metrics = {out: [parts[out].metric(m, output) for m in ms] for out, ms in chosen.items()}
    else:
        names = named if named is not None else objective.default_metrics()
        metrics = [objective.metric(m, output) for m in names]
    return {"loss": objective.loss(output), "metrics": metrics,
            "loss_weights": config.train.loss_weights}


# what compile takes by a name of its own, before Keras' tables (`compile_utils.get_metric`)
COMPILE_NAMES = ("accuracy", "acc", "crossentropy", "ce")
OURS = ("top5_accuracy",)  # mptrain's: SparseTopKCategoricalAccuracy(k=5)


def check_names(config) -> None:
    """Every metric `train` names is one Keras knows, as compile resolves names
    (`keras.metrics.get`): an unknown one is refused here, naming the key and Keras' own
    names, not as Keras' error from inside compile. (Losses are read by the objectives' own
    table when the experiment is: `objective.losses`.)"""
    import keras

    from mptrain.errors import ConfigError, did_you_mean

    metrics = config.train.metrics
    names = [m for ms in metrics.values() for m in ms] if isinstance(metrics, dict) else metrics or []
    for name in (n for n in names if n not in COMPILE_NAMES + OURS):
        try:
            keras.metrics.get(name)
        except (ValueError, TypeError):
            known = sorted(n for n in dir(keras.metrics) if n[:1].islower()
                           and n not in ("get", "serialize", "deserialize"))
            raise ConfigError(f"train.metrics {name!r}: not a name Keras knows"
                              f"{did_you_mean(name, known)}; Keras' own include {', '.join(known)} "
                              "(and their classes, e.g. MeanAbsoluteError)") from None


def step_loss(model):
    """The model's loss tracker (Keras' `Mean` named "loss", compile's or a model's own):
    reset before each step, its value after it is the step's own loss, and a loss scaler's
    skipped step leaves it NaN for that step alone (the monitor averages an epoch's finite
    ones). None for a model whose own step tracks no "loss"."""
    return next((m for m in model.metrics if m.name == "loss"), None)
