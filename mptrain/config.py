"""The experiment file: one typed, validated schema, YAML in, resolved YAML out.

Everything the trainer needs is here, checked before any TensorFlow work starts, so a typo in
a YAML file costs a second instead of a failed run. Validation errors name the file, the key
path, the bad value and what is allowed (see `ConfigError`).

This module must not import TensorFlow: `mptrain validate` and `--help` stay fast.
"""

from __future__ import annotations

import copy
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mptrain.errors import ConfigError

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "auto")
PolicyName = Literal["float32", "mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "auto"]
Activation = Literal["relu", "gelu", "silu", "swish", "tanh", "sigmoid", "elu", "linear"]


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt key silently ignored is a wrong experiment."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticData(_Strict):
    """A deterministic, learnable classification set (no I/O): class means plus noise."""

    train_size: int = Field(2048, ge=1)
    test_size: int = Field(512, ge=1)
    input_shape: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [784], min_length=1)
    num_classes: int = Field(10, ge=1)
    noise: float = Field(1.0, ge=0)


class DataConfig(_Strict):
    dataset: Literal["mnist", "fashion_mnist", "synthetic", "npz"] = "synthetic"
    path: Path | None = None
    validation_split: float = Field(0.0, ge=0.0, lt=1.0)
    max_train_examples: int | None = Field(None, ge=1)
    max_test_examples: int | None = Field(None, ge=1)
    synthetic: SyntheticData = Field(default_factory=SyntheticData)

    @model_validator(mode="after")
    def _npz_needs_path(self) -> DataConfig:
        if self.dataset == "npz" and self.path is None:
            raise ValueError("dataset 'npz' needs data.path: the .npz file to read")
        return self


class _ModelBase(_Strict):
    num_classes: int = Field(10, ge=1)
    activation: Activation = "relu"
    output_activation: Literal["softmax", "linear", "sigmoid"] = "softmax"


class MLPConfig(_ModelBase):
    kind: Literal["mlp"] = "mlp"
    hidden_units: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [4096, 4096])


class CNNConfig(_ModelBase):
    kind: Literal["cnn"]
    filters: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [32, 64], min_length=1)
    kernel_size: int = Field(3, ge=1)
    pooling: Literal["max", "average", "none"] = "max"
    dense_units: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [128])


ModelConfig = Annotated[MLPConfig | CNNConfig, Field(discriminator="kind")]
MODEL_KINDS: dict[str, type[BaseModel]] = {"mlp": MLPConfig, "cnn": CNNConfig}


class OptimizerConfig(_Strict):
    name: Literal["rmsprop", "adam", "sgd", "adamw"] = "rmsprop"
    kwargs: dict[str, Any] = Field(default_factory=dict)


class LossScaleConfig(_Strict):
    """Dynamic loss scaling, used under `mixed_float16` only (bf16 has float32's range)."""

    initial_scale: float = Field(2.0**15, gt=0)
    dynamic_growth_steps: int = Field(2000, ge=1)


class TrainConfig(_Strict):
    loop: Literal["fit", "custom"] = "fit"
    epochs: int = Field(5, ge=1)
    batch_size: int = Field(128, ge=1)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    loss: Literal["sparse_categorical_crossentropy", "binary_crossentropy"] = (
        "sparse_categorical_crossentropy"
    )
    metrics: list[Literal["accuracy", "top5_accuracy"]] = Field(default_factory=lambda: ["accuracy"])
    jit_compile: bool | None = Field(
        None, description="XLA. null: chosen per policy and device (see README)."
    )
    xla_optimizer_update: bool | None = Field(
        None, description="Compile only the optimizer update with XLA. null: on for CPUs."
    )
    warmup_steps: int = Field(2, ge=0)
    loss_scale: LossScaleConfig = Field(default_factory=LossScaleConfig)
    max_steps: int | None = Field(None, ge=1, description="Stop after this many training steps.")
    max_step_seconds: float | None = Field(
        None, gt=0, description="Stop once a timed step takes longer than this."
    )


class OutputConfig(_Strict):
    dir: Path = Path("runs")
    save_model: bool = True


class ExperimentConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)
    seed: int = Field(0, ge=0, lt=2**31)
    policy: PolicyName = "float32"
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=MLPConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)

    @model_validator(mode="before")
    @classmethod
    def _model_kind_defaults_to_mlp(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("model"), dict):
            raw = {**raw, "model": {"kind": "mlp", **raw["model"]}}
        return raw

    @model_validator(mode="after")
    def _loss_fits_head(self) -> ExperimentConfig:
        head = self.model.output_activation
        if self.train.loss == "binary_crossentropy":
            if self.model.num_classes != 1 or head == "softmax":
                raise ValueError(
                    "train.loss binary_crossentropy needs model.num_classes: 1 and "
                    "model.output_activation sigmoid or linear"
                )
            if "top5_accuracy" in self.train.metrics:
                raise ValueError("train.metrics top5_accuracy needs a multi-class loss")
        elif head == "sigmoid":
            raise ValueError(
                "model.output_activation sigmoid needs train.loss binary_crossentropy; "
                "use softmax or linear with sparse_categorical_crossentropy"
            )
        return self

    def to_yaml_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# --- loading ------------------------------------------------------------------------------


def builtin_configs() -> dict[str, str]:
    """Name → one-line description of the experiments shipped inside the package."""
    out = {}
    for entry in sorted(resources.files("mptrain.configs").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            first_line = next(iter(entry.read_text().splitlines()), "")
            out[entry.name.removesuffix(".yaml")] = first_line.lstrip("# ").strip()
    return out


def find_config(ref: str | Path) -> Path:
    """A path to an existing file, or the name of a built-in experiment (`mnist_mixed`)."""
    path = Path(ref)
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml")
    if path.parent == Path(".") and name in builtin_configs():
        return Path(str(resources.files("mptrain.configs") / f"{name}.yaml"))
    known = ", ".join(builtin_configs())
    raise ConfigError(f"{ref}: no such file, and not a built-in experiment (built-ins: {known})")


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.epochs=2` → (["train", "epochs"], 2). The value is read as a YAML scalar."""
    key, sep, raw = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
        raise ConfigError(f"--set {text!r}: expected key.path=value, e.g. --set train.epochs=2")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({exc})") from None
    return key.split("."), value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `raw` with each `key.path=value` set (intermediate mappings created)."""
    result = copy.deepcopy(raw)
    for text in overrides:
        keys, value = parse_override(text)
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(f"--set {text!r}: {where} is {child!r}, not a mapping")
            node = child
        node[keys[-1]] = value
    return result


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, not {type(raw).__name__}")
    return raw


def validate(raw: dict[str, Any], source: str) -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [_describe(err) for err in exc.errors()]
        raise ConfigError(f"{source}: invalid experiment\n" + "\n".join(lines)) from None


def load_config(ref: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read, override and validate an experiment; the one way configs enter the program."""
    path = find_config(ref)
    raw = apply_overrides(read_yaml(path), overrides or [])
    raw.setdefault("name", path.name.removesuffix(".yaml").replace(" ", "_"))
    return validate(raw, str(path))


def _describe(err: dict[str, Any]) -> str:
    """One line per pydantic error: key path, bad value, what is allowed."""
    loc = [str(part) for part in err["loc"] if part not in MODEL_KINDS]
    key = ".".join(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(err["loc"][:-1])
        hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        return f"  {key}: unknown key{hint}"
    if kind == "missing":
        return f"  {key}: required key is missing"
    value = err.get("input")
    if kind == "value_error":
        where = f"{key}: " if loc else ""
        return f"  {where}{err['msg'].removeprefix('Value error, ')}"
    shown = repr(value) if not isinstance(value, dict) else "{…}"
    return f"  {key} = {shown}: {err['msg']}"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """Walk the schema along an error location to list the keys a mapping accepts."""
    model: Any = ExperimentConfig
    for part in loc:
        if part in MODEL_KINDS:  # pydantic names the union member in the location
            model = MODEL_KINDS[part]
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif part == "model":
            continue
        else:
            return []
    return list(getattr(model, "model_fields", {}))
