"""Divergence caught and recovered, as TF Model Garden's recovery does it.

A NaN/inf loss, or a finite loss above `train.recovery.loss_upper_bound`, restores the last
good checkpoint and training goes on with the next batches, at most `max_trials` times; then
the run stops as `diverged`. Under loss scaling, what counts as divergence is `loss_scale.py`'s.
"""

from __future__ import annotations

import math

from mptrain.config.schema import RecoveryConfig
from mptrain.training.checkpoints import Checkpointer
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.optimizer import value_of
from mptrain.training.records import Phase, StepRecord, TrainingListener


class DivergenceGuard(TrainingListener):
    """Restores the last good checkpoint when the loss diverges."""

    phase = Phase.JUDGE

    def __init__(self, monitor: TrainingMonitor, checkpointer: Checkpointer, cfg: RecoveryConfig,
                 scaling: dict):
        """`scaling`: the loss-scaling optimizers by name (a restore sets their scales back)."""
        self.monitor, self.checkpointer, self.cfg, self.scaling = monitor, checkpointer, cfg, scaling
        self.trials = 0
        self.recoveries: list[str] = []

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        where = f"epoch {record.epoch}, step {step_in_epoch}"
        for name, scaler in self.monitor.loss_scales.items():
            if collapse := scaler.collapse(self.cfg.collapse_steps, where):
                self._diverged(collapse if len(self.monitor.loss_scales) == 1 else f"{name}: {collapse}")
                return
        if record.skipped:
            return
        bound = self.cfg.loss_upper_bound
        if math.isfinite(record.loss) and (bound is None or record.loss <= bound):
            return
        what = "a NaN/inf loss" if not math.isfinite(record.loss) else \
            f"a loss of {record.loss:.4g} (above train.recovery.loss_upper_bound {bound:g})"
        self.trials += 1
        if self.trials > self.cfg.max_trials or not self.checkpointer.saved():
            self._diverged(f"{what} at {where}, after {self.trials - 1} recoveries from the last "
                           "good checkpoint (train.recovery.max_trials); try a lower learning "
                           "rate, gradient clipping, or a wider dtype")
            return
        self.checkpointer.restore_latest()
        for name, tracker in self.monitor.loss_scales.items():  # else the next step would look skipped
            tracker.scale = value_of(self.scaling[name].dynamic_scale)
        self.recoveries.append(f"{what} at {where}: restored the last good checkpoint "
                               f"(trial {self.trials} of {self.cfg.max_trials})")

    def _diverged(self, reason: str) -> None:
        self.checkpointer.suspended = True  # the last good checkpoint stays the latest
        self.monitor.request_stop(reason, "divergence")
