"""The experiment schema: every key of an experiment file, typed, with its default and limits,
checked before any TensorFlow work starts, so a typo costs a second instead of a failed run
(this module must not import TensorFlow: `mptrain validate` and `--help` stay fast). Reading
YAML and wording errors is `loading.py`'s; checks that need the file system are in
`data/source.py`, `model/checks.py` and `runs/preflight.py`. Each kind of `data` and `model`
has only its own keys (`kinds.py`); the names a user can write are in `names.py`. This module
is the schema's one namespace: it holds every section.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, PrivateAttr, field_validator, model_validator

from mptrain.config.kinds import OWN_MODELS, DataConfig, MLPConfig, ModelConfig, SyntheticData
from mptrain.config.names import LoopName, MathLibrary, MathMode, PolicyName, StrategyName, _Strict
from mptrain.config.optimizers import LrScaling, OptimizerConfig
from mptrain.errors import ConfigError
from mptrain.objective import DEFAULT_LOSS, family_of, head_activation, lower_is_better
from mptrain.objective.losses import resolve

# --- training -----------------------------------------------------------------------------


class LossScaleConfig(_Strict):
    """Dynamic loss scaling, used under `mixed_float16` only (bf16 has float32's range)."""

    initial_scale: float = Field(2.0**15, gt=0, description="The loss scale training starts with.")
    dynamic_growth_steps: int = Field(2000, ge=1, description=(
        "Steps without an overflow after which the scale doubles (it halves on one)."))


class CheckpointConfig(_Strict):
    """Checkpoints in RUN_DIR/checkpoints/ (TensorFlow's CheckpointManager): model, optimizer
    (with the loss scale and its step counter), data position. Both `every_*` null: none."""

    every_epochs: int | None = Field(1, ge=1, description="A checkpoint every N epochs.")
    every_steps: int | None = Field(None, ge=1, description="A checkpoint every N steps.")
    keep: int = Field(3, ge=1, description="The newest checkpoints kept; older ones are deleted.")

    @property
    def enabled(self) -> bool:
        return self.every_epochs is not None or self.every_steps is not None


class RecoveryConfig(_Strict):
    """What to do when training diverges (TF Model Garden's recovery): restore the last good
    checkpoint and go on with the next batches, at most `max_trials` times, then stop."""

    loss_upper_bound: float | None = Field(None, gt=0, description="A loss above this diverged.")
    max_trials: int = Field(3, ge=0, description=(
        "Recoveries allowed before the run stops as diverged; 0: stop at the first."))
    collapse_steps: int = Field(25, ge=1, description=(
        "mixed_float16: this many skipped steps in a row is a loss-scale collapse."))


# Keras resolves metric names (`keras.metrics.get`, compile's "accuracy") when the model is
# built: one Keras does not know is refused then, before anything runs, with Keras' own
# names; a loss name is read here, by the objectives' own table (`objective.losses`)
KerasName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class LossConfig(_Strict):
    """A Keras loss with its arguments, as `compile(loss=keras.losses.CLASS(**kwargs))` takes
    them: `{name: binary_focal_crossentropy, kwargs: {gamma: 3.0}}`."""

    name: KerasName = Field(description="A Keras loss, by the name compile takes.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "Its arguments (focal's gamma and alpha, label_smoothing, huber's delta); from_logits "
        "is mptrain's, from the model's output."))


LossSpec = KerasName | LossConfig | dict[str, KerasName | LossConfig]
MetricsSpec = list[KerasName] | dict[str, list[KerasName]]


class EpochRule(_Strict):
    monitor: str = Field("val_loss", pattern=r"^(val_)?[a-z0-9_]+$", description=(
        "The epoch's figure it watches: loss or a train.metrics name, val_ first for the "
        "validation split's (which needs data.validation_split)."))
    min_delta: float = Field(0.0, ge=0, description="A smaller change is no improvement.")

    def mode(self) -> str:
        """Keras' `mode="auto"`: smaller is better for the loss and errors (mae), larger for
        accuracy, AUC, IoU, precision, recall (`objective.lower_is_better`)."""
        return "min" if lower_is_better(self.monitor) else "max"


class EarlyStoppingConfig(EpochRule):
    """Keras' EarlyStopping, for both loops: stop once `monitor` has not improved for
    `patience` epochs."""

    patience: int = Field(3, ge=1, description="Epochs without improvement before it stops.")
    restore_best_weights: bool = Field(False, description=(
        "At the end, the weights of the best epoch (kept in RUN_DIR/best.weights.h5: "
        "train.keep_best, on the same monitor), as Keras restores them."))


class ReduceLROnPlateauConfig(EpochRule):
    """Keras' ReduceLROnPlateau, for both loops: the learning rate times `factor` once
    `monitor` has not improved for `patience` epochs (counted again after each reduction)."""

    factor: float = Field(0.1, gt=0, lt=1, description="The learning rate is multiplied by it.")
    patience: int = Field(2, ge=1, description="Epochs without improvement before a reduction.")
    min_lr: float = Field(0.0, ge=0, description="It is never lowered below this.")


class KeepBestConfig(EpochRule):
    """Keras' ModelCheckpoint(save_best_only=True): the weights of the best epoch so far, in
    RUN_DIR/best.weights.h5 (load them with model.load_weights)."""


# the train keys whose rule reads an epoch figure at each epoch's end (`EpochRule`)
EPOCH_RULES = ("early_stopping", "reduce_lr_on_plateau", "keep_best")


class TrainConfig(_Strict):
    loop: LoopName = Field("fit", description=(
        "fit: Keras' Model.fit; custom: mptrain's GradientTape loop with the guide's loss "
        "scaling."))
    epochs: int = Field(5, ge=1, description="Passes over the training examples.")
    batch_size: int = Field(128, ge=1, description="Examples per step (the global batch).")
    lr_scaling: LrScaling = Field("none", description=(
        "How the learning rate follows the batch when compare or plan tries another one "
        "(--batch-sizes): none keeps it; linear multiplies it by new batch / this batch, "
        "with a warm-up from this batch's rate over 5% of the run (Goyal et al. 2017); sqrt "
        "by the square root of that ratio. A single run uses its learning rate as written."))
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description=(
        "The optimizer (wrapped in a LossScaleOptimizer under mixed_float16)."))
    loss: LossSpec | None = Field(None, description=(
        "A Keras loss, by the name compile takes (sparse_categorical_crossentropy, "
        "categorical_crossentropy, binary_crossentropy, binary_focal_crossentropy, "
        "mean_squared_error, mean_absolute_error, huber, ...), or {name: ..., kwargs: {...}} "
        "with its arguments, or output name → loss for a model with several outputs. It sets "
        "the objective: class ids, 0/1 labels (one or several per example), or values "
        "(regression). null: the model's own compile when its builder compiled it, else "
        "sparse_categorical_crossentropy."))
    loss_weights: dict[str, float] | None = Field(None, description=(
        "With a loss per output: output name → its weight in the total loss (Keras' "
        "compile(loss_weights=...))."))
    metrics: MetricsSpec | None = Field(None, description=(
        "Keras metrics by the names compile takes (accuracy, mae, root_mean_squared_error, "
        "auc, precision, recall, mean_iou, TruePositives, top5_accuracy, ...), or output name → "
        "metrics; reported per epoch and on the test set. null: the objective's own (accuracy "
        "for classes, auc for several 0/1 labels, mae for regression, accuracy and mean_iou for "
        "a label per position)."))
    monitor: KerasName | None = Field(None, description=(
        "The figure that judges the run (summary's quality; compare's and plan's verdicts): a "
        "figure the model reports on the test set (its own test_step's, such as "
        "student_loss; a metric such as accuracy), or for a model Keras cannot evaluate (a "
        "GAN without test_step) its last epoch's. null: the objective's own (accuracy, MAE, "
        "AUC, IoU; a model of its own algorithm: the first metric it was compiled with; "
        "one that reports only losses, a GAN's, is not judged)."))
    target_scaling: Literal["auto", "standard", "none"] = Field("auto", description=(
        "Regression: standard trains on (target - mean) / std, both fitted on the training "
        "split (the summary says them; figures are reported, and the saved model predicts, in "
        "the targets' own units); auto: standard wherever the targets are read before training "
        "(one value, or one row of values, per example); none: as stored. Unscaled, a target "
        "in the 100,000s left a regression at the MAE of always predicting its mean, and "
        "targets in the thousands square past float16's 65,504 in the loss."))
    class_weight: dict[int, Annotated[float, Field(gt=0)]] | None = Field(None, description=(
        "Each class's weight in the training loss, e.g. {0: 1.0, 1: 50.0} for a rare class 1 "
        "(Keras' fit(class_weight=...)), in both loops; evaluation is unweighted."))
    early_stopping: EarlyStoppingConfig | None = Field(None, description=(
        "Stop when an epoch figure stops improving (Keras' EarlyStopping)."))
    reduce_lr_on_plateau: ReduceLROnPlateauConfig | None = Field(None, description=(
        "Lower the learning rate when an epoch figure stops improving (Keras' "
        "ReduceLROnPlateau)."))
    keep_best: KeepBestConfig | None = Field(None, description=(
        "Keep the best epoch's weights (Keras' ModelCheckpoint(save_best_only=True))."))
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
    math_library: MathLibrary = Field("default", description=(
        "Which library runs the CPU's matrix products and convolutions, set as the process "
        "starts (TF_ENABLE_ONEDNN_OPTS): default = TensorFlow's choice for this CPU (oneDNN on "
        "CPUs with AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX; Eigen on the others, such as "
        "AVX2-only AMD EPYC Zen 2 and Zen 3); onednn = oneDNN (float32 ResNet50 ran 3.2x "
        "faster with it on an AVX2-only EPYC); eigen = TensorFlow's own Eigen kernels. "
        "Precision is unchanged: float32 with oneDNN is float32. `mptrain check-gpu` measures "
        "both here, `mptrain plan` on your model."))
    warmup_steps: int = Field(2, ge=0, description=(
        "First steps left out of the step-time statistics (tracing, compiling)."))
    loss_scale: LossScaleConfig = Field(default_factory=LossScaleConfig, description=(
        "Dynamic loss scaling (mixed_float16 only)."))
    max_steps: int | None = Field(None, ge=1, description="Stop after this many training steps.")
    max_step_seconds: float | None = Field(
        None, gt=0, description="Stop once a step takes longer than this (seconds), from the "
        "second step of a start on: the first traces the step and creates its kernels."
    )
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description=(
        "When checkpoints are written (runs resume from them)."))
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig, description=(
        "What a diverged step does: back to the last good checkpoint, up to max_trials times."))

    @model_validator(mode="after")
    def _epoch_rules_fit(self) -> TrainConfig:
        if self.monitor and self.monitor.startswith("val_"):  # (an epoch rule's may)
            raise ValueError(f"train.monitor {self.monitor}: a run is judged on the test set (or "
                             f"its training), never the validation split: name {self.monitor[4:]}")
        named = (self.metrics if isinstance(self.metrics, list) else
                 [f"{out}_{m}" for out, ms in (self.metrics or {}).items() for m in ms])
        for key in EPOCH_RULES:
            rule = getattr(self, key)
            watched = rule.monitor.removeprefix("val_") if rule else "loss"
            # the objective's own metrics (metrics: null) are known once the data is: checked then
            if watched != "loss" and self.metrics is not None and watched not in named:
                raise ValueError(f"train.{key}.monitor {rule.monitor}: not an epoch figure; "
                                 f"allowed: loss, {', '.join(named)}, each with val_ first")
        if self.reduce_lr_on_plateau and self.optimizer.schedule is not None:
            raise ValueError("train.reduce_lr_on_plateau sets the learning rate, and "
                             "train.optimizer.schedule sets it too: give one of them")
        stopping, best = self.early_stopping, self.keep_best
        if stopping and stopping.restore_best_weights and best and best.monitor != stopping.monitor:
            raise ValueError("train.early_stopping.restore_best_weights restores the weights "
                             f"train.keep_best keeps: give both one monitor (now "
                             f"{stopping.monitor} and {best.monitor})")
        return self

    @property
    def best_kept(self) -> KeepBestConfig | None:
        """What keeps the best epoch's weights: keep_best, or what restore_best_weights needs."""
        stopping = self.early_stopping
        if self.keep_best is None and stopping is not None and stopping.restore_best_weights:
            return KeepBestConfig(monitor=stopping.monitor, min_delta=stopping.min_delta)
        return self.keep_best


class DistributeConfig(_Strict):
    """tf.distribute: where the training runs. `train.batch_size` is the global batch."""

    strategy: StrategyName = Field("none", description=(
        "none: TensorFlow's default device; one_device: devices[0]; mirrored: the devices of "
        "this machine (default all); multi_worker_mirrored: one process per worker "
        "($TF_CONFIG, or run --workers N); tpu."))
    devices: list[str] | None = Field(None, description='e.g. ["/gpu:0", "/gpu:1"]; default: all.')
    tpu: str | None = Field(None, description="TPU name or address (TPUClusterResolver).")
    workers: int | None = Field(None, ge=2, description=(
        "multi_worker_mirrored on this machine: N local worker processes (`run --workers N`); "
        "kept in the run's config.yaml so `run --resume` restarts as many. Where $TF_CONFIG "
        "is set, each process is one worker of that cluster instead."))
    port_base: int = Field(8888, ge=1, le=65535, description=(
        "Under Slurm's srun: the port of each node's first task (the next tasks on a node take "
        "the next ports), as TensorFlow's SlurmClusterResolver numbers them."))
    join_timeout_s: float = Field(100.0, gt=0, description=(
        "multi_worker_mirrored: how long a worker waits for every other to join the cluster "
        "before it stops, naming those whose port does not answer (100 s: with TensorFlow's "
        "start, within two minutes of the launch)."))

    @model_validator(mode="after")
    def _workers_are_multi_worker(self) -> DistributeConfig:
        if self.workers is not None and self.strategy != "multi_worker_mirrored":
            raise ValueError(f"distribute.workers {self.workers} needs distribute.strategy "
                             f"multi_worker_mirrored (not {self.strategy})")
        return self

    @field_validator("devices")
    @classmethod
    def _device_names(cls, devices: list[str] | None) -> list[str] | None:
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
    tags: dict[str, str | int | float | bool] = Field(default_factory=dict, description=(
        "Tags set on every MLflow run, beside mptrain's own."))


class OutputConfig(_Strict):
    dir: Path = Field(Path("runs"), description=(
        "Run folders go here; relative: beside the experiment file (built-ins: the current "
        "folder)."))
    save_model: bool = Field(True, description="Save model.keras in the run folder when a run finishes.")
    mlflow: MlflowConfig | None = Field(None, description=(
        "Log runs to MLflow; off when null, on when a mapping (even {})."))


class ExperimentConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100,
                      description="Run folders are named after it; defaults to the file's name.")
    seed: int = Field(0, ge=0, lt=2**31, description=(
        "Seeds the initial weights, the data's order and the generated data sets."))
    deterministic: bool = Field(False, description=(
        "tf.config.experimental.enable_op_determinism(): bit-identical reruns, slower ops, "
        "and no XLA (Keras compiles no step with it then; float16 on a CPU needs it)."))
    policy: PolicyName = Field("float32", description=(
        "Keras' dtype policy; auto: the one fastest here (on a CPU, by its kernels measured "
        "once; `mptrain check-gpu` says which and why)."))
    data: DataConfig = Field(default_factory=SyntheticData, description=(
        "Where the examples come from: one of the data.dataset kinds."))
    model: ModelConfig = Field(default_factory=MLPConfig, description=(
        "What is trained: one of the model.kind kinds, always with a float32 output."))
    train: TrainConfig = Field(default_factory=TrainConfig, description="How it is trained.")
    distribute: DistributeConfig = Field(default_factory=DistributeConfig, description=(
        "On which devices (tf.distribute)."))
    output: OutputConfig = Field(default_factory=OutputConfig, description=(
        "Where the run is written, and whether MLflow logs it."))
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
                    model["output_activation"] = head_activation(loss)
            if isinstance(raw.get("data"), dict):
                raw["data"] = {"dataset": "synthetic", **raw["data"]}
        return raw

    @model_validator(mode="after")
    def _loss_fits_head(self) -> ExperimentConfig:
        """The head's activation and the metrics against the loss's family (`objective`):
        what can be told from the file alone; the labels are checked once read."""
        loss, head = self.train.loss, self.model.output_activation
        try:
            if isinstance(loss, dict):
                for output, one in loss.items():
                    resolve(one, f"train.loss.{output}")
            else:
                family = family_of(loss or DEFAULT_LOSS)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if isinstance(loss, dict):
            if self.model.kind not in OWN_MODELS:
                raise ValueError("train.loss per output (a mapping) is for a model of your own "
                                 f"with several outputs (model.kind python or saved); "
                                 f"model.kind {self.model.kind} has one")
            return self
        written = loss if isinstance(loss, str) or loss is None else loss.name
        metrics = self.train.metrics if isinstance(self.train.metrics, list) else []
        why = family.refusal(head, metrics, self.train.target_scaling, written or DEFAULT_LOSS)
        if why is not None:
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _settings_agree(self) -> ExperimentConfig:
        """Settings of different sections that exclude each other: determinism and XLA, a
        float32 math mode and a 16-bit policy, multi-worker training and what it cannot run."""
        if self.deterministic and self.train.jit_compile:
            raise ValueError("train.jit_compile: true with deterministic: true: Keras compiles no "
                             "step with XLA under op determinism (it would run without XLA and "
                             "say nothing); set one of them false")
        if self.train.math_mode in ("onednn_bf16", "graph_bf16") and self.policy != "float32":
            raise ValueError(f"train.math_mode {self.train.math_mode} changes how float32 math runs: "
                             f"it needs policy: float32 (the experiment has {self.policy})")
        if self.train.math_mode in ("onednn_bf16", "graph_bf16") and self.train.math_library == "eigen":
            raise ValueError(f"train.math_mode {self.train.math_mode} is a mode of oneDNN's, and "
                             "train.math_library eigen turns oneDNN off: give one of them")
        if self.distribute.strategy == "multi_worker_mirrored" and self.train.loop == "fit":
            raise ValueError("distribute.strategy multi_worker_mirrored needs train.loop: custom "
                             "(Keras 3's Model.fit does not run under MultiWorkerMirroredStrategy: "
                             "keras-team/keras#20585)")
        return self

    def to_yaml_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def yaml_text(self) -> str:
        """The experiment as an experiment file's text, its keys in the schema's order: a
        run's config.yaml, `validate`'s output, an experiment relayed or staged for children."""
        return yaml.safe_dump(self.to_yaml_dict(), sort_keys=False)
