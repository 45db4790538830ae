"""How fast each dtype and math library really is on this machine: kernels timed, cached,
and summarised.

One kernel per kind of layer (`kernel_calls.kernels`): a plain matmul, a fused dense layer
(MatMul+BiasAdd+ReLU, the op that collapses for float16 on oneDNN CPUs), a 3x3 convolution, a
Conv1D, an LSTM's steps and scaled dot-product attention, so a model is read by the kinds it
has (`kind_shares`: a Conv1D autoencoder ran bfloat16 at 0.15x where matrix products measured
0.95x). On a CPU each is timed per dtype as TensorFlow runs it and compiled with XLA, and
with the other math library in a peer process (oneDNN where TensorFlow leaves it off, as on
AVX2-only CPUs, where float32 ResNet50 ran 3.2x faster with it; Eigen where it turns it on):
precision, XLA and the library are axes of their own, and each 16-bit figure is read against
float32 in the same mode and library (its control). The settings of a kernel are timed in
interleaved rounds so that a machine whose speed drifts slows every side alike. One whose
call takes over `CUT_SHORT_S` is not repeated (cut short), so a pathological one (float16
through oneDNN's reference kernel) costs one call, not minutes.

CPU flags do not say which policy is fast: on a Xeon with AMX-BF16, oneDNN's bfloat16
matmuls run several times float32; with AVX512_BF16 alone they were measured 0.5-0.8x; on an
AVX2-only CPU TensorFlow leaves oneDNN off and float16 without XLA ran at float32's speed. So
`policy: auto`, whether float16 needs XLA, plan's candidates and `check-gpu` decide on this
measurement (`policy.recommend`). It is made once per machine and cached (`measured_kernels`),
keyed by the CPU, its flags, the GPUs and TensorFlow (one file holds both libraries): a
measurement never outlives the machine or the TensorFlow it describes.
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

from pydantic import ValidationError

from mptrain.hardware.kernel_calls import Peer, kernels, prepared_calls
from mptrain.hardware.machine import LIBRARY_NAMES, Machine, library_of
from mptrain.record import FrozenRecord, write_cache

TIMED_DTYPES = ("float32", "float16", "bfloat16")
CACHE_ENV = "MPTRAIN_CACHE_DIR"
CACHE_VERSION = 2  # 2: both math libraries and six kernel kinds (2026-12-05)
ROUND_BUDGET_S = 1.0  # per kernel, all its settings together (9 on a CPU: 3 rounds or more)
CUT_SHORT_S = 0.5  # a single call slower than this is not repeated
# The kinds whose figures stand for "this machine's kernels" where no model is named (`policy:
# auto`, check-gpu's recommendation): the matrix products and convolutions most models run.
GENERAL_KINDS = ("matmul", "dense", "conv2d")
KINDS = (*GENERAL_KINDS, "conv1d", "recurrent", "attention")  # every kind `kernel_calls.kernels` times
# the kinds a figure reads: some (each alike), or a model's with their FLOP shares (`kind_shares`)
Kinds = tuple[str, ...] | dict[str, float]
# Keras layer classes → the kernel kind that times their math (`kind_of`)
LAYER_KINDS = {
    "Dense": "dense", "EinsumDense": "dense",
    "Conv2D": "conv2d", "DepthwiseConv2D": "conv2d", "SeparableConv2D": "conv2d",
    "Conv2DTranspose": "conv2d", "Conv3D": "conv2d",
    "Conv1D": "conv1d", "Conv1DTranspose": "conv1d", "SeparableConv1D": "conv1d",
    "DepthwiseConv1D": "conv1d",
    "LSTM": "recurrent", "GRU": "recurrent", "SimpleRNN": "recurrent", "Bidirectional": "recurrent",
    "MultiHeadAttention": "attention", "GroupedQueryAttention": "attention", "Attention": "attention",
}


class KernelTiming(FrozenRecord):
    device: str
    kernel: str
    kind: str = "matmul"  # what it stands for: matmul, dense, conv2d, conv1d, recurrent, attention
    dtype: str
    xla: bool = False  # compiled with XLA (`tf.function(jit_compile=True)`)
    # the CPU's math library: True oneDNN, False Eigen; None where it does not apply (an
    # accelerator, or XLA, which compiles its own kernels)
    onednn: bool | None = None
    ms_per_call: float  # median over the calls
    ms_p10: float
    ms_p90: float
    tflops: float
    calls: int
    cut_short: bool
    ratio_to_float32: float | None  # float32's median (same XLA mode and library) / this one's: > 1 is faster

    @property
    def setting(self) -> str:
        """The dtype as a candidate spells its XLA and library: `bfloat16+xla`, `float32+eigen`."""
        library = "" if self.onednn is None else f"+{library_of(self.onednn)}"
        return self.dtype + ("+xla" if self.xla else "") + library


class KernelSpeeds(FrozenRecord):
    """One measurement of this machine's kernels, and what it is valid for. On a CPU it holds
    both math libraries (`onednn` True and False: the other one timed by a peer process in
    the same rounds), read as the library of the process reading it (`onednn`, set by
    `cached_kernels`): `speedup` is that library's, `library_gain` the other's over it."""

    machine_key: str  # the machine and TensorFlow it was measured on (`plan_key`)
    measured_at: str
    seconds: float
    # the library of the process that reads it (set by `cached_kernels`; None: none, as on an
    # accelerator, where only timings without a library are read)
    onednn: bool | None = None
    timings: list[KernelTiming]
    peer_failed: str | None = None  # why the other library could not be timed

    def speedup(self, dtype: str, device: str, xla: bool = False,
                kinds: Kinds = GENERAL_KINDS, onednn: bool | None = None) -> float | None:
        """`dtype`'s speed relative to float32 in the same XLA mode and library (its
        control), over the kernels of `kinds` (`mean_over`): the precision's own effect.
        `onednn`: that library's (default: the reader's)."""
        return mean_over([(t.kind, t.ratio_to_float32) for t in self._of(dtype, device, xla, kinds, onednn)],
                         kinds)

    def xla_gain(self, dtype: str, device: str, kinds: Kinds = GENERAL_KINDS) -> float | None:
        """XLA's effect on `dtype` over the kernels of `kinds`: its median without XLA (in
        the reader's library) over its median with (above 1: faster with XLA)."""
        return mean_over(self._elsewhere(dtype, device, kinds, xla=True), kinds)

    def library_gain(self, dtype: str = "float32", kinds: Kinds = GENERAL_KINDS) -> float | None:
        """The other math library's speed over the reader's for `dtype`, over the kernels (of
        `kinds`) both timed: above 1, the other library is faster here."""
        if self.onednn is None:
            return None
        return mean_over(self._elsewhere(dtype, "/CPU:0", kinds, onednn=not self.onednn), kinds)

    def describe(self, dtype: str, device: str, xla: bool = False,
                 kinds: Kinds = GENERAL_KINDS, onednn: bool | None = None) -> str:
        """'bfloat16 kernels run 0.80x float32 on CPU:0 (matmul 0.80x, dense 0.78x, conv2d
        0.54x)'; with `xla`, both sides compiled with XLA; with another `onednn` than the
        reader's, that library's kernels."""
        parts = [f"{t.kind} {times(t.ratio_to_float32)}" for t in self._of(dtype, device, xla, kinds, onednn)]
        mode = " with XLA" if xla else ""
        library = ("" if onednn is None or onednn == self.onednn or xla
                   else f" with {LIBRARY_NAMES[library_of(onednn)]}")
        return (f"{dtype} kernels{mode}{library} run "
                f"{times(self.speedup(dtype, device, xla, kinds, onednn))} float32{mode}{library} "
                f"on {device.strip('/')} ({', '.join(parts)})")

    def describe_library(self, kinds: Kinds = GENERAL_KINDS) -> str:
        """'float32 kernels with oneDNN run 3.10x Eigen's here (matmul 1.21x, conv2d 4.02x, ...)'."""
        if (gain := self.library_gain("float32", kinds)) is None:
            return "the other math library's kernels were not measured"
        other = not self.onednn
        parts = [f"{kind} {times(ratio)}"
                 for kind, ratio in self._elsewhere("float32", "/CPU:0", kinds, onednn=other)]
        return (f"float32 kernels with {LIBRARY_NAMES[library_of(other)]} run {times(gain)} "
                f"{LIBRARY_NAMES[library_of(not other)]}'s here ({', '.join(parts)})")

    def slowest(self, dtype: str, device: str) -> KernelTiming | None:
        """`dtype`'s kernel (of the general kinds, without XLA) slowest against float32, if
        measured."""
        return min(self._of(dtype, device, False), key=lambda t: t.ratio_to_float32, default=None)

    def by_kind(self, dtype: str, device: str) -> list[KernelTiming]:
        """`dtype`'s timing of every kind of kernel (no XLA, the reader's library)."""
        return self._of(dtype, device, False, KINDS)

    def fastest_product(self, dtypes: tuple[str, ...]) -> KernelTiming | None:
        """The fastest matrix product measured in any of `dtypes`, with either library or
        XLA: this machine's peak as measured (a summary's MFU reads against it)."""
        products = [t for t in self.timings if t.kind in ("matmul", "dense") and t.dtype in dtypes
                    and t.device == "/CPU:0"]
        return max(products, key=lambda t: t.tflops, default=None)

    def _elsewhere(self, dtype: str, device: str, kinds: Kinds, xla: bool = False,
                   onednn: bool | None = None) -> list[tuple[str, float]]:
        """(kind, ratio) of each of `dtype`'s kernels timed both as the reader runs it (no XLA,
        its library) and with `xla` or in the `onednn` library: its median here over its
        median there (above 1: faster there)."""
        here = {t.kernel: t.ms_per_call for t in self._of(dtype, device, False, kinds)}
        return [(t.kind, here[t.kernel] / t.ms_per_call)
                for t in self._of(dtype, device, xla, kinds, onednn) if t.kernel in here]

    def _of(self, dtype: str, device: str, xla: bool, kinds: Kinds = GENERAL_KINDS,
            onednn: bool | None = None) -> list[KernelTiming]:
        """`dtype`'s timings against float32 (in that XLA mode and library) on `device`, of
        `kinds` where any of them was timed (else of the general kinds)."""
        library = self.onednn if onednn is None else onednn
        timed = [t for t in self.timings
                 if (t.device, t.dtype, t.xla) == (device, dtype, xla) and t.ratio_to_float32
                 and t.onednn in (None, library)]
        return [t for t in timed if t.kind in kinds] or [t for t in timed if t.kind in GENERAL_KINDS]


def kind_of(layer_type: type) -> str | None:
    """The kernel kind a layer's class runs: the first class in its ancestry that
    `LAYER_KINDS` names (mptrain's Float32SoftmaxAttention is a MultiHeadAttention)."""
    return next((LAYER_KINDS[c.__name__] for c in layer_type.__mro__ if c.__name__ in LAYER_KINDS), None)


def kind_shares(layers: list[tuple[type, int]]) -> dict[str, float]:
    """Each kernel kind's share of a model's FLOPs, from its layers' classes and FLOPs
    (`model.flops.forward_profile`), the kinds weighing as the model's time does: ResNet50's
    convolutions are 99% of it, and a mean over kinds that weighed its last Dense as much read
    XLA at 0.89x where the model ran 0.2x. Kinds with no FLOPs counted (a layer TensorFlow's
    graph does not size) weigh alike; none found: empty (the general kinds are read)."""
    flops: dict[str, int] = {}
    for layer_type, count in layers:
        if (kind := kind_of(layer_type)) is not None:
            flops[kind] = flops.get(kind, 0) + count
    total = sum(flops.values())
    return {kind: (count / total if total else 1 / len(flops)) for kind, count in sorted(flops.items())}


def mean_over(ratios: list[tuple[str, float]], kinds: Kinds) -> float | None:
    """Ratios of kernels (each with its kind) as one figure: where `kinds` weighs them (a
    model's FLOP shares: `kind_shares`), the model's time at the one speed over its time at
    the other, each kind's ratio (geometric, over its kernels) weighed by its share; else
    their geometric mean."""
    if not ratios:
        return None
    if not isinstance(kinds, dict) or not any(kind in kinds for kind, _ in ratios):
        return statistics.geometric_mean([r for _, r in ratios])
    by_kind: dict[str, list[float]] = {}
    for kind, ratio in ratios:
        by_kind.setdefault(kind, []).append(ratio)
    weight = {kind: kinds.get(kind, 0.0) for kind in by_kind}
    total = sum(weight.values())
    return total / sum(w / statistics.geometric_mean(by_kind[k]) for k, w in weight.items() if w)


def times(ratio: float) -> str:
    """A ratio as said: 0.80x, and a collapse in its own digits (0.0012x, never 0.00x)."""
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def measure(tf, devices: list[str], settings: list[tuple[str, bool]] | None = None,
            scale: float = 1.0, budget_s: float = ROUND_BUDGET_S,
            peer: Peer | None = None) -> list[KernelTiming]:
    """Time every kernel in every setting (dtype, XLA; default: each dtype without XLA) on
    every device, interleaved; each ratio is against float32 in the same XLA mode and
    library. On the CPU, `peer` is a process running the other math library than this one's
    (`kernel_calls.Peer`), whose calls (each dtype, no XLA) take their turns in the same
    rounds."""
    import numpy as np

    onednn = None if peer is None else not peer.onednn  # this process's library
    timings: list[KernelTiming] = []
    settings = settings or [(dtype, False) for dtype in TIMED_DTYPES]
    dtypes = tuple(dict.fromkeys(dtype for dtype, _ in settings))
    for device in devices:
        on_cpu = device == "/CPU:0"
        for index, (name, kind, flops, shapes, fn) in enumerate(kernels(tf, scale)):
            calls: dict = prepared_calls(tf, fn, shapes, settings, device)
            if on_cpu and peer is not None:
                calls.update(peer.calls(index, dtypes))
            seconds = {setting: s for setting, s in interleaved(calls, budget_s).items() if s}
            medians = {setting: statistics.median(s) for setting, s in seconds.items()}
            for setting, samples in seconds.items():
                dtype, xla, *by_peer = setting  # a peer's setting: (dtype, False, PEER)
                library = None if not on_cpu or xla or onednn is None else onednn != bool(by_peer)
                ms = sorted(1e3 * s for s in samples)
                control = medians.get(("float32", xla, *by_peer))
                timings.append(KernelTiming(
                    device=device, kernel=name, kind=kind, dtype=dtype, xla=xla, onednn=library,
                    ms_per_call=statistics.median(ms), ms_p10=float(np.percentile(ms, 10)),
                    ms_p90=float(np.percentile(ms, 90)), tflops=flops / medians[setting] / 1e12,
                    calls=len(ms), cut_short=len(ms) == 1,
                    ratio_to_float32=control / medians[setting] if control else None))
    return timings


def measure_machine(tf, machine: Machine, devices: list[str], dtypes: tuple[str, ...],
                    xla_modes: tuple[bool, ...], scale: float = 1.0) -> tuple[list[KernelTiming], str | None]:
    """`measure` on this machine, with a peer process timing the CPU's other math library
    (oneDNN where TensorFlow leaves it off, Eigen where it turns it on); the timings, and why
    the other library has none when its peer failed."""
    peer = None if machine.accelerated else Peer.start(not machine.onednn, dtypes, scale)
    try:
        settings = [(dtype, xla) for xla in xla_modes for dtype in dtypes]
        timings = measure(tf, devices, settings, scale, peer=peer)
    finally:
        if peer is not None:
            peer.close()
    return timings, peer.failed if peer is not None else None


def interleaved(calls: dict, budget_s: float) -> dict:
    """Seconds per call of each setting, in rounds that visit every setting in turn
    (rotating which goes first), until the budget is spent; one too slow to repeat stops
    early. A call is a (function, inputs) pair, or a `kernel_peer.PeerCall` (a call the peer
    process makes and times itself)."""
    samples: dict = {setting: [] for setting in calls}
    active = list(calls)
    for setting, call in calls.items():  # warm-up: allocations, primitives, XLA compiling
        took = _call(call)
        if took is None or took > 4 * CUT_SHORT_S:  # a collapse (0.001x): its one call
            samples[setting] += [took] if took is not None else []
            active.remove(setting)
    start = time.perf_counter()
    rounds = 0
    while active and (rounds < 3 or time.perf_counter() - start < budget_s):
        order = active[rounds % len(active):] + active[:rounds % len(active)]
        for setting in order:
            took = _call(calls[setting])
            if took is not None:
                samples[setting].append(took)
            if took is None or took > CUT_SHORT_S:
                active.remove(setting)
        rounds += 1
    return samples


def _call(call) -> float | None:
    """Seconds one call took: timed here, or by the peer that made it (None: it failed)."""
    if hasattr(call, "seconds"):
        return call.seconds()
    fn, inputs = call
    began = time.perf_counter()
    try:
        fn(*inputs).numpy()
    except Exception:  # a kernel that fails when it runs is left out, not the whole check
        return None
    return time.perf_counter() - began


def bench_devices(tf) -> list[str]:
    """CPU:0 plus every visible GPU."""
    return ["/CPU:0"] + [f"/GPU:{i}" for i, _ in enumerate(tf.config.list_physical_devices("GPU"))]


# --- the cached measurement `policy: auto` decides on ------------------------------------


def plan_key(machine: Machine) -> str:
    """What a plan describes: CPU model and flags, GPUs, TensorFlow; not the math library this
    process runs: a plan's pick names its own (`train.math_library`), which a run that follows
    it runs whatever its shell's TF_ENABLE_ONEDNN_OPTS says."""
    gpus = ", ".join(f"{g.name} {g.compute_capability}" for g in machine.gpus) or "no GPU"
    flags = hashlib.sha256(" ".join(sorted(machine.cpu.flags)).encode()).hexdigest()[:12]
    return f"{machine.cpu.model} (flags {flags}); {gpus}; TensorFlow {machine.tensorflow_version}"


def cache_dir() -> Path:
    """$MPTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/mptrain, else ~/.cache/mptrain."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mptrain"


def cache_path(machine: Machine) -> Path:
    """One file for both math libraries (a process with either reads it): keyed by the
    machine and TensorFlow (`plan_key`) and the measurement's own version."""
    digest = hashlib.sha256(f"v{CACHE_VERSION} {plan_key(machine)}".encode()).hexdigest()[:16]
    return cache_dir() / f"kernels-{digest}.json"


def decision_dtypes(machine: Machine) -> tuple[str, ...]:
    """The dtypes measured on the device that would train: on a GPU the ones it has fast
    units for; on a CPU all three (float16 too: whether it needs XLA is measured, not
    assumed)."""
    if not machine.gpus:
        return TIMED_DTYPES
    return ("float32", "float16") + (("bfloat16",) if machine.gpus[0].fast_bfloat16 else ())


def decision_xla_modes(machine: Machine) -> tuple[bool, ...]:
    """On a CPU, each dtype with and without XLA: XLA's CPU code was measured both faster
    (an AVX2-only CPU, fusing elementwise ops) and far slower (bfloat16 without oneDNN's
    matrix units) than TensorFlow's kernels. On an accelerator, as TensorFlow runs it."""
    return (False,) if machine.gpus else (False, True)


def decision_device(machine: Machine) -> str:
    return "/GPU:0" if machine.gpus else "/CPU:0"


def cached_kernels(machine: Machine) -> KernelSpeeds | None:
    """The cached measurement for exactly this machine and TensorFlow, read as this
    process's math library (`KernelSpeeds.onednn`), if it holds that library's timings."""
    try:
        speeds = KernelSpeeds.model_validate_json(cache_path(machine).read_text())
    except (OSError, ValueError, ValidationError):
        return None
    if speeds.machine_key != plan_key(machine):
        return None
    speeds = speeds.model_copy(update={"onednn": None if machine.accelerated else machine.onednn})
    complete = all(speeds.speedup(d, decision_device(machine), xla) for d in decision_dtypes(machine)
                   for xla in decision_xla_modes(machine))
    return speeds if complete else None


def store_kernels(machine: Machine, timings: list[KernelTiming], seconds: float,
                  keep: bool = True, peer_failed: str | None = None) -> KernelSpeeds:
    """The measurement, written to this machine's cache when `keep` (kernels of another
    size than `policy: auto` measures are shown, not kept)."""
    speeds = KernelSpeeds(machine_key=plan_key(machine),
                          measured_at=datetime.now().isoformat(timespec="seconds"),
                          seconds=round(seconds, 2), timings=timings, peer_failed=peer_failed,
                          onednn=None if machine.accelerated else machine.onednn)
    if keep:
        write_cache(cache_path(machine), json.dumps(speeds.model_dump(), indent=1))
    return speeds


def measured_kernels(tf, machine: Machine, status: Callable[[str], object] | None = None,
                     said: list[str] | None = None) -> KernelSpeeds | None:
    """This machine's kernel speeds: cached, or measured now (half a minute or so: each
    kernel kind in each dtype, with and without XLA, and the other math library) and cached.
    None when the measurement fails: the caller falls back to rules on the hardware's flags,
    and `said` is told why. `status(text)` is a context manager that shows progress while
    measuring."""
    speeds = cached_kernels(machine)
    if speeds is not None or machine.tpu:
        return speeds
    saying = ("measuring this machine's float32 and 16-bit kernels" +
              ("" if machine.accelerated else ", with oneDNN and with Eigen") + " (once; cached)…")
    try:
        with status(saying) if status is not None else nullcontext():
            return fresh_kernels(tf, machine, [decision_device(machine)], decision_dtypes(machine),
                                 decision_xla_modes(machine))
    except Exception as exc:  # a broken device or kernel: fall back to the rules, never crash a run
        if said is not None:
            said.append(f"this machine's kernels could not be measured ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:160] if str(exc) else 'no message'}); the "
                        "policy is chosen by the hardware's flags instead")
        return None


def fresh_kernels(tf, machine: Machine, devices: list[str], dtypes: tuple[str, ...],
                  xla_modes: tuple[bool, ...], scale: float = 1.0) -> KernelSpeeds:
    """This machine's kernels measured now (`measure_machine`), and cached when measured at
    the standard scale with both libraries: kernels of another size are shown, not kept, and
    a measurement whose peer failed is used, not kept (the next use measures both again)."""
    started = time.perf_counter()
    timings, peer_failed = measure_machine(tf, machine, devices, dtypes, xla_modes, scale)
    return store_kernels(machine, timings, time.perf_counter() - started,
                         keep=scale == 1.0 and peer_failed is None, peer_failed=peer_failed)
