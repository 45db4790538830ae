"""Workers on separate hosts over a real network: `mptrain run --hosts --host-index` in network
namespaces of their own (`tests.netns`), each with its address on a private bridge, and the
faults only a network has: a link cut while the process lives, a host that never joins, two
hosts given different experiments."""

import json
import time
from pathlib import Path

import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)

from tests.helpers import experiment, mptrain, wait_for
from tests.netns import NetnsCluster

why_not = NetnsCluster.usable()
needs_namespaces = pytest.mark.skipif(why_not is not None, reason=f"no network namespaces: {why_not}")

# 768 training examples in batches of 64: 12 steps an epoch, a checkpoint every 5
HOSTS = ("train.loop=custom", "train.epochs=2", "data.train_size=1024",
         "train.checkpoint.every_steps=5", "distribute.join_timeout_s=60")
STEPS = 2 * 12


def start_all(cluster: NetnsCluster, tmp_path: Path, *args: str) -> list:
    return [cluster.mptrain(i, *args, "--hosts", cluster.hosts_option(), "--host-index", str(i),
                            "--json", cwd=tmp_path) for i in range(cluster.hosts)]


@needs_namespaces
def test_two_hosts_train_one_run_and_a_cut_link_stops_both_then_every_host_resumes(tmp_path):
    """Two namespaces train the single-worker result; host 1's link cut mid-epoch (its process
    alive) stops both within 60 s, each naming the other, the checkpoint intact; --resume on
    every host finishes the run in its folder."""
    config = experiment(tmp_path, *HOSTS)
    with NetnsCluster(2) as cluster:
        chief, other = start_all(cluster, tmp_path, "run", str(config))
        wait_for(chief, "epoch 1:")
        cluster.cut(1)
        cut = time.monotonic()
        ends = [worker.communicate(timeout=120) for worker in (chief, other)]
        took = time.monotonic() - cut
        print(f"both stopped {took:.1f} s after the cut")  # docs/scale-out.md quotes it
        assert took <= 60, took
        assert [worker.returncode for worker in (chief, other)] == [4, 4], ends[0][1][-3000:]
        (run_dir,) = (tmp_path / "runs").iterdir()
        for (stdout, stderr), peer in zip(ends, (1, 0), strict=True):  # each names the other
            (line,) = [line for line in stderr.splitlines() if line.startswith("error:")]
            assert line.startswith(f"error: worker {peer} ({cluster.address(peer)}:{cluster.port}) "
                                   "was lost"), line
            assert "the last checkpoint is intact" in line, line
            assert "restart every host, each with the same --hosts and its own --host-index" in line
            assert "Traceback" not in stderr and json.loads(stdout)["exit_code"] == 4
        assert any((run_dir / "checkpoints").iterdir())
        cluster.mend(1)
        resumed = start_all(cluster, tmp_path, "run", "--resume", str(run_dir))
        outputs = [worker.communicate(timeout=300) for worker in resumed]
    assert [worker.returncode for worker in resumed] == [0, 0], outputs[0][1][-3000:]
    summary = json.loads(outputs[0][0])
    assert summary["status"] == "finished" and summary["steps_run"] == STEPS
    assert summary["distribution"] == "2 replicas on 2 workers"
    steps = [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))  # every step once, over the cut
    single = mptrain("run", str(config), "--json", "--set", f"output.dir={tmp_path / 'single'}",
                     cwd=tmp_path)
    one = json.loads(single.stdout)  # float32: the single worker's losses within 0.1%
    for key in ("first_step_loss", "final_train_loss", "test_loss"):
        assert summary[key] == pytest.approx(one[key], rel=1e-3), key


@needs_namespaces
def test_hosts_given_different_experiments_both_refuse_before_step_1(tmp_path):
    config = experiment(tmp_path, *HOSTS)
    with NetnsCluster(2) as cluster:
        chief = cluster.mptrain(0, "run", str(config), "--hosts", cluster.hosts_option(),
                                "--host-index", "0", cwd=tmp_path)
        # 128 against 64: the experiments exchanged differ in length too (all_gather pads them)
        other = cluster.mptrain(1, "run", str(config), "--set", "train.batch_size=128", "--hosts",
                                cluster.hosts_option(), "--host-index", "1", cwd=tmp_path)
        ends = [worker.communicate(timeout=120) for worker in (chief, other)]
    for worker, (_, stderr), peer in zip((chief, other), ends, ("worker 1", "worker 0"), strict=True):
        assert worker.returncode == 2, stderr[-3000:]
        assert f"{peer} runs another experiment: train.batch_size differ" in stderr
        assert "Traceback" not in stderr
    assert not (tmp_path / "runs").exists()  # refused before any run folder


@needs_namespaces
def test_a_host_that_never_joins_is_named_after_the_timeout(tmp_path):
    config = experiment(tmp_path, *HOSTS[:-1], "distribute.join_timeout_s=4")
    with NetnsCluster(2) as cluster:
        started = time.monotonic()
        alone = cluster.mptrain(0, "run", str(config), "--hosts", cluster.hosts_option(),
                                "--host-index", "0", cwd=tmp_path)
        _, stderr = alone.communicate(timeout=120)
        took = time.monotonic() - started
    print(f"named {took:.1f} s after its start")  # docs/scale-out.md quotes it
    assert alone.returncode == 4 and took <= 4 + 10 + 15, (took, stderr[-3000:])  # + TF's start
    (line,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert f"worker 1 ({cluster.address(1)}:{cluster.port}) did not join the cluster" in line
    assert "distribute.join_timeout_s (4 s)" in line and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("hosts", "index", "said"), [
    ("127.0.0.1:{port},127.0.0.2:{port}", "2", "--host-index 2: out of range for 2 hosts"),
    ("192.0.2.1:{port},127.0.0.1:{port}", "0", "192.0.2.1:{port} is not an address of this machine"),
    ("127.0.0.1:{busy},127.0.0.2:{port}", "0", "port {busy} is already in use on 127.0.0.1"),
])
def test_a_bad_cluster_is_refused_before_anything_runs(tmp_path, hosts, index, said):
    import socket

    config = experiment(tmp_path, *HOSTS)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        values = {"port": 23999, "busy": busy.getsockname()[1]}
        done = mptrain("run", str(config), "--hosts", hosts.format(**values), "--host-index",
                       index, cwd=tmp_path)
    assert done.returncode == 2 and said.format(**values) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_a_peer_lost_between_the_rendezvous_and_the_cluster_is_named_never_a_hang(tmp_path):
    """The peer answers the rendezvous (its port listens) and is gone before TensorFlow forms
    the cluster, where TensorFlow would wait for it without end: a watchdog names it and
    stops this worker within the join timeout; nothing was written."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        own = probe.getsockname()[1]
    peer = subprocess.Popen([sys.executable, "-c", (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True)\n"
        "s.accept()  # the rendezvous' connect: then it is lost\n")],
        stdout=subprocess.PIPE, text=True)
    port = int(peer.stdout.readline())
    config = experiment(tmp_path, *HOSTS[:-1], "distribute.join_timeout_s=5",
                        "distribute.strategy=multi_worker_mirrored")
    tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{own}", f"127.0.0.1:{port}"]},
                            "task": {"type": "worker", "index": 0}})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config)], cwd=tmp_path,
                          env={**__import__("os").environ, "TF_CONFIG": tf_config}, text=True,
                          capture_output=True, timeout=120)
    took = time.monotonic() - started
    peer.wait(timeout=10)
    assert done.returncode != 0 and took < 60, (took, done.stderr[-3000:])
    assert (f"error: worker 1 (127.0.0.1:{port}) joined and was lost before the cluster formed"
            in done.stderr), done.stderr[-3000:]
    assert "the cluster comes from $TF_CONFIG" in " ".join(done.stderr.split())
    assert not (tmp_path / "runs").exists()
