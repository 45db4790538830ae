"""`mptrain check-gpu`: this machine's facts, the policy to use, and the measurements behind it.

One typed report (also meant to be pasted into bug reports, like `accelerate env`): the facts
from `hardware`, the advice from `policy`, decided on this machine's measured kernel speeds
(`hardware.kernels`: cached, or measured on first use) unless the user asks for the flag rules
alone (`--no-bench`). With `--bench` every dtype is measured afresh and the recommendation
cites that measurement, so the report never contradicts its own numbers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from mptrain.errors import ConfigError
from mptrain.hardware.kernels import TIMED_DTYPES, KernelSpeeds, KernelTiming
from mptrain.hardware.machine import Machine, describe_onednn
from mptrain.precision.policy import Recommendation, compatibility_check, recommend
from mptrain.record import FrozenRecord


class CpuFacts(FrozenRecord):
    model: str
    name: str = ""  # the model with its x86 family and model number (`CpuInfo.name`)
    physical_cores: int
    logical_cpus: int
    mhz: float | None
    features: dict[str, bool]  # AVX-512, AVX512_BF16, AMX-BF16, ...


class GpuFacts(FrozenRecord):
    name: str
    compute_capability: tuple[int, int] | None
    memory_bytes: int | None
    float16_tensor_cores: bool
    fast_bfloat16: bool
    tf32_by_default: bool
    float8: bool


class MachineFacts(FrozenRecord):
    cpu: CpuFacts
    gpus: list[GpuFacts]
    tpu: bool
    tensorflow_version: str | None
    keras_version: str | None
    onednn: bool
    onednn_state: str = ""  # in words, with what decided it (`machine.describe_onednn`)
    xla: bool | None
    tf32_enabled: bool | None

    @classmethod
    def of(cls, machine: Machine) -> MachineFacts:
        """The facts read from `machine`'s attributes of the same names (its CPU's and GPUs'
        too), and oneDNN's state in words."""
        facts = cls.model_validate(machine, from_attributes=True)
        return facts.model_copy(update={"onednn_state": describe_onednn(machine.onednn, machine.cpu.flags)})


class DistributionFacts(FrozenRecord):
    """What tf.distribute would use here."""

    logical_devices: list[str]
    mirrored_devices: list[str]
    nccl: bool
    all_reduce: str
    note: str


class CheckReport(FrozenRecord):
    machine: MachineFacts
    gpu_found: bool
    recommendation: Recommendation
    compatibility_check: str
    distribution: DistributionFacts | None
    kernels: KernelSpeeds | None  # the measurement the recommendation cites
    kernels_cached: bool = False  # that measurement came from the cache, not from this run
    bench: list[KernelTiming] | None  # `--bench`: every dtype, measured now


def distribution_facts(tf) -> DistributionFacts:
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    nccl = bool(gpus) and tf.test.is_built_with_cuda()
    return DistributionFacts(
        logical_devices=cpus + gpus,
        mirrored_devices=gpus or cpus[:1],
        nccl=nccl,
        all_reduce=("NCCL between this machine's GPUs" if nccl else
                    "TensorFlow's collective ops (ring all-reduce): CPU replicas and workers over gRPC"),
        note=("one CPU device: `distribute.devices: [/cpu:0, /cpu:1]` splits it into logical "
              "devices to try mirrored training" if not gpus else ""),
    )


def machine_report(*, bench: bool = False, no_bench: bool = False, bench_scale: float = 1.0,
                  verbose: bool = False, status: Callable[[str], Any] | None = None) -> CheckReport:
    """The report (see the module's docstring). A `bench` at another than the standard scale
    is shown, not cached; `status(text)` is a context manager that shows progress while
    measuring."""
    from mptrain.hardware.kernels import bench_devices, cached_kernels, fresh_kernels, measured_kernels
    from mptrain.hardware.machine import probe
    from mptrain.hardware.runtime import import_tensorflow

    if bench and no_bench:
        raise ConfigError("--bench and --no-bench contradict each other: give one")
    tf = import_tensorflow(verbose)
    machine = probe(tf)
    kernels, cached, said = None, False, []
    if bench:
        with status("benchmarking kernels per dtype…") if status else contextlib.nullcontext():
            kernels = fresh_kernels(tf, machine, bench_devices(tf), TIMED_DTYPES, (False, True), bench_scale)
    elif not no_bench:
        cached = cached_kernels(machine) is not None
        kernels = measured_kernels(tf, machine, status, said)
    rec = recommend(machine, kernels)
    return CheckReport(
        machine=MachineFacts.of(machine),
        gpu_found=bool(machine.gpus),
        recommendation=rec.model_copy(update={"warnings": [*rec.warnings, *said]}),
        compatibility_check=compatibility_check(machine.gpus),
        distribution=distribution_facts(tf),
        kernels=kernels,
        kernels_cached=cached and kernels is not None,
        bench=kernels.timings if bench else None,
    )
