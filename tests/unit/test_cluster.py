"""`--hosts` and `--host-index` before TensorFlow starts (no training, no processes): the list,
the index, and this host's own address and port."""

import json
import socket

import pytest

from mptrain.errors import ConfigError
from mptrain.runs.cluster import check_own_address, parse_hosts
from mptrain.training.distribute import Hosts, peers, unreachable


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
        assert peers() == [(1, up), (2, down)]
        assert unreachable(peers(), timeout_s=1.0) == [(2, down)]
    monkeypatch.delenv("TF_CONFIG")
    assert peers() == []
