"""Benchmark: do plan's verdicts reproduce, and does compare agree with them (issue 25)?

For each experiment:
1. `mptrain plan` twice, as a user runs it: the two picks (the same, or within 5% of each
   other, is the goal "reproducible"), and the first pick's speed-up with its 95% interval.
2. Verification: float32 and the first plan's pick (its plan.yaml) as ordinary `mptrain run`s,
   interleaved over ROUNDS rounds in rotating order, the ratio taken within each round; the
   goal "honest": the plan's speed-up within ±10% of the verified median, which lies inside
   the plan's interval.
3. `mptrain compare --policies float32,PICK`: the goal "one answer": compare's speed-up inside
   plan's interval.
4. `mptrain run PLAN.yaml` as written: its wall time against the plan's whole-run estimate for
   the pick (the goal "predicted": within 10%; both count evaluation, checkpoints, the saved
   model and the process's start and exit), and against float32's estimate (the goal "whole
   run": not longer).
5. With ResNet50: `mptrain plan --budget 1` (issue 34's goal: it ends within 1.5 minutes plus
   staging, and names what the budget cut), timed from the command's start, staging (until
   the first round of turns ends) beside it.
Each figure names the CPU it came from (`cpu_model`).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, spread, table  # noqa: E402
from plan import EXPERIMENTS, experiment_file, mptrain, per_round, plan, step_ms  # noqa: E402

ROUNDS = 3
# every offline built-in (mnist_mixed downloads MNIST) and ResNet50 64x64
DEFAULT = ["synthetic", "fashion_mnist_mixed", "cnn_fashion_mnist", "python_builder",
           "text_transformer", "vit_fashion_mnist", "vgg16_synthetic", "ResNet50"]


def verify(ref: str, overrides: list[str], plan_file: Path, folder: Path) -> dict[str, list[float]]:
    sides = {"float32": (ref, [*overrides, "policy=float32"]), "pick": (str(plan_file), [])}
    ms: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(ROUNDS):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            ms[name].append(step_ms(*sides[name], folder))
    return ms


def compare_speedup(ref: str, overrides: list[str], pick: str, steps: int, folder: Path) -> float | None:
    sets = [arg for o in overrides for arg in ("--set", o)]
    done = mptrain("compare", ref, "--policies", f"float32,{pick}", "--steps", str(steps), "--json",
                   *sets, "--set", f"output.dir={folder / 'compare'}", cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"compare {ref} failed:\n{done.stderr[-3000:]}")
    from mptrain.measure.compare import CompareRecord

    return CompareRecord.model_validate_json(done.stdout).variants[1].speedup


def whole_run(plan_file: Path, folder: Path) -> float:
    started = time.perf_counter()
    done = mptrain("run", str(plan_file), "--json", "--set", f"output.dir={folder / 'whole'}",
                   cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"run {plan_file} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def budget_of_one_minute(ref: str, folder: Path) -> str:
    """`plan --budget 1`: its wall time, when its first round of turns ended, what it cut."""
    from mptrain.measure.plan import PlanRecord

    started = time.perf_counter()
    with open(folder / "budget.json", "w+") as out:  # a file: the record can outgrow a pipe
        process = subprocess.Popen([sys.executable, "-m", "mptrain", "plan", ref, "--budget", "1",
                                    "--json", "--out", str(folder / "budget.plan.yaml")], cwd=folder,
                                   stdout=out, stderr=subprocess.PIPE, text=True)
        first_round = None
        for line in process.stderr:
            if first_round is None and line.startswith("round 1"):
                first_round = time.perf_counter() - started
        wall = time.perf_counter() - started
        if process.wait() != 0:
            raise SystemExit("plan --budget 1 failed")
        out.seek(0)
        record = PlanRecord.model_validate_json(out.read())
    untried = [t.label for t in record.trials if t.summary is None]
    return (f"`plan --budget 1` of ResNet50: {wall:.0f} s in all, its first round of turns ended "
            f"after {first_round or 0:.0f} s; cut by the budget: {', '.join(record.cut) or 'none'}; not "
            f"started: {', '.join(untried) or 'none'}; pick {record.winner} ({record.reason})")


def trial_of(record, name: str):
    return next(t for t in record.trials if t.candidate.name == name)


def main(only: list[str]) -> str:
    rows, goals = [], []
    with tempfile.TemporaryDirectory(prefix="mptrain-bench-reproduce-") as scratch:
        folder = Path(scratch)
        for name, (spec, overrides, steps) in EXPERIMENTS.items():
            if not any(name.startswith(o) for o in only):
                continue
            ref = experiment_file(name, spec, folder)
            print(f"-- {name}", file=sys.stderr, flush=True)
            first, plan_s, plan_file = plan(name, ref, overrides, steps, folder)
            print(f"   planned in {plan_s:.0f} s: {first.winner}", file=sys.stderr, flush=True)
            second, _, _ = plan(name + " again", ref, overrides, steps, folder)
            pick = trial_of(first, first.winner)
            again = trial_of(second, second.winner)
            # the first pick may be a candidate the second plan did not make (islands it did not find)
            same = next((t for t in second.trials if t.candidate.name == first.winner), None)
            same_pick_speed = same.speedup if same else None
            reproducible = (first.winner == second.winner or
                            (same_pick_speed and (again.speedup or 1.0) / same_pick_speed <= 1.05))
            ms = verify(ref, overrides, plan_file, folder)
            verified = per_round(ms["float32"], ms["pick"])
            speedup = pick.speedup or 1.0  # float32 picked: itself
            low, high = pick.speedup_range or (speedup, speedup)
            # float32 against itself has no interval to lie in: within 10% of 1 is honest
            inside = low <= verified[0] <= high or first.winner == "float32"
            honest = abs(speedup / verified[0] - 1) <= 0.10 and inside
            # compare takes a candidate by name; a pick with float32 islands is compared on its
            # plan.yaml (which holds model.float32_layers) under its policy's own name
            islands = bool(pick.candidate.float32_layers)
            compared = (1.0 if first.winner == "float32" else
                        compare_speedup(str(plan_file) if islands else ref, [] if islands else overrides,
                                        first.winner.removesuffix("+islands"), steps, folder))
            one_answer = compared is not None and low <= compared <= high
            wall = whole_run(plan_file, folder)
            estimate = pick.verdict.whole_run_s
            base_estimate = trial_of(first, "float32").verdict.whole_run_s
            predicted = estimate is not None and abs(wall / estimate - 1) <= 0.10
            rows.append([name, first.winner, second.winner,
                         f"{speedup:.2f}x ({low:.2f}–{high:.2f})",
                         f"{verified[0]:.2f}x ({verified[1]:.2f}–{verified[2]:.2f})",
                         spread(ms["float32"]), spread(ms["pick"]),
                         f"{compared:.2f}x" if compared is not None else "-",
                         f"{estimate:.1f}" if estimate else "-", f"{wall:.1f}", f"{plan_s:.0f}"])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
            shorter = (estimate or 0) <= (base_estimate or 0)
            goals.append(
                f"- {name}: reproducible {'met' if reproducible else 'NOT met'}; honest "
                f"{'met' if honest else 'NOT met'}; one answer {'met' if one_answer else 'NOT met'}; "
                f"whole run (pick's estimate {estimate or 0:.1f} s vs float32's "
                f"{base_estimate or 0:.1f} s) {'met' if shorter else 'NOT met'}; "
                f"predicted {'met' if predicted else 'NOT met'} (run {wall:.1f} s, estimate "
                f"{estimate or 0:.1f} s)")
        resnet = next(name for name in EXPERIMENTS if name.startswith("ResNet50"))
        if any(resnet.startswith(o) for o in only):
            goals.append("- " + budget_of_one_minute(experiment_file(resnet, EXPERIMENTS[resnet][0], folder),
                                                     folder))
    out = table(rows, ["experiment", "plan 1", "plan 2", "plan 1's speed-up (95%)",
                       "verified (per round)", "float32 ms", "pick ms", "compare", "whole-run est. s",
                       "run s", "plan s"])
    header = (f"plan twice, then verified, compared and run, on {cpu_model()}. Verification: "
              f"float32 and the pick's plan.yaml as `mptrain run`s of 12 timed steps, interleaved "
              f"over {ROUNDS} rounds (ms: median (min–max) over rounds).")
    return f"{header}\n\n{out}\n\n" + "\n".join(goals)


if __name__ == "__main__":
    print(main(sys.argv[1:] or DEFAULT))
