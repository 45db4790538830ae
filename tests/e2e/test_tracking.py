"""MLflow tracking with real parts: tiny runs logged to the local SQLite store and to a real
`mlflow server`, read back with MlflowClient; interrupted, failed and resumed runs; a compare's
nested runs; a store that is unreachable or refuses a write. And `mptrain runs` on real run
folders."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import mlflow  # noqa: F401  (a broken install fails here, never skips)
import pytest
import tensorflow as tf

from mptrain.runs.mlflow_client import HTTP_SETTINGS
from mptrain.runs.resume import resume_config
from mptrain.runs.runner import Start, run_experiment
from mptrain.runs.workers import free_ports
from mptrain.training.records import TrainingListener
from tests.helpers import experiment, mptrain

STEPS, EPOCHS = 18, 3  # the tiny experiment: 6 steps an epoch


@pytest.fixture(autouse=True)
def mlflow_defaults(monkeypatch):
    """mptrain sets MLflow's HTTP retries and timeouts when the user has not (and keeps its
    URL off stdout): as unset here, and unset again after each test."""
    for name in [*HTTP_SETTINGS, "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"]:
        monkeypatch.delenv(name, raising=False)


@contextmanager
def running_server(root: Path):
    """A real tracking server on a free localhost port (SQLite backend, local artifacts),
    stopped (with its uvicorn worker) however the test ends; yields (uri, process)."""
    (port,) = free_ports(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
         f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"),  # noqa: SIM115
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                # no proxy for localhost, whatever a test in this process set before
                urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                    f"{uri}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (root / "server.log").read_text()
                assert time.monotonic() < deadline, (root / "server.log").read_text()
                time.sleep(0.3)
        yield uri, server
    finally:
        stop(server)


def stop(server: subprocess.Popen) -> None:
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("mlflow-server")) as (uri, _):
        yield uri


def tracked(run_dir: Path):
    """The MLflow client and run that a run folder's mlflow.json names."""
    from mlflow import MlflowClient

    stored = json.loads((run_dir / "mlflow.json").read_text())
    client = MlflowClient(stored["tracking_uri"])
    return client, client.get_run(stored["run_id"])


def steps_logged(client, run, key: str = "step/loss") -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run.info.run_id, key))


def artifacts(client, run) -> set[str]:
    return {a.path for a in client.list_artifacts(run.info.run_id)}


class At(TrainingListener):
    """Does `action` once, after global step `step` (or at the end of epoch `epoch`)."""

    def __init__(self, action, step: int | None = None, epoch: int | None = None):
        self.action, self.step, self.epoch = action, step, epoch

    def step_finished(self, record, step_in_epoch):
        if record.step == self.step:
            self.action()

    def epoch_finished(self, record):
        if record.epoch == self.epoch:
            self.action()


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C: the run's own handler takes it


def fail() -> None:
    raise RuntimeError("a bug in training")


def test_a_run_in_the_local_store_reads_back_whole(tiny_config):
    result = run_experiment(tiny_config("output.mlflow={tags: {team: vision}}",
                                        "output.save_model=true", "policy=mixed_bfloat16"))
    s = result.summary
    assert s.status == "finished" and not [n for n in s.notes if "MLflow" in n]
    client, run = tracked(result.run_dir)
    stored = json.loads((result.run_dir / "mlflow.json").read_text())
    # offline by default: a SQLite store beside the run folders, its artifacts there too
    assert stored["tracking_uri"] == f"sqlite:///{result.run_dir.parent / 'mlflow.db'}"
    assert run.info.artifact_uri.startswith((result.run_dir.parent / "mlartifacts").as_uri())
    assert run.info.status == "FINISHED" and run.info.run_name == result.run_dir.name
    assert client.get_experiment(run.info.experiment_id).name == "tiny"
    params = run.data.params
    assert params["train.optimizer.name"] == "adam" and params["train.batch_size"] == "64"
    assert params["model.hidden_units"] == "[32, 32]" and params["policy"] == "mixed_bfloat16"
    assert (params["resolved.compute_dtype"], params["resolved.variable_dtype"]) == ("bfloat16", "float32")
    assert {"resolved.jit_compile", "resolved.xla_optimizer_update", "resolved.replicas",
            "resolved.loop"} <= set(params)
    tags = run.data.tags
    assert tags["status"] == "finished" and tags["team"] == "vision"
    assert tags["tensorflow_version"] == tf.__version__ and tags["mptrain_version"]
    assert tags["machine"] and tags["keras_version"]
    # one value per step run and per epoch, at their step numbers
    assert steps_logged(client, run) == list(range(1, STEPS + 1)) == [r.step for r in result.steps]
    assert steps_logged(client, run, "step/accuracy") == list(range(1, STEPS + 1))
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "learning_rate"):
        assert steps_logged(client, run, key) == [1, 2, 3], key
    losses = [m.value for m in client.get_metric_history(run.info.run_id, "step/loss")]
    assert sorted(losses) == sorted(r.loss for r in result.steps)
    metrics = run.data.metrics
    assert metrics["test_accuracy"] == pytest.approx(s.test_accuracy)
    assert metrics["median_step_ms"] == pytest.approx(s.step_time.median_ms)
    assert metrics["examples_per_sec"] == pytest.approx(s.examples_per_sec)
    assert {"mfu", "process_peak_bytes", "test_loss"} <= set(metrics)
    assert artifacts(client, run) == {"config.yaml", "summary.json", "model.keras"}
    uploaded = client.download_artifacts(run.info.run_id, "summary.json", str(result.run_dir.parent))
    assert Path(uploaded).read_text() == (result.run_dir / "summary.json").read_text()


def test_interrupted_failed_and_resumed_runs_continue_one_mlflow_run(tiny_config):
    """Ctrl-C: KILLED; resumed: the same run; an error: FAILED (its last checkpoint is older
    than its last logged step, so the resume redoes steps); resumed to the end: FINISHED,
    with each step and epoch logged once."""
    config = tiny_config("output.mlflow={}")
    first = run_experiment(config, listeners=[At(sigint, step=4)])
    assert first.summary.status == "interrupted"
    client, run = tracked(first.run_dir)
    run_id = run.info.run_id
    assert (run.info.status, run.data.tags["status"]) == ("KILLED", "interrupted")
    assert steps_logged(client, run) == list(range(1, first.summary.steps_run + 1))

    with pytest.raises(RuntimeError, match="a bug in training"):
        run_experiment(resume_config(first.run_dir, None, []), Start(resume=first.run_dir),
                       listeners=[At(fail, step=10)])
    client, run = tracked(first.run_dir)
    assert run.info.run_id == run_id
    assert (run.info.status, run.data.tags["status"]) == ("FAILED", "failed")
    assert steps_logged(client, run)[-1] >= 9  # beyond its last checkpoint (epoch 1, step 6)

    last = run_experiment(resume_config(first.run_dir, None, []), Start(resume=first.run_dir))
    assert last.summary.status == "finished" and last.summary.steps_run == STEPS
    client, run = tracked(first.run_dir)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert steps_logged(client, run) == list(range(1, STEPS + 1))  # no step twice
    assert steps_logged(client, run, "loss") == list(range(1, EPOCHS + 1))
    assert run.data.tags["status"] == "finished"


def test_a_resumed_session_gives_its_tracker_the_records_before_its_checkpoint(tiny_config):
    """What MLflow may lack after a kill between two of its flushes is caught up from the run
    folder: a resumed session hands its tracker every record before the position it resumes
    from, and nothing after it."""
    from mptrain.runs.experiment import prepare
    from mptrain.runs.folder import RunFolder
    from mptrain.runs.runner import TrainingSession

    first = run_experiment(tiny_config(), listeners=[At(sigint, step=10)])
    assert first.summary.status == "interrupted"

    class Tracker(TrainingListener):
        def catch_up(self, steps, epochs):
            self.caught = ([r.step for r in steps], [r.epoch for r in epochs])

    tracker = Tracker()
    prepared = prepare(resume_config(first.run_dir, None, []))
    session = TrainingSession(prepared, RunFolder(first.run_dir), [], resume=True,
                              tracking=tracker)
    assert session.start.global_step == 10
    assert tracker.caught == (list(range(1, 11)), [1])


def test_an_unreachable_store_never_stops_training(tiny_config):
    (closed,) = free_ports(1)
    result = run_experiment(tiny_config(f"output.mlflow={{tracking_uri: 'http://127.0.0.1:{closed}'}}"))
    s = result.summary
    assert s.status == "finished" and s.steps_run == STEPS
    (note,) = [n for n in s.notes if "MLflow" in n]
    assert f"nothing logged to http://127.0.0.1:{closed} from the start on" in note
    assert "run folder has it all" in note
    assert json.loads((result.run_dir / "summary.json").read_text())["notes"] == s.notes
    assert not (result.run_dir / "mlflow.json").exists()


def test_a_server_killed_mid_run_never_stops_training(tmp_path, tiny_config):
    """Killed during epoch 2: the next send fails (at once: refused, no minutes of retries),
    training finishes, the summary says from which step on nothing was logged."""
    root = tmp_path / "server"
    root.mkdir()
    with running_server(root) as (uri, server):
        result = run_experiment(tiny_config(f"output.mlflow={{tracking_uri: '{uri}'}}"),
                                listeners=[At(lambda: stop(server), step=8)])
    assert result.summary.status == "finished" and result.summary.steps_run == STEPS
    (note,) = [n for n in result.summary.notes if "MLflow" in n]
    # (each step is queued as it ends: the first MLflow could not send, the step the kill
    # after step 8 caught or the next)
    assert re.search(f"nothing logged to {uri} from step (8|9) on .*run folder has it all", note)
    assert "Connection refused" in note
    assert json.loads((result.run_dir / "summary.json").read_text())["notes"] == result.summary.notes


def test_a_server_that_refuses_a_write_mid_run(tmp_path, tiny_config, mlflow_server):
    """The run is deleted on the server during epoch 2: logging stops at the first refused
    write, training goes on, and the summary says from where nothing was logged."""
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_server)

    def delete_run() -> None:
        (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
        client.delete_run(json.loads((run_dir / "mlflow.json").read_text())["run_id"])

    result = run_experiment(tiny_config(f"output.mlflow={{tracking_uri: '{mlflow_server}'}}"),
                            listeners=[At(delete_run, step=8)])
    assert result.summary.status == "finished" and result.summary.steps_run == STEPS
    (note,) = [n for n in result.summary.notes if "MLflow" in n]
    # each step is queued as it ends: the first refused is step 8 or 9 (the deletion came
    # after step 8)
    first_lost = int(re.search(f"nothing logged to {mlflow_server} from step (\\d+) on", note)[1])
    assert 8 <= first_lost <= 9
    _, run = tracked(result.run_dir)
    client.restore_run(run.info.run_id)
    assert steps_logged(client, run) == list(range(1, first_lost))  # no write after the refusal
    assert client.get_run(run.info.run_id).info.status == "RUNNING"  # nor its end


def test_compare_logs_a_parent_run_with_each_variant_nested(tmp_path, mlflow_server):
    from mlflow import MlflowClient

    config = experiment(tmp_path, f"output.mlflow={{tracking_uri: '{mlflow_server}', "
                                  "experiment: nested}")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--steps", "6",
                   "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    folder = Path(record["folder"])
    client = MlflowClient(mlflow_server)
    parent = client.get_run(json.loads((folder / "mlflow.json").read_text())["run_id"])
    assert parent.info.status == "FINISHED" and parent.info.run_name == folder.name
    assert parent.data.tags["status"] == "finished"
    assert artifacts(client, parent) == {"compare.json", "compare.png", "compare.txt"}
    table = Path(client.download_artifacts(parent.info.run_id, "compare.txt", str(tmp_path))).read_text()
    assert "mptrain compare: tiny" in table and "mixed_bfloat16" in table
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(r.info.run_name for r in children) == ["tiny-float32-fit", "tiny-mixed_bfloat16-fit"]
    for child in children:
        assert child.info.status == "FINISHED"
        assert steps_logged(client, child) == list(range(1, 7))
        assert artifacts(client, child) == {"config.yaml", "summary.json"}


def test_runs_lists_real_runs_by_status_and_compares_them(tmp_path, tiny_config):
    """Finished, interrupted, failed (real short runs) and killed (a `running` folder whose
    process is gone), newest first; then two of them side by side."""
    finished = run_experiment(tiny_config("train.max_steps=8")).run_dir
    bf16 = run_experiment(tiny_config("train.max_steps=8", "policy=mixed_bfloat16")).run_dir
    interrupted = run_experiment(tiny_config(), listeners=[At(sigint, step=2)]).run_dir
    with pytest.raises(RuntimeError):
        run_experiment(tiny_config(), listeners=[At(fail, step=2)])
    (failed,) = [p for p in (tmp_path / "runs").iterdir()
                 if p.is_dir() and p not in (finished, bf16, interrupted)]
    killed = run_experiment(tiny_config("train.max_steps=8")).run_dir
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state = json.loads((killed / "summary.json").read_text())
    (killed / "summary.json").write_text(json.dumps({
        "status": "running", "name": state["name"], "pid": dead.pid,
        "host": socket.gethostname(), "started": "2026-12-01T10:00:00"}))
    order = [killed, failed, interrupted, bf16, finished]
    for age, path in enumerate(order):  # one second apart, newest first
        os.utime(path / "summary.json", (time.time() - age, time.time() - age))

    done = mptrain("runs", str(tmp_path / "runs"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["runs"]
    assert [r["name"] for r in rows] == [p.name for p in order]
    assert [(r["status"], r["resumable"]) for r in rows] == [
        ("killed", True), ("failed", True), ("interrupted", True), ("finished", False),
        ("finished", False)]
    assert rows[4]["policy"] == "float32" and rows[3]["policy"] == "mixed_bfloat16"
    assert rows[1]["reason"] == "RuntimeError: a bug in training"

    table = mptrain("runs", str(tmp_path / "runs"), cwd=tmp_path, env_extra={"COLUMNS": "80"})
    assert table.returncode == 0 and max(map(len, table.stdout.splitlines())) <= 80
    assert "killed*" in table.stdout and "interrupted*" in table.stdout

    side = mptrain("runs", str(tmp_path / "runs"), "--compare", bf16.name, finished.name, "--json",
                   cwd=tmp_path)
    assert side.returncode == 0, side.stderr
    record = json.loads(side.stdout)
    assert record["baseline_policy"] == "float32"
    assert [r["label"] for r in record["variants"]] == [bf16.name, finished.name]
    assert record["variants"][1]["verdict"]["baseline"]
    missing = mptrain("runs", str(tmp_path / "runs"), "--compare", finished.name, "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "nope: not a run folder" in missing.stderr
