"""Benchmark 5: start-up. `mptrain --help` and `validate` must not import TensorFlow
(goal ≤ 0.3 s); and the time from `mptrain run` to its first training step."""

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
from common import table  # noqa: E402

MPTRAIN = [sys.executable, "-m", "mptrain"]


def wall(args: list[str], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(MPTRAIN + args, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> str:
    out_dir = tempfile.mkdtemp(prefix="mptrain-bench-")
    help_s = wall(["--help"])
    validate_s = wall(["validate", "synthetic"])
    done = subprocess.run(MPTRAIN + ["run", "synthetic", "--json", "--set", "train.epochs=1",
                                     "--set", f"output.dir={out_dir}"],
                          capture_output=True, text=True, check=True, env={**os.environ})
    summary = json.loads(done.stdout)
    rows = [
        ["mptrain --help", f"{help_s:.3f}", "≤ 0.3"],
        ["mptrain validate synthetic", f"{validate_s:.3f}", "≤ 0.3"],
        ["mptrain run synthetic: start → first step", f"{summary['time_to_first_step_s']:.2f}", ""],
    ]
    return "Start-up (median of 5 for the first two)\n\n" + table(rows, ["command", "seconds", "goal"])


if __name__ == "__main__":
    print(main())
