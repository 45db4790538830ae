"""Measuring a run's memory: the process peak and TensorFlow's allocator statistics.

A CPU run's process peak is dominated by TensorFlow and the data set, which are the same under
every policy; what a policy changes is the training state. So the meter notes what the
allocator holds before the model is built (the data set's tensors) and reports the training
peak above it (see `summary.MemoryStats`).
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import sys
from dataclasses import asdict, dataclass

from mptrain.summary import MemoryStats


class MemoryMeter:
    """`start()` once the data is on the device and before the model is built; `stats()` after
    training. Allocators that keep no statistics (a CPU with oneDNN off) report None."""

    def __init__(self, tf, device: str):
        self.tf, self.device = tf, device
        self.data_bytes: int | None = None

    def start(self) -> MemoryMeter:
        info = self._info()
        self.data_bytes = info["current"] if info else 0
        with contextlib.suppress(ValueError, RuntimeError):
            self.tf.config.experimental.reset_memory_stats(self.device)
        return self

    def stats(self) -> MemoryStats:
        info = self._info()
        peak = info["peak"] if info else None
        training = peak - self.data_bytes if peak is not None and self.data_bytes is not None else None
        return MemoryStats(process_peak_bytes=peak_rss_bytes(), device=self.device,
                           device_peak_bytes=peak, data_bytes=self.data_bytes,
                           training_peak_bytes=training)

    def _info(self) -> dict[str, int] | None:
        """{current, peak} in bytes; None when the allocator keeps no statistics, or has seen
        nothing (on CPUs small tensors bypass the allocator that counts)."""
        try:
            info = self.tf.config.experimental.get_memory_info(self.device)
        except (ValueError, RuntimeError):
            return None
        return {k: int(v) for k, v in info.items()} if info.get("peak") else None


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def machine_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def static_training_bytes(config, spec) -> int | None:
    """A lower bound on training memory, from the config alone (no model is built), for the
    kinds whose size the config fixes (mlp, cnn, transformer): float32 weights, gradients and
    two optimizer slots per parameter, plus float32 activations of one batch kept for the
    backward pass. None for kinds whose size only the built model knows."""
    cfg = config.model
    batch = config.train.batch_size
    features = int(math.prod(spec.shape))
    if cfg.kind == "mlp":
        widths = [features, *cfg.hidden_units, cfg.num_classes]
        params = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
        activations = batch * sum(widths)
    elif cfg.kind == "cnn" and len(spec.shape) == 3:
        height, width, channels = spec.shape
        params, activations = 0, batch * features
        for filters in cfg.filters:
            params += cfg.kernel_size ** 2 * channels * filters + filters
            activations += batch * height * width * filters
            channels = filters
            if cfg.pooling != "none":
                height, width = max(1, height // 2), max(1, width // 2)
        widths = [height * width * channels, *cfg.dense_units, cfg.num_classes]
        params += sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
        activations += batch * sum(widths)
    elif cfg.kind == "transformer":
        tokens = spec.shape[0] if spec.kind == "tokens" else features // (spec.shape[2] or 1) // (
            (cfg.patch_size or 4) ** 2)
        per_block = 4 * cfg.embed_dim ** 2 + 2 * cfg.embed_dim * cfg.mlp_dim
        vocab = (cfg.vocab_size or spec.vocab_size or 0) * cfg.embed_dim
        params = cfg.num_layers * per_block + vocab + tokens * cfg.embed_dim
        activations = batch * tokens * cfg.num_layers * (6 * cfg.embed_dim + cfg.mlp_dim
                                                         + cfg.num_heads * tokens)
    else:
        return None
    return 4 * (4 * params + activations)


WHY_NOT_HALF = (
    "Why 16-bit training does not halve memory: under a mixed policy the variables stay "
    "float32, and so do their gradients and the optimizer's state (Adam keeps two float32 "
    "values per weight); the step adds 16-bit copies of the weights. Only the activations kept "
    "for the backward pass are halved, so the saving is large when activations dominate (big "
    "batches, big images, long sequences) and small when weights do. The guide's advice "
    "follows: with the memory saved, double the batch size.")


@dataclass
class MemoryPlan:
    """Training memory under one policy: estimated from the built model, and measured."""

    policy: str
    batch_size: int
    parameters: int
    weights_bytes: int  # the variables, in their dtype (float32 under mixed policies)
    weight_copies_bytes: int  # 16-bit casts of the trainable weights made during the step
    gradients_bytes: int
    optimizer_bytes: int  # slots, step counters, the loss scale
    activations_bytes: int  # layer outputs of one batch, kept for the backward pass
    total_bytes: int
    largest_batch: int | None  # that fits in this machine's memory, by the estimate
    measured_peak_bytes: int | None = None  # TensorFlow's allocator, a short real run

    def to_dict(self) -> dict:
        return asdict(self)


def plan(config, policies: list[str], measure: bool = True, verbose: bool = False) -> list[MemoryPlan]:
    """One MemoryPlan per policy for `config`'s model, optimizer and batch size."""
    from mptrain.data import load_dataset
    from mptrain.model import build_model
    from mptrain.policy import DTYPES, apply_policy
    from mptrain.preflight import check_experiment
    from mptrain.tf_runtime import import_tensorflow, seed_everything
    from mptrain.training.optimizer import build_optimizer

    check_experiment(config)
    import_tensorflow(verbose)
    import keras

    spec = load_dataset(config.data, config.seed).spec
    available = machine_memory_bytes()
    plans = []
    for policy in policies:
        seed_everything(config.seed)
        apply_policy(policy)
        try:
            model = build_model(config, spec).model
            optimizer = build_optimizer(config.train.optimizer, 1000)
            if policy == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
        finally:
            apply_policy("float32")
        compute, variable = DTYPES[policy]
        trainable = sum(int(math.prod(v.shape)) for v in model.trainable_variables)
        weights = sum(_bytes(v) for v in model.weights)
        copies = trainable * _itemsize(compute) if compute != variable else 0
        gradients = sum(_bytes(v) for v in model.trainable_variables)
        slots = sum(_bytes(v) for v in optimizer.variables)
        per_example = sum(_output_bytes(layer) + _attention_bytes(layer)
                          for layer in _leaf_layers(model))
        fixed = weights + copies + gradients + slots
        batch = config.train.batch_size
        largest = int((0.8 * available - fixed) // per_example) if available and per_example else None
        plans.append(MemoryPlan(policy, batch, model.count_params(), weights, copies, gradients,
                                slots, per_example * batch, fixed + per_example * batch,
                                max(largest, 0) if largest is not None else None))
        keras.backend.clear_session()
    if measure:
        for entry in plans:
            entry.measured_peak_bytes = _measured(config, entry.policy, verbose)
    return plans


def _measured(config, policy: str, verbose: bool) -> int | None:
    """The allocator's training peak over a few real steps (None where it reports nothing)."""
    import tempfile

    from mptrain.config import validate
    from mptrain.runner import run_experiment

    with tempfile.TemporaryDirectory() as scratch:
        raw = config.to_yaml_dict()
        raw["policy"] = policy
        raw["train"] = {**raw["train"], "epochs": 1, "max_steps": 3,
                        "checkpoint": {"every_epochs": None, "every_steps": None}}
        raw["output"] = {"dir": scratch, "save_model": False}
        summary = run_experiment(validate(raw, "<memory>"), verbose=verbose).summary
    return summary.memory.training_peak_bytes


def _bytes(variable) -> int:
    return int(math.prod(variable.shape)) * _itemsize(variable.dtype)


def _itemsize(dtype) -> int:
    import keras

    return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
            "uint8": 1, "bool": 1}.get(keras.backend.standardize_dtype(dtype), 4)


def _leaf_layers(model):
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            yield from _leaf_layers(layer)
        elif type(layer).__name__ != "InputLayer":
            yield layer


def _attention_bytes(layer) -> int:
    """What a MultiHeadAttention keeps inside itself for the backward pass, per example: the
    query, key and value projections and the attended values, and the heads x query x key
    scores with their softmax (float32, as mptrain's attention computes it) and, under
    dropout, the dropped probabilities and their mask. The scores grow with the square of the
    sequence: on a 128-token transformer they outweigh every layer output together."""
    import keras

    if not isinstance(layer, keras.layers.MultiHeadAttention):
        return 0
    try:
        inputs = layer.input
    except (AttributeError, ValueError):
        return 0
    inputs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
    query, key = inputs[0], inputs[1] if len(inputs) > 1 else inputs[0]
    if any(d is None for d in (*query.shape[1:-1], *key.shape[1:-1])):
        return 0
    tq, tk = int(math.prod(query.shape[1:-1])), int(math.prod(key.shape[1:-1]))
    item, heads = _itemsize(layer.compute_dtype), layer.num_heads
    # queries and attended values (tq), keys and values (tk)
    projections = heads * item * (tq * (layer.key_dim + layer.value_dim)
                                  + tk * (layer.key_dim + layer.value_dim))
    scores = heads * tq * tk * (item + 4 + ((item + 1) if layer.dropout else 0))
    return projections + scores


def _output_bytes(layer) -> int:
    """Bytes of one example's output of a layer (symbolic shapes of a functional model)."""
    try:
        outputs = layer.output
    except (AttributeError, ValueError):
        return 0
    outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
    total = 0
    for out in outputs:
        dims = [d for d in out.shape[1:]]
        if any(d is None for d in dims):
            continue
        total += int(math.prod(dims)) * _itemsize(out.dtype)
    return total
