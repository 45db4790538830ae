"""Benchmark: the guide's second lever, judged by time to quality (issue 45).

For each experiment:
1. `mptrain plan` twice with the batch axis (the experiment's batch b and 2b): the two picks
   (goal "reproducible": the same cell, or cells whose time-to-target gains are within 5%), the
   first pick's claimed time-to-target speed-up over float32 at b, and the plan's seconds (goal
   for ResNet50: at most 6 minutes on 2 cores).
2. Verification (goal "honest": the claim within +-15% of it): float32 at b and the pick's
   plan.yaml as plain `mptrain run`s, interleaved over ROUNDS rounds in rotating order, each on
   the plan's trial examples (the same steps of b; the pick's steps scaled to its batch). In each
   round, float32's target is its own final loss (the mean over the second half of its examples,
   plus the plan's 3% tolerance of its progress, as `verdicts` sets it), each side's time to it
   is its median step times the steps its trailing-window loss took to get there
   (`measure.to_target`), and the ratio is taken within the round.
Each figure names the CPU it came from (`cpu_model`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, spread, table  # noqa: E402
from plan import EXPERIMENTS, experiment_file, mptrain  # noqa: E402

ROUNDS = 3
# name → (EXPERIMENTS key, plan steps, extra --set for every side)
CASES = {
    "fashion_mnist_mixed (MLP 1024-1024, batch 1024, Adam)": ("fashion_mnist_mixed", 20, []),
    "ResNet50 64x64x3, batch 32": ("ResNet50 64x64x3, batch 32", 12, []),
}


def plan_with_batches(ref: str, overrides: list[str], steps: int, batch: int, folder: Path, out: Path):
    from mptrain.measure.plan import PlanRecord

    sets = [arg for o in overrides for arg in ("--set", o)]
    started = time.perf_counter()
    done = mptrain("plan", ref, "--json", "--steps", str(steps), "--batch-sizes",
                   f"{batch},{2 * batch}", "--budget", "30", "--out", str(out), *sets, cwd=folder)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"plan {ref} failed:\n{done.stderr[-3000:]}")
    return PlanRecord.model_validate_json(done.stdout), seconds


def gain_of(record, label: str) -> float:
    from mptrain.measure.trials import gain

    if label == "float32":
        return 1.0
    return gain(next(t for t in record.trials if t.label == label)) or float("nan")


def timed_run(ref: str, sets: list[str], folder: Path):
    """One plain run: its step records and its median step (ms)."""
    from mptrain.runs.folder import RunFolder

    args = [arg for o in [*sets, "train.epochs=50", "output.save_model=false",
                          "train.checkpoint={every_epochs: null, every_steps: null}",
                          "data.max_test_examples=64", f"output.dir={folder / 'verify'}"]
            for arg in ("--set", o)]
    done = mptrain("run", ref, "--json", *args, cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"run {ref} failed:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout)
    return RunFolder(Path(summary["run_dir"])).read_steps(), summary["step_time"]["median_ms"]


def seconds_to(records, median_ms: float, target: float, window: int) -> float | None:
    """The time to `target`: the steps its trailing-window loss took to reach it, at its
    median step (the first step's tracing left out, as in plan's claim)."""
    from mptrain.measure.to_target import examples_to, loss_over_examples

    examples = examples_to(loss_over_examples(records), target, window)
    if examples is None:
        return None
    return examples / records[0].examples * median_ms / 1e3


def verify(ref: str, overrides: list[str], plan_file: Path, steps: int, pick_batch: int,
           batch: int, folder: Path) -> list[float | None]:
    """float32 at the experiment's batch and the pick, in turns: the pick's time-to-target
    speed-up in each round (None: it did not reach float32's loss)."""
    from mptrain.measure.to_target import loss_over_examples, target_of
    from mptrain.measure.verdicts import training_against

    pick_steps = math.ceil(steps * batch / pick_batch)
    sides = {"float32": (ref, [*overrides, "policy=float32", f"train.max_steps={steps}"]),
             "pick": (str(plan_file), [f"train.max_steps={pick_steps}"])}
    ratios = []
    for r in range(ROUNDS):
        ran = {}
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            ran[name] = timed_run(*sides[name], folder)
        (base, base_ms), (pick, pick_ms) = ran["float32"], ran["pick"]
        losses = [s.loss for s in base]
        target, window = target_of(loss_over_examples(base),
                                   training_against(losses, losses, 3.0).allowance)
        mine, theirs = (seconds_to(pick, pick_ms, target, window),
                        seconds_to(base, base_ms, target, window))
        ratios.append(theirs / mine if mine and theirs else None)
    return ratios


def main(only: list[str] | None = None) -> str:
    from mptrain.config import load_config

    lines = [f"CPU: {cpu_model()}", ""]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for name, (key, steps, extra) in CASES.items():
            if only and not any(name.startswith(o) for o in only):
                continue
            spec, overrides, _ = EXPERIMENTS[key]
            overrides = [*overrides, *extra]
            ref = experiment_file(key, spec, folder)
            batch = load_config(ref, overrides).train.batch_size
            out = folder / f"{file_name(key)}.plan.yaml"
            first, seconds = plan_with_batches(ref, overrides, steps, batch, folder, out)
            second, _ = plan_with_batches(ref, overrides, steps, batch, folder,
                                          folder / f"{file_name(key)}.again.yaml")
            gains = gain_of(first, first.winner), gain_of(second, second.winner)
            same = first.winner == second.winner or abs(gains[0] / gains[1] - 1) <= 0.05
            pick = next(t for t in first.trials if t.label == first.winner)
            pick_batch = pick.summary.batch_size
            verified = verify(ref, overrides, out, steps, pick_batch, batch, folder)
            reached = [v for v in verified if v is not None]
            honest = bool(reached) and len(reached) == len(verified) and abs(
                gains[0] / statistics.median(reached) - 1) <= 0.15
            rows.append([name, first.winner, second.winner, f"{gains[0]:.2f}x",
                         spread(reached, 2).replace(" (", "x (").replace(")", "x)")
                         if reached else "never reached",
                         f"{seconds:.0f}", "met" if same else "NOT met", "met" if honest else "NOT met"])
            cells = "; ".join(
                f"{t.label} {t.verdict.speed.ratio or float('nan'):.2f}x per example, "
                + (f"time to target {t.verdict.to_target.speedup:.2f}x"
                   if t.verdict.to_target and t.verdict.to_target.speedup else
                   "did not reach float32's loss" if t.verdict.to_target else "no loss")
                for t in first.trials if t.summary and not t.verdict.baseline and t.label != "float32-twin")
            lines.append(f"- {name}: plan 1's cells: {cells}; not tried: "
                         f"{'; '.join(first.cells_not_tried) or 'none'}; its reason: {first.reason}")
    headers = ["experiment", "plan 1", "plan 2", "claimed time-to-target x", "verified (per round)",
               "plan s", "reproducible", "honest (+-15%)"]
    return "\n".join([table(rows, headers), "", *lines])


def file_name(key: str) -> str:
    return key.split()[0].split(",")[0].lower()


if __name__ == "__main__":
    print(main(sys.argv[1:] or None))
