"""Workers on several hosts: the cluster, from where it comes to a worker lost in it.

TensorFlow's MultiWorkerMirroredStrategy reads its cluster from `$TF_CONFIG`, a JSON a user
would otherwise write by hand on every host, where a typo in one host's index or address is
caught by nothing. So `mptrain run exp.yaml --hosts A:PORT,B:PORT --host-index I` makes it,
and under Slurm's `srun` (its variables present) TensorFlow's own `SlurmClusterResolver` reads
the task's rank, the step's tasks and its node list (`slurm_hosts`), after checking what can
be checked on this host first (`parse_hosts`, `check_own_address`). A `$TF_CONFIG` set by a
scheduler (Kubernetes, an operator) still works, and wins over both (said): `form_cluster`.

What cannot be checked alone is checked as the cluster forms: every worker in $TF_CONFIG
(`Hosts`) is up within `distribute.join_timeout_s` or is named (`join`: TensorFlow itself
would wait for a missing one without end), one lost before the first collective is named by
a watchdog (`cluster_formed` stands it down), and every host runs the same experiment
(`check_same_experiment`). A worker lost while training is said by `worker_lost`, and cured
by restarting them all (`runs/workers.py`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from mptrain.errors import ConfigError, WorkerLost


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


def form_cluster(hosts: Hosts | None, config, local: bool, verbose: bool = False) -> tuple[str | None, bool]:
    """Where this run's cluster comes from, and whether there is one: $TF_CONFIG (a
    scheduler's: it wins, for an experiment that asks for multi_worker_mirrored or with
    --hosts), `--hosts`, Slurm's srun (two tasks or more), or none (`local`: this is, or
    starts, local workers, whose $TF_CONFIG `runs.workers` writes). Sets $TF_CONFIG from
    `--hosts` or Slurm before TensorFlow forms anything, after this host's address is checked.
    Returns (the line that says so, or None; whether it is a cluster). A Slurm cluster starts
    TensorFlow here, with what it must read when it starts (`start_environment`)."""
    LAUNCHED_BY.clear()  # this run's (a Python session runs several)
    if local:
        return None, False
    if "TF_CONFIG" in os.environ:
        if hosts is None and config.distribute.strategy != "multi_worker_mirrored":
            return None, False
        given = Hosts.from_env()
        where = (f"worker {given.index} of {len(given.addresses)} at {given.own}" if given
                 else "this task")
        said = "it wins over --hosts and --host-index" if hosts is not None else "a scheduler's"
        LAUNCHED_BY[:] = ["tf_config"]
        return f"the cluster comes from $TF_CONFIG ({said}): {where}", True
    if hosts is not None:
        check_own_address(hosts)
        os.environ["TF_CONFIG"] = hosts.tf_config()
        LAUNCHED_BY[:] = ["hosts"]
        return (f"the cluster comes from --hosts: worker {hosts.index} of {len(hosts.addresses)} "
                f"at {hosts.own}"), True
    tasks = slurm_tasks()
    if tasks is None:
        return None, False
    rank = os.environ["SLURM_PROCID"]
    if tasks == 1:
        return f"Slurm allocated this job step one task (SLURM_PROCID {rank}): a single-machine run", False
    from mptrain.hardware.runtime import import_tensorflow
    from mptrain.precision.planned import start_environment

    port_base = config.distribute.port_base
    # with what TensorFlow must read as it starts
    tf = import_tensorflow(verbose, environment=start_environment(config)[1])
    found = slurm_hosts(tf, port_base)
    check_own_address(found, f"Slurm (SLURM_PROCID {rank})")
    os.environ["TF_CONFIG"] = found.tf_config()
    LAUNCHED_BY[:] = ["slurm"]
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
    # TensorFlow's all_gather takes lengths that differ (it pads and unpads): they split it
    everyone = np.split(_all_gather(strategy, tf, text), np.cumsum(lengths)[:-1])
    for index, row in enumerate(everyone):
        theirs = yaml.safe_load(row.astype(np.uint8).tobytes().decode())
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


def worker_lost(exc: BaseException, task: tuple[str, int] | None, tf,
                run_dir: Path | None) -> WorkerLost | None:
    """TensorFlow's error on a worker whose peer died (its collective ops aborted, the peer's
    heartbeats missed, the connection reset) as a `WorkerLost` naming that peer and the way
    to continue; None for any other error (or outside a multi-worker cluster: no `task`).
    `run_dir`: the run folder, when this worker knows it (a non-chief worker of a new run
    does not)."""
    failures = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.InternalError,
                tf.errors.AbortedError, tf.errors.DeadlineExceededError)
    if task is None or not isinstance(exc, failures) or not collective_failure(exc.message):
        return None
    return WorkerLost(lost_peer_message(with_address(peer_named(exc.message, task)),
                                        type(exc).__name__, run_dir), run_dir)


def with_address(peer: str | None) -> str | None:
    """The lost worker with its address in $TF_CONFIG ("worker 1 (10.0.0.2:2222)"); when
    TensorFlow's error names none (a worker whose own link was cut learns only that its
    collectives timed out), the workers whose port does not answer now."""
    hosts = Hosts.from_env()
    others = dict(hosts.peers) if hosts is not None else {}
    if peer is not None:
        job, _, task = peer.partition(" ")
        address = others.get(int(task)) if job == "worker" and task.isdigit() else None
        return f"{peer} ({address})" if address else peer
    return named(unreachable(list(others.items()))) or None


def named(workers: list[tuple[int, str]]) -> str:
    """Workers as said: "worker 1 (10.0.0.2:2222), worker 2 (...)"."""
    return ", ".join(f"worker {i} ({address})" for i, address in workers)


_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def collective_failure(message: str) -> bool:
    """Whether TensorFlow's error message is about the cluster (a collective op, the
    coordination service, another task) rather than this worker's own computation."""
    return bool(re.search(r"collective|coordination service|heartbeat", message, re.IGNORECASE)
                or _TASK.search(message))


def peer_named(message: str, own: tuple[str, int]) -> str | None:
    """The other task TensorFlow's error names ("The following tasks are unhealthy ...
    /job:worker/replica:0/task:1", "remote target /job:worker/replica:0/task:0"), as
    "worker 1"; None when it names none but this worker itself."""
    for job, task in _TASK.findall(message):
        if (job, int(task)) != own:
            return f"{job} {task}"
    return None


@dataclass(frozen=True)
class Hosts:
    """The cluster's workers, HOST:PORT each (worker 0 is the chief), and which one is this:
    what `--hosts` makes into $TF_CONFIG (`tf_config`) and what is read back from it
    (`from_env`)."""

    addresses: tuple[str, ...]
    index: int

    @property
    def own(self) -> str:
        return self.addresses[self.index]

    @property
    def peers(self) -> list[tuple[int, str]]:
        """The other workers, (index, HOST:PORT) each."""
        return [(i, address) for i, address in enumerate(self.addresses) if i != self.index]

    def tf_config(self) -> str:
        """The $TF_CONFIG TensorFlow reads: every worker, and this one's task."""
        return json.dumps({"cluster": {"worker": list(self.addresses)},
                           "task": {"type": "worker", "index": self.index}})

    @classmethod
    def from_env(cls) -> Hosts | None:
        """$TF_CONFIG's workers and this one's index; None outside a cluster."""
        try:
            spec = json.loads(os.environ.get("TF_CONFIG", "{}"))
            workers, own = tuple(spec["cluster"]["worker"]), int(spec["task"]["index"])
        except (ValueError, KeyError, TypeError):
            return None
        return cls(workers, own) if 0 <= own < len(workers) else None


def host_and_port(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as a socket takes it."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def bound_as_tensorflow_binds(address: str) -> socket.socket:
    """A socket bound to HOST:PORT as TensorFlow's gRPC server binds (SO_REUSEADDR): a port
    whose last run's connections linger (TIME_WAIT) is free, one a program listens on is not."""
    host, port = host_and_port(address)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    return listener


def join(timeout_s: float) -> None:
    """Every worker in $TF_CONFIG is up before TensorFlow forms the cluster, or a `WorkerLost`
    names those that did not come within `timeout_s`. TensorFlow itself waits for a missing
    worker without end, inside one call that holds Python's lock (no watchdog thread runs)
    and catches SIGTERM. So each worker first listens on its own port (never accepting: the
    kernel completes a peer's connect) while it connects to every other's, until each one
    answers, its listener or its TensorFlow server; then it closes its listener for
    TensorFlow to bind. One lost between then and the first collective would leave the others
    in that same wait: a watchdog process (`watch`) names the ones whose port no longer
    answers and stops this process, `timeout_s` later, unless `cluster_formed` came first."""
    import subprocess
    import sys

    hosts = Hosts.from_env()
    if hosts is None or not hosts.peers:
        return
    waiting = dict(hosts.peers)
    deadline = time.monotonic() + timeout_s
    try:
        listener = bound_as_tensorflow_binds(hosts.own)
    except OSError as exc:
        raise ConfigError(f"$TF_CONFIG: this worker's {hosts.own} cannot be listened on here "
                          f"({exc.strerror}): is the port in use, or the address another "
                          "host's?") from None
    with listener:
        listener.listen(64)
        while waiting and time.monotonic() < deadline:
            waiting = dict(unreachable(list(waiting.items()), timeout_s=1.0))
            if waiting:
                time.sleep(0.5)
    if waiting:
        raise WorkerLost(f"{named(sorted(waiting.items()))} did not join the cluster within "
                         f"distribute.join_timeout_s ({timeout_s:g} s): start `mptrain run` on "
                         "every host with the same --hosts and its own --host-index (under "
                         "Slurm: every task of the srun step; or its $TF_CONFIG), or raise "
                         "distribute.join_timeout_s")
    why = (f"joined and was lost before the cluster formed (within distribute.join_timeout_s, "
           f"{timeout_s:g} s): nothing was trained, no run folder was made; start every worker "
           "again (each with its --host-index, its Slurm task or its TF_CONFIG)")
    _FORMING.append(subprocess.Popen(
        [sys.executable, "-c", "import sys; from mptrain.training.cluster import watch; watch()",
         str(os.getpid()), str(timeout_s), json.dumps(hosts.peers), why],
        stdin=subprocess.PIPE, text=True))


_FORMING: list = []  # the watchdog while the cluster forms


def watch() -> None:
    """The watchdog process (`join`), a process of its own: TensorFlow forms the cluster inside
    calls that hold Python's lock and catch SIGTERM, so no thread of the worker could say a
    peer was lost there. Its arguments: the worker's pid, the timeout, the peers, what to say."""
    import select
    import signal
    import sys

    parent, timeout_s, peers, why = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
    if select.select([sys.stdin], [], [], timeout_s)[0]:
        return  # formed, or given up on: a word or the end of the pipe
    peers = [tuple(peer) for peer in peers]
    sys.stderr.write(f"error: {named(unreachable(peers) or peers)} {why}\n")
    sys.stderr.flush()
    os.kill(parent, signal.SIGKILL)


def cluster_formed() -> None:
    """The cluster answered its first collective (or this worker gave up on it): the watchdog
    stands down."""
    while _FORMING:
        watchdog = _FORMING.pop()
        with contextlib.suppress(OSError):
            watchdog.stdin.write("formed\n")
            watchdog.stdin.close()
        watchdog.wait()


def unreachable(addresses: list[tuple[int, str]], timeout_s: float = 2.0) -> list[tuple[int, str]]:
    """The workers whose port does not accept a connection within `timeout_s` (never started,
    or cut off)."""
    down = []
    for index, address in addresses:
        try:
            socket.create_connection(host_and_port(address), timeout=timeout_s).close()
        except OSError:
            down.append((index, address))
    return down


# how `form_cluster` found this process's cluster (empty: none): "slurm", "hosts", "tf_config"
LAUNCHED_BY: list[str] = []


def restart_command(run_dir: Path | None) -> str:
    """How to continue a cluster's run, the way it was launched: the srun step again, every
    host with its --hosts and --host-index, or every worker with its $TF_CONFIG (`run_dir`
    None: a worker that does not know the chief's folder)."""
    folder = run_dir if run_dir is not None else "RUN_DIR (the chief's run folder)"
    how = LAUNCHED_BY[0] if LAUNCHED_BY else "tf_config"
    if how == "slurm":
        return f"restart the srun step, every task as before: srun ... mptrain run --resume {folder}"
    if how == "hosts":
        return (f"restart every host, each with the same --hosts and its own --host-index: mptrain "
                f"run --hosts ... --host-index N --resume {folder}")
    return f"restart every worker, each with its TF_CONFIG: mptrain run --resume {folder}"


def resume_line(run_dir: Path, resumed: Path | None = None) -> str:
    """The command that continues an interrupted run (`run_dir`: this process's), as it was
    launched. A cluster's worker other than the chief trained in a scratch folder of its own,
    deleted as it exits: it names the chief's folder, the one it resumed (`resumed`) or RUN_DIR."""
    if not LAUNCHED_BY:
        return f"mptrain run --resume {run_dir}"
    hosts = Hosts.from_env()
    return restart_command(run_dir if hosts is None or hosts.index == 0 else resumed)


def lost_peer_message(peer: str | None, error: str, run_dir: Path | None) -> str:
    """The one line a worker says when another is lost (without `run --workers`, which says
    it for them): who, that the checkpoint is intact, and the command that continues."""
    return (f"{peer or 'another worker'} was lost (TensorFlow's collective ops failed with "
            f"{error}; --verbose shows it): training stopped, and the last checkpoint is intact; "
            f"{restart_command(run_dir)}")
