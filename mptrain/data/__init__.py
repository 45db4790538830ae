"""Data sets: where examples come from (`arrays`, `folders`, `tabular`, `tfds_source`), what a
split is (`dataset`), and how splits become batches in a fixed order (`pipeline`).

`load_dataset` is the one entry point: it picks the loader for `data.dataset` and applies the
cache. Whether the data fits the model is the model's to check (`model.checks.fit_to_data`).
"""

from __future__ import annotations

from collections.abc import Callable

from mptrain.data.dataset import Dataset, InputSpec, Split

__all__ = ["Dataset", "InputSpec", "Split", "load_dataset"]


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

