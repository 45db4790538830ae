"""tf.data pipelines over any split, in an order fixed by (seed, epoch).

Epoch e's order is `stateless_shuffle(range(n), seed=(seed, e))`: a pure function of the seed
and the epoch, not of how many iterators were created before. So `Model.fit` and the custom
loop, and every policy in a compare, see exactly the same batches in every epoch, and a
resumed run can start at any (epoch, step). Splits that can only be read in order (a CSV file,
a TFDS split) are shuffled through a buffer seeded the same way.

The training data is one stream of `epochs x steps_per_epoch` batches. In-memory arrays are
gathered by index a whole batch at a time: one memcpy per batch, where shuffling examples one
by one costs thousands of small copies that would compete with the step on a 2-core machine.
Files are decoded in parallel (`num_parallel_calls=AUTOTUNE`, order kept) and prefetched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mptrain.data.dataset import Dataset, Split

STREAM_SHUFFLE_BUFFER = 10_000


@dataclass
class Batches:
    train: object  # tf.data.Dataset: every epoch's batches, one after the other
    val: object | None
    test: object
    train_examples: int
    batch_size: int
    epochs: int

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.train_examples / self.batch_size)

    def batch_size_at(self, step_in_epoch: int) -> int:
        """Examples in the step-th batch (0-based) of an epoch: the last one may be short."""
        return min(self.batch_size, self.train_examples - step_in_epoch * self.batch_size)


def make_batches(data: Dataset, batch_size: int, epochs: int, seed: int, binary_labels: bool,
                 shuffle_buffer: int = STREAM_SHUFFLE_BUFFER) -> Batches:
    target = _binary_targets if binary_labels else None
    return Batches(
        train=training_stream(data.train, batch_size, epochs, seed, target, shuffle_buffer),
        val=in_order(data.val, batch_size, target) if data.val is not None else None,
        test=in_order(data.test, batch_size, target),
        train_examples=data.train.size,
        batch_size=batch_size,
        epochs=epochs,
    )


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The example indices of one epoch, in training order (what the pipeline computes)."""
    import tensorflow as tf

    return _shuffled(tf, n, seed, tf.constant(epoch, tf.int64)).numpy()


def _shuffled(tf, n: int, seed: int, epoch):
    return tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), epoch]))


def _binary_targets(y):
    import tensorflow as tf

    return tf.expand_dims(tf.cast(y, tf.float32), -1)


def training_stream(split: Split, batch_size: int, epochs: int, seed: int, target=None,
                    shuffle_buffer: int = STREAM_SHUFFLE_BUFFER):
    import tensorflow as tf

    def one_epoch(epoch):
        # batched within the epoch: the last batch of an epoch is short, never mixed with the next
        if split.stream is not None:
            # a tensor seed per epoch: the buffer shuffles the same way for every iterator
            shuffled = split.stream().shuffle(min(shuffle_buffer, split.size),
                                              seed=tf.constant(seed, tf.int64) * 1_000_003 + epoch)
            return shuffled.batch(batch_size)
        order = tf.data.Dataset.from_tensor_slices(_shuffled(tf, split.size, seed, epoch))
        return _indexed(tf, order, split, batch_size)

    return _finish(tf, tf.data.Dataset.range(epochs).flat_map(one_epoch), target)


def in_order(split: Split, batch_size: int, target=None):
    """Validation and test data: every example once, in a fixed order."""
    import tensorflow as tf

    if split.stream is not None:
        batches = split.stream().batch(batch_size)
    else:
        batches = _indexed(tf, tf.data.Dataset.range(split.size), split, batch_size)
    return _finish(tf, batches, target)


def _indexed(tf, indices, split: Split, batch_size: int):
    """Example indices → batches of (x, y): gathered from arrays, or loaded one by one."""
    if split.arrays is None:
        return (indices.map(split.load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .batch(batch_size))
    x, y = split.arrays
    ys = tf.constant(y)
    if isinstance(x, np.memmap):
        # A cache file: NumPy reads the batch's rows, so only those are paged in.
        def read(index_batch):
            order = np.argsort(index_batch)
            rows = np.empty((len(index_batch), *x.shape[1:]), x.dtype)
            rows[order] = x[index_batch[order]]
            return rows

        def gather(index_batch):
            rows = tf.numpy_function(read, [index_batch], tf.as_dtype(x.dtype), stateful=False)
            rows.set_shape((None, *x.shape[1:]))
            return rows, tf.gather(ys, index_batch)
    else:
        xs = tf.constant(x)

        def gather(index_batch):
            return tf.gather(xs, index_batch), tf.gather(ys, index_batch)
    return indices.batch(batch_size).map(gather)


def _finish(tf, batches, target):
    """uint8 pixels (decoded or cached images: a quarter of the space) become float32 in
    [0, 1] here, on the host, as the guide advises; binary labels become float columns."""
    pixels = batches.element_spec[0].dtype == tf.uint8
    if pixels or target is not None:
        batches = batches.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0 if pixels else x,
                                            target(y) if target is not None else y))
    return batches.prefetch(tf.data.AUTOTUNE)
