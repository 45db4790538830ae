"""Shared pieces of the benchmarks: the interleaving harness, plain Keras baselines, mptrain runs.

The machines are shared and noisy (speed drifts up to 2x between days and +-40% within a run,
and a VM's vCPU is sometimes descheduled for whole slices). So every benchmark runs its
variants side by side, interleaved in rotating order over several rounds (`interleave`), and
prints each side's median with its spread over the rounds next to every ratio: a reader sees
whether a difference is bigger than the noise. Absolute times from another day mean little.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_model() -> str:
    from mptrain.hardware.machine import probe_cpu

    cpu = probe_cpu()
    return f"{cpu.name}, {cpu.physical_cores} cores, flags: " + (", ".join(
        k for k, v in cpu.features.items() if v) or "AVX2 and below (no AVX-512)")


def synthetic_npz(folder: Path, n_train: int, shape=(784,), n_test: int = 256,
                  vocab: int | None = None) -> Path:
    """Random inputs (token ids below `vocab` when given) and labels: speed does not care."""
    rng = np.random.default_rng(0)
    path = folder / f"bench_{n_train}_{'x'.join(map(str, shape))}_{vocab}.npz"
    if not path.exists():
        def inputs(n):
            if vocab:
                return rng.integers(1, vocab, (n, *shape)).astype(np.int32)
            return rng.random((n, *shape), dtype=np.float32)

        np.savez(path, x_train=inputs(n_train), y_train=rng.integers(0, 10, n_train),
                 x_test=inputs(n_test), y_test=rng.integers(0, 10, n_test))
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
    try:
        return plain_keras_ms(guide_model(keras, hidden, x.shape[1]), x, y, batch, steps, warmup)
    finally:
        keras.mixed_precision.set_global_policy("float32")


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
    from mptrain.runs.runner import run_experiment

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


def interleave(variants: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run each variant once per round, the order rotated every round, so drift and slow
    phases of the machine hit every variant alike. Each call returns one measurement (a
    run's median step ms)."""
    import keras

    names = list(variants)
    results: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            results[name].append(variants[name]())
            keras.backend.clear_session()
            gc.collect()
    return results


def spread(values: list[float], digits: int = 1) -> str:
    """median (min–max over rounds)."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def ratio(numerators: list[float], denominators: list[float], digits: int = 2) -> str:
    """The ratio within each round (both sides measured minutes apart), then median (min–max)."""
    per_round = [a / b for a, b in zip(numerators, denominators, strict=False)]
    if len(per_round) == 1:
        return f"{per_round[0]:.{digits}f}x"
    return (f"{statistics.median(per_round):.{digits}f}x "
            f"({min(per_round):.{digits}f}–{max(per_round):.{digits}f})")


def plain_keras_ms(model, x, y, batch: int, steps: int, warmup: int) -> float:
    """Hand-written Keras on a given model: compile, fit on NumPy arrays, time each step with
    a callback (median ms after warm-up). The baseline for mptrain's overhead."""
    import keras

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
    return statistics.median(times[warmup:]) * 1000


def quiet_tensorflow():
    from mptrain.hardware.runtime import import_tensorflow

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return import_tensorflow()


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A Markdown table (printed, and pasted into RESULTS.md by run_all.py)."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *map(line, rows)])
