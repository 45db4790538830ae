"""What training produces, step by step: the records both loops emit, and who listens.

A `StepRecord` is one line of steps.jsonl, an `EpochRecord` one line of metrics.jsonl. Every
consumer (live progress, the run folder, TensorBoard, the divergence guard, checkpoints, the
summary, the plot) reads these, never a loop's own structures.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Literal

# What can stop a run before its configured end.
# "budget": a plan's time ran out; "dropped": a plan's race found it cannot be picked;
# "decided": a plan's race decided its pick (the run stopped with the others)
# the signals that stop training after its step (`signals.stop_on_signals`), the least pressing
# first: workers that got different ones stop for the last (`custom_loop.agreed_signal`)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
StopKind = Literal["max_steps", "max_step_seconds", "budget", "dropped", "decided", "signal",
                   "divergence", "early_stopping"]
CUT_SHORT: tuple[StopKind, ...] = ("budget", "dropped", "decided")  # by a plan: resumable to its end
STOPPED_EARLY: tuple[StopKind, ...] = (*CUT_SHORT, "signal")  # before the run's planned end
# How a run's training ended.
Status = Literal["finished", "interrupted", "diverged"]


@dataclass(frozen=True)
class StepRecord:
    """One training step, as both loops report it (one line of steps.jsonl)."""

    step: int  # 1-based over the whole run
    epoch: int  # 1-based
    loss: float
    seconds: float
    examples: int  # the batch's size: the last batch of an epoch may be short
    loss_scale: float | None = None  # mixed_float16 only: the scale after the step
    metrics: dict[str, float] = field(default_factory=dict)  # running means over the epoch
    skipped: bool | None = None  # mixed_float16 only: a non-finite gradient skipped the update
    # several optimizers scaling their losses (a GAN's): each one's scale after the step
    # (`loss_scale` is the first's; `skipped`: any of them skipped its update)
    loss_scales: dict[str, float] | None = None

    def scale_of(self, optimizer: str) -> float | None:
        """That optimizer's loss scale after the step (one optimizer's record keeps it alone)."""
        return self.loss_scales.get(optimizer) if self.loss_scales else self.loss_scale


@dataclass(frozen=True)
class EpochRecord:
    """One epoch's results (one line of metrics.jsonl)."""

    epoch: int
    steps: int
    metrics: dict[str, float]
    loss_scale: float | None = None
    skipped_steps: int | None = None
    learning_rate: float | None = None  # at the end of the epoch
    loss_scales: dict[str, float] | None = None  # several optimizers scaling: each one's


class Phase(IntEnum):
    """When a listener hears of a step or an epoch, beside the others (`TrainingMonitor.listen`
    keeps them in this order): what is reported is saved first, so a run killed right after
    its epoch line resumes after that epoch."""

    RECORD = 0  # the records on disk: a resume reads them up to the checkpoint
    JUDGE = 1  # the divergence guard (a diverged step is never saved as good), the epoch
    # rules (a lowered learning rate is checkpointed)
    CHECKPOINT = 2  # once what it holds is decided
    REPORT = 3  # telemetry, progress, turns: only what was saved is said


class TrainingListener:
    """Told about training as it happens, in its `phase`; override what you need (the rest do
    nothing)."""

    phase: ClassVar[Phase] = Phase.REPORT

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        """`epoch` is 1-based; `steps` the steps an epoch has."""

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        """After every step; `step_in_epoch` is 1-based."""

    def epoch_finished(self, record: EpochRecord) -> None:
        """After an epoch, its validation included."""

    def notice(self, text: str, label: str = "warning") -> None:
        """Advice that arises during training (a loss scale that keeps skipping steps; a
        "note": what a rule did), said once: the training rules decide it, whoever shows it
        only renders it."""


def run_status(steps: list[StepRecord], test: dict[str, float] | None,
               stopped_by: StopKind | None) -> Status:
    """`diverged` when the divergence guard stopped training, a loss the trained model was
    evaluated with (`test`: its test figures; None for a model Keras cannot evaluate, a GAN)
    is NaN/inf or missing, or training ended on a run of non-finite losses; else `finished`
    (a run a signal stopped is `interrupted`, and is not evaluated). An occasional NaN step is
    not divergence: under loss scaling it is a skipped step, and the next steps are finite
    again."""
    if stopped_by == "divergence":
        return "diverged"
    if test is not None:  # its losses, or its other figures where it reports none on the test set
        figures = [v for k, v in test.items() if k.endswith("loss")] or list(test.values())
        if not figures or not all(map(math.isfinite, figures)):
            return "diverged"
    last = steps[-5:]
    return "diverged" if last and not any(math.isfinite(r.loss) for r in last) else "finished"
