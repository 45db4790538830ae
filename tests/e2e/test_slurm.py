"""Under a real Slurm (`tests.slurm`: slurmctld, a slurmd per node in network namespaces of
their own, munge): `srun mptrain run` trains one run on two tasks, a task killed stops the
other with the srun command that continues, that command finishes every step once, and a
task whose peer never starts is named; no worker leaves a scratch folder behind."""

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)

from tests.helpers import experiment, mptrain
from tests.slurm import SlurmCluster

why_not = SlurmCluster.usable()
needs_slurm = pytest.mark.skipif(why_not is not None, reason=f"no real Slurm here: {why_not}")

# 768 training examples in batches of 64: 12 steps an epoch, a checkpoint every 5
HOSTS = ("train.loop=custom", "train.epochs=2", "data.train_size=1024",
         "train.checkpoint.every_steps=5", "distribute.join_timeout_s=60")
MPTRAIN = (sys.executable, "-m", "mptrain")


def step(slurm: SlurmCluster, tmp_path: Path, name: str, *args: str, timeout: float = 300):
    """`srun -N2 -n2 ARGS` to its end: its exit code, and each task's stdout and stderr (`-o`,
    `-e` per task), its workers' temporary folder the test's own."""
    outputs = [tmp_path / f"{name}.{kind}.{task}" for task in (0, 1) for kind in ("out", "err")]
    srun = slurm.srun("-N2", "-n2", "-o", str(tmp_path / f"{name}.out.%t"), "-e",
                      str(tmp_path / f"{name}.err.%t"), *args, cwd=tmp_path,
                      env={"TMPDIR": str(tmp_path / "tmp")})
    srun.communicate(timeout=timeout)
    texts = [path.read_text() if path.exists() else "" for path in outputs]
    return srun.returncode, texts[0::2], texts[1::2]


def training(slurm: SlurmCluster, tmp_path: Path, name: str, config: Path):
    """`srun -N2 -n2 mptrain run CONFIG --json` started and past its first epoch: the srun,
    and the chief's stderr file (each task's output in NAME.out.%t, NAME.err.%t)."""
    srun = slurm.srun("-N2", "-n2", "-o", str(tmp_path / f"{name}.out.%t"), "-e",
                      str(tmp_path / f"{name}.err.%t"), *MPTRAIN, "run", str(config), "--json",
                      cwd=tmp_path, env={"TMPDIR": str(tmp_path / "tmp")})
    chief_log = tmp_path / f"{name}.err.0"
    deadline = time.monotonic() + 240
    while "epoch 1:" not in (chief_log.read_text() if chief_log.exists() else ""):
        assert time.monotonic() < deadline and srun.poll() is None, chief_log.read_text()[-3000:]
        time.sleep(0.5)
    return srun, chief_log


def scratch_left(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("mptrain-worker-*"))


@needs_slurm
def test_srun_trains_one_run_a_killed_task_stops_the_other_and_srun_resumes_it(tmp_path):
    """One run on two tasks, task 1 killed outright after the first epoch: the chief stops
    within 10 s naming it and the srun that continues; that srun finishes every step once,
    with one process's first-step loss and its test loss (the same global batches, the same
    order after the checkpoint)."""
    config = experiment(tmp_path, *HOSTS, "train.epochs=6")
    (tmp_path / "tmp").mkdir()
    one = json.loads(mptrain("run", str(config), "--json", "--set", f"output.dir={tmp_path / 'single'}",
                             cwd=tmp_path).stdout)
    with SlurmCluster(2) as slurm:
        srun, chief_log = training(slurm, tmp_path, "cut", config)
        victim = next(pid for pid in slurm.pids(2)  # task 1's `python -m mptrain run`
                      if b"\x00-m\x00mptrain\x00run\x00" in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        srun.communicate(timeout=120)
        took = time.monotonic() - killed
        for task in (0, 1):
            assert (f"the cluster comes from Slurm's srun: task {task} of 2 is worker {task} at "
                    f"n{task + 1}:8888 (nodes n[1-2], ports from 8888)") in " ".join(
                        (tmp_path / f"cut.err.{task}").read_text().split())
        said = json.loads((tmp_path / "cut.out.0").read_text())
        (run_dir,) = (tmp_path / "runs").iterdir()
        assert said["exit_code"] == 4 and said["run_dir"] == str(run_dir), said
        assert took < 10 + 5, took  # the 10 s, and srun's own end
        assert said["error"].startswith("worker 1 (n2:8888) was lost"), said["error"]
        assert said["error"].endswith("restart the srun step, every task as before: srun ... mptrain "
                                      f"run --resume {run_dir}"), said["error"]
        assert len(scratch_left(tmp_path)) == 1  # the killed task's: a SIGKILL skips every cleanup

        code, out, err = step(slurm, tmp_path, "resumed", *MPTRAIN, "run", "--resume", str(run_dir),
                              "--json")
        assert code == 0, err[0][-3000:] + err[1][-3000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 6 * 12 + 1))  # every step once
    chief = json.loads(out[0])
    assert chief["status"] == "finished" and chief["distribution"] == "2 replicas on 2 workers"
    for key in ("first_step_loss", "test_loss"):  # one process's
        assert chief[key] == pytest.approx(one[key], rel=1e-6), (key, chief[key], one[key])
    assert scratch_left(tmp_path) == []  # the killed one's swept by the next start


@needs_slurm
def test_scancel_stops_every_task_after_one_step_with_its_checkpoint(tmp_path):
    """scancel signals each task at its own moment (SIGTERM, then SIGKILL after KillWait):
    every task stops after the same step (the step agrees on the stop), the checkpoint is
    there, and the step ends with 143 and the srun line that continues."""
    import subprocess

    from mptrain.runs.folder import last_checkpoint

    config = experiment(tmp_path, *HOSTS, "train.epochs=6")
    (tmp_path / "tmp").mkdir()
    with SlurmCluster(2) as slurm:
        srun, chief_log = training(slurm, tmp_path, "cancel", config)
        job = slurm.inside(0, "squeue -h -o %i", stdout=subprocess.PIPE, text=True).communicate()[0]
        slurm.inside(0, f"scancel {job.strip()}").wait(timeout=30)
        srun.communicate(timeout=120)
    assert srun.returncode == 143  # srun's: its tasks' highest, each stopped as SIGTERM asks
    (run_dir,) = (tmp_path / "runs").iterdir()
    said = [json.loads((tmp_path / f"cancel.out.{task}").read_text()) for task in (0, 1)]
    places = set()
    for task, summary in enumerate(said):
        assert summary["status"] == "interrupted", (task, summary)
        where = re.search(r"every worker stopped after epoch (\d+), step (\d+)$", summary["stop_reason"])
        assert "SIGTERM" in summary["stop_reason"] and where, summary["stop_reason"]
        places.add((int(where[1]), int(where[2])))
    (epoch, step), = places  # the same step on both
    stopped_at = 12 * (epoch - 1) + step
    steps = [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, stopped_at + 1)) and last_checkpoint(run_dir) == stopped_at
    chief_said = " ".join(chief_log.read_text().split())
    assert f"srun ... mptrain run --resume {run_dir}" in chief_said and "Traceback" not in chief_said


@needs_slurm
def test_a_task_whose_peer_never_starts_is_named_within_two_minutes(tmp_path):
    config = experiment(tmp_path, *HOSTS[:-1], "distribute.join_timeout_s=6")
    (tmp_path / "tmp").mkdir()
    lone = " ".join(MPTRAIN) + f" run {config}"
    with SlurmCluster(2) as slurm:
        started = time.monotonic()
        code, _, err = step(slurm, tmp_path, "lone", "sh", "-c",
                            f'[ "$SLURM_PROCID" = 1 ] && exit 1; exec {lone}', timeout=180)
        took = time.monotonic() - started
    assert took < 120, took
    (line,) = [line for line in err[0].splitlines() if line.startswith("error:")]
    assert "worker 1 (n2:8888) did not join the cluster within distribute.join_timeout_s (6 s)" in line
    assert "every task of the srun step" in line and not (tmp_path / "runs").exists()
    assert code != 0 and scratch_left(tmp_path) == []
