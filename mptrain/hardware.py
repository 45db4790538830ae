"""What accelerators and CPU matrix units this machine has, and which policy will be fast on it.

Detection is split in two: pure functions over plain inputs (cpuinfo text, TensorFlow's device
details dicts) that tests can feed with any machine, and `probe()`, which reads this machine.
The recommendation extends the guide's GPU logic to TPUs and to CPUs with bfloat16 matrix units.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
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
    model: str
    cores: int
    flags: frozenset[str] = frozenset()
    mhz: float | None = None

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

    @property
    def tf32_by_default(self) -> bool:
        return self._at_least(8, 0)

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


@dataclass(frozen=True)
class Recommendation:
    policy: str
    reason: str
    warnings: list[str] = field(default_factory=list)


def parse_cpuinfo(text: str, cores: int | None = None) -> CpuInfo:
    """CpuInfo from /proc/cpuinfo text (first processor block is enough on x86 and Arm)."""
    model, flags, mhz = "", frozenset(), None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
        elif key == "cpu mhz" and mhz is None:
            try:
                mhz = float(value)
            except ValueError:
                mhz = None
    return CpuInfo(
        model=model or platform.processor() or "unknown CPU",
        cores=cores or os.cpu_count() or 1,
        flags=flags,
        mhz=mhz,
    )


def gpu_from_details(details: dict, memory_bytes: int | None = None) -> GpuInfo:
    """GpuInfo from `tf.config.experimental.get_device_details(gpu)`."""
    cc = details.get("compute_capability")
    return GpuInfo(
        name=details.get("device_name", "Unknown GPU"),
        compute_capability=tuple(cc) if cc else None,
        memory_bytes=memory_bytes,
    )


def recommend(machine: Machine) -> Recommendation:
    """The policy that will actually be fast here, with the reason (the guide's logic + CPUs)."""
    if machine.tpu:
        return Recommendation(
            "mixed_bfloat16", "TPUs compute in bfloat16 natively; bfloat16 needs no loss scaling"
        )
    if machine.gpus:
        weakest = min(machine.gpus, key=lambda g: g.compute_capability or (0, 0))
        if weakest.fast_bfloat16:
            return Recommendation(
                "mixed_bfloat16",
                f"{weakest.describe()}: Tensor Cores run bfloat16 as fast as float16 (CC >= 8.0), "
                "and bfloat16 needs no loss scaling; mixed_float16 is equally fast",
            )
        if weakest.float16_tensor_cores:
            return Recommendation(
                "mixed_float16",
                f"{weakest.describe()}: float16 Tensor Cores (CC >= 7.0), the guide's up-to-3x case",
            )
        return Recommendation(
            "float32",
            f"{weakest.describe()}: no Tensor Cores (CC < 7.0), so 16-bit math is not faster",
            ["16-bit policies save memory here but will not run faster than float32"],
        )
    cpu = machine.cpu
    if cpu.has_bf16_matrix_units:
        units = "AMX-BF16" if "amx_bf16" in cpu.flags else "AVX512_BF16"
        return Recommendation(
            "mixed_bfloat16",
            f"CPU with {units}: oneDNN runs bfloat16 matmuls on it (measured ~2.6x faster than "
            "float32 on the guide's MLP on a 2-core AMX Xeon)",
            _cpu_float16_warning(),
        )
    return Recommendation(
        "float32",
        "no GPU, no TPU, and the CPU has no bfloat16 matrix units (AMX-BF16 or AVX512_BF16)",
        ["16-bit policies will run slower than float32 on this machine", *_cpu_float16_warning()],
    )


# Dense-matmul FLOP per cycle per core. AVX-512 FP32: 2 FMA ports x 16 lanes x 2 (multiply,
# add). AVX512_BF16 (VDPBF16PS): 2 ports x 16 lanes x 2 pairs x 2. AMX-BF16 (TDPBF16PS): a
# 16x32 by 32x16 tile product (8192 multiply-adds) every 16 cycles.
FLOP_PER_CYCLE = {"avx512_fp32": 64, "avx2_fp32": 32, "avx512_bf16": 128, "amx_bf16": 1024}


def peak_flops(cpu: CpuInfo, compute_dtype: str) -> float | None:
    """This CPU's peak FLOP/s for the dtype: cores x clock x FLOP/cycle (None when unknown).

    The clock is /proc/cpuinfo's "cpu MHz" (the base clock on most VMs): with turbo the real
    peak is higher, so utilisation above 100% means the cores ran faster than that clock.
    float16 has no fast CPU matmul path in TensorFlow and is counted at the fp32 rate.
    """
    if not cpu.mhz or not cpu.flags:
        return None
    if compute_dtype == "bfloat16" and "amx_bf16" in cpu.flags:
        per_cycle = FLOP_PER_CYCLE["amx_bf16"]
    elif compute_dtype == "bfloat16" and "avx512_bf16" in cpu.flags:
        per_cycle = FLOP_PER_CYCLE["avx512_bf16"]
    elif "avx512f" in cpu.flags:
        per_cycle = FLOP_PER_CYCLE["avx512_fp32"]
    elif "avx2" in cpu.flags:
        per_cycle = FLOP_PER_CYCLE["avx2_fp32"]
    else:
        return None
    return cpu.cores * cpu.mhz * 1e6 * per_cycle


def _cpu_float16_warning() -> list[str]:
    return [
        "mixed_float16 on a CPU: oneDNN's float16 MatMul+BiasAdd falls back to a reference kernel "
        "(>100x slower than float32); mptrain turns XLA on for float16 policies on a CPU to avoid it"
    ]


def compatibility_check(gpus: tuple[GpuInfo, ...] | list[GpuInfo]) -> str:
    """The guide's (TensorFlow 2's) 'Mixed precision compatibility check' message for mixed_float16."""
    prefix = "Mixed precision compatibility check (mixed_float16): "
    suffix = (
        "If you will use compatible GPU(s) not attached to this host, e.g. by running a "
        "multi-worker model, you can ignore this warning."
    )
    supported = [g.describe() for g in gpus if g.float16_tensor_cores]
    unsupported = [g.describe() for g in gpus if not g.float16_tensor_cores]
    if unsupported:
        if supported:
            head = ("Some of your GPUs may run slowly with dtype policy mixed_float16 because they "
                    "do not all have compute capability of at least 7.0. Your GPUs:")
        elif len(unsupported) == 1:
            head = ("Your GPU may run slowly with dtype policy mixed_float16 because it does not "
                    "have compute capability of at least 7.0. Your GPU:")
        else:
            head = ("Your GPUs may run slowly with dtype policy mixed_float16 because they do not "
                    "have compute capability of at least 7.0. Your GPUs:")
        listed = "\n".join(f"  {d}" for d in _dedup(supported + unsupported))
        return (f"{prefix}WARNING\n{head}\n{listed}\nSee https://developer.nvidia.com/cuda-gpus "
                f"for a list of GPUs and their compute capabilities.\n{suffix}")
    if not supported:
        return (f"{prefix}WARNING\nThe dtype policy mixed_float16 may run slowly because this "
                "machine does not have a GPU. Only Nvidia GPUs with compute capability of at "
                f"least 7.0 run quickly with mixed_float16.\n{suffix}")
    if len(supported) == 1:
        return (f"{prefix}OK\nYour GPU will likely run quickly with dtype policy mixed_float16 as "
                f"it has compute capability of at least 7.0. Your GPU: {supported[0]}")
    return (f"{prefix}OK\nYour GPUs will likely run quickly with dtype policy mixed_float16 as "
            "they all have compute capability of at least 7.0")


def _dedup(items: list[str]) -> list[str]:
    """Consecutive duplicates as 'name (xN)', like TensorFlow's check."""
    out: list[str] = []
    counts: list[int] = []
    for item in items:
        if out and out[-1] == item:
            counts[-1] += 1
        else:
            out.append(item)
            counts.append(1)
    return [f"{item} (x{n})" if n > 1 else item for item, n in zip(out, counts, strict=True)]


def probe_cpu() -> CpuInfo:
    """This machine's CPU; without /proc/cpuinfo (macOS, Windows) the features stay unknown."""
    path = Path("/proc/cpuinfo")
    text = path.read_text() if path.is_file() else ""
    return parse_cpuinfo(text)


def onednn_enabled() -> bool:
    """oneDNN is on by default in TensorFlow for x86 Linux unless TF_ENABLE_ONEDNN_OPTS=0."""
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def probe(tf, check_xla: bool = True) -> Machine:
    """Read this machine through TensorFlow (passed in: the caller owns the quiet import)."""
    import keras

    gpus = []
    memory = _nvidia_smi_memory()
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device)
        gpus.append(gpu_from_details(details, memory[index] if index < len(memory) else None))
    return Machine(
        cpu=probe_cpu(),
        gpus=tuple(gpus),
        tpu=bool(tf.config.list_physical_devices("TPU")),
        tensorflow_version=tf.__version__,
        keras_version=keras.__version__,
        onednn=onednn_enabled(),
        xla=_xla_works(tf) if check_xla else None,
        tf32_enabled=bool(tf.config.experimental.tensor_float_32_execution_enabled()),
    )


def _xla_works(tf) -> bool:
    try:
        return float(tf.function(lambda x: x * 2.0, jit_compile=True)(tf.constant(1.0))) == 2.0
    except Exception:  # XLA missing or broken: report it, never crash an info command
        return False


def _nvidia_smi_memory() -> list[int]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        return [int(float(line)) * 1024 * 1024 for line in out.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def machine_to_dict(machine: Machine) -> dict:
    data = asdict(machine)
    data["cpu"]["flags"] = sorted(f for f in machine.cpu.flags if f in CPU_FEATURES)
    data["cpu"]["features"] = machine.cpu.features
    for gpu, raw in zip(machine.gpus, data["gpus"], strict=True):
        raw["float16_tensor_cores"] = gpu.float16_tensor_cores
        raw["fast_bfloat16"] = gpu.fast_bfloat16
        raw["tf32_by_default"] = gpu.tf32_by_default
        raw["float8"] = gpu.float8
    return data


def check_report(machine: Machine, bench: list | None = None) -> dict:
    """Everything `mptrain check-gpu` shows, as one JSON-able dict (also for bug reports).

    With microbenchmark results (`mptrain.microbench`), the recommendation cites them.
    """
    rec = recommend(machine)
    reason = rec.reason
    if bench:
        from mptrain.microbench import best_16bit

        device = "/GPU:0" if machine.gpus else "/CPU:0"
        best = best_16bit(bench, device)
        if best is not None:
            reason += (f"; measured on {device.strip('/')}: {best[0]} runs {best[1]:.1f}x float32 "
                       "(geometric mean over matmul, dense and conv)")
    return {
        "machine": machine_to_dict(machine),
        "gpu_found": bool(machine.gpus),
        "recommendation": {"policy": rec.policy, "reason": reason, "warnings": rec.warnings},
        "compatibility_check": compatibility_check(machine.gpus),
        "bench": [asdict(r) for r in bench] if bench else None,
    }
