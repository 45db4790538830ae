"""A precision candidate: one way to run an experiment's numbers, with one name.

A candidate is a dtype policy, whole-step XLA or mptrain's choice of it, a math mode, and the
layers kept in float32. Its name is the policy followed by what differs from mptrain's own
choices, joined by `+`: `mixed_bfloat16` (XLA as mptrain chooses it for the policy and
device), `mixed_bfloat16+xla` (XLA forced on), `float32+onednn_bf16` and `float32+graph_bf16`
(float32 storage, bfloat16 math on a CPU), `float32+tf32_off` (no TF32 on an Ampere GPU).
`candidate` parses a name and `Candidate.name` is what plan prints, so compare takes every
name plan prints (`mptrain compare --policies float32,mixed_bfloat16+xla`), and a plan.yaml
spells its candidate out in ordinary experiment keys (`Candidate.settings`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from mptrain.config.schema import MATH_MODES, POLICIES
from mptrain.errors import ConfigError, did_you_mean

# every candidate plan knows, on some machine (which are tried depends on this one)
CANDIDATE_NAMES = ("float32", "mixed_bfloat16", "mixed_bfloat16+xla", "float32+onednn_bf16",
                   "float32+graph_bf16", "mixed_float16+xla", "mixed_float16", "float32+tf32_off")


class Candidate(BaseModel):
    """One way to run the experiment: a policy, XLA or not, a math mode, float32 layers."""

    model_config = ConfigDict(extra="forbid")

    name: str
    policy: str
    jit_compile: bool | None = None  # None: mptrain's choice for the policy and device
    math_mode: str = "default"
    float32_layers: list[str] = []
    why_not: str | None = None  # set when it cannot win on this machine, and is not tried

    @property
    def settings(self) -> dict[str, object]:
        """The candidate in ordinary experiment keys (`config.variant` applies them): what its
        runs are given, and what a plan.yaml spells out."""
        return {"policy": self.policy, "train.math_mode": self.math_mode,
                "train.jit_compile": self.jit_compile, "model.float32_layers": list(self.float32_layers)}

    @property
    def sixteen_bit(self) -> bool:
        return self.policy != "float32" or self.math_mode in ("onednn_bf16", "graph_bf16")

    @property
    def sixteen_bit_dtype(self) -> str:
        """bfloat16 or float16: the 16-bit type its matmuls run in (if they do)."""
        return "float16" if self.policy in ("mixed_float16", "float16") else "bfloat16"


def candidate(name: str, why_not: str | None = None) -> Candidate:
    """The candidate a name means: `POLICY[+xla][+MATH_MODE]`."""
    policy, *parts = name.split("+")
    if policy not in POLICIES or policy == "auto":
        known = [p for p in POLICIES if p != "auto"]
        raise ConfigError(f"{name!r}: {policy!r} is not a policy{did_you_mean(policy, known)}; a "
                          f"candidate is a policy ({', '.join(known)}) with +xla or a math mode "
                          f"({', '.join(m for m in MATH_MODES if m != 'default')}), e.g. "
                          "mixed_bfloat16+xla")
    jit, math_mode = None, "default"
    for part in parts:
        if part == "xla" and jit is None:
            jit = True
        elif part in MATH_MODES and part != "default" and math_mode == "default":
            math_mode = part
        else:
            raise ConfigError(f"{name!r}: {part!r} is not +xla or a math mode "
                              f"({', '.join(m for m in MATH_MODES if m != 'default')}), or is "
                              "given twice")
    if math_mode in ("onednn_bf16", "graph_bf16") and policy != "float32":
        raise ConfigError(f"{name!r}: {math_mode} is bfloat16 math under a float32 policy; "
                          f"use float32+{math_mode}")
    return Candidate(name=name, policy=policy, jit_compile=jit, math_mode=math_mode, why_not=why_not)
