"""tf.data pipelines over the host arrays, in an order fixed by (seed, epoch).

Epoch e's order is `stateless_shuffle(range(n), seed=(seed, e))`: a pure function of the seed
and the epoch, not of how many iterators were created before. So `Model.fit` and the custom
loop, and every policy in a compare, see exactly the same batches in every epoch, and a
resumed run can start at any (epoch, step).

The training data is one stream of `epochs x steps_per_epoch` batches. Batches are gathered
by index a whole batch at a time: one memcpy per batch, where shuffling examples one by one
costs thousands of small copies that would compete with the step on a 2-core machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mptrain.data import Dataset


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


def make_batches(data: Dataset, batch_size: int, epochs: int, seed: int,
                 binary_labels: bool) -> Batches:
    def targets(y: np.ndarray) -> np.ndarray:
        return y.astype(np.float32)[:, None] if binary_labels else y

    return Batches(
        train=_training_stream(data.x_train, targets(data.y_train), batch_size, epochs, seed),
        val=_in_order(data.x_val, targets(data.y_val), batch_size) if len(data.x_val) else None,
        test=_in_order(data.x_test, targets(data.y_test), batch_size),
        train_examples=len(data.x_train),
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


def _training_stream(x: np.ndarray, y: np.ndarray, batch_size: int, epochs: int, seed: int):
    import tensorflow as tf

    xs, ys = tf.constant(x), tf.constant(y)
    n = len(x)
    return (
        tf.data.Dataset.range(epochs)
        .flat_map(lambda epoch: tf.data.Dataset.from_tensor_slices(_shuffled(tf, n, seed, epoch))
                  .batch(batch_size))
        .map(lambda i: (tf.gather(xs, i), tf.gather(ys, i)))
        .prefetch(tf.data.AUTOTUNE)
    )


def _in_order(x: np.ndarray, y: np.ndarray, batch_size: int):
    import tensorflow as tf

    xs, ys = tf.constant(x), tf.constant(y)
    return (
        tf.data.Dataset.range(len(x)).batch(batch_size)
        .map(lambda i: (tf.gather(xs, i), tf.gather(ys, i)))
        .prefetch(tf.data.AUTOTUNE)
    )
