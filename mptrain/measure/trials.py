"""plan's trials: each one judged against float32's from the same rounds (`verdicts.judge`),
its whole-run estimate against float32's, and the choice among them.

Pure functions of what the trials recorded, so every rule is tested on recorded numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mptrain.measure.verdicts import Measured, Rules, Steps, judge, speed
from mptrain.precision.candidates import Candidate

PRACTICAL_GAIN = 1.05  # less than this between two candidates is not worth a change of precision
TWIN = "float32-twin"  # float32 run again in the same turns: the A/A test of the machine's noise


class Trial(Measured):
    """One candidate's trial: the measured row (`verdicts.Measured`) and what plan adds."""

    candidate: Candidate
    whole_run_s: float | None = None  # estimated time to run the experiment as written

    @property
    def settings(self) -> dict[str, object]:
        return self.candidate.settings

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
        whole = whole_run_estimate(t, length)
        if (verdict.speed.word == "faster" and whole is not None and base_whole is not None
                and whole > base_whole):
            verdict = verdict.model_copy(update={"slower_over_run": True})
        judged.append(t.model_copy(update={"verdict": verdict, "whole_run_s": whole}))
    return judged


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


def choose(trials: list[Trial]) -> tuple[str, str]:
    """The fastest counted candidate that is faster than float32 beyond the noise (its
    speed-up's 95% interval above 1 and above float32's A/A twin's: `Verdict.faster`), and by
    at least PRACTICAL_GAIN, a gain too small to be worth a change of precision otherwise.
    Among candidates within PRACTICAL_GAIN of the fastest, the simplest (the first listed).
    float32 when none is, with the reason read from the verdicts."""
    candidates = [t for t in trials if t.label not in ("float32", TWIN)]
    faster = [t for t in candidates if t.counts and t.verdict.faster and t.speedup >= PRACTICAL_GAIN]
    if faster:
        fastest = max(t.speedup for t in faster)
        best = next(t for t in faster if t.speedup * PRACTICAL_GAIN >= fastest)
        low, high = best.speedup_range
        return best.candidate.name, f"{best.speedup:.2f}x float32 (95% interval {low:.2f}-{high:.2f}x)"
    if any(t.counts and t.verdict.speed.word == "faster" and t.verdict.slower_over_run
           for t in candidates):
        return "float32", ("a candidate was faster per step but not over the experiment's length "
                           "(its one-off costs outweigh the gain)")
    ran = [t for t in candidates if t.summary is not None]
    if ran and not any(t.counts for t in ran):
        return "float32", "every 16-bit candidate was refused (" + "; ".join(
            f"{t.candidate.name}: {', '.join(t.verdict.refused) or t.verdict.words()}" for t in ran) + ")"
    return "float32", "no candidate was faster than float32 beyond the noise"
