"""Benchmark: are plan's and compare's answers true on this CPU, whatever 16-bit units it has
(issue 49)?

For each experiment:
1. `mptrain plan` as a user runs it: its pick, its claimed speed-up, what it tried and what it
   ruled out (with the figure it quoted).
2. Verification, every configuration plan tried (and float32+xla, where it was not tried) as
   plain `mptrain run`s of 12 timed steps, interleaved over ROUNDS rounds in rotating order,
   each round's ratio to float32 taken within the round: the goal "the pick is the fastest
   configuration" (no configuration faster than the pick by more than 5% in the median of
   rounds), and "its claim within ±10%" of the verified median ratio.
3. `mptrain compare --policies float32,mixed_float16`: what it reports for mixed_float16 (its
   speed-up over float32 and, where it ran XLA, over float32+xla: the precision alone)
   beside the verified ratio of mixed_float16 (as mptrain runs it here) to float32+xla.

Run it as CI would on an AVX2-only CPU with `TF_ENABLE_ONEDNN_OPTS=0` (TensorFlow's path
there), and as it is on the CPU at hand; each figure names the CPU and the oneDNN state.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, spread, table  # noqa: E402
from plan import EXPERIMENTS, experiment_file, mptrain, plan, step_ms  # noqa: E402

ROUNDS = 5
DEFAULT = ["cnn_fashion_mnist", "guide MLP"]


def settings_of(candidate) -> list[str]:
    """A candidate's settings as --set strings (what its trial ran with)."""
    out = []
    for key, value in candidate.settings.items():
        value = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        if key == "model.float32_layers":
            value = "[" + ", ".join(value) + "]"
        out.append(f"{key}={value}")
    return out


def verify(ref: str, overrides: list[str], configurations: dict[str, list[str]],
           folder: Path) -> dict[str, list[float]]:
    """Each configuration's median step, ROUNDS times, in rotating order."""
    names = list(configurations)
    ms: dict[str, list[float]] = {n: [] for n in names}
    for r in range(ROUNDS):
        for n in names[r % len(names):] + names[: r % len(names)]:
            ms[n].append(step_ms(ref, [*overrides, *configurations[n]], folder))
            print(f"   round {r + 1} {n}: {ms[n][-1]:.1f} ms", file=sys.stderr, flush=True)
    return ms


def ratio(base: list[float], other: list[float]) -> tuple[float, float, float]:
    """base / other within each round: median, min, max."""
    ratios = [a / b for a, b in zip(base, other, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def main(only: list[str]) -> str:
    from mptrain.hardware.machine import onednn_enabled, probe_cpu
    from mptrain.measure.compare import CompareRecord

    rows, goals = [], []
    with tempfile.TemporaryDirectory(prefix="mptrain-bench-every-cpu-") as scratch:
        folder = Path(scratch)
        for name, (spec, overrides, steps) in EXPERIMENTS.items():
            if not any(name.startswith(o) for o in only):
                continue
            ref = experiment_file(name, spec, folder)
            print(f"-- {name}", file=sys.stderr, flush=True)
            record, seconds, _ = plan(name, ref, overrides, steps, folder)
            tried = {t.candidate.name: t for t in record.trials if t.summary is not None
                     and t.label != "float32-twin" and not t.batch}
            configurations = {n: settings_of(t.candidate) for n, t in tried.items()}
            configurations.setdefault("float32+xla", ["policy=float32", "train.jit_compile=true"])
            ms = verify(ref, overrides, configurations, folder)
            verified = {n: ratio(ms["float32"], ms[n]) for n in configurations}
            fastest = max(verified, key=lambda n: verified[n][0])
            pick = record.winner if record.winner in verified else "float32"
            claim = tried[pick].speedup if pick != "float32" else 1.0
            for n in configurations:
                claimed = tried[n].speedup if n in tried and n != "float32" else None
                rows.append([name, n + (" (pick)" if n == pick else ""),
                             f"{claimed:.2f}x" if claimed else "-",
                             f"{verified[n][0]:.2f}x ({verified[n][1]:.2f}–{verified[n][2]:.2f})",
                             spread(ms[n])])
            is_fastest = verified[fastest][0] <= verified[pick][0] * 1.05
            honest = abs((claim or 1.0) / verified[pick][0] - 1) <= 0.10
            ruled = "; ".join(f"{c.name}: {c.why_not}" for c in record.candidates if c.why_not)
            goals.append(f"- {name}: plan picked {pick} ({record.reason}) in {seconds:.0f} s; "
                         f"fastest verified {fastest} {verified[fastest][0]:.2f}x: pick is the "
                         f"fastest {'met' if is_fastest else 'NOT met'}; claim "
                         f"{claim or 1.0:.2f}x against verified {verified[pick][0]:.2f}x: within "
                         f"10% {'met' if honest else 'NOT met'}. Ruled out: {ruled or 'none'}")
            sets = [arg for o in overrides for arg in ("--set", o)]
            done = mptrain("compare", ref, "--policies", "float32,mixed_float16", "--steps",
                           str(steps), "--json", *sets, "--set", f"output.dir={folder / 'cmp'}",
                           cwd=folder)
            if done.returncode != 0:
                raise SystemExit(f"compare {name} failed:\n{done.stderr[-3000:]}")
            compared = CompareRecord.model_validate_json(done.stdout)
            fp16 = next(v for v in compared.variants if v.candidate.policy == "mixed_float16")
            alone = fp16.verdict.against_control
            xla_runs = bool(fp16.candidate.jit_compile)
            mine = ["policy=mixed_float16", *(["train.jit_compile=true"] if xla_runs else [])]
            check = verify(ref, overrides, {"float32+xla": configurations["float32+xla"],
                                            "mixed_float16": mine}, folder)
            truth = ratio(check["float32+xla"], check["mixed_float16"])
            goals.append(
                f"- {name}: compare float32,mixed_float16 ran {fp16.candidate.name}: "
                f"{fp16.speedup or 0:.2f}x float32 ({fp16.verdict.words()}); precision alone "
                + (f"{alone.ratio:.2f}x float32+xla" if alone and alone.ratio else "not given")
                + f"; verified {fp16.candidate.name} against float32+xla: {truth[0]:.2f}x "
                f"({truth[1]:.2f}–{truth[2]:.2f})")
    out = table(rows, ["experiment", "configuration", "plan's claim", "verified (per round)",
                       "ms (median, min–max)"])
    onednn = "on" if onednn_enabled(probe_cpu().flags) else "off"
    header = (f"plan's pick against every configuration, on {cpu_model()}, oneDNN {onednn}. "
              f"Verification: `mptrain run`s of 12 timed steps, interleaved over {ROUNDS} rounds.")
    return f"{header}\n\n{out}\n\n" + "\n".join(goals)


if __name__ == "__main__":
    print(main(sys.argv[1:] or DEFAULT))
