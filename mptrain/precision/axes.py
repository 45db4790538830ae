"""A candidate's axes: each one way a run's numbers can differ from mptrain's own choices.

An axis is one class: the `Candidate` field it sets and the experiment key that field is, the
part of a candidate's name a value gives and the value a part means, the policies it pairs
with, the values it offers on a machine (`offers`) and why a value cannot win there
(`why_not`). `precision.candidates` builds every name and every candidate from this table
alone, so a new axis is a class here (and, if its key is new, the key in `config.kinds`): see
docs/development.md, "Adding a candidate axis", shown by the batch size, the last added.

The precision (the dtype policy) is the axis every candidate has; the others each change one
thing beside it, as an A/B test changes one variable: XLA, the math mode, the CPU's math
library, fused layers; two are set by plan itself, never offered by a machine: the layers
kept in float32 (its islands search) and the batch size (its cells).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from mptrain.config.names import MATH_LIBRARIES, MATH_MODES
from mptrain.hardware.kernels import GENERAL_KINDS, KernelSpeeds, Kinds
from mptrain.hardware.machine import LIBRARY_NAMES, ONEDNN_BFLOAT16_FLAGS, Machine, library_of
from mptrain.precision.policy import NO_XLA_DETERMINISTIC, cpu_float16

ONEDNN_MODES = ("onednn_bf16", "graph_bf16")  # math modes of oneDNN's: they need it on
SIXTEEN_BIT = ("mixed_bfloat16", "mixed_float16")  # the policies plan weighs against float32
# A 16-bit candidate whose kernels measured below this against float32 (in the same XLA mode)
# on this machine is not tried unless named: a model whose time is in its matmuls and
# convolutions cannot win with them a fifth slower.
RULE_OUT = 0.8


class Where(NamedTuple):
    """What decides whether an axis's value can win: this machine, its measured kernels (None:
    not measured), the model's kinds of layer (their FLOP shares), why `+fused` cannot change
    the model (None: it can; `model.fused.why_not_fused`), and the experiment's op
    determinism (no XLA under it)."""

    machine: Machine
    kernels: KernelSpeeds | None = None
    kinds: Kinds = GENERAL_KINDS
    unfused: str | None = None
    deterministic: bool = False

    @property
    def cpu(self) -> bool:
        return not self.machine.gpus and not self.machine.tpu


class Axis:
    """One axis beside the precision. `field`: the `Candidate` field; `key`: its experiment
    key; `default`: mptrain's own choice (no name part); `separator`: what joins its part to
    the name; `overrides`: its default is given to a candidate's runs too (else their
    experiment's own stays); `scaled`: its runs take it with what it scales, not as one of
    the candidate's settings (the batch: `Variant.batch`); `policies`: those it pairs with
    (on some machine)."""

    field: str
    key: str
    default: Any = None
    separator = "+"
    overrides = True
    scaled = False
    policies: tuple[str, ...] = ("float32", *SIXTEEN_BIT)
    values: tuple[Any, ...] = ()  # every value it names, on some machine
    what = ""  # what its parts are, said in an error about a name ("a math mode")

    def part(self, value) -> str | None:
        """The name part a value gives (None: none, mptrain's own choice)."""
        return None if value == self.default else str(value)

    def parse(self, part: str) -> Any:
        """The value a name part means (None: not this axis's part)."""
        return part if part in self.values else None

    def offers(self, policy: str, where: Where) -> tuple[Any, ...]:
        """The values a plan tries beside `policy` on this machine."""
        return ()

    def said(self) -> str:
        """Its parts as an error lists them: `+xla`, `a math library (onednn, eigen)`."""
        parts = ", ".join(self.part(value) for value in self.values)
        return f"{self.what} ({parts})" if self.what else f"+{parts}"

    def why_not(self, option, where: Where) -> str | None:
        """Why a candidate with this axis's value cannot win here (None: worth a trial)."""
        return None


class Switch(Axis):
    """An axis switched on or left at mptrain's choice: named by one word when on."""

    word: str
    values = (True,)

    def part(self, on) -> str | None:
        return self.word if on else None

    def parse(self, part: str) -> bool | None:
        return True if part == self.word else None


class XlaAxis(Switch):
    """Whole-step XLA forced on (`+xla`): an axis of its own everywhere but a TPU (always
    XLA), so float32+xla is the control a 16-bit candidate with XLA is read against."""

    field, key, word = "jit_compile", "train.jit_compile", "xla"

    def offers(self, policy: str, where: Where) -> tuple[bool, ...]:
        return () if where.machine.tpu else (True,)

    def why_not(self, option, where: Where) -> str | None:
        return NO_XLA_DETERMINISTIC if where.deterministic else None


class MathModeAxis(Axis):
    """float32 storage, other math: bfloat16 through oneDNN on a CPU (`+onednn_bf16`,
    `+graph_bf16`), no TF32 on an Ampere GPU (`+tf32_off`)."""

    field, key, default = "math_mode", "train.math_mode", "default"
    policies = ("float32",)
    values = tuple(m for m in MATH_MODES if m != "default")
    what = "a math mode"

    def offers(self, policy: str, where: Where) -> tuple[str, ...]:
        if policy != "float32" or where.machine.tpu:
            return ()
        return ("tf32_off",) if where.machine.gpus else ONEDNN_MODES

    def why_not(self, option, where: Where) -> str | None:
        machine = where.machine
        if machine.gpus:
            gpu = machine.gpus[0]
            return None if gpu.tf32_by_default else f"{gpu.describe()}: no TF32 to turn off (CC < 8.0)"
        if machine.onednn_bfloat16:
            return None
        if machine.onednn:
            return ("oneDNN takes no bfloat16 on this CPU (it needs AVX-512): no math mode of its "
                    "to change")
        return ("oneDNN is off here (TF_ENABLE_ONEDNN_OPTS=0, or a CPU TensorFlow leaves it off "
                "on): no math mode of its to change")


class MathLibraryAxis(Axis):
    """The CPU's math library TensorFlow does not choose here (`train.math_library`): oneDNN
    where it leaves oneDNN off (AVX2-only CPUs, where float32 ResNet50 ran 3.2x faster with
    it), Eigen where it turns it on. Not given to a candidate's runs at its default: they run
    their experiment's own."""

    field, key, default = "math_library", "train.math_library", "default"
    overrides = False
    values = tuple(m for m in MATH_LIBRARIES if m != "default")
    what = "a math library"

    def offers(self, policy: str, where: Where) -> tuple[str, ...]:
        return (library_of(not where.machine.onednn),) if where.cpu else ()

    def why_not(self, option, where: Where) -> str | None:
        """What cannot be measured or run: oneDNN's 16 bits without AVX-512, a library whose
        kernels were not measured (but float32 in oneDNN, the largest lever of an AVX2-only
        CPU, is tried unmeasured). What they measured rules them out with the rest
        (`candidates.rule_out`)."""
        library, kernels = option.math_library, where.kernels
        if option.sixteen_bit and library == "onednn" and not ONEDNN_BFLOAT16_FLAGS & where.machine.cpu.flags:
            dtype = option.sixteen_bit_dtype
            return (f"oneDNN takes no {dtype} on this CPU (it needs AVX-512): its {dtype} runs "
                    "through Eigen either way")
        if not option.sixteen_bit and library == "onednn":
            return None
        why = ("no kernel was measured" if kernels is None else kernels.peer_failed
               or ("" if kernels.library_gain() is not None else "this measurement holds one library"))
        return f"{LIBRARY_NAMES[library]}'s kernels were not measured ({why})" if why else None


class FusedAxis(Switch):
    """One fused BatchNorm op and float32 convolution weight gradients under bfloat16
    (`model.fused_layers`, `+fused`): on CPUs, where the guide's ResNet50 gained 1.65x with it."""

    field, key, default, word = "fused", "model.fused_layers", False, "fused"
    policies = ("mixed_bfloat16",)

    def offers(self, policy: str, where: Where) -> tuple[bool, ...]:
        return (True,) if where.cpu and policy in self.policies else ()

    def why_not(self, option, where: Where) -> str | None:
        return where.unfused


class Float32LayersAxis(Axis):
    """Layers kept in float32 (`+islands`): named by plan's islands search from each layer's
    own timing, never offered by a machine nor parsed from a name (the name does not say
    which layers)."""

    field, key, default = "float32_layers", "model.float32_layers", []
    overrides = False

    def part(self, layers) -> str | None:
        return "islands" if layers else None


class BatchSizeAxis(Axis):
    """Another batch than the experiment's (`@b256`): plan's cells, from --batch-sizes or the
    guide's double for the most promising 16-bit policy (16-bit tensors take half the
    memory); never offered by a machine (the memory estimate decides which fit) nor parsed
    from a name. Its runs take the batch with what it scales (`config.batch_scaling`), so
    the candidate's own settings leave the experiment's batch."""

    field, key, default = "batch_size", "train.batch_size", None
    separator = "@"
    scaled = True

    def part(self, batch) -> str | None:
        return None if batch is None else f"b{batch}"


class Precision:
    """The dtype policy, the axis every candidate has (its name's first part): which 16-bit
    policies a machine offers, and why one cannot win there (a GPU without the units, kernels
    of the model's kinds measured below `RULE_OUT`, or an unmeasured rule said as one)."""

    def offers(self, where: Where) -> tuple[str, ...]:
        return ("float32", "mixed_bfloat16") if where.machine.tpu else ("float32", *SIXTEEN_BIT)

    def why_not(self, option, where: Where) -> str | None:
        machine = where.machine
        if not option.sixteen_bit or machine.tpu:
            return None
        if machine.gpus:
            gpu = machine.gpus[0]
            if option.sixteen_bit_dtype == "float16":
                return None if gpu.float16_tensor_cores else f"{gpu.describe()}: no Tensor Cores (CC < 7.0)"
            return None if gpu.fast_bfloat16 else f"{gpu.describe()}: no fast bfloat16 (CC < 8.0)"
        if option.math_library != "default":  # its kernels in that library: `candidates.rule_out`
            return None
        xla = bool(option.jit_compile)
        if option.policy == "mixed_float16" and not xla and not where.deterministic:
            needs_xla, why = cpu_float16(machine, where.kernels)
            if needs_xla:
                return f"the same as mixed_float16+xla here: {why}"
        return _cpu_rule(option.sixteen_bit_dtype, xla, where)


def _cpu_rule(dtype: str, xla: bool, where: Where) -> str | None:
    """Why a `dtype` candidate (with XLA or not) cannot win on this CPU: its kernels (of the
    model's kinds) measured below `RULE_OUT` against float32 in the same mode; unmeasured,
    bfloat16 without the instructions oneDNN needs (a rule, said as one)."""
    kernels, kinds = where.kernels, where.kinds
    if kernels is not None and (gain := kernels.speedup(dtype, "/CPU:0", xla, kinds)) is not None:
        if gain >= RULE_OUT:
            return None
        return (f"{kernels.describe(dtype, '/CPU:0', xla, kinds)} on this machine, below the "
                f"{RULE_OUT:g}x a trial could win from")
    if dtype == "bfloat16" and not where.machine.cpu.has_bf16_matrix_units:
        return ("the CPU has no bfloat16 instructions (AVX512_BF16 or AMX-BF16), so its bfloat16 "
                "is emulated (not measured: the kernels could not be timed)")
    return None


PRECISION = Precision()
BATCH = BatchSizeAxis()
AXES = (XlaAxis(), MathModeAxis(), MathLibraryAxis(), FusedAxis(), Float32LayersAxis(), BATCH)
