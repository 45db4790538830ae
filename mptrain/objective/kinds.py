"""The objectives: one small class per kind of problem (see the package's docstring), each
saying its head, its labels' form in a batch, its loss and metrics as `compile` takes them,
its quality, and the checks a built model must pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mptrain.errors import ConfigError
from mptrain.objective.labels import Labels
from mptrain.objective.losses import Loss


@dataclass(frozen=True)
class Quality:
    """The figure a verdict reads: the test metric named `metric`, whether higher is better,
    and how a table names it."""

    metric: str
    higher_is_better: bool
    label: str
    proportion: bool = False  # a share of examples (accuracy): its noise is binomial

    @classmethod
    def named(cls, name: str, metric: Any = None) -> Quality:
        """The figure a run reports as `name`, labelled so: higher is better as a compiled
        Keras `metric` says (its `_direction`), else unless the metric's own name (not an
        output's before it) says a loss or an error (`lower_is_better`)."""
        way = getattr(metric, "_direction", None)
        higher = way == "up" if way else not lower_is_better(str(getattr(metric, "name", metric or name)))
        return cls(name, higher, name, proportion="accuracy" in name)


ACCURACY = Quality("accuracy", True, "accuracy", proportion=True)


class Objective:
    """One kind of problem; see the module docstring. Subclasses set the class attributes and
    override what differs."""

    name: ClassVar[str]
    activation: ClassVar[str]  # what mptrain's heads end in
    quality: ClassVar[Quality]
    one_head: ClassVar[bool] = True  # one output whose width `units` is (not a compile's, nor several)

    def __init__(self, loss: Loss, labels: Labels):
        self.spec, self.loss_name, self.labels = loss, loss.describe(), labels

    @property
    def one_hot(self) -> bool:
        """Its loss takes one-hot rows (a categorical loss), not class ids."""
        return self.spec is not None and self.spec.kind.one_hot

    # --- the head and the data ---------------------------------------------------------

    @property
    def units(self) -> int:
        return self.labels.units

    def batch_labels(self, tf, y):
        """The labels as a batch reaches the loss (the pipeline maps this over batches)."""
        return y

    # --- compile -------------------------------------------------------------------------

    def default_metrics(self) -> list[str]:
        """The metric its quality reads; none when that is the loss, reported anyway."""
        return [] if self.quality.metric == "loss" else [self.quality.metric]

    def loss(self, output: str) -> Any:
        """What `compile` is given as the loss, for a model whose output is `output`
        (probabilities or logits): the loss named, with every argument given
        (`losses.Loss.build`)."""
        return self.spec.build(output)

    def metric(self, name: str, output: str) -> Any:
        """What `compile` is given for a metric name; Keras resolves it, but where the output
        changes what it means (accuracy of logits, AUC of logits)."""
        if name == "top5_accuracy":
            import keras

            return keras.metrics.SparseTopKCategoricalAccuracy(k=5, name=name)
        return name

    # --- checks before training ----------------------------------------------------------

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        """The built model's output (`units` wide, read as `reading`) against the labels;
        raises ConfigError where training would fail or learn nothing; returns notes."""
        if class_weight:
            raise ConfigError(f"train.class_weight weighs classes, and this {self.name} has none: "
                              "leave it out")
        if units != self.units:
            raise ConfigError(f"the model outputs {units} value(s) per example and the data has "
                              f"{self.labels.describe()}: end it in {self.units} output(s) "
                              "(model.num_classes, or what its builder takes)")
        return []

    def check_positions(self, shape: tuple) -> None:
        """A head outputs its units at each label position (`labels.dense`; none for a label
        per example), a dimension left open taking any size: refused where it outputs more
        or other positions, which the loss would broadcast its labels against, training on
        nothing sensible in silence."""
        positions, dense = tuple(shape[1:-1]), self.labels.dense
        if len(positions) == len(dense) and all(p in (None, d)
                                                for p, d in zip(positions, dense, strict=True)):
            return
        given = "x".join("?" if d is None else str(d) for d in shape[1:])
        wanted = "x".join(map(str, (*dense, self.units)))
        raise ConfigError(f"the model outputs {given} values per example and the data has "
                          f"{self.labels.describe()}: its output must be {wanted} per example "
                          "(flatten or pool what comes before its last layer)")

    def builder_classes(self) -> int:
        """The `num_classes` a builder function is given: what its head must output."""
        return self.units

    def describe(self) -> str:
        return f"{self.name} ({self.labels.describe()}; loss {self.loss_name})"


class Classes(Objective):
    """One class id per example, a softmax over the classes."""

    name = "classification"
    activation = "softmax"
    quality = ACCURACY

    def batch_labels(self, tf, y):
        """Class ids (one-hot rows read as ids), as one-hot rows again for a loss that takes
        them (categorical_crossentropy, its focal and hinge forms)."""
        if self.labels.one_hot:
            y = tf.argmax(y, axis=-1, output_type=tf.int32)
        elif self.labels.trailing_one:
            y = tf.squeeze(y, -1)
        y = tf.cast(y, tf.int32)
        return tf.one_hot(y, self.units) if self.one_hot else y

    def metric(self, name: str, output: str) -> Any:
        import keras

        if name in ("accuracy", "acc"):
            if self.one_hot:
                return keras.metrics.CategoricalAccuracy(name=name)
            return keras.metrics.SparseCategoricalAccuracy(name=name)
        if name == "top5_accuracy" and self.one_hot:
            return keras.metrics.TopKCategoricalAccuracy(k=5, name=name)
        return super().metric(name, output)

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        classes = self.units
        named = [c for c in class_weight or {} if c >= max(classes, 2)]
        if named:
            raise ConfigError(f"train.class_weight names class {named[0]}, and the data's labels "
                              f"go up to {max(classes, 2) - 1}")
        _one_unit_softmax(reading, units)
        if units == 1:
            labels = self.labels
            if classes == 2 and len(labels.dense) == 1:  # (N, k) of 0/1: k yes/no labels?
                hint = (f"if they are {labels.dense[0]} yes/no labels per example (multi-hot), use "
                        f"train.loss: binary_crossentropy with {labels.dense[0]} sigmoid outputs")
            else:
                hint = ("with one sigmoid output for two classes, use train.loss: "
                        "binary_crossentropy")
            raise ConfigError(
                f"train.loss {self.loss_name} needs one output per class and the model has 1 (the "
                f"data's labels read as {labels.describe()}); {hint}; for a value to predict, a "
                "regression loss (train.loss: mean_squared_error)")
        if units < classes:
            raise ConfigError(f"the labels go up to {classes - 1} and the model has {units} "
                              f"outputs; give it {classes} (model.num_classes, or what its "
                              "builder takes)")
        if units > classes:
            return [f"the model has {units} outputs and the data {classes} classes: outputs "
                    f"{classes}..{units - 1} are never a label"]
        return []


class DenseClasses(Classes):
    """A class id per pixel or per token (segmentation masks, sequence tagging): a softmax
    at every position, judged by the mean intersection over union of the classes."""

    name = "dense labels"
    quality = Quality("mean_iou", True, "mean IoU")

    def metric(self, name: str, output: str) -> Any:
        if name == "mean_iou":
            import keras

            # Keras' MeanIoU takes ids; MeanIoU(sparse_y_pred=False) takes the softmax's scores
            return keras.metrics.MeanIoU(num_classes=max(self.units, 2), sparse_y_pred=False,
                                         sparse_y_true=not self.one_hot, name=name)
        return super().metric(name, output)

    def default_metrics(self) -> list[str]:
        return ["accuracy", "mean_iou"]

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        if class_weight:
            raise ConfigError("train.class_weight weighs whole examples (Keras' fit takes it for "
                              "labels of one id per example); with a label per position leave it "
                              "out")
        return super().check(units, reading, None)


class Binary(Objective):
    """One 0/1 label per example, the probability of 1 from one sigmoid; targets that are
    probabilities themselves (soft: a rating scaled to 0..1) are judged by the loss, which an
    accuracy cannot read."""

    name = "binary classification"
    activation = "sigmoid"
    quality = ACCURACY

    def __init__(self, loss: Loss, labels: Labels):
        super().__init__(loss, labels)
        if labels.soft:
            self.quality = Quality("loss", False, "loss")

    def batch_labels(self, tf, y):
        y = tf.cast(y, tf.float32)
        return tf.expand_dims(y, -1) if len(y.shape) == 1 else y  # (N, 1), as the output is

    def metric(self, name: str, output: str) -> Any:
        import keras

        threshold = 0.0 if output == "logits" else 0.5  # a logit of 0 is a probability of 0.5
        made = {"accuracy": lambda: keras.metrics.BinaryAccuracy(name=name, threshold=threshold),
                "acc": lambda: keras.metrics.BinaryAccuracy(name=name, threshold=threshold),
                "precision": lambda: keras.metrics.Precision(thresholds=threshold, name=name),
                "recall": lambda: keras.metrics.Recall(thresholds=threshold, name=name),
                # Keras' `auc`, as compile makes it from the name: one curve over every label's
                # scores pooled (multi_label=True averaged a curve per label, and a column
                # never positive, StringLookup's [UNK], read 0.88 where Keras' own read 0.99)
                "auc": lambda: keras.metrics.AUC(from_logits=output == "logits", name=name)}
        return made[name]() if name in made else super().metric(name, output)

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        named = [c for c in class_weight or {} if c > 1]
        if named:
            raise ConfigError(f"train.class_weight names class {named[0]}, and the labels are 0 "
                              "and 1")
        _one_unit_softmax(reading, units)
        if units != 1:
            raise ConfigError(f"train.loss {self.loss_name} with one 0/1 label per example takes "
                              f"one output, the probability of 1, and the model has {units}; end "
                              "it in Dense(1), or use train.loss: sparse_categorical_crossentropy "
                              "with one output per class")
        return []

    @property
    def units(self) -> int:
        return 1  # the probability of 1

    def builder_classes(self) -> int:
        """keras.io's `make_model(input_shape, num_classes)` ends in Dense(1, sigmoid) for 2
        classes, and in a softmax over one unit, which cannot learn, for 1."""
        return 2


class MultiLabel(Binary):
    """Several 0/1 labels per example (tags), a sigmoid each, judged by Keras' `auc`: one curve
    over every label's scores pooled."""

    name = "multi-label classification"
    quality = Quality("auc", True, "AUC")

    @property
    def units(self) -> int:
        return self.labels.units

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        if class_weight:
            raise ConfigError("train.class_weight weighs one class per example; with several "
                              "labels per example leave it out")
        if reading.softmax:
            raise ConfigError(f"model: {reading.evidence}: a softmax makes the labels compete, "
                              "and an example may have several; end in a sigmoid per label "
                              "(Dense(labels, activation='sigmoid'))")
        return Objective.check(self, units, reading, None)

    def builder_classes(self) -> int:
        return self.units


class Values(Objective):
    """Regression: one target or several per example, a linear output each, judged by the
    mean absolute error (in the targets' units)."""

    name = "regression"
    activation = "linear"
    quality = Quality("mae", False, "MAE")

    def batch_labels(self, tf, y):
        y = tf.cast(y, tf.float32)
        if self.labels.scale is not None:  # its lists of floats become float32 tensors, as y is
            y = (tf.reshape(y, (-1, self.units)) - self.labels.scale.mean) / self.labels.scale.std
        return tf.expand_dims(y, -1) if len(y.shape) == 1 else y

    def check(self, units: int, reading, class_weight: dict | None) -> list[str]:
        notes = super().check(units, reading, class_weight)
        if reading.kind == "probabilities":
            raise ConfigError(f"model: {reading.evidence}, and a regression's targets are values "
                              "of any size: end in a linear Dense (model.output_activation: "
                              "linear)")
        return notes


def _one_unit_softmax(reading, units: int) -> None:
    """A softmax over one unit is 1.0 for every input (keras.io's `make_model(num_classes)`
    builds one when given 1): refused, it would train with exit 0 on nothing."""
    if reading.softmax and units == 1:
        raise ConfigError(
            f"model: {reading.evidence} over 1 unit, which outputs 1.0 for every input: "
            "nothing can be learned. For two classes, end in Dense(1, activation='sigmoid') "
            "with train.loss: binary_crossentropy (a builder's num_classes is then 2), or in "
            "a softmax over 2 units")


# words in the names of Keras' metrics that are errors or losses (smaller is better); every
# other metric (accuracy, AUC, IoU, precision, recall, R², F-scores) is larger-is-better
ERROR_WORDS = ("loss", "error", "mae", "mse", "mape", "msle", "hinge", "crossentropy",
               "divergence", "poisson", "cosh", "huber", "false_")


def lower_is_better(metric: str) -> bool:
    """Whether a metric (a Keras name, `val_` or an output's name first) improves downwards,
    as Keras' EarlyStopping(mode="auto") needs to know."""
    name = metric.lower().replace("-", "_")
    return any(word in name for word in ERROR_WORDS)


