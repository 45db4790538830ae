"""The one place that decides dtypes: which policy (`recommend`: what `policy: auto` resolves
to), XLA or not, loss scaling or not, and why.

Keras applies the *global* policy to layers as they are built, so `apply_policy` must run
before the model is constructed. The rest are pure decisions over the machine's facts
(`hardware.machine.Machine`) and, on a CPU, its measured kernels (`hardware.kernels`), each
returned with the reason a user will see, quoting the figure it was decided on. XLA is its own
axis: whether float16 needs it on a CPU is this machine's measurement (oneDNN's fused float16
kernel collapsed on AVX-512 Xeons; with oneDNN off, float16 ran at float32's speed without it).
Only mixed_float16 gets dynamic loss scaling (`PolicyChoice.loss_scaling`;
`training/loss_scale.py` wraps the optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from mptrain.errors import ConfigError
from mptrain.hardware.kernels import KernelSpeeds, decision_device, decision_dtypes, times
from mptrain.hardware.machine import (
    LIBRARY_SETTINGS,
    ONEDNN_ENV,
    GpuInfo,
    Machine,
    describe_library,
    library_of,
)
from mptrain.record import FrozenRecord

F16_MAX = 65504.0  # the largest finite float16

# policy → (compute dtype, variable dtype)
DTYPES = {
    "float32": ("float32", "float32"),
    "mixed_float16": ("float16", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "float16": ("float16", "float16"),
    "bfloat16": ("bfloat16", "bfloat16"),
}

# Why 16-bit math is fast or slow on a CPU where nothing was measured: a rule, said as one.
CPU_FLOAT16 = ("where oneDNN is on, its fused float16 MatMul+BiasAdd ran a reference kernel on "
               "the CPUs we measured, hundreds of times slower than float32 (not measured here)")
CPU_BFLOAT16 = ("oneDNN runs bfloat16 matmuls and convolutions on the CPU's AMX-BF16 tiles or "
                "AVX512_BF16 instructions; XLA's CPU backend does not use them")
# A float16 kernel this many times slower than float32's, without XLA, has collapsed (oneDNN's
# reference kernel ran at 0.001x): float16 then needs XLA on that CPU.
COLLAPSED = 0.25


# A 16-bit policy must measure at least this much faster than float32 to be recommended:
# below it, the gain is within what a shared machine's noise and a model's other costs eat.
MIN_GAIN = 1.1


class Recommendation(FrozenRecord):
    """The policy `auto` resolves to, and why (also the check-gpu report's); on a CPU, the
    math library to run when the other one measured faster (`library_advice`)."""

    policy: str
    reason: str
    warnings: list[str] = []
    measured: bool = False  # decided on this machine's measured kernels (else on its flags)
    math_library: str | None = None  # train.math_library to set (None: TensorFlow's choice is right)
    math_library_reason: str = ""  # what was measured (or why nothing was)


def recommend(machine: Machine, kernels: KernelSpeeds | None = None) -> Recommendation:
    """The policy that will actually be fast here, with the reason. Decided on this
    machine's measured kernel speeds when there are some (`hardware.kernels.measured_kernels`),
    else by rules on the hardware (the guide's GPU logic, TPUs, CPU flags)."""
    if machine.tpu:
        return Recommendation(
            policy="mixed_bfloat16",
            reason="TPUs compute in bfloat16 natively; bfloat16 needs no loss scaling")
    chosen = _measured(machine, kernels) if kernels is not None else _by_rule(machine)
    if machine.accelerated:
        return chosen
    library, why = library_advice(machine, kernels)
    return chosen.model_copy(update={"math_library": library, "math_library_reason": why})


def library_advice(machine: Machine, kernels: KernelSpeeds | None) -> tuple[str | None, str]:
    """The CPU's math library to set (`train.math_library`), when the one TensorFlow does not
    run here measured faster by `MIN_GAIN` (oneDNN on an AVX2-only CPU, where TensorFlow
    leaves it off: float32 ResNet50 ran 3.2x faster), in float32 or in bfloat16 where that
    library's bfloat16 pays off, and what was measured; None where TensorFlow's choice
    stands. A setting of the process (TF_ENABLE_ONEDNN_OPTS): a run sets it as it starts, a
    notebook cannot."""
    running = describe_library(machine.onednn, machine.cpu.flags)
    gain = kernels.library_gain("float32") if kernels is not None else None
    if gain is None:
        why = ("no kernel was measured" if kernels is None else
               kernels.peer_failed or "this measurement holds one library")
        return None, f"{running}; the other library was not measured ({why})"
    other = library_of(not machine.onednn)

    def best(onednn: bool) -> float:  # float32, or bfloat16 where it pays off, with a library
        bf16 = kernels.speedup("bfloat16", "/CPU:0", onednn=onednn) or 0.0
        return bf16 if bf16 >= MIN_GAIN else 1.0

    here, there = best(machine.onednn), gain * best(not machine.onednn)
    also = (f"; {kernels.describe('bfloat16', '/CPU:0', onednn=not machine.onednn)}"
            if best(not machine.onednn) > 1.0 else "")
    if there < here * MIN_GAIN:
        return None, f"{running} runs here, and mptrain keeps it: {kernels.describe_library()}{also}"
    policy = " (with policy: mixed_bfloat16)" if best(not machine.onednn) > 1.0 else ""
    return other, (f"{kernels.describe_library()}{also}, where {running} runs now: set "
                   f"train.math_library: {other}{policy} in an experiment (or "
                   f"{ONEDNN_ENV}={LIBRARY_SETTINGS[other]} before TensorFlow starts, for any "
                   "TensorFlow program); precision is unchanged. `mptrain plan` measures it on "
                   "your model")


def _measured(machine: Machine, kernels: KernelSpeeds) -> Recommendation:
    device = decision_device(machine)
    where = machine.gpus[0].describe() if machine.gpus else f"this CPU ({machine.cpu.name})"
    # on a CPU only bfloat16 is weighed: float16 needs loss scaling, and its kernels (with XLA
    # where they collapse without) ran at float32's speed at best; `mptrain plan` measures it
    dtypes = decision_dtypes(machine) if machine.gpus else ("bfloat16",)
    gains = {dtype: gain for dtype in dtypes
             if dtype != "float32" and (gain := kernels.speedup(dtype, device)) is not None}
    warnings = [] if machine.gpus else [f"mixed_float16 on this CPU: {cpu_float16(machine, kernels)[1]}"]
    plan = "; `mptrain plan` measures your own model, which can differ from the kernels"
    if not gains:
        return _by_rule(machine)
    best = max(gains, key=gains.get)
    if "bfloat16" in gains and gains["bfloat16"] >= gains[best] / MIN_GAIN:
        best = "bfloat16"  # as fast within the margin, and needs no loss scaling
    measured = "; ".join(kernels.describe(dtype, device) for dtype in gains)
    if gains[best] >= MIN_GAIN:
        policy = "mixed_bfloat16" if best == "bfloat16" else "mixed_float16"
        slower = [f"{t.kind} {times(t.ratio_to_float32)}" for t in kernels.by_kind(best, device)
                  if t.ratio_to_float32 < 1 / MIN_GAIN]
        if slower:
            plan += (f"; its {best} is slower than float32 on other kinds of layer here "
                     f"({', '.join(slower)}): a model made of those gains nothing")
        return Recommendation(policy=policy, reason=f"measured on {where}: {measured}{plan}",
                              warnings=warnings, measured=True)
    return Recommendation(
        policy="float32", reason=f"measured on {where}: {measured}, not faster than float32 by "
        f"the {MIN_GAIN:g}x it takes to pay off{plan}",
        warnings=[*warnings, "16-bit policies measured no faster than float32 on this machine"],
        measured=True)


def _by_rule(machine: Machine) -> Recommendation:
    if machine.gpus:
        weakest = min(machine.gpus, key=lambda g: g.compute_capability or (0, 0))
        if weakest.fast_bfloat16:
            return Recommendation(
                policy="mixed_bfloat16",
                reason=f"{weakest.describe()}: Tensor Cores run bfloat16 as fast as float16 "
                "(CC >= 8.0), and bfloat16 needs no loss scaling; mixed_float16 is equally fast")
        if weakest.float16_tensor_cores:
            return Recommendation(
                policy="mixed_float16",
                reason=f"{weakest.describe()}: float16 Tensor Cores (CC >= 7.0), the guide's "
                "up-to-3x case")
        return Recommendation(
            policy="float32",
            reason=f"{weakest.describe()}: no Tensor Cores (CC < 7.0), so 16-bit math is not faster",
            warnings=["16-bit policies save memory here but will not run faster than float32"])
    cpu = machine.cpu
    if "amx_bf16" in cpu.flags:
        return Recommendation(
            policy="mixed_bfloat16",
            reason=f"CPU with AMX-BF16 (not measured: a rule on the CPU's flags): {CPU_BFLOAT16}",
            warnings=[f"mixed_float16 on a CPU: {CPU_FLOAT16}"])
    units = ("AVX512_BF16 without AMX-BF16: its bfloat16 kernels can be slower than float32"
             if "avx512_bf16" in cpu.flags else "no bfloat16 matrix units (AMX-BF16)")
    return Recommendation(
        policy="float32",
        reason=f"no GPU, no TPU, and the CPU has {units} (not measured: a rule on the CPU's flags)",
        warnings=["16-bit policies may run slower than float32 on this machine",
                  f"mixed_float16 on a CPU: {cpu_float16(machine, None)[1]}"])


@dataclass(frozen=True)
class PolicyChoice:
    """What the run will use, and why: recorded in the resolved config and the summary."""

    requested: str
    name: str
    reason: str
    jit_compile: bool
    jit_reason: str
    xla_optimizer_update: bool = False
    xla_optimizer_reason: str = ""

    @property
    def compute_dtype(self) -> str:
        return DTYPES[self.name][0]

    @property
    def variable_dtype(self) -> str:
        return DTYPES[self.name][1]

    @property
    def loss_scaling(self) -> bool:
        """float16 compute with float32 variables needs dynamic loss scaling: small gradients
        underflow float16's range. bfloat16 has float32's range; pure float16 has float16
        variables, which a LossScaleOptimizer cannot unscale into without underflowing too."""
        return self.name == "mixed_float16"


@dataclass(frozen=True)
class XlaAsked:
    """What the experiment says about XLA (None: mptrain decides here), and whether it asks
    for op determinism, which rules XLA out (`NO_XLA_DETERMINISTIC`)."""

    jit_compile: bool | None = None
    optimizer_update: bool | None = None
    deterministic: bool = False


def choose_policy(requested: str, machine: Machine, asked: XlaAsked = XlaAsked(), replicas: int = 1,
                  kernels: KernelSpeeds | None = None) -> PolicyChoice:
    if requested == "auto":
        rec = recommend(machine, kernels)
        name, reason = rec.policy, f"auto: {rec.reason}"
    else:
        name, reason = requested, "set in the experiment"
    jit, jit_reason = choose_jit_compile(name, asked.jit_compile, machine, replicas, kernels,
                                         asked.deterministic)
    update, update_reason = choose_xla_optimizer_update(asked.optimizer_update, jit, machine, replicas)
    return PolicyChoice(requested, name, reason, jit, jit_reason, update, update_reason)


def choose_xla_optimizer_update(requested: bool | None, jit_compile: bool,
                                machine: Machine, replicas: int = 1) -> tuple[bool, str]:
    """Compile just the (float32, memory-bound) optimizer update with XLA, unless the experiment
    says. Measured on CPUs only (bench/NOTES.md), where it made every policy faster."""
    if jit_compile:
        return False, "the whole step is already compiled with XLA"
    if replicas > 1:
        return False, "not with several replicas (tf.distribute updates each replica's copy)"
    if requested is not None:
        return requested, "set in the experiment (train.xla_optimizer_update)"
    if not machine.accelerated:
        return True, ("CPU: the float32 update runs as one fused XLA computation instead of a "
                      "chain of memory-bound kernels")
    return False, "TensorFlow's default on accelerators"


def pure_policy_note(choice: PolicyChoice) -> str | None:
    """A pure 16-bit policy (`float16`, `bfloat16`) keeps the weights in 16 bits too: an
    update smaller than a weight's last bit is lost, so training stalls or drifts where the
    guide's mixed policy (float32 variables) trains as float32 does. Valid to measure; said,
    because its lower accuracy otherwise looks like 16-bit math's fault."""
    if choice.variable_dtype == "float32":
        return None
    return (f"{choice.name}: the weights and their updates are {choice.variable_dtype} too, so an "
            "update smaller than a weight's last bit is lost; "
            f"mixed_{choice.variable_dtype} keeps them in float32 (the guide's choice)")


def unlike_plain_keras(choice, deterministic: bool, loss: str) -> list[str]:
    """What in this run computes other ops than a plain Keras script of the same experiment
    (compile, fit), so its numbers differ in the last digits (and, over a long float32 run,
    in the digits a user reads). Measured against such a script on Fashion-MNIST: with
    neither, mptrain's weights are the script's bit for bit (tests/e2e/test_training.py)."""
    differences = []
    if choice.xla_optimizer_update:
        differences.append(
            "optimizer update compiled with XLA (the CPU default): weights round ~1 float32 ulp "
            "apart from a plain Keras run's; train.xla_optimizer_update: false matches it bit "
            "for bit")
    if deterministic and "sparse_categorical_crossentropy" in loss:
        differences.append(
            "deterministic: true: TensorFlow computes the sparse cross-entropy unfused "
            "(log_softmax + gather), so losses differ in the last bits from a run without it")
    return differences


def needs_kernels(policy: str, machine: Machine) -> bool:
    """Whether a run's choices depend on this machine's measured kernels: `auto`, and any
    16-bit policy on a CPU (whether float16 needs XLA; what a warning quotes)."""
    return policy == "auto" or not (machine.gpus or machine.tpu) and DTYPES[policy][0] != "float32"


def cpu_float16(machine: Machine, kernels: KernelSpeeds | None) -> tuple[bool, str]:
    """Whether float16 needs XLA on this CPU, and why: measured, when one of its kernels
    without XLA collapsed (`COLLAPSED`); else by oneDNN being on (not measured)."""
    worst = kernels.slowest("float16", "/CPU:0") if kernels is not None else None
    if worst is not None:
        with_xla = kernels.speedup("float16", "/CPU:0", xla=True)
        after = (f"; with XLA, float16 kernels run {with_xla:.2f}x float32 with XLA"
                 if with_xla else "")
        if worst.ratio_to_float32 < COLLAPSED:
            return True, (f"float16's {worst.kernel} kernel without XLA measured "
                          f"{times(worst.ratio_to_float32)} float32 on this CPU (oneDNN's reference "
                          f"kernel): XLA avoids it{after}")
        return False, (f"{kernels.describe('float16', '/CPU:0')} without XLA, and none collapsed: "
                       f"no XLA, TensorFlow's default{with_xla_said('float16', kernels)}")
    if machine.onednn:
        return True, f"oneDNN is on: {CPU_FLOAT16}; XLA avoids that kernel"
    return False, ("oneDNN is off (not measured): TensorFlow's own float16 kernels do not collapse: "
                   "no XLA, TensorFlow's default")


def with_xla_said(dtype: str, kernels: KernelSpeeds | None) -> str:
    """What XLA alone does to `dtype`'s kernels on this CPU, when measured, for a choice made
    without it: XLA is its own axis, which the experiment (`train.jit_compile: true`), compare
    and plan (`+xla`) can take."""
    if kernels is None or (gain := kernels.xla_gain(dtype, "/CPU:0")) is None:
        return ""
    return (f"; with XLA its kernels run {times(gain)} as fast here (train.jit_compile: true, or "
            "compare's and plan's +xla, measures it on your model)")


NO_XLA_DETERMINISTIC = ("deterministic: true: Keras compiles no step with XLA under "
                        "TensorFlow's op determinism (not every op has a deterministic XLA kernel)")


def choose_jit_compile(policy: str, requested: bool | None, machine: Machine,
                       replicas: int = 1, kernels: KernelSpeeds | None = None,
                       deterministic: bool = False) -> tuple[bool, str]:
    """XLA on or off for this policy on this machine, unless the experiment says. Under
    `deterministic: true` never: Keras' fit would silently run the step without it
    (`model_supports_jit`), so a summary saying "XLA on" would be false, and the custom loop
    follows the same rule so both loops run the same ops."""
    if replicas > 1 and not machine.tpu:
        return False, ("several replicas: XLA cannot compile a step whose variables live on "
                       "several devices (TensorFlow's known XLA limitation)")
    if deterministic:
        if requested:
            raise ConfigError("train.jit_compile: true (or a +xla candidate) with deterministic: "
                              f"true: {NO_XLA_DETERMINISTIC.split(': ', 1)[1]}; set one of them "
                              "false")
        return False, NO_XLA_DETERMINISTIC
    if requested is not None:
        return requested, "set in the experiment (train.jit_compile)"
    if machine.tpu:
        return True, "TPUs always compile with XLA"
    compute = DTYPES[policy][0]
    if not machine.gpus and compute == "float16":
        jit, why = cpu_float16(machine, kernels)
        return jit, f"float16 on a CPU: {why}"
    if not machine.gpus and compute == "bfloat16":
        if machine.onednn_bfloat16:
            return False, ("bfloat16 on a CPU: oneDNN's kernels run it (on AMX-BF16 or AVX512_BF16 "
                           "where the CPU has them), which XLA's CPU code does not use")
        return False, ("bfloat16 on a CPU: TensorFlow's default, no XLA; oneDNN runs no bfloat16 here "
                       "(it is off, or the CPU has no AVX-512), so TensorFlow's own kernels do"
                       + with_xla_said("bfloat16", kernels))
    return False, "TensorFlow's default (no XLA)"


def speed_warning(choice: PolicyChoice, machine: Machine,
                  kernels: KernelSpeeds | None = None) -> str | None:
    """A known-slow combination on this hardware, said before anyone waits an hour for it:
    on a CPU, quoting this machine's kernels in the run's own XLA mode (against float32 in
    the same mode) when they were measured, else a rule that says it is one."""
    compute = choice.compute_dtype
    if machine.gpus:
        if compute == "float16" and not all(g.float16_tensor_cores for g in machine.gpus):
            return "float16 on a GPU without Tensor Cores (CC < 7.0): no faster than float32"
        return None
    if machine.tpu or compute == "float32":
        return None
    bound = ("Bound the run with train.max_step_seconds or train.max_steps (compare: "
             "--max-step-seconds, --steps)")
    xla = choice.jit_compile
    if kernels is not None and (gain := kernels.speedup(compute, "/CPU:0", xla)) is not None:
        if gain >= 1 / MIN_GAIN:
            return None
        return (f"{compute} is slower than float32{' with XLA' if xla else ''} on this CPU: "
                f"{kernels.describe(compute, '/CPU:0', xla)}" + (f". {bound}" if gain < COLLAPSED else ""))
    if compute == "float16" and not xla and machine.onednn:
        return f"float16 on a CPU without XLA: {CPU_FLOAT16}. {bound}"
    if not machine.cpu.has_bf16_matrix_units:
        return (f"{compute} on a CPU without AMX-BF16/AVX512_BF16: slower than float32 (not "
                "measured: a rule on the CPU's flags)")
    return None


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
        who, lacks, yours = (("Some of your GPUs", "they do not all have", "GPUs") if supported else
                             ("Your GPU", "it does not have", "GPU") if len(unsupported) == 1 else
                             ("Your GPUs", "they do not have", "GPUs"))
        head = (f"{who} may run slowly with dtype policy mixed_float16 because {lacks} compute "
                f"capability of at least 7.0. Your {yours}:")
        # consecutive duplicates as 'name (xN)', like TensorFlow's check
        listed = "\n".join(f"  {name} (x{n})" if (n := len(list(same))) > 1 else f"  {name}"
                           for name, same in groupby(supported + unsupported))
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


def apply_policy(name: str) -> None:
    """Set Keras' global dtype policy; layers built afterwards follow it."""
    import keras

    keras.mixed_precision.set_global_policy(name)


def math_environment(mode: str, library: str = "default") -> dict[str, str]:
    """Environment variables a math mode and a math library (`train.math_library`) need
    before TensorFlow starts."""
    from mptrain.hardware.machine import library_environment

    mode_variables = {"TF_SET_ONEDNN_FPMATH_MODE": "BF16"} if mode == "onednn_bf16" else {}
    return {**mode_variables, **library_environment(library)}


def apply_math_mode(tf, mode: str) -> None:
    """How float32 math runs (`train.math_mode`), set both ways so a process that runs
    several experiments never keeps a previous one's mode. `onednn_bf16` is an environment
    variable TensorFlow reads when it starts (`math_environment`)."""
    tf.config.optimizer.set_experimental_options(
        {"auto_mixed_precision_onednn_bfloat16": mode == "graph_bf16"})
    tf.config.experimental.enable_tensor_float_32_execution(mode != "tf32_off")
