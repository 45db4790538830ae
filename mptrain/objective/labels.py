"""What labels are: as stored (`LabelStats`, which every data kind reports without knowing
any objective), and as a loss of one family reads them (`Labels`: `families.Family.labels`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mptrain.errors import DataError

LabelForm = Literal["classes", "multi_hot", "values"]


@dataclass(frozen=True)
class TargetScale:
    """Targets standardised with the training split's mean and standard deviation
    (`train.target_scaling: standard`): the model learns (y - mean) / std."""

    mean: list[float]
    std: list[float]


@dataclass(frozen=True)
class Labels:
    """What a data set's labels are, for one output: `units` is what the head must output
    (the classes seen, the labels, the targets), `dense` the per-position shape of a label
    that is not per example ((H, W) masks, (T,) tags)."""

    form: LabelForm
    units: int
    dense: tuple[int, ...] = ()
    scale: TargetScale | None = None
    one_hot: bool = False  # stored as one-hot rows: read as class ids
    soft: bool = False  # 0/1 labels given as probabilities between (a rating scaled to 0..1)
    trailing_one: bool = False  # stored with a last axis of 1 ((N, H, W, 1) masks): dropped

    def describe(self) -> str:
        what = {"classes": f"{self.units} classes", "multi_hot": f"{self.units} labels (0/1 each)",
                "values": f"{self.units} target{'s' if self.units != 1 else ''}"}[self.form]
        if self.soft:
            what = ("a probability of 1 per example" if self.form == "classes" else
                    f"{self.units} probabilities per example")
        return what + (f" at each of {'x'.join(map(str, self.dense))} positions" if self.dense else "")


@dataclass(frozen=True)
class LabelStats:
    """What a data set's labels are as stored, before an objective reads them (the data
    kinds know nothing of objectives): one example's label shape, whether every value is a
    whole number, the range, one-hot rows, how many distinct values the training split has
    (a learnability check: one class teaches nothing), the training targets' mean and
    deviation (for `train.target_scaling`), each target's mean distance from that mean over
    every labelled row (the MAE of always predicting the mean, what a regression that learned
    nothing scores), and the classes' names when the data named them."""

    source: str
    shape: tuple[int, ...]
    whole: bool
    low: float
    high: float
    one_hot: bool
    training_distinct: int
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    mean_mae: tuple[float, ...] = ()
    names: tuple[str, ...] | None = None


def label_stats(train, every, source: str, names=None) -> LabelStats:
    """The stats of labels stored as arrays: `train` the training split's, `every` all of
    them (train and test), both (N, ...)."""
    import numpy as np

    every = np.asarray(every)
    train = np.asarray(train)
    if not (np.issubdtype(every.dtype, np.number) or every.dtype == bool):
        raise DataError(f"{source}: labels of type {every.dtype} are not numbers")
    finite = np.isfinite(every.astype(np.float64)) if every.size else np.array([True])
    if not finite.all():
        raise DataError(f"{source}: {int(np.count_nonzero(~finite))} label values are NaN or "
                        "infinite; clean the data first (one makes the loss NaN)")
    whole = bool(np.issubdtype(every.dtype, np.integer) or every.dtype == bool
                 or np.all(np.equal(np.mod(every, 1), 0)))
    one_hot = bool(every.ndim == 2 and every.shape[1] > 1 and whole and np.isin(every, (0, 1)).all()
                   and (every.sum(axis=1) == 1).all())
    kept = train.argmax(axis=1) if one_hot else train
    flat = kept.reshape(len(kept), -1).astype(np.float64) if len(kept) else np.zeros((0, 1))
    mean = flat.mean(axis=0) if len(flat) else None
    spread = (np.abs(every.reshape(len(every), -1) - mean).mean(axis=0)
              if mean is not None and not one_hot and len(every) and every.size // len(every) == len(mean)
              else ())
    return LabelStats(
        source=source, shape=tuple(every.shape[1:]), whole=whole,
        low=float(every.min()) if every.size else 0.0, high=float(every.max()) if every.size else 0.0,
        one_hot=one_hot, training_distinct=len(np.unique(kept[: 100_000])),
        mean=tuple(float(m) for m in mean) if mean is not None else (),
        std=tuple(float(v) for v in flat.std(axis=0)) if len(flat) else (),
        mean_mae=tuple(float(d) for d in spread),
        names=tuple(names) if names is not None else None)
