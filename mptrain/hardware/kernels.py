"""How fast each dtype really is on this machine: kernels timed, cached, and summarised.

Three kernels per dtype: a plain matmul, a fused dense layer (MatMul+BiasAdd+ReLU, the op that
collapses for float16 on oneDNN CPUs) and a 3x3 convolution. The dtypes of a kernel are timed
in interleaved rounds so that a machine whose speed drifts slows every side alike. A dtype
whose call takes over `CUT_SHORT_S` is not repeated (cut short), so a pathological dtype
(float16 on a CPU without XLA) costs one call, not minutes.

CPU flags do not say which policy is fast: on a Xeon with AMX-BF16, oneDNN's bfloat16
matmuls run several times float32; with AVX512_BF16 alone they were measured 0.8x. So
`policy: auto` and `check-gpu` decide on this measurement (`policy.recommend`). It is made once
per machine and cached (`measured_kernels`), keyed by the CPU, its flags, the GPUs and the
TensorFlow version: a measurement never outlives the machine or the TensorFlow it describes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from mptrain.record import FrozenRecord

if TYPE_CHECKING:
    from mptrain.hardware.machine import Machine

DTYPES = ("float32", "float16", "bfloat16")
CACHE_ENV = "MPTRAIN_CACHE_DIR"
ROUND_BUDGET_S = 0.6  # per kernel, all its dtypes together
CUT_SHORT_S = 0.5  # a single call slower than this is not repeated


class KernelTiming(FrozenRecord):
    device: str
    kernel: str
    dtype: str
    ms_per_call: float  # median over the calls
    ms_p10: float
    ms_p90: float
    tflops: float
    calls: int
    cut_short: bool
    ratio_to_float32: float | None  # float32's median / this median: > 1 is faster


class KernelSpeeds(FrozenRecord):
    """One measurement of this machine's kernels, and what it is valid for."""

    machine_key: str  # the machine and TensorFlow it was measured on (`machine_key`)
    measured_at: str
    seconds: float
    timings: list[KernelTiming]

    def speedup(self, dtype: str, device: str) -> float | None:
        """Geometric mean over the kernels of `dtype`'s speed relative to float32."""
        ratios = [t.ratio_to_float32 for t in self.timings
                  if t.device == device and t.dtype == dtype and t.ratio_to_float32]
        return statistics.geometric_mean(ratios) if ratios else None

    def describe(self, dtype: str, device: str) -> str:
        """'bfloat16 kernels run 0.80x float32 on CPU:0 (matmul 0.80x, dense 0.78x, conv 0.54x)'."""
        parts = [f"{t.kernel.split()[0]} {t.ratio_to_float32:.2f}x" for t in self.timings
                 if t.device == device and t.dtype == dtype and t.ratio_to_float32]
        return (f"{dtype} kernels run {self.speedup(dtype, device):.2f}x float32 on "
                f"{device.strip('/')} ({', '.join(parts)})")


def _kernels(tf, scale: float):
    """(name, FLOPs per call, its inputs' shapes, function) for each benchmark kernel."""
    n = max(8, int(1024 * scale))
    d = max(8, int(512 * scale))
    batch, hw, ch = max(1, int(16 * scale)), max(4, int(56 * scale)), max(4, int(64 * scale))

    # Each returns one element so that fetching it waits for the device but copies ~nothing.
    def matmul(a, b):
        return tf.matmul(a, b)[0, 0]

    def dense(x, w, bias):
        return tf.nn.relu(tf.matmul(x, w) + bias)[0, 0]

    def conv(x, w):
        return tf.nn.conv2d(x, w, 1, "SAME")[0, 0, 0, 0]

    return [
        (f"matmul {n}²", 2 * n**3, [(n, n), (n, n)], matmul),
        (f"dense {d}² fused", 2 * d**3, [(d, d), (d, d), (d,)], dense),
        (f"conv3x3 {batch}×{hw}²×{ch}", 2 * batch * hw * hw * ch * ch * 9,
         [(batch, hw, hw, ch), (3, 3, ch, ch)], conv),
    ]


def measure(tf, devices: list[str], dtypes: tuple[str, ...] = DTYPES, scale: float = 1.0,
            budget_s: float = ROUND_BUDGET_S) -> list[KernelTiming]:
    """Time every kernel in every dtype on every device, the dtypes interleaved."""
    timings: list[KernelTiming] = []
    for device in devices:
        for name, flops, shapes, fn in _kernels(tf, scale):
            calls: dict[str, tuple[Callable, tuple]] = {}
            with tf.device(device):
                for dtype in dtypes:
                    inputs = tuple(tf.cast(tf.random.normal(shape), dtype) for shape in shapes)
                    compiled = tf.function(fn, autograph=False)
                    compiled.get_concrete_function(*inputs)  # trace outside the timing
                    calls[dtype] = (compiled, inputs)
                seconds = interleaved(calls, budget_s)
            medians = {dtype: statistics.median(s) for dtype, s in seconds.items()}
            for dtype, samples in seconds.items():
                ms = sorted(1e3 * s for s in samples)
                timings.append(KernelTiming(
                    device=device, kernel=name, dtype=dtype, ms_per_call=statistics.median(ms),
                    ms_p10=percentile(ms, 10), ms_p90=percentile(ms, 90),
                    tflops=flops / medians[dtype] / 1e12, calls=len(ms),
                    cut_short=len(ms) == 1,
                    ratio_to_float32=(medians["float32"] / medians[dtype]
                                      if "float32" in medians else None)))
    return timings


def interleaved(calls: dict[str, tuple[Callable, tuple]], budget_s: float) -> dict[str, list[float]]:
    """Seconds per call of each dtype, in rounds that visit every dtype in turn (rotating
    which goes first), until the budget is spent; a dtype too slow to repeat stops early."""
    samples: dict[str, list[float]] = {dtype: [] for dtype in calls}
    for fn, inputs in calls.values():  # warm-up: first allocations, oneDNN primitive creation
        fn(*inputs).numpy()
    active = list(calls)
    start = time.perf_counter()
    rounds = 0
    while active and (rounds < 3 or time.perf_counter() - start < budget_s):
        order = active[rounds % len(active):] + active[:rounds % len(active)]
        for dtype in order:
            fn, inputs = calls[dtype]
            began = time.perf_counter()
            fn(*inputs).numpy()
            samples[dtype].append(time.perf_counter() - began)
            if samples[dtype][-1] > CUT_SHORT_S:
                active.remove(dtype)
        rounds += 1
    return samples


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (NumPy's default), without NumPy."""
    position = (len(sorted_values) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def bench_devices(tf) -> list[str]:
    """CPU:0 plus every visible GPU."""
    return ["/CPU:0"] + [f"/GPU:{i}" for i, _ in enumerate(tf.config.list_physical_devices("GPU"))]


# --- the cached measurement `policy: auto` decides on ------------------------------------


def machine_key(machine: Machine) -> str:
    """What a measurement describes: CPU model and flags, GPUs, TensorFlow, oneDNN."""
    gpus = ", ".join(f"{g.name} {g.compute_capability}" for g in machine.gpus) or "no GPU"
    flags = hashlib.sha256(" ".join(sorted(machine.cpu.flags)).encode()).hexdigest()[:12]
    return (f"{machine.cpu.model} (flags {flags}); {gpus}; TensorFlow {machine.tensorflow_version}; "
            f"oneDNN {'on' if machine.onednn else 'off'}")


def cache_dir() -> Path:
    """$MPTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/mptrain, else ~/.cache/mptrain."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mptrain"


def cache_path(machine: Machine) -> Path:
    digest = hashlib.sha256(machine_key(machine).encode()).hexdigest()[:16]
    return cache_dir() / f"kernels-{digest}.json"


def decision_dtypes(machine: Machine) -> tuple[str, ...]:
    """The dtypes that can win on the device that would train: a CPU runs float16 no faster
    than float32 (at best, with XLA), so only bfloat16 is measured against float32 there."""
    if not machine.gpus:
        return ("float32", "bfloat16")
    gpu = machine.gpus[0]
    return ("float32", "float16") + (("bfloat16",) if gpu.fast_bfloat16 else ())


def decision_device(machine: Machine) -> str:
    return "/GPU:0" if machine.gpus else "/CPU:0"


def cached_kernels(machine: Machine) -> KernelSpeeds | None:
    """The cached measurement for exactly this machine and TensorFlow, if there is one."""
    path = cache_path(machine)
    try:
        speeds = KernelSpeeds.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None
    if speeds.machine_key != machine_key(machine):
        return None
    device = decision_device(machine)
    if not all(speeds.speedup(d, device) for d in decision_dtypes(machine) if d != "float32"):
        return None
    return speeds


def store_kernels(machine: Machine, timings: list[KernelTiming], seconds: float,
                  keep: bool = True) -> KernelSpeeds:
    """The measurement, written to this machine's cache when `keep` (kernels of another
    size than `policy: auto` measures are shown, not kept)."""
    speeds = KernelSpeeds(machine_key=machine_key(machine),
                          measured_at=datetime.now().isoformat(timespec="seconds"),
                          seconds=round(seconds, 2), timings=timings)
    if not keep:
        return speeds
    path = cache_path(machine)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(speeds.model_dump(), indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache costs a measurement next time, nothing more
    return speeds


def measured_kernels(tf, machine: Machine, status: Callable[[str], object] | None = None,
                     said: list[str] | None = None) -> KernelSpeeds | None:
    """This machine's kernel speeds: cached, or measured now (about 10 s) and cached. None
    when the measurement fails: the caller falls back to rules on the hardware's flags, and
    `said` is told why. `status(text)` is a context manager that shows progress while
    measuring."""
    speeds = cached_kernels(machine)
    if speeds is not None or machine.tpu:
        return speeds
    started = time.perf_counter()
    saying = "measuring this machine's float32 and 16-bit kernels (once; cached)…"
    try:
        with status(saying) if status is not None else nullcontext():
            timings = measure(tf, [decision_device(machine)], decision_dtypes(machine))
    except Exception as exc:  # a broken device or kernel: fall back to the rules, never crash a run
        if said is not None:
            said.append(f"this machine's kernels could not be measured ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:160] if str(exc) else 'no message'}); the "
                        "policy is chosen by the hardware's flags instead")
        return None
    return store_kernels(machine, timings, time.perf_counter() - started)
