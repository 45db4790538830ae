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
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from mptrain.config import POLICIES, ExperimentConfig
from mptrain.errors import ConfigError, DataError
from mptrain.run_folder import to_json, unique_folder, write_atomic
from mptrain.summary import MIN_TIMED_STEPS, RunSummary

LOOPS = ("fit", "custom")
STRATEGIES = ("none", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
DEFAULT_EXPERIMENT = "mnist_mixed"  # the guide's experiment
OFFLINE_EXPERIMENTS = ("synthetic", "fashion_mnist_mixed")
ACCURACY_TOLERANCE_PT = 0.5


@dataclass(frozen=True)
class Variant:
    policy: str
    loop: str
    strategy: str = "none"  # distribute.strategy

    @property
    def label(self) -> str:
        base = f"{self.policy}-{self.loop}"
        return base if self.strategy == "none" else f"{base}-{self.strategy}"


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


def plan_variants(policies: str, loops: str | None, config: ExperimentConfig,
                  strategies: str | None = None) -> list[Variant]:
    policy_list = parse_choices(policies, POLICIES, "--policies")
    loop_list = parse_choices(loops, LOOPS, "--loops") if loops else [config.train.loop]
    strategy_list = (parse_choices(strategies, STRATEGIES, "--strategies") if strategies
                     else [config.distribute.strategy])
    return [Variant(p, loop, s) for s in strategy_list for loop in loop_list for p in policy_list]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompareRow(_Record):
    """One variant of compare.json: its run summary (null when it failed) and what it is
    worth against the baseline, computed here from the measured numbers."""

    variant: str
    policy: str
    loop: str
    strategy: str = "none"
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
    status: Literal["finished", "interrupted"] = "finished"
    baseline_policy: str
    variants: list[CompareRow]
    plot: str | None = None


@dataclass(frozen=True)
class CompareResult:
    record: CompareRecord
    folder: Path
    signal: int | None = None  # the signal that interrupted the compare


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
        folder = unique_folder(config.output.dir, f"compare-{config.name}")
        shutil.move(staged, folder / "initial_weights.npz")
    write_atomic(folder / "experiment.yaml", yaml.safe_dump(config.to_yaml_dict(), sort_keys=False))
    return _run_variants(config.name, folder, variants, {}, verbose, on_variant)


def resume_compare(folder: Path, *, verbose: bool = False,
                   on_variant: Callable[[int, int, Variant], None] | None = None) -> CompareResult:
    """Finish an interrupted compare: variants that finished (or diverged) stay; an
    interrupted variant resumes from its checkpoint; the ones never run run now."""
    try:
        record = CompareRecord.model_validate_json((folder / "compare.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume {folder}: not a compare folder ({exc})") from None
    variants = [Variant(row.policy, row.loop, row.strategy) for row in record.variants]
    done = {row.variant: row.summary for row in record.variants
            if row.summary is not None and row.summary.status in ("finished", "diverged")}
    if len(done) == len(variants):
        raise ConfigError(f"--resume {folder}: every variant has finished; nothing to resume")
    interrupted = {row.variant: Path(row.summary.run_dir) for row in record.variants
                   if row.summary is not None and row.summary.status == "interrupted"}
    return _run_variants(record.experiment, folder, variants, done, verbose, on_variant, interrupted)


def _run_variants(name: str, folder: Path, variants: list[Variant], done: dict[str, RunSummary],
                  verbose: bool, on_variant, interrupted: dict[str, Path] | None = None) -> CompareResult:
    outcomes: list[RunSummary | str] = []
    with _ForwardSignals() as signals:
        for index, variant in enumerate(variants, start=1):
            if variant.label in done:
                outcomes.append(done[variant.label])
                continue
            if signals.received is not None:
                outcomes.append(NOT_RUN)
                continue
            if on_variant:
                on_variant(index, len(variants), variant)
            resume_dir = (interrupted or {}).get(variant.label)
            outcomes.append(_run_variant(folder, name, variant, verbose, signals, resume_dir))
    record = build_record(name, folder, variants, outcomes)
    if signals.received is not None:
        record.status = "interrupted"
    if any(row.summary for row in record.variants):
        from mptrain.report.plot import plot_compare

        record.plot = str(folder / "compare.png")
        plot_compare(record, folder / "compare.png")
    write_atomic(folder / "compare.json", to_json(record.model_dump(), indent=2) + "\n")
    return CompareResult(record, folder, signals.received)


class _ForwardSignals:
    """While variants run: SIGINT/SIGTERM are passed on to the running variant (which stops
    after its current step and saves a checkpoint), and no further variant starts. Variants
    run in their own session, so a terminal's Ctrl-C reaches them only through here: once
    per Ctrl-C (a second one abandons the variant, as it would a run)."""

    def __init__(self):
        self.received: int | None = None
        self.child: subprocess.Popen | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _ForwardSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        self.received = self.received or signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def _run_variant(folder: Path, name: str, variant: Variant, verbose: bool,
                 signals: _ForwardSignals, resume_dir: Path | None = None) -> RunSummary | str:
    """The variant's summary (finished, diverged or interrupted), or why it has none."""
    if resume_dir is not None:
        command = [sys.executable, "-m", "mptrain", "run", "--resume", str(resume_dir), "--json"]
    else:
        command = [
            sys.executable, "-m", "mptrain", "run", str(folder / "experiment.yaml"), "--json",
            "--set", f"name={name}-{variant.label}",
            "--set", f"policy={variant.policy}",
            "--set", f"train.loop={variant.loop}",
            "--set", f"distribute.strategy={variant.strategy}",
            "--initial-weights", str(folder / "initial_weights.npz"),
            "--output-dir", str(folder),
        ]
    if verbose:
        command.append("--verbose")
    # stderr passes through: the variant's live progress shows on the user's terminal.
    signals.child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                                     env=os.environ.copy(), start_new_session=True)
    stdout, _ = signals.child.communicate()
    code = signals.child.returncode
    signals.child = None
    try:
        return RunSummary.model_validate(json.loads(stdout))
    except (json.JSONDecodeError, ValidationError):
        return f"exit code {code}" if code else "printed no run summary"


def explain_missing_default(error: DataError) -> DataError:
    """`mptrain compare` without CONFIG runs the guide's MNIST experiment; when MNIST is not
    here, say that and name the experiments that do run offline."""
    offline = ", ".join(f"`mptrain compare {name}`" for name in OFFLINE_EXPERIMENTS)
    return DataError(f"{error}\nNo CONFIG was given, so compare ran the guide's experiment "
                     f"({DEFAULT_EXPERIMENT}), which needs MNIST. Experiments that run here "
                     f"without a download: {offline}.")


NOT_RUN = "not run: the compare was interrupted (mptrain compare --resume runs it)"


def build_record(name: str, folder: Path, variants: list[Variant],
                 outcomes: list[RunSummary | str]) -> CompareRecord:
    """compare.json: one row per variant, with ratios to the baseline: the float32 variant of
    the same loop, or the first policy listed when float32 is not compared."""
    baseline_policy = "float32" if any(v.policy == "float32" for v in variants) else variants[0].policy
    summaries = {v.label: o for v, o in zip(variants, outcomes, strict=True) if isinstance(o, RunSummary)}
    rows = []
    for variant, outcome in zip(variants, outcomes, strict=True):
        baseline = Variant(baseline_policy, variant.loop, variants[0].strategy)
        base = summaries.get(baseline.label)
        is_baseline = variant.label == baseline.label
        if isinstance(outcome, str):
            rows.append(CompareRow(variant=variant.label, policy=variant.policy, loop=variant.loop,
                                   strategy=variant.strategy, summary=None, failed=outcome,
                                   verdict=outcome if outcome == NOT_RUN else f"failed ({outcome})"))
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
        variant=variant.label, policy=variant.policy, loop=variant.loop, strategy=variant.strategy,
        summary=s,
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
    elif s.status == "interrupted":
        text = "interrupted: not finished"
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
