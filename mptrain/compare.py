"""`mptrain compare`: one experiment under several policies (and loops), side by side.

Every variant runs in its own process (`python -m mptrain run ...`). Keras' global dtype
policy, TensorFlow's traced graphs, the XLA cache, the oneDNN primitive cache and the process
peak memory are all per process: running variants in one process would let one variant's
state leak into the next and make the memory column meaningless.

All variants start from the same weights: the experiment's model is built once under float32
(the guide's `initial_weights = model.get_weights()`), saved, and loaded by every variant;
the input pipeline's order depends only on the seed, so they also see the same batches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from mptrain.config import POLICIES, ExperimentConfig
from mptrain.errors import ConfigError, DataError
from mptrain.run_folder import to_json
from mptrain.summary import MIN_TIMED_STEPS, RunSummary

LOOPS = ("fit", "custom")
DEFAULT_EXPERIMENT = "mnist_mixed"  # the guide's experiment
OFFLINE_EXPERIMENTS = ("synthetic", "fashion_mnist_mixed")
ACCURACY_TOLERANCE_PT = 0.5


@dataclass(frozen=True)
class Variant:
    policy: str
    loop: str

    @property
    def label(self) -> str:
        return f"{self.policy}-{self.loop}"


def parse_choices(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    """`a,b` → ["a", "b"]; empty lists, unknown names and duplicates are errors."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ConfigError(f"{option} {text!r}: give a comma-separated list, e.g. {','.join(allowed[:2])}")
    unknown = [item for item in items if item not in allowed]
    if unknown:
        raise ConfigError(f"{option}: unknown {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}")
    duplicates = sorted({item for item in items if items.count(item) > 1})
    if duplicates:
        raise ConfigError(f"{option}: {', '.join(duplicates)} listed more than once")
    return items


def plan_variants(policies: str, loops: str | None, config: ExperimentConfig) -> list[Variant]:
    policy_list = parse_choices(policies, POLICIES, "--policies")
    loop_list = parse_choices(loops, LOOPS, "--loops") if loops else [config.train.loop]
    return [Variant(p, loop) for loop in loop_list for p in policy_list]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompareRow(_Record):
    """One variant of compare.json: its run summary (null when it failed) and what it is
    worth against the baseline, computed here from the measured numbers."""

    variant: str
    policy: str
    loop: str
    summary: RunSummary | None
    failed: str | None = None  # why there is no summary
    speedup: float | None = None  # baseline median step time / this median
    speedup_range: tuple[float, float] | None = None  # from both sides' p10-p90 spread
    memory_ratio: float | None = None  # training memory / the baseline's
    accuracy_delta_pt: float | None = None
    test_loss_delta: float | None = None
    verdict: str


class CompareRecord(_Record):
    """compare.json."""

    experiment: str
    folder: str
    baseline_policy: str
    variants: list[CompareRow]
    plot: str | None = None


@dataclass(frozen=True)
class CompareResult:
    record: CompareRecord
    folder: Path


def preflight_notes(config: ExperimentConfig, variants: list[Variant]) -> dict[str, str]:
    """Variant label → why it is known to be slow on this machine, said before anything runs
    (TensorFlow is imported by now)."""
    import tensorflow as tf

    from mptrain.hardware import probe
    from mptrain.policy import choose_policy, speed_warning

    machine = probe(tf, check_xla=False)
    notes = {}
    for v in variants:
        choice = choose_policy(v.policy, config.train.jit_compile, machine,
                               config.train.xla_optimizer_update)
        warning = speed_warning(choice, machine)
        if warning:
            notes[v.label] = warning
    return notes


def run_compare(
    config: ExperimentConfig,
    variants: list[Variant],
    *,
    verbose: bool = False,
    on_notes: Callable[[dict[str, str]], None] | None = None,
    on_variant: Callable[[int, int, Variant], None] | None = None,
) -> CompareResult:
    """Run every variant in a fresh process from shared initial weights; write compare.json
    and compare.png into OUTPUT_DIR/compare-<name>-<timestamp>/ and return the record."""
    from mptrain.runner import save_initial_weights

    # Everything that can fail on bad input (data not found, model not buildable) happens
    # before the compare folder exists, so a failed compare leaves nothing behind.
    with tempfile.TemporaryDirectory() as scratch:
        staged = Path(scratch) / "initial_weights.npz"
        save_initial_weights(config, staged, verbose=verbose)
        if on_notes is not None:
            on_notes(preflight_notes(config, variants))
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = config.output.dir / f"compare-{config.name}-{stamp}"
        folder.mkdir(parents=True, exist_ok=False)
        weights = folder / "initial_weights.npz"
        shutil.move(staged, weights)
    experiment = folder / "experiment.yaml"
    experiment.write_text(yaml.safe_dump(config.to_yaml_dict(), sort_keys=False))

    outcomes = []
    for index, variant in enumerate(variants, start=1):
        if on_variant:
            on_variant(index, len(variants), variant)
        outcomes.append(_run_variant(experiment, weights, folder, config.name, variant, verbose))
    record = build_record(config.name, folder, variants, outcomes)
    if any(row.summary for row in record.variants):
        from mptrain.report.plot import plot_compare

        record.plot = str(folder / "compare.png")
        plot_compare(record, folder / "compare.png")
    (folder / "compare.json").write_text(to_json(record.model_dump(), indent=2) + "\n")
    return CompareResult(record, folder)


def explain_missing_default(error: DataError) -> DataError:
    """`mptrain compare` without CONFIG runs the guide's MNIST experiment; when MNIST is not
    here, say that and name the experiments that do run offline."""
    offline = ", ".join(f"`mptrain compare {name}`" for name in OFFLINE_EXPERIMENTS)
    return DataError(f"{error}\nNo CONFIG was given, so compare ran the guide's experiment "
                     f"({DEFAULT_EXPERIMENT}), which needs MNIST. Experiments that run here "
                     f"without a download: {offline}.")


def _run_variant(experiment: Path, weights: Path, folder: Path, name: str, variant: Variant,
                 verbose: bool) -> RunSummary | str:
    """The variant's summary, or why it has none."""
    command = [
        sys.executable, "-m", "mptrain", "run", str(experiment), "--json",
        "--set", f"name={name}-{variant.label}",
        "--set", f"policy={variant.policy}",
        "--set", f"train.loop={variant.loop}",
        "--initial-weights", str(weights),
        "--output-dir", str(folder),
    ]
    if verbose:
        command.append("--verbose")
    # stderr passes through: the variant's live progress shows on the user's terminal.
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    if done.returncode != 0:
        return f"exit code {done.returncode}"
    try:
        return RunSummary.model_validate(json.loads(done.stdout))
    except (json.JSONDecodeError, ValidationError):
        return "printed no run summary"


def build_record(name: str, folder: Path, variants: list[Variant],
                 outcomes: list[RunSummary | str]) -> CompareRecord:
    """compare.json: one row per variant, with ratios to the baseline: the float32 variant of
    the same loop, or the first policy listed when float32 is not compared."""
    baseline_policy = "float32" if any(v.policy == "float32" for v in variants) else variants[0].policy
    summaries = {v.label: o for v, o in zip(variants, outcomes, strict=True) if isinstance(o, RunSummary)}
    rows = []
    for variant, outcome in zip(variants, outcomes, strict=True):
        base = summaries.get(Variant(baseline_policy, variant.loop).label)
        is_baseline = variant.policy == baseline_policy
        if isinstance(outcome, str):
            rows.append(CompareRow(variant=variant.label, policy=variant.policy, loop=variant.loop,
                                   summary=None, failed=outcome, verdict=f"failed ({outcome})"))
        else:
            rows.append(_row(variant, outcome, base, is_baseline))
    return CompareRecord(experiment=name, folder=str(folder), baseline_policy=baseline_policy,
                         variants=rows)


def _row(variant: Variant, s: RunSummary, base: RunSummary | None, is_baseline: bool) -> CompareRow:
    speedup = speedup_range = None
    timed = s.step_time is not None and s.step_time.enough
    if base is not None and timed and base.step_time is not None and base.step_time.enough:
        speedup = base.step_time.median_ms / s.step_time.median_ms
        speedup_range = (base.step_time.p10_ms / s.step_time.p90_ms,
                         base.step_time.p90_ms / s.step_time.p10_ms)
    accuracy_delta = loss_delta = memory_ratio = None
    if base is not None and "diverged" not in (s.status, base.status):
        accuracy_delta = _difference(s.test_accuracy, base.test_accuracy, scale=100.0)
        loss_delta = _difference(s.test_loss, base.test_loss)
        memory_ratio = _ratio(s.memory.training_peak_bytes, base.memory.training_peak_bytes)
    return CompareRow(
        variant=variant.label, policy=variant.policy, loop=variant.loop, summary=s,
        speedup=speedup, speedup_range=speedup_range, memory_ratio=memory_ratio,
        accuracy_delta_pt=accuracy_delta, test_loss_delta=loss_delta,
        verdict=verdict(s, speedup_range, accuracy_delta, is_baseline),
    )


def _difference(a: float | None, b: float | None, scale: float = 1.0) -> float | None:
    return scale * (a - b) if a is not None and b is not None else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def verdict(s: RunSummary, speedup_range: tuple[float, float] | None,
            accuracy_delta_pt: float | None, is_baseline: bool) -> str:
    """A reading of the numbers in words, beside them in the table (so it cannot contradict
    them): 'faster, accuracy within 0.5 pt'."""
    if s.status == "diverged":
        text = "diverged (NaN/inf loss)"
    elif s.step_time is None or not s.step_time.enough:
        timed = s.step_time.timed_steps if s.step_time else 0
        speed = f"not enough steps to time ({timed} timed, need {MIN_TIMED_STEPS})"
        text = speed if is_baseline else ", ".join(filter(None, [speed, _accuracy(accuracy_delta_pt)]))
    elif is_baseline:
        text = "baseline"
    else:
        text = ", ".join(filter(None, [_speed(speedup_range), _accuracy(accuracy_delta_pt)])) or "n/a"
    return f"{text} (stopped early)" if s.stop_reason else text


def _speed(speedup_range: tuple[float, float] | None) -> str | None:
    """Faster or slower only when the whole p10-p90 range of the ratio is on one side of 1."""
    if speedup_range is None:
        return None
    low, high = speedup_range
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "same speed within noise"


def _accuracy(delta_pt: float | None) -> str | None:
    """Judged on the rounded figure the table shows, so a -0.00 is 'same accuracy'."""
    if delta_pt is None:
        return None
    shown = round(delta_pt, 2)
    if shown == 0:
        return "same accuracy"
    if abs(shown) <= ACCURACY_TOLERANCE_PT:
        return f"accuracy within {ACCURACY_TOLERANCE_PT:g} pt"
    return "accuracy lower" if shown < 0 else "accuracy higher"
