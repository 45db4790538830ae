"""Benchmark: what `mptrain plan` picks, and what `policy: auto` runs, against float32.

For each offline built-in experiment (plus the guide's MLP on Fashion-MNIST and ResNet50):
1. `mptrain plan` in a child process, as a user runs it: its pick, each trial's speed-up over
   float32, the layers it found slower in 16 bits, how long it took.
2. Verification, interleaved over ROUNDS rounds in rotating order: float32, the plan's pick
   (its plan.yaml) and `policy: auto`, each a short `mptrain run` child; per round the ratio
   of float32's median step to the pick's and to auto's, then the median and min–max over the
   rounds, beside each side's own spread, so a reader sees whether a difference is bigger
   than the machine's noise.

Goals (issue 17): the pick within 5% of the fastest candidate the plan measured, and never
slower than float32 beyond the noise; `auto` never slower than float32 beyond the noise; the
guide's MLP picks >= 3x float32 where the CPU has AMX and float32 where bf16 measures slower;
`mptrain plan synthetic` under 3 minutes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, spread, table  # noqa: E402

ROUNDS, VERIFY_STEPS = 3, 12
ROOT = Path(__file__).resolve().parent.parent

# name → (experiment: a built-in name or a mapping, --set overrides for plan's trials, plan steps)
EXPERIMENTS = {
    "synthetic": ("synthetic", [], 30),
    "fashion_mnist_mixed": ("fashion_mnist_mixed", [], 20),
    "guide MLP 784-4096-4096, batch 2048": ("fashion_mnist_mixed", [
        "model.hidden_units=[4096, 4096]", "train.batch_size=2048",
        "train.optimizer={name: rmsprop}"], 12),
    "cnn_fashion_mnist": ("cnn_fashion_mnist", [], 20),
    "python_builder": ("python_builder", [], 20),
    "text_transformer": ("text_transformer", [], 16),
    "vit_fashion_mnist": ("vit_fashion_mnist", [], 12),
    "vgg16_synthetic": ("vgg16_synthetic", [], 12),
    "ResNet50 64x64x3, batch 32": ({
        "name": "resnet50", "seed": 0, "policy": "auto",
        "data": {"dataset": "synthetic", "input_shape": [64, 64, 3], "train_size": 640,
                 "test_size": 64, "num_classes": 10},
        "model": {"kind": "application", "name": "ResNet50"},
        "train": {"batch_size": 32, "optimizer": {"name": "adam"}}}, [], 12),
}


def mptrain(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mptrain", *args], cwd=cwd, capture_output=True,
                          text=True)


def experiment_file(name: str, spec, folder: Path) -> str:
    if isinstance(spec, str):
        return spec
    path = folder / f"{name.split()[0].lower()}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def plan(name: str, ref: str, overrides: list[str], steps: int, folder: Path):
    """`mptrain plan` as a user runs it: its record (`PlanRecord`), its seconds, its plan file."""
    from mptrain.measure.plan import PlanRecord

    out = folder / f"{name.split()[0].split(',')[0]}.plan.yaml"
    sets = [arg for o in overrides for arg in ("--set", o)]
    started = time.perf_counter()
    done = mptrain("plan", ref, "--json", "--steps", str(steps), "--budget", "30", "--out", str(out),
                   *sets, cwd=folder)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"plan {name} failed:\n{done.stderr[-3000:]}")
    return PlanRecord.model_validate_json(done.stdout), seconds, out


def step_ms(ref: str, overrides: list[str], folder: Path) -> float:
    """One short run's median step (ms)."""
    sets = [arg for o in [*overrides, f"train.max_steps={VERIFY_STEPS + 2}", "train.epochs=50",
                          "train.checkpoint={every_epochs: null, every_steps: null}",
                          "output.save_model=false", "data.max_test_examples=64",
                          f"output.dir={folder / 'verify'}"]
            for arg in ("--set", o)]
    done = mptrain("run", ref, "--json", *sets, cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"run {ref} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)["step_time"]["median_ms"]


def verify(ref: str, overrides: list[str], plan_file: Path, folder: Path) -> dict[str, list[float]]:
    variants = {
        "float32": (ref, [*overrides, "policy=float32"]),
        "plan's pick": (str(plan_file), []),
        "auto": (ref, [*overrides, "policy=auto"]),
    }
    names = list(variants)
    ms: dict[str, list[float]] = {n: [] for n in names}
    for r in range(ROUNDS):
        for n in names[r % len(names):] + names[: r % len(names)]:
            ms[n].append(step_ms(*variants[n], folder))
    return ms


def per_round(base: list[float], other: list[float]) -> tuple[float, float, float]:
    ratios = [a / b for a, b in zip(base, other, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def main(only: list[str] | None = None) -> str:
    """Every experiment, or those whose names start with one of `only`."""
    rows, goals = [], []
    with tempfile.TemporaryDirectory(prefix="mptrain-bench-plan-") as scratch:
        folder = Path(scratch)
        for name, (spec, overrides, steps) in EXPERIMENTS.items():
            if only and not any(name.startswith(o) for o in only):
                continue
            ref = experiment_file(name, spec, folder)
            print(f"-- {name}", file=sys.stderr, flush=True)
            record, seconds, plan_file = plan(name, ref, overrides, steps, folder)
            counted = [t for t in record.trials if t.verdict.eligible]
            fastest = min(counted, key=lambda t: t.summary.step_time.median_ms)
            pick = next(t for t in record.trials if t.candidate.name == record.winner)
            pick_vs_fastest = pick.summary.step_time.median_ms / fastest.summary.step_time.median_ms
            ms = verify(ref, overrides, plan_file, folder)
            pick_ratio = per_round(ms["float32"], ms["plan's pick"])
            auto_ratio = per_round(ms["float32"], ms["auto"])
            trials = ", ".join(f"{t.label} {t.speedup:.2f}x" for t in record.trials if t.speedup is not None)
            islands = ", ".join(record.island_layers) or "none"
            rows.append([name, f"{record.winner}", f"{pick_vs_fastest:.2f}",
                         spread(ms["float32"]), spread(ms["plan's pick"]),
                         f"{pick_ratio[0]:.2f}x ({pick_ratio[1]:.2f}–{pick_ratio[2]:.2f})",
                         spread(ms["auto"]),
                         f"{auto_ratio[0]:.2f}x ({auto_ratio[1]:.2f}–{auto_ratio[2]:.2f})",
                         f"{seconds:.0f}"])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)  # kept if a later one fails
            goals.append(f"- {name}: trials {trials}; float32 islands: {islands}; pick within 5% of "
                         f"the fastest: {'met' if pick_vs_fastest <= 1.05 else 'NOT met'}; pick "
                         f"slower than float32 beyond noise: {'yes' if pick_ratio[2] < 1 else 'no'}; "
                         f"auto slower than float32 beyond noise: {'yes' if auto_ratio[2] < 1 else 'no'}")
    out = table(rows, ["experiment", "plan's pick", "pick / fastest trial", "float32 ms",
                       "pick ms", "pick speed-up (per round)", "auto ms", "auto speed-up (per round)",
                       "plan s"])
    header = (f"mptrain plan and policy: auto on {cpu_model()}. Plans with their default 3% "
              f"tolerance; then float32, the plan's pick (its plan.yaml) and auto, each a run "
              f"of {VERIFY_STEPS} timed steps, interleaved over {ROUNDS} rounds (ms: median "
              "(min–max) over rounds; speed-ups per round: float32's median / the other's).")
    return f"{header}\n\n{out}\n\n" + "\n".join(goals)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
