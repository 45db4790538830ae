"""`check-gpu --bench`: how fast each dtype really is on each device, measured in seconds.

Three kernels per device and dtype: a plain matmul, a fused dense layer (MatMul+BiasAdd+ReLU,
the op that collapses for float16 on oneDNN CPUs) and a 3x3 convolution. Each runs for a
bounded time; a kernel whose single call exceeds the budget is reported as cut short instead
of being repeated, so a pathological dtype costs one call, not minutes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class BenchResult:
    device: str
    kernel: str
    dtype: str
    ms_per_call: float
    tflops: float
    calls: int
    cut_short: bool
    ratio_to_float32: float | None = None


def _kernels(tf, scale: float):
    """(name, FLOPs per call, inputs factory, function) for each benchmark kernel."""
    n = max(8, int(1024 * scale))
    d = max(8, int(512 * scale))
    batch, hw, ch = max(1, int(16 * scale)), max(4, int(56 * scale)), max(4, int(64 * scale))

    def matmul_inputs(dtype):
        return (tf.cast(tf.random.normal((n, n)), dtype),) * 2

    def dense_inputs(dtype):
        return (tf.cast(tf.random.normal((d, d)), dtype), tf.cast(tf.random.normal((d, d)), dtype),
                tf.cast(tf.random.normal((d,)), dtype))

    def conv_inputs(dtype):
        return (tf.cast(tf.random.normal((batch, hw, hw, ch)), dtype),
                tf.cast(tf.random.normal((3, 3, ch, ch)), dtype))

    # Each returns one element so that fetching it waits for the device but copies ~nothing.
    def matmul(a, b):
        return tf.matmul(a, b)[0, 0]

    def dense(x, w, bias):
        return tf.nn.relu(tf.matmul(x, w) + bias)[0, 0]

    def conv(x, w):
        return tf.nn.conv2d(x, w, 1, "SAME")[0, 0, 0, 0]

    return [
        (f"matmul {n}²", 2 * n**3, matmul_inputs, matmul),
        (f"dense {d}² fused", 2 * d**3, dense_inputs, dense),
        (f"conv3x3 {batch}×{hw}²×{ch}", 2 * batch * hw * hw * ch * ch * 9, conv_inputs, conv),
    ]


def run_microbench(tf, devices: list[str], budget_s: float = 0.4, scale: float = 1.0) -> list[BenchResult]:
    """Time every kernel in every dtype on every device, `budget_s` seconds each at most-ish."""
    results: list[BenchResult] = []
    for device in devices:
        for name, flops, make_inputs, fn in _kernels(tf, scale):
            row: dict[str, BenchResult] = {}
            for dtype in DTYPES:
                with tf.device(device):
                    inputs = make_inputs(getattr(tf, dtype))
                    compiled = tf.function(fn, autograph=False)
                    compiled.get_concrete_function(*inputs)  # trace outside the timing
                    row[dtype] = _time_calls(compiled, inputs, budget_s, device, name, dtype, flops)
            base = row["float32"].tflops
            results += [
                BenchResult(**{**r.__dict__, "ratio_to_float32": r.tflops / base if base else None})
                for r in row.values()
            ]
    return results


def _time_calls(fn, inputs, budget_s, device, kernel, dtype, flops) -> BenchResult:
    start = time.perf_counter()
    fn(*inputs).numpy()
    first = time.perf_counter() - start
    if first > budget_s:  # too slow to repeat: one call is the measurement
        return BenchResult(device, kernel, dtype, first * 1e3, flops / first / 1e12, 1, True)
    calls, start = 0, time.perf_counter()
    while True:
        fn(*inputs).numpy()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s:
            break
    per_call = elapsed / calls
    return BenchResult(device, kernel, dtype, per_call * 1e3, flops / per_call / 1e12, calls, False)


def bench_devices(tf) -> list[str]:
    """CPU:0 plus every visible GPU."""
    return ["/CPU:0"] + [f"/GPU:{i}" for i, _ in enumerate(tf.config.list_physical_devices("GPU"))]


def best_16bit(results: list[BenchResult], device: str) -> tuple[str, float] | None:
    """The 16-bit dtype with the best geometric-mean speed-up over float32 on a device."""
    best = None
    for dtype in ("bfloat16", "float16"):
        ratios = [r.ratio_to_float32 for r in results
                  if r.device == device and r.dtype == dtype and r.ratio_to_float32]
        if ratios:
            geo = 1.0
            for ratio in ratios:
                geo *= ratio
            geo **= 1 / len(ratios)
            if best is None or geo > best[1]:
                best = (dtype, geo)
    return best
