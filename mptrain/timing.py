"""Step timing: wall time per training step, measured once the device has finished the step.

TensorFlow dispatches work asynchronously, so a timer around the call alone measures dispatch.
Both training loops stop the timer only after a value of the step has reached the host (fit's
logs are converted to floats before `on_train_batch_end`; the custom loop fetches its step
outputs), which waits for the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter


class StepTimer:
    """Brackets each step with `start()` / `stop()`; `stop()` returns the step's seconds.
    `first_start` is when the first step began (start-up cost = first_start − launch)."""

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


@dataclass(frozen=True)
class StepTimeStats:
    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    timed_steps: int
    warmup_steps: int

    def to_dict(self) -> dict:
        return {"median": self.median_ms, "p10": self.p10_ms, "p90": self.p90_ms, "mean": self.mean_ms}


def summarize(durations: list[float], warmup_steps: int) -> StepTimeStats | None:
    """Statistics over the steps after warm-up (tracing, compilation, first allocations).

    A run cut shorter than its warm-up still reports its last step(s) rather than nothing:
    at least one step is always kept, and `warmup_steps` says how many were left out.
    """
    if not durations:
        return None
    import numpy as np  # here, not at the top: report.py imports this module for `validate`

    skip = min(warmup_steps, len(durations) - 1)
    ms = np.asarray(durations[skip:]) * 1000.0
    return StepTimeStats(
        median_ms=float(np.median(ms)),
        p10_ms=float(np.percentile(ms, 10)),
        p90_ms=float(np.percentile(ms, 90)),
        mean_ms=float(ms.mean()),
        timed_steps=len(ms),
        warmup_steps=skip,
    )
