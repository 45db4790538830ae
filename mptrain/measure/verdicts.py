"""Reading two runs' numbers side by side: is this one faster, and is it as accurate?

The arithmetic compare, plan and `runs --compare` share, kept pure (summaries in, numbers and
words out) so it is tested on recorded numbers and says the same thing everywhere.

Speed: the machines are shared and noisy, so a ratio of medians alone can mislead. Each
median's uncertainty follows from its steps' spread and how many were timed (the standard
error of a median is about 1.25 sigma / sqrt(n), sigma from the p10-p90 spread); the
speed-up's range is the 95% interval of the ratio of the two medians, and a verdict says
faster or slower only when that whole range is on one side of 1.

Speed measured in turns (compare and plan run their variants round-robin, `engine`): each
round's ratio is taken within the round (the baseline's median step in that round over the
variant's), so a machine that drifts between rounds moves both sides alike; the speed-up is
the median of the rounds' ratios, and its 95% interval the distribution-free interval of a
median from those ratios (order statistics of a Binomial(n, 1/2)), which needs 6 rounds;
with fewer, the whole range of the rounds' ratios.

Accuracy: a test set of n examples measures accuracy to about ±1.96·sqrt(p(1-p)/n), so on
41 examples one example (2.4 points) is noise. Two accuracies differ only when the difference
is outside the Wilson 95% interval of the variant's accuracy at the test set's size.
"""

from __future__ import annotations

import math

from mptrain.runs.summary import MIN_TIMED_STEPS, RunSummary

Z95 = 1.96


def speedup(base: RunSummary, other: RunSummary) -> tuple[float, tuple[float, float]] | None:
    """The baseline's median step over `other`'s, with its 95% interval; None unless both
    have enough timed steps."""
    a, b = base.step_time, other.step_time
    if a is None or b is None or not a.enough or not b.enough:
        return None
    ratio = a.median_ms / b.median_ms
    margin = math.exp(Z95 * math.hypot(_relative_error(a), _relative_error(b)))
    return ratio, (ratio / margin, ratio * margin)


MIN_ROUNDS = 3  # fewer paired rounds are no measurement of a ratio


def paired_speedup(base_rounds: list[float | None], rounds: list[float | None]
                   ) -> tuple[float, tuple[float, float]] | None:
    """The speed-up from rounds run in turns: `base_rounds[i]` and `rounds[i]` are the two
    sides' median step times in round i (None: that side had no timed step in it). The
    median of the per-round ratios, with its 95% interval; None with fewer than MIN_ROUNDS
    rounds where both sides were timed."""
    ratios = sorted(b / v for b, v in zip(base_rounds, rounds, strict=False) if b and v)
    if len(ratios) < MIN_ROUNDS:
        return None
    return _median(ratios), median_interval(ratios)


def median_interval(values: list[float], coverage: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of `values`: the k-th smallest and k-th
    largest, with k the largest rank whose Binomial(n, 1/2) tails leave at least `coverage`
    between them; the whole range when no rank does (n < 6 for 95%)."""
    ordered = sorted(values)
    n = len(ordered)
    tail, k = 0.0, 0
    for rank in range(n // 2):
        tail += math.comb(n, rank) / 2**n  # P(fewer than rank + 1 of n below the median)
        if 2 * tail > 1 - coverage:
            break
        k = rank + 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _relative_error(times) -> float:
    """The standard error of a median step, relative to it: 1.2533 sigma / sqrt(n), with
    sigma = (p90 - p10) / 2.563 (as for a normal distribution)."""
    sigma = (times.p90_ms - times.p10_ms) / 2.563
    return 1.2533 * sigma / math.sqrt(max(times.timed_steps, 1)) / times.median_ms


def speed_words(speedup_range: tuple[float, float] | None) -> str | None:
    """Faster or slower only when the whole range of the ratio is on one side of 1."""
    if speedup_range is None:
        return None
    low, high = speedup_range
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "same speed within noise"


def wilson_half_width(accuracy: float, n: int, z: float = Z95) -> float:
    """Half the width of the Wilson score interval of a proportion measured on n examples."""
    if n <= 0:
        return 1.0
    spread = z * math.sqrt(accuracy * (1 - accuracy) / n + z * z / (4 * n * n))
    return spread / (1 + z * z / n)


def accuracy_noise_pt(accuracy: float | None, n: int | None) -> float | None:
    """What a test set of n examples cannot resolve, in points: the Wilson half-width, and
    never less than one example."""
    if accuracy is None or not n:
        return None
    return 100 * max(wilson_half_width(accuracy, n), 1 / n)


def accuracy_words(delta_pt: float | None, noise_pt: float | None) -> str | None:
    """Judged on the rounded figure the table shows, so a -0.00 is 'same accuracy'."""
    if delta_pt is None:
        return None
    shown = round(delta_pt, 2)
    if shown == 0:
        return "same accuracy"
    if noise_pt is not None and abs(delta_pt) <= noise_pt:
        return f"accuracy within noise (±{noise_pt:.1f} pt)"
    return "accuracy lower" if shown < 0 else "accuracy higher"


def verdict(s: RunSummary, speedup_range: tuple[float, float] | None,
            accuracy_delta_pt: float | None, is_baseline: bool) -> str:
    """The numbers in words, beside them in the table (so it cannot contradict them):
    'faster, accuracy within noise (±0.6 pt)'."""
    accuracy = accuracy_words(accuracy_delta_pt, accuracy_noise_pt(s.test_accuracy, s.test_examples))
    if s.status == "diverged":
        text = "diverged (NaN/inf loss)"
    elif s.status == "interrupted":
        text = "interrupted: not finished"
    elif s.step_time is None or not s.step_time.enough:
        timed = s.step_time.timed_steps if s.step_time else 0
        speed = f"not enough steps to time ({timed} timed, need {MIN_TIMED_STEPS})"
        text = speed if is_baseline else ", ".join(filter(None, [speed, accuracy]))
    elif is_baseline:
        text = "baseline"
    else:
        text = ", ".join(filter(None, [speed_words(speedup_range), accuracy])) or "n/a"
    return f"{text} (stopped early)" if s.stop_reason else text


def difference(a: float | None, b: float | None, scale: float = 1.0) -> float | None:
    return scale * (a - b) if a is not None and b is not None else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


INPUT_BOUND_MARGIN = 1.2  # a step within this of the input pipeline's time waits for data


def input_bound(step_ms: float | None, input_ms: float | None) -> str | None:
    """When a step takes about as long as the input pipeline alone needs to deliver its batch,
    the step waits for data: no precision can make it faster than the pipeline."""
    if step_ms is None or input_ms is None or step_ms > INPUT_BOUND_MARGIN * input_ms:
        return None
    return (f"input-bound: the input pipeline alone takes {input_ms:.1f} ms a batch, so no step "
            "runs faster than that whatever its precision (data.cache: memory, or fewer decode "
            "steps, would help)")
