"""Benchmark 5: start-up. `mptrain --help` and `validate` must not import TensorFlow, and
each is shown beside Python's own start-up on the same machine, measured in the same rounds
(the commands take turns, round after round, so a host that drifts slows them alike): the
figure above Python's is mptrain's own cost, and reads the same on a slow host. Then the time
from `mptrain run` to its first training step.

Goals (issue 38): `--help` ≤ 0.3 s and ≤ 0.15 s above `python -c pass`; `validate synthetic`
≤ 0.3 s."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, table  # noqa: E402

MPTRAIN = [sys.executable, "-m", "mptrain"]
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "mptrain --help": [*MPTRAIN, "--help"],
    "mptrain validate synthetic": [*MPTRAIN, "validate", "synthetic"],
}
GOALS = {"mptrain --help": (0.3, 0.15), "mptrain validate synthetic": (0.3, None)}


def in_rounds(rounds: int = 11) -> dict[str, list[float]]:
    """Each command's wall time in every round, the commands in turn within a round."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(rounds + 1):  # the first round warms the file cache and is not counted
        for name, command in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times[name].append(time.perf_counter() - start)
    return {name: values[1:] for name, values in times.items()}


def main() -> str:
    times = in_rounds()
    python = times["python -c pass"]
    rows = []
    for name, values in times.items():
        above = [v - p for v, p in zip(values, python, strict=True)]
        goal, goal_above = GOALS.get(name, (None, None))
        rows.append([name, f"{statistics.median(values):.3f}",
                     f"{min(values):.3f}-{max(values):.3f}",
                     "" if name.startswith("python") else f"{statistics.median(above):.3f}",
                     " and ".join(filter(None, [goal and f"≤ {goal}",
                                                goal_above and f"≤ {goal_above} above"]))])
    out_dir = tempfile.mkdtemp(prefix="mptrain-bench-")
    done = subprocess.run(MPTRAIN + ["run", "synthetic", "--json", "--set", "train.epochs=1",
                                     "--set", f"output.dir={out_dir}"],
                          capture_output=True, text=True, check=True, env={**os.environ})
    first = json.loads(done.stdout)["time_to_first_step_s"]
    rows.append(["mptrain run synthetic: start → first step", f"{first:.2f}", "", "", ""])
    return (f"Start-up on {cpu_model()} (11 rounds, the commands in turn; median, and the "
            "range over the rounds)\n\n"
            + table(rows, ["command", "seconds", "range", "above python", "goal"]))


if __name__ == "__main__":
    print(main())
