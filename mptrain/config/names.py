"""The names a user can write (policies, loops, strategies, math modes and libraries), each defined once,
and the base of every section of the schema. Everything else refers to these."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "auto")
LOOPS = ("fit", "custom")
STRATEGIES = ("none", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
MATH_MODES = ("default", "onednn_bf16", "graph_bf16", "tf32_off")
MATH_LIBRARIES = ("default", "onednn", "eigen")
PolicyName = Literal[POLICIES]  # type: ignore[valid-type]
LoopName = Literal[LOOPS]  # type: ignore[valid-type]
StrategyName = Literal[STRATEGIES]  # type: ignore[valid-type]
MathMode = Literal[MATH_MODES]  # type: ignore[valid-type]
MathLibrary = Literal[MATH_LIBRARIES]  # type: ignore[valid-type]
Activation = Literal["relu", "gelu", "silu", "swish", "tanh", "sigmoid", "elu", "linear"]
Positive = Annotated[int, Field(ge=1)]


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt key silently ignored is a wrong experiment."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


