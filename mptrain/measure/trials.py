"""plan's choice among its trials, each judged against float32's from the same rounds
(`verdicts.judge_rows`: its speed, loss, time to target and whole-run estimate), and the race
that stops a trial from taking turns once it cannot be picked (`race`).

Pure functions of what the trials recorded, so every rule is tested on recorded numbers."""

from __future__ import annotations

import math
import statistics

from mptrain.measure.engine import Racer
from mptrain.measure.variant import Variant
from mptrain.measure.verdicts import MIN_ROUNDS, TWIN, median_interval, round_ratios, worded
from mptrain.training.turns import TurnCommand

PRACTICAL_GAIN = 1.05  # less than this between two candidates is not worth a change of precision


def gain(trial: Variant) -> float | None:
    """What a trial gains over float32: at the experiment's batch, its speed-up (its loss was
    held to float32's step by step, on the same batches, so it reaches float32's loss as
    soon); at another batch, its time-to-target speed-up (`measure.to_target`), since a
    larger batch may need more examples to get as far."""
    if not trial.batch:
        return trial.speedup
    target = trial.verdict.to_target
    return target.speedup if target is not None else None


def choose(trials: list[Variant], ruled_out: list[str] | None = None) -> tuple[str, str]:
    """The counted trial with the largest gain over float32 (`gain`) that is faster than
    float32 beyond the noise (its speed-up's 95% interval above 1 and above float32's A/A
    twin's: `Verdict.faster`), and by at least PRACTICAL_GAIN, a gain too small to be worth a
    change of precision otherwise. Among trials within PRACTICAL_GAIN of the best, the
    simplest (the first listed: the experiment's batch before another). float32 when none
    is, with the reason read from the verdicts, never a verdict on what did not run
    (`ruled_out`: the candidates not tried, by name). Returns the pick's label and why."""
    candidates = [t for t in trials if t.label not in ("float32", TWIN)]
    ran = [t for t in candidates if t.summary is not None]
    if not ran:
        why = (f"not tried: {', '.join(ruled_out)}, each ruled out before a trial for the reason "
               "its line gives" if ruled_out else "no other candidate was tried")
        return "float32", f"only float32 was measured ({why})"
    faster = [t for t in candidates if t.verdict.faster and (gain(t) or 0) >= PRACTICAL_GAIN]
    if faster:
        best_gain = max(gain(t) for t in faster)
        best = next(t for t in faster if gain(t) * PRACTICAL_GAIN >= best_gain)
        low, high = best.speedup_range
        why = f"{best.speedup:.2f}x float32 (95% interval {low:.2f}-{high:.2f}x)"
        if best.batch:
            why = (f"{gain(best):.2f}x float32's time to its loss at batch "
                   f"{best.batch_size}, {why.replace('x float32', 'x per example', 1)}")
        return best.label, why
    if any(t.verdict.eligible and t.verdict.speed.word == "faster" and t.verdict.slower_over_run
           for t in candidates):
        return "float32", ("a candidate was faster per step but not over the experiment's length "
                           "(its one-off costs outweigh the gain)")
    if not any(t.verdict.eligible for t in ran):
        return "float32", "every 16-bit candidate was refused (" + "; ".join(
            f"{t.label}: {', '.join(t.verdict.refused) or t.verdict.words()}" for t in ran) + ")"
    return "float32", (f"no candidate tried ({', '.join(t.label for t in ran)}) was faster than "
                       "float32 beyond the noise")


# --- the race: trials that cannot be picked stop taking turns -------------------------------


def race(racers: dict[str, Racer], baseline: str | None = "float32",
         min_rounds: int = MIN_ROUNDS) -> dict[str, TurnCommand]:
    """What a plan's engine tells its trials before the next round (`training.turns.STOPS`:
    the word, and why), from the rounds run so far in turns: each trial's speed-up over
    float32 per round (per example: `verdicts.round_ratios`) and its interval
    (`verdicts.median_interval`: the whole range below 6 rounds), beside float32's A/A
    twin's (the machine's own noise):

    - `drop` a trial that cannot be picked: its whole interval below what a pick needs (the
      `PRACTICAL_GAIN` and the twin's noise: `choose`), or, at the experiment's batch, below
      the leader's (the fastest trial still running) by more than both, round by round;
    - `decided` for every trial still running once the pick is (`_settled`): the trials left
      are faster than float32 beyond the noise by the `PRACTICAL_GAIN`, and the first listed
      within it of the others (or alone), or no trial but the controls is left.

    A dropped trial is judged on the rounds it ran, as one the budget cut, and stays
    eligible: were the leader refused at the end (its loss behind float32's), `choose` picks
    as it would have. A trial is judged only after `min_rounds` rounds, and nothing is
    decided before every trial has run as many. A trial at another batch size is judged by
    its time to float32's loss, which its speed per example bounds from above (a larger batch
    takes at least as many examples to a loss): it can be dropped, against float32 or the
    leader, but never leads."""
    base = racers.get(baseline) if baseline is not None else None
    if base is None:
        return {}
    speedups = {label: round_ratios(base.rounds, r.rounds, r.batch_size / base.batch_size)
                for label, r in racers.items() if label != baseline}
    running = {label for label, r in racers.items() if r.running and not r.control}
    if any(len(_known(speedups[label])) < min_rounds for label in running):
        return {}  # every trial gets as many rounds before any is judged
    twin = _known(speedups.get(TWIN, []))
    floor = median_interval(twin) if len(twin) >= min_rounds else (1.0, 1.0)
    stops = {label: TurnCommand("drop", why) for label in sorted(running)
             if (why := _below_a_pick(speedups[label], floor)) is not None}
    same_batch = [label for label in running - set(stops) if racers[label].batch_size == base.batch_size]
    leader = max(same_batch, key=lambda label: statistics.median(_known(speedups[label])), default=None)
    stops |= {label: TurnCommand("drop", why) for label in sorted(running - set(stops))
              if leader is not None and label != leader
              and (why := _behind(speedups[label], speedups[leader], leader, floor, min_rounds)) is not None}
    left = [label for label in racers if label in running and label not in stops]  # as listed
    if left:
        same = all(racers[label].batch_size == base.batch_size for label in left)
        why = _settled(left, speedups, floor, min_rounds) if same else None  # another batch: raced to its end
    elif any(not r.control for r in racers.values()):
        why = "decided: no trial but float32 is left to race"
    else:
        return stops  # float32 alone: nothing was raced
    if why is None:
        return stops
    return stops | {label: TurnCommand("decided", why) for label, r in racers.items()
                    if r.running and label not in stops}


def _settled(left: list[str], speedups: dict[str, list[float | None]],
             floor: tuple[float, float], min_rounds: int) -> str | None:
    """Why the pick among the trials `left` (as listed, at the experiment's batch) is
    decided, or None while it is not: each faster than float32 beyond the noise
    (`verdicts.worded`) by the `PRACTICAL_GAIN`, and the first listed (which `choose`
    prefers, as the simpler, within the `PRACTICAL_GAIN` of the best) within it of every
    other one, round by round, over its whole interval (`min_rounds` rounds both ran, at
    least)."""
    for label in left:
        known = _known(speedups[label])
        median = statistics.median(known)
        if worded(median, median_interval(known), True, floor).word != "faster" or median < PRACTICAL_GAIN:
            return None  # its own verdict is still open
    first, *others = left
    for other in others:
        pairs = _over(speedups[first], speedups[other])
        if len(pairs) < min_rounds or median_interval(pairs)[0] < 1 / PRACTICAL_GAIN:
            return None
    known = _known(speedups[first])
    low, high = median_interval(known)
    rest = (f"within {PRACTICAL_GAIN - 1:.0%} of {', '.join(others)} or faster, and simpler"
            if others else "every other trial dropped")
    return (f"decided after {len(known)} rounds: {first} {statistics.median(known):.2f}x float32 "
            f"({_interval_words(len(known))} {low:.2f}-{high:.2f}x), {rest}")


def _below_a_pick(speedups: list[float | None], floor: tuple[float, float]) -> str | None:
    """Why a trial cannot be picked (None: it can): its speed-up's whole interval below the
    `PRACTICAL_GAIN` and the noise floor's top, what `choose` needs of a pick."""
    known = _known(speedups)
    high = median_interval(known)[1]
    need = max(PRACTICAL_GAIN, floor[1])
    if high >= need:
        return None
    return (f"dropped after {len(known)} rounds: at most {_at_most(high)} float32 "
            f"({_interval_words(len(known))}), a pick needs {need:.2f}x")


def _behind(speedups: list[float | None], leaders: list[float | None], leader: str,
            floor: tuple[float, float], min_rounds: int) -> str | None:
    """Why a trial cannot be picked over the leader (None: it can): its speed over the
    leader's, round by round, below 1 by more than the `PRACTICAL_GAIN` (within which
    `choose` prefers the simpler) and the noise floor's bottom, over its whole interval of
    the rounds both ran (`min_rounds` at least: a trial is not behind in rounds it never
    shared with the leader)."""
    ratios = _over(speedups, leaders)
    if len(ratios) < min_rounds:
        return None
    high = median_interval(ratios)[1]
    if high >= min(1 / PRACTICAL_GAIN, floor[0]):
        return None
    return (f"dropped after {len(ratios)} rounds: at most {_at_most(high)} {leader}'s speed "
            f"({_interval_words(len(ratios))})")


def _over(mine: list[float | None], theirs: list[float | None]) -> list[float]:
    """My speed-up over theirs in each round both have one (the rounds are aligned)."""
    return [a / b for a, b in zip(mine, theirs, strict=False) if a and b]


def _known(ratios: list[float | None]) -> list[float]:
    return [r for r in ratios if r is not None]


def _interval_words(rounds: int) -> str:
    """What the interval is: below 6 rounds, the whole range (every round was inside it)."""
    return "95%" if rounds >= 6 else f"in each of {rounds} rounds"


def _at_most(bound: float) -> str:
    """An upper bound as said, rounded down: 1.049 is "1.04x", never the 1.05x it is below."""
    return f"{math.floor(bound * 100) / 100:.2f}x"
