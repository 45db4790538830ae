"""One experiment, end to end: set up (`runs.experiment.prepare`, where bad input fails, before
the run folder exists), train through a `TrainingSession`, evaluate, and write the run (and
MLflow's, `tracking`); the summary is written however training ended."""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mptrain.config import ExperimentConfig
from mptrain.errors import MptrainError
from mptrain.model.flops import forward_profile
from mptrain.precision.lint import lint, worth_saying
from mptrain.runs.experiment import Prepared, prepare
from mptrain.runs.folder import RunFolder
from mptrain.runs.session import TrainingSession
from mptrain.runs.summary import ModelSave, RunSummary, summarize_run
from mptrain.runs.tracking import end_tracking, finish_tracking, start_tracking
from mptrain.signals import RunAbandoned, end_code
from mptrain.training.distribute import scope, worker_lost
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener
from mptrain.training.turns import TurnLink


@dataclass
class RunResult:
    summary: RunSummary
    steps: list[StepRecord]
    epochs: list[EpochRecord]
    signal: int | None  # the signal that interrupted the run

    @property
    def run_dir(self) -> Path:
        return Path(self.summary.run_dir)

    @property
    def code(self) -> int:
        """The process's exit code, by how the run ended (`signals.end_code`)."""
        return end_code(self.summary.status, self.signal)


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
            session = TrainingSession.open(prepared, folder, listeners or [],
                                           resume=start.resume is not None, tracking=tracking)
        if on_start is not None:
            on_start(prepared, session.notes + [f"lint: {f}" for f in findings])
        trained = session.run_training(prepared, start.turns)
        saved = _save_model(prepared, folder) if trained.status == "finished" else ModelSave()
        summary = summarize_run(prepared, trained, profile, started_at, saved)
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
    return RunResult(summary, monitor.steps, monitor.epoch_records, monitor.signal)


def _save_model(prepared: Prepared, folder: RunFolder) -> ModelSave:
    """The finished run's model, when the experiment asks (timed: plan's whole-run estimate
    counts it); with fused layers, as Keras' own layers."""
    if not prepared.config.output.save_model:
        return ModelSave()
    started = time.perf_counter()
    model = prepared.model
    if prepared.config.model.fused_layers:
        from mptrain.model.fused import unfused

        model = unfused(model)
    why_not = folder.save_model(model)
    return ModelSave(time.perf_counter() - started, why_not)


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
            f"run --resume {folder.path}")
    if isinstance(exc, KeyboardInterrupt):
        folder.write_status("interrupted", "abandoned by a second Ctrl-C; the last checkpoint "
                            "is kept: resume from it")
        end_tracking(tracking, "interrupted")
        return RunAbandoned(folder.path)
    chief = prepared.place.chief
    lost = worker_lost(exc, prepared.place, prepared.tf,
                       folder.path if chief else start.resume or start.run_dir)
    folder.mark_failed(lost or exc)
    end_tracking(tracking, "failed")
    return lost


# A full disk (or quota), an I/O error, a read-only file system: the run folder cannot take
# what training writes.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)
