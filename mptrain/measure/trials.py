"""plan's trials: each one judged against float32's from the same rounds (`verdicts.judge`),
its whole-run estimate against float32's, and the choice among them.

Pure functions of what the trials recorded, so every rule is tested on recorded numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mptrain.measure.verdicts import Measured, Rules, Steps, judge, speed
from mptrain.precision.candidates import Candidate

PRACTICAL_GAIN = 1.05  # less than this between two candidates is not worth a change of precision
TWIN = "float32-twin"  # float32 run again in the same turns: the A/A test of the machine's noise


class Trial(Measured):
    """One candidate's trial: the measured row (`verdicts.Measured`) and what plan adds."""

    candidate: Candidate
    batch: dict[str, object] = {}  # at another batch: the trial's changes (`config.batch_scaling`)
    whole_run_s: float | None = None  # estimated time to run the experiment as written

    @property
    def settings(self) -> dict[str, object]:
        return {**self.candidate.settings, **self.batch}

    @property
    def counts(self) -> bool:
        """It can be picked: timed, trained as well as float32, nothing refused."""
        v = self.verdict
        return v.speed.word is not None and not v.refused and not v.baseline


@dataclass(frozen=True)
class RunLength:
    """The experiment as written, for the whole-run estimate: its steps (0: not known), its
    validation and test batches, the checkpoints it saves, and what a trial's process spends
    outside mptrain's clock (`plan.judged`)."""

    steps: int = 0
    eval_batches: int = 0
    checkpoints: int = 0
    overhead_s: float = 0.0


def judge_trials(trials: list[Trial], steps: dict[str, list], rules: Rules,
                 length: RunLength = RunLength()) -> list[Trial]:
    """Every trial against float32's (`verdicts.judge`), on the losses of their runs
    (`steps`: label → step records) and with float32's A/A twin as the noise floor of
    speed-ups and of loss differences; then the whole-run estimates."""
    base = next((t for t in trials if t.label == "float32"), None)
    twin = next((t for t in trials if t.label == TWIN), None)
    floor = None
    if base is not None and twin is not None and twin.summary is not None and base.summary is not None:
        floor = speed(twin, base, rules.turn_steps).interval
    base_steps, twin_steps = steps.get("float32"), steps.get(TWIN)
    base_whole = whole_run_estimate(base, length) if base is not None else None
    judged = []
    for t in trials:
        losses = (Steps(base_steps, steps[t.label], twin_steps)
                  if base_steps and t.label in steps and t.label != TWIN else None)
        verdict = judge(t, base, losses, rules, None if t.label == TWIN else floor)
        whole = whole_run_estimate(t, at_its_batch(length, base, t))
        if (verdict.speed.word == "faster" and whole is not None and base_whole is not None
                and whole > base_whole):
            verdict = verdict.model_copy(update={"slower_over_run": True})
        judged.append(t.model_copy(update={"verdict": verdict, "whole_run_s": whole}))
    return judged


def at_its_batch(length: RunLength, base: Trial | None, trial: Trial) -> RunLength:
    """The experiment's length in the trial's batches: at batch 2b, half the steps and
    evaluation batches (the same examples)."""
    if base is None or base.summary is None or trial.summary is None:
        return length
    ratio = base.summary.batch_size / trial.summary.batch_size
    if ratio == 1:
        return length
    return replace(length, steps=math.ceil(length.steps * ratio),
                   eval_batches=math.ceil(length.eval_batches * ratio))


def whole_run_estimate(trial: Trial, length: RunLength) -> float | None:
    """How long the experiment as written would take this way, as its `mptrain run` process
    lasts: the one-off costs, to the end of its first step (start, data, model, tracing,
    compiling: `time_to_first_step_s`); every later step at the trial's median; its
    evaluations; its checkpoints at the trial's own save time (a trial saves one as it
    stops); the saved model (a trial saves it when the experiment does); and what the
    process spends outside mptrain's clock (the interpreter's start, the exit:
    `RunLength.overhead_s`). Evaluations: the trial's own (tracing included), and each further
    batch of the experiment's validation and test sets at a third of a training step (a
    forward pass of the three a step does)."""
    s = trial.summary
    if not length.steps or s is None or s.step_time is None or s.time_to_first_step_s is None:
        return None
    step_s = s.step_time.median_ms / 1e3
    estimate = s.time_to_first_step_s + (length.steps - 1) * step_s
    if s.evaluation_s is not None and s.test_examples:
        evaluated = math.ceil(s.test_examples / s.batch_size)
        estimate += s.evaluation_s + max(0, length.eval_batches - evaluated) * step_s / 3
    estimate += length.checkpoints * (s.checkpoint_save_s or 0.0) + (s.model_save_s or 0.0)
    return estimate + length.overhead_s


def gain(trial: Trial) -> float | None:
    """What a trial gains over float32: at the experiment's batch, its speed-up (its loss was
    held to float32's step by step, on the same batches, so it reaches float32's loss as
    soon); at another batch, its time-to-target speed-up (`measure.to_target`), since a
    larger batch may need more examples to get as far."""
    if not trial.batch:
        return trial.speedup
    target = trial.verdict.to_target
    return target.speedup if target is not None else None


def choose(trials: list[Trial]) -> tuple[str, str]:
    """The counted trial with the largest gain over float32 (`gain`) that is faster than
    float32 beyond the noise (its speed-up's 95% interval above 1 and above float32's A/A
    twin's: `Verdict.faster`), and by at least PRACTICAL_GAIN, a gain too small to be worth a
    change of precision otherwise. Among trials within PRACTICAL_GAIN of the best, the
    simplest (the first listed: the experiment's batch before another). float32 when none
    is, with the reason read from the verdicts. Returns the pick's label and why."""
    candidates = [t for t in trials if t.label not in ("float32", TWIN)]
    faster = [t for t in candidates if t.counts and t.verdict.faster and (gain(t) or 0) >= PRACTICAL_GAIN]
    if faster:
        best_gain = max(gain(t) for t in faster)
        best = next(t for t in faster if gain(t) * PRACTICAL_GAIN >= best_gain)
        low, high = best.speedup_range
        why = f"{best.speedup:.2f}x float32 (95% interval {low:.2f}-{high:.2f}x)"
        if best.batch:
            why = (f"{gain(best):.2f}x float32's time to its loss at batch "
                   f"{best.batch['train.batch_size']}, {why.replace('x float32', 'x per example', 1)}")
        return best.label, why
    if any(t.counts and t.verdict.speed.word == "faster" and t.verdict.slower_over_run
           for t in candidates):
        return "float32", ("a candidate was faster per step but not over the experiment's length "
                           "(its one-off costs outweigh the gain)")
    ran = [t for t in candidates if t.summary is not None]
    if ran and not any(t.counts for t in ran):
        return "float32", "every 16-bit candidate was refused (" + "; ".join(
            f"{t.label}: {', '.join(t.verdict.refused) or t.verdict.words()}" for t in ran) + ")"
    return "float32", "no candidate was faster than float32 beyond the noise"
