"""One experiment, end to end: set up (`experiment.prepare`), train, evaluate, write the run.

Everything that can fail on bad input happens in `prepare`, before the run folder is created.
Then the folder says `running`; training goes through a `TrainingSession` (monitor,
checkpoints, divergence guard, telemetry); the summary is written however training ended,
and with `output.mlflow` the run is logged to MLflow as well (`tracking`).
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mptrain.config import ExperimentConfig
from mptrain.precision.lint import lint, worth_saying
from mptrain.training.distribute import scope, worker_lost
from mptrain.errors import MptrainError
from mptrain.runs.experiment import Prepared, prepare
from mptrain.model.flops import forward_profile
from mptrain.model import output_dtype
from mptrain.runs.folder import RunFolder
from mptrain.runs.session import TrainingSession
from mptrain.signals import RunAbandoned, stop_on_signals
from mptrain.runs.summary import RunSummary, summarize_run
from mptrain.runs.tracking import end_tracking, finish_tracking, start_tracking
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener
from mptrain.training.turns import TakeTurns, planned_steps


@dataclass
class RunResult:
    summary: RunSummary
    steps: list[StepRecord] = field(default_factory=list)
    epochs: list[EpochRecord] = field(default_factory=list)
    signal: int | None = None  # the signal that interrupted the run

    @property
    def run_dir(self) -> Path:
        return Path(self.summary.run_dir)


def run_experiment(
    config: ExperimentConfig,
    *,
    resume: Path | None = None,
    listeners: list[TrainingListener] | None = None,
    verbose: bool = False,
    initial_weights: Path | None = None,
    output_dir: Path | None = None,
    run_dir: Path | None = None,
    started_at: float | None = None,
    on_start: Callable[[Prepared, list[str]], None] | None = None,
    status: Callable[[str], object] | None = None,
) -> RunResult:
    """Train and evaluate one experiment; write its run folder; return what it measured.

    `resume` continues the run in that folder from its latest checkpoint. `on_start(prepared,
    notes)` is called once the model is built, before training, so a user learns what will
    run (and what is known to be slow) first. `initial_weights` makes several runs start from
    identical weights; `output_dir` overrides `output.dir` and `run_dir` names the exact
    folder to create (compare and plan place their runs).
    """
    started_at = started_at if started_at is not None else time.perf_counter()
    prepared = prepare(config, verbose=verbose, initial_weights=initial_weights, status=status)
    config = prepared.config
    profile = forward_profile(prepared.model)
    findings = worth_saying(lint(prepared, profile))
    # only the chief writes the run; other workers train into a scratch folder
    chief = prepared.place.chief
    parent = (output_dir or config.output.dir) if chief else Path(tempfile.mkdtemp())
    if resume is not None:
        folder = RunFolder(resume) if chief else RunFolder.worker_copy(resume, parent)
    elif run_dir is not None and chief:
        folder = RunFolder.create_at(run_dir)
    else:
        folder = RunFolder.create(parent, config.name)
    tracking = None
    try:
        folder.mark_running(config.name)
        folder.write_config(config.to_yaml_dict(), _config_header(prepared))
        folder.write_files(prepared.data.files)
        if chief:
            tracking = start_tracking(config, folder.path, prepared.choice, prepared.machine,
                                      prepared.place.replicas)
        with scope(prepared.place):
            session = TrainingSession.open(config, folder, prepared.model, prepared.optimizer,
                                           prepared.batches, listeners or [],
                                           resume=resume is not None, tracking=tracking)
        if on_start is not None:
            on_start(prepared, session.notes + [f"lint: {f}" for f in findings])
        monitor = session.monitor
        turns = TakeTurns.from_environment(
            monitor, planned_steps(config.train, prepared.batches.steps_per_epoch))
        if turns is not None:  # a variant of compare or plan: it trains in turns with the others
            monitor.listeners.append(turns)
        with stop_on_signals(monitor):
            prepared.loop.train(prepared.batches, monitor, session.start.epoch, session.start.step)
            if turns is not None:
                turns.finish()
        session.close()
        # an interrupted run is not evaluated: its user wants it to stop, now
        test = {} if monitor.stop_kind == "signal" else prepared.loop.evaluate(prepared.batches.test)
        summary = summarize_run(config, prepared.choice, prepared.machine, monitor, test,
                                output_dtype=output_dtype(prepared.model),
                                flops_per_example=3 * profile.flops,
                                dataset=prepared.data.source,
                                speed_warning=prepared.speed_warning,
                                memory=prepared.memory.stats(),
                                notes=prepared.notes + session.notes + session.guard.recoveries,
                                started_at=started_at, run_dir=folder.path,
                                test_examples=prepared.data.test.size,
                                distribution=prepared.place.description,
                                replicas=prepared.place.replicas)
        if turns is not None:
            summary = summary.model_copy(update={"wall_time_s": summary.wall_time_s - turns.waited_s,
                                                 "turn_wait_s": turns.waited_s})
        if config.output.save_model and summary.status == "finished" \
                and (why_not := folder.save_model(prepared.model)) is not None:
            summary = summary.model_copy(update={"notes": [*summary.notes, why_not]})
        folder.flush_steps()
        summary = finish_tracking(tracking, summary, folder.path)
        folder.write_summary(summary)
    except KeyboardInterrupt:
        folder.write_status("interrupted", "abandoned by a second Ctrl-C; the last checkpoint "
                            "is kept: resume from it")
        end_tracking(tracking, "interrupted")
        raise RunAbandoned(folder.path) from None
    except OSError as exc:
        _mark_failed(folder, exc)
        end_tracking(tracking, "failed")
        if exc.errno not in DISK_ERRORS:
            raise
        raise MptrainError(
            f"{exc.filename or folder.path}: {exc.strerror}; training stopped, and its last "
            f"checkpoint is intact. Free space (or fix the disk), then continue with: mptrain "
            f"run --resume {folder.path}") from exc
    except BaseException as exc:
        # another worker died: say so, and how to continue, instead of TensorFlow's traceback
        lost = worker_lost(exc, prepared.place, prepared.tf, folder.path if chief else resume or run_dir)
        _mark_failed(folder, lost or exc)
        end_tracking(tracking, "failed")
        if lost is not None:
            raise lost from exc
        raise
    finally:
        if not chief:
            shutil.rmtree(parent, ignore_errors=True)
    return RunResult(summary, monitor.steps, monitor.epoch_records, monitor.signal)


# A full disk (or quota), an I/O error, a read-only file system: the run folder cannot take
# what training writes. Said cleanly, with the way to continue.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


def _mark_failed(folder: RunFolder, exc: BaseException) -> None:
    """summary.json says `failed` and why, if the disk still takes that much."""
    # if not, the folder keeps `running` with a dead pid: still recognisably stopped
    with contextlib.suppress(OSError):
        folder.write_status("failed", f"{type(exc).__name__}: {exc}")


def _config_header(prepared: Prepared) -> str:
    choice = prepared.choice
    lines = ["# Resolved experiment, as run by mptrain."]
    if choice.requested != choice.name:
        lines.append(f"# policy: {choice.requested} resolved to {choice.name} ({choice.reason})")
    lines.append(f"# jit_compile: {choice.jit_compile} ({choice.jit_reason})")
    lines.append(f"# xla_optimizer_update: {choice.xla_optimizer_update} ({choice.xla_optimizer_reason})")
    return "\n".join(lines)
