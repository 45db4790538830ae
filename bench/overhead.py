"""Benchmark 1: mptrain's overhead over hand-written Keras.

The same model trained by a plain Keras script (compile, fit on NumPy arrays, a timing
callback) and by `mptrain run`, interleaved over ROUNDS rounds in one process so both see the
same machine state. The guide's MLP is written out by hand (fit and the guide's custom loop);
for ResNet50 and the ViT the plain script trains the model mptrain's builder makes, so only
the training code differs. Goal: mptrain / plain <= 1.02 on every model.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    interleave,
    mptrain_run,
    plain_custom_ms,
    plain_fit_ms,
    plain_keras_ms,
    quiet_tensorflow,
    ratio,
    spread,
    synthetic_npz,
    table,
)

STEPS, WARMUP, ROUNDS = 8, 2, 3
VIT = {"kind": "transformer", "patch_size": 4, "num_layers": 6, "num_heads": 8, "embed_dim": 256,
       "mlp_dim": 1024, "num_classes": 10}
RESNET = {"kind": "application", "name": "ResNet50", "num_classes": 10}


def built(model: dict, shape, policy: str):
    """The model mptrain would train, built the way mptrain builds it."""
    import keras

    from mptrain.config import validate
    from mptrain.data.dataset import InputSpec
    from mptrain.model import build_model
    from mptrain.objective import for_head

    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    config = validate({"name": "bench", "policy": policy, "model": model}, "<bench>")
    spec = InputSpec(shape, "image" if len(shape) == 3 else "vector")
    return build_model(config, spec, for_head(config.train.loss, config.model.num_classes)).model


def main() -> str:
    quiet_tensorflow()
    tmp = Path(tempfile.gettempdir())
    rows = []
    mlp_npz = synthetic_npz(tmp, 2048 * (STEPS + WARMUP))
    with np.load(mlp_npz) as archive:
        x, y = archive["x_train"], archive["y_train"].astype(np.int32)
    for policy in ("float32", "mixed_bfloat16"):
        ms = interleave({
            "plain fit": lambda p=policy: plain_fit_ms(p, x, y, 2048, STEPS, WARMUP),
            "mptrain fit": lambda p=policy: mptrain_run(mlp_npz, policy=p, loop="fit", batch=2048,
                                                        steps=STEPS, warmup=WARMUP).step_time.median_ms,
            "plain custom": lambda p=policy: plain_custom_ms(p, x, y, 2048, STEPS, WARMUP),
            "mptrain custom": lambda p=policy: mptrain_run(mlp_npz, policy=p, loop="custom",
                                                           batch=2048, steps=STEPS,
                                                           warmup=WARMUP).step_time.median_ms,
        }, ROUNDS)
        rows.append(["guide MLP, fit", policy, spread(ms["plain fit"]), spread(ms["mptrain fit"]),
                     ratio(ms["mptrain fit"], ms["plain fit"], 3)])
        rows.append(["guide MLP, custom loop", policy, spread(ms["plain custom"]),
                     spread(ms["mptrain custom"]), ratio(ms["mptrain custom"], ms["plain custom"], 3)])
    for name, model, shape, batch in (("ResNet50 64x64, fit", RESNET, (64, 64, 3), 32),
                                      ("ViT 6x256 32x32, fit", VIT, (32, 32, 3), 128)):
        npz = synthetic_npz(tmp, batch * (STEPS + WARMUP), shape=shape)
        with np.load(npz) as archive:
            xs, ys = archive["x_train"], archive["y_train"].astype(np.int32)
        policy = "mixed_bfloat16"

        def plain(m=model, s=shape, b=batch, xs=xs, ys=ys, p=policy):
            return plain_keras_ms(built(m, s, p), xs, ys, b, STEPS, WARMUP)

        def ours(m=model, n=npz, b=batch, p=policy):
            return mptrain_run(n, policy=p, loop="fit", batch=b, steps=STEPS, warmup=WARMUP,
                               model=m, extra={"xla_optimizer_update": False}).step_time.median_ms

        ms = interleave({"plain": plain, "mptrain": ours}, ROUNDS)
        rows.append([name, policy, spread(ms["plain"]), spread(ms["mptrain"]),
                     ratio(ms["mptrain"], ms["plain"], 3)])
    out = table(rows, ["model, loop", "policy", "plain Keras ms", "mptrain ms",
                       "mptrain / plain (per round)"])
    header = (f"Overhead vs hand-written Keras: median step ms over {STEPS} steps after {WARMUP} "
              f"warm-up, {ROUNDS} interleaved rounds; spreads are min–max over rounds "
              "(goal: ratio <= 1.02). The MLP rows use mptrain's defaults (the XLA-compiled "
              "optimizer update on CPUs); the ResNet50 and ViT rows turn it off, so both sides "
              "run the same TensorFlow ops and only the training code differs.")
    return f"{header}\n\n{out}"


if __name__ == "__main__":
    print(main())
