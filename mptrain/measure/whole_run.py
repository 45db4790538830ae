"""How long the experiment as written would take, estimated from a short trial of it: what
plan's "slower over the run" is judged on (a faster step can lose to its one-off costs).

Pure functions of a run's summary and the experiment's length, tested on recorded numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mptrain.runs.summary import RunSummary


@dataclass(frozen=True)
class RunLength:
    """The experiment as written, for the whole-run estimate: its steps (0: not known), its
    validation and test batches, the checkpoints it saves, and what a trial's process spends
    outside mptrain's clock (`plan.judge_plan`), all at the experiment's own batch."""

    steps: int = 0
    eval_batches: int = 0
    checkpoints: int = 0
    overhead_s: float = 0.0


def in_batches_of(length: RunLength, experiment_batch: int, batch: int) -> RunLength:
    """The experiment's length in another batch size's steps: at 2b, half the steps and
    evaluation batches (the same examples)."""
    ratio = experiment_batch / batch
    return replace(length, steps=math.ceil(length.steps * ratio),
                   eval_batches=math.ceil(length.eval_batches * ratio))


def whole_run_estimate(s: RunSummary | None, length: RunLength) -> float | None:
    """How long the experiment as written would take this way, as its `mptrain run` process
    lasts: the one-off costs, to the end of its first step (start, data, model, tracing,
    compiling: `time_to_first_step_s`); every later step at the trial's median; its
    evaluations; its checkpoints at the trial's own save time (a trial saves one as it
    stops); the saved model (a trial saves it when the experiment does); and what the
    process spends outside mptrain's clock (the interpreter's start, the exit:
    `RunLength.overhead_s`). Evaluations: the trial's own (tracing included), and each further
    batch of the experiment's validation and test sets at a third of a training step (a
    forward pass of the three a step does)."""
    if not length.steps or s is None or s.step_time is None or s.time_to_first_step_s is None:
        return None
    step_s = s.step_time.median_ms / 1e3
    estimate = s.time_to_first_step_s + (length.steps - 1) * step_s
    if s.evaluation_s is not None and s.test_examples:
        evaluated = math.ceil(s.test_examples / s.batch_size)
        estimate += s.evaluation_s + max(0, length.eval_batches - evaluated) * step_s / 3
    estimate += length.checkpoints * (s.checkpoint_save_s or 0.0) + (s.model_save_s or 0.0)
    return estimate + length.overhead_s
