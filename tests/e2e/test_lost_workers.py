"""A multi-worker run survives losing a worker: real worker processes, one killed with SIGKILL
mid-epoch. The survivors stop in bounded time with one line (who was lost, that the checkpoint
is intact, the resume command) and no traceback; the run resumes in its own folder to its
end, on local workers (`run --workers N`, which can also restart them itself) and on a
cluster of TF_CONFIG workers."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)

from mptrain.runs.child import ChildSpec
from mptrain.runs.workers import LOST_GRACE_SECONDS, LostWorker, WorkerEnd, first_lost, run_workers
from mptrain.signals import ForwardSignals
from tests.helpers import experiment, local_worker, mptrain, mptrain_process, wait_for

# 1536 training examples in batches of 64: 24 steps an epoch, a checkpoint every 5
WORKERS = ("train.loop=custom", "train.epochs=3", "data.train_size=2048",
           "train.checkpoint.every_steps=5")
STEPS = 3 * 24


def kill_mid_epoch(chief: subprocess.Popen, worker: int) -> tuple[str, str, float]:
    """SIGKILL the process `worker` once `chief` says epoch 1 is done; the chief's stdout and
    stderr, and how long it took to end after the kill."""
    before = "".join(wait_for(chief, "epoch 1:"))
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    stdout, stderr = chief.communicate(timeout=120)
    return stdout, before + stderr, time.monotonic() - killed


def one_run(tmp_path: Path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def finished_in_full(summary: dict, run_dir: Path) -> None:
    """Every epoch and every step recorded once, as in a run never stopped."""
    assert summary["status"] == "finished" and summary["run_dir"] == str(run_dir)
    assert summary["epochs_run"] == 3 and summary["steps_run"] == STEPS
    assert summary["distribution"] == "2 replicas on 2 workers"
    assert any(note.startswith("resumed at epoch 2") for note in summary["notes"]), summary["notes"]
    epochs = [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]
    steps = [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))


def test_a_survivor_that_does_not_stop_by_itself_is_killed_after_the_grace():
    """Bounded, whatever TensorFlow does: stand-in workers (no TensorFlow), worker 1 killed at
    once, worker 0 hanging on."""
    hang_or_die = ("import json, os, signal, time; task = json.loads(os.environ['TF_CONFIG'])"
                   "['task']['index']; os.kill(os.getpid(), signal.SIGKILL) if task else time.sleep(60)")

    class StandIn(ChildSpec):
        def command(self) -> list[str]:
            return [sys.executable, "-c", hang_or_die]

    started = time.monotonic()
    with ForwardSignals() as signals:
        ends = run_workers(StandIn(run_dir="unused"), 2, signals)
    assert ends == [WorkerEnd(1, -signal.SIGKILL), WorkerEnd(0, -signal.SIGKILL, stopped=True)]
    assert first_lost(ends) == LostWorker(1, -signal.SIGKILL)
    assert LOST_GRACE_SECONDS <= time.monotonic() - started < LOST_GRACE_SECONDS + 3


def test_a_killed_local_worker_stops_the_run_with_one_line_and_it_resumes_to_its_end(tmp_path):
    config = experiment(tmp_path, *WORKERS)
    process = mptrain_process(tmp_path, "run", str(config), "--workers", "2", "--json")
    wait_for(process, "mptrain run tiny")  # the workers are up
    stdout, stderr, took = kill_mid_epoch(process, local_worker(process, 1))
    run_dir = one_run(tmp_path)
    assert process.returncode == 4, stderr[-3000:]
    assert took < LOST_GRACE_SECONDS + 30  # bounded (a loaded host's TensorFlow ends slowly)
    (line,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    # --json: one object on stdout, the error's, for a batch script to parse
    assert json.loads(stdout) == {"error": line.removeprefix("error: "), "exit_code": 4,
                                  "run_dir": str(run_dir)}
    folder = re.escape(str(run_dir))
    assert re.fullmatch(rf"error: worker 1 of 2 was killed by SIGKILL; the other workers were "
                        rf"stopped\. The last checkpoint \(step \d+\) in {folder} is intact; "
                        rf"continue with: mptrain run --resume {folder}", line), line
    assert "Traceback" not in stderr and "UnavailableError" not in stderr, stderr[-3000:]
    state = json.loads((run_dir / "summary.json").read_text())
    assert state["status"] == "failed" and state["reason"] == line.removeprefix("error: ")

    # the exact command printed: the run folder knows it trained on 2 local workers
    done = mptrain("run", "--resume", str(run_dir), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    finished_in_full(json.loads(done.stdout), run_dir)
    assert one_run(tmp_path) == run_dir


def test_a_signal_reaching_each_worker_at_its_own_moment_stops_all_after_one_step(tmp_path):
    """A scheduler's SIGTERM reaches each worker at its own moment (scancel, a preemption):
    here worker 1 first, the chief 0.3 s later. Each stopped after its own step before, and
    the run ended as a lost worker (exit 4, "lost contact", or the chief killed by the late
    signal); now the step agrees on the stop: every worker after the same step, the
    checkpoint there, one interrupted summary and 143."""
    from mptrain.runs.folder import last_checkpoint

    config = experiment(tmp_path, *WORKERS)
    process = mptrain_process(tmp_path, "run", str(config), "--workers", "2", "--json")
    wait_for(process, "epoch 1:")
    chief, other = local_worker(process, 0), local_worker(process, 1)
    os.kill(other, signal.SIGTERM)
    time.sleep(0.3)
    os.kill(chief, signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    summary = json.loads(stdout)
    where = re.search(r"by SIGTERM.*; every worker stopped after epoch (\d+), step (\d+)$",
                      summary["stop_reason"])
    assert summary["status"] == "interrupted" and where, summary["stop_reason"]
    stopped_at = 24 * (int(where[1]) - 1) + int(where[2])
    run_dir = one_run(tmp_path)
    steps = [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, stopped_at + 1)) and last_checkpoint(run_dir) == stopped_at
    assert "Traceback" not in stderr and "error:" not in stderr, stderr[-3000:]
    assert f"mptrain run --resume {run_dir}" in stderr


def test_max_restarts_restarts_the_workers_and_the_run_finishes_on_its_own(tmp_path):
    config = experiment(tmp_path, *WORKERS)
    process = mptrain_process(tmp_path, "run", str(config), "--workers", "2", "--max-restarts",
                              "1", "--json")
    wait_for(process, "mptrain run tiny")
    stdout, stderr, _ = kill_mid_epoch(process, local_worker(process, 1))
    assert process.returncode == 0, stderr[-3000:]
    run_dir = one_run(tmp_path)
    assert re.search(r"restart: worker 1 of 2 was killed by SIGKILL; restarting all 2 workers "
                     r"from the last checkpoint \(step \d+\): restart 1 of 1", stderr), stderr
    assert "Traceback" not in stderr and "error:" not in stderr
    restarted = json.loads(stdout)
    finished_in_full(restarted, run_dir)
    # both workers continued from the checkpoint's weights: the result of a run never stopped
    whole = mptrain("run", str(config), "--workers", "2", "--json", "--set",
                    f"output.dir={tmp_path / 'whole'}", cwd=tmp_path)
    never_stopped = json.loads(whole.stdout)
    for key in ("final_train_loss", "test_loss", "test_accuracy"):
        assert restarted[key] == pytest.approx(never_stopped[key], rel=1e-5), key


def test_resume_with_workers_continues_the_same_folder_and_never_starts_a_new_run(tmp_path):
    config = experiment(tmp_path, *WORKERS)
    first = mptrain("run", str(config), "--workers", "2", "--set", "train.max_steps=30", "--json",
                    cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = one_run(tmp_path)
    assert json.loads(first.stdout)["stopped_by"] == "max_steps"
    # CONFIG, --workers and --resume together: the same folder, continued past its limit
    done = mptrain("run", str(config), "--workers", "2", "--resume", str(run_dir), "--set",
                   "train.max_steps=null", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "finished" and summary["steps_run"] == STEPS
    assert any(note.startswith("resumed at epoch 2, step 7") for note in summary["notes"])
    # a finished run: nothing to do, and still no new folder
    again = mptrain("run", "--resume", str(run_dir), "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stderr, again.stderr
    assert one_run(tmp_path) == run_dir
    # a run of one process is not continued on workers (nor a new one started)
    single = mptrain("run", str(config), "--set", "train.epochs=1", "--set",
                     f"output.dir={tmp_path / 'single'}", "--json", cwd=tmp_path)
    (single_dir,) = (tmp_path / "single").iterdir()
    refused = mptrain("run", "--resume", str(single_dir), "--workers", "2", cwd=tmp_path)
    assert single.returncode == 0 and refused.returncode == 2, refused.stderr
    assert "options given change distribute.strategy" in refused.stderr and "Traceback" not in refused.stderr
    assert list((tmp_path / "single").iterdir()) == [single_dir]


def cluster_workers(tmp_path: Path, *args: str) -> list[subprocess.Popen]:
    """Two `mptrain run ARGS` processes, each with its TF_CONFIG, as on two hosts."""
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return [subprocess.Popen(
        [sys.executable, "-m", "mptrain", "run", *args], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE if index == 0 else subprocess.DEVNULL,
        env={**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster,
                                                     "task": {"type": "worker", "index": index}})})
        for index in range(2)]


def test_a_cluster_worker_whose_peer_dies_says_so(tmp_path):
    """No `run --workers` here: the chief's own error handling turns TensorFlow's failed
    collectives into the one line. (A cluster's --resume on every host: tests/e2e/test_hosts.py,
    after a cut link.)"""
    config = experiment(tmp_path, *WORKERS, "distribute.strategy=multi_worker_mirrored")
    chief, other = cluster_workers(tmp_path, str(config), "--json")
    stdout, stderr, took = kill_mid_epoch(chief, other.pid)
    other.wait()
    assert chief.returncode == 4 and took < 30, stderr[-3000:]
    run_dir = one_run(tmp_path)
    (line,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert json.loads(stdout) == {"error": line.removeprefix("error: "), "exit_code": 4,
                                  "run_dir": str(run_dir)}
    assert re.match(r"error: worker 1 \(127\.0\.0\.1:\d+\) was lost \(TensorFlow's collective ops failed",
                    line), line
    assert "the last checkpoint is intact" in line
    assert line.endswith(f"restart every worker, each with its TF_CONFIG: mptrain run --resume {run_dir}")
    assert "Traceback" not in stderr, stderr[-3000:]
