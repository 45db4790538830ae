"""The one observer both training loops report to: timing, per-step records, stop conditions.

Loops call `epoch_begin`, `step_begin`, `step_end`, `epoch_end`; the monitor times steps,
follows the loss scale (`loss_scale.LossScaleTracker`), decides when a bounded run must stop,
and forwards records to listeners (`records.TrainingListener`), so a new capability is
written once, not per loop.

A run resumed inside an epoch restarts the loop's metrics at the resume; the monitor carries
the epoch's earlier steps (from their records) into every running metric, so the resumed
epoch reports what an uninterrupted one would (all of mptrain's metrics are means over
examples, which combine exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

from mptrain.training.loss_scale import LossScaleTracker
from mptrain.training.records import STOPPED_EARLY, EpochRecord, StepRecord, StopKind, TrainingListener


def _carried(carry: tuple[int, dict[str, float]] | None, metrics: dict[str, float],
             examples: int) -> dict[str, float]:
    """Running means over the whole epoch from the means before a resume (`carry`: that
    part's examples and metrics) and after it (`examples` since the resume)."""
    if carry is None:
        return metrics
    before_examples, before = carry
    total = before_examples + examples
    return {key: (before[key] * before_examples + value * examples) / total
            if key in before and total else value for key, value in metrics.items()}


@dataclass
class TrainingMonitor:
    epochs: int
    steps_per_epoch: int
    max_steps: int | None = None
    max_step_seconds: float | None = None
    listeners: list[TrainingListener] = field(default_factory=list)
    learning_rate: Callable[[], float] | None = None  # the optimizer's current rate
    # each loss-scaling optimizer's scale at the start, by its name on the model (a GAN has
    # two); empty: no loss scaling
    initial_loss_scales: dict[str, float] = field(default_factory=dict)
    # a resumed run: the records of the steps and epochs done before (up to its checkpoint)
    history: tuple[list[StepRecord], list[EpochRecord]] = ([], [])

    def __post_init__(self) -> None:
        self.first_start: float | None = None  # when the first step began (start-up cost: from launch)
        self._step_started: float | None = None
        self.steps: list[StepRecord] = list(self.history[0])
        self.epoch_records: list[EpochRecord] = list(self.history[1])
        self.stop_reason: str | None = None
        self.stop_kind: StopKind | None = None
        self.signal: int | None = None  # the signal that interrupted the run
        self.trained = False  # training is over (its last checkpoint saved): nothing left to stop
        self.loss_scales = {name: LossScaleTracker(_resumed_scale(self.steps, name, scale),
                                                   skipped_steps=_skips(self.steps, name))
                            for name, scale in self.initial_loss_scales.items()}
        self.epoch = 0  # 1-based, the epoch in progress
        self.step_in_epoch = 0  # steps of it done
        self._carry: tuple[int, dict[str, float]] | None = None  # an epoch's part before a resume
        self._examples_since_resume = 0

    @property
    def loss_scale(self) -> LossScaleTracker | None:
        """The first loss-scaling optimizer's tracker (most models have one)."""
        return next(iter(self.loss_scales.values()), None)

    @property
    def stop_requested(self) -> bool:
        return self.stop_reason is not None

    @property
    def epoch_complete(self) -> bool:
        return self.step_in_epoch >= self.steps_per_epoch

    @property
    def validates_epoch(self) -> bool:
        """Whether the epoch ending is validated: every one but an epoch a run stopped early
        cut short (a Ctrl-C does not wait for a validation pass nobody reads; the epoch is
        resumed, and validated, whole)."""
        return self.epoch_complete or self.stop_kind not in STOPPED_EARLY

    def listen(self, *listeners: TrainingListener) -> None:
        """Tell `listeners` too, each in its phase (`records.Phase`: what is reported is saved
        first), in the order given within one."""
        self.listeners = sorted([*self.listeners, *listeners], key=lambda listener: listener.phase)

    def request_stop(self, reason: str, kind: StopKind) -> None:
        """Stop after the current step (the first request wins)."""
        if self.stop_reason is None:
            self.stop_reason, self.stop_kind = reason, kind

    def notify(self, text: str, label: str = "warning") -> None:
        """`label`: "warning" for advice (a loss scale that keeps skipping steps), "note"
        for what a rule did (a learning rate lowered)."""
        for listener in self.listeners:
            listener.notice(text, label)

    def epoch_begin(self, epoch: int, first_step: int = 0) -> None:
        """`epoch` 0-based; `first_step` > 0 when a resumed run continues inside it."""
        self.epoch, self.step_in_epoch = epoch + 1, first_step
        self._carry, self._examples_since_resume = None, 0
        if first_step:
            earlier = [r for r in self.steps if r.epoch == self.epoch]
            if earlier:
                self._carry = (sum(r.examples for r in earlier), earlier[-1].metrics)
        for listener in self.listeners:
            listener.epoch_started(self.epoch, self.epochs, self.steps_per_epoch)

    def step_begin(self) -> None:
        self._step_started = perf_counter()
        if self.first_start is None:
            self.first_start = self._step_started

    def step_end(self, loss: float, examples: int, metrics: dict[str, float],
                 loss_scales: dict[str, float] | None = None) -> None:
        """Record a finished step. `metrics` are the loop's running values since the epoch
        (or the resume) began; `loss_scales` the scale of each optimizer the step applied
        after it, under loss scaling (a GAN's two; the first step drops those it never
        applies).

        TensorFlow dispatches work asynchronously, so the loops call this only after a value of
        the step has reached the host (fit: Keras converts the step's logs to floats before
        `on_train_batch_end`; custom loop: the step's outputs are fetched), which waits for the
        device: the step's time stops here."""
        if self._step_started is None:
            raise RuntimeError("step_end() without step_begin()")
        seconds, self._step_started = perf_counter() - self._step_started, None
        self.step_in_epoch += 1
        self._examples_since_resume += examples
        metrics = _carried(self._carry, metrics, self._examples_since_resume)
        skipped = None
        if loss_scales and self.loss_scales:
            self.loss_scales = {name: self.loss_scales[name] for name in loss_scales}
            skipped = any([self.loss_scales[name].step(scale) for name, scale in loss_scales.items()])
        first = next(iter(loss_scales.values())) if loss_scales else None
        record = StepRecord(len(self.steps) + 1, self.epoch, loss, seconds, examples, first, metrics,
                            skipped, loss_scales if len(loss_scales or ()) > 1 else None)
        self.steps.append(record)
        for listener in self.listeners:
            listener.step_finished(record, self.step_in_epoch)
        for name, tracker in self.loss_scales.items():
            if notice := tracker.skip_rate_notice():
                self.notify(notice if len(self.loss_scales) == 1 else f"{name}: {notice}")
        if self.max_steps is not None and record.step >= self.max_steps:
            self.request_stop(f"stopped after {_steps(record.step)} (step limit {self.max_steps})",
                              "max_steps")
        # not the first step this process ran (after a resume's history): it traces the step
        # function and creates the kernels (a ViT's first bfloat16 step took 10 s, its next
        # ones 0.2 s), and is never timed
        elif (self.max_step_seconds is not None and seconds > self.max_step_seconds
              and len(self.steps) > len(self.history[0]) + 1):
            self.request_stop(f"stopped after {_steps(record.step)}: a step took {seconds:.1f} s "
                              f"(limit {self.max_step_seconds:g} s)", "max_step_seconds")

    def epoch_end(self, metrics: dict[str, float]) -> None:
        """`metrics` as the loop computed them. The training `loss` is replaced by the mean
        over this epoch's steps with a finite loss, weighted by their examples: a skipped
        step (NaN loss, normal under loss scaling) would make Keras' running mean NaN."""
        finite = [r for r in self.steps if r.epoch == self.epoch and math.isfinite(r.loss)]
        loss = (sum(r.loss * r.examples for r in finite) / sum(r.examples for r in finite)
                if finite else math.nan)
        values = _carried(self._carry, {k: float(v) for k, v in metrics.items()},
                          self._examples_since_resume)
        record = EpochRecord(
            epoch=self.epoch,
            steps=self.step_in_epoch,
            metrics=order_metrics({**values, "loss": loss}),
            loss_scale=self.loss_scale.scale if self.loss_scale else None,
            # steps any optimizer skipped its update in
            skipped_steps=sum(bool(r.skipped) for r in self.steps) if self.loss_scales else None,
            loss_scales=({name: t.scale for name, t in self.loss_scales.items()}
                         if len(self.loss_scales) > 1 else None),
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


def _resumed_scale(steps: list[StepRecord], name: str, scale: float) -> float:
    """An optimizer's scale where a resumed run continues: after its last step kept, where
    its checkpoint is (one a model's own step builds is restored only as the step builds
    it, so the optimizer cannot say it yet); `scale` for a run that starts."""
    found = steps[-1].scale_of(name) if steps else None
    return scale if found is None else found


def _skips(steps: list[StepRecord], name: str) -> int:
    """Steps an optimizer skipped among a resumed run's records: its scale went down (one
    optimizer's records keep its scale alone, several optimizers' each one's)."""
    scales = [r.scale_of(name) for r in steps]
    if not any(r.loss_scales for r in steps):
        return sum(bool(r.skipped) for r in steps)
    return sum(1 for before, after in zip(scales, scales[1:], strict=False)
               if before is not None and after is not None and after < before)


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"
