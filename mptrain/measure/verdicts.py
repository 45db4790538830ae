"""What a variant is worth against its baseline: is it faster, did it train as well, is it as
accurate? One judgement (`judge`; every row of a study: `judge_rows`) for compare's rows,
plan's trials and `runs --compare`, kept pure (numbers in, a typed `Verdict` out) so it is
tested on recorded numbers and says the same thing everywhere. The words a table shows are
made from the verdict (`Verdict.words`), and every decision (plan's pick) reads the verdict's
fields, never its words.

Speed. A shared machine drifts, so a ratio of two medians can mislead. Variants run in turns
(`engine`) are compared round by round: each round's ratio is the baseline's median step in
that round over the variant's, so a drift between rounds moves both sides alike; the speed-up
is the median of the rounds' ratios, and its 95% interval the distribution-free interval of a
median (order statistics of a Binomial(n, 1/2); with fewer than 6 rounds, the whole range).
Fewer than `MIN_ROUNDS` paired rounds is no measurement, and the verdict says how many steps
would give enough. Runs that did not take turns together (`runs --compare` of runs made at
different times, a variant resumed after its baseline finished) are compared on their own
medians, each with its uncertainty (1.25 sigma / sqrt(n), sigma from the p10-p90 spread). A
variant is faster or slower only when the whole interval is on one side of 1, and of the
noise floor when one was measured (an interval across 1 is the same speed when narrow, and
inconclusive, with its interval, when not): plan runs float32 twice in the same turns (an A/A test),
and the twin's own "speed-up" interval is what the machine's noise alone produces.

Training. Variants start from the same weights and see the same batches, so their losses
compare step by step. A tolerance relative to the final loss means nothing once a model nears
zero loss (memorising its data: 0.0444 against float32's 0.0325 is "+37%" after both fell
from 3.5), so a variant is held to float32's loss *progress* over the steps both ran: its
shortfall (its loss over the second half, minus float32's) may be at most the tolerance times
float32's progress from the first step's loss, or times float32's loss itself when the loss
barely moved (where a share of progress says nothing). The allowance is widened to twice
float32's own run-to-run difference when its A/A twin measured one: a difference float32 has
with itself cannot count against a candidate.

Quality. Each objective is judged by its own test figure (`objective.kinds.Quality`: accuracy,
AUC, mean IoU, MAE). A test set of n examples measures an accuracy to about
±1.96·sqrt(p(1-p)/n): on 41 examples one example (2.4 points) is noise, so two accuracies
differ only outside the Wilson 95% interval of the variant's at the test set's size. Other
figures have no such model: a relative change within 1% is the same, and one beyond the
tolerance in the direction that is worse for the figure (an MAE up, an AUC down) is worse.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple

from mptrain.measure.to_target import ToTarget, to_target
from mptrain.measure.variant import QualityDelta, Speed, SpeedWord, Training, Variant, Verdict
from mptrain.measure.whole_run import RunLength, in_batches_of, whole_run_estimate
from mptrain.runs.summary import MIN_TIMED_STEPS, QualityFigure, RunSummary
from mptrain.training.records import CUT_SHORT, STOPPED_EARLY

Z95 = 1.96
MIN_ROUNDS = 3  # fewer paired rounds are no measurement of a ratio
TWIN_FACTOR = 2.0  # a candidate's loss may trail float32's by twice float32's own A/A difference
INPUT_BOUND_MARGIN = 1.2  # a step within this of the input pipeline's time waits for data
DEFAULT_TOLERANCE_PCT = 3.0
TWIN = "float32-twin"  # float32 run again in the same turns: the A/A test of the machine's noise
SAME_SPEED = 1.05  # an interval within 1/1.05-1.05x is the same speed; a wider one over 1 is inconclusive

@dataclass(frozen=True)
class Rules:
    """How a variant is judged: the loss tolerance (% of float32's progress), whether its
    test accuracy counts against it, the steps a turn (to say how many would give enough
    rounds), the input pipeline's own time a batch (None: not measured), and the experiment's
    length when a trial stands for it (None: a compare's rows are whole runs)."""

    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    quality_counts: bool = False
    turn_steps: int = 0
    input_ms: float | None = None
    length: RunLength | None = None  # the experiment as written (plan), for whole-run estimates


class Steps(NamedTuple):
    """The step records training is judged on: the baseline's, the variant's, and float32's
    A/A twin's when one ran."""

    base: list
    variant: list
    twin: list | None = None


def control_of(row: Variant, rows: list[Variant], base: Variant | None) -> Variant | None:
    """The control a row's speed-up is also read against: for a 16-bit row that runs XLA or
    another math library than the baseline, float32 with that XLA and library
    (`Candidate.control`: float32+xla, float32+onednn) of the same loop, strategy and
    batch, so neither axis's own gain is credited to the precision; None for any other row."""
    wanted = row.candidate.control.name
    if base is None or not row.candidate.sixteen_bit or wanted == base.candidate.control.name:
        return None
    axes = (row.loop, row.strategy, row.batch_size)
    return next((r for r in rows if r.candidate.name == wanted
                 and (r.loop, r.strategy, r.batch_size) == axes), None)


def judge(row: Variant, base: Variant | None, steps: Steps | None = None,
          rules: Rules = Rules(), floor: tuple[float, float] | None = None,
          control: Variant | None = None) -> Verdict:
    """The variant against the baseline, complete: speed (`speed`), training
    (`training_against`, on the runs' step records; at another batch, the time to target),
    test accuracy, training memory, the whole-run estimate, and what refuses it. `floor`:
    the speed-up interval the machine's noise alone produced (an A/A twin's), or None;
    `control`: the row its speed-up is also read against (`control_of`)."""
    s = row.summary
    if s is None:
        return Verdict(refused=[f"failed ({row.failed})" if row.failed else "not run"])
    is_base = base is not None and row.label == base.label
    b = base.summary if base is not None else None
    refused = _stopped(s)
    pace = (Speed() if is_base or b is None or s.status == "diverged" else
            speed(row, base, rules.turn_steps, floor))
    training = target = None
    if steps is not None and s.status != "diverged":
        # a step of the model's own that reports no loss (a GAN's d_loss and g_loss): its sum
        # says whether a step diverged, not how far training got
        training, target, said = _losses(steps, rules, is_base, s.batch_size != b.batch_size,
                                         1.0 if is_base else pace.ratio, s.step_loss == "loss")
        refused += said
    quality = memory = None
    comparable = b is not None and "diverged" not in (s.status, b.status)
    if comparable:  # the baseline's own ratio is 1, or None when the allocator kept no figure
        mine, theirs = s.memory.training_peak_bytes, b.memory.training_peak_bytes
        memory = mine / theirs if mine is not None and theirs else None
    if comparable and not is_base and trained_alike(s, b):
        quality = quality_against(quality_figure(s), quality_figure(b), s.test_examples,
                                  rules.tolerance_pct)
        if rules.quality_counts and quality is not None and quality.worse:
            refused.append(f"{quality.label} {quality.shown()}")
    whole = base_whole = None
    if rules.length is not None and b is not None:
        whole = whole_run_estimate(s, in_batches_of(rules.length, b.batch_size, s.batch_size))
        base_whole = whole_run_estimate(b, rules.length)
    against = None
    if control is not None and control.summary is not None and s.status != "diverged":
        against = speed(row, control, rules.turn_steps, floor)
    return Verdict(
        baseline=is_base, speed=pace, whole_run_s=whole, to_target=target, training=training,
        control=control.label if against is not None else None, against_control=against,
        slower_over_run=(pace.word == "faster" and whole is not None and base_whole is not None
                         and whole > base_whole),
        quality=quality, memory_ratio=memory,
        unjudged=not is_base and quality_figure(s) is None and s.step_loss != "loss",
        refused=refused, input_bound=input_bound(s.step_time.median_ms if s.step_time else None,
                                                 rules.input_ms),
        stopped_early=s.stop_reason if s.stopped_by in STOPPED_EARLY else None)


def judge_rows(rows: list[Variant], steps: dict[str, list], rules: Rules,
               baseline: str = "float32") -> list[Variant]:
    """Every row judged against the baseline's (`judge`): compare's variants, plan's trials.
    Their losses are judged when their step records are given (`steps`: label → step
    records; none for runs that need not have started from the same weights), and float32's
    A/A twin (`TWIN`, plan's), when it ran, is the noise floor of speed-ups and of loss
    differences."""
    base = next((r for r in rows if r.label == baseline), None)
    twin = next((r for r in rows if r.label == TWIN), None)
    floor = None
    if base is not None and twin is not None and twin.summary is not None and base.summary is not None:
        floor = speed(twin, base, rules.turn_steps).interval
    base_steps, twin_steps = steps.get(baseline), steps.get(TWIN)
    judged = []
    for row in rows:
        losses = (Steps(base_steps, steps[row.label], twin_steps)
                  if base_steps and row.label in steps and row.label != TWIN else None)
        verdict = judge(row, base, losses, rules, None if row.label == TWIN else floor,
                        control_of(row, rows, base))
        judged.append(row.model_copy(update={"verdict": verdict}))
    return judged


def trained_alike(s: RunSummary, b: RunSummary) -> bool:
    """Whether two runs' test figures can be compared: neither cut short by a plan
    (`CUT_SHORT`: the race, the budget), or both cut after the same examples. A trial the race
    dropped after three rounds, beside a float32 that ran ten, is less trained, not worse:
    its lower accuracy is no verdict on its precision."""
    if s.stopped_by not in CUT_SHORT and b.stopped_by not in CUT_SHORT:
        return True
    return s.steps_run * s.batch_size == b.steps_run * b.batch_size


def _stopped(s: RunSummary) -> list[str]:
    """What the way its run ended refuses."""
    if s.status == "diverged":
        return ["diverged (NaN/inf loss)"]
    if s.stopped_by == "max_step_seconds":
        return [s.stop_reason or "too slow"]
    if s.status == "interrupted":
        return ["interrupted: not finished"]
    return []


def _losses(steps: Steps, rules: Rules, is_base: bool, other_batch: bool, speedup: float | None,
            progress: bool = True) -> tuple[Training | None, ToTarget | None, list[str]]:
    """Its losses against the baseline's: step by step on the same batches (`training_against`),
    over the examples seen at another batch; its time to target (`to_target`); and what they
    refuse. `progress`: the losses are a training loss (else only their finiteness is read)."""
    refused, training = [], None
    if not is_base:
        if unexplained := sum(1 for r in steps.variant if not math.isfinite(r.loss) and not r.skipped):
            refused.append(f"{unexplained} NaN/inf loss(es) no loss scaler explains")
        if progress and not other_batch:
            training = training_against([r.loss for r in steps.base], [r.loss for r in steps.variant],
                                        rules.tolerance_pct,
                                        [r.loss for r in steps.twin] if steps.twin else None)
        if training is not None and training.behind:
            refused.append("loss behind float32's")
    target = (to_target(steps.base, steps.variant, _allowance(steps, rules.tolerance_pct), speedup)
              if steps.base and progress else None)
    if other_batch and target is not None and not target.reached:
        refused.append(f"did not reach float32's loss in its {target.seen:,} examples")
    return training, target, refused


def _allowance(steps: Steps, tolerance_pct: float) -> float:
    """What the loss tolerance allows float32's own curve (`training_against` of it with
    itself): the margin a time to target gives its target."""
    losses = [r.loss for r in steps.base]
    training = training_against(losses, losses, tolerance_pct,
                                [r.loss for r in steps.twin] if steps.twin else None)
    return training.allowance if training is not None else 0.0


# --- speed --------------------------------------------------------------------------------


def speed(row: Variant, base: Variant, turn_steps: int = 0,
          floor: tuple[float, float] | None = None) -> Speed:
    """The one rule for a speed-up: from the rounds both ran in turns (in the same session),
    else from the two runs' own medians; with the reason when there is none. Per example: at
    another batch size a step does more work, so its step time is weighed by its batch."""
    per_example = row.summary.batch_size / base.summary.batch_size  # 1 at the same batch
    together = row.session == base.session and row.rounds and (
        row.baseline_rounds is not None or base.rounds)
    if together:
        base_rounds = row.baseline_rounds if row.baseline_rounds is not None else base.rounds
        ratios = sorted(r for r in round_ratios(base_rounds, row.rounds, per_example) if r is not None)
        if len(ratios) < MIN_ROUNDS:
            return Speed(unknown=f"{len(ratios)} round(s) in turns, {MIN_ROUNDS} needed"
                                 f"{_what_gives_rounds(row.summary, turn_steps)}")
        return worded(statistics.median(ratios), median_interval(ratios), True, floor)
    a, b = base.summary.step_time, row.summary.step_time
    if a is None or b is None or not a.enough or not b.enough:
        timed = min(t.timed_steps if t else 0 for t in (a, b))
        return Speed(unknown=f"too few steps timed ({timed}, {MIN_TIMED_STEPS} needed)")
    ratio = per_example * a.median_ms / b.median_ms
    margin = math.exp(Z95 * math.hypot(_relative_error(a), _relative_error(b)))
    return worded(ratio, (ratio / margin, ratio * margin), False, floor)


def _what_gives_rounds(s: RunSummary, turn_steps: int) -> str:
    """What gives MIN_ROUNDS rounds, as the option that does it: a run its step limit ended
    (plan's trials, `compare --steps`), more steps; one its epochs ended, more epochs (where
    `--steps 16` changed nothing: it only caps the steps the epochs give). Nothing for one
    stopped before its end by anything else (a plan's race or budget, too slow, a signal):
    no option gives it more."""
    if not turn_steps or s.stopped_by not in (None, "max_steps"):
        return ""
    steps = 1 + MIN_ROUNDS * turn_steps
    if s.stopped_by == "max_steps" or not s.epochs_run:
        return f": --steps {steps} gives {MIN_ROUNDS}"
    return f": --epochs {math.ceil(steps * s.epochs_run / s.steps_run)} gives {MIN_ROUNDS}"


def round_ratios(base_rounds: list[float | None], rounds: list[float | None],
                 per_example: float = 1.0) -> list[float | None]:
    """The speed-up in each round both ran in turns (the baseline's median step over this
    one's, per example: `per_example` is this one's batch over the baseline's), None in a
    round either has no time for: rounds stay aligned, so two rows' ratios pair by round."""
    return [per_example * b / v if b and v else None for b, v in zip(base_rounds, rounds, strict=False)]


def worded(ratio: float, interval: tuple[float, float], paired: bool,
            floor: tuple[float, float] | None) -> Speed:
    """Faster or slower only when the whole interval is on one side of 1, and of the noise
    floor's interval when one was measured; the same speed only when it lies within
    `SAME_SPEED` of 1 (or within the noise floor); else inconclusive: an interval of
    0.50-1.50x says nothing either way, and "same speed" would claim it did."""
    low, high = interval
    floor_low, floor_high = floor or (1.0, 1.0)
    word: SpeedWord = (
        "faster" if low > max(1.0, floor_high) else
        "slower" if high < min(1.0, floor_low) else
        "same speed" if low >= min(1 / SAME_SPEED, floor_low) and high <= max(SAME_SPEED, floor_high)
        else "inconclusive")
    return Speed(ratio=ratio, interval=interval, paired=paired, word=word)


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


def _relative_error(times) -> float:
    """The standard error of a median step, relative to it: 1.2533 sigma / sqrt(n), with
    sigma = (p90 - p10) / 2.563 (as for a normal distribution)."""
    sigma = (times.p90_ms - times.p10_ms) / 2.563
    return 1.2533 * sigma / math.sqrt(max(times.timed_steps, 1)) / times.median_ms


def input_bound(step_ms: float | None, input_ms: float | None) -> bool:
    """A step about as long as the input pipeline alone takes to deliver its batch waits for
    data: no precision can make it faster than the pipeline."""
    return step_ms is not None and input_ms is not None and step_ms <= INPUT_BOUND_MARGIN * input_ms


INPUT_BOUND_NOTE = ("input-bound: the step takes no longer than the input pipeline alone needs "
                    "for a batch, so no precision makes it faster (data.cache: memory, or fewer "
                    "decode steps, would help)")


# --- training -----------------------------------------------------------------------------


def training_against(base_losses: list[float], losses: list[float], tolerance_pct: float,
                     twin_losses: list[float] | None = None) -> Training | None:
    """The variant's loss against float32's over the steps both ran (see the module doc);
    None when there are too few finite losses to say. `twin_losses`: float32's A/A twin's."""
    both = min(len(base_losses), len(losses))
    base_loss, loss = trial_loss(base_losses[:both]), trial_loss(losses[:both])
    first = next((x for x in base_losses if math.isfinite(x)), None)
    if base_loss is None or loss is None or first is None:
        return None
    progress = first - base_loss
    tolerance = tolerance_pct / 100
    moved = progress > abs(base_loss)  # the loss fell by more than what is left of it
    allowance = tolerance * (progress if moved else abs(base_loss))
    if twin_losses is not None and (twin := trial_loss(twin_losses[:both])) is not None:
        allowance = max(allowance, TWIN_FACTOR * abs(twin - base_loss))
    shortfall = loss - base_loss
    share = (first - loss) / progress if moved else None
    return Training(share=share, shortfall=shortfall, allowance=allowance,
                    behind=shortfall > allowance)


def trial_loss(losses: list[float]) -> float | None:
    """The mean loss over the second half of the steps (the same batches in every variant),
    non-finite ones (skipped under loss scaling) left out."""
    kept = [x for x in losses[len(losses) // 2:] if math.isfinite(x)]
    return sum(kept) / len(kept) if kept else None


# --- quality ------------------------------------------------------------------------------


def quality_figure(s: RunSummary) -> QualityFigure | None:
    """The test figure a run is judged by; a summary from before objectives (2026-12-03)
    has only its accuracy."""
    if s.quality is not None:
        return s.quality
    if s.test_accuracy is None:
        return None
    return QualityFigure(metric="accuracy", label="accuracy", value=s.test_accuracy,
                         higher_is_better=True, proportion=True)


def quality_against(mine: QualityFigure | None, theirs: QualityFigure | None, examples: int | None,
                    tolerance_pct: float) -> QualityDelta | None:
    """A variant's quality against the baseline's, judged in its own terms: a proportion
    (accuracy) in points, against the Wilson interval its test set's size gives (see the
    module doc); any other figure (MAE, AUC, IoU) as a relative change, "worse" beyond the
    tolerance in the direction that is worse for it."""
    if mine is None or theirs is None or mine.value is None or theirs.value is None \
            or mine.metric != theirs.metric:
        return None
    if mine.proportion:
        delta = 100.0 * (mine.value - theirs.value)
        noise = accuracy_noise_pt(mine.value, examples)
        worse = delta < -max(tolerance_pct, noise or 0.0)
        return QualityDelta(label=mine.label, delta=delta, noise=noise, proportion=True,
                            higher_is_better=True, worse=worse)
    delta = mine.value - theirs.value
    relative = 100.0 * delta / abs(theirs.value) if theirs.value else None
    against = -1 if mine.higher_is_better else 1  # the sign of a change for the worse
    worse = relative is not None and relative * against > tolerance_pct
    return QualityDelta(label=mine.label, delta=delta, relative_pct=relative, proportion=False,
                        higher_is_better=mine.higher_is_better, worse=worse)


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
