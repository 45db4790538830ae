"""tf.data pipelines over any split, in an order fixed by (seed, epoch).

Epoch e's order is `stateless_shuffle(range(n), seed=(seed, e))`: a pure function of the seed
and the epoch, not of how many iterators were created before. So `Model.fit` and the custom
loop, and every policy in a compare, see exactly the same batches in every epoch, and a
resumed run can start at any (epoch, step). Splits that can only be read in order (a CSV file,
a TFDS split) are shuffled a block at a time, each block seeded the same way.

The training data is one stream of `epochs x steps_per_epoch` batches. In-memory arrays are
gathered by index a whole batch at a time: one memcpy per batch, where shuffling examples one
by one costs thousands of small copies that would compete with the step on a 2-core machine.
Files are decoded in parallel (`num_parallel_calls=AUTOTUNE`, order kept) and prefetched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import Dataset, Split
from mptrain.errors import DataError

STREAM_SHUFFLE_BUFFER = 10_000


@dataclass
class Batches:
    """Every split as batches."""

    split: Split
    val: object | None
    test: object
    batch_size: int
    epochs: int
    seed: int
    finish: Callable  # the last stages every split's batches share (`_finish`)
    shuffle_buffer: int  # examples a stream is shuffled by at a time (`_block_shuffled`)

    @property
    def train_examples(self) -> int:
        return self.split.size

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.train_examples / self.batch_size)

    def batch_size_at(self, step_in_epoch: int) -> int:
        """Examples in the step-th batch (0-based) of an epoch: the last one may be short."""
        return min(self.batch_size, self.train_examples - step_in_epoch * self.batch_size)

    @property
    def train(self):
        return self.train_from(0, 0)

    def train_from(self, epoch: int, step: int, until_epoch: int | None = None):
        """The batches of epochs [epoch, until_epoch), each epoch in its own seeded order, the
        first `step` of them left out (a resumed run continues inside an epoch)."""
        import tensorflow as tf

        split, batch_size, seed = self.split, self.batch_size, self.seed

        def one_epoch(number):
            # batched within the epoch: the last batch of an epoch is short, never mixed with the next
            if split.stream is not None:
                return _block_shuffled(tf, split.stream(), min(self.shuffle_buffer, split.size), seed,
                                       number).batch(batch_size)
            order = tf.data.Dataset.from_tensor_slices(shuffled_indices(tf, split.size, seed, number))
            if split.load is not None:  # files, decoded in parallel in order
                return order.map(split.load, num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True).batch(batch_size)
            return order.batch(batch_size)  # indices, gathered below once the skipped are gone

        epochs = tf.data.Dataset.range(epoch, self.epochs if until_epoch is None else until_epoch)
        stream = epochs.flat_map(one_epoch).skip(step)
        if split.arrays is not None:
            stream = _gather(tf, stream, split.arrays)
        return self.finish(tf, stream, tuned=split.arrays is None)


def input_ms_per_batch(batches: Batches, count: int = 20) -> float | None:
    """How fast the input pipeline alone delivers training batches (ms a batch, the median
    after the first, which builds the pipeline): a step can be no faster than this, whatever
    its precision. None with fewer than 3 batches an epoch."""
    import statistics
    import time

    count = min(count, batches.steps_per_epoch)
    if count < 3:
        return None
    stream = iter(batches.train_from(0, 0, until_epoch=1))
    next(stream)
    times = []
    for _ in range(count - 1):
        started = time.perf_counter()
        next(stream)
        times.append(1e3 * (time.perf_counter() - started))
    return statistics.median(times)


def make_batches(data: Dataset, config: ExperimentConfig, labels: Callable | None,
                 scale_pixels: bool = True, replicas: int = 1) -> Batches:
    """Every split of `data` (held on the host: `hold_on_host`) as the experiment's batches;
    `labels(tf, y)`: a batch's labels as the loss reads them (`Objective.batch_labels`); None:
    the batches are the inputs alone (a data set without labels, `data.labels`);
    `scale_pixels`: the model does not rescale pixels itself (`model.inputs.pixel_range`);
    `replicas`: how many the batches are split over."""
    batch_size = config.train.batch_size
    finish = partial(_finish, labels=labels, scale_pixels=scale_pixels)
    return Batches(
        split=data.train,
        val=in_order(data.val, batch_size, finish, replicas) if data.val is not None else None,
        test=in_order(data.test, batch_size, finish, replicas),
        batch_size=batch_size,
        epochs=config.train.epochs,
        seed=config.seed,
        finish=finish,
        shuffle_buffer=getattr(config.data, "shuffle_buffer", None) or STREAM_SHUFFLE_BUFFER,
    )


def hold_on_host(data: Dataset) -> Dataset:
    """The data set with its in-memory arrays held as host-memory variables, once, before
    training (and its memory meter) starts.

    A tf.data function that captures a constant copies it into its graph every time an
    iterator is made (each epoch's validation, each resume): a transient second copy of the
    data set, which the allocator's peak then counted as training memory. A variable is
    captured by its handle. Its value is a copy TensorFlow allocated (`DeepCopy`): a tensor
    made from an aligned NumPy array may share the array's memory, which the allocator does
    not count until a later copy, in the middle of training. A memory-mapped cache stays on
    disk (read a batch at a time)."""
    import tensorflow as tf

    def hold(array):
        return tf.Variable(tf.raw_ops.DeepCopy(x=array), trainable=False)

    def held(split: Split | None) -> Split | None:
        if split is None or split.arrays is None:
            return split
        x, y = split.arrays
        with tf.device("CPU:0"):
            held_x = x if isinstance(x, np.memmap) else tf.nest.map_structure(hold, x)
            return Split(split.size, arrays=(held_x, tf.nest.map_structure(hold, y)))

    return replace(data, train=held(data.train), val=held(data.val), test=held(data.test))


def shuffled_indices(tf, n: int, seed: int, epoch):
    """The example indices of one epoch (a tensor), in training order (the module says why)."""
    return tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), epoch]))


def _block_shuffled(tf, examples, block: int, seed: int, epoch):
    """A stream shuffled `block` examples at a time, each block by `stateless_shuffle` seeded
    with (seed, epoch, block number): a pure function of the seed and the epoch, like the
    indexed splits' order. (`Dataset.shuffle` with a tensor seed fails when the global seed
    is 0, the default: TensorFlow compares the seeds as Python booleans.) Memory holds one
    block, as a shuffle buffer of that size would; a file sorted by class needs a block as
    large as the file to mix its classes."""
    epoch_seed = tf.constant(seed, tf.int64) * 1_000_003 + tf.cast(epoch, tf.int64)

    def shuffle(number, rows):  # rows: (x, y), x perhaps a dict of columns (csv's data.inputs: columns)
        order = tf.random.experimental.stateless_shuffle(
            tf.range(tf.shape(rows[1], out_type=tf.int64)[0]), seed=tf.stack([epoch_seed, number]))
        return tf.nest.map_structure(lambda t: tf.gather(t, order), rows)

    return examples.batch(block).enumerate().map(shuffle).unbatch()


def in_order(split: Split, batch_size: int, finish, replicas: int = 1):
    """Validation and test data: every example once, in a fixed order, in batches whose first
    splits evenly over the replicas (`first_batch`)."""
    import tensorflow as tf

    first = first_batch(split.size, batch_size, replicas)

    def batched(examples):
        if first == batch_size:
            return examples.batch(batch_size)
        return examples.take(first).batch(first).concatenate(examples.skip(first).batch(batch_size))

    if split.arrays is None:
        return finish(tf, batched(examples(split)), tuned=True)
    return finish(tf, _gather(tf, batched(tf.data.Dataset.range(split.size)), split.arrays), tuned=False)


def examples(split: Split):
    """A stream's or files' examples one at a time, in their fixed order (files decoded in
    parallel, the order kept)."""
    import tensorflow as tf

    if split.stream is not None:
        return split.stream()
    return tf.data.Dataset.range(split.size).map(split.load, num_parallel_calls=tf.data.AUTOTUNE,
                                                 deterministic=True)


def training_inputs(data: Dataset, batch_size: int):
    """The training split's inputs, without labels, in batches and in a fixed order, as
    stored (pixels 0-255): what a builder's `Normalization.adapt` or `TextVectorization.adapt`
    reads (keras.io adapts to the training rows only; mptrain alone knows which they are)."""
    return in_order(data.train, batch_size, lambda tf, batches, tuned: batches.map(lambda x, y: x))


def first_batch(examples: int, batch_size: int, replicas: int) -> int:
    """The size of an evaluation set's first batch. Keras' Model.fit and evaluate under a
    distribution strategy average the first batch's per-replica inputs to build the model
    (`_maybe_symbolic_build`), which fails when they differ in size (AddN: [51,64] != [50,64]):
    a set smaller than one batch, of a size the replicas do not divide, would be such a batch.
    It is cut in two instead: the largest part that splits evenly, then the rest (later
    batches may split unevenly; tf.distribute gives a replica an empty share), so every example
    is evaluated, as on one device."""
    if replicas == 1 or examples >= batch_size or examples % replicas == 0:
        return batch_size
    if examples < replicas:
        raise DataError(f"an evaluation set of {examples} example(s) cannot be split over "
                        f"{replicas} replicas; give it at least {replicas}")
    return examples - examples % replicas


def _gather(tf, index_batches, arrays):
    """Batches of example indices → batches of (x, y) from in-memory or memory-mapped arrays
    (x and y may be dicts of them, by input and output name)."""
    xs, ys = arrays  # host variables (`hold_on_host`); x may be a memory-mapped cache

    def read(index_batch):  # a cache file: NumPy reads the batch's rows, so only those are paged in
        order = np.argsort(index_batch)
        rows = np.empty((len(index_batch), *xs.shape[1:]), xs.dtype)
        rows[order] = xs[index_batch[order]]
        return rows

    def gather(index_batch):
        if isinstance(xs, np.memmap):
            rows = tf.numpy_function(read, [index_batch], tf.as_dtype(xs.dtype), stateful=False)
            rows.set_shape((None, *xs.shape[1:]))
        else:
            rows = tf.nest.map_structure(lambda x: tf.gather(x, index_batch), xs)
        return rows, tf.nest.map_structure(lambda y: tf.gather(y, index_batch), ys)

    return index_batches.map(gather)


def _finish(tf, batches, tuned: bool, labels: Callable, scale_pixels: bool):
    """uint8 pixels (decoded or cached images, arrays: a quarter of the space) become float32
    here, on the host, as the guide advises (the model's first layer casts to the compute
    dtype, and a CPU does float16 arithmetic slower than float32): divided by 255 for a model
    that does not rescale them itself, as stored for one that does; the labels become what
    the loss reads (`labels`: the objective's: ids, float columns, scaled targets; None: left
    out, the batches are the inputs alone).

    `tuned`: tf.data's autotuning sizes the parallel decoding of files and the prefetch
    buffer. Batches gathered from arrays in memory have nothing to tune: they get a fixed
    prefetch of two batches and no autotuning, whose background thread competed with the
    step on a 2-core machine and, at the end of a multi-epoch `Model.fit`, held its iterator's
    release for ~3.7 s in half the runs (bench/NOTES.md section 8).

    Sharding is set explicitly for tf.distribute's workers: by data (every pipeline reads
    arrays, or files by index, that tf.data cannot split by file)."""
    inputs_spec = batches.element_spec[0]  # a dict of columns (csv's data.inputs: columns)
    pixels = isinstance(inputs_spec, tf.TensorSpec) and inputs_spec.dtype == tf.uint8

    def convert(x, y):
        if pixels:
            x = tf.cast(x, tf.float32) / 255.0 if scale_pixels else tf.cast(x, tf.float32)
        return x if labels is None else (x, labels(tf, y))

    batches = batches.map(convert)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.autotune.enabled = tuned
    return batches.prefetch(tf.data.AUTOTUNE if tuned else 2).with_options(options)
