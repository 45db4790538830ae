"""What kind of problem an experiment is, in one place: its objective.

TF Model Garden holds what a kind of problem means in one `Task` (its losses, its metrics,
its step); here an `Objective` holds what mptrain needs to know of one: the form its labels
take (`Labels`), the head mptrain's own models end in (units and activation), the loss and
metrics Keras is compiled with, the quality a verdict reads (`Quality`), and the checks a
built model must pass before a step runs. Every other module asks the objective; none tests a
loss by name.

The objective follows from the loss and what the labels turned out to be (`objective_for`):

- a categorical loss (cross-entropy, focal, hinge): `Classes` (an id per example; one-hot
  rows are read as ids, and a loss that takes one-hot rows is given them), or
  `DenseClasses` when each example has an id per pixel or token (segmentation masks,
  sequence tagging), judged by mean IoU;
- a binary loss (cross-entropy, focal, hinge): `Binary` (one 0/1 label per example), or
  `MultiLabel` (several 0/1 labels per example, a sigmoid each), judged by AUC;
- a regression loss (mean_squared_error, mean_absolute_error, huber, ...): `Values`,
  regression on one target or several, judged by the mean absolute error;
- a model its builder compiled itself: `Compiled`, whose loss, loss weights and metrics are
  Keras' own from that compile (mptrain adds the precision, loss scaling and float32 outputs);
- a loss per output (`train.loss` a mapping): `Several`, one objective per output.

Which objective a loss belongs to is `losses.py`'s table of Keras' losses (each claimed by
one family, or refused by name); metric names are resolved by Keras (`keras.metrics.get`,
and `compile`'s own "accuracy"). mptrain builds an object itself only where the model's
output changes what the name means (a loss on logits, keeping every argument given; accuracy
at a logit of 0, AUC over several labels) or the labels' form does (one-hot rows for a
categorical loss). Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

from mptrain.errors import ConfigError
from mptrain.objective.composed import Compiled, OwnStep, Several
from mptrain.objective.families import FAMILIES, family_of, head_activation
from mptrain.objective.kinds import (
    Binary,
    Classes,
    DenseClasses,
    MultiLabel,
    Objective,
    Quality,
    Values,
    lower_is_better,
)
from mptrain.objective.labels import LabelStats, label_stats
from mptrain.objective.losses import DEFAULT_LOSS, resolve

__all__ = ["DEFAULT_LOSS", "Binary", "Classes", "Compiled", "DenseClasses", "LabelStats", "MultiLabel",
           "Objective", "OwnStep", "Quality", "Several", "Values", "family_of", "for_head", "head_activation",
           "label_stats", "lower_is_better", "objective_for"]


def objective_for(loss, stats: LabelStats | dict[str, LabelStats], compiled: dict | None = None,
                  target_scaling: str = "none") -> Objective:
    """The experiment's objective: its builder's compile, when it compiled the model and
    `train.loss` is left out; else from the loss (`losses.resolve`) and the labels it reads
    (`families.Family.labels`), which must suit it."""
    if compiled is not None and loss is None:
        return Compiled(compiled, stats)
    if isinstance(loss, dict):
        if not isinstance(stats, dict):
            raise ConfigError(f"train.loss names outputs ({', '.join(loss)}), and the data gives one "
                              "label per example: give each output its labels (an .npz with "
                              "y_train_OUTPUT, y_test_OUTPUT for each)")
        missing = [k for k in loss if k not in stats]
        if missing:
            raise ConfigError(f"train.loss names output {missing[0]!r}, and the data has labels for "
                              f"{', '.join(stats)}")
        return Several({k: objective_for(name, stats[k], target_scaling=target_scaling)
                        for k, name in loss.items()})
    if isinstance(stats, dict):
        raise ConfigError(f"the data gives labels for several outputs ({', '.join(stats)}): give "
                          "train.loss a loss for each (train.loss: {OUTPUT: LOSS, ...}), or "
                          "compile the model in its builder")
    spec = resolve(loss or DEFAULT_LOSS)
    family = FAMILIES[spec.family]
    return family.objective(spec, family.labels(stats, target_scaling))


def for_head(loss, units: int | None) -> Objective:
    """The objective a head of `units` outputs (`model.num_classes`) serves under `loss`,
    with no data to read: what a model built without its data (a test, a tool) is built for."""
    spec = resolve(loss if loss is not None and not isinstance(loss, dict) else DEFAULT_LOSS)
    return FAMILIES[spec.family].for_head(spec, units or 1)
