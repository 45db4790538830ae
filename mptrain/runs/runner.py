"""One experiment, end to end: set up (`runs.experiment.prepare`, where bad input fails, before
the run folder exists), train through a `TrainingSession`, evaluate, and write the run (and
MLflow's, `tracking`); the summary is written however training ended.

A session is the monitor, its listeners (progress, run folder, telemetry, divergence guard,
checkpoints) and where training starts, assembled once for both loops; then training from
there to its end, and the test set's figures. A new run starts at (epoch 0, step 0) with a
first checkpoint of the initial weights, the "last good checkpoint" recovery falls back to. A
resumed run restores the newest checkpoint that reads (model, optimizer, loss scale, data
position), keeps the records up to it, redoes the rest, and says where it continues.
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mptrain.config import ExperimentConfig
from mptrain.config.schema import EPOCH_RULES
from mptrain.errors import ConfigError, MptrainError
from mptrain.model.exported import exported
from mptrain.model.flops import forward_profile
from mptrain.model.own_step import evaluates
from mptrain.precision.lint import lint, worth_saying
from mptrain.runs.experiment import Prepared, prepare
from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import RunSummary, summarize_run
from mptrain.runs.tracking import MlflowLogger, end_tracking, finish_tracking, start_tracking
from mptrain.signals import RunAbandoned, Terminated, end_code, stop_on_signals
from mptrain.training.checkpoints import Checkpointer, Position
from mptrain.training.cluster import worker_lost
from mptrain.training.distribute import scope
from mptrain.training.epoch_rules import EpochRules
from mptrain.training.guard import DivergenceGuard
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import scheduled_rate, value_of
from mptrain.training.records import EpochRecord, Phase, Status, StepRecord, TrainingListener, run_status
from mptrain.training.tensorboard import TensorBoardWriter
from mptrain.training.turns import TakeTurns, TurnLink, planned_steps


@dataclass(frozen=True)
class RunResult:
    """How `mptrain run` ended, trained in this process or on local workers
    (`workers.run_local_workers`): the command and `mptrain.run` read this one shape."""

    code: int  # the process's exit code, by how the run ended (`signals.end_code`)
    summary: RunSummary | str  # the run's (local workers': the chief's), or why there is none
    message: str | None = None  # the line a lost worker ended the run with (None: it ended by itself)
    steps: list[StepRecord] = field(default_factory=list)  # a run in this process: its records
    epochs: list[EpochRecord] = field(default_factory=list)
    folder: Path | None = None  # the run folder, where there is no summary to name it

    @property
    def run_dir(self) -> Path | None:
        return Path(self.summary.run_dir) if not isinstance(self.summary, str) else self.folder


@dataclass(frozen=True)
class Start:
    """Where and from what a run starts."""

    resume: Path | None = None  # continue the run in this folder from its latest checkpoint
    initial_weights: Path | None = None  # an .npz of `model.get_weights()`: several runs, same start
    run_dir: Path | None = None  # the exact folder to create (compare and plan place their runs)
    started_at: float | None = None  # the process's start (`time.perf_counter`): in the one-off costs
    turns: TurnLink | None = None  # compare's and plan's children: in turns with the others


def run_experiment(config: ExperimentConfig, start: Start = Start(), *,
                   listeners: list[TrainingListener] | None = None, verbose: bool = False,
                   on_start: Callable[[Prepared, list[str]], None] | None = None,
                   status: Callable[[str], object] | None = None) -> RunResult:
    """Train and evaluate one experiment; write its run folder; return what it measured.

    `on_start(prepared, notes)` is called once the model is built, before training, so a
    user learns what will run (and what is known to be slow) first; `status(text)` shows
    what a long step of the set-up is doing.
    """
    started_at = start.started_at if start.started_at is not None else time.perf_counter()
    prepared = prepare(config, verbose=verbose, initial_weights=start.initial_weights, status=status)
    profile = forward_profile(prepared.model, prepared.data.spec.shape)
    findings = worth_saying(lint(prepared, profile))
    config = prepared.config
    folder, scratch = RunFolder.for_run(prepared.place.chief, config.output.dir, config.name,
                                        start.resume, start.run_dir)
    tracking = None
    try:
        folder.mark_running(config.name)
        folder.write_config(config, prepared.choice)
        folder.write_files(prepared.data.files)
        if prepared.place.chief:  # the one that writes (and tracks) the run
            tracking = start_tracking(config, folder.path, prepared.choice, prepared.machine,
                                      prepared.place.replicas)
        with scope(prepared.place):
            session = TrainingSession(prepared, folder, listeners or [],
                                      resume=start.resume is not None, tracking=tracking)
        # (in the summary too: a 16-bit softmax no rebuild could move to float32 was said on
        # stderr alone, where summary.json said the guide's rule was kept)
        session.notes += [f"lint: {f}" for f in findings]
        if on_start is not None:
            on_start(prepared, session.notes)
        with stop_on_signals(session.monitor):  # until the run is written (`signals`)
            session.train(start.turns)
            session.save_model()
            summary = summarize_run(session, profile, started_at)
            folder.flush_steps()
            summary = finish_tracking(tracking, summary, folder.path)  # MLflow's last word: a note
            folder.write_summary(summary)
    except BaseException as exc:
        instead = _failed(exc, prepared, folder, tracking, start)
        if instead is None:
            raise
        raise instead from exc
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    monitor = session.monitor
    return RunResult(end_code(summary.status, monitor.signal), summary, steps=monitor.steps,
                     epochs=monitor.epoch_records)


class TrainingSession:
    """One run's training, from where it starts to how it ended: the monitor and its
    listeners, assembled once for both loops (`__init__`), training to the end and the test
    set's figures (`train`), and the model saved (`save_model`); `summary.summarize_run`
    reads the rest from it."""

    def __init__(self, prepared: Prepared, folder: RunFolder, listeners: list[TrainingListener],
                 resume: bool, tracking: MlflowLogger | None = None):
        """The session for `prepared` (its config, model, optimizer and batches), writing into
        `folder`; `resume`: from its latest checkpoint."""
        train, model, optimizer, batches = (prepared.config.train, prepared.model, prepared.optimizer,
                                            prepared.batches)
        self.prepared, self.folder = prepared, folder
        total_steps = train.epochs * batches.steps_per_epoch
        self.checkpointer = Checkpointer(folder.path / "checkpoints", model, optimizer, train.checkpoint,
                                         batches.steps_per_epoch, on_save=folder.flush_steps)
        self.tensorboard = TensorBoardWriter(folder.path / "tensorboard", optimizer,
                                             scheduled_rate(train.optimizer, total_steps), self.checkpointer)
        # where a resumed run continues, recoveries from divergence: the summary's notes
        self.start, history, self.notes = Position(0, 0, 0), ([], []), []
        if resume:
            self.start = self.checkpointer.restore_latest()
            if self.start is None:
                raise MptrainError(f"{folder.path}: no checkpoint to resume from (the run stopped "
                                   "before its first one); start it again instead")
            history = folder.records_until(self.start.global_step, self.start.epoch, self.notes)
            self.notes.append(f"resumed at epoch {self.start.epoch + 1}, step {self.start.step + 1} "
                              f"(after {self.start.global_step} steps)")
            self.notes += [f"checkpoint passed over: {why}" for why in self.checkpointer.passed_over]
        self.monitor = monitor = TrainingMonitor(
            epochs=train.epochs,
            steps_per_epoch=batches.steps_per_epoch,
            max_steps=train.max_steps,
            max_step_seconds=train.max_step_seconds,
            learning_rate=lambda: value_of(optimizer.learning_rate),
            initial_loss_scales={name: value_of(getattr(scaling, "dynamic_scale", scaling.initial_scale))
                                 for name, scaling in prepared.loop.scaling.items()},
            history=history,
        )
        self.guard = DivergenceGuard(monitor, self.checkpointer, train.recovery, prepared.loop.scaling)
        self.rules = EpochRules(train, monitor, model, optimizer, folder.path)
        # each in its phase (`records.Phase`): what is reported is saved first
        monitor.listen(NamedFigures(train, model), folder, self.guard,
                       self.rules, *([self.checkpointer] if train.checkpoint.enabled
                                                         else []),
                       self.tensorboard, *([tracking] if tracking else []), *listeners)
        if self.start.global_step == 0:
            self.checkpointer.save(self.start)  # the last good checkpoint recovery can always go back to
        if tracking is not None:
            tracking.catch_up(*history)  # what a resumed run's MLflow run may lack
        # how it ended, set by `train` and `save_model`
        self.status: Status = "interrupted"
        self.test: dict[str, float] = {}  # none for an interrupted run
        self.evaluation_s: float | None = None  # None: not evaluated
        self.waited_s = 0.0  # waiting for other variants' turns (compare, plan)
        self.model_save_s: float | None = None
        self.save_note: str | None = None  # how to load what was saved, or why there is no model.keras

    def train(self, turns_link: TurnLink | None = None) -> None:
        """Training to its end, from where the session starts (in turns with other variants,
        given `turns_link`: `TakeTurns`); a checkpoint where it stopped (after an interrupt:
        inside an epoch; none after a divergence: its last good checkpoint stays the latest),
        telemetry flushed; then the test set's figures (none for an interrupted run: its user
        wants it to stop, now)."""
        prepared, monitor = self.prepared, self.monitor
        turns = None
        if turns_link is not None:
            turns = TakeTurns(monitor, turns_link,
                              planned_steps(prepared.config.train, prepared.batches.steps_per_epoch))
            monitor.listen(turns)
        prepared.loop.train(prepared.batches, monitor, self.start.epoch, self.start.step)
        if turns is not None:
            turns.finish()
            self.waited_s = turns.waited_s
        # (a signal here is still a stop's: its checkpoint is where training stopped)
        if monitor.stop_kind != "divergence" and monitor.steps:
            steps, epoch = len(monitor.steps), monitor.epoch
            self.checkpointer.save(Position(epoch, 0, steps) if monitor.epoch_complete else
                                   Position(max(epoch - 1, 0), monitor.step_in_epoch, steps))
        monitor.trained = True
        self.tensorboard.flush()
        restored = self.rules.finish()
        self.notes += [*self.guard.recoveries, *([restored] if restored else [])]
        if monitor.stop_kind == "signal":
            return
        if not evaluates(prepared.model):
            self.notes.append(f"not evaluated: {type(prepared.model).__name__} has no test_step and "
                              "no call, one of which Keras' evaluate runs; judged by its training")
            self.status = run_status(monitor.steps, None, monitor.stop_kind)
            return
        started = time.perf_counter()
        self.test = prepared.loop.evaluate(prepared.batches.test)
        self.evaluation_s = time.perf_counter() - started
        self.status = run_status(monitor.steps, self.test, monitor.stop_kind)

    def save_model(self) -> None:
        """The finished run's model, when the experiment asks (timed: plan's whole-run
        estimate counts it); with fused layers, as Keras' own layers."""
        config = self.prepared.config
        if self.status != "finished" or not config.output.save_model:
            return
        started = time.perf_counter()
        prepared, model = self.prepared, self.prepared.model
        if config.model.fused_layers:
            from mptrain.model.fused import unfused

            model = unfused(model)
        model, said = exported(model, prepared.scaled_pixels, prepared.data.feature_scale,
                               getattr(prepared.objective.labels, "scale", None))
        self.save_note = self.folder.save_model(model) or said
        self.model_save_s = time.perf_counter() - started


class NamedFigures(TrainingListener):
    """Each figure the experiment names (`train.monitor`, the epoch rules' monitors) is one
    the step reports: checked at the first step, where what a model's own step reports (or
    a compile's metrics) is known, so a run is never judged, stopped or kept by a figure it
    does not have (`train.monitor` never names a val_ one: the config refuses it); a
    refusal then leaves no run behind (`_failed`)."""

    phase = Phase.RECORD

    def __init__(self, train, model):
        rules = [(f"train.{key}.monitor", getattr(train, key).monitor) for key in EPOCH_RULES
                 if getattr(train, key) is not None]
        self.named = [*([("train.monitor", train.monitor)] if train.monitor else []), *rules]
        self.model = model

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        reported = ["loss", *record.metrics]
        for key, name in self.named:
            if name.removeprefix("val_") not in reported:
                raise ConfigError(f"{key} {name}: not a figure {type(self.model).__name__}'s step "
                                  f"reports (it reports {', '.join(reported)}, each with val_ first "
                                  f"on the validation split); name one of them, or leave {key} out")
        self.named = []  # checked once


def _failed(exc: BaseException, prepared: Prepared, folder: RunFolder, tracking,
            start: Start) -> BaseException | None:
    """What a run that stopped on `exc` leaves, and the error to raise instead of it (None:
    `exc` itself): a full disk is said cleanly with the way to continue; a second Ctrl-C
    abandons it (its last checkpoint kept); a lost worker is said instead of TensorFlow's
    traceback; anything else is marked failed."""
    if isinstance(exc, OSError):
        folder.mark_failed(exc)
        end_tracking(tracking, "failed")
        if exc.errno not in DISK_ERRORS:
            return None
        return MptrainError(
            f"{exc.filename or folder.path}: {exc.strerror}; training stopped, and its last "
            f"checkpoint is intact. Free space (or fix the disk), then continue with: mptrain "
            f"run --resume {folder.path}", folder.path)
    if isinstance(exc, ConfigError) and start.resume is None and start.run_dir is None:
        # refused at its first step, before anything trained (a step that never scales its
        # loss under mixed_float16): as any refusal, it leaves no run behind
        end_tracking(tracking, "failed")
        shutil.rmtree(folder.path, ignore_errors=True)
        return None
    if isinstance(exc, Terminated):  # a SIGTERM before training's handler: said as itself (143)
        folder.write_status("interrupted", str(exc))
        end_tracking(tracking, "interrupted")
        return None
    if isinstance(exc, KeyboardInterrupt):
        folder.write_status("interrupted", "abandoned by a second Ctrl-C; the last checkpoint "
                            "is kept: resume from it")
        end_tracking(tracking, "interrupted")
        return RunAbandoned(folder.path)
    chief = prepared.place.chief
    lost = worker_lost(exc, prepared.place.task, prepared.tf,
                       folder.path if chief else start.resume or start.run_dir)
    folder.mark_failed(lost or exc)
    end_tracking(tracking, "failed")
    return lost


# A full disk (or quota), an I/O error, a read-only file system: the run folder cannot take
# what training writes.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)
