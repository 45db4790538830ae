"""mptrain's own child processes: how they start and end (what they are told: `runs.child`).

compare and plan run each variant as a child (Keras' global policy, traced
graphs, the XLA and oneDNN caches and the process's peak memory are per process, and some
switches, such as oneDNN's math mode, are read once when TensorFlow starts); `run --workers N`
starts N multi-worker children and, when one is lost, stops and restarts them all from the
last checkpoint (`run_local_workers`). Every child:
- runs in its own session, so a terminal's Ctrl-C reaches it once, through the parent
  (`signals.ForwardSignals`), not twice;
- dies with its parent (`signals.die_with_parent`): a parent killed with SIGKILL leaves no
  orphan training on, only a child stopped as by Ctrl-C, with a checkpoint to resume from.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from mptrain.errors import WorkerLost
from mptrain.runs.child import ChildSpec, read_summary
from mptrain.runs.folder import RunFolder, last_checkpoint
from mptrain.runs.runner import RunResult
from mptrain.runs.summary import RunState
from mptrain.signals import ForwardSignals, die_with_parent, exit_code
from mptrain.training.cluster import Hosts


def start(spec: ChildSpec, env: dict[str, str] | None = None, quiet: bool = False, *,
          log=None, talk: bool = False, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """The child `spec` says, in its own session, dying with its parent: its stderr is this
    process's (its live progress shows on the user's terminal), nowhere (`quiet`), or `log`
    (a file), and its stdout, where nothing is meant to be printed, the log or nowhere; with
    `talk`, its stdin is a pipe the parent writes to (the measuring engine's turns). Its
    summary is read from its file (`runs.child`)."""
    spec.clear()
    err = subprocess.DEVNULL if quiet else log
    return subprocess.Popen(spec.command(), text=True, stdin=subprocess.PIPE if talk else None,
                            stdout=err or subprocess.DEVNULL, stderr=err,
                            env={**os.environ, **(env or {})},
                            pass_fds=pass_fds, start_new_session=True, preexec_fn=die_with_parent)


def free_ports(count: int) -> list[int]:
    """`count` different ports free on 127.0.0.1: all bound at once, then let go for the workers."""
    with ExitStack() as bound:
        sockets = [bound.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


# After a worker is lost, how long the others may take to stop by themselves before they are
# killed: one whose connection to it reset notices at once and ends with a `failed` summary;
# one waiting on TensorFlow's 10 s heartbeat timeout has nothing left to do (its collectives
# cannot complete, and what it trained since the last checkpoint is redone anyway), and a
# kill is as safe as any (files are written whole). After a worker ends normally, how long the
# others may take to end too (the chief evaluates and saves the model).
LOST_GRACE_SECONDS = 3.0
END_GRACE_SECONDS = 60.0


def local_worker_count(configured: int | None, option: int | None, supervised: bool,
                       tf_config: bool) -> int | None:
    """How many local workers `run` starts: `--workers N`, or else the experiment's
    `distribute.workers` (a resumed run's own), unless this process is one of those workers
    (`supervised`) or one worker of a cluster ($TF_CONFIG set). None: train in this process."""
    if supervised:
        return None
    if option is not None:
        return option
    return None if tf_config else configured


@dataclass(frozen=True)
class LocalRun:
    """One run on `count` local workers: its folder (known before any worker starts, so the
    way to continue can be said whichever worker is lost) and the user's `run` command line,
    as each worker is given it: CONFIG as the user gave it (with --resume: checked against
    the run's), the --set options (with what --workers N means) and --verbose."""

    count: int
    run_dir: Path
    resumed: bool  # the user resumed run_dir (else this command started it)
    config: str | None
    overrides: list[str]
    verbose: bool = False

    def spec(self, resume: bool, summary_file: Path) -> ChildSpec:
        """The chief's run: start the run in its reserved folder, or continue it (the other
        workers' is the same without a summary file)."""
        return ChildSpec(experiment=self.config, overrides=self.overrides, run_dir=str(self.run_dir),
                         resume=resume, summary_file=str(summary_file), supervised=True,
                         verbose=self.verbose)


@dataclass(frozen=True)
class WorkerEnd:
    index: int
    code: int  # Popen.returncode: negative when a signal killed the process
    stopped: bool = False  # killed by `run --workers` after another worker was lost


@dataclass(frozen=True)
class LostWorker:
    """Why a multi-worker run stopped before its end."""

    worker: int | None  # the worker lost first; None: no worker ended first, they lost contact
    code: int  # its exit code (Popen's: negative when killed by a signal)

    @property
    def restartable(self) -> bool:
        """Killed or stopped by a signal (a kill, the OOM killer, a preemption's SIGTERM), or
        contact lost: restarting can cure that; a worker's own error (exit 1, 2, 3) it cannot."""
        return self.worker is None or self.code < 0 or _signal_name(self.code - 128) is not None

    def said(self, count: int) -> str:
        """What happened, as a sentence's subject and verb: 'worker 1 of 2 was killed by
        SIGKILL'."""
        if self.worker is None:
            return f"the {count} workers lost contact (TensorFlow's collective ops failed on each)"
        who = f"worker {self.worker} of {count}"
        if self.code < 0:
            return f"{who} was killed by {_signal_name(-self.code) or f'signal {-self.code}'}"
        if (name := _signal_name(self.code - 128)) is not None:
            return f"{who} stopped on {name} (exit code {self.code})"
        return f"{who} failed (exit code {self.code})"


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def first_lost(ends: list[WorkerEnd]) -> LostWorker | None:
    """Why the workers stopped, from how each ended (in the order they ended). None: the run
    ended by itself, alike on every worker (finished, diverged, interrupted by the user, or
    the same error everywhere). Otherwise the loss that stopped the others: the first worker
    to end neither cleanly, nor for want of its peers (`WorkerLost`'s exit code), nor killed
    here after a loss."""
    codes = {end.code for end in ends}
    if not any(end.stopped for end in ends) and len(codes) == 1 and WorkerLost.exit_code not in codes:
        return None
    for end in ends:
        if not end.stopped and end.code not in (0, WorkerLost.exit_code):
            return LostWorker(end.index, end.code)
    return LostWorker(None, WorkerLost.exit_code)


def lost_message(lost: LostWorker, run: LocalRun, step: int | None, restarts: int = 0) -> str:
    """The one line that ends a run whose worker was lost: who, how, that the checkpoint is
    intact, and the command that continues."""
    tried = f" ({restarts} restart{'s' * (restarts != 1)} tried)" if restarts else ""
    if step is None:
        return (f"{lost.said(run.count)} before the run's first checkpoint; the other workers "
                f"were stopped{tried}. Start the run again.")
    return (f"{lost.said(run.count)}; the other workers were stopped{tried}. The last checkpoint "
            f"(step {step}) in {run.run_dir} is intact; continue with: mptrain run --resume "
            f"{run.run_dir}")


def restart_message(lost: LostWorker, run: LocalRun, step: int | None, restart: int, allowed: int) -> str:
    """The line said as the workers restart: who was lost, and from where they continue."""
    where = f"the last checkpoint (step {step})" if step is not None else "the start"
    return (f"{lost.said(run.count)}; restarting all {run.count} workers from {where}: "
            f"restart {restart} of {allowed}")


def run_local_workers(run: LocalRun, max_restarts: int,
                      on_restart: Callable[[str], None]) -> RunResult:
    """Train `run` on its local workers, as Ray Train's `FailureConfig(max_failures)` does:
    when a worker is lost, stop them all and restart them all from the last checkpoint, up to
    `max_restarts` times; then give up, saying which worker was lost and how to continue.
    TensorFlow's collectives cannot go on without a worker ("Restart your program to
    reset"), so restarting every worker is the only cure. A signal to this process is passed
    on to the workers (each stops after its step, with a checkpoint) and nothing restarts."""
    resume, restarts = run.resumed, 0
    with ForwardSignals() as signals, tempfile.TemporaryDirectory() as scratch:
        while True:
            spec = run.spec(resume, Path(scratch) / "summary.json")
            ends = run_workers(spec, run.count, signals)
            chief = next(end.code for end in ends if end.index == 0)
            summary = read_summary(spec, chief)  # the chief's own error is raised: said once, here
            lost = first_lost(ends)
            if lost is None:
                return RunResult(chief, summary)
            step = last_checkpoint(run.run_dir)
            # a run this command started, lost before its first checkpoint, starts again
            can_restart = lost.restartable and (step is not None or not run.resumed)
            if can_restart and not signals.received and restarts < max_restarts:
                restarts += 1
                on_restart(restart_message(lost, run, step, restarts, max_restarts))
                resume = step is not None
                if not resume:
                    shutil.rmtree(run.run_dir)
                    run.run_dir.mkdir()
                continue
            message = lost_message(lost, run, step, restarts)
            _mark_lost(run.run_dir, message)
            code = (exit_code(signals.received) if signals.received else
                    WorkerLost.exit_code if lost.restartable else lost.code)
            return RunResult(code, summary, message, folder=run.run_dir)


def run_workers(spec: ChildSpec, count: int, signals: ForwardSignals) -> list[WorkerEnd]:
    """`count` workers of one cluster on fresh ports, each to its end (in the order they
    end). Worker 0, the chief, shows its progress and writes the summary; the others are
    quiet. TensorFlow's C++ error lines about aborted collectives are hidden unless the
    spec says verbose (each worker's `runtime.import_tensorflow`): the loss is said once, in
    mptrain's own line."""
    addresses = tuple(f"127.0.0.1:{port}" for port in free_ports(count))
    others = spec.model_copy(update={"summary_file": None})
    workers = [start(spec if i == 0 else others,
                     {"TF_CONFIG": Hosts(addresses, i).tf_config()}, quiet=i > 0)
               for i in range(count)]
    signals.children = workers
    ends: list[WorkerEnd] = []
    stopped: set[int] = set()
    deadline = math.inf
    while len(ends) < count:
        for index, worker in enumerate(workers):
            if worker.poll() is not None and all(end.index != index for end in ends):
                ends.append(WorkerEnd(index, worker.returncode, index in stopped))
                grace = END_GRACE_SECONDS if worker.returncode == 0 else LOST_GRACE_SECONDS
                deadline = min(deadline, time.monotonic() + grace)
        if time.monotonic() > deadline:
            for index, worker in enumerate(workers):
                if worker.poll() is None:
                    stopped.add(index)
                    worker.kill()
        time.sleep(0.1)
    signals.children = []
    return ends


def _mark_lost(run_dir: Path, message: str) -> None:
    """summary.json says `failed`, with this command's line as the reason: the chief knew
    less (not which worker, nor how it ended), or could not say it at all (it was the one
    killed, or was killed here, and its folder still says `running`). All workers are gone."""
    folder = RunFolder(run_dir)
    state = folder.state()
    if isinstance(state, RunState) and state.status in ("running", "failed"):
        folder.write_status("failed", message)
