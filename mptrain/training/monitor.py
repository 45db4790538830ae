"""The one observer both training loops report to: timing, per-step records, stop conditions.

Loops call `epoch_begin`, `step_begin`, `step_end`, `epoch_end`; the monitor times steps,
derives skipped (non-finite) steps under loss scaling, decides when a bounded run must stop,
and forwards records to listeners (live progress, the run folder's metrics.jsonl).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from mptrain.timing import StepTimer


@dataclass(frozen=True)
class StepRecord:
    step: int  # 1-based over the whole run
    epoch: int  # 1-based
    loss: float
    seconds: float
    loss_scale: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # running means over the epoch


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    steps: int
    metrics: dict[str, float]
    loss_scale: float | None = None
    skipped_steps: int | None = None


class TrainingListener(Protocol):
    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None: ...
    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None: ...
    def epoch_finished(self, record: EpochRecord) -> None: ...


@dataclass
class TrainingMonitor:
    epochs: int
    steps_per_epoch: int
    loss_scaling: bool
    max_steps: int | None = None
    max_step_seconds: float | None = None
    listeners: list[TrainingListener] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.timer = StepTimer()
        self.steps: list[StepRecord] = []
        self.epoch_records: list[EpochRecord] = []
        self.stop_reason: str | None = None
        self.skipped_steps = 0
        self.loss_scale: float | None = None
        self._epoch = 0
        self._step_in_epoch = 0

    @property
    def stop_requested(self) -> bool:
        return self.stop_reason is not None

    def epoch_begin(self, epoch: int) -> None:
        self._epoch, self._step_in_epoch = epoch + 1, 0
        for listener in self.listeners:
            listener.epoch_started(self._epoch, self.epochs, self.steps_per_epoch)

    def step_begin(self) -> None:
        self.timer.start()

    def step_end(self, loss: float, loss_scale: float | None = None,
                 applied_steps: int | None = None, metrics: dict[str, float] | None = None) -> None:
        """Record a finished step. `applied_steps` is the optimizer's count of applied updates;
        `metrics` are the epoch's running values so far (as Keras reports them)."""
        seconds = self.timer.stop()
        self._step_in_epoch += 1
        record = StepRecord(len(self.steps) + 1, self._epoch, loss, seconds, loss_scale,
                            metrics or {})
        self.steps.append(record)
        if self.loss_scaling and applied_steps is not None:
            self.skipped_steps = record.step - applied_steps
            self.loss_scale = loss_scale
        for listener in self.listeners:
            listener.step_finished(record, self._step_in_epoch)
        if self.max_steps is not None and record.step >= self.max_steps:
            self.stop_reason = f"stopped after {record.step} steps (step limit {self.max_steps})"
        elif self.max_step_seconds is not None and seconds > self.max_step_seconds:
            self.stop_reason = (f"stopped after {record.step} steps: a step took {seconds:.1f} s "
                                f"(limit {self.max_step_seconds:g} s)")

    def epoch_end(self, metrics: dict[str, float]) -> None:
        record = EpochRecord(
            epoch=self._epoch,
            steps=self._step_in_epoch,
            metrics={k: float(v) for k, v in metrics.items()},
            loss_scale=self.loss_scale,
            skipped_steps=self.skipped_steps if self.loss_scaling else None,
        )
        self.epoch_records.append(record)
        for listener in self.listeners:
            listener.epoch_finished(record)
