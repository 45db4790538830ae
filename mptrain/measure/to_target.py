"""Time to target: how long a variant takes to reach the baseline's training loss, the judgement
a change of batch size needs (MLPerf Training's metric: wall-clock time to a quality, with the
batch free).

A step speed-up says nothing across batch sizes: a step of batch 2b is slower, and at the same
learning rate it may need more examples to get as far. Every variant sees the same examples in
the same order (`config.batch_scaling`), so losses compare over examples seen. The target is the
baseline's loss at its end (its mean over the second half of its examples, as
`verdicts.trial_loss`) plus the allowance the loss tolerance gives it (`verdicts.training_against`).
Each variant's examples to target are where its loss, averaged over a trailing window of that
many examples (half the baseline's), first reaches the target; times its measured time per
example (from the rounds run in turns: the paired speed-up), that is its time to target.
A variant that never reaches it within its examples says so, and cannot be picked.
"""

from __future__ import annotations

import math

from mptrain.record import FrozenRecord


class ToTarget(FrozenRecord):
    """A variant's way to the baseline's loss."""

    target_loss: float
    examples: int | None  # examples seen when its averaged loss first reached the target (None: never)
    seen: int  # the examples it ran
    speedup: float | None = None  # the baseline's time to target / this one's

    @property
    def reached(self) -> bool:
        return self.examples is not None


def loss_over_examples(records) -> list[tuple[int, float]]:
    """(examples seen after the step, its loss) for every step with a finite loss (a step
    skipped under loss scaling trained on nothing)."""
    seen, points = 0, []
    for r in records:
        seen += r.examples
        if math.isfinite(r.loss) and not r.skipped:
            points.append((seen, r.loss))
    return points


def examples_to(points: list[tuple[int, float]], target: float, window: int) -> int | None:
    """The examples seen when the mean loss of the steps in the trailing `window` examples first
    is at or below `target`, from the first point a whole window is behind; None if never."""
    for i, (seen, _) in enumerate(points):
        if seen < window:
            continue
        recent = [loss for at, loss in points[: i + 1] if at > seen - window]
        if recent and sum(recent) / len(recent) <= target:
            return seen
    return None


def target_of(base: list[tuple[int, float]], allowance: float) -> tuple[float, int]:
    """The baseline's loss at its end (its mean over the second half of its examples) plus
    `allowance`, and the window (half its examples) every loss curve is averaged over."""
    total = base[-1][0]
    window = max(1, total // 2)
    second_half = [loss for seen, loss in base if seen > total - window]
    return sum(second_half) / len(second_half) + allowance, window


def to_target(base_records, records, allowance: float,
              speedup_per_example: float | None) -> ToTarget | None:
    """The variant's examples to the baseline's loss (plus `allowance`), and its time-to-target
    speed-up: its speed-up per example times how many fewer examples it needed. None when the
    baseline has no finite loss to aim at."""
    base, mine = loss_over_examples(base_records), loss_over_examples(records)
    if not base or not mine:
        return None
    target, window = target_of(base, allowance)
    base_examples, examples = examples_to(base, target, window), examples_to(mine, target, window)
    speedup = None
    if examples is not None and base_examples is not None and speedup_per_example is not None:
        speedup = speedup_per_example * base_examples / examples
    return ToTarget(target_loss=target, examples=examples, seen=mine[-1][0], speedup=speedup)
