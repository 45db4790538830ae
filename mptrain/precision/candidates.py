"""A precision candidate: one way to run an experiment's numbers, with one name.

A candidate is a dtype policy and a value on each axis beside it (`precision.axes`, one class
each): whole-step XLA or mptrain's choice of it, a math mode, the CPU's math library, fused
layers, the layers kept in float32, the batch. Its name is the policy followed by what
differs from mptrain's own choices, each axis's part after its separator: `mixed_bfloat16`
(XLA as mptrain chooses it for the policy and device), `mixed_bfloat16+xla` and
`float32+xla` (XLA forced on: float32+xla is the control a 16-bit candidate with XLA is read
against), `float32+onednn` and `float32+eigen` (the math library TensorFlow does not choose
on this CPU: oneDNN where it leaves oneDNN off, as on AVX2-only CPUs, Eigen where it turns it
on; the control of a 16-bit candidate in that library), `mixed_bfloat16+fused`,
`float32+onednn_bf16` and `float32+graph_bf16` (float32 storage, bfloat16 math on a CPU),
`float32+tf32_off` (no TF32 on an Ampere GPU), `mixed_bfloat16+islands` (plan's float32
layers), `mixed_bfloat16@b256` (a plan's cell at another batch). `candidate` parses a name
and `Candidate.name` is what plan prints, both by the axes' table alone, so compare takes
every name plan prints (`mptrain compare --policies float32,mixed_bfloat16+xla`), and a
plan.yaml spells its candidate out in ordinary experiment keys (`Candidate.settings`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from mptrain.config.names import POLICIES
from mptrain.errors import ConfigError, did_you_mean
from mptrain.hardware.kernels import GENERAL_KINDS, KernelSpeeds, Kinds, kind_shares, measured_kernels, times
from mptrain.hardware.machine import LIBRARY_NAMES, Machine
from mptrain.precision.axes import AXES, BATCH, ONEDNN_MODES, PRECISION, RULE_OUT, SIXTEEN_BIT, Where
from mptrain.precision.policy import NO_XLA_DETERMINISTIC
from mptrain.record import Record

_PARTS = ", ".join(axis.said() for axis in AXES if axis.values)  # what may follow a policy in a name


def name_of(policy: str, values: dict[str, Any]) -> str:
    """A candidate's name: the policy, then each axis's part (`axes.AXES`), each after its
    separator (`+`, `@` for the batch)."""
    parts = ((axis.separator, axis.part(values.get(axis.field, axis.default))) for axis in AXES)
    return policy + "".join(separator + part for separator, part in parts if part)


# every candidate plan knows, on some machine (which are tried depends on this one): each
# precision, alone and with one value of each axis it pairs with
CANDIDATE_NAMES = ("float32", *SIXTEEN_BIT, *(name_of(policy, {axis.field: value})
                                              for axis in AXES for policy in axis.policies
                                              for value in axis.values))


class Candidate(Record):
    """One way to run the experiment: a policy and a value on each axis (`axes.AXES`)."""

    name: str
    policy: str
    jit_compile: bool | None = None  # None: mptrain's choice for the policy and device
    math_mode: str = "default"
    math_library: str = "default"  # `train.math_library`: default, onednn, eigen
    float32_layers: list[str] = []
    fused: bool = False  # model.fused_layers: one fused BatchNorm op, float32 conv weight gradients
    batch_size: int | None = None  # a plan's cell at another batch (None: the experiment's)
    why_not: str | None = None  # why it is not tried unless named (`--candidates NAME` tries it)
    # plan.json before 2026-12-03 (third session) marked the candidates a name lifts; every
    # candidate is lifted by its name now: read from an old file, never written
    unless_named: bool | None = Field(None, exclude=True)

    @property
    def settings(self) -> dict[str, object]:
        """The candidate in ordinary experiment keys (`config.variant` applies them): what its
        runs are given, and what a plan.yaml spells out (an axis left at its default that does
        not override leaves the experiment's own: a plan.yaml's islands, its parent's library;
        the batch is given with what it scales, `Variant.batch`)."""
        values = [(axis, getattr(self, axis.field)) for axis in AXES if not axis.scaled]
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
        return Candidate(name="float32", policy="float32").changed(
            jit_compile=self.jit_compile, math_library=self.math_library)

    @property
    def sixteen_bit_dtype(self) -> str:
        """bfloat16 or float16: the 16-bit type its matmuls run in (if they do)."""
        return "float16" if self.policy in ("mixed_float16", "float16") else "bfloat16"

    def why_not_here(self, where: Where) -> str | None:
        """Why it cannot win here: the first reason an axis it sets gives, then its precision's."""
        axes = (axis.why_not(self, where) for axis in AXES if getattr(self, axis.field) != axis.default)
        return next((why for why in axes if why), None) or PRECISION.why_not(self, where)


def candidate_name(config, policy: str | None = None) -> str:
    """The name of the candidate an experiment's settings make (under `policy`, what its
    `auto` resolved to): what `mptrain runs` and a run's summary call it, the name `candidate`
    parses (float32 layers: `+islands`, as plan names the candidate it keeps them in; its
    batch is its own, no part)."""
    def setting(key: str):
        section, name = key.split(".")
        return getattr(getattr(config, section), name)

    return name_of(policy or config.policy,
                   {axis.field: setting(axis.key) for axis in AXES if not axis.scaled})


def file_label(name: str) -> str:
    """A candidate's name (or a label made of one) as a folder, file or run name: "+" and "@"
    become "-", one spelling for compare's and plan's folders, logs and variant files."""
    return name.replace("+", "-").replace("@", "-")


def cell_label(label: str, batch_size: int | None) -> str:
    """A label (compare's variant) at another batch size, as the batch axis names it:
    `bfloat16-fit@b256`; the label alone at the experiment's batch."""
    part = BATCH.part(batch_size)
    return label if part is None else label + BATCH.separator + part


def candidate(name: str, why_not: str | None = None) -> Candidate:
    """The candidate a name means: `POLICY[+xla][+MATH_MODE][+LIBRARY][+fused]`, each part
    read by the axis it belongs to."""
    policy, *parts = name.split("+")
    if policy not in POLICIES or policy == "auto":
        known = [p for p in POLICIES if p != "auto"]
        which = f"{name!r}: {policy!r}" if parts else repr(policy)
        raise ConfigError(f"{which} is not a policy{did_you_mean(policy, known)}; a "
                          f"candidate is a policy ({', '.join(known)}), then any of {_PARTS}, e.g. "
                          "mixed_bfloat16+xla")
    values: dict[str, Any] = {}
    for part in parts:
        axis, value = next(((a, v) for a in AXES if (v := a.parse(part)) is not None), (None, None))
        if axis is None or axis.field in values:
            raise ConfigError(f"{name!r}: {part!r} is not one of {_PARTS}, or is given twice")
        values[axis.field] = value
    math_mode, library = values.get("math_mode", "default"), values.get("math_library", "default")
    if math_mode in ONEDNN_MODES and policy != "float32":
        raise ConfigError(f"{name!r}: {math_mode} is bfloat16 math under a float32 policy; "
                          f"use float32+{math_mode}")
    if math_mode in ONEDNN_MODES and library == "eigen":
        raise ConfigError(f"{name!r}: {math_mode} is a mode of oneDNN's, and eigen turns oneDNN off")
    return Candidate(name=name_of(policy, values), policy=policy, why_not=why_not, **values)


def candidates(machine: Machine, kernels: KernelSpeeds | None = None, *,
               unfused: str | None = None, deterministic: bool = False,
               kinds: Kinds = GENERAL_KINDS) -> list[Candidate]:
    """What this machine can run: each precision it offers, alone and with each value an axis
    offers beside it here (`axes.AXES`: one change at a time, as an A/B test), float32 and
    float32+xla (XLA's own effect, and the control of every 16-bit candidate with XLA)
    first, the rest most promising first by the measured kernels of the model's kinds
    (`kinds`: their FLOP shares, `hardware.kernels.kind_shares`). One that cannot win here
    carries why (`Candidate.why_not_here`), with the figure this machine's kernels measured
    (or the rule, said as one, when they were not). `unfused`: why `+fused` would not change
    the model (`model.fused.why_not_fused`; None: it would). `deterministic`: the
    experiment's op determinism, under which no step runs XLA (`policy.NO_XLA_DETERMINISTIC`):
    those candidates cannot run at all."""
    where = Where(machine, kernels, kinds, unfused, deterministic)
    found = []
    for policy in PRECISION.offers(where):
        plain = candidate(policy)
        found += [plain, *(plain.changed(**{axis.field: value}) for axis in AXES
                           for value in axis.offers(policy, where))]
    found = [c.model_copy(update={"why_not": c.why_not_here(where)}) for c in found]
    if kernels is None or machine.tpu:  # unmeasured: the 16-bit policies, then float32's other axes
        return sorted(found, key=lambda c: c.policy == "float32" and c.name not in ("float32", "float32+xla"))
    first, control, *rest = [_in_all(c, machine, kernels, kinds) for c in found]
    if any(c.jit_compile and c.why_not is None for c in rest):  # float32+xla: their control
        control = found[1]
    rest.sort(key=lambda c: -expected_gain(c, machine, kernels, kinds))
    return [first, control, *rest]


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


def model_candidates(prepared, names: list[str] | None = None,
                     status: Callable[[str], object] | None = None) -> tuple[list[Candidate], Kinds]:
    """The candidates this machine can run for a prepared experiment's model (plan's),
    ordered and ruled out by this machine's kernels of the model's own kinds of layer (their
    shares of its FLOPs: ResNet50's are 99% conv2d), those `names` names alone
    (`--candidates`); and those kinds."""
    from mptrain.model.flops import forward_profile
    from mptrain.model.fused import why_not_fused  # Keras: once TensorFlow was imported quietly

    machine = prepared.machine
    profile = forward_profile(prepared.model, prepared.data.spec.shape)
    kinds = kind_shares([(type(layer), profile.flops_by_layer.get(layer.name, 0))
                         for layer in profile.layers])
    found = candidates(machine, measured_kernels(prepared.tf, machine, status),
                       unfused=why_not_fused(prepared.model), deterministic=prepared.config.deterministic,
                       kinds=kinds or GENERAL_KINDS)
    return select(found, names), kinds
