"""tf.data pipelines over the host arrays: shuffled by index, gathered a batch at a time.

Shuffling indices and gathering whole batches costs one memcpy per batch, where shuffling
examples one by one costs thousands of small copies; on a 2-core machine that overhead would
compete with the training step itself. The shuffle is seeded, so both loops and every policy
see the same data order for the same seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mptrain.data import Dataset


@dataclass
class Batches:
    train: object
    val: object | None
    test: object
    train_examples: int
    batch_size: int

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.train_examples / self.batch_size)

    def batch_size_at(self, step_in_epoch: int) -> int:
        """Examples in the step-th batch (0-based) of an epoch: the last one may be short."""
        return min(self.batch_size, self.train_examples - step_in_epoch * self.batch_size)


def make_batches(data: Dataset, batch_size: int, seed: int, binary_labels: bool) -> Batches:
    def targets(y: np.ndarray) -> np.ndarray:
        return y.astype(np.float32)[:, None] if binary_labels else y

    return Batches(
        train=_pipeline(data.x_train, targets(data.y_train), batch_size, shuffle_seed=seed),
        val=_pipeline(data.x_val, targets(data.y_val), batch_size) if len(data.x_val) else None,
        test=_pipeline(data.x_test, targets(data.y_test), batch_size),
        train_examples=len(data.x_train),
        batch_size=batch_size,
    )


def _pipeline(x: np.ndarray, y: np.ndarray, batch_size: int, shuffle_seed: int | None = None):
    import tensorflow as tf

    xs, ys = tf.constant(x), tf.constant(y)
    indices = tf.data.Dataset.range(len(x))
    if shuffle_seed is not None:
        indices = indices.shuffle(len(x), seed=shuffle_seed, reshuffle_each_iteration=True)
    return (
        indices.batch(batch_size)
        .map(lambda i: (tf.gather(xs, i), tf.gather(ys, i)))
        .prefetch(tf.data.AUTOTUNE)
    )
