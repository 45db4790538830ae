"""One training session: the monitor, its listeners (progress, run folder, telemetry,
divergence guard, checkpoints) and where training starts, assembled once for both loops;
then training from there to its end, and the test set's figures.

A new run starts at (epoch 0, step 0) with a first checkpoint of the initial weights, the
"last good checkpoint" recovery falls back to. A resumed run restores the newest checkpoint
that reads (model, optimizer, loss scale, data position), keeps the records up to it, redoes
the rest, and says where it continues.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mptrain.errors import MptrainError
from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import Trained
from mptrain.signals import stop_on_signals
from mptrain.training.checkpoints import Checkpointer, Position
from mptrain.training.epoch_rules import EpochRules
from mptrain.training.guard import DivergenceGuard
from mptrain.training.loss_scale import scale_variable
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import learning_rate_at, value_of
from mptrain.training.records import TrainingListener, run_status
from mptrain.training.tensorboard import TensorBoardWriter
from mptrain.training.turns import TakeTurns, TurnLink, planned_steps

if TYPE_CHECKING:
    from mptrain.runs.experiment import Prepared
    from mptrain.runs.tracking import MlflowLogger


@dataclass
class TrainingSession:
    monitor: TrainingMonitor
    checkpointer: Checkpointer
    guard: DivergenceGuard
    start: Position
    tensorboard: TensorBoardWriter
    run_dir: Path
    rules: EpochRules
    notes: list[str] = field(default_factory=list)  # where a resumed run continues, and why

    @classmethod
    def open(cls, prepared: Prepared, folder: RunFolder, listeners: list[TrainingListener], resume: bool,
             tracking: MlflowLogger | None = None) -> TrainingSession:
        """The session for `prepared` (its config, model, optimizer and batches), writing into
        `folder`; `resume`: from its latest checkpoint."""
        train, model, optimizer, batches = (prepared.config.train, prepared.model, prepared.optimizer,
                                            prepared.batches)
        total_steps = train.epochs * batches.steps_per_epoch
        tensorboard = TensorBoardWriter(folder.path / "tensorboard",
                                        learning_rate_at(optimizer, train.optimizer, total_steps))
        checkpointer = Checkpointer(folder.path / "checkpoints", model, optimizer, train.checkpoint,
                                    batches.steps_per_epoch, on_save=folder.flush_steps)
        start, history, notes = Position(0, 0, 0), ([], []), []
        if resume:
            start = checkpointer.restore_latest()
            if start is None:
                raise MptrainError(f"{folder.path}: no checkpoint to resume from (the run stopped "
                                   "before its first one); start it again instead")
            history = (folder.read_steps(notes)[: start.global_step],
                       folder.read_epochs(notes)[: start.epoch])
            folder.truncate_records(len(history[0]), len(history[1]))
            notes.append(f"resumed at epoch {start.epoch + 1}, step {start.step + 1} (after "
                         f"{start.global_step} steps)")
            notes += [f"checkpoint passed over: {why}" for why in checkpointer.passed_over]
        scale = scale_variable(optimizer)
        monitor = TrainingMonitor(
            epochs=train.epochs,
            steps_per_epoch=batches.steps_per_epoch,
            max_steps=train.max_steps,
            max_step_seconds=train.max_step_seconds,
            learning_rate=lambda: value_of(optimizer.learning_rate),
            initial_loss_scale=None if scale is None else value_of(scale),
            history=history,
        )
        guard = DivergenceGuard(monitor, checkpointer, train.recovery)
        rules = EpochRules(train, monitor, model, optimizer, folder.path, prepared.place.chief)
        # What is reported is saved: the records and the checkpoint go to disk before a line
        # is printed or logged, so a run killed right after its epoch line resumes after that
        # epoch. The epoch's record precedes its checkpoint (a resume reads the records up to
        # the checkpoint); the guard precedes the checkpointer (a diverged step is never saved
        # as "good"); so do the epoch rules (a lowered learning rate is checkpointed).
        saving = [folder, guard, rules, *([checkpointer] if train.checkpoint.enabled else [])]
        monitor.listeners = [*saving, tensorboard, *([tracking] if tracking else []), *listeners]
        if start.start:
            checkpointer.save(start)  # the last good checkpoint recovery can always go back to
        if tracking is not None:
            tracking.catch_up(*history)  # what a resumed run's MLflow run may lack
        return cls(monitor, checkpointer, guard, start, tensorboard, folder.path, rules, notes)

    def run_training(self, prepared: Prepared, turns_link: TurnLink | None = None) -> Trained:
        """Training to its end, from where the session starts (in turns with other variants,
        given `turns_link`: `TakeTurns`), a checkpoint where it stopped, then the test set's
        figures (none for an interrupted run: its user wants it to stop, now)."""
        monitor = self.monitor
        with stop_on_signals(monitor):
            turns = None
            if turns_link is not None:
                total = planned_steps(prepared.config.train, prepared.batches.steps_per_epoch)
                turns = TakeTurns(monitor, turns_link, total)
                monitor.listeners.append(turns)
            prepared.loop.train(prepared.batches, monitor, self.start.epoch, self.start.step)
            if turns is not None:
                turns.finish()
        self._close()
        restored = self.rules.finish()
        waited_s = turns.waited_s if turns is not None else 0.0
        ended = dict(monitor=monitor, notes=[*self.notes, *self.guard.recoveries,
                                             *([restored] if restored else [])],
                     checkpoint_save_s=self.checkpointer.save_seconds, run_dir=self.run_dir,
                     waited_s=waited_s)
        if monitor.stop_kind == "signal":
            return Trained(**ended, test={}, evaluation_s=None, status="interrupted")
        started = time.perf_counter()
        test = prepared.loop.evaluate(prepared.batches.test)
        return Trained(**ended, test=test, evaluation_s=time.perf_counter() - started,
                       status=run_status(monitor.steps, test.get("loss"), monitor.stop_status))

    def _close(self) -> None:
        """After training, however it ended: a checkpoint where the run stopped (after an
        interrupt: inside an epoch; none after a divergence: its last good checkpoint stays
        the latest), telemetry flushed."""
        m = self.monitor
        if m.stop_kind != "divergence" and m.steps:
            if m.epoch_complete:
                self.checkpointer.save(Position(m.epoch, 0, len(m.steps)))
            else:
                self.checkpointer.save(Position(max(m.epoch - 1, 0), m.step_in_epoch, len(m.steps)))
        self.tensorboard.flush()

