"""Benchmarks 2–4: the speed 16-bit policies buy on this machine, through mptrain.

For each model, float32 and mixed_bfloat16 runs are interleaved over ROUNDS rounds (each a
short run: WARMUP warm-up steps, then STEPS timed ones); mixed_float16 runs once per model,
bounded, because on a CPU it is known not to be faster. Printed per policy: median step ms
with its spread over rounds, the speed-up over float32 within each round (median and
spread), and the model FLOPs utilisation against the peak of the unit that runs the dtype.

Goals on our CPUs: mixed_bfloat16 >= 3x float32 on the guide's MLP, >= 2.5x on the ResNet and
the transformers; mixed_float16 step <= 1.3x float32's without the user setting anything.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleave, mptrain_run, quiet_tensorflow, ratio, spread, synthetic_npz, table  # noqa: E402

STEPS, WARMUP, ROUNDS = 6, 2, 3

# name → (input shape, batch, model keys, token vocabulary or None)
MODELS = {
    "guide MLP 784-4096-4096": ((784,), 2048, {"kind": "mlp", "hidden_units": [4096, 4096]}, None),
    "CNN 64-128-256, 32x32x3": ((32, 32, 3), 256, {"kind": "cnn", "filters": [64, 128, 256],
                                                   "dense_units": [256]}, None),
    "ResNet50, 64x64x3": ((64, 64, 3), 32, {"kind": "application", "name": "ResNet50"}, None),
    "ViT 6x256, 32x32x3 (64 patches)": ((32, 32, 3), 128, {
        "kind": "transformer", "patch_size": 4, "num_layers": 6, "num_heads": 8,
        "embed_dim": 256, "mlp_dim": 1024}, None),
    "token transformer 4x256, 128 tokens": ((128,), 64, {
        "kind": "transformer", "num_layers": 4, "num_heads": 8, "embed_dim": 256,
        "mlp_dim": 1024}, 8000),
}


def dataset(shape, batch: int, vocab: int | None) -> Path:
    return synthetic_npz(Path(tempfile.gettempdir()), batch * (STEPS + WARMUP), shape=shape,
                         vocab=vocab)


def fmt_mfu(summaries) -> str:
    mfus = [s.mfu for s in summaries if s.mfu is not None]
    if not mfus:
        return "n/a"
    s = summaries[0]
    return f"{statistics.median(mfus):.0%} of {s.peak_unit} {s.peak_tflops:.2f} TFLOP/s"


def main() -> str:
    quiet_tensorflow()
    rows = []
    for name, (shape, batch, model, vocab) in MODELS.items():
        npz = dataset(shape, batch, vocab)
        model = {**model, "num_classes": 10}
        summaries: dict[str, list] = {"float32": [], "mixed_bfloat16": []}

        def run(policy, npz=npz, batch=batch, model=model, store=summaries):
            s = mptrain_run(npz, policy=policy, loop="fit", batch=batch, steps=STEPS,
                            warmup=WARMUP, model=model)
            store[policy].append(s)
            return s.step_time.median_ms

        ms = interleave({p: (lambda p=p: run(p)) for p in summaries}, ROUNDS)
        f16 = mptrain_run(npz, policy="mixed_float16", loop="fit", batch=batch, steps=3, warmup=1,
                          model=model, extra={"max_step_seconds": 30})
        for policy in ("float32", "mixed_bfloat16"):
            rows.append([name, policy, spread(ms[policy]), ratio(ms["float32"], ms[policy]),
                         fmt_mfu(summaries[policy])])
        f16_ms = f16.step_time.median_ms
        rows.append([name, "mixed_float16 (XLA, auto)", f"{f16_ms:.1f}",
                     f"{statistics.median(ms['float32']) / f16_ms:.2f}x (1 run)",
                     (f"stopped early: {f16.stop_reason}" if f16.stop_reason else fmt_mfu([f16]))])
    out = table(rows, ["model", "policy", "median ms (spread over rounds)",
                       "speed-up vs float32 (per round)", "model FLOPs utilisation"])
    header = (f"Precision speed-ups through mptrain (Model.fit; float32 and mixed_bfloat16 "
              f"interleaved over {ROUNDS} rounds of {STEPS} timed steps after {WARMUP} warm-up). "
              "Goals: mixed_bfloat16 >= 3x float32 on the MLP, >= 2.5x on the ResNet and the "
              "transformers; mixed_float16 step <= 1.3x float32's without the user setting anything.")
    return f"{header}\n\n{out}"


if __name__ == "__main__":
    print(main())
