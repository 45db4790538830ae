"""A variant: one way to run the experiment that compare and plan measure, from its name to its
verdict. compare's variants and plan's trials are the same thing with different axes: a
precision candidate always (`precision.candidates`), a loop and a strategy in compare, a batch
size in either; so one type carries them, and the engine and the judgement read one shape.
The verdict is data here; the rules that reach it are `verdicts.py`'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from mptrain.measure.to_target import ToTarget
from mptrain.precision.candidates import Candidate, candidate, cell_label, file_label
from mptrain.record import FrozenRecord, Record
from mptrain.runs.summary import RunSummary

SpeedWord = Literal["faster", "same speed", "slower", "inconclusive"]


class Speed(FrozenRecord):
    """A variant's speed-up over its baseline, with its 95% interval; or why there is none."""

    ratio: float | None = None  # the baseline's step time / this one's: above 1 is faster
    interval: tuple[float, float] | None = None
    paired: bool = False  # from rounds run in turns (else from the two runs' medians)
    word: SpeedWord | None = None
    unknown: str | None = None  # why there is no ratio


class Training(FrozenRecord):
    """How a variant's loss kept up with float32's over the steps both ran."""

    share: float | None  # of float32's loss progress it made (None: the loss barely moved)
    shortfall: float  # its loss minus float32's, over the second half of the common steps
    allowance: float  # the largest shortfall the rule allows
    behind: bool


class QualityDelta(FrozenRecord):
    """A variant's test quality against the baseline's (`verdicts.quality_against`)."""

    label: str  # what the figure is: accuracy, MAE, AUC, mean IoU
    delta: float  # its value minus the baseline's (a proportion: in points)
    noise: float | None = None  # a proportion: what the test set's size cannot resolve (points)
    relative_pct: float | None = None  # any other figure: the change, % of the baseline's
    proportion: bool = False
    higher_is_better: bool = True
    worse: bool = False  # beyond the noise or the tolerance, in the worse direction

    def shown(self) -> str:
        """The change as a table shows it: +0.12 pt, or -3.1%."""
        if self.proportion:
            return f"{self.delta:+.2f} pt"
        return f"{self.relative_pct:+.1f}%" if self.relative_pct is not None else f"{self.delta:+.3g}"

    def word(self) -> str:
        """same accuracy, accuracy within noise, accuracy lower/higher; same MAE, MAE
        better/worse (-3.1%): judged on the rounded figure the table shows."""
        if self.proportion:
            shown = round(self.delta, 2)
            if shown == 0:
                return f"same {self.label}"
            if self.noise is not None and abs(self.delta) <= self.noise:
                return f"{self.label} within noise"
            return f"{self.label} lower" if shown < 0 else f"{self.label} higher"
        if self.relative_pct is not None and abs(self.relative_pct) < SAME_QUALITY_PCT:
            return f"same {self.label}"
        better = (self.delta > 0) == self.higher_is_better
        return f"{self.label} {'better' if better else 'worse'} ({self.shown()})"


SAME_QUALITY_PCT = 1.0  # a figure that is not a proportion, within 1% of the baseline's: the same


class Verdict(FrozenRecord):
    """What a variant is worth against the baseline, as data."""

    baseline: bool = False
    speed: Speed = Speed()
    control: str | None = None  # the row its speed is also read against (float32+xla for a row with XLA)
    against_control: Speed | None = None  # its speed-up over that control: the precision's own effect
    slower_over_run: bool = False  # faster per step, but not over the experiment (plan)
    whole_run_s: float | None = None  # the experiment as written, estimated (plan: `whole_run`)
    to_target: ToTarget | None = None  # its way to float32's loss over the examples seen
    memory_ratio: float | None = None  # its training memory peak / the baseline's
    training: Training | None = None
    quality: QualityDelta | None = None  # its test quality against the baseline's
    refused: list[str] = []  # why it cannot be picked: diverged, behind, failed, too slow...
    input_bound: bool = False  # its step is no slower than the input pipeline alone
    stopped_early: str | None = None  # why it stopped before its planned end (a budget, the race)
    # nothing judges its quality nor its progress (a GAN's losses: `train.monitor` names a figure)
    unjudged: bool = False

    @property
    def eligible(self) -> bool:
        """It can be picked: timed, not the baseline, nothing refused (trained as well)."""
        return self.speed.word is not None and not self.refused and not self.baseline

    def precision_alone(self) -> str | None:
        """The precision's own effect against its control (float32+xla beside a row with
        XLA), said below a table: "precision alone 0.87x float32-xla-fit's (slower)"."""
        alone = self.against_control
        if alone is None:
            return None
        if alone.ratio is None:
            return f"against {self.control}: {alone.unknown}"
        return f"precision alone {alone.ratio:.2f}x {self.control}'s ({Verdict(speed=alone).words(False)})"

    @property
    def faster(self) -> bool:
        return self.speed.word == "faster" and not self.slower_over_run and not self.refused

    @model_validator(mode="before")
    @classmethod
    def _older_records(cls, data):
        """compare.json and plan.json before objectives (2026-12-03) kept an accuracy delta in
        points and its noise: the same judgement, of accuracy."""
        if not isinstance(data, dict) or "accuracy_delta_pt" not in data:
            return data
        data = dict(data)
        delta, noise = data.pop("accuracy_delta_pt"), data.pop("accuracy_noise_pt", None)
        if delta is not None:
            data["quality"] = {"label": "accuracy", "delta": delta, "noise": noise,
                               "proportion": True}
        return data

    def words(self, quality: bool = True) -> str:
        """The verdict in a few words, at most two lines of a table's verdict column at 80
        columns; the rest (a stop's reason, the precision's own effect against a control) is
        the table's notes', every word the glossary's (docs/glossary.md)."""
        if self.baseline:
            parts = ["baseline"]
        elif self.speed.word == "inconclusive":
            low, high = self.speed.interval
            parts = [f"inconclusive ({low:.2f}-{high:.2f}x)"]
        elif self.speed.word is not None:
            parts = [self.speed.word + (", but slower over the run" if self.slower_over_run else "")]
        else:
            parts = [f"not timed: {self.speed.unknown}"] if self.speed.unknown else []
        if self.training is not None and self.training.behind:
            made = (f"{self.training.share:.0%}" if self.training.share is not None
                    else f"{self.training.shortfall:+.3g}")
            parts.append(f"loss behind ({made})")
        if quality and not self.baseline and self.quality is not None:
            parts.append(self.quality.word())
        if self.unjudged:
            parts.append("quality not judged")
        parts += [reason for reason in self.refused if not reason.startswith("loss behind")]
        if self.input_bound:
            parts.append("input-bound")
        text = ", ".join(parts) or "n/a"
        # (how it stopped, in a word: the table's notes give its reason whole)
        stopped = self.stopped_early.split()[0].rstrip(":;,") if self.stopped_early else None
        return f"{text} ({stopped})" if stopped and not self.refused else text



class Variant(Record):
    """What a variant runs (its candidate; compare's loop and strategy, None: the
    experiment's; at another batch, the changes `config.batch_scaling` made), where its run is,
    what it measured (its summary, or why there is none; its median step in each round it ran
    in turns) and its verdict against the baseline."""

    label: str
    candidate: Candidate
    loop: str | None = None
    strategy: str | None = None
    batch: dict[str, object] = {}
    run_dir: str | None = None
    summary: RunSummary | None = None
    failed: str | None = None  # why there is no summary
    rounds: list[float | None] = []  # its median step (ms) in each round run in turns
    baseline_rounds: list[float | None] | None = None  # in pairs (memory): its baseline's rounds
    session: int = 1  # which session of turns it ran in (a resume starts another)
    overhead_s: float | None = None  # its process outside its own clock: interpreter start, exit
    verdict: Verdict = Verdict()

    @model_validator(mode="before")
    @classmethod
    def _older_records(cls, data):
        """compare.json before 2026-12-03 named a row's candidate `policy`, and both records
        kept the memory ratio and the whole-run estimate beside the verdict (they are the
        verdict's now, and a resume judges every row again)."""
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if k not in ("memory_ratio", "whole_run_s")}
        if "policy" in data:
            name = data.pop("policy")
            data["candidate"] = candidate(name) if name != "?" else Candidate(name=name, policy=name)
        return data

    @property
    def settings(self) -> dict[str, object]:
        """The variant in ordinary experiment keys (`config.variant` applies them)."""
        axes = {"train.loop": self.loop, "distribute.strategy": self.strategy}
        return {**self.candidate.settings, **{k: v for k, v in axes.items() if v is not None},
                **self.batch}

    @property
    def batch_size(self) -> int | None:
        """Its batch when another than the experiment's, else None."""
        return self.batch.get("train.batch_size")

    @property
    def speedup(self) -> float | None:
        return self.verdict.speed.ratio

    @property
    def speedup_range(self) -> tuple[float, float] | None:
        return self.verdict.speed.interval


def compare_label(name: str, loop: str, strategy: str = "none", batch_size: int | None = None) -> str:
    """A compare variant's label, which names its folder and run: CANDIDATE-LOOP[-STRATEGY][@bN]."""
    label = f"{file_label(name)}-{loop}" + ("" if strategy == "none" else f"-{strategy}")
    return cell_label(label, batch_size)
