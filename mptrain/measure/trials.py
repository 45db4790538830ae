"""Judging plan's trials: each against float32's from the same rounds, within the loss
tolerance, finite, and not slower over the experiment's whole length; then the choice.

Pure functions of what the trials recorded, so every rule is tested on recorded numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mptrain.measure.verdicts import accuracy_noise_pt, difference, paired_speedup, speed_words
from mptrain.precision.candidates import Candidate
from mptrain.record import Record
from mptrain.runs.summary import RunSummary

DEFAULT_TOLERANCE_PCT = 3.0



PRACTICAL_GAIN = 1.05  # less than this between two trials is within a shared machine's drift



class Trial(Record):
    candidate: Candidate
    run_dir: str
    summary: RunSummary | None = None
    failed: str | None = None  # why there is no summary
    speedup: float | None = None  # float32's median step / this one's
    speedup_range: tuple[float, float] | None = None
    loss_delta_pct: float | None = None  # trial loss vs float32's, in % of float32's
    accuracy_delta_pt: float | None = None
    unexplained_non_finite: int = 0
    rounds: list[float | None] = []  # its median step (ms) in each round run in turns
    baseline_rounds: list[float | None] | None = None  # in pairs (memory): float32's in its pair
    whole_run_s: float | None = None  # estimated time to run the experiment as written
    overhead_s: float | None = None  # its process outside its own clock: interpreter start, exit
    counts: bool = False  # passed the accuracy guard and was timed
    verdict: str = ""



def trial_loss(steps) -> float | None:
    """Mean training loss over the trial's second half (same batches in every trial)."""
    losses = [r.loss for r in steps[len(steps) // 2:] if math.isfinite(r.loss) and not r.skipped]
    return sum(losses) / len(losses) if losses else None



def compared_losses(base_steps, steps) -> tuple[float | None, float | None]:
    """float32's loss and the trial's over the steps both ran: a trial cut short by the step
    limit is compared on its own few batches, not on float32's later, lower losses."""
    both = min(len(base_steps), len(steps))
    return trial_loss(base_steps[:both]), trial_loss(steps[:both])



@dataclass(frozen=True)
class Rules:
    """How trials are judged: the loss tolerance (% of float32's), whether test accuracy
    counts, and the experiment's own length in steps (0: not known) for the whole run."""

    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    evaluate: bool = False
    experiment_steps: int = 0
    eval_batches: int = 0  # the experiment's validation batches over its epochs, and its test's
    checkpoints: int = 0  # the checkpoints the experiment saves
    overhead_s: float = 0.0  # a trial's process outside its own clock (`plan.plan_rules`)



def judge(trial: Trial, base: Trial | None, losses: tuple[float | None, float | None],
          rules: Rules = Rules()) -> Trial:
    """The trial against float32's: timed in the same rounds, within the tolerance, finite,
    and not slower over the experiment's whole length than float32. `losses`: float32's
    training loss and the trial's over the steps both ran (`compared_losses`)."""
    base_loss, loss = losses
    tolerance_pct, evaluate, experiment_steps = rules.tolerance_pct, rules.evaluate, rules.experiment_steps
    s = trial.summary
    if s is None:
        return trial.model_copy(update={"verdict": f"failed ({trial.failed})"})
    base_rounds = trial.baseline_rounds if trial.baseline_rounds is not None else \
        (base.rounds if base else [])
    measured = paired_speedup(base_rounds, trial.rounds) if base and base.summary else None
    loss_delta = (100 * (loss - base_loss) / abs(base_loss)
                  if loss is not None and base_loss else None)
    accuracy = difference(s.test_accuracy, base.summary.test_accuracy if base and base.summary else None,
                          scale=100.0)
    problems = []
    if s.stopped_by == "max_step_seconds":  # too slow to finish: the verdict leads with that
        problems.append(s.stop_reason)
    elif s.status == "diverged":
        problems.append("diverged")
    elif trial.unexplained_non_finite:
        problems.append(f"{trial.unexplained_non_finite} non-finite loss(es) no loss scaler explains")
    if loss_delta is not None and loss_delta > tolerance_pct:
        problems.append(f"loss {loss_delta:+.1f}% of float32's (tolerance {tolerance_pct:g}%)")
    if evaluate and accuracy is not None:
        noise = accuracy_noise_pt(s.test_accuracy, s.test_examples) or 0.0
        if accuracy < -max(tolerance_pct, noise):
            problems.append(f"test accuracy {accuracy:+.2f} pt")
    timed = measured is not None
    if not timed and not problems:
        problems.append("not enough steps to time" if s.stop_reason is None else s.stop_reason)
    is_base = trial.candidate.name == "float32"
    whole_run = whole_run_estimate(trial, rules)
    base_whole = whole_run_estimate(base, rules) if base and base.summary else None
    if (not is_base and measured and measured[0] > 1 and whole_run and base_whole
            and whole_run > base_whole):
        problems.append(f"faster per step, but slower over the experiment's {experiment_steps} "
                        f"steps (est. {whole_run:.1f} s against float32's {base_whole:.1f} s: its "
                        "one-off costs outweigh the gain)")
    words = "baseline" if is_base else (speed_words(measured[1]) if measured else None)
    verdict = ", ".join(filter(None, [words, *problems])) or "n/a"
    return trial.model_copy(update={
        "speedup": measured[0] if measured else None,
        "speedup_range": measured[1] if measured else None,
        "loss_delta_pct": loss_delta, "accuracy_delta_pt": accuracy, "whole_run_s": whole_run,
        "counts": timed and not problems, "verdict": verdict})



def whole_run_estimate(trial: Trial, rules: Rules) -> float | None:
    """How long the experiment as written would take this way, as its `mptrain run` process
    lasts: the one-off costs, to the end of its first step (start, data, model, tracing,
    compiling: `time_to_first_step_s`); every later step at the trial's median; its
    evaluations; its checkpoints at the trial's own save time (a trial saves one as it
    stops); the saved model (a trial saves it when the experiment does); and what the
    process spends outside mptrain's clock (the interpreter's start, the exit:
    `Rules.overhead_s`). Evaluations: the trial's own (tracing included), and each further
    batch of the experiment's validation and test sets at a third of a training step (a
    forward pass of the three a step does)."""
    s = trial.summary
    if not rules.experiment_steps or s is None or s.step_time is None or s.time_to_first_step_s is None:
        return None
    step_s = s.step_time.median_ms / 1e3
    estimate = s.time_to_first_step_s + (rules.experiment_steps - 1) * step_s
    if s.evaluation_s is not None and s.test_examples:
        evaluated = math.ceil(s.test_examples / s.batch_size)
        estimate += s.evaluation_s + max(0, rules.eval_batches - evaluated) * step_s / 3
    estimate += rules.checkpoints * (s.checkpoint_save_s or 0.0) + (s.model_save_s or 0.0)
    return estimate + rules.overhead_s


def choose(trials: list[Trial]) -> tuple[str, str]:
    """The fastest counted candidate that is faster than float32 beyond the noise: its
    speed-up's 95% interval (from the rounds run in turns) above 1, and by at least
    PRACTICAL_GAIN, a gain too small to be worth a change of precision otherwise. Among
    candidates within PRACTICAL_GAIN of the fastest, the simplest (the first listed). float32
    when none is."""
    faster = [t for t in trials if t.counts and t.candidate.name != "float32" and t.speedup_range
              and t.speedup_range[0] > 1.0 and t.speedup >= PRACTICAL_GAIN]
    if not faster and any("slower over the experiment" in t.verdict for t in trials):
        return "float32", ("a candidate was faster per step but not over the experiment's "
                           "length (its one-off costs outweigh the gain)")
    if not faster:
        counted16 = [t for t in trials if t.candidate.sixteen_bit and t.summary is not None]
        if counted16 and not any(t.counts for t in counted16):
            return "float32", "every 16-bit candidate failed the accuracy guard or diverged"
        return "float32", "no candidate was faster than float32 beyond the noise"
    fastest = max(t.speedup for t in faster)
    best = next(t for t in faster if t.speedup * PRACTICAL_GAIN >= fastest)
    low, high = best.speedup_range
    return best.candidate.name, (f"{best.speedup:.2f}x float32 (95% interval {low:.2f}-{high:.2f}x), "
                                 f"loss {best.loss_delta_pct:+.1f}% of float32's over the trial")
