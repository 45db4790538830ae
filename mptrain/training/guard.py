"""Keeping a run safe while it trains: clean interrupts, and divergence caught and recovered.

Interrupts: the first Ctrl-C (SIGINT) or SIGTERM asks the loop to stop at the end of the
current step, so the runner can save a checkpoint and an `interrupted` summary; a second
Ctrl-C abandons the run at once (Python's KeyboardInterrupt).

Divergence (as TF Model Garden's recovery): without loss scaling, a non-finite loss or one
above `train.recovery.loss_upper_bound` restores the last good checkpoint and training goes
on with the next batches, at most `max_trials` times; then the run stops as `diverged`.
Under mixed_float16 a skipped step is the loss scaler doing its job, not divergence; but
`collapse_steps` skipped steps in a row mean the scale cannot find a value that works.
"""

from __future__ import annotations

import math
import signal
import threading
from contextlib import contextmanager

from mptrain.config.schema import RecoveryConfig
from mptrain.summary import EpochRecord, StepRecord
from mptrain.training.checkpoints import Checkpointer
from mptrain.training.monitor import TrainingMonitor

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # exit codes: cli.py


@contextmanager
def stop_on_signals(monitor: TrainingMonitor):
    """While training: SIGINT/SIGTERM request a stop after the current step (`monitor.signal`
    says which); a second SIGINT raises KeyboardInterrupt. Outside the main thread (where
    Python allows no signal handlers) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handler(signum, frame):
        if monitor.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        monitor.signal = signum
        monitor.request_stop(f"interrupted by {signal.Signals(signum).name} during epoch "
                             f"{monitor.epoch}, step {monitor.step_in_epoch + 1}", "interrupted")

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class DivergenceGuard:
    """A TrainingListener that restores the last good checkpoint when the loss diverges."""

    def __init__(self, monitor: TrainingMonitor, checkpointer: Checkpointer, cfg: RecoveryConfig,
                 scales_loss: bool):
        self.monitor, self.checkpointer, self.cfg = monitor, checkpointer, cfg
        self.scales_loss = scales_loss
        self.trials = 0
        self.skips_in_a_row = 0
        self.recoveries: list[str] = []

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        pass

    def epoch_finished(self, record: EpochRecord) -> None:
        pass

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        where = f"epoch {record.epoch}, step {step_in_epoch}"
        if self.scales_loss:
            skipped = bool(record.skipped)
            self.skips_in_a_row = self.skips_in_a_row + 1 if skipped else 0
            if self.skips_in_a_row >= self.cfg.collapse_steps:
                self._diverged(f"the loss scale collapsed: {self.skips_in_a_row} steps in a row had "
                               f"non-finite gradients (scale now {record.loss_scale:g}) at {where}; "
                               "float16 cannot represent this model's values: use mixed_bfloat16 "
                               "(float32's range) or float32")
            return
        bound = self.cfg.loss_upper_bound
        if math.isfinite(record.loss) and (bound is None or record.loss <= bound):
            return
        what = "a NaN/inf loss" if not math.isfinite(record.loss) else \
            f"a loss of {record.loss:.4g} (above train.recovery.loss_upper_bound {bound:g})"
        self.trials += 1
        if self.trials > self.cfg.max_trials or self.checkpointer.manager.latest_checkpoint is None:
            self._diverged(f"{what} at {where}, after {self.trials - 1} recoveries from the last "
                           "good checkpoint (train.recovery.max_trials); try a lower learning "
                           "rate, gradient clipping, or a wider dtype")
            return
        self.checkpointer.restore_latest()
        self.recoveries.append(f"{what} at {where}: restored the last good checkpoint "
                               f"(trial {self.trials} of {self.cfg.max_trials})")

    def _diverged(self, reason: str) -> None:
        self.checkpointer.suspended = True  # the last good checkpoint stays the latest
        self.monitor.request_stop(reason, "diverged")
