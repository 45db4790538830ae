"""Training on several devices or machines with TensorFlow's own `tf.distribute`.

`placement` turns `distribute.strategy` into a strategy (as TF Model Garden's
`distribute_utils` does), in whose scope the runner builds the model, optimizer, metrics and
checkpoint. `train.batch_size` is the global batch, split across replicas. In a cluster it
first waits, within `distribute.join_timeout_s`, for every worker in $TF_CONFIG (`Hosts`) to be
up (`rendezvous`): TensorFlow itself would wait for a missing one without end.

Loss scaling across replicas: every replica must skip the same steps. Keras'
LossScaleOptimizer decides per replica from that replica's own gradients, so a non-finite
gradient on one replica only would let the others apply it (through the all-reduce) while
that one skips. `agree_on_finite` makes them agree first: if any replica's gradients are not
finite, every replica's are made non-finite, so all skip and the scale halves once.

Only the chief (worker 0) writes the run folder (`runs.folder.RunFolder.for_run`); a lost
worker is said by `worker_lost`, and cured by restarting them all (`runs/workers.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from mptrain.errors import ConfigError, WorkerLost


@dataclass(frozen=True)
class Placement:
    """Where a run trains: the strategy (None: TensorFlow's default device), how many replicas,
    and whether this process writes the run's files."""

    strategy: object | None
    replicas: int
    chief: bool
    description: str
    task: tuple[str, int] | None = None  # this process's task in a multi-worker cluster


def prepare_devices(cfg, tf) -> None:
    """Before TensorFlow starts its runtime: split the CPU into as many logical devices as
    `distribute.devices` names CPUs (for trying mirrored training on one CPU)."""
    cpus = [d for d in (cfg.devices or []) if d.lower().lstrip("/").startswith("cpu")]
    if len(cpus) > 1:
        physical = tf.config.list_physical_devices("CPU")[0]
        # RuntimeError: already initialised (a second run in this process): keep what exists
        with contextlib.suppress(RuntimeError):
            tf.config.set_logical_device_configuration(
                physical, [tf.config.LogicalDeviceConfiguration()] * len(cpus))


def placement(cfg, tf) -> Placement:
    """The strategy for `distribute.strategy`, created once per process and reused: several
    strategies in one process would hand out clashing collective-op keys."""
    key = _key(cfg)
    if key not in _PLACEMENTS:
        _PLACEMENTS[key] = _new_placement(cfg, tf)
    return _PLACEMENTS[key]


def _key(cfg) -> tuple:
    return (cfg.strategy, tuple(cfg.devices or ()), cfg.tpu)


_PLACEMENTS: dict[tuple, Placement] = {}


def _new_placement(cfg, tf) -> Placement:
    kind = cfg.strategy
    if kind == "none":
        return Placement(None, 1, True, "one device (TensorFlow's default)")
    if kind == "one_device":
        device = (cfg.devices or ["/cpu:0"])[0]
        return Placement(tf.distribute.OneDeviceStrategy(device), 1, True, f"one device ({device})")
    if kind == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices=cfg.devices or None)
        return Placement(strategy, strategy.num_replicas_in_sync, True,
                         f"mirrored over {', '.join(strategy.extended.worker_devices)}")
    if kind == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError("distribute.strategy multi_worker_mirrored reads the cluster from "
                              "$TF_CONFIG; set it on every worker (docs/scale-out.md), or try it "
                              "on one machine with `mptrain run --workers N` (a stopped run: "
                              "`mptrain run --resume RUN_DIR --workers N`)")
        rendezvous(cfg.join_timeout_s)  # every worker up, before TensorFlow waits without end
        _watch_forming(cfg.join_timeout_s)  # and one lost after it: `cluster_formed` ends the watch
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        task = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
        cluster = strategy.cluster_resolver.cluster_spec().as_dict()
        # the chief task, or worker 0 when the cluster has no chief (TensorFlow's convention)
        chief = task[0] in (None, "chief") or (task == ("worker", 0) and "chief" not in cluster)
        return Placement(strategy, strategy.num_replicas_in_sync, chief,
                         f"{strategy.num_replicas_in_sync} replicas on "
                         f"{len(cluster.get('worker', []))} workers", task)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=cfg.tpu or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    return Placement(strategy, strategy.num_replicas_in_sync, True,
                     f"TPU {cfg.tpu or '(local)'} with {strategy.num_replicas_in_sync} cores")


def check_batch_split(config, replicas: int) -> None:
    """Keras' Model.fit under a distribution strategy averages the first batch's per-replica
    inputs to build the model, which fails when the replicas' shares differ in size: the
    global batch must split evenly (the custom loop takes any split)."""
    train = config.train
    if replicas > 1 and train.loop == "fit" and train.batch_size % replicas:
        even = train.batch_size - train.batch_size % replicas or replicas
        raise ConfigError(f"{config.source}: train.batch_size {train.batch_size} does not split "
                          f"evenly over the {replicas} replicas, which Keras' Model.fit needs (each "
                          f"replica takes an equal share); use a multiple of {replicas}, e.g. "
                          f"{even}, or train.loop: custom")


def worker_lost(exc: BaseException, place: Placement, tf, run_dir: Path | None) -> WorkerLost | None:
    """TensorFlow's error on a worker whose peer died (its collective ops aborted, the peer's
    heartbeats missed, the connection reset) as a `WorkerLost` naming that peer and the way
    to continue; None for any other error (or outside a multi-worker cluster). `run_dir`: the
    run folder, when this worker knows it (a non-chief worker of a new run does not)."""
    failures = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.InternalError,
                tf.errors.AbortedError, tf.errors.DeadlineExceededError)
    if place.task is None or not isinstance(exc, failures) or not collective_failure(exc.message):
        return None
    return WorkerLost(lost_peer_message(with_address(peer_named(exc.message, place.task)),
                                        type(exc).__name__, run_dir))


def with_address(peer: str | None) -> str | None:
    """The lost worker with its address in $TF_CONFIG ("worker 1 (10.0.0.2:2222)"); when
    TensorFlow's error names none (a worker whose own link was cut learns only that its
    collectives timed out), the workers whose port does not answer now."""
    others = dict(peers())
    if peer is not None:
        job, _, task = peer.partition(" ")
        address = others.get(int(task)) if job == "worker" and task.isdigit() else None
        return f"{peer} ({address})" if address else peer
    down = unreachable(list(others.items()))
    return ", ".join(f"worker {i} ({address})" for i, address in down) or None


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


def peers() -> list[tuple[int, str]]:
    """The other workers in $TF_CONFIG, (index, HOST:PORT) each; none outside a cluster."""
    hosts = Hosts.from_env()
    return hosts.peers if hosts is not None else []


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


def rendezvous(timeout_s: float) -> None:
    """Every worker in $TF_CONFIG is up before TensorFlow forms the cluster, or a `WorkerLost`
    names those that did not come within `timeout_s`. TensorFlow itself waits for a missing
    worker without end, inside one call that holds Python's lock (no watchdog thread runs)
    and catches SIGTERM. So each worker first listens on its own port (never accepting: the
    kernel completes a peer's connect) while it connects to every other's, until each one
    answers, its listener or its TensorFlow server; then it closes its listener for
    TensorFlow to bind."""
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
        named = ", ".join(f"worker {i} ({address})" for i, address in sorted(waiting.items()))
        raise WorkerLost(f"{named} did not join the cluster within distribute.join_timeout_s "
                         f"({timeout_s:g} s): start `mptrain run` on every host with the same "
                         "--hosts and its own --host-index (under Slurm: every task of the srun "
                         "step; or its $TF_CONFIG), or raise distribute.join_timeout_s")


# A watchdog of its own process: TensorFlow forms the cluster inside calls that hold Python's
# lock and catch SIGTERM, so no thread of this process could say a peer was lost there.
WATCHDOG = r"""
import os, select, signal, socket, sys, json
parent, timeout, peers, why = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
if select.select([sys.stdin], [], [], timeout)[0]:
    sys.exit(0)  # formed, or given up on: a word or the end of the pipe
down = []
for index, address in peers:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
    except OSError:
        down.append(f"worker {index} ({address})")
named = ", ".join(down) or ", ".join(f"worker {i} ({a})" for i, a in peers)
sys.stderr.write(f"error: {named} {why}\n")
sys.stderr.flush()
os.kill(parent, signal.SIGKILL)
"""
_FORMING: list = []  # the watchdog while the cluster forms


def _watch_forming(timeout_s: float) -> None:
    """Between the rendezvous and the first collective, a worker lost (killed, cut off) would
    leave the others in TensorFlow's own wait without end: a watchdog process names the ones
    whose port no longer answers and stops this process, `timeout_s` after the rendezvous,
    unless `cluster_formed` came first."""
    import subprocess
    import sys

    hosts = Hosts.from_env()
    if hosts is None or not hosts.peers:
        return
    why = (f"joined and was lost before the cluster formed (within distribute.join_timeout_s, "
           f"{timeout_s:g} s): nothing was trained, no run folder was made; start every worker "
           "again (each with its --host-index, its Slurm task or its TF_CONFIG)")
    _FORMING.append(subprocess.Popen(
        [sys.executable, "-c", WATCHDOG, str(os.getpid()), str(timeout_s), json.dumps(hosts.peers),
         why], stdin=subprocess.PIPE, text=True))


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


def lost_peer_message(peer: str | None, error: str, run_dir: Path | None) -> str:
    """The one line a worker says when another is lost (without `run --workers`, which says
    it for them): who, that the checkpoint is intact, and the command that continues."""
    folder = run_dir if run_dir is not None else "RUN_DIR (the chief's run folder)"
    return (f"{peer or 'another worker'} was lost (TensorFlow's collective ops failed with "
            f"{error}; --verbose shows it): training stopped, and the last checkpoint is intact. "
            "Restart every worker (each with its --host-index, or its TF_CONFIG): mptrain run "
            f"--resume {folder}")


def scope(place: Placement):
    """The strategy's scope, or a no-op scope without one."""
    return place.strategy.scope() if place.strategy is not None else contextlib.nullcontext()


def agree_on_finite(gradients, tf):
    """In a replica: the gradients, made non-finite on every replica if they are not finite
    on any one (see the module's docstring)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return gradients
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients if g is not None])
    bad_replicas = context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(finite, tf.float32))
    everywhere = bad_replicas == 0
    return [g if g is None else tf.where(everywhere, g, tf.fill(tf.shape(g), float("nan")))
            for g in gradients]


def replicas_for(strategy: str, devices: list[str] | None, machine) -> int:
    """How many replicas a strategy would train on here, without creating it (a process may
    hold only one): for the notes said before a compare's variants run."""
    if strategy == "mirrored":
        return len(devices) if devices else max(1, len(machine.gpus))
    if strategy == "multi_worker_mirrored":
        return 2  # at least two workers, or the strategy would not be worth it
    return 1
