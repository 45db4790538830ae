"""The one observer both training loops report to: timing, per-step records, stop conditions.

Loops call `epoch_begin`, `step_begin`, `step_end`, `epoch_end`; the monitor times steps,
derives skipped (non-finite) steps under loss scaling, decides when a bounded run must stop,
and forwards records to listeners (live progress, the run folder's files). Checkpointing,
telemetry and other per-step work plug in here as listeners, not into each loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Protocol

from mptrain.summary import EpochRecord, StepRecord


class TrainingListener(Protocol):
    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None: ...
    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None: ...
    def epoch_finished(self, record: EpochRecord) -> None: ...


class StepTimer:
    """Brackets each step with `start()` / `stop()`; `stop()` returns the step's seconds.

    TensorFlow dispatches work asynchronously, so the loops call `stop()` only after a value of
    the step has reached the host (fit: Keras converts the step's logs to floats before
    `on_train_batch_end`; custom loop: the step's outputs are fetched), which waits for the
    device. `first_start` is when the first step began (start-up cost = first_start - launch).
    """

    def __init__(self) -> None:
        self.first_start: float | None = None
        self._started: float | None = None

    def start(self) -> None:
        self._started = perf_counter()
        if self.first_start is None:
            self.first_start = self._started

    def stop(self) -> float:
        if self._started is None:
            raise RuntimeError("StepTimer.stop() without start()")
        elapsed = perf_counter() - self._started
        self._started = None
        return elapsed


@dataclass
class TrainingMonitor:
    epochs: int
    steps_per_epoch: int
    max_steps: int | None = None
    max_step_seconds: float | None = None
    listeners: list[TrainingListener] = field(default_factory=list)
    learning_rate: Callable[[], float] | None = None  # the optimizer's current rate
    initial_loss_scale: float | None = None  # None: the optimizer does not scale the loss
    # a resumed run: the records of the steps and epochs done before (up to its checkpoint)
    history: tuple[list[StepRecord], list[EpochRecord]] = ([], [])

    def __post_init__(self) -> None:
        self.timer = StepTimer()
        self.steps: list[StepRecord] = list(self.history[0])
        self.epoch_records: list[EpochRecord] = list(self.history[1])
        self.stop_reason: str | None = None
        self.stop_status: str | None = None  # stopped | interrupted | diverged
        self.signal: int | None = None  # the signal that interrupted the run
        self.loss_scale = self.initial_loss_scale
        self.skipped_steps = (sum(bool(r.skipped) for r in self.steps)
                              if self.initial_loss_scale is not None else None)
        self.epoch = 0  # 1-based, the epoch in progress
        self.step_in_epoch = 0  # steps of it done

    @property
    def stop_requested(self) -> bool:
        return self.stop_reason is not None

    def request_stop(self, reason: str, status: str = "stopped") -> None:
        """Stop after the current step (the first request wins)."""
        if self.stop_reason is None:
            self.stop_reason, self.stop_status = reason, status

    def epoch_begin(self, epoch: int, first_step: int = 0) -> None:
        """`epoch` 0-based; `first_step` > 0 when a resumed run continues inside it."""
        self.epoch, self.step_in_epoch = epoch + 1, first_step
        for listener in self.listeners:
            listener.epoch_started(self.epoch, self.epochs, self.steps_per_epoch)

    def step_begin(self) -> None:
        self.timer.start()

    def step_end(self, loss: float, examples: int, metrics: dict[str, float],
                 loss_scale: float | None = None) -> None:
        """Record a finished step. `metrics` are the epoch's running values so far (as Keras
        reports them); `loss_scale` is the scale after the step, under loss scaling.

        A LossScaleOptimizer halves its scale exactly when it skips a step (a non-finite
        gradient) and never lowers it otherwise, so a lower scale is a skipped step. (Its
        `iterations` cannot tell: with gradient accumulation Keras divides them.)"""
        seconds = self.timer.stop()
        self.step_in_epoch += 1
        skipped = None
        if loss_scale is not None and self.loss_scale is not None:
            skipped = loss_scale < self.loss_scale
            self.skipped_steps += skipped
            self.loss_scale = loss_scale
        record = StepRecord(len(self.steps) + 1, self.epoch, loss, seconds, examples,
                            loss_scale, metrics, skipped)
        self.steps.append(record)
        for listener in self.listeners:
            listener.step_finished(record, self.step_in_epoch)
        if self.max_steps is not None and record.step >= self.max_steps:
            self.request_stop(f"stopped after {_steps(record.step)} (step limit {self.max_steps})")
        elif self.max_step_seconds is not None and seconds > self.max_step_seconds:
            self.request_stop(f"stopped after {_steps(record.step)}: a step took {seconds:.1f} s "
                              f"(limit {self.max_step_seconds:g} s)")

    def epoch_end(self, metrics: dict[str, float]) -> None:
        """`metrics` as the loop computed them; the training `loss` is replaced by the mean
        over this epoch's steps with a finite loss, weighted by their examples: a skipped
        step (NaN loss, normal under loss scaling) would make Keras' running mean NaN."""
        steps = [r for r in self.steps if r.epoch == self.epoch]
        finite = [r for r in steps if math.isfinite(r.loss)]
        loss = (sum(r.loss * r.examples for r in finite) / sum(r.examples for r in finite)
                if finite else math.nan)
        record = EpochRecord(
            epoch=self.epoch,
            steps=self.step_in_epoch,
            metrics=order_metrics({**{k: float(v) for k, v in metrics.items()}, "loss": loss}),
            loss_scale=self.loss_scale,
            skipped_steps=self.skipped_steps,
            learning_rate=self.learning_rate() if self.learning_rate else None,
        )
        self.epoch_records.append(record)
        for listener in self.listeners:
            listener.epoch_finished(record)


def order_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """loss first, then the other training metrics, then validation ones, whatever order a
    loop produced them in, so both loops' files and progress lines read the same."""
    def rank(key: str) -> tuple[int, int, str]:
        val = key.startswith("val_")
        return (int(val), 0 if key.removeprefix("val_") == "loss" else 1, key)

    return dict(sorted(metrics.items(), key=lambda item: rank(item[0])))


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"
