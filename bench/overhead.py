"""Benchmark 1: mptrain's overhead over hand-written Keras (the guide's script).

The guide's 784→4096→4096→10 MLP (RMSprop, float32 softmax) at batch 2048, written plainly,
against `mptrain run` of the same experiment on the same data, alternating A/B in one process
so both see the same machine state. Goal: mptrain/plain ≤ 1.02 for fit and for the custom loop.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mptrain_run, plain_custom_ms, plain_fit_ms, quiet_tensorflow, synthetic_npz, table  # noqa: E402

BATCH, STEPS, WARMUP, ROUNDS = 2048, 10, 2, 3


def main() -> str:
    quiet_tensorflow()
    import numpy as np

    npz = synthetic_npz(Path(tempfile.gettempdir()), BATCH * (STEPS + WARMUP))
    with np.load(npz) as archive:
        x, y = archive["x_train"], archive["y_train"].astype(np.int32)
    rows = []
    for policy in ("float32", "mixed_bfloat16"):
        ratios = {"fit": [], "custom": [], "custom_vs_plain_fit": []}
        medians = {k: [] for k in ("plain fit", "mptrain fit", "plain custom", "mptrain custom")}
        for _ in range(ROUNDS):
            pf = plain_fit_ms(policy, x, y, BATCH, STEPS, WARMUP)
            mf = mptrain_run(npz, policy=policy, loop="fit", batch=BATCH, steps=STEPS,
                             warmup=WARMUP).step_time.median_ms
            pc = plain_custom_ms(policy, x, y, BATCH, STEPS, WARMUP)
            mc = mptrain_run(npz, policy=policy, loop="custom", batch=BATCH, steps=STEPS,
                             warmup=WARMUP).step_time.median_ms
            for key, value in zip(medians, (pf, mf, pc, mc), strict=True):
                medians[key].append(value)
            ratios["fit"].append(mf / pf)
            ratios["custom"].append(mc / pc)
            ratios["custom_vs_plain_fit"].append(mc / pf)
        rows.append([
            policy,
            *(f"{statistics.median(v):.1f}" for v in medians.values()),
            f"{statistics.median(ratios['fit']):.3f}",
            f"{statistics.median(ratios['custom']):.3f}",
            f"{statistics.median(ratios['custom_vs_plain_fit']):.3f}",
        ])
    out = table(rows, ["policy", "plain fit ms", "mptrain fit ms", "plain custom ms",
                       "mptrain custom ms", "fit ratio", "custom ratio", "mptrain custom / plain fit"])
    header = (f"Overhead vs hand-written Keras: guide MLP, batch {BATCH}, median step ms over "
              f"{STEPS} steps after {WARMUP} warm-up, median of {ROUNDS} alternating rounds "
              "(goal: ratios ≤ 1.02)")
    return f"{header}\n\n{out}"


if __name__ == "__main__":
    print(main())
