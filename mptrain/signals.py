"""Signals and exit codes, in one place.

A run is hours of someone's machine, so signals stop it cleanly:
- while a run trains (`stop_on_signals`), the first Ctrl-C (SIGINT) or SIGTERM asks the loop
  to stop at the end of the current step (or, between epochs, before the next one), so the
  runner saves a checkpoint and an `interrupted` summary; a second Ctrl-C abandons the run at
  once (`RunAbandoned`, which keeps the last checkpoint);
- while compare or plan runs children, or `run --workers` its workers (`ForwardSignals`), a
  signal is passed on to the running children, once per signal, and no further child starts
  (no lost worker is restarted);
- children die with their parent (`die_with_parent`): a parent killed with SIGKILL cannot
  forward anything, so Linux's parent-death signal sends the child SIGTERM, which stops it
  like a Ctrl-C would, with a checkpoint to resume from.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from mptrain.training.records import STOP_SIGNALS

if TYPE_CHECKING:
    from mptrain.training.monitor import TrainingMonitor

DIVERGED_EXIT_CODE = 3
INTERRUPTED_EXIT_CODE = 130


def exit_code(signum: int | None) -> int:
    """The shell's convention for a process stopped by a signal: 128 + its number."""
    return 128 + signum if signum else INTERRUPTED_EXIT_CODE


def end_code(status: str, signum: int | None) -> int:
    """A run's exit code by how it ended: stopped by a signal, 128 + its number (130 for
    Ctrl-C); diverged, 3; else 0."""
    if status == "interrupted":
        return exit_code(signum)
    return DIVERGED_EXIT_CODE if status == "diverged" else 0


class RunAbandoned(KeyboardInterrupt):
    """A second Ctrl-C abandoned training at once; `run_dir` keeps its last checkpoint."""

    def __init__(self, run_dir):
        super().__init__(str(run_dir))
        self.run_dir = run_dir


@contextmanager
def _handling(signals: tuple[int, ...], handler):
    """`handler` for `signals` while the block runs, the old handlers back after it; outside
    the main thread (where Python allows no signal handlers) nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def stop_on_signals(monitor: TrainingMonitor):
    """While a run trains and writes what it trained: SIGINT/SIGTERM request a stop after the
    current step (`monitor.signal` says which); a second SIGINT, or one after training
    (`monitor.trained`), raises KeyboardInterrupt; a SIGTERM after training has nothing left
    to stop, and lets the run finish writing (a scheduler's SIGTERM reaches each worker at
    its own moment: one arriving as the others' agreed stop is saved once ended a worker as
    abandoned, exit 130)."""

    def handler(signum, frame):
        if signum == signal.SIGINT and (monitor.signal is not None or monitor.trained):
            raise KeyboardInterrupt
        if monitor.trained:
            return
        monitor.signal = signum
        name = signal.Signals(signum).name
        # (before the loop's first epoch began, it is the epoch the logs and a resume count next)
        where = (f"as epoch {len(monitor.epoch_records) + 1} began" if not monitor.epoch else
                 f"at the end of epoch {monitor.epoch}" if monitor.epoch_complete else
                 f"during epoch {monitor.epoch}, step {monitor.step_in_epoch + 1}")
        monitor.request_stop(f"interrupted by {name} {where}", "signal")

    return _handling(STOP_SIGNALS, handler)


class Terminated(KeyboardInterrupt):
    """SIGTERM before anything handles it (start-up: TensorFlow's import, the data's load; a
    scheduler's `--kill-on-bad-exit`): Python's default ends the process without a word."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name} outside training (while "
                         "starting up, or after it ended)")
        self.signum = signum


def terminating_as_interrupts():
    """While the block runs, SIGTERM raises `Terminated`, as Ctrl-C raises KeyboardInterrupt:
    said with its exit code (143) where it would have been silence. Training's own handler
    (`stop_on_signals`) takes over while it runs."""

    def handler(signum, frame):
        raise Terminated(signum)

    return _handling((signal.SIGTERM,), handler)


def ignoring_interrupts():
    """Ctrl-C ignored for a moment: a stopped run's last words."""
    return _handling((signal.SIGINT,), signal.SIG_IGN)


class ForwardSignals:
    """While children run: SIGINT/SIGTERM are passed on to the running children (each stops
    after its current step and saves a checkpoint), and `received` tells the caller to start
    no more. Children run in their own session, so a terminal's Ctrl-C reaches them only
    through here: once per Ctrl-C (a second one abandons a child, as it would a run)."""

    def __init__(self):
        self.received: int | None = None
        self.children: list[subprocess.Popen] = []
        self._handlers = ExitStack()

    def __enter__(self) -> ForwardSignals:
        self._handlers.enter_context(_handling(STOP_SIGNALS, self._handle))
        return self

    def __exit__(self, *exc) -> None:
        self._handlers.close()

    def _handle(self, signum, frame) -> None:
        self.received = self.received or signum
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signum)


def die_with_parent() -> None:
    """In a child, before it runs (`Popen(preexec_fn=...)`): receive SIGTERM when the parent
    dies, however it dies (Linux's PR_SET_PDEATHSIG); elsewhere nothing."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
