"""TensorBoard event files for every run, written with TensorFlow's own summary writer.

`RUN_DIR/tensorboard/` gets, per step, the loss, the running metrics, the learning rate, the
loss scale and whether the step was skipped (mixed_float16), the step time and examples/s;
per epoch, the epoch's metrics. `tensorboard --logdir runs` shows every run and every compare
variant side by side. Steps are buffered and written at the end of each epoch (and when the
run stops), with their own step numbers: a write per step would tax short steps; a step's
learning rate is worked out then (`_rates`), not read at every step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mptrain.training.optimizer import value_of
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class TensorBoardWriter(TrainingListener):

    def __init__(self, logdir: Path, optimizer, scheduled_rate: Callable[[int], float] | None):
        """`optimizer`: the one that applies the updates (its rate and its count of applied
        updates are read once per flush); `scheduled_rate`: its schedule (`optimizer.
        scheduled_rate`: applied updates → rate), None without one."""
        import tensorflow as tf

        self.tf = tf
        self.writer = tf.summary.create_file_writer(str(logdir))
        self.optimizer, self.scheduled_rate = optimizer, scheduled_rate
        self.pending: list[StepRecord] = []

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        self.pending.append(record)

    def epoch_finished(self, record: EpochRecord) -> None:
        self.flush(record)

    def flush(self, epoch: EpochRecord | None = None) -> None:
        """The buffered steps, then the finished epoch's metrics (when there is one)."""
        scalar = self.tf.summary.scalar
        with self.writer.as_default():
            for r, rate in zip(self.pending, self._rates(epoch), strict=True):
                scalar("step/loss", r.loss, step=r.step)
                for key, value in r.metrics.items():
                    scalar(f"step/{key}", value, step=r.step)
                scalar("step/learning_rate", rate, step=r.step)
                scalar("step/seconds", r.seconds, step=r.step)
                scalar("step/examples_per_sec", r.examples / r.seconds if r.seconds else 0.0,
                       step=r.step)
                if r.loss_scale is not None:
                    scalar("step/loss_scale", r.loss_scale, step=r.step)
                    scalar("step/skipped", float(bool(r.skipped)), step=r.step)
            if epoch is not None:
                for key, value in epoch.metrics.items():
                    scalar(f"epoch/{key}", value, step=epoch.epoch)
                if epoch.learning_rate is not None:
                    scalar("epoch/learning_rate", epoch.learning_rate, step=epoch.epoch)
        self.pending.clear()
        self.writer.flush()

    def _rates(self, epoch: EpochRecord | None) -> list[float]:
        """The rate each pending step trained at. Without a schedule, its epoch's (the record
        holds it; a rule lowers it only after the epoch's last step). A schedule gives an
        update the rate at the number of updates applied before it (Keras counts applied
        updates: a step mixed_float16 skipped applies none), counted back from the
        optimizer's count now, which a resume restores with its checkpoint."""
        if self.scheduled_rate is None:
            rate = epoch.learning_rate if epoch is not None else value_of(self.optimizer.learning_rate)
            return [rate] * len(self.pending)
        applied, rates = int(value_of(self.optimizer.iterations)), []
        for r in reversed(self.pending):
            applied -= not r.skipped
            rates.append(self.scheduled_rate(applied))
        return rates[::-1]
