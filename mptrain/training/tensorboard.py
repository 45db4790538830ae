"""TensorBoard event files for every run, written with TensorFlow's own summary writer.

`RUN_DIR/tensorboard/` gets, per step, the loss, the running metrics, the learning rate, the
loss scale and whether the step was skipped (mixed_float16), the step time and examples/s;
per epoch, the epoch's metrics. `tensorboard --logdir runs` shows every run and every compare
variant side by side. Steps are buffered and written at the end of each epoch (and when the
run stops), with their own step numbers: a write per step would tax short steps. Each step's
learning rate is asked for when the step finishes: the rate it trained at (a rule lowers it
after an epoch's last step).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class TensorBoardWriter(TrainingListener):

    def __init__(self, logdir: Path, learning_rate_at: Callable[[int], float]):
        import tensorflow as tf

        self.tf = tf
        self.writer = tf.summary.create_file_writer(str(logdir))
        self.learning_rate_at = learning_rate_at
        self.pending: list[tuple[StepRecord, float]] = []  # each step and its learning rate

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        self.pending.append((record, self.learning_rate_at(record.step)))

    def epoch_finished(self, record: EpochRecord) -> None:
        self.flush(record)

    def flush(self, epoch: EpochRecord | None = None) -> None:
        """The buffered steps, then the finished epoch's metrics (when there is one)."""
        scalar = self.tf.summary.scalar
        with self.writer.as_default():
            for r, rate in self.pending:
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
