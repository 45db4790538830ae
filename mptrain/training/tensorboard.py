"""TensorBoard event files for every run, written with TensorFlow's own summary writer.

`RUN_DIR/tensorboard/` gets, per step, the loss, the running metrics, the learning rate, the
loss scale and whether the step was skipped (mixed_float16), the step time and examples/s;
per epoch, the epoch's metrics. `tensorboard --logdir runs` shows every run and every compare
variant side by side. Steps are buffered and written at the end of each epoch (and when the
run stops), with their own step numbers: a write per step would tax short steps; a step's
learning rate is worked out then (`_rates`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mptrain.training.checkpoints import Checkpointer
from mptrain.training.optimizer import applied_updates, value_of
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class TensorBoardWriter(TrainingListener):

    def __init__(self, logdir: Path, optimizer, scheduled_rate: Callable[[int], float] | None,
                 checkpointer: Checkpointer):
        """`optimizer`: the one that applies the updates; `scheduled_rate`: its schedule
        (`optimizer.scheduled_rate`: the updates applied before a step → its rate), None
        without one; `checkpointer`: whose restores set the optimizer's count back."""
        import tensorflow as tf

        self.tf = tf
        self.writer = tf.summary.create_file_writer(str(logdir))
        self.optimizer, self.scheduled_rate = optimizer, scheduled_rate
        self.pending: list[tuple[StepRecord, int | None]] = []  # each step, the updates before it
        self.checkpointer, self.restores = checkpointer, 0
        self.applied: int | None = None  # the updates applied so far (with a schedule)

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        if self.scheduled_rate is not None and self.applied is None:  # after a resume's restore
            self.applied, self.restores = applied_updates(self.optimizer), self.checkpointer.restores

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        self.pending.append((record, self.applied))
        if self.scheduled_rate is None:
            return
        if self.checkpointer.restores != self.restores:  # a recovery went back to a checkpoint
            self.applied, self.restores = applied_updates(self.optimizer), self.checkpointer.restores
        else:  # counted, not read from the device each step: a skipped step applies none
            self.applied += not record.skipped

    def epoch_finished(self, record: EpochRecord) -> None:
        self.flush(record)

    def flush(self, epoch: EpochRecord | None = None) -> None:
        """The buffered steps, then the finished epoch's metrics (when there is one)."""
        scalar = self.tf.summary.scalar
        with self.writer.as_default():
            for (r, _), rate in zip(self.pending, self._rates(epoch), strict=True):
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
        """The rate each pending step trained at: its schedule's at the updates applied
        before it (read from the optimizer at the start and after a restore, counted in
        between); without a schedule its epoch's (the record holds it; a rule lowers it only
        after the epoch's last step), or the optimizer's for the steps of an epoch training
        left by an error."""
        if self.scheduled_rate is not None:
            return [self.scheduled_rate(applied) for _, applied in self.pending]
        rate = epoch.learning_rate if epoch is not None else value_of(self.optimizer.learning_rate)
        return [rate] * len(self.pending)
