"""plan's choice among its trials, each judged against float32's from the same rounds
(`verdicts.judge_rows`: its speed, loss, time to target and whole-run estimate).

Pure functions of what the trials recorded, so every rule is tested on recorded numbers."""

from __future__ import annotations

from mptrain.measure.variant import Variant
from mptrain.measure.verdicts import TWIN

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
