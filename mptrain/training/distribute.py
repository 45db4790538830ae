"""Training on several devices or machines with TensorFlow's own `tf.distribute`.

`placement` turns `distribute.strategy` into a strategy (as TF Model Garden's
`distribute_utils` does), in whose scope the runner builds the model, optimizer, metrics and
checkpoint; `place_run` places a run, before any other op (collective ops require it).
`train.batch_size` is the global batch, split across replicas. A cluster of several hosts is
`cluster.py`'s: this module asks it to join one, and to check that every worker runs the same
experiment.

Loss scaling across replicas: every replica must skip the same steps. Keras'
LossScaleOptimizer decides per replica from that replica's own gradients, so a non-finite
gradient on one replica only would let the others apply it (through the all-reduce) while
that one skips. `agree_on_finite` makes them agree first: if any replica's gradients are not
finite, every replica's are made non-finite, so all skip and the scale halves once.

Only the chief (worker 0) writes the run folder (`runs.folder.RunFolder.for_run`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass

from mptrain.errors import ConfigError
from mptrain.training.cluster import check_same_experiment, cluster_formed, join


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


def place_run(config, tf) -> Placement:
    """Where the experiment trains: its devices split as it asks (`prepare_devices`), its
    strategy (`placement`); in a cluster, formed within its join timeout (a worker lost after
    it is named by a watchdog, which `cluster_formed` stands down) and with every worker on
    this experiment; and its batch split evenly where Keras' fit needs it."""
    cfg = config.distribute
    prepare_devices(cfg, tf)
    try:
        place = placement(cfg.strategy, tuple(cfg.devices or ()), cfg.tpu, cfg.join_timeout_s, tf)
        if place.task is not None:
            check_same_experiment(config, place.strategy, tf)
    finally:
        cluster_formed()
    check_batch_split(config, place.replicas)
    return place


@functools.cache
def placement(kind: str, devices: tuple[str, ...], tpu: str | None, join_timeout_s: float,
              tf) -> Placement:
    """The strategy for `distribute.strategy` (`kind`) on `distribute.devices`, created once
    per process and reused: several strategies in one process would hand out clashing
    collective-op keys (one that failed is not kept). The join timeout is in the key too,
    harmlessly: a process forms one cluster."""
    if kind == "none":
        return Placement(None, 1, True, "one device (TensorFlow's default)")
    if kind == "one_device":
        device = (devices or ("/cpu:0",))[0]
        return Placement(tf.distribute.OneDeviceStrategy(device), 1, True, f"one device ({device})")
    if kind == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices=list(devices) or None)
        return Placement(strategy, strategy.num_replicas_in_sync, True,
                         f"mirrored over {', '.join(strategy.extended.worker_devices)}")
    if kind == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError("distribute.strategy multi_worker_mirrored reads the cluster from "
                              "$TF_CONFIG; set it on every worker (docs/scale-out.md), or try it "
                              "on one machine with `mptrain run --workers N` (a stopped run: "
                              "`mptrain run --resume RUN_DIR --workers N`)")
        join(join_timeout_s)  # every worker up, before TensorFlow waits without end
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        task = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
        cluster = strategy.cluster_resolver.cluster_spec().as_dict()
        # the chief task, or worker 0 when the cluster has no chief (TensorFlow's convention)
        chief = task[0] in (None, "chief") or (task == ("worker", 0) and "chief" not in cluster)
        return Placement(strategy, strategy.num_replicas_in_sync, chief,
                         f"{strategy.num_replicas_in_sync} replicas on "
                         f"{len(cluster.get('worker', []))} workers", task)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    return Placement(strategy, strategy.num_replicas_in_sync, True,
                     f"TPU {tpu or '(local)'} with {strategy.num_replicas_in_sync} cores")


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
