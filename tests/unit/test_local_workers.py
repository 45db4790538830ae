"""The decisions behind a run that loses a worker, on recorded endings and TensorFlow's own
error messages: who was lost, whether a restart can help, what is said, which command a
worker is given, where the last checkpoint is, when `run` starts local workers."""

from pathlib import Path

import pytest

from mptrain.errors import MptrainError
from mptrain.runs.child import ChildSpec
from mptrain.runs.folder import RunFolder, last_checkpoint
from mptrain.runs.workers import (
    LocalRun,
    LostWorker,
    WorkerEnd,
    first_lost,
    local_worker_count,
    lost_message,
    restart_message,
)
from mptrain.training.cluster import collective_failure, lost_peer_message, peer_named

LOST = 4  # WorkerLost's exit code: "my peer is gone"


@pytest.mark.parametrize("codes", [(0, 0), (3, 3), (130, 130), (1, 1, 1)])
def test_workers_that_end_alike_ended_the_run_themselves(codes):
    """Finished, diverged, interrupted by the user, or one error on every worker."""
    assert first_lost([WorkerEnd(i, code) for i, code in enumerate(codes)]) is None


@pytest.mark.parametrize(("ends", "lost"), [
    # killed: the others report it, in whichever order they are seen ending
    ([WorkerEnd(1, -9), WorkerEnd(0, LOST)], LostWorker(1, -9)),
    ([WorkerEnd(0, LOST), WorkerEnd(1, -9)], LostWorker(1, -9)),
    # the chief killed; the other worker, waiting on it, killed here after the grace
    ([WorkerEnd(0, -9), WorkerEnd(1, -9, stopped=True)], LostWorker(0, -9)),
    # preempted: stopped cleanly on its SIGTERM while the others waited for it
    ([WorkerEnd(1, 143), WorkerEnd(0, LOST), WorkerEnd(2, LOST)], LostWorker(1, 143)),
    # an error of its own on one worker only
    ([WorkerEnd(0, 1), WorkerEnd(1, LOST)], LostWorker(0, 1)),
    # nobody ended first: they lost contact
    ([WorkerEnd(0, LOST), WorkerEnd(1, LOST)], LostWorker(None, LOST)),
])
def test_the_lost_worker_is_the_first_that_did_not_end_for_want_of_the_others(ends, lost):
    assert first_lost(ends) == lost


def test_a_restart_can_cure_a_signal_or_lost_contact_but_not_a_workers_own_error():
    assert LostWorker(1, -9).restartable and LostWorker(1, 143).restartable
    assert LostWorker(None, LOST).restartable
    assert not LostWorker(1, 1).restartable and not LostWorker(0, 3).restartable
    assert LostWorker(1, -9).said(2) == "worker 1 of 2 was killed by SIGKILL"
    assert LostWorker(1, 143).said(3) == "worker 1 of 3 stopped on SIGTERM (exit code 143)"
    assert LostWorker(0, 1).said(2) == "worker 0 of 2 failed (exit code 1)"
    assert LostWorker(None, LOST).said(2).startswith("the 2 workers lost contact")


def run(resumed: bool = False, config: str | None = "exp.yaml") -> LocalRun:
    return LocalRun(2, Path("/runs/tiny-1"), resumed, config,
                    ["train.epochs=3", "distribute.strategy=multi_worker_mirrored",
                     "distribute.workers=2"])


def test_the_line_says_who_that_the_checkpoint_is_intact_and_the_command_that_continues():
    assert lost_message(LostWorker(1, -9), run(), 25) == (
        "worker 1 of 2 was killed by SIGKILL; the other workers were stopped. The last "
        "checkpoint (step 25) in /runs/tiny-1 is intact; continue with: mptrain run --resume "
        "/runs/tiny-1")
    assert "(1 restart tried)" in lost_message(LostWorker(1, -9), run(), 25, restarts=1)
    assert lost_message(LostWorker(1, -9), run(), None).endswith(
        "before the run's first checkpoint; the other workers were stopped. Start the run again.")
    assert restart_message(LostWorker(1, -9), run(), 25, 1, 2) == (
        "worker 1 of 2 was killed by SIGKILL; restarting all 2 workers from the last "
        "checkpoint (step 25): restart 1 of 2")


def test_a_worker_starts_the_run_in_its_reserved_folder_or_continues_it(tmp_path):
    started = run().spec(resume=False, summary_file=tmp_path / "summary.json")
    assert (started.experiment, started.run_dir, started.resume, started.supervised) == (
        "exp.yaml", "/runs/tiny-1", False, True)
    assert started.overrides == ["train.epochs=3", "distribute.strategy=multi_worker_mirrored",
                                 "distribute.workers=2"]
    resumed = run(resumed=True, config=None).spec(resume=True, summary_file=tmp_path / "summary.json")
    assert resumed.experiment is None and resumed.resume and resumed.run_dir == "/runs/tiny-1"
    # the child's command line is the spec, read back whole by the module the child runs
    command = resumed.command()
    assert command[1:3] == ["-m", "mptrain.commands.child"]
    assert ChildSpec.model_validate_json(command[3]) == resumed


@pytest.mark.parametrize(("configured", "option", "supervised", "tf_config", "count"), [
    (None, 2, False, False, 2),  # --workers 2
    (None, 2, False, True, 2),  # --workers wins over a TF_CONFIG left in the environment
    (2, None, False, False, 2),  # --resume of a run on 2 local workers
    (2, None, False, True, None),  # ... on a cluster host: one worker of TF_CONFIG's cluster
    (2, None, True, True, None),  # one of the local workers itself
    (None, None, False, False, None),  # an ordinary run
])
def test_run_starts_local_workers_unless_it_is_one(configured, option, supervised, tf_config, count):
    assert local_worker_count(configured, option, supervised, tf_config) == count


# TensorFlow's errors on the survivor, as measured: the peer killed while both were in a
# collective (its connection reset), and between collectives (its heartbeats missed)
RESET = ("Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at ...\n\n"
         "Collective ops is aborted by: recvmsg:Connection reset by peer\nAdditional GRPC error "
         "information from remote target /job:worker/replica:0/task:0 while calling "
         "/tensorflow.WorkerService/CompleteInstance:\n:UNKNOWN:Error received from peer  "
         "{grpc_message:\"recvmsg:Connection reset by peer\", grpc_status:14}\nThe error could be "
         "from a previous operation. Restart your program to reset.")
HEARTBEATS = ("{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/"
              "replica:0/task:0/device:CPU:0}} Collective ops is aborted by: Error reported from "
              "/job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):"
              "\n/job:worker/replica:0/task:1\nThe tasks have crashed.")


def test_tensorflows_error_names_the_peer_that_was_lost():
    assert collective_failure(RESET) and collective_failure(HEARTBEATS)
    assert not collective_failure("Incompatible shapes: [64,4] vs. [64,3]")
    assert peer_named(RESET, ("worker", 1)) == "worker 0"
    assert peer_named(HEARTBEATS, ("worker", 0)) == "worker 1"  # not itself, named first
    assert peer_named("Collective ops is aborted by: timeout", ("worker", 0)) is None
    line = lost_peer_message("worker 1", "UnavailableError", Path("/runs/tiny-1"))
    assert line.startswith("worker 1 was lost (TensorFlow's collective ops failed with Unavail")
    assert line.endswith("the last checkpoint is intact; restart every worker, each with its "
                         "TF_CONFIG: mptrain run --resume /runs/tiny-1")
    assert "--resume RUN_DIR (the chief's run folder)" in lost_peer_message(None, "X", None)


def test_the_way_to_continue_names_how_the_cluster_was_launched(monkeypatch):
    """srun's step again, every host with its --hosts and --host-index, or every worker with
    its TF_CONFIG; a worker other than the chief names the chief's folder, never its own
    scratch folder (deleted as it exits)."""
    import json

    from mptrain.training import cluster

    run = Path("/runs/tiny-1")
    monkeypatch.setattr(cluster, "LAUNCHED_BY", [])
    assert cluster.resume_line(run) == "mptrain run --resume /runs/tiny-1"  # one process
    for how, says in (("slurm", "restart the srun step, every task as before: srun ... mptrain run "
                                "--resume /runs/tiny-1"),
                      ("hosts", "restart every host, each with the same --hosts and its own "
                                "--host-index: mptrain run --hosts ... --host-index N --resume "
                                "/runs/tiny-1")):
        monkeypatch.setattr(cluster, "LAUNCHED_BY", [how])
        assert lost_peer_message("worker 1", "X", run).endswith(says)
    addresses = ["10.0.0.1:8888", "10.0.0.2:8888"]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": addresses},
                                                "task": {"type": "worker", "index": 1}}))
    scratch = Path("/tmp/mptrain-worker-77-abc/tiny-1")
    assert cluster.resume_line(scratch).endswith("--resume RUN_DIR (the chief's run folder)")
    assert cluster.resume_line(scratch, resumed=run).endswith("--resume /runs/tiny-1")


def test_a_killed_workers_scratch_folder_is_swept_by_the_next_worker(tmp_path, monkeypatch):
    """A non-chief worker SIGKILLed keeps its scratch folder (checkpoints and all) in the
    temporary folder for ever; the next one to start removes it, not a live worker's."""
    import os
    import subprocess
    import tempfile

    from mptrain.runs.folder import SCRATCH, sweep_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()  # reaped: its pid names no process
    dead = tmp_path / f"{SCRATCH}{ended.pid}-x"
    live = tmp_path / f"{SCRATCH}{os.getpid()}-y"
    for folder in (dead, live):
        (folder / "tiny-1" / "checkpoints").mkdir(parents=True)
    sweep_scratch()
    assert not dead.exists() and live.exists()
    # the wiring: a worker other than the chief sweeps as its run folder is made (a break
    # here was caught by the real Slurm's tests alone)
    from mptrain.runs.folder import RunFolder

    (dead / "tiny-1" / "checkpoints").mkdir(parents=True)
    folder, scratch = RunFolder.for_run(False, tmp_path / "runs", "tiny")
    assert not dead.exists() and live.exists() and scratch.parent == tmp_path


def test_a_lost_peer_is_named_with_its_address_or_found_by_its_silent_port(monkeypatch):
    """A worker whose own link was cut learns only that its collectives timed out: the
    workers whose port no longer answers are the ones it lost."""
    import socket

    from mptrain.training.cluster import Hosts, with_address

    with socket.socket() as listening, socket.socket() as silent:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        silent.bind(("127.0.0.1", 0))
        up, down = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, silent))
        monkeypatch.setenv("TF_CONFIG", Hosts(("127.0.0.1:1", up, down), 0).tf_config())
        assert with_address("worker 2") == f"worker 2 ({down})"
        assert with_address(None) == f"worker 2 ({down})"
    monkeypatch.delenv("TF_CONFIG")
    assert with_address("worker 1") == "worker 1" and with_address(None) is None


def test_the_last_checkpoint_is_the_newest_whole_one(tmp_path):
    folder = tmp_path / "checkpoints"
    assert last_checkpoint(tmp_path) is None
    folder.mkdir()
    for step in (20, 25, 30):
        (folder / f"ckpt-{step}.index").write_text("")
    assert last_checkpoint(tmp_path) == 30  # no index file: found by their files
    # TensorFlow's index names a checkpoint once it is whole, and a resume restores it
    (folder / "checkpoint").write_text('model_checkpoint_path: "ckpt-25"\n'
                                       'all_model_checkpoint_paths: "ckpt-20"\n')
    assert last_checkpoint(tmp_path) == 25
    (folder / "ckpt-25.index").unlink()  # the index names one that is gone
    assert last_checkpoint(tmp_path) == 30


def test_a_reserved_run_folder_is_taken_only_while_empty(tmp_path):
    reserved = tmp_path / "tiny-1"
    reserved.mkdir()
    assert RunFolder.create_at(reserved).path == reserved
    (reserved / "config.yaml").write_text("")
    with pytest.raises(MptrainError, match="tiny-1: a run folder must start empty, and this one "
                                           "holds config.yaml; give another folder"):
        RunFolder.create_at(reserved)


def test_the_chiefs_own_error_is_relayed_once_not_said_nor_taken_for_a_lost_worker(tmp_path, monkeypatch,
                                                                                   capsys):
    """Every worker stopping alike on a user's error (a missing data file) is that error, not
    a lost worker: the chief writes it in its summary file instead of saying it, and `run
    --workers` raises it (so the command says it once, and `mptrain.run` raises a DataError
    as in one process). A lost peer is not relayed: `run --workers` names who was lost."""
    from mptrain.commands.child import run_child
    from mptrain.errors import DataError, WorkerLost
    from mptrain.runs import launch as launching
    from mptrain.runs import workers

    raised = [DataError("exp.yaml: data.path /data/missing.npz: no such file")]

    def stopped(*args, **kwargs):
        raise raised[0]

    monkeypatch.setattr(launching, "launch", stopped)
    chief = run().spec(resume=False, summary_file=tmp_path / "summary.json")
    assert run_child(chief.model_dump_json()) == 2
    assert capsys.readouterr().err == ""  # said by `run --workers`, once
    written = (tmp_path / "summary.json").read_text()
    monkeypatch.setattr(workers, "run_workers", lambda spec, count, signals: [
        Path(spec.summary_file).write_text(written), WorkerEnd(0, 2), WorkerEnd(1, 2)][1:])
    with pytest.raises(DataError, match="^exp.yaml: data.path /data/missing.npz: no such file$"):
        workers.run_local_workers(run(), 0, on_restart=print)

    raised[0] = WorkerLost("worker 1 at 127.0.0.1:2 is gone")
    chief.clear()  # as the parent does before a child starts
    assert run_child(chief.model_dump_json()) == LOST
    assert not (tmp_path / "summary.json").exists() and capsys.readouterr().err == ""
    # compare's and plan's children say their own errors (their logs keep them)
    raised[0] = DataError("exp.yaml: data.path /data/missing.npz: no such file")
    variant = chief.model_copy(update={"supervised": False})
    assert run_child(variant.model_dump_json()) == 2
    assert "missing.npz" in capsys.readouterr().err and not (tmp_path / "summary.json").exists()


def test_a_child_started_again_is_never_read_as_the_summary_its_last_run_left(tmp_path, monkeypatch):
    """A resumed row's child (compare, plan, a lost worker's restart) writes its summary where
    the interrupted one did: its start removes the old one first, so a child that then dies
    without a summary is said to have died, never taken for the run that ended before."""
    import mptrain.runs.workers as workers
    from mptrain.runs.child import read_summary

    spec = ChildSpec(run_dir=str(tmp_path / "row"), resume=True,
                     summary_file=str(tmp_path / "row.summary.json"))
    Path(spec.summary_file).write_text('{"stale": "the summary of the run interrupted"}')
    monkeypatch.setattr(workers.subprocess, "Popen", lambda *args, **kwargs: None)
    workers.start(spec, quiet=True)
    assert not Path(spec.summary_file).exists()
    assert read_summary(spec, 1) == "exit code 1"
