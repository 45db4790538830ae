"""The MLflow client as mptrain uses it: short HTTP retries, MLflow's own logging quietened,
metrics through MLflow's own asynchronous logging (`log_batch(synchronous=False)`: MLflow
queues, batches within its request limits and sends them on a thread of its own, so a step
never waits for the store), and one connection per run that is written until its first
failure and then says where and why (`Connection.failure`). A tracking store that is down or
refuses a write never stops training. mlflow is imported here only, when tracking is on."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mptrain.record import Record, write_atomic

PARENT_ENV = "MPTRAIN_MLFLOW_PARENT"  # compare and plan: the parent run of their children
RUN_FILE = "mlflow.json"
# summary.json's status → MLflow's (a compare's or plan's own: KILLED when interrupted, else FINISHED)
RUN_STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "diverged": "FAILED",
              "failed": "FAILED"}

# A server that is down answers at once (connection refused); one that hangs would block
# training for MLflow's default 7 retries x 120 s. One retry, 10 s each: a failure costs
# seconds, once. The user's own settings of these win.
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def _client(uri: str):
    for name, value in HTTP_SETTINGS.items():
        os.environ.setdefault(name, value)
    # MLflow prints "View run ... at: URL" on stdout, which is mptrain's (`--json`)
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    from mlflow import MlflowClient

    # "Creating initial tables...", "Retrying...": the summary's note says what matters
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    return MlflowClient(tracking_uri=uri)


def one_line_reason(exc: BaseException) -> str:
    """The error in a line: its start and its end, where a wrapped cause ends ("Connection
    refused")."""
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = f"{text[:120]} … {text[-80:]}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _experiment_id(client, name: str, artifacts: Path | None) -> str:
    """The experiment's id, created when new (in the default store, with its artifacts
    beside the run folders rather than in the current folder's ./mlruns)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifacts.as_uri() if artifacts else None)
    except Exception:  # another process created it first
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


class Connection:
    """One MLflow run, written until the first failure; then `failure` says where and why."""

    def __init__(self, what: str):
        self.what = what  # "run", "compare", "plan": for the notes
        self.uri = "the tracking store"
        self.client = None
        self.run: TrackedRun | None = None
        self.failure: str | None = None
        self.sending: list[tuple[str, object]] = []  # (where, MLflow's RunOperations) not yet waited for

    def call(self, where: str, action: Callable[[], Any]) -> Any:
        """`action()`'s value, unless it (or an earlier call) failed: then None. A failure is
        remembered, never raised: tracking must not stop what it tracks."""
        if self.failure is not None:
            return None
        try:
            return action()
        except Exception as exc:
            self.failure = (f"MLflow: nothing logged to {self.uri} from {where} on (the "
                            f"{self.what} folder has it all): {one_line_reason(exc)}")
            return None

    def open(self, folder: Path, uri: str = "", experiment: str = "", run_name: str = "",
             tags: dict[str, str] | None = None, artifacts: Path | None = None) -> None:
        """Continue the run named in `folder`'s mlflow.json, or start one (the other
        arguments say how) and write it there."""
        stored = read_tracked(folder)
        self.uri, self.run = (stored.tracking_uri if stored else uri), stored

        def start() -> None:
            self.client = _client(self.uri)
            if stored is not None:
                self.client.update_run(stored.run_id, status="RUNNING")
                return
            parent = os.environ.get(PARENT_ENV)
            all_tags = dict(tags or {})
            if parent:  # nested in the parent's experiment, whatever this run's name
                experiment_id = self.client.get_run(parent).info.experiment_id
                all_tags["mlflow.parentRunId"] = parent
            else:
                experiment_id = _experiment_id(self.client, experiment, artifacts)
            created = self.client.create_run(experiment_id, tags=all_tags, run_name=run_name)
            self.run = TrackedRun(tracking_uri=uri, experiment_id=experiment_id,
                                  run_id=created.info.run_id)
            write_atomic(folder / RUN_FILE, self.run.model_dump_json(indent=2) + "\n")

        self.call("the start", start)

    def log(self, where: str, params: dict[str, str] | None = None,
            tags: dict[str, str] | None = None) -> None:
        from mlflow.entities import Param, RunTag

        self.call(where, lambda: self.client.log_batch(
            self.run.run_id, params=[Param(k, v) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()]))

    def send(self, where: str, values: dict[str, float], step: int) -> None:
        """One step's (or epoch's) metrics, queued on MLflow's asynchronous logging; a failure
        comes back when `wait` is."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        operation = self.call(where, lambda: self.client.log_batch(
            self.run.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()],
            synchronous=False))
        if operation is not None:
            self.sending.append((where, operation))

    def wait(self) -> None:
        """Until what `send` queued has reached the store (or the first failure is known)."""
        for where, operation in self.sending:
            self.call(where, operation.wait)
        self.sending.clear()

    @property
    def env(self) -> dict[str, str]:
        """A child's environment, to nest its run in this one (a compare's or plan's)."""
        return {PARENT_ENV: self.run.run_id} if self.run and self.failure is None else {}

    @property
    def notes(self) -> list[str]:
        return [self.failure] if self.failure else []

    def finish(self, status: str, files: Iterable[Path] = (), texts: dict[str, str] | None = None,
               tags: dict[str, str] | None = None) -> None:
        """The run's end: what was queued sent, its status (and `tags`) logged, `files` and
        then `texts` as artifacts, then MLflow's status (`RUN_STATUS`)."""
        def send_files() -> None:
            for path in files:
                if path.is_file():
                    self.client.log_artifact(self.run.run_id, str(path))
            for name, text in (texts or {}).items():
                self.client.log_text(self.run.run_id, text, name)

        self.wait()
        self.log("the end", tags={"status": status, **(tags or {})})
        self.call("the artifacts", send_files)
        self.call("the end", lambda: self.client.set_terminated(self.run.run_id,
                                                                RUN_STATUS.get(status, "FINISHED")))


class TrackedRun(Record):
    """mlflow.json: which MLflow run a run folder (or a compare or plan folder) is."""

    tracking_uri: str
    experiment_id: str
    run_id: str


def read_tracked(folder: Path) -> TrackedRun | None:
    try:
        return TrackedRun.model_validate_json((folder / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
