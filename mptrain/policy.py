"""Dtype policies: resolving `auto`, applying the policy, and the per-policy XLA choice.

Keras applies the *global* policy to layers as they are built, so `apply_policy` must run
before the model is constructed. The XLA choice is per policy and per device because it helps
one 16-bit type and hurts the other on the same CPU (see `choose_jit_compile`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mptrain.hardware import Machine, recommend

# policy → (compute dtype, variable dtype)
DTYPES = {
    "float32": ("float32", "float32"),
    "mixed_float16": ("float16", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "float16": ("float16", "float16"),
    "bfloat16": ("bfloat16", "bfloat16"),
}


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
        """Only float16 compute with float32 variables needs (and gets) dynamic loss scaling."""
        return self.name == "mixed_float16"


def choose_policy(requested: str, jit_compile: bool | None, machine: Machine,
                  xla_optimizer_update: bool | None = None) -> PolicyChoice:
    if requested == "auto":
        rec = recommend(machine)
        name, reason = rec.policy, f"auto: {rec.reason}"
    else:
        name, reason = requested, "set in the experiment"
    jit, jit_reason = choose_jit_compile(name, jit_compile, machine)
    fused, fused_reason = choose_xla_optimizer_update(xla_optimizer_update, jit, machine)
    return PolicyChoice(requested, name, reason, jit, jit_reason, fused, fused_reason)


def choose_xla_optimizer_update(requested: bool | None, jit_compile: bool,
                                machine: Machine) -> tuple[bool, str]:
    """Compile just the (float32, memory-bound) optimizer update with XLA, unless the experiment
    says. Measured on CPUs only, where it makes every policy faster; elsewhere the default."""
    if jit_compile:
        return False, "the whole step is already compiled with XLA"
    if requested is not None:
        return requested, "set in the experiment (train.xla_optimizer_update)"
    if not machine.gpus and not machine.tpu:
        return True, "CPU: fusing the float32 update saves 4-12% per step (bench/NOTES.md)"
    return False, "TensorFlow's default on accelerators"


def choose_jit_compile(policy: str, requested: bool | None, machine: Machine) -> tuple[bool, str]:
    """XLA on or off for this policy on this machine, unless the experiment says.

    On a CPU, oneDNN's fused float16 MatMul+BiasAdd runs a reference kernel (>100x slower than
    float32); XLA compiles around it and runs at about float32 speed. For bfloat16 the opposite
    holds: oneDNN uses AMX, and XLA's CPU backend does not, so XLA makes it ~2x slower.
    """
    if requested is not None:
        return requested, "set in the experiment (train.jit_compile)"
    if machine.tpu:
        return True, "TPUs always compile with XLA"
    on_cpu = not machine.gpus
    if on_cpu and DTYPES[policy][0] == "float16":
        return True, ("float16 on a CPU: XLA avoids oneDNN's slow float16 reference kernel "
                      "(>100x slower without it)")
    if on_cpu and DTYPES[policy][0] == "bfloat16":
        return False, "bfloat16 on a CPU: oneDNN's AMX/AVX512_BF16 kernels beat XLA's"
    return False, "TensorFlow's default (no XLA)"


def speed_warning(choice: PolicyChoice, machine: Machine) -> str | None:
    """A known-slow combination on this hardware, said before anyone waits an hour for it."""
    if machine.gpus or machine.tpu or choice.compute_dtype == "float32":
        if machine.gpus and choice.compute_dtype == "float16" and not all(
                g.float16_tensor_cores for g in machine.gpus):
            return "float16 on a GPU without Tensor Cores (CC < 7.0): no faster than float32"
        return None
    if choice.compute_dtype == "float16":
        if not choice.jit_compile:
            return ("float16 on a CPU without XLA: oneDNN's reference kernel, >100x slower than "
                    "float32; bound it with train.max_step_seconds or train.max_steps "
                    "(compare: --max-step-seconds, --steps)")
        return ("float16 on a CPU: XLA turned on to avoid oneDNN's >100x slower float16 kernel; "
                "dense layers run at about float32 speed, convolutions ~3x slower: no speed-up")
    if not machine.cpu.has_bf16_matrix_units:
        return "bfloat16 on a CPU without AMX-BF16/AVX512_BF16: slower than float32"
    return None


def apply_policy(name: str) -> None:
    """Set Keras' global dtype policy; layers built afterwards follow it."""
    import keras

    keras.mixed_precision.set_global_policy(name)
