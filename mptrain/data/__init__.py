"""Data sets: where examples come from (`arrays`, `folders`, `tabular`, `tfds_source`), what a
split is (`dataset`), and how splits become batches in a fixed order (`pipeline`).

`load_dataset` is the one entry point: it picks the loader for `data.dataset`, applies the
cache, and checks that the labels fit the model before anything trains.
"""

from __future__ import annotations

from collections.abc import Callable

from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import Dataset, InputSpec, Split
from mptrain.errors import DataError

__all__ = ["Dataset", "InputSpec", "Split", "fit_classes", "load_dataset"]


def load_dataset(cfg, seed: int, status: Callable[[str], object] | None = None) -> Dataset:
    """The configured data set, its splits cached as `data.cache` says. `status(text)` shows
    progress while a large folder's files are checked."""
    kind = cfg.dataset
    if kind in ("mnist", "fashion_mnist", "npz", "synthetic", "synthetic_text"):
        from mptrain.data.arrays import load_arrays

        return load_arrays(cfg, seed)
    if kind in ("image_folder", "text_folder"):
        from mptrain.data import folders

        data = (folders.load_image_folder(cfg, status) if kind == "image_folder"
                else folders.load_text_folder(cfg))
    elif kind == "csv":
        from mptrain.data.tabular import load_csv

        data = load_csv(cfg)
    else:
        from mptrain.data.tfds_source import load_tfds

        data = load_tfds(cfg)
    if cfg.cache != "none":
        from mptrain.data.cache import cached

        data = cached(data, cfg)
    return data


def fit_classes(config: ExperimentConfig, data: Dataset) -> ExperimentConfig:
    """The experiment with `model.num_classes` the data's when it was left out. Labels the
    model cannot output are an error before training, not a NaN loss in it."""
    if config.train.loss == "binary_crossentropy":
        return config
    wanted = config.model.num_classes
    if wanted is None:
        from mptrain.config import variant

        return variant(config, {"model.num_classes": data.num_classes_seen})
    if data.num_classes_seen > wanted:
        raise DataError(
            f"{data.source}: labels go up to {data.num_classes_seen - 1} but model.num_classes is "
            f"{wanted}; set model.num_classes to at least {data.num_classes_seen} (or leave it "
            "out: the data's classes)")
    return config
