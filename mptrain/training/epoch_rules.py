"""Keras' epoch callbacks as experiment keys, for both loops: `train.early_stopping`,
`train.reduce_lr_on_plateau` and `train.keep_best` (EarlyStopping, ReduceLROnPlateau and
ModelCheckpoint(save_best_only=True)).

One listener on the monitor's epoch records, so the custom loop and `Model.fit` behave alike.
Keras' callbacks would serve both loops (a custom loop can drive a `CallbackList`), but they
keep their counters in memory: a resumed run starts them at zero. Here every decision is made
from the records of all the epochs so far: a resumed run has the records of the
epochs before its checkpoint, so it decides as an uninterrupted run would; an epoch a stop
cut short decides nothing, and is never the best (a resume redoes it whole). A learning rate it
lowered is in the optimizer's checkpoint and in each epoch's record; the best weights are in
RUN_DIR/best.weights.h5, written whenever an epoch beats every earlier one (by every worker
of a cluster in its own folder, the chief's the run's: each restores its own copy).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from mptrain.config.schema import EpochRule, TrainConfig
from mptrain.training.optimizer import value_of
from mptrain.training.records import EpochRecord, Phase, TrainingListener

BEST_WEIGHTS = "best.weights.h5"


def best_epoch(rule: EpochRule, values: list[float]) -> int | None:
    """The index of the epoch whose value last improved on all before it by more than the
    rule's `min_delta`, as Keras judges (None: no value)."""
    lower = rule.mode() == "min"
    best, found = None, None
    for index, value in enumerate(values):
        if value is None or not math.isfinite(value):
            continue
        if best is None or (value < best - rule.min_delta if lower else value > best + rule.min_delta):
            best, found = value, index
    return found


def last_reduction(records: list[EpochRecord]) -> int:
    """The index of the first epoch at today's learning rate (0: never lowered)."""
    for index in range(len(records) - 1, 0, -1):
        before, after = records[index - 1].learning_rate, records[index].learning_rate
        if before is not None and after is not None and after < before:
            return index
    return 0


class EpochRules(TrainingListener):
    """Early stopping, the learning rate on a plateau, and the best epoch's weights."""

    phase = Phase.JUDGE

    def __init__(self, train: TrainConfig, monitor, model, optimizer, run_dir: Path):
        self.train, self.monitor, self.model, self.optimizer = train, monitor, model, optimizer
        self.best_path = run_dir / BEST_WEIGHTS

    def _best(self, rule: EpochRule) -> tuple[list[float | None], int | None]:
        """The rule's figure in every whole epoch so far (None for one cut short), and the
        index of its best (`best_epoch`)."""
        whole = self.monitor.steps_per_epoch
        values = [r.metrics.get(rule.monitor) if r.steps == whole else None
                  for r in self.monitor.epoch_records]
        return values, best_epoch(rule, values)

    def epoch_finished(self, record: EpochRecord) -> None:
        if record.steps < self.monitor.steps_per_epoch:
            return  # a stop cut it short
        records = self.monitor.epoch_records
        kept = self.train.best_kept
        if kept is not None and self._best(kept)[1] == len(records) - 1:
            staged = self.best_path.with_name(f".{BEST_WEIGHTS}.tmp.weights.h5")
            self.model.save_weights(staged)
            os.replace(staged, self.best_path)
        if (rule := self.train.reduce_lr_on_plateau) is not None:
            self._reduce(rule, records)
        if (rule := self.train.early_stopping) is not None:
            values, best = self._best(rule)
            if best is not None and len(records) - 1 - best >= rule.patience:
                self.monitor.request_stop(
                    f"early stopping after epoch {record.epoch}: {rule.monitor} has not improved "
                    f"for {_epochs(rule.patience)} (best {values[best]:.4g} at epoch {best + 1})",
                    "early_stopping")

    def _reduce(self, rule, records: list[EpochRecord]) -> None:
        """Lower the rate when the last `patience` epochs at today's rate have not improved
        on the best before them, as Keras' wait counter (restarted by a reduction) does."""
        best = self._best(rule)[1]
        since = max(best + 1 if best is not None else 0, last_reduction(records))
        if best is None or len(records) - since < rule.patience:
            return
        rate = value_of(self.optimizer.learning_rate)
        lowered = max(rate * rule.factor, rule.min_lr)
        if lowered < rate * (1 - 1e-6):
            self.optimizer.learning_rate.assign(lowered)
            self.monitor.notify(f"learning rate {rate:.3g} -> {lowered:.3g}: {rule.monitor} has not "
                                f"improved for {_epochs(rule.patience)} (train.reduce_lr_on_plateau)",
                                "note")

    def finish(self) -> str | None:
        """After training: the best epoch's weights back, when early stopping restores them
        (as Keras' does, however training ended); what was done, for the run's notes. The
        epoch named is the one the weights' file holds: the best by the rule that wrote it
        (`train.best_kept`: keep_best's own min_delta, when it is set)."""
        stopping = self.train.early_stopping
        if stopping is None or not stopping.restore_best_weights or not self.best_path.is_file():
            return None
        self.model.load_weights(self.best_path)
        rule = self.train.best_kept
        values, best = self._best(rule)
        return (f"weights restored from epoch {best + 1} ({rule.monitor} {values[best]:.4g}; "
                "train.early_stopping.restore_best_weights)")


def _epochs(n: int) -> str:
    return "1 epoch" if n == 1 else f"{n} epochs"
