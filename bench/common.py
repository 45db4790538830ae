"""Shared pieces of the benchmarks: the guide's model written plainly, and mptrain runs.

Every benchmark measures its variants side by side in one run and prints ratios, because the
machines are shared and noisy: an absolute time from another day means little.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_model() -> str:
    from mptrain.hardware import probe_cpu

    cpu = probe_cpu()
    return f"{cpu.model}, {cpu.cores} cores, flags: " + ", ".join(
        k for k, v in cpu.features.items() if v)


def synthetic_npz(folder: Path, n_train: int, shape=(784,), n_test: int = 256) -> Path:
    rng = np.random.default_rng(0)
    path = folder / f"bench_{n_train}_{'x'.join(map(str, shape))}.npz"
    if not path.exists():
        np.savez(path,
                 x_train=rng.random((n_train, *shape), dtype=np.float32),
                 y_train=rng.integers(0, 10, n_train),
                 x_test=rng.random((n_test, *shape), dtype=np.float32),
                 y_test=rng.integers(0, 10, n_test))
    return path


def guide_model(keras, hidden=(4096, 4096), input_dim=784):
    """The guide's model, exactly as it writes it (CORRECT float32 softmax)."""
    from keras import layers

    inputs = keras.Input(shape=(input_dim,), name="digits")
    x = inputs
    for i, units in enumerate(hidden, start=1):
        x = layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
    x = layers.Dense(10, name="dense_logits")(x)
    outputs = layers.Activation("softmax", dtype="float32", name="predictions")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def plain_fit_ms(policy: str, x, y, batch: int, steps: int, warmup: int, hidden=(4096, 4096)) -> float:
    """Hand-written Keras: the guide's Model.fit, step time by callback (median, ms)."""
    import keras

    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    model = guide_model(keras, hidden, x.shape[1])
    model.compile(loss="sparse_categorical_crossentropy", optimizer=keras.optimizers.RMSprop(),
                  metrics=["accuracy"])
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.t = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.t)

    n = batch * (steps + warmup)
    model.fit(x[:n], y[:n], batch_size=batch, epochs=1, callbacks=[Timer()], verbose=0)
    keras.mixed_precision.set_global_policy("float32")
    return statistics.median(times[warmup:]) * 1000


def plain_custom_ms(policy: str, x, y, batch: int, steps: int, warmup: int, hidden=(4096, 4096)) -> float:
    """Hand-written Keras: the guide's custom loop (Keras 3 API), one fetch per step."""
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    model = guide_model(keras, hidden, x.shape[1])
    optimizer = keras.optimizers.RMSprop()
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    loss_object = keras.losses.SparseCategoricalCrossentropy()
    scaled = policy == "mixed_float16"

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_object(yb, model(xb, training=True))
            scaled_loss = optimizer.scale_loss(loss) if scaled else loss
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    n = batch * (steps + warmup)
    dataset = tf.data.Dataset.from_tensor_slices((x[:n], y[:n])).batch(batch)
    times = []
    iterator = iter(dataset)
    for _ in range(steps + warmup):
        start = time.perf_counter()
        xb, yb = next(iterator)
        train_step(xb, yb).numpy()
        times.append(time.perf_counter() - start)
    keras.mixed_precision.set_global_policy("float32")
    return statistics.median(times[warmup:]) * 1000


def mptrain_run(npz: Path, *, policy: str, loop: str, batch: int, steps: int, warmup: int,
                model: dict | None = None, jit_compile: bool | None = None, extra: dict | None = None):
    """One `mptrain run` in this process (same code path as the CLI); returns its summary."""
    from mptrain.config import validate
    from mptrain.runner import run_experiment

    raw = {
        "name": "bench",
        "policy": policy,
        "data": {"dataset": "npz", "path": str(npz),
                 "max_train_examples": batch * (steps + warmup)},
        "model": model or {"kind": "mlp", "hidden_units": [4096, 4096]},
        "train": {"loop": loop, "epochs": 1, "batch_size": batch, "warmup_steps": warmup,
                  "optimizer": {"name": "rmsprop"}, "jit_compile": jit_compile,
                  **(extra or {})},
        "output": {"dir": tempfile.mkdtemp(prefix="mptrain-bench-"), "save_model": False},
    }
    return run_experiment(validate(raw, "<bench>")).summary


def quiet_tensorflow():
    from mptrain.tf_runtime import import_tensorflow

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return import_tensorflow()


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A Markdown table (printed, and pasted into RESULTS.md by run_all.py)."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *map(line, rows)])
