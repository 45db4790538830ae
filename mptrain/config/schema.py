"""The experiment schema: every key of an experiment file, typed, with its default and limits.

Everything the trainer needs is here, checked before any TensorFlow work starts, so a typo in
a YAML file costs a second instead of a failed run. Reading YAML and turning validation errors
into messages lives in `loading.py`.

This module must not import TensorFlow: `mptrain validate` and `--help` stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from mptrain.config.optimizers import OPTIMIZERS, check_kwargs

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


OptimizerName = Literal[tuple(OPTIMIZERS)]  # type: ignore[valid-type]


class OptimizerConfig(_Strict):
    name: OptimizerName = "rmsprop"
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kwargs")
    @classmethod
    def _keras_accepts_kwargs(cls, kwargs: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "name" in info.data:  # else the name itself was invalid, and said so
            problems = check_kwargs(info.data["name"], kwargs)
            if problems:
                raise ValueError("; ".join(problems))
        return kwargs


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
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100,
                      description="Run folders are named after it; defaults to the file's name.")
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
