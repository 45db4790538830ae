"""MLflow tracking: every run also an MLflow run, when `output.mlflow` is set.

A run logs its resolved config (flattened: `train.optimizer.name`) and what mptrain chose
(`resolved.policy`, dtypes, XLA, replicas) as params; per epoch its metrics (step = epoch);
per step the loss, running metrics, loss scale, skip and seconds (step = global step,
`step/loss`...); the summary's figures at the end; tags (status, machine, versions, the
user's); and config.yaml, summary.json and the model as artifacts. compare and plan log a
parent run whose id their children read from `MPTRAIN_MLFLOW_PARENT`, so each variant or
trial is nested under it.

The run folder stays the record; MLflow is a copy for browsing. So steps go through MLflow's
own asynchronous logging (one queued batch a step, sent on MLflow's thread; waited for at each
epoch's end, where a failure becomes the note); a store that is down or refuses a write never
stops training
(`mlflow_client.Connection`: the summary's notes say what was not logged and why); and
`mlflow.json` in the run folder names the MLflow run, so `run --resume` continues it without
logging again what it holds (a resume redoes the steps after its checkpoint): each metric's
history has one value per step or epoch run.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mptrain.runs.folder import record_text
from mptrain.runs.mlflow_client import PARENT_ENV, Connection, read_tracked
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener
from mptrain.version import __version__

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.hardware.machine import Machine
    from mptrain.precision.policy import PolicyChoice
    from mptrain.runs.summary import RunSummary

MAX_PARAM_VALUE = 500  # older MLflow servers refuse longer values (3.17 allows 6000)


def _connect(kind: str, config: ExperimentConfig, folder: Path, name: str,
             tags: dict[str, str]) -> tuple[Connection, dict[str, str]]:
    """A `kind` ("run", "compare", "plan") run opened in `output.mlflow`'s store with `tags`,
    "running" and the user's tags (returned). The default store: SQLite beside the run folders
    (offline; `mlflow ui --backend-store-uri` reads it), with a new experiment's artifacts
    beside it too (MLflow's own default is ./mlruns in the current folder)."""
    settings, output = config.output.mlflow, config.output.dir
    tags = {**tags, "status": "running", **{k: str(v) for k, v in settings.tags.items()}}
    uri, artifacts = settings.tracking_uri, None
    if uri is None:
        uri, artifacts = f"sqlite:///{output.resolve() / 'mlflow.db'}", output.resolve() / "mlartifacts"
    connection = Connection(kind)
    connection.open(folder, uri, settings.experiment or config.name, name, tags, artifacts)
    return connection, tags


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"train": {"optimizer": {"name": "adam"}}} → {"train.optimizer.name": "adam"}; lists
    and empty mappings as JSON, long values cut to MLflow's limit."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            flat[f"{prefix}{key}"] = text if len(text) <= MAX_PARAM_VALUE else \
                text[:MAX_PARAM_VALUE - 3] + "..."
    return flat


def _present(values: dict[str, float | bool | None]) -> dict[str, float]:
    """The values there are (None: not this run's, such as a loss scale without one), as floats."""
    return {k: float(v) for k, v in values.items() if v is not None}


def step_metrics(record: StepRecord) -> dict[str, float]:
    return _present({"step/loss": record.loss, "step/seconds": record.seconds,
                     **{f"step/{k}": v for k, v in record.metrics.items()},
                     "step/loss_scale": record.loss_scale, "step/skipped": record.skipped})


def epoch_metrics(record: EpochRecord) -> dict[str, float]:
    return {**record.metrics, **_present({key: getattr(record, key) for key in
                                          ("loss_scale", "skipped_steps", "learning_rate")})}


def summary_metrics(s: RunSummary) -> dict[str, float]:
    """The figures runs are compared by, in MLflow's runs table."""
    times = s.step_time
    values = {
        "median_step_ms": times.median_ms if times else None,
        "p10_step_ms": times.p10_ms if times else None,
        "p90_step_ms": times.p90_ms if times else None,
        "examples_per_sec": s.examples_per_sec, "achieved_tflops": s.achieved_tflops,
        "mfu": s.mfu, "test_loss": s.test_loss, "test_accuracy": s.test_accuracy,
        "test_quality": s.quality.value if s.quality is not None else None,
        "training_peak_bytes": s.memory.training_peak_bytes,
        "process_peak_bytes": s.memory.process_peak_bytes,
        "wall_time_s": s.wall_time_s,
        "loss_scale_skipped_steps": s.loss_scale.skipped_steps if s.loss_scale else None,
    }
    return _present(values)


class MlflowLogger(TrainingListener):
    """The listener that logs a run's steps and epochs (see the module docstring)."""

    def __init__(self, connection: Connection, logged_steps: int = 0, logged_epochs: int = 0):
        self.connection = connection
        self.logged_steps, self.logged_epochs = logged_steps, logged_epochs

    @property
    def failure(self) -> str | None:
        return self.connection.failure

    def catch_up(self, steps: list[StepRecord], epochs: list[EpochRecord]) -> None:
        """A resumed run's records before its checkpoint that MLflow does not have yet (a
        run killed before MLflow sent them)."""
        for record in steps:
            self.step_finished(record, 0)
        for epoch in epochs:
            self._add_epoch(epoch)
        self.flush()

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        if record.step > self.logged_steps:  # (not logged before a resume redid it)
            self.connection.send(f"step {record.step}", step_metrics(record), record.step)
            self.logged_steps = record.step

    def epoch_finished(self, record: EpochRecord) -> None:
        self._add_epoch(record)
        self.flush()

    def _add_epoch(self, record: EpochRecord) -> None:
        if record.epoch > self.logged_epochs:
            self.connection.send(f"epoch {record.epoch}", epoch_metrics(record), record.epoch)
            self.logged_epochs = record.epoch

    def flush(self) -> None:
        self.connection.wait()


def _last_step(client, run_id: str, key: str) -> int:
    return max((m.step for m in client.get_metric_history(run_id, key)), default=0)


def start_tracking(config: ExperimentConfig, folder: Path, choice: PolicyChoice, machine: Machine,
                   replicas: int) -> MlflowLogger | None:
    """The run's MLflow run, started (or continued, after a resume) with its params and
    tags; None when `output.mlflow` is off. Never raises: a failure is the logger's note."""
    settings = config.output.mlflow
    if settings is None:
        return None
    resumed = read_tracked(folder) is not None
    # a compare's or plan's child is named after its folder (the variant), whatever run_name
    name = folder.name if os.environ.get(PARENT_ENV) else (settings.run_name or folder.name)
    connection, tags = _connect("run", config, folder, name, {
        "machine": machine.gpus[0].describe() if machine.gpus else machine.device_label,
        "mptrain_version": __version__,
        "tensorflow_version": machine.tensorflow_version or "unknown",
        "keras_version": machine.keras_version or "unknown"})
    # the resolved config, and what mptrain decided for this machine (`policy: auto`, XLA)
    params = {**flatten(config.to_yaml_dict()),
              "resolved.policy": choice.name,
              "resolved.compute_dtype": choice.compute_dtype,
              "resolved.variable_dtype": choice.variable_dtype,
              "resolved.loop": config.train.loop,
              "resolved.jit_compile": str(choice.jit_compile).lower(),
              "resolved.xla_optimizer_update": str(choice.xla_optimizer_update).lower(),
              "resolved.replicas": str(replicas)}
    if not resumed:
        connection.log("the start", params=params, tags=tags)
        return MlflowLogger(connection)
    client, run_id = connection.client, connection.run.run_id  # the stored run's, failed or not
    logged = connection.call("the resume", lambda: (
        _last_step(client, run_id, "step/loss"), _last_step(client, run_id, "loss"),
        client.get_run(run_id).data.params))
    if logged is None:
        return MlflowLogger(connection)
    steps, epochs, known = logged
    # params are fixed in MLflow: a resume that trains further (`train.epochs`) logs the new
    # value as the tag `resumed.<key>`
    connection.log("the resume", params={k: v for k, v in params.items() if k not in known},
                   tags={**tags, **{f"resumed.{k}": v for k, v in params.items()
                                    if k in known and known[k] != v}})
    return MlflowLogger(connection, steps, epochs)


def finish_tracking(logger: MlflowLogger | None, summary: RunSummary, folder: Path) -> RunSummary:
    """The rest of the run, after training: steps not yet sent, the summary's figures and
    status, config.yaml, the model and summary.json; then MLflow's status (interrupted:
    KILLED, diverged: FAILED). Returns the summary with a note when something was not
    logged, and that summary is the one uploaded."""
    if logger is None:
        return summary
    connection = logger.connection
    connection.send("the end", {k: v for k, v in summary_metrics(summary).items() if math.isfinite(v)},
                    summary.steps_run)
    # summary.json is sent last, only while nothing has failed: this copy never lacks a note
    # the folder's has
    connection.finish(summary.status, [folder / "config.yaml", folder / "model.keras",
                                       folder / "model.weights.h5"],
                      {"summary.json": record_text(summary)})
    return summary.model_copy(update={"notes": [*summary.notes, *connection.notes]})


def end_tracking(logger: MlflowLogger | None, status: str) -> None:
    """A run that ended without a summary (`failed`, or abandoned: `interrupted`): what was
    recorded, and the status. The run folder's summary.json says why."""
    if logger is not None:
        logger.connection.finish(status)


# --- compare and plan: a parent run, its children nested ----------------------------------


def start_parent(folder: Path, kind: str, params: dict[str, str] | None = None) -> Connection | None:
    """The MLflow run of a compare or plan folder, whose children (`mptrain run` processes)
    find it in their environment (`Connection.env`) and log themselves as nested runs: the one
    its mlflow.json names (a resumed compare or plan), else a new one when its experiment.yaml
    turns tracking on; None when off. A tracking failure is its note, never an error."""
    from mptrain.config import load_config

    if read_tracked(folder) is not None:
        connection = Connection(kind)
        connection.open(folder)
        return connection
    config = load_config(folder / "experiment.yaml")
    if config.output.mlflow is None:
        return None
    connection, tags = _connect(kind, config, folder, config.output.mlflow.run_name or folder.name,
                                {"mptrain_command": kind, "mptrain_version": __version__})
    connection.log("the start", params={**flatten(config.to_yaml_dict()), **(params or {})}, tags=tags)
    return connection
