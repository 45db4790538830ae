"""Workers on separate hosts: where the cluster comes from (`form_cluster`), said in one line.

TensorFlow's MultiWorkerMirroredStrategy reads its cluster from `$TF_CONFIG`, a JSON a user
would otherwise write by hand on every host, where a typo in one host's index or address is
caught by nothing. So `mptrain run exp.yaml --hosts A:PORT,B:PORT --host-index I` makes it,
and under Slurm's `srun` (its variables present) TensorFlow's own `SlurmClusterResolver` reads
the task's rank, the step's tasks and its node list (`slurm_hosts`), after checking what can
be checked on this host first (`parse_hosts`, `check_own_address`). A `$TF_CONFIG` set by a
scheduler (Kubernetes, an operator) still works, and wins over both (said).

What cannot be checked alone is checked as the cluster forms: a host that never joins is
named after `distribute.join_timeout_s` (`training.distribute.rendezvous`), and every host runs the same
experiment (`check_same_experiment`).
"""

from __future__ import annotations

import errno
import os
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


def check_own_address(hosts: Hosts, source: str = "--hosts") -> None:
    """This host's entry, before TensorFlow binds it: an address of this machine, a free port
    (`source`: where the entry came from, for the messages)."""
    host, _, port = hosts.own.rpartition(":")  # as written, for the messages
    slurm = source != "--hosts"
    try:
        bound_as_tensorflow_binds(hosts.own).close()
    except socket.gaierror:
        raise ConfigError(f"{source} {hosts.own}: {host} does not resolve on this host") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            fix = ("set distribute.port_base to a free port" if slurm else
                   "give this host another port in --hosts on every host")
            raise ConfigError(f"{source} {hosts.own} (worker {hosts.index}): port {port} is "
                              f"already in use on {host}; stop what holds it, or {fix}") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            fix = ("Slurm's node list names nodes by another address than this one has" if slurm
                   else "give this host's own entry of --hosts (two hosts started with the same "
                        "index end here)")
            raise ConfigError(f"{source}: worker {hosts.index}'s {hosts.own} is not an address "
                              f"of this machine; {fix}") from None
        raise ConfigError(f"{source} {hosts.own}: cannot use it here ({exc.strerror})") from None


SLURM_TASKS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")


def slurm_tasks() -> int | None:
    """How many tasks this Slurm job step runs; None outside `srun` (no SLURM_PROCID)."""
    if "SLURM_PROCID" not in os.environ:
        return None
    return next((int(os.environ[n]) for n in SLURM_TASKS if os.environ.get(n, "").isdigit()), 1)


def slurm_hosts(tf, port_base: int) -> Hosts:
    """The cluster as TensorFlow's `SlurmClusterResolver` reads it from srun's variables
    (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST expanded by its own
    `expand_hostlist`, SLURM_STEP_TASKS_PER_NODE): one worker per task, ports from
    `port_base` per node. The resolver hands out GPUs per task too; mptrain leaves that to
    Slurm (`--gpus-per-task` sets CUDA_VISIBLE_DEVICES before TensorFlow starts), so it is
    given a GPU per task to count with and told not to set any."""
    tasks = slurm_tasks() or 1
    try:
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=port_base, gpus_per_node=tasks, gpus_per_task=1, auto_set_gpu=False)
        workers = resolver.cluster_spec().as_dict()["worker"]
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ConfigError(f"Slurm's variables do not describe this job step ({exc}); run it "
                          "with srun, or give --hosts") from None
    return Hosts(tuple(workers), resolver.task_id)


def form_cluster(hosts: Hosts | None, config, local: bool, environment: dict[str, str],
                 verbose: bool = False) -> tuple[str | None, bool]:
    """Where this run's cluster comes from, and whether there is one: $TF_CONFIG (a
    scheduler's: it wins, for an experiment that asks for multi_worker_mirrored or with
    --hosts), `--hosts`, Slurm's srun (two tasks or more), or none (`local`: this is, or
    starts, local workers, whose $TF_CONFIG `runs.workers` writes). Sets $TF_CONFIG from
    `--hosts` or Slurm before TensorFlow forms anything, after this host's address is checked.
    Returns (the line that says so, or None; whether it is a cluster). `environment`: what
    TensorFlow must read when it starts (a Slurm cluster imports it here)."""
    if local:
        return None, False
    if "TF_CONFIG" in os.environ:
        if hosts is None and config.distribute.strategy != "multi_worker_mirrored":
            return None, False
        given = Hosts.from_env()
        where = (f"worker {given.index} of {len(given.addresses)} at {given.own}" if given
                 else "this task")
        said = "it wins over --hosts and --host-index" if hosts is not None else "a scheduler's"
        return f"the cluster comes from $TF_CONFIG ({said}): {where}", True
    if hosts is not None:
        check_own_address(hosts)
        os.environ["TF_CONFIG"] = hosts.tf_config()
        return (f"the cluster comes from --hosts: worker {hosts.index} of {len(hosts.addresses)} "
                f"at {hosts.own}"), True
    tasks = slurm_tasks()
    if tasks is None:
        return None, False
    rank = os.environ["SLURM_PROCID"]
    if tasks == 1:
        return f"Slurm allocated this job step one task (SLURM_PROCID {rank}): a single-machine run", False
    from mptrain.hardware.runtime import import_tensorflow

    port_base = config.distribute.port_base
    found = slurm_hosts(import_tensorflow(verbose, environment=environment), port_base)
    source = f"Slurm (SLURM_PROCID {rank})"
    check_own_address(found, source)
    os.environ["TF_CONFIG"] = found.tf_config()
    return (f"the cluster comes from Slurm's srun: task {rank} of {tasks} is worker {found.index} "
            f"at {found.own} (nodes {os.environ.get('SLURM_STEP_NODELIST', '?')}, ports from "
            f"{port_base})"), True


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
