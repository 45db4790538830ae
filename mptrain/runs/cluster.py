"""Workers on separate hosts: `mptrain run exp.yaml --hosts A:PORT,B:PORT --host-index I`.

TensorFlow's MultiWorkerMirroredStrategy reads its cluster from `$TF_CONFIG`, a JSON a user
would otherwise write by hand on every host, where a typo in one host's index or address is
caught by nothing. So `--hosts` and `--host-index` make it, after checking what can be checked
on this host before TensorFlow starts (`parse_hosts`, `check_own_address`). A `$TF_CONFIG` set
by a scheduler still works, and wins (said, when --hosts is given too).

What cannot be checked alone is checked as the cluster forms: a host that never joins is
named after `distribute.join_timeout_s` (`training.distribute.rendezvous`), and every host runs the same
experiment (`check_same_experiment`).
"""

from __future__ import annotations

import errno
import socket

from mptrain.errors import ConfigError
from mptrain.training.distribute import Hosts, bound_as_tensorflow_binds


def parse_hosts(text: str, index: int | None) -> Hosts:
    """`--hosts` and `--host-index`, checked: a `ConfigError` names the entry and the fix."""
    if index is None:
        raise ConfigError("--hosts needs --host-index I: which entry of --hosts this host is "
                          "(0 is the chief), the same list on every host")
    entries = [entry.strip() for entry in text.split(",")]
    for entry in entries:
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--hosts {text!r}: {entry!r} is not HOST:PORT (e.g. "
                              "10.0.0.1:12345, a port from 1 to 65535)")
    if len(entries) < 2:
        raise ConfigError(f"--hosts {text!r}: a cluster needs two hosts or more (one host: "
                          "`mptrain run` alone, or --workers N on it)")
    twice = sorted({entry for entry in entries if entries.count(entry) > 1})
    if twice:
        raise ConfigError(f"--hosts: {', '.join(twice)} listed twice; each worker needs an "
                          "address:port of its own")
    if not 0 <= index < len(entries):
        raise ConfigError(f"--host-index {index}: out of range for {len(entries)} hosts (0 to "
                          f"{len(entries) - 1}; 0 is the chief)")
    return Hosts(tuple(entries), index)


def check_own_address(hosts: Hosts) -> None:
    """This host's entry, before TensorFlow binds it: an address of this machine, a free port."""
    host, _, port = hosts.own.rpartition(":")  # as written, for the messages
    try:
        bound_as_tensorflow_binds(hosts.own).close()
    except socket.gaierror:
        raise ConfigError(f"--hosts {hosts.own}: {host} does not resolve on this host") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"--hosts {hosts.own} (--host-index {hosts.index}): port {port} is "
                              f"already in use on {host}; stop what holds it, or give this "
                              "host another port in --hosts on every host") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--host-index {hosts.index}: {hosts.own} is not an address of "
                              "this machine; give this host's own entry of --hosts (two hosts "
                              "started with the same index end here)") from None
        raise ConfigError(f"--hosts {hosts.own}: cannot use it here ({exc.strerror})") from None


# what may differ between the hosts of one run: where each one's runs go
HOST_KEYS = ("output.dir",)


def check_same_experiment(config, strategy, tf) -> None:
    """Every worker runs this experiment, or each one refuses before step 1, naming the keys
    that differ: different batch sizes or policies would hang the collectives, or train
    something neither host's file says. The resolved experiments themselves are exchanged
    (a few kilobytes, over the cluster's own collectives), so a difference is named, not only
    found."""
    import numpy as np
    import yaml

    from mptrain.config.diff import changed_keys

    mine = config.to_yaml_dict()
    # int32: the collectives gather no 8-bit integers
    text = np.frombuffer(yaml.safe_dump(mine, sort_keys=True).encode(), np.uint8).astype(np.int32)
    lengths = _all_gather(strategy, tf, np.array([len(text)], np.int32))
    longest = int(lengths.max())
    padded = np.zeros(longest, np.int32)
    padded[: len(text)] = text
    everyone = _all_gather(strategy, tf, padded).reshape(len(lengths), longest)
    for index, (row, length) in enumerate(zip(everyone, lengths, strict=True)):
        theirs = yaml.safe_load(row[:length].astype(np.uint8).tobytes().decode())
        differ = [key for key in changed_keys(mine, theirs) if not key.startswith(HOST_KEYS)]
        if differ:
            raise ConfigError(f"worker {index} runs another experiment: {', '.join(differ[:6])} "
                              "differ from this host's; start every host with the same "
                              "experiment file and --set options")


def _all_gather(strategy, tf, value):
    """`value` from every worker (one replica each), concatenated in worker order."""
    gathered = strategy.run(lambda x: tf.distribute.get_replica_context().all_gather(x, axis=0),
                            args=(tf.constant(value),))
    return strategy.experimental_local_results(gathered)[0].numpy()
