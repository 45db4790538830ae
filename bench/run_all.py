"""`make bench`: every benchmark, one after another, each in its own process; the tables are
printed and written to bench/RESULTS.md with the date and this machine's CPU."""

from __future__ import annotations

import subprocess
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import cpu_model  # noqa: E402

BENCHMARKS = ["startup.py", "overhead.py", "precision.py", "plan.py", "reproduce.py", "batch_size.py",
              "every_cpu.py", "every_lever.py"]


def main() -> None:
    sections = []
    for script in BENCHMARKS:
        print(f"== {script}", flush=True)
        done = subprocess.run([sys.executable, str(HERE / script)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"{script} failed")
        print(done.stdout, flush=True)
        sections.append(f"## {script}\n\n{done.stdout.strip()}\n")
    text = (f"# Benchmark results\n\n{date.today()} on {cpu_model()}.\n"
            "Produced by `make bench`; see NOTES.md for what was tried.\n\n" + "\n".join(sections))
    (HERE / "RESULTS.md").write_text(text)
    print(f"written: {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
