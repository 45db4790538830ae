"""TensorBoard event files for every run, written with TensorFlow's own summary writer.

`RUN_DIR/tensorboard/` gets, per step, the loss, the running metrics, the learning rate, the
loss scale and whether the step was skipped (mixed_float16), the step time and examples/s;
per epoch, the epoch's metrics. `tensorboard --logdir runs` shows every run and every compare
variant side by side. Steps are buffered and written at the end of each epoch (and when the
run stops), with their own step numbers: a write per step would tax short steps. A step's
learning rate is its schedule's, or without one its epoch's (the record holds the rate the
epoch trained at; a rule lowers it after the epoch's last step).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class TensorBoardWriter(TrainingListener):

    def __init__(self, logdir: Path, scheduled_rate: Callable[[int], float] | None,
                 current_rate: Callable[[], float]):
        """`scheduled_rate`: step → its rate, None without a schedule; `current_rate`: the
        optimizer's, for the steps of an epoch the run stopped inside."""
        import tensorflow as tf

        self.tf = tf
        self.writer = tf.summary.create_file_writer(str(logdir))
        self.scheduled_rate, self.current_rate = scheduled_rate, current_rate
        self.pending: list[StepRecord] = []

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        self.pending.append(record)

    def epoch_finished(self, record: EpochRecord) -> None:
        self.flush(record)

    def flush(self, epoch: EpochRecord | None = None) -> None:
        """The buffered steps, then the finished epoch's metrics (when there is one)."""
        scalar = self.tf.summary.scalar
        if self.scheduled_rate is None and self.pending:
            rate = epoch.learning_rate if epoch is not None else self.current_rate()
        with self.writer.as_default():
            for r in self.pending:
                if self.scheduled_rate is not None:
                    rate = self.scheduled_rate(r.step)
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
