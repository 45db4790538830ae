"""A precision candidate: one way to run an experiment's numbers, with one name.

A candidate is a dtype policy, whole-step XLA or mptrain's choice of it, a math mode, the
CPU's math library, fused layers, and the layers kept in float32. Its name is the policy
followed by what differs from mptrain's own choices, joined by `+`: `mixed_bfloat16` (XLA as
mptrain chooses it for the policy and device), `mixed_bfloat16+xla` and `float32+xla` (XLA
forced on: XLA is an axis of its own, and float32+xla is the control a 16-bit candidate with
XLA is read against), `float32+onednn` and `float32+eigen` (the math library TensorFlow does
not choose on this CPU, `train.math_library`: oneDNN where it leaves oneDNN off, as on
AVX2-only CPUs, Eigen where it turns it on; the control of a 16-bit candidate in that
library), `mixed_bfloat16+fused` (one fused BatchNorm op, float32 convolution weight
gradients: `model.fused_layers`), `float32+onednn_bf16` and `float32+graph_bf16` (float32
storage, bfloat16 math on a CPU), `float32+tf32_off` (no TF32 on an Ampere GPU).
`candidate` parses a name and `Candidate.name` is what plan prints, so compare takes every
name plan prints (`mptrain compare --policies float32,mixed_bfloat16+xla`), and a plan.yaml
spells its candidate out in ordinary experiment keys (`Candidate.settings`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import Field

from mptrain.config.names import MATH_LIBRARIES, MATH_MODES, POLICIES
from mptrain.errors import ConfigError, did_you_mean
from mptrain.hardware.kernels import GENERAL_KINDS, KernelSpeeds, Kinds, times
from mptrain.hardware.machine import LIBRARY_NAMES, ONEDNN_BFLOAT16_FLAGS, Machine, library_of
from mptrain.precision.policy import NO_XLA_DETERMINISTIC, cpu_float16
from mptrain.record import Record

NOTHING_TO_FUSE = "the model has no Conv2D or BatchNormalization: the same as mixed_bfloat16"

# every candidate plan knows, on some machine (which are tried depends on this one)
CANDIDATE_NAMES = ("float32", "float32+xla", "mixed_bfloat16", "mixed_bfloat16+fused",
                   "mixed_bfloat16+xla", "float32+onednn_bf16", "float32+graph_bf16",
                   "mixed_float16+xla", "mixed_float16", "float32+tf32_off",
                   *(f"{policy}+{library}" for library in ("onednn", "eigen")
                     for policy in ("float32", "mixed_bfloat16", "mixed_float16")))
ONEDNN_MODES = ("onednn_bf16", "graph_bf16")  # math modes of oneDNN's: they need it on
# A 16-bit candidate whose kernels measured below this against float32 (in the same XLA mode)
# on this machine is not tried unless named: a model whose time is in its matmuls and
# convolutions cannot win with them a fifth slower.
RULE_OUT = 0.8


class Axis(NamedTuple):
    """One axis of a candidate beside its policy: the `Candidate` field it sets and its
    experiment key, the name part a value gives (None: no part) and the value a part means
    (None: not this axis's part). `overrides`: its default is given to a candidate's runs too
    (else their experiment's own stays). Names are parsed (`candidate`) and printed
    (`name_of`) by this table alone."""

    field: str
    key: str
    default: Any
    part: Callable[[Any], str | None]
    value: Callable[[str], Any]
    overrides: bool = True


_MODES = tuple(m for m in MATH_MODES if m != "default")
_LIBRARIES = tuple(m for m in MATH_LIBRARIES if m != "default")
AXES = (
    Axis("jit_compile", "train.jit_compile", None, lambda on: "xla" if on else None,
         lambda part: True if part == "xla" else None),
    Axis("math_mode", "train.math_mode", "default", lambda mode: None if mode == "default" else mode,
         lambda part: part if part in _MODES else None),
    Axis("math_library", "train.math_library", "default",
         lambda library: None if library == "default" else library,
         lambda part: part if part in _LIBRARIES else None, overrides=False),
    Axis("fused", "model.fused_layers", False, lambda on: "fused" if on else None,
         lambda part: True if part == "fused" else None),
    # layers kept in float32: named by plan's islands search, never parsed from a name
    Axis("float32_layers", "model.float32_layers", [], lambda layers: "islands" if layers else None,
         lambda part: None, overrides=False),
)


def name_of(policy: str, values: dict[str, Any]) -> str:
    """A candidate's name: the policy, then each axis's part (`AXES`), joined by `+`."""
    parts = (axis.part(values.get(axis.field, axis.default)) for axis in AXES)
    return "+".join([policy, *(part for part in parts if part)])


class Candidate(Record):
    """One way to run the experiment: a policy, XLA or not, a math mode, float32 layers."""

    name: str
    policy: str
    jit_compile: bool | None = None  # None: mptrain's choice for the policy and device
    math_mode: str = "default"
    math_library: str = "default"  # `train.math_library`: default, onednn, eigen
    float32_layers: list[str] = []
    fused: bool = False  # model.fused_layers: one fused BatchNorm op, float32 conv weight gradients
    why_not: str | None = None  # why it is not tried unless named (`--candidates NAME` tries it)
    # plan.json before 2026-12-03 (third session) marked the candidates a name lifts; every
    # candidate is lifted by its name now: read from an old file, never written
    unless_named: bool | None = Field(None, exclude=True)

    @property
    def settings(self) -> dict[str, object]:
        """The candidate in ordinary experiment keys (`config.variant` applies them): what its
        runs are given, and what a plan.yaml spells out (an axis left at its default that does
        not override leaves the experiment's own: a plan.yaml's islands, its parent's library)."""
        values = [(axis, getattr(self, axis.field)) for axis in AXES]
        return {"policy": self.policy, **{axis.key: value for axis, value in values
                                          if axis.overrides or value != axis.default}}

    def changed(self, **values) -> Candidate:
        """This candidate with other values on some axes (or another policy), renamed for them."""
        fields = {**self.model_dump(include={"policy", *(a.field for a in AXES)}), **values}
        return Candidate(name=name_of(fields["policy"], fields), **fields)

    @property
    def sixteen_bit(self) -> bool:
        return self.policy != "float32" or self.needs_onednn

    @property
    def needs_onednn(self) -> bool:
        """Its math mode is one of oneDNN's (it changes nothing where oneDNN is off)."""
        return self.math_mode in ONEDNN_MODES

    @property
    def control(self) -> Candidate:
        """The float32 candidate this one's precision is read against: float32 with the same
        XLA and math library (`float32+xla`, `float32+onednn`), so neither axis's own gain is
        credited to 16 bits."""
        return Candidate(policy="float32", name=name_of("float32", {
            "jit_compile": self.jit_compile, "math_library": self.math_library}),
            jit_compile=self.jit_compile, math_library=self.math_library)

    @property
    def sixteen_bit_dtype(self) -> str:
        """bfloat16 or float16: the 16-bit type its matmuls run in (if they do)."""
        return "float16" if self.policy in ("mixed_float16", "float16") else "bfloat16"


def candidate_name(config, policy: str | None = None) -> str:
    """The name of the candidate an experiment's settings make (under `policy`, what its
    `auto` resolved to): what `mptrain runs` and a run's summary call it, the name `candidate`
    parses (float32 layers: `+islands`, as plan names the candidate it keeps them in)."""
    def setting(key: str):
        section, name = key.split(".")
        return getattr(getattr(config, section), name)

    return name_of(policy or config.policy, {axis.field: setting(axis.key) for axis in AXES})


def file_label(name: str) -> str:
    """A candidate's name (or a label made of one) as a folder, file or run name: "+" and "@"
    become "-", one spelling for compare's and plan's folders, logs and variant files."""
    return name.replace("+", "-").replace("@", "-")


def cell_label(label: str, batch_size: int | None) -> str:
    """A candidate (or compare's variant) at another batch size: `mixed_bfloat16@b256`; the
    label alone at the experiment's batch."""
    return label if batch_size is None else f"{label}@b{batch_size}"


def candidate(name: str, why_not: str | None = None) -> Candidate:
    """The candidate a name means: `POLICY[+xla][+MATH_MODE][+LIBRARY][+fused]`."""
    policy, *parts = name.split("+")
    if policy not in POLICIES or policy == "auto":
        known = [p for p in POLICIES if p != "auto"]
        raise ConfigError(f"{name!r}: {policy!r} is not a policy{did_you_mean(policy, known)}; a "
                          f"candidate is a policy ({', '.join(known)}) with +xla, a math mode "
                          f"({', '.join(_MODES)}) or a math library ({', '.join(_LIBRARIES)}), e.g. "
                          "mixed_bfloat16+xla")
    values: dict[str, Any] = {}
    for part in parts:
        axis, value = next(((a, v) for a in AXES if (v := a.value(part)) is not None), (None, None))
        if axis is None or axis.field in values:
            raise ConfigError(f"{name!r}: {part!r} is not +xla, +fused, a math mode "
                              f"({', '.join(_MODES)}) or a math library ({', '.join(_LIBRARIES)}), "
                              "or is given twice")
        values[axis.field] = value
    math_mode, library = values.get("math_mode", "default"), values.get("math_library", "default")
    if math_mode in ONEDNN_MODES and policy != "float32":
        raise ConfigError(f"{name!r}: {math_mode} is bfloat16 math under a float32 policy; "
                          f"use float32+{math_mode}")
    if math_mode in ONEDNN_MODES and library == "eigen":
        raise ConfigError(f"{name!r}: {math_mode} is a mode of oneDNN's, and eigen turns oneDNN off")
    return Candidate(name=name_of(policy, values), policy=policy, why_not=why_not, **values)


def candidates(machine: Machine, kernels: KernelSpeeds | None = None, *,
               fusable: bool = True, deterministic: bool = False,
               kinds: Kinds = GENERAL_KINDS) -> list[Candidate]:
    """What this machine can run: float32, float32+xla (XLA's own effect, and the control of
    every 16-bit candidate with XLA), then the 16-bit ways and, on a CPU, the math library
    TensorFlow does not choose here, most promising first by the measured kernels of the
    model's kinds (`kinds`: their FLOP shares, `hardware.kernels.kind_shares`). One that
    cannot win here carries why, with the figure this machine's kernels measured (or the
    rule, said as one, when they were not). `fusable`: the model has a Conv2D or
    BatchNormalization for `+fused` to change (`model.fused.fusable`). `deterministic`: the
    experiment's op determinism, under which no step runs XLA (`policy.NO_XLA_DETERMINISTIC`):
    those candidates cannot run at all."""
    found = [candidate("float32")]
    if machine.tpu:
        found.append(candidate("mixed_bfloat16"))
        return found
    found.append(candidate("float32+xla"))
    gpu = machine.gpus[0] if machine.gpus else None
    if gpu is None:
        bf16 = _cpu_rule("bfloat16", False, machine, kernels, kinds)
        needs_xla, why = cpu_float16(machine, kernels)
        no_onednn = (None if machine.onednn_bfloat16 else
                     "oneDNN takes no bfloat16 on this CPU (it needs AVX-512): no math mode of "
                     "its to change" if machine.onednn else
                     "oneDNN is off here (TF_ENABLE_ONEDNN_OPTS=0, or a CPU TensorFlow leaves it "
                     "off on): no math mode of its to change")
        found += [
            candidate("mixed_bfloat16", bf16),
            candidate("mixed_bfloat16+fused", bf16 or (None if fusable else NOTHING_TO_FUSE)),
            candidate("mixed_bfloat16+xla", _cpu_rule("bfloat16", True, machine, kernels, kinds)),
            candidate("float32+onednn_bf16", no_onednn or bf16),
            candidate("float32+graph_bf16", no_onednn or bf16),
            candidate("mixed_float16+xla", _cpu_rule("float16", True, machine, kernels, kinds)),
            candidate("mixed_float16", f"the same as mixed_float16+xla here: {why}"
                      if needs_xla and not deterministic
                      else _cpu_rule("float16", False, machine, kernels, kinds)),
            *_other_library(machine, kernels),
        ]
    else:
        no_tc = None if gpu.float16_tensor_cores else f"{gpu.describe()}: no Tensor Cores (CC < 7.0)"
        no_bf = None if gpu.fast_bfloat16 else f"{gpu.describe()}: no fast bfloat16 (CC < 8.0)"
        found += [
            candidate("mixed_bfloat16", no_bf),
            candidate("mixed_bfloat16+xla", no_bf),
            candidate("mixed_float16", no_tc),
            candidate("mixed_float16+xla", no_tc),
            candidate("float32+tf32_off", None if gpu.tf32_by_default else
                      f"{gpu.describe()}: no TF32 to turn off (CC < 8.0)"),
        ]
    if deterministic:
        found = [c.model_copy(update={"why_not": NO_XLA_DETERMINISTIC}) if c.jit_compile else c
                 for c in found]
    if kernels is not None:
        first, control, *rest = [_in_all(c, machine, kernels, kinds) for c in found]
        if any(c.jit_compile and c.why_not is None for c in rest):  # float32+xla: their control
            control = found[1]
        rest.sort(key=lambda c: -expected_gain(c, machine, kernels, kinds))
        found = [first, control, *rest]
    return found


def _in_all(option: Candidate, machine: Machine, kernels: KernelSpeeds,
            kinds: Kinds) -> Candidate:
    """The candidate ruled out when its axes together (precision, XLA, library) measured
    below `RULE_OUT` against float32 as TensorFlow runs it here, on the model's kinds of
    layer, though each passed against its own control: bfloat16 with XLA at 0.94x float32
    with XLA, whose convolutions ran 0.71x TensorFlow's, is 0.67x in all, and ResNet50's three
    XLA trials each took 36-69 s to start, then ran 3.5-4.6x float32's step."""
    if option.why_not is not None or option.name == "float32" or machine.gpus:
        return option
    gain = expected_gain(option, machine, kernels, kinds)
    if gain <= 0.0 or gain >= RULE_OUT:  # (not measured: a rule, or a trial, decides)
        return option
    return option.model_copy(update={"why_not": (
        f"its kernels (of the model's {_kinds_said(kinds)}) measured {times(gain)} float32 as "
        f"TensorFlow runs it here, with {_axes(option)} together, below the {RULE_OUT:g}x a "
        "trial could win from")})


def _kinds_said(kinds: Kinds) -> str:
    """'conv2d 99%, dense 1%', or the kinds alike."""
    if isinstance(kinds, dict):
        return ", ".join(f"{kind} {share:.0%}" for kind, share in kinds.items())
    return ", ".join(kinds)


def _axes(option: Candidate) -> str:
    """A candidate's axes as said: 'bfloat16 and XLA', 'float32 and oneDNN'."""
    return " and ".join([option.sixteen_bit_dtype if option.sixteen_bit else "float32",
                         *(["XLA"] if option.jit_compile else []),
                         *([LIBRARY_NAMES[option.math_library]] if option.math_library != "default" else [])])


def expected_gain(option: Candidate, machine: Machine, kernels: KernelSpeeds,
                  kinds: Kinds = GENERAL_KINDS) -> float:
    """What the measured kernels (of the model's kinds) say a candidate gains over float32 as
    TensorFlow runs it here: its precision's own speed-up in its XLA mode and library, times
    what that mode or library does to float32 (0 where not measured): the order plan tries
    them in."""
    device = "/GPU:0" if machine.gpus else "/CPU:0"
    xla = bool(option.jit_compile) and not machine.gpus
    library = None if option.math_library == "default" else option.math_library == "onednn"
    dtype = option.sixteen_bit_dtype if option.sixteen_bit else "float32"
    precision = kernels.speedup(dtype, device, xla, kinds, library) if option.sixteen_bit else 1.0
    base = (kernels.xla_gain("float32", device, kinds) if xla else
            kernels.library_gain("float32", kinds) if library is not None else 1.0)
    return (precision or 0.0) * (base or 0.0)


def _other_library(machine: Machine, kernels: KernelSpeeds | None) -> list[Candidate]:
    """float32 and the 16-bit policies (without XLA, which compiles kernels of its own) with
    the math library TensorFlow does not run on this CPU: oneDNN where it leaves oneDNN off
    (AVX2-only CPUs, where float32 ResNet50 ran 3.2x faster with it), Eigen where it turns it
    on. What their kernels measured rules them out with the rest (`_in_all`); here, what
    cannot be measured or run: oneDNN's 16 bits without AVX-512, an Eigen not measured."""
    library = library_of(not machine.onednn)
    why = ("no kernel was measured" if kernels is None else kernels.peer_failed
           or ("" if kernels.library_gain() is not None else "this measurement holds one library"))
    unmeasured = f"{LIBRARY_NAMES[library]}'s kernels were not measured ({why})" if why else None
    found = [candidate(f"float32+{library}", None if library == "onednn" else unmeasured)]
    for policy, dtype in (("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")):
        no_16_bit = (f"oneDNN takes no {dtype} on this CPU (it needs AVX-512): its {dtype} runs "
                     "through Eigen either way" if library == "onednn" and not ONEDNN_BFLOAT16_FLAGS &
                     machine.cpu.flags else None)
        found.append(candidate(f"{policy}+{library}", no_16_bit or unmeasured))
    return found


def _cpu_rule(dtype: str, xla: bool, machine: Machine, kernels: KernelSpeeds | None,
              kinds: Kinds = GENERAL_KINDS) -> str | None:
    """Why a `dtype` candidate (with XLA or not) cannot win on this CPU: its kernels (of the
    model's kinds) measured below `RULE_OUT` against float32 in the same mode; unmeasured,
    bfloat16 without the instructions oneDNN needs (a rule, said as one). None: worth a trial."""
    if kernels is not None and (gain := kernels.speedup(dtype, "/CPU:0", xla, kinds)) is not None:
        if gain >= RULE_OUT:
            return None
        return (f"{kernels.describe(dtype, '/CPU:0', xla, kinds)} on this machine, below the "
                f"{RULE_OUT:g}x a trial could win from")
    if dtype == "bfloat16" and not machine.cpu.has_bf16_matrix_units:
        return ("the CPU has no bfloat16 instructions (AVX512_BF16 or AMX-BF16), so its bfloat16 "
                "is emulated (not measured: the kernels could not be timed)")
    return None


def select(found: list[Candidate], names: list[str] | None) -> list[Candidate]:
    """Only the candidates named (float32 always: it is the baseline), each tried: a reason
    not to try one is a default, and naming it overrides it."""
    if not names:
        return found
    known = [c.name for c in found]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--candidates: unknown {', '.join(map(repr, unknown))}; on this machine "
                          f"the candidates are {', '.join(known)}")
    impossible = [c.name for c in found if c.name in names and c.why_not == NO_XLA_DETERMINISTIC]
    if impossible:
        raise ConfigError(f"--candidates {', '.join(impossible)}: {NO_XLA_DETERMINISTIC}")
    return [c.model_copy(update={"why_not": None}) for c in found
            if c.name == "float32" or c.name in names]
