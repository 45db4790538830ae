"""The data sets generated from the seed, no I/O: synthetic (class centres plus noise) and
synthetic_text (token sequences with class markers), held in memory as the arrays kinds are
(`arrays.InMemory`)."""

from __future__ import annotations

import numpy as np

from mptrain.config.kinds import SyntheticData, SyntheticTextData
from mptrain.data.arrays import InMemory
from mptrain.data.dataset import InputSpec, split_sizes


class Generated(InMemory):
    """The kinds generated from the seed: how many examples there are is in the config."""

    counts_cheaply = True

    def training_examples(self, cfg: SyntheticData | SyntheticTextData):
        return split_sizes(cfg, cfg.train_size)[1], None


class Synthetic(Generated, dataset="synthetic"):
    def arrays(self, cfg: SyntheticData, seed: int):
        return *make_synthetic(cfg, seed), "synthetic"

    def input_spec(self, cfg: SyntheticData) -> InputSpec:
        shape = tuple(cfg.input_shape)
        return InputSpec(shape, "image" if len(shape) == 3 else "vector")


class SyntheticText(Generated, dataset="synthetic_text"):
    def arrays(self, cfg: SyntheticTextData, seed: int):
        return *make_synthetic_text(cfg, seed), "synthetic_text"

    def input_spec(self, cfg: SyntheticTextData) -> InputSpec:
        return InputSpec((cfg.sequence_length,), "tokens", cfg.vocab_size)


def make_synthetic(cfg: SyntheticData, seed: int):
    """A learnable classification set, deterministic for a seed, no I/O: each class has a
    centre, each example is its class's centre plus Gaussian noise (`noise` is its standard
    deviation relative to the centres').

    Vectors: the centres are random points. Images (3-D shapes): the centres are textures
    (a few random 2-D waves per class), which convolutions and pooling can tell apart, and
    the pixels are squashed into (0, 1) like real ones, the range models that preprocess
    pixels (keras.applications) were designed for.
    """
    rng = np.random.default_rng(seed)
    shape = tuple(cfg.input_shape)
    centres = (_textures(rng, cfg.num_classes, shape) if len(shape) == 3
               else rng.normal(0.0, 1.0, size=(cfg.num_classes, *shape)).astype(np.float32))

    def draw(n: int):
        y = rng.integers(0, cfg.num_classes, size=n).astype(np.int32)
        x = centres[y] + cfg.noise * rng.normal(0.0, 1.0, size=(n, *shape)).astype(np.float32)
        if len(shape) == 3:
            x = 1.0 / (1.0 + np.exp(-x))
        return x.astype(np.float32), y

    return draw(cfg.train_size), draw(cfg.test_size)


def _textures(rng, classes: int, shape: tuple[int, ...]) -> np.ndarray:
    """Per class, three 2-D waves of random frequency, direction, phase and colour."""
    height, width, channels = shape
    yy, xx = np.mgrid[:height, :width] / max(height, width)
    centres = np.zeros((classes, *shape), np.float32)
    for k in range(classes):
        for _ in range(3):
            fy, fx = rng.integers(-4, 5, size=2)
            wave = np.sin(2 * np.pi * (fy * yy + fx * xx) + rng.uniform(0, 2 * np.pi))
            centres[k] += wave[..., None] * rng.normal(0.0, 1.0, size=channels)
    return centres / centres.std()


def make_synthetic_text(cfg: SyntheticTextData, seed: int):
    """Random filler tokens with class markers sprinkled in: the class is the marker that
    occurs most often. Token 0 is padding, 1..num_classes are the markers."""
    rng = np.random.default_rng(seed)

    def draw(n: int):
        y = rng.integers(0, cfg.num_classes, size=n).astype(np.int32)
        x = rng.integers(cfg.num_classes + 1, cfg.vocab_size, size=(n, cfg.sequence_length))
        markers = max(2, cfg.sequence_length // 8)
        for row, label in enumerate(y):
            places = rng.choice(cfg.sequence_length, size=markers, replace=False)
            noise = rng.integers(1, cfg.num_classes + 1, size=markers)
            # at least half the markers say the label; the rest are random markers
            x[row, places] = np.where(np.arange(markers) < (markers + 1) // 2 + 1, label + 1, noise)
        return x.astype(np.int32), y

    return draw(cfg.train_size), draw(cfg.test_size)
