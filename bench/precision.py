"""Benchmarks 2–4: the speed 16-bit policies buy on this machine, through mptrain.

2. float32 vs mixed_bfloat16 on the guide's MLP (batch 2048) and on a CNN: step-time ratio,
   with hand-written Keras fit on the MLP as the reference (goal through mptrain: ≥ 3x).
3. Model FLOPs utilisation of each run (achieved TFLOP/s / this CPU's peak for the dtype).
4. mixed_float16 on a CPU: with mptrain's automatic XLA vs float32 (goal ≤ 1.3x float32's
   step time), and what the user would get without it (a smaller model, bounded).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mptrain_run, plain_fit_ms, quiet_tensorflow, synthetic_npz, table  # noqa: E402

STEPS, WARMUP = 6, 2
CNN = {"kind": "cnn", "filters": [32, 64], "kernel_size": 3, "pooling": "max", "dense_units": [128]}
# CIFAR-shaped, VGG-style: convolutions with enough channels to keep AMX tiles busy.
CNN_WIDE = {"kind": "cnn", "filters": [64, 128, 256], "kernel_size": 3, "pooling": "max",
            "dense_units": [256]}


def fmt_mfu(summary) -> str:
    if summary.mfu is None:
        return "n/a"
    return (f"{summary.achieved_tflops:.2f} TFLOP/s ({summary.mfu:.0%} of {summary.peak_unit} "
            f"{summary.peak_tflops:.2f})")


def main() -> str:
    quiet_tensorflow()
    import numpy as np

    tmp = Path(tempfile.gettempdir())
    mlp_npz = synthetic_npz(tmp, 2048 * (STEPS + WARMUP))
    cnn_npz = synthetic_npz(tmp, 256 * (STEPS + WARMUP), shape=(28, 28, 1))
    cifar_npz = synthetic_npz(tmp, 256 * (STEPS + WARMUP), shape=(32, 32, 3))
    with np.load(mlp_npz) as archive:
        x, y = archive["x_train"], archive["y_train"].astype(np.int32)

    rows, summaries = [], {}
    for name, npz, batch, model in (("guide MLP", mlp_npz, 2048, None),
                                    ("CNN 32-64, 28x28x1", cnn_npz, 256, CNN),
                                    ("CNN 64-128-256, 32x32x3", cifar_npz, 256, CNN_WIDE)):
        for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
            summaries[name, policy] = mptrain_run(npz, policy=policy, loop="fit", batch=batch,
                                                  steps=STEPS, warmup=WARMUP, model=model)
        base = summaries[name, "float32"].step_time.median_ms
        for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
            s = summaries[name, policy]
            median = s.step_time.median_ms
            xla = ("whole step (auto)" if s.jit_compile
                   else "optimizer update" if s.xla_optimizer_update else "none")
            rows.append([name, policy, xla, f"{median:.1f}", f"{base / median:.2f}x",
                         f"{median / base:.2f}", fmt_mfu(s)])
    plain32 = plain_fit_ms("float32", x, y, 2048, STEPS, WARMUP)
    plain16 = plain_fit_ms("mixed_bfloat16", x, y, 2048, STEPS, WARMUP)
    rows.append(["guide MLP", "plain Keras f32/bf16", "none", f"{plain32:.0f} / {plain16:.0f}",
                 f"{plain32 / plain16:.2f}x", "", ""])

    # What mixed_float16 costs on this CPU without mptrain's XLA routing (smaller model, bounded).
    small = {"kind": "mlp", "hidden_units": [1024, 1024]}
    f32 = mptrain_run(mlp_npz, policy="float32", loop="fit", batch=1024, steps=3, warmup=1, model=small)
    f16 = mptrain_run(mlp_npz, policy="mixed_float16", loop="fit", batch=1024, steps=3, warmup=1,
                      model=small, jit_compile=False, extra={"max_step_seconds": 10})
    slow = f16.step_time.median_ms / f32.step_time.median_ms
    rows.append(["MLP 1024x2, b1024", "mixed_float16", "none (forced)",
                 f"{f16.step_time.median_ms:.0f}", f"{1 / slow:.4f}x", f"{slow:.0f}",
                 f"stopped early: {f16.stop_reason}" if f16.stop_reason else ""])
    out = table(rows, ["model", "policy", "XLA on", "median ms", "speed-up vs f32", "step / f32 step",
                       "model FLOPs utilisation"])
    header = (f"Precision speed-ups through mptrain (Model.fit, {STEPS} steps after {WARMUP} "
              "warm-up). Goals: mixed_bfloat16 ≥ 3x float32 on the MLP; mixed_float16 step ≤ 1.3x "
              "float32's without the user setting anything.")
    return f"{header}\n\n{out}"


if __name__ == "__main__":
    print(main())
