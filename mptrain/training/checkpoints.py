"""Checkpoints: TensorFlow's own `tf.train.Checkpoint` + `CheckpointManager`, in
RUN_DIR/checkpoints/.

A checkpoint holds everything a resumed run needs to continue as if never stopped:
- the model's variables, including the random-generator state of layers that draw
  (dropout, augmentation), which Keras keeps as variables;
- the optimizer's variables: its slots, its step counter and, under mixed_float16, the
  LossScaleOptimizer's current scale and its count of good steps since the last change;
- the data position (epoch, steps done in it, steps done in all): the data order is a
  function of the seed and the epoch (`data/pipeline.py`), so a position is all it takes to
  continue with the very next batch.
The manager writes its index file atomically and keeps the last `keep` checkpoints. Records
(steps.jsonl, metrics.jsonl) are flushed at each checkpoint, so they never lag behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mptrain.config.schema import CheckpointConfig
from mptrain.summary import EpochRecord, StepRecord


@dataclass(frozen=True)
class Position:
    epoch: int  # 0-based epoch to continue in
    step: int  # steps of that epoch already done
    global_step: int  # steps done in the whole run

    @property
    def start(self) -> bool:
        return self.global_step == 0


class Checkpointer:
    """A TrainingListener that saves when the configuration says, and restores on demand."""

    def __init__(self, folder: Path, model, optimizer, cfg: CheckpointConfig, steps_per_epoch: int,
                 on_save: Callable[[], None] = lambda: None):
        import tensorflow as tf

        self.cfg, self.steps_per_epoch, self.on_save = cfg, steps_per_epoch, on_save
        self.position = tf.Variable([0, 0, 0], dtype=tf.int64, trainable=False, name="position")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                              position=self.position)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(folder),
                                                  max_to_keep=cfg.keep)
        self.suspended = False  # while a run is diverging, nothing it holds is worth saving
        self._global_step = 0

    def save(self, position: Position) -> None:
        self.position.assign([position.epoch, position.step, position.global_step])
        self.on_save()
        self.manager.save(checkpoint_number=position.global_step)

    def restore_latest(self) -> Position | None:
        """Model, optimizer and loss scale as last saved; None when there is no checkpoint."""
        path = self.manager.latest_checkpoint
        if path is None:
            return None
        self.checkpoint.restore(path).assert_existing_objects_matched()
        epoch, step, global_step = (int(v) for v in self.position.numpy())
        return Position(epoch, step, global_step)

    # TrainingListener
    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        pass

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        self._global_step = record.step
        every = self.cfg.every_steps
        # an epoch's last step is saved at the epoch's end, after its validation and record
        if every and record.step % every == 0 and step_in_epoch < self.steps_per_epoch \
                and not self.suspended:
            self.save(Position(record.epoch - 1, step_in_epoch, record.step))

    def epoch_finished(self, record: EpochRecord) -> None:
        if record.steps < self.steps_per_epoch or self.suspended:
            return  # an epoch cut short (interrupt, step limit): the runner saves its position
        every_epochs, every_steps = self.cfg.every_epochs, self.cfg.every_steps
        if (every_epochs and record.epoch % every_epochs == 0) or (
                every_steps and self._global_step % every_steps == 0):
            self.save(Position(record.epoch, 0, self._global_step))
