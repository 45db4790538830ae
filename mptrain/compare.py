"""`mptrain compare`: one experiment under several policies (and loops), side by side.

Every variant runs in its own process (`python -m mptrain run ...`). Keras' global dtype
policy, TensorFlow's traced graphs, the XLA cache, the oneDNN primitive cache and the process
peak memory are all per process: running variants in one process would let one variant's
state leak into the next and make the memory column meaningless.

All variants start from the same weights: the experiment's model is built once under float32
(the guide's `initial_weights = model.get_weights()`), saved, and loaded by every variant;
the seeded input pipeline gives them the same data order.
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
from typing import Any

import yaml

from mptrain.config import POLICIES, ExperimentConfig
from mptrain.errors import ConfigError, MptrainError
from mptrain.run_folder import to_json

LOOPS = ("fit", "custom")
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


@dataclass
class CompareResult:
    record: dict[str, Any]
    folder: Path


def run_compare(
    config: ExperimentConfig,
    variants: list[Variant],
    *,
    verbose: bool = False,
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
        warnings = _speed_warnings(config, variants)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = config.output.dir / f"compare-{config.name}-{stamp}"
        folder.mkdir(parents=True, exist_ok=False)
        weights = folder / "initial_weights.npz"
        shutil.move(staged, weights)
    experiment = folder / "experiment.yaml"
    experiment.write_text(yaml.safe_dump(config.to_yaml_dict(), sort_keys=False))

    summaries = []
    for index, variant in enumerate(variants, start=1):
        if on_variant:
            on_variant(index, len(variants), variant)
        summaries.append(_run_variant(experiment, weights, folder, config.name, variant, verbose))
    record = build_record(config.name, folder, variants, summaries, warnings)
    (folder / "compare.json").write_text(to_json(record, indent=2) + "\n")
    if any(s.get("run_dir") for s in record["variants"]):
        from mptrain.plot import plot_compare

        plot_compare(record, folder / "compare.png")
        record["plot"] = str(folder / "compare.png")
        (folder / "compare.json").write_text(to_json(record, indent=2) + "\n")
    return CompareResult(record, folder)


def _speed_warnings(config: ExperimentConfig, variants: list[Variant]) -> dict[str, str | None]:
    """Known-slow policies on this hardware (TensorFlow is already imported by now)."""
    import tensorflow as tf

    from mptrain.hardware import probe
    from mptrain.policy import choose_policy, speed_warning

    machine = probe(tf, check_xla=False)
    return {
        v.label: speed_warning(choose_policy(v.policy, config.train.jit_compile, machine), machine)
        for v in variants
    }


def _run_variant(experiment: Path, weights: Path, folder: Path, name: str, variant: Variant,
                 verbose: bool) -> dict[str, Any]:
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
        return {"failed": f"exit code {done.returncode}", "policy": variant.policy, "loop": variant.loop}
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise MptrainError(f"variant {variant.label} printed no JSON summary") from None


def build_record(name: str, folder: Path, variants: list[Variant], summaries: list[dict[str, Any]],
                 warnings: dict[str, str | None] | None = None) -> dict[str, Any]:
    """compare.json: one record per variant (its summary.json keys + ratios to the baseline).

    The baseline is the float32 variant of the same loop (or the first policy listed when
    float32 is not compared). Every ratio is computed here from the measured numbers.
    """
    by_label = dict(zip((v.label for v in variants), summaries, strict=True))
    baseline_policy = "float32" if any(v.policy == "float32" for v in variants) else variants[0].policy
    out = []
    for variant, summary in zip(variants, summaries, strict=True):
        base = by_label.get(Variant(baseline_policy, variant.loop).label, {})
        row = {"variant": variant.label, **summary, "warning": (warnings or {}).get(variant.label)}
        row.update(_ratios(row, base, is_baseline=variant.policy == baseline_policy))
        out.append(row)
    return {"experiment": name, "folder": str(folder), "baseline_policy": baseline_policy,
            "variants": out}


def _median(summary: dict[str, Any]) -> float | None:
    steps = summary.get("step_time_ms")
    return steps["median"] if steps else None


def _memory(summary: dict[str, Any]) -> float | None:
    """Device allocator peak where TensorFlow reports it, else the process peak RSS."""
    return summary.get("device_peak_memory_bytes") or summary.get("peak_memory_bytes")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ratios(row: dict[str, Any], base: dict[str, Any], is_baseline: bool) -> dict[str, Any]:
    if row.get("failed"):
        return {"speedup": None, "memory_ratio": None, "accuracy_delta_pt": None,
                "test_loss_delta": None, "verdict": f"failed ({row['failed']})"}
    speedup = _ratio(_median(base), _median(row))
    accuracy_delta = None
    if row.get("test_accuracy") is not None and base.get("test_accuracy") is not None:
        accuracy_delta = 100.0 * (row["test_accuracy"] - base["test_accuracy"])
    loss_delta = None
    if row.get("test_loss") is not None and base.get("test_loss") is not None:
        loss_delta = row["test_loss"] - base["test_loss"]
    ratios = {
        "speedup": speedup,
        "memory_ratio": _ratio(_memory(row), _memory(base)),
        "accuracy_delta_pt": accuracy_delta,
        "test_loss_delta": loss_delta,
    }
    ratios["verdict"] = verdict(speedup, accuracy_delta, is_baseline, row.get("bounded"))
    return ratios


def verdict(speedup: float | None, accuracy_delta_pt: float | None, is_baseline: bool,
            bounded: str | None) -> str:
    """A one-line reading of the numbers: '1.9x faster, accuracy within 0.3 pt'."""
    if is_baseline:
        text = "baseline"
    else:
        parts = []
        if speedup is not None:
            if speedup >= 1.05:
                parts.append(f"{speedup:.1f}x faster")
            elif speedup <= 1 / 1.05:
                parts.append(f"{1 / speedup:.1f}x slower")
            else:
                parts.append("same speed")
        if accuracy_delta_pt is not None:
            if abs(accuracy_delta_pt) <= ACCURACY_TOLERANCE_PT:
                parts.append(f"accuracy within {abs(accuracy_delta_pt):.1f} pt")
            else:
                parts.append(f"accuracy {accuracy_delta_pt:+.1f} pt")
        text = ", ".join(parts) or "n/a"
    return f"{text} (bounded)" if bounded else text
