"""A family of losses, one class each: the labels its losses read (`labels`), the objective
that judges them (`objective`, `for_head`), the activation mptrain's heads end in for them,
and what the experiment file may not pair with them (heads, metrics, target scaling: `refusal`,
which the schema asks, without TensorFlow). A loss names its family in `losses.LOSSES`; every
caller asks the family found by that name (`FAMILIES`), never compares it.
"""

from __future__ import annotations

import math
from typing import ClassVar

from mptrain.errors import ConfigError, DataError
from mptrain.objective.kinds import Binary, Classes, DenseClasses, MultiLabel, Objective, Values
from mptrain.objective.labels import Labels, LabelStats, TargetScale
from mptrain.objective.losses import DEFAULT_LOSS, Loss, resolve


class Family:
    """One family; `name` is the key `losses.LOSSES` names it by."""

    name: ClassVar[str]
    head: ClassVar[str]  # the activation mptrain's own heads end in for its losses
    # model.output_activation → why it cannot serve the loss ({loss}: the loss as written)
    wrong_heads: ClassVar[dict[str, str]] = {}
    # train.metrics that mean nothing for it → why ({metric}, {loss})
    wrong_metrics: ClassVar[tuple[tuple[tuple[str, ...], str], ...]] = ()
    scales_targets: ClassVar[bool] = False  # train.target_scaling applies

    def labels(self, stats: LabelStats, target_scaling: str) -> Labels:
        """The labels as its losses read them, checked against what they take."""
        raise NotImplementedError

    def objective(self, loss: Loss, labels: Labels) -> Objective:
        raise NotImplementedError

    def for_head(self, loss: Loss, units: int) -> Objective:
        """The objective a head of `units` outputs serves, with no data to read."""
        raise NotImplementedError

    def refusal(self, head: str | None, metrics: list[str], target_scaling: str, loss: str) -> str | None:
        """Why the experiment file's head, metrics or target scaling cannot go with the loss
        (None: they can): what can be told from the file alone."""
        if head in self.wrong_heads:
            return self.wrong_heads[head].format(loss=loss)
        for names, why in self.wrong_metrics:
            if wrong := [m for m in metrics if m in names]:
                return why.format(metric=wrong[0], loss=loss)
        if target_scaling == "standard" and not self.scales_targets:
            return (f"train.target_scaling scales a regression's targets, and train.loss {loss} "
                    "takes labels: leave it out")
        return None


class ClassIds(Family):
    """Class ids, one per example or one per position (one-hot rows read as ids)."""

    name, head = "classes", "softmax"
    wrong_heads = {"sigmoid": "model.output_activation sigmoid needs train.loss binary_crossentropy "
                              "(train.loss is {loss}); use softmax or linear"}
    wrong_metrics = (((("precision", "recall", "auc")), "train.metrics {metric} (of class 1) needs "
                                                        "train.loss binary_crossentropy"),)

    def labels(self, stats: LabelStats, target_scaling: str) -> Labels:
        check_class_ids(stats)
        shape = stats.shape
        if stats.one_hot:
            return Labels("classes", shape[0], one_hot=True)
        trailing = len(shape) >= 1 and shape[-1] == 1
        dense = shape[:-1] if trailing else shape
        return Labels("classes", int(stats.high) + 1, tuple(dense), trailing_one=trailing)

    def objective(self, loss: Loss, labels: Labels) -> Objective:
        return (DenseClasses if labels.dense else Classes)(loss, labels)

    def for_head(self, loss: Loss, units: int) -> Objective:
        return Classes(loss, Labels("classes", max(units, 2)))


class ZeroOne(Family):
    """0/1 labels, one per example or several (multi-hot), or probabilities between."""

    name, head = "binary", "sigmoid"
    wrong_heads = {"softmax": "model.output_activation softmax makes the classes compete, and "
                              "train.loss binary_crossentropy takes a probability per 0/1 label: "
                              "use sigmoid (or linear for logits)"}
    wrong_metrics = ((("top5_accuracy",), "train.metrics top5_accuracy needs a multi-class loss"),)

    def labels(self, stats: LabelStats, target_scaling: str) -> Labels:
        shape, source = stats.shape, stats.source
        trailing = len(shape) >= 1 and shape[-1] == 1
        one = not shape or shape == (1,)
        if not stats.whole and stats.low >= 0 and stats.high <= 1:
            # probabilities as targets (Keras' binary losses take them): a rating scaled to 0..1
            return (Labels("classes", 2, trailing_one=trailing, soft=True) if one
                    else Labels("multi_hot", shape[0], soft=True))
        check_class_ids(stats)
        if stats.high > 1:
            raise DataError(f"{source}: binary_crossentropy takes labels 0 and 1, and these go up "
                            f"to {stats.high:g}; for class ids use sparse_categorical_crossentropy")
        if one:
            return Labels("classes", 2, trailing_one=trailing)
        if len(shape) != 1:
            raise DataError(f"{source}: 0/1 labels of shape {shape}; give one per example (N,) "
                            "or several (N, labels)")
        return Labels("multi_hot", shape[0])

    def objective(self, loss: Loss, labels: Labels) -> Objective:
        return (MultiLabel if labels.form == "multi_hot" else Binary)(loss, labels)

    def for_head(self, loss: Loss, units: int) -> Objective:
        """One unit is one 0/1 label and more are that many labels."""
        return (MultiLabel(loss, Labels("multi_hot", units)) if units > 1
                else Binary(loss, Labels("classes", 2)))


class Targets(Family):
    """Values to predict, of any rank, compared whole (the last axis a position's)."""

    name, head, scales_targets = "values", "linear", True
    wrong_heads = {"sigmoid": ClassIds.wrong_heads["sigmoid"],
                   "softmax": "model.output_activation softmax makes probabilities, and train.loss "
                              "{loss} is a regression's: use linear"}
    wrong_metrics = ((("accuracy", "acc", "top5_accuracy", "auc"),
                      "train.metrics {metric}: a regression ({loss}) has none; e.g. mae, "
                      "root_mean_squared_error, r2_score"),)

    def labels(self, stats: LabelStats, target_scaling: str) -> Labels:
        """Targets standardised where `target_scaling` asks, or by default (auto) where they
        can be: read before training, one value or one row of values per example (a target
        in the 100,000s otherwise left a regression at the MAE of always predicting its
        mean, and squares past float16's range in the loss)."""
        shape, source = stats.shape, stats.source
        if target_scaling == "standard" and not stats.mean:
            raise ConfigError(f"train.target_scaling standard: {source}'s targets are not read "
                              "before training, so nothing can be fitted to them; leave it out")
        if target_scaling == "standard" and len(shape) > 1:
            raise ConfigError(f"train.target_scaling standard scales each of an example's targets, "
                              f"and {source} has {'x'.join(map(str, shape))} per example: leave it "
                              "out")
        scaled = target_scaling == "standard" or (target_scaling == "auto" and bool(stats.mean)
                                                  and len(shape) <= 1)
        scale = (TargetScale([*stats.mean], [s if s > 0 and math.isfinite(s) else 1.0
                                             for s in stats.std]) if scaled else None)
        return Labels("values", shape[-1] if shape else 1, tuple(shape[:-1]), scale=scale)

    def objective(self, loss: Loss, labels: Labels) -> Objective:
        return Values(loss, labels)

    def for_head(self, loss: Loss, units: int) -> Objective:
        return Values(loss, Labels("values", units))


FAMILIES: dict[str, Family] = {f.name: f() for f in (ClassIds, ZeroOne, Targets)}


def family_of(loss) -> Family:
    """The family of a loss as written (`losses.resolve`: a name, or `{name, kwargs}`)."""
    return FAMILIES[resolve(loss).family]


def head_activation(spec) -> str:
    """The activation mptrain's own heads end in for a loss (as written in the experiment:
    the default's for none or a loss per output; a name no loss has is refused elsewhere,
    with its key, and heads for nothing here)."""
    single = isinstance(spec, str) or isinstance(spec, dict) and isinstance(spec.get("name"), str)
    try:
        loss = resolve(spec if single else DEFAULT_LOSS)
    except ConfigError:
        return "linear"
    return loss.kind.head or FAMILIES[loss.family].head


def check_class_ids(stats: LabelStats) -> None:
    """Labels a classifier learns from: whole numbers, 0 or more, of two classes at least."""
    source = stats.source
    if not stats.whole or stats.low < 0:
        what = (f"values from {stats.low:g} to {stats.high:g}" if stats.whole else
                "values that are not whole numbers")
        raise DataError(f"{source}: labels must be class ids (whole numbers, 0 or more), and these "
                        f"are {what}; for values to predict use a regression loss (train.loss: "
                        "mean_squared_error)")
    if stats.training_distinct < 2:
        only = stats.low if stats.training_distinct else None
        named = (stats.names[int(only)] if stats.names is not None and only is not None
                 and int(only) < len(stats.names) else only)
        named = int(named) if isinstance(named, float) else named
        raise DataError(f"{source}: every training example has the same class ({named}): there "
                        "is nothing to learn; a classifier needs examples of at least two classes")
