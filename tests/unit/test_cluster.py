"""`--hosts` and `--host-index` before TensorFlow starts (no training, no processes): the list,
the index, and this host's own address and port."""

import json
import os
import socket
from pathlib import Path

import pytest

from mptrain.errors import ConfigError
from mptrain.training.cluster import Hosts, check_own_address, parse_hosts, unreachable


def test_hosts_make_the_tf_config_tensorflow_reads():
    hosts = parse_hosts("10.1.0.1:2222, 10.1.0.2:2222", 1)
    assert hosts == Hosts(("10.1.0.1:2222", "10.1.0.2:2222"), 1) and hosts.own == "10.1.0.2:2222"
    assert json.loads(hosts.tf_config()) == {
        "cluster": {"worker": ["10.1.0.1:2222", "10.1.0.2:2222"]},
        "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize(("text", "index", "said"), [
    ("a:1,b:2", None, "--hosts needs --host-index I"),
    ("a:1,b", 0, "'b' is not HOST:PORT"),
    ("a:1,b:70000", 0, "'b:70000' is not HOST:PORT"),
    ("a:1", 0, "a cluster needs two hosts or more"),
    ("a:1,b:2,a:1", 0, "a:1 listed twice"),
    ("a:1,b:2", 2, "--host-index 2: out of range for 2 hosts (0 to 1; 0 is the chief)"),
])
def test_a_bad_list_or_index_is_refused_naming_the_entry(text, index, said):
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_hosts(text, index)


def test_this_hosts_entry_must_be_its_own_address_with_a_free_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        taken = Hosts(("10.9.9.9:1", f"127.0.0.1:{port}"), 1)
        with pytest.raises(ConfigError, match=f"port {port} is already in use on 127.0.0.1"):
            check_own_address(taken)
    # another host's address: what the same --host-index on two hosts comes to
    elsewhere = Hosts(("192.0.2.7:2222", "127.0.0.1:2222"), 0)
    with pytest.raises(ConfigError, match="192.0.2.7:2222 is not an address of this machine"):
        check_own_address(elsewhere)
    check_own_address(Hosts(("10.9.9.9:1", f"127.0.0.1:{port}"), 1))  # free again: fine


def test_peers_come_from_tf_config_and_a_closed_port_is_unreachable(monkeypatch):
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections
        up, down = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed))
        monkeypatch.setenv("TF_CONFIG", Hosts(("127.0.0.1:1", up, down), 0).tf_config())
        peers = Hosts.from_env().peers
        assert peers == [(1, up), (2, down)]
        assert unreachable(peers, timeout_s=1.0) == [(2, down)]
    monkeypatch.delenv("TF_CONFIG")
    assert Hosts.from_env() is None


SRUN = {"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_STEP_NODELIST": "node[07-08]", "SLURM_STEP_TASKS_PER_NODE": "2,1"}


def test_slurms_variables_make_the_cluster_tensorflows_resolver_reads(monkeypatch):
    """One worker per task, the node list expanded and the ports numbered per node as
    TensorFlow's SlurmClusterResolver does (node07 runs tasks 0 and 1)."""
    import tensorflow as tf

    from mptrain.training.cluster import slurm_hosts, slurm_tasks

    for name, value in SRUN.items():
        monkeypatch.setenv(name, value)
    assert slurm_tasks() == 3
    hosts = slurm_hosts(tf, 9000)
    assert hosts.addresses == ("node07:9000", "node07:9001", "node08:9000") and hosts.index == 1


def test_where_the_cluster_comes_from_is_said_and_a_scheduler_wins(monkeypatch):
    from mptrain.config import validate
    from mptrain.training.cluster import form_cluster
    from tests.helpers import tiny_raw

    config = validate(tiny_raw(), "<test>")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name in SRUN:
        monkeypatch.delenv(name, raising=False)
    assert form_cluster(None, config, False) == (None, False)  # nothing: one machine
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    said, cluster = form_cluster(None, config, False)
    assert not cluster and said == ("Slurm allocated this job step one task (SLURM_PROCID 0): "
                                    "a single-machine run")
    assert form_cluster(None, config, True) == (None, False)  # a local worker says nothing
    scheduled = Hosts(("10.0.0.1:2222", "10.0.0.2:2222"), 1)
    monkeypatch.setenv("TF_CONFIG", scheduled.tf_config())
    said, cluster = form_cluster(Hosts(("127.0.0.1:1", "127.0.0.2:1"), 0), config, False)
    assert cluster and said == ("the cluster comes from $TF_CONFIG (it wins over --hosts and "
                                "--host-index): worker 1 of 2 at 10.0.0.2:2222")


def test_an_srun_step_on_this_host_is_a_slurm_cluster_and_its_restart_line_names_srun(monkeypatch):
    """srun's variables for a step of two tasks on this host (what the real Slurm's tests
    alone once checked): the cluster comes from Slurm, $TF_CONFIG says it, and the line that
    continues a lost worker's run restarts the srun step."""
    from mptrain.config import validate
    from mptrain.training import cluster
    from tests.helpers import tiny_raw

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2",
                        "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(name, value)
    config = validate(tiny_raw(f"distribute.port_base={port}"), "<test>")
    try:
        said, formed = cluster.form_cluster(None, config, False)
        assert formed and said.startswith("the cluster comes from Slurm's srun: task 0 of 2 is worker 0")
        assert json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"] == [f"localhost:{port}",
                                                                            f"localhost:{port + 1}"]
        assert cluster.LAUNCHED_BY == ["slurm"]
        assert cluster.lost_peer_message("worker 1", "X", Path("/runs/tiny-1")).endswith(
            "restart the srun step, every task as before: srun ... mptrain run --resume /runs/tiny-1")
    finally:  # what form_cluster set for this process's cluster
        cluster.LAUNCHED_BY.clear()
        os.environ.pop("TF_CONFIG", None)
