"""How fast each dtype really is on this machine: kernels timed, cached, and summarised.

Three kernels per dtype: a plain matmul, a fused dense layer (MatMul+BiasAdd+ReLU, the op that
collapses for float16 on oneDNN CPUs) and a 3x3 convolution. On a CPU each is timed twice per
dtype, as TensorFlow runs it and compiled with XLA: XLA and precision are two axes, and each
16-bit figure is read against float32 in the same mode (its control), so XLA's own gain is
never credited to a precision. The settings of a kernel are timed in interleaved rounds so
that a machine whose speed drifts slows every side alike. One whose call takes over
`CUT_SHORT_S` is not repeated (cut short), so a pathological one (float16 through oneDNN's
reference kernel) costs one call, not minutes.

CPU flags do not say which policy is fast: on a Xeon with AMX-BF16, oneDNN's bfloat16
matmuls run several times float32; with AVX512_BF16 alone they were measured 0.5-0.8x; on an
AVX2-only CPU TensorFlow leaves oneDNN off and float16 without XLA ran at float32's speed. So
`policy: auto`, whether float16 needs XLA, plan's candidates and `check-gpu` decide on this
measurement (`policy.recommend`). It is made once per machine and cached (`measured_kernels`),
keyed by the CPU, its flags, the GPUs, TensorFlow and oneDNN: a measurement never outlives the
machine or the TensorFlow it describes.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from mptrain.record import FrozenRecord, write_cache

if TYPE_CHECKING:
    from mptrain.hardware.machine import Machine

TIMED_DTYPES = ("float32", "float16", "bfloat16")
CACHE_ENV = "MPTRAIN_CACHE_DIR"
ROUND_BUDGET_S = 1.5  # per kernel, all its settings together (6 on a CPU: about 7 rounds)
CUT_SHORT_S = 0.5  # a single call slower than this is not repeated


class KernelTiming(FrozenRecord):
    device: str
    kernel: str
    dtype: str
    xla: bool = False  # compiled with XLA (`tf.function(jit_compile=True)`)
    ms_per_call: float  # median over the calls
    ms_p10: float
    ms_p90: float
    tflops: float
    calls: int
    cut_short: bool
    ratio_to_float32: float | None  # float32's median in the same XLA mode / this one's: > 1 is faster

    @property
    def setting(self) -> str:
        """The dtype as a candidate spells its XLA: `bfloat16+xla`."""
        return self.dtype + ("+xla" if self.xla else "")


class KernelSpeeds(FrozenRecord):
    """One measurement of this machine's kernels, and what it is valid for."""

    machine_key: str  # the machine and TensorFlow it was measured on (`machine_key`)
    measured_at: str
    seconds: float
    timings: list[KernelTiming]

    def speedup(self, dtype: str, device: str, xla: bool = False) -> float | None:
        """Geometric mean over the kernels of `dtype`'s speed relative to float32 in the same
        XLA mode (its control): the precision's own effect."""
        ratios = [t.ratio_to_float32 for t in self._of(dtype, device, xla)]
        return statistics.geometric_mean(ratios) if ratios else None

    def xla_gain(self, dtype: str, device: str) -> float | None:
        """Geometric mean over the kernels of XLA's effect on `dtype`: its median without XLA
        over its median with (above 1: faster with XLA)."""
        plain = {t.kernel: t.ms_per_call for t in self._of(dtype, device, False)}
        ratios = [plain[t.kernel] / t.ms_per_call for t in self._of(dtype, device, True)
                  if t.kernel in plain]
        return statistics.geometric_mean(ratios) if ratios else None

    def describe(self, dtype: str, device: str, xla: bool = False) -> str:
        """'bfloat16 kernels run 0.80x float32 on CPU:0 (matmul 0.80x, dense 0.78x, conv
        0.54x)'; with `xla`, both sides compiled with XLA."""
        parts = [f"{t.kernel.split()[0]} {times(t.ratio_to_float32)}" for t in self._of(dtype, device, xla)]
        mode = " with XLA" if xla else ""
        return (f"{dtype} kernels{mode} run {times(self.speedup(dtype, device, xla))} float32{mode} "
                f"on {device.strip('/')} ({', '.join(parts)})")

    def slowest(self, dtype: str, device: str, xla: bool = False) -> KernelTiming | None:
        """`dtype`'s kernel slowest against float32 (in the same XLA mode), if measured."""
        return min(self._of(dtype, device, xla), key=lambda t: t.ratio_to_float32, default=None)

    def _of(self, dtype: str, device: str, xla: bool) -> list[KernelTiming]:
        """`dtype`'s timings against float32 (in that XLA mode) on `device`."""
        return [t for t in self.timings
                if (t.device, t.dtype, t.xla) == (device, dtype, xla) and t.ratio_to_float32]


def times(ratio: float) -> str:
    """A ratio as said: 0.80x, and a collapse in its own digits (0.0012x, never 0.00x)."""
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


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


def measure(tf, devices: list[str], dtypes: tuple[str, ...] = TIMED_DTYPES, scale: float = 1.0,
            budget_s: float = ROUND_BUDGET_S,
            xla_modes: tuple[bool, ...] = (False,)) -> list[KernelTiming]:
    """Time every kernel in every dtype (and XLA mode) on every device, interleaved; each
    ratio is against float32 in the same XLA mode."""
    import numpy as np

    timings: list[KernelTiming] = []
    settings = [(dtype, xla) for xla in xla_modes for dtype in dtypes]
    for device in devices:
        for name, flops, shapes, fn in _kernels(tf, scale):
            calls: dict[tuple[str, bool], tuple[Callable, tuple]] = {}
            with tf.device(device):
                for dtype, xla in settings:
                    inputs = tuple(tf.cast(tf.random.normal(shape), dtype) for shape in shapes)
                    compiled = tf.function(fn, autograph=False, jit_compile=xla)
                    compiled.get_concrete_function(*inputs)  # trace outside the timing
                    if xla:
                        compiled(*inputs).numpy()  # and compile: the warm-up then times a call
                    calls[dtype, xla] = (compiled, inputs)
                seconds = interleaved(calls, budget_s)
            medians = {setting: statistics.median(s) for setting, s in seconds.items()}
            for (dtype, xla), samples in seconds.items():
                ms = sorted(1e3 * s for s in samples)
                control = medians.get(("float32", xla))
                timings.append(KernelTiming(
                    device=device, kernel=name, dtype=dtype, xla=xla,
                    ms_per_call=statistics.median(ms), ms_p10=float(np.percentile(ms, 10)),
                    ms_p90=float(np.percentile(ms, 90)), tflops=flops / medians[dtype, xla] / 1e12,
                    calls=len(ms), cut_short=len(ms) == 1,
                    ratio_to_float32=control / medians[dtype, xla] if control else None))
    return timings


def interleaved(calls: dict, budget_s: float) -> dict:
    """Seconds per call of each setting, in rounds that visit every setting in turn
    (rotating which goes first), until the budget is spent; one too slow to repeat stops
    early."""
    samples: dict = {setting: [] for setting in calls}
    active = list(calls)
    for setting, (fn, inputs) in calls.items():  # warm-up: allocations, primitives, XLA compiling
        began = time.perf_counter()
        fn(*inputs).numpy()
        if time.perf_counter() - began > 4 * CUT_SHORT_S:  # a collapse (0.001x): its one call
            samples[setting].append(time.perf_counter() - began)
            active.remove(setting)
    start = time.perf_counter()
    rounds = 0
    while active and (rounds < 3 or time.perf_counter() - start < budget_s):
        order = active[rounds % len(active):] + active[:rounds % len(active)]
        for setting in order:
            fn, inputs = calls[setting]
            began = time.perf_counter()
            fn(*inputs).numpy()
            samples[setting].append(time.perf_counter() - began)
            if samples[setting][-1] > CUT_SHORT_S:
                active.remove(setting)
        rounds += 1
    return samples


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
    """The dtypes measured on the device that would train: on a GPU the ones it has fast
    units for; on a CPU all three (float16 too: whether it needs XLA is measured, not
    assumed)."""
    if not machine.gpus:
        return TIMED_DTYPES
    gpu = machine.gpus[0]
    return ("float32", "float16") + (("bfloat16",) if gpu.fast_bfloat16 else ())


def decision_xla_modes(machine: Machine) -> tuple[bool, ...]:
    """On a CPU, each dtype with and without XLA: XLA's CPU code was measured both faster
    (an AVX2-only CPU, fusing elementwise ops) and far slower (bfloat16 without oneDNN's
    matrix units) than TensorFlow's kernels. On an accelerator, as TensorFlow runs it."""
    return (False,) if machine.gpus else (False, True)


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
    if not all(speeds.speedup(d, device, xla) for d in decision_dtypes(machine)
               for xla in decision_xla_modes(machine)):
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
    write_cache(cache_path(machine), json.dumps(speeds.model_dump(), indent=1))
    return speeds


def measured_kernels(tf, machine: Machine, status: Callable[[str], object] | None = None,
                     said: list[str] | None = None) -> KernelSpeeds | None:
    """This machine's kernel speeds: cached, or measured now (10-30 s) and cached. None
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
            timings = measure(tf, [decision_device(machine)], decision_dtypes(machine),
                              xla_modes=decision_xla_modes(machine))
    except Exception as exc:  # a broken device or kernel: fall back to the rules, never crash a run
        if said is not None:
            said.append(f"this machine's kernels could not be measured ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:160] if str(exc) else 'no message'}); the "
                        "policy is chosen by the hardware's flags instead")
        return None
    return store_kernels(machine, timings, time.perf_counter() - started)
