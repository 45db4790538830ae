"""Facts about this machine: CPU, GPUs, TPU, and what TensorFlow can use on them.

Facts only: what to do with them (the recommended policy) lives in `precision/policy.py`, what they
are worth in FLOP/s in `model/flops.py`, and the `check-gpu` report in `precision/check.py`.

Detection is split in two: pure functions over plain inputs (cpuinfo text, TensorFlow's
device-details dicts) that tests can feed with any machine, and `probe()`, which reads this one.
"""

from __future__ import annotations

import os
import platform
import subprocess
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

# cpuinfo flag → the name people search for. Ordered from general to specific.
CPU_FEATURES = {
    "avx512f": "AVX-512",
    "avx512_bf16": "AVX512_BF16",
    "amx_bf16": "AMX-BF16",
    "avx512_fp16": "AVX512_FP16",
    "amx_fp16": "AMX-FP16",
}


@dataclass(frozen=True)
class CpuInfo:
    """The CPU as this process may use it: `logical_cpus` and `physical_cores` count only the
    CPUs in the process's affinity mask (a container or `taskset` may allow fewer than exist)."""

    model: str
    physical_cores: int
    logical_cpus: int
    flags: frozenset[str] = frozenset()
    mhz: float | None = None
    family: int | None = None  # x86's `cpu family` and `model`: a hypervisor may name every
    model_number: int | None = None  # EPYC "AMD EPYC", and these still tell Zen 2 from Zen 4

    @property
    def name(self) -> str:
        """The model as said: "AMD EPYC (family 23, model 49)"."""
        if self.family is None or self.model_number is None:
            return self.model
        return f"{self.model} (family {self.family}, model {self.model_number})"

    @property
    def features(self) -> dict[str, bool]:
        return {label: flag in self.flags for flag, label in CPU_FEATURES.items()}

    @property
    def has_bf16_matrix_units(self) -> bool:
        """AMX-BF16 tiles or AVX512_BF16 dot products: oneDNN runs bf16 matmuls fast on these."""
        return "amx_bf16" in self.flags or "avx512_bf16" in self.flags


@dataclass(frozen=True)
class GpuInfo:
    name: str
    compute_capability: tuple[int, int] | None
    memory_bytes: int | None = None

    def _at_least(self, major: int, minor: int) -> bool:
        return self.compute_capability is not None and self.compute_capability >= (major, minor)

    @property
    def float16_tensor_cores(self) -> bool:
        return self._at_least(7, 0)

    @property
    def fast_bfloat16(self) -> bool:
        return self._at_least(8, 0)

    tf32_by_default = fast_bfloat16  # Ampere (8.0) brought both

    @property
    def float8(self) -> bool:
        return self._at_least(8, 9)

    def describe(self) -> str:
        if self.compute_capability is None:
            return f"{self.name}, no compute capability (probably not an Nvidia GPU)"
        major, minor = self.compute_capability
        return f"{self.name}, compute capability {major}.{minor}"


@dataclass(frozen=True)
class Machine:
    cpu: CpuInfo
    gpus: tuple[GpuInfo, ...] = ()
    tpu: bool = False
    tensorflow_version: str | None = None
    keras_version: str | None = None
    onednn: bool = True
    xla: bool | None = None
    tf32_enabled: bool | None = None

    @property
    def onednn_bfloat16(self) -> bool:
        """oneDNN computes the CPU's bfloat16 ops: it is on, and takes bfloat16 on this CPU
        (`ONEDNN_BFLOAT16_FLAGS`); else bfloat16 runs through Eigen."""
        return self.onednn and bool(ONEDNN_BFLOAT16_FLAGS & self.cpu.flags)

    @property
    def accelerated(self) -> bool:
        """A GPU or TPU does the math (else the CPU does)."""
        return bool(self.gpus) or self.tpu

    @property
    def device_label(self) -> str:
        if self.tpu:
            return "TPU"
        if self.gpus:
            return f"GPU: {self.gpus[0].name}"
        return f"CPU: {self.cpu.name}"

    @property
    def memory_device(self) -> str:
        """The device whose allocator statistics describe a run's memory."""
        return "GPU:0" if self.gpus else "CPU:0"


def parse_cpuinfo(text: str, allowed_cpus: set[int] | None = None) -> CpuInfo:
    """CpuInfo from /proc/cpuinfo text, counting only the logical CPUs in `allowed_cpus`
    (default: all listed). Physical cores are distinct (physical id, core id) pairs, because
    hyper-threads share one core's FMA units and AMX tiles."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    model, flags, mhz, family, number = "", frozenset(), None, None, None
    cores: set[tuple[str, str]] = set()
    logical = 0
    for index, block in enumerate(blocks):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip().lower(), value.strip())
        processor = int(fields["processor"]) if fields.get("processor", "").isdigit() else index
        if allowed_cpus is not None and processor not in allowed_cpus:
            continue
        logical += 1
        cores.add((fields.get("physical id", "0"), fields.get("core id", str(processor))))
        model = model or fields.get("model name") or fields.get("cpu model") or fields.get("hardware", "")
        flags = flags or frozenset((fields.get("flags") or fields.get("features") or "").split())
        if family is None and fields.get("cpu family", "").isdigit() and fields.get("model", "").isdigit():
            family, number = int(fields["cpu family"]), int(fields["model"])
        if mhz is None and fields.get("cpu mhz"):
            with suppress(ValueError):
                mhz = float(fields["cpu mhz"])
    fallback = len(allowed_cpus) if allowed_cpus else (os.cpu_count() or 1)
    return CpuInfo(
        model=model or platform.processor() or "unknown CPU",
        physical_cores=len(cores) or fallback,
        logical_cpus=logical or fallback,
        flags=flags,
        mhz=mhz,
        family=family,
        model_number=number,
    )


def gpu_from_details(details: dict, memory_bytes: int | None = None) -> GpuInfo:
    """GpuInfo from `tf.config.experimental.get_device_details(gpu)`."""
    cc = details.get("compute_capability")
    return GpuInfo(
        name=details.get("device_name", "Unknown GPU"),
        compute_capability=tuple(cc) if cc else None,
        memory_bytes=memory_bytes,
    )


def probe_cpu() -> CpuInfo:
    """This machine's CPU; without /proc/cpuinfo (macOS, Windows) the features stay unknown."""
    path = Path("/proc/cpuinfo")
    text = path.read_text() if path.is_file() else ""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return parse_cpuinfo(text, allowed)


# TensorFlow turns oneDNN on by default on Linux for CPUs with any of these (its
# `DefaultOneDnnPolicy`, tensorflow/core/util/util.cc): an AVX2-only CPU (AMD EPYC Zen 2 and
# Zen 3) runs without it.
ONEDNN_DEFAULT_FLAGS = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                                  "amx_bf16"})
# oneDNN's ops take bfloat16 only on CPUs with one of these (`IsBF16SupportedByOneDNNOnThisCPU`,
# the same file); elsewhere bfloat16 runs through Eigen even with oneDNN on (`ONEDNN_VERBOSE=1`
# on an AVX2-only EPYC with TF_ENABLE_ONEDNN_OPTS=1: float32 primitives, no bf16 one).
ONEDNN_BFLOAT16_FLAGS = frozenset({"avx512f", "avx_ne_convert"})


ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"  # read once, as TensorFlow starts
# `train.math_library` → the variable's value (default: the environment's own, or TensorFlow's rule)
LIBRARY_SETTINGS = {"onednn": "1", "eigen": "0"}
LIBRARY_NAMES = {"onednn": "oneDNN", "eigen": "Eigen"}  # oneDNN off: TensorFlow's own Eigen kernels


def library_environment(library: str) -> dict[str, str]:
    """What TensorFlow must read as it starts to run `library` (`train.math_library`)."""
    return {ONEDNN_ENV: LIBRARY_SETTINGS[library]} if library in LIBRARY_SETTINGS else {}


def library_of(onednn: bool) -> str:
    """The `train.math_library` value that runs this state: onednn, or eigen."""
    return "onednn" if onednn else "eigen"


def _onednn_setting() -> bool | None:
    """TF_ENABLE_ONEDNN_OPTS as TensorFlow reads it (0/false/1/true); None: not set."""
    setting = os.environ.get(ONEDNN_ENV, "").strip().lower()
    return setting in ("1", "true") if setting in ("0", "false", "1", "true") else None


def onednn_by_default(flags: frozenset[str]) -> bool:
    """Whether TensorFlow turns oneDNN on for this CPU when nobody says (its own rule)."""
    return platform.system() == "Linux" and bool(ONEDNN_DEFAULT_FLAGS & flags)


def onednn_enabled(flags: frozenset[str]) -> bool:
    """Whether TensorFlow runs oneDNN on this CPU, known before it starts: its own rule,
    TF_ENABLE_ONEDNN_OPTS over the default its CPU flags give."""
    setting = _onednn_setting()
    return onednn_by_default(flags) if setting is None else setting


def describe_library(on: bool, flags: frozenset[str], experiment_library: str = "default") -> str:
    """The math library that ran, and what decided it: the experiment's `train.math_library`,
    else the variable or TensorFlow's default for this CPU ('oneDNN (TensorFlow's default on
    this CPU)')."""
    why = (f"train.math_library: {experiment_library}" if experiment_library != "default"
           else _decided_by(on, flags))
    return LIBRARY_NAMES[library_of(on)] + (f" ({why})" if why else "")


def _decided_by(on: bool, flags: frozenset[str]) -> str | None:
    """What set oneDNN's state: the variable, or TensorFlow's default for this CPU (an
    AVX2-only CPU runs without it though nobody turned it off)."""
    setting = _onednn_setting()
    return (f"{ONEDNN_ENV}={int(setting)}" if setting == on else
            "TensorFlow's default on this CPU" if on else
            "TensorFlow's default on a CPU without AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX"
            if on == onednn_by_default(flags) else None)


def describe_onednn(on: bool, flags: frozenset[str]) -> str:
    """oneDNN's state in words, with what decided it (`_decided_by`)."""
    why = _decided_by(on, flags)
    state = ("on" if on else "off") + (f" ({why})" if why else "")
    if on and not ONEDNN_BFLOAT16_FLAGS & flags:
        state += "; 16-bit math runs through Eigen (oneDNN takes bfloat16 and float16 only with AVX-512)"
    return state


def onednn_running() -> bool | None:
    """Whether this process's TensorFlow (imported already) runs oneDNN, as it says itself
    (None: it does not say): what TF_ENABLE_ONEDNN_OPTS and the CPU's flags predict is not
    what a build without oneDNN (or another platform's default) does."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def probe(tf, check_xla: bool = True) -> Machine:
    """Read this machine through TensorFlow (passed in: the caller owns the quiet import)."""
    import keras

    memory = _nvidia_smi_memory()
    gpus = [gpu_from_details(tf.config.experimental.get_device_details(device),
                             memory[index] if index < len(memory) else None)
            for index, device in enumerate(tf.config.list_physical_devices("GPU"))]
    cpu = probe_cpu()
    return Machine(
        cpu=cpu,
        gpus=tuple(gpus),
        tpu=bool(tf.config.list_physical_devices("TPU")),
        tensorflow_version=tf.__version__,
        keras_version=keras.__version__,
        onednn=running if (running := onednn_running()) is not None else onednn_enabled(cpu.flags),
        xla=_xla_works(tf) if check_xla else None,
        # TF32 is a GPU math mode (Ampere and later): on a machine without one it is n/a,
        # whatever TensorFlow's switch says
        tf32_enabled=bool(tf.config.experimental.tensor_float_32_execution_enabled()) if gpus else None,
    )


def _xla_works(tf) -> bool:
    try:
        return float(tf.function(lambda x: x * 2.0, jit_compile=True)(tf.constant(1.0))) == 2.0
    except Exception:  # XLA missing or broken: report it, never crash an info command
        return False


def _nvidia_smi_memory() -> list[int]:
    try:  # no nvidia-smi is an OSError too
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        return [int(float(line)) * 1024 * 1024 for line in out.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


USABLE_FRACTION = 0.8  # of the machine's memory: what training may plan to use
MEMORY_ENV = "MPTRAIN_MEMORY_BYTES"  # the memory mptrain may plan with (a shared machine's share)


def training_memory(machine: Machine) -> tuple[int | None, str]:
    """The memory a run's training state lives in (None: not known), and what it is, said:
    $MPTRAIN_MEMORY_BYTES when set; on a machine with GPUs, the smallest GPU's (TensorFlow
    places a run on a GPU, and each replica keeps a whole copy); else the machine's own."""
    if machine.gpus and _memory_given() is None:
        known = [g.memory_bytes for g in machine.gpus if g.memory_bytes]
        return (min(known) if known else None), "GPU memory"
    return machine_memory_bytes(), "memory here" if _memory_given() is None else f"${MEMORY_ENV}"


def _memory_given() -> int | None:
    value = os.environ.get(MEMORY_ENV, "").strip()
    return int(value) if value.isdigit() else None


def machine_memory_bytes() -> int | None:
    """The machine's memory, or what $MPTRAIN_MEMORY_BYTES says mptrain may use of it."""
    if (given := _memory_given()) is not None:
        return given
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
