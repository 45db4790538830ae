"""Checkpoints: TensorFlow's own `tf.train.Checkpoint` + `CheckpointManager`, in
RUN_DIR/checkpoints/.

A checkpoint holds everything a resumed run needs to continue as if never stopped: the
model's variables (with the random-generator state of dropout and augmentation layers, which
Keras keeps as variables), the optimizer's (slots, step counter and, under mixed_float16, the
loss scale and its count of good steps), and the data position (epoch, steps done in it and
in all): the data order is a function of the seed and the epoch (`data/pipeline.py`), so a
position is all it takes to continue with the very next batch. Records (steps.jsonl,
metrics.jsonl) are flushed at each checkpoint, so they never lag behind it.

A damaged folder still resumes: checkpoints are found by their files when the index is
missing, and a checkpoint that does not read (truncated by a full disk or a kill) is passed
over for the next older one, with the reason kept for the user.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mptrain.config.schema import CheckpointConfig
from mptrain.errors import ConfigError, MptrainError
from mptrain.training.records import EpochRecord, Phase, StepRecord, TrainingListener


@dataclass(frozen=True)
class Position:
    epoch: int  # 0-based epoch to continue in
    step: int  # steps of that epoch already done
    global_step: int  # steps done in the whole run


class Checkpointer(TrainingListener):
    """Saves when the configuration says, and restores on demand."""

    phase = Phase.CHECKPOINT

    def __init__(self, folder: Path, model, optimizer, cfg: CheckpointConfig, steps_per_epoch: int,
                 on_save: Callable[[], None]):
        import tensorflow as tf

        self.folder = folder
        self.cfg, self.steps_per_epoch, self.on_save = cfg, steps_per_epoch, on_save
        self.position = tf.Variable([0, 0, 0], dtype=tf.int64, trainable=False, name="position")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                              position=self.position)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(folder),
                                                  max_to_keep=cfg.keep)
        self.suspended = False  # while a run is diverging, nothing it holds is worth saving
        self.passed_over: list[str] = []  # damaged checkpoints a restore skipped, and why
        self.restores = 0  # how often a checkpoint was restored (a resume, a recovery)
        self.save_seconds: list[float] = []  # each save's time (plan's whole-run estimate)
        self._global_step = 0

    def save(self, position: Position) -> None:
        """Records first, then the checkpoint; a checkpoint that cannot be written (a full
        disk) is an OSError naming the folder, and the previous checkpoints stay as they were
        (the index moves to a new one only once it is whole)."""
        import tensorflow as tf

        self.position.assign([position.epoch, position.step, position.global_step])
        self.on_save()
        started = time.perf_counter()
        try:
            self.manager.save(checkpoint_number=position.global_step)
            self.save_seconds.append(time.perf_counter() - started)
        except tf.errors.OpError as exc:
            full = "no space left" in exc.message.lower()
            raise OSError(errno.ENOSPC if full else errno.EIO,
                          f"cannot write a checkpoint ({_os_reason(exc.message, full)})",
                          str(self.folder)) from exc

    def saved(self) -> list[str]:
        """Checkpoint prefixes, newest first: from the index file, or from the files
        themselves when the index is missing or names none that exist."""
        listed = [p for p in self.manager.checkpoints if Path(p + ".index").is_file()]
        found = sorted((str(p.with_suffix("")) for p in self.folder.glob("ckpt-*.index")),
                       key=lambda p: int(re.sub(r"\D", "", Path(p).name) or 0))
        return list(reversed(listed or found))

    def restore_latest(self) -> Position | None:
        """Model, optimizer and loss scale from the newest checkpoint that reads; None when
        there is none. Unreadable ones are skipped (`passed_over` says which and why); one
        that reads but does not fit this model is another model's, and refused as such (every
        checkpoint of a run is its own model's: skipping it would hide the mistake)."""
        import tensorflow as tf

        candidates = self.saved()
        if not candidates:
            return None
        for path in candidates:
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except (ValueError, AssertionError) as exc:  # it reads, but does not fit
                raise ConfigError(
                    f"{self.folder}: {Path(path).name} was written by another model "
                    f"({another_model(path, self.checkpoint.model)}); this run's model cannot "
                    "continue from it: resume the run folder of this experiment, or start it "
                    "anew") from exc
            except (tf.errors.OpError, IndexError) as exc:
                reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
                self.passed_over.append(f"{Path(path).name}: unreadable ({reason.splitlines()[0]})")
                continue
            epoch, step, global_step = (int(v) for v in self.position.numpy())
            self.restores += 1
            return Position(epoch, step, global_step)
        raise MptrainError(
            f"{self.folder}: none of its {len(candidates)} checkpoints reads "
            f"({'; '.join(self.passed_over)}); the run cannot continue from them: start it "
            "again (mptrain run with its config.yaml)")

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


def another_model(path: str, model) -> str:
    """What differs between the model a checkpoint holds and `model`: how many trainable
    weights and values each has, and a weight shape found in one and not the other. (A
    checkpoint keeps each trainable weight once, under the optimizer that updates it.)"""
    import math
    from collections import Counter

    import tensorflow as tf

    from mptrain.model.keras_internals import CHECKPOINT_TRAINABLE

    saved = Counter(tuple(shape) for name, shape in tf.train.list_variables(path)
                    if CHECKPOINT_TRAINABLE.match(name))
    here = Counter(tuple(weight.shape) for weight in model.trainable_weights)
    values = {side: sum(n * math.prod(shape) for shape, n in shapes.items())
              for side, shapes in (("saved", saved), ("here", here))}
    said = (f"its model has {sum(saved.values())} trainable weights of {values['saved']:,} "
            f"values, this one {sum(here.values())} of {values['here']:,}")
    only_saved, only_here = list(saved - here), list(here - saved)
    if only_saved or only_here:
        said += "; " + ", ".join(filter(None, [
            only_saved and f"a {list(only_saved[0])} weight there",
            only_here and f"a {list(only_here[0])} weight here"]))
    return said


def _os_reason(message: str, full: bool) -> str:
    """What the system said, without TensorFlow's op text (`[Op:SaveV2]`, `{{function_node
    ... device:CPU:0}}`) and the temporary file's path, which tell a user nothing."""
    if full:
        return "No space left on device"
    first = re.sub(r"\s*(\{\{.*|\[Op:.*)$", "", message.splitlines()[0])
    return first.rsplit("; ", 1)[-1][:160] or "an I/O error"
