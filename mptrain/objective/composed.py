"""The objectives whose heads, losses and metrics are the model's or its parts', none of which
mptrain makes: a builder's own compile (`Compiled`), a model's own training algorithm
(`OwnStep`), and a loss per output (`Several`)."""

from __future__ import annotations

import math
from typing import Any

from mptrain.objective.kinds import Objective, Quality
from mptrain.objective.labels import Labels, LabelStats


class _Composed(Objective):
    """An objective whose heads, losses and metrics are the model's or its parts' (several
    heads, or none mptrain makes): nothing to add to its metrics, nothing of one head to check."""

    activation = "linear"
    one_head = False

    def default_metrics(self) -> list[str]:
        return []

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        return []

    def check_positions(self, shape: tuple) -> None:
        return None


class Compiled(_Composed):
    """The model its builder compiled: Keras' own loss, loss weights and metrics from that
    compile, under every policy and both loops."""

    name = "the model's own compile"

    def __init__(self, compiled: dict, stats: LabelStats | dict[str, LabelStats]):
        self.compiled, self.spec = compiled, None
        self.outputs = list(stats) if isinstance(stats, dict) else []
        first = next(iter(stats.values())) if isinstance(stats, dict) else stats
        # labels go to the model's own loss as stored (one-hot rows stay one-hot)
        self.loss_name = _describe_loss(compiled.get("loss"))
        self.labels = _as_stored(first)
        self.quality = _first_metric(compiled.get("metrics")) or Quality("loss", False, "loss")

    def describe(self) -> str:
        """Several outputs are named, not described by the first one's labels."""
        if not self.outputs:
            return super().describe()
        return f"{self.name} ({len(self.outputs)} outputs: {', '.join(self.outputs)}; loss {self.loss_name})"

    def batch_labels(self, tf, y):
        return tf.nest.map_structure(
            lambda t: tf.cast(t, tf.float32) if t.dtype.is_floating else t, y)

    def loss(self, output: str) -> Any:
        return self.compiled.get("loss")

    def compile_arguments(self) -> dict[str, Any]:
        """The builder's compile, as mptrain recompiles it (its optimizer is the experiment's)."""
        keys = ("loss", "loss_weights", "metrics", "weighted_metrics")
        return {k: self.compiled[k] for k in keys if self.compiled.get(k) is not None}


class OwnStep(Compiled):
    """A model that carries its own training algorithm (`model.own_step`): its losses, its
    metrics and, with a compile of its own (a distiller's `student_loss_fn`, a GAN's
    `d_optimizer`), its optimizers are its own; its labels reach its step as stored, or there
    are none (a GAN's images alone). It is judged by the first metric it was compiled with
    (`train.monitor` names another); a model that reports only losses is not judged: a GAN's
    d_loss and g_loss are each side's share of a game, and a lower one is no better model."""

    name = "the model's own training algorithm"

    def __init__(self, model_class: str, compiled: dict | None, stats: LabelStats | None):
        self.compiled, self.spec, self.outputs = compiled or {}, None, []
        self.loss_name = f"{model_class}'s own"
        self.labels = None if stats is None else _as_stored(stats)
        self.quality = _first_metric(self.compiled.get("metrics"))

    def describe(self) -> str:
        return f"{self.loss_name} training step ({self.labels.describe() if self.labels else 'no labels'})"

    def batch_labels(self, tf, y):
        return super().batch_labels(tf, y) if self.labels is not None else y


class Several(_Composed):
    """A loss per output (`train.loss` a mapping): one objective per output, each judged as
    its own; the verdict reads the first output's quality."""

    name = "several outputs"

    def __init__(self, parts: dict[str, Objective]):
        self.parts, self.spec = parts, None
        first_name, first = next(iter(parts.items()))
        self.loss_name = ", ".join(f"{k}: {o.loss_name}" for k, o in parts.items())
        self.labels = first.labels
        self.quality = Quality(f"{first_name}_{first.quality.metric}", first.quality.higher_is_better,
                               f"{first_name} {first.quality.label}", first.quality.proportion)

    def batch_labels(self, tf, y):
        return {k: self.parts[k].batch_labels(tf, v) for k, v in y.items()}

    def loss(self, output: str) -> Any:
        return {k: o.loss(output) for k, o in self.parts.items()}

    def describe(self) -> str:
        """'several outputs: value, a regression (1 target; loss mse); kind, a classification
        (3 classes; ...)': each output's own objective, not the first's labels for all."""
        return f"{self.name}: " + "; ".join(f"{k}, a {o.describe()}" for k, o in self.parts.items())


def _as_stored(stats: LabelStats) -> Labels:
    """Labels as a model's own step takes them (as stored), for its description: class ids
    (whole numbers, one per example: as many classes as the highest id says), one-hot rows,
    or values."""
    if stats.one_hot:
        return Labels("classes", stats.shape[0])
    if stats.whole and not stats.shape:
        return Labels("classes", int(stats.high) + 1)
    return Labels("values", math.prod(stats.shape) if stats.shape else 1)


def _first_metric(metrics) -> Quality | None:
    """The quality a compile's first metric judges (None: it has none): an output's first
    under the name Keras reports it by, the output's name first."""
    output = next(iter(metrics)) if isinstance(metrics, dict) else None
    metric = (metrics[output] if output else metrics) or []
    metric = metric[0] if isinstance(metric, list | tuple) and metric else metric
    name = metric if isinstance(metric, str) else getattr(metric, "name", None)
    if not isinstance(name, str) or not name:
        return None
    name = f"{output}_{name}" if output else name
    return Quality.named(name, metric)


def _describe_loss(loss) -> str:
    if isinstance(loss, dict):
        return ", ".join(f"{k}: {_describe_loss(v)}" for k, v in loss.items())
    if isinstance(loss, str):
        return loss
    return getattr(loss, "name", None) or type(loss).__name__
