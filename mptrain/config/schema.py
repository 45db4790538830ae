"""The experiment schema: every key of an experiment file, typed, with its default and limits.

Everything the trainer needs is here, checked before any TensorFlow work starts, so a typo in
a YAML file costs a second instead of a failed run. Reading YAML and turning validation errors
into messages lives in `loading.py`; checks that need the file system (does the builder file
define that function, does the CSV have that column) live in `checks.py`.

`data` and `model` are each one of several kinds, chosen by `data.dataset` and `model.kind`;
each kind has only the keys that mean something for it.

This module must not import TensorFlow: `mptrain validate` and `--help` stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mptrain.config.applications import APPLICATIONS
from mptrain.config.optimizers import OPTIMIZERS, check_kwargs

# The names a user can write, each defined once; everything else refers to these.
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "auto")
LOOPS = ("fit", "custom")
STRATEGIES = ("none", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
MATH_MODES = ("default", "onednn_bf16", "graph_bf16", "tf32_off")
PolicyName = Literal[POLICIES]  # type: ignore[valid-type]
LoopName = Literal[LOOPS]  # type: ignore[valid-type]
StrategyName = Literal[STRATEGIES]  # type: ignore[valid-type]
MathMode = Literal[MATH_MODES]  # type: ignore[valid-type]
Activation = Literal["relu", "gelu", "silu", "swish", "tanh", "sigmoid", "elu", "linear"]
Positive = Annotated[int, Field(ge=1)]


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt key silently ignored is a wrong experiment."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- data ---------------------------------------------------------------------------------


class _DataBase(_Strict):
    validation_split: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Fraction of the training examples held out for validation (the last ones, as Keras)."))
    max_train_examples: int | None = Field(None, ge=1)
    max_test_examples: int | None = Field(None, ge=1)


class MnistData(_DataBase):
    dataset: Literal["mnist", "fashion_mnist"]
    path: Path | None = None


class NpzData(_DataBase):
    dataset: Literal["npz"]
    path: Path


class SyntheticData(_DataBase):
    """A deterministic, learnable classification set (no I/O): class means plus noise."""

    dataset: Literal["synthetic"] = "synthetic"
    train_size: int = Field(2048, ge=1)
    test_size: int = Field(512, ge=1)
    input_shape: list[Positive] = Field(default_factory=lambda: [784], min_length=1)
    num_classes: int = Field(10, ge=1)
    noise: float = Field(1.0, ge=0)


class SyntheticTextData(_DataBase):
    """Token sequences whose class is which of `num_classes` marker tokens they contain most
    often among random filler: learnable by attention, no I/O."""

    dataset: Literal["synthetic_text"]
    train_size: int = Field(2048, ge=1)
    test_size: int = Field(512, ge=1)
    sequence_length: int = Field(64, ge=2)
    vocab_size: int = Field(1000, ge=8)
    num_classes: int = Field(4, ge=2)


Cache = Literal["none", "memory"] | Path


class _FileData(_DataBase):
    """Data on disk, streamed through tf.data: decoded in parallel as it is needed, so a
    data set larger than memory trains. `cache: memory` decodes it once and keeps it; a file
    path keeps the decoded examples in that file (memory-mapped) for the next runs."""

    path: Path
    test_path: Path | None = Field(None, description="A separate test set; default: test_split.")
    test_split: float = Field(0.2, gt=0.0, lt=1.0)
    cache: Cache = "none"


class ImageFolderData(_FileData):
    dataset: Literal["image_folder"]
    image_size: tuple[Positive, Positive] = (64, 64)
    color_mode: Literal["rgb", "grayscale"] = "rgb"
    random_flip: Literal["none", "horizontal", "vertical", "horizontal_and_vertical"] = "none"
    random_crop: int = Field(0, ge=0, description="Pad by this many pixels, crop back at random.")
    skip_bad_files: bool = Field(False, description=(
        "Leave out images that do not decode (listed in the run folder) instead of stopping."))


class TextFolderData(_FileData):
    dataset: Literal["text_folder"]
    max_tokens: int = Field(20000, ge=8, description="Vocabulary size, padding and OOV included.")
    sequence_length: int = Field(128, ge=2)
    encoding: str = Field("utf-8", description=(
        "The texts' encoding (utf-8, latin-1, cp1252, utf-16...); bytes invalid in it become "
        "U+FFFD."))

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, encoding: str) -> str:
        import codecs

        try:
            return codecs.lookup(encoding).name
        except LookupError:
            raise ValueError(f"{encoding!r} is not an encoding Python knows; e.g. utf-8, "
                             "latin-1, cp1252, utf-16") from None


class CsvData(_FileData):
    dataset: Literal["csv"]
    label_column: str
    feature_columns: list[str] | None = None  # default: every other column
    delimiter: str = Field(",", min_length=1, max_length=1)


class TfdsData(_DataBase):
    dataset: Literal["tfds"]
    name: str = Field(pattern=r"^[a-z0-9_]+(/[a-z0-9_]+)?(:[0-9.]+)?$")
    data_dir: Path | None = None  # default: TensorFlow Datasets' own ($TFDS_DATA_DIR, ~/tensorflow_datasets)
    train_split: str = "train"
    test_split: str = "test"
    cache: Literal["none", "memory"] = "none"
    shuffle_buffer: int = Field(10_000, ge=1)


DataConfig = Annotated[
    MnistData | NpzData | SyntheticData | SyntheticTextData | ImageFolderData | TextFolderData
    | CsvData | TfdsData,
    Field(discriminator="dataset"),
]
DATA_KINDS: dict[str, type[BaseModel]] = {
    "mnist": MnistData, "fashion_mnist": MnistData, "npz": NpzData, "synthetic": SyntheticData,
    "synthetic_text": SyntheticTextData, "image_folder": ImageFolderData,
    "text_folder": TextFolderData, "csv": CsvData, "tfds": TfdsData,
}


# --- model --------------------------------------------------------------------------------


LayerPolicy = Literal[tuple(p for p in POLICIES if p != "auto")]  # type: ignore[valid-type]


OutputActivation = Literal["softmax", "linear", "sigmoid"]


class _ModelBase(_Strict):
    num_classes: int | None = Field(None, ge=1, description=(
        "Outputs of the classifier; default: the classes the data has (1 with "
        "binary_crossentropy)."))
    output_activation: OutputActivation | None = Field(None, description=(
        "mptrain's models: the head's activation (default softmax; sigmoid with "
        "binary_crossentropy). Your own model (python, saved): what its output is (softmax or "
        "sigmoid: probabilities; linear: logits); default: read from its last layer."))
    float32_layers: list[str] = Field(default_factory=list, description=(
        "Layer names or globs kept in float32 whatever the policy (e.g. what diagnose advises)."))
    layer_policies: dict[str, LayerPolicy] = Field(default_factory=dict, description=(
        "Layer name or glob → policy, for any other per-layer choice."))

    @property
    def layer_rules(self) -> dict[str, str]:
        return {**{name: "float32" for name in self.float32_layers}, **self.layer_policies}


class MLPConfig(_ModelBase):
    kind: Literal["mlp"] = "mlp"
    hidden_units: list[Positive] = Field(default_factory=lambda: [4096, 4096])
    activation: Activation = "relu"


class CNNConfig(_ModelBase):
    kind: Literal["cnn"]
    filters: list[Positive] = Field(default_factory=lambda: [32, 64], min_length=1)
    kernel_size: int = Field(3, ge=1)
    pooling: Literal["max", "average", "none"] = "max"
    dense_units: list[Positive] = Field(default_factory=lambda: [128])
    activation: Activation = "relu"


class _HeadConfig(_ModelBase):
    """mptrain's classification head on a backbone: pooling, dropout, Dense, float32 output."""

    pooling: Literal["avg", "max"] = "avg"
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    trainable_backbone: bool = Field(True, description="false: train the head only (fine-tuning).")


class ApplicationConfig(_HeadConfig):
    kind: Literal["application"]
    name: str
    weights: str | None = Field(None, description="null, imagenet, or a .weights.h5 file.")
    image_size: tuple[Positive, Positive] | None = Field(
        None, description="Resize inputs to this size inside the model; default: the data's.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="e.g. {alpha: 0.5}")

    @field_validator("name")
    @classmethod
    def _known_application(cls, name: str) -> str:
        if name not in APPLICATIONS:
            from mptrain.errors import did_you_mean

            raise ValueError(f"{name!r} is not in keras.applications{did_you_mean(name, APPLICATIONS)}; "
                             f"choose from {', '.join(sorted(APPLICATIONS))}")
        return name

    @field_validator("weights")
    @classmethod
    def _weights(cls, weights: str | None) -> str | None:
        if weights not in (None, "imagenet") and not weights.endswith(".h5"):
            raise ValueError(f"{weights!r}: use null (random), imagenet (downloads once), or the "
                             "path of a .weights.h5 file")
        return weights


class TransformerConfig(_ModelBase):
    """A pre-LayerNorm Transformer encoder: patches of an image (as ViT) or token embeddings,
    `num_layers` blocks of attention and MLP, mean pooling, mptrain's head."""

    kind: Literal["transformer"]
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    embed_dim: int = Field(64, ge=1)
    mlp_dim: int = Field(128, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    patch_size: int | None = Field(None, ge=1, description="Images: square patch side (default 4).")
    vocab_size: int | None = Field(None, ge=2, description="Tokens: default from the data.")
    sequence_length: int | None = Field(None, ge=1, description="Tokens: default from the data.")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> TransformerConfig:
        if self.embed_dim % self.num_heads:
            raise ValueError(f"model.embed_dim {self.embed_dim} must be a multiple of "
                             f"model.num_heads {self.num_heads} (each head gets embed_dim / num_heads)")
        return self


class KerasHubConfig(_HeadConfig):
    kind: Literal["keras_hub"]
    backbone: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]*Backbone$",
                          description="A keras_hub.models class, e.g. BertBackbone.")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    preset: str | None = Field(None, description="Pretrained weights (downloads once).")

    @model_validator(mode="after")
    def _kwargs_or_preset(self) -> KerasHubConfig:
        if self.preset is None and not self.kwargs:
            raise ValueError("model.keras_hub needs kwargs (build from scratch) or a preset "
                             "(pretrained, needs a download once)")
        return self


class PythonConfig(_ModelBase):
    kind: Literal["python"]
    builder: str = Field(pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_]*$", description=(
        '"package.module:function" or "path/to/file.py:function"'))
    kwargs: dict[str, Any] = Field(default_factory=dict)


class SavedConfig(_ModelBase):
    kind: Literal["saved"]
    path: Path
    unfreeze: bool = Field(False, description="Train every layer (fine-tuning's second stage).")


ModelConfig = Annotated[
    MLPConfig | CNNConfig | ApplicationConfig | TransformerConfig | KerasHubConfig | PythonConfig
    | SavedConfig,
    Field(discriminator="kind"),
]
# Models mptrain did not write: what their output is (probabilities or logits) is read from
# the model, not decided by a head of mptrain's.
OWN_MODELS = ("python", "saved")
MODEL_KINDS: dict[str, type[BaseModel]] = {
    "mlp": MLPConfig, "cnn": CNNConfig, "application": ApplicationConfig,
    "transformer": TransformerConfig, "keras_hub": KerasHubConfig, "python": PythonConfig,
    "saved": SavedConfig,
}


# --- training -----------------------------------------------------------------------------


class ConstantSchedule(_Strict):
    kind: Literal["constant"]
    learning_rate: float = Field(gt=0)
    warmup_steps: int = Field(0, ge=0)


class CosineSchedule(_Strict):
    """Linear warm-up to `learning_rate`, then cosine decay to `alpha` x it."""

    kind: Literal["cosine"]
    learning_rate: float = Field(gt=0)
    warmup_steps: int = Field(0, ge=0)
    decay_steps: int | None = Field(None, ge=1, description="Default: every step after warm-up.")
    alpha: float = Field(0.0, ge=0.0, le=1.0)


class ExponentialSchedule(_Strict):
    kind: Literal["exponential"]
    learning_rate: float = Field(gt=0)
    decay_steps: int = Field(ge=1)
    decay_rate: float = Field(gt=0)
    staircase: bool = False


class PiecewiseSchedule(_Strict):
    kind: Literal["piecewise"]
    boundaries: list[Positive] = Field(min_length=1)
    values: list[Annotated[float, Field(gt=0)]]

    @model_validator(mode="after")
    def _one_more_value(self) -> PiecewiseSchedule:
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError(f"piecewise: {len(self.boundaries)} boundaries need "
                             f"{len(self.boundaries) + 1} values, got {len(self.values)}")
        if self.boundaries != sorted(set(self.boundaries)):
            raise ValueError("piecewise: boundaries must increase")
        return self


Schedule = Annotated[ConstantSchedule | CosineSchedule | ExponentialSchedule | PiecewiseSchedule,
                     Field(discriminator="kind")]

OptimizerName = Literal[tuple(OPTIMIZERS)]  # type: ignore[valid-type]


class OptimizerConfig(_Strict):
    name: OptimizerName = "rmsprop"
    kwargs: dict[str, Any] = Field(default_factory=dict)
    schedule: Schedule | None = None

    @field_validator("kwargs")
    @classmethod
    def _keras_accepts_kwargs(cls, kwargs: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "name" in info.data:  # else the name itself was invalid, and said so
            problems = check_kwargs(info.data["name"], kwargs)
            if problems:
                raise ValueError("; ".join(problems))
        return kwargs

    @model_validator(mode="after")
    def _one_learning_rate(self) -> OptimizerConfig:
        if self.schedule is not None and "learning_rate" in self.kwargs:
            raise ValueError("train.optimizer: give the learning rate in kwargs or a schedule, "
                             "not both")
        return self


class LossScaleConfig(_Strict):
    """Dynamic loss scaling, used under `mixed_float16` only (bf16 has float32's range)."""

    initial_scale: float = Field(2.0**15, gt=0)
    dynamic_growth_steps: int = Field(2000, ge=1)


class CheckpointConfig(_Strict):
    """Checkpoints in RUN_DIR/checkpoints/ (TensorFlow's CheckpointManager): model, optimizer
    (with the loss scale and its step counter), data position. Both `every_*` null: none."""

    every_epochs: int | None = Field(1, ge=1)
    every_steps: int | None = Field(None, ge=1)
    keep: int = Field(3, ge=1)

    @property
    def enabled(self) -> bool:
        return self.every_epochs is not None or self.every_steps is not None


class RecoveryConfig(_Strict):
    """What to do when training diverges (TF Model Garden's recovery): restore the last good
    checkpoint and go on with the next batches, at most `max_trials` times, then stop."""

    loss_upper_bound: float | None = Field(None, gt=0, description="A loss above this diverged.")
    max_trials: int = Field(3, ge=0)
    collapse_steps: int = Field(25, ge=1, description=(
        "mixed_float16: this many skipped steps in a row is a loss-scale collapse."))


class TrainConfig(_Strict):
    loop: LoopName = "fit"
    epochs: int = Field(5, ge=1)
    batch_size: int = Field(128, ge=1)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    loss: Literal["sparse_categorical_crossentropy", "binary_crossentropy"] = (
        "sparse_categorical_crossentropy"
    )
    metrics: list[Literal["accuracy", "top5_accuracy"]] = Field(default_factory=lambda: ["accuracy"])
    jit_compile: bool | None = Field(
        None, description="XLA. null: chosen per policy and device (docs/experiment-file.md)."
    )
    xla_optimizer_update: bool | None = Field(
        None, description="Compile only the optimizer update with XLA. null: on for CPUs."
    )
    math_mode: MathMode = Field("default", description=(
        "How float32 math runs (policy float32 only): onednn_bf16 = oneDNN computes float32 "
        "matmuls and convolutions in bfloat16 (TF_SET_ONEDNN_FPMATH_MODE=BF16); graph_bf16 = "
        "TensorFlow's auto_mixed_precision_onednn_bfloat16 graph rewrite; tf32_off = no TF32 "
        "on Ampere+ GPUs. `mptrain plan` measures which helps."))
    warmup_steps: int = Field(2, ge=0)
    loss_scale: LossScaleConfig = Field(default_factory=LossScaleConfig)
    max_steps: int | None = Field(None, ge=1, description="Stop after this many training steps.")
    max_step_seconds: float | None = Field(
        None, gt=0, description="Stop once a step takes longer than this (seconds), from the "
        "second step of a start on: the first traces the step and creates its kernels."
    )
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)


class DistributeConfig(_Strict):
    """tf.distribute: where the training runs. `train.batch_size` is the global batch."""

    strategy: StrategyName = "none"
    devices: list[str] | None = Field(None, description='e.g. ["/gpu:0", "/gpu:1"]; default: all.')
    tpu: str | None = Field(None, description="TPU name or address (TPUClusterResolver).")
    workers: int | None = Field(None, ge=2, description=(
        "multi_worker_mirrored on this machine: N local worker processes (`run --workers N`); "
        "kept in the run's config.yaml so `run --resume` restarts as many. Where $TF_CONFIG "
        "is set, each process is one worker of that cluster instead."))

    @model_validator(mode="after")
    def _workers_are_multi_worker(self) -> DistributeConfig:
        if self.workers is not None and self.strategy != "multi_worker_mirrored":
            raise ValueError(f"distribute.workers {self.workers} needs distribute.strategy "
                             f"multi_worker_mirrored (not {self.strategy})")
        return self

    @field_validator("devices")
    @classmethod
    def _device_names(cls, devices: list[str] | None) -> list[str] | None:
        import re

        pattern = r"/?(job:\w+/(replica:\d+/)?(task:\d+/)?)?(device:)?(cpu|gpu|tpu):\d+"
        for device in devices or []:
            if not re.fullmatch(pattern, device, flags=re.IGNORECASE):
                raise ValueError(f"{device!r} is not a device name like /gpu:0 or /cpu:1")
        return devices


class MlflowConfig(_Strict):
    """MLflow tracking (the `mptrain[mlflow]` extra): each run also logged as an MLflow run.
    The run folder stays the record; a tracking server that fails never stops training."""

    tracking_uri: str | None = Field(None, description=(
        "Default: a SQLite store in output.dir (sqlite:///OUTPUT_DIR/mlflow.db), offline."))
    experiment: str | None = Field(None, description="Default: the experiment's name.")
    run_name: str | None = Field(None, description="Default: the run folder's name.")
    tags: dict[str, str | int | float | bool] = Field(default_factory=dict)


class OutputConfig(_Strict):
    dir: Path = Field(Path("runs"), description=(
        "Run folders go here; relative: beside the experiment file (built-ins: the current "
        "folder)."))
    save_model: bool = True
    mlflow: MlflowConfig | None = Field(None, description=(
        "Log runs to MLflow; off when null, on when a mapping (even {})."))


class ExperimentConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100,
                      description="Run folders are named after it; defaults to the file's name.")
    seed: int = Field(0, ge=0, lt=2**31)
    deterministic: bool = Field(False, description=(
        "tf.config.experimental.enable_op_determinism(): bit-identical reruns, slower ops."))
    policy: PolicyName = "float32"
    data: DataConfig = Field(default_factory=SyntheticData)
    model: ModelConfig = Field(default_factory=MLPConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    distribute: DistributeConfig = Field(default_factory=DistributeConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    _source: str = PrivateAttr("<experiment>")  # the file (or built-in) it was read from

    @property
    def source(self) -> str:
        """Where the experiment came from, for messages: its file, or a built-in's name."""
        return self._source

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            raw = dict(raw)
            model = raw.get("model", {})
            if isinstance(model, dict):
                raw["model"] = model = {"kind": "mlp", **model}
                train = raw.get("train")
                loss = train.get("loss") if isinstance(train, dict) else None
                if model.get("output_activation") is None and model["kind"] not in OWN_MODELS:
                    model["output_activation"] = ("sigmoid" if loss == "binary_crossentropy"
                                                  else "softmax")
                if loss == "binary_crossentropy" and model.get("num_classes") is None:
                    model["num_classes"] = 1
            if isinstance(raw.get("data"), dict):
                raw["data"] = {"dataset": "synthetic", **raw["data"]}
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

    @model_validator(mode="after")
    def _math_mode_needs_float32(self) -> ExperimentConfig:
        if self.train.math_mode in ("onednn_bf16", "graph_bf16") and self.policy != "float32":
            raise ValueError(f"train.math_mode {self.train.math_mode} changes how float32 math runs: "
                             f"it needs policy: float32 (the experiment has {self.policy})")
        return self

    @model_validator(mode="after")
    def _fit_runs_under_the_strategy(self) -> ExperimentConfig:
        if self.distribute.strategy == "multi_worker_mirrored" and self.train.loop == "fit":
            raise ValueError("distribute.strategy multi_worker_mirrored needs train.loop: custom "
                             "(Keras 3's Model.fit does not run under MultiWorkerMirroredStrategy: "
                             "keras-team/keras#20585)")
        return self

    def to_yaml_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
