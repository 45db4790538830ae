"""Data sets: where examples come from (`arrays`, `folders`, `tabular`, `series`, `tfds_source`), what a
split is (`dataset`), and how splits become batches in a fixed order (`pipeline`).

`load_dataset` is the one entry point: it picks the loader for `data.dataset` (`LOADERS`) and
applies the cache. Whether the data fits the model is the model's to check (`model.checks.fit_to_data`).
"""

from __future__ import annotations

from collections.abc import Callable

from mptrain.data.dataset import Dataset, InputSpec, Split

__all__ = ["Dataset", "InputSpec", "Split", "load_dataset"]


# data.dataset → "module:function(cfg, seed, status) -> Dataset", imported when used: a new
# kind is its config class (config/kinds.py) and its loader here
LOADERS = {
    "mnist": "mptrain.data.arrays:load_arrays",
    "fashion_mnist": "mptrain.data.arrays:load_arrays",
    "npz": "mptrain.data.arrays:load_arrays",
    "synthetic": "mptrain.data.arrays:load_arrays",
    "synthetic_text": "mptrain.data.arrays:load_arrays",
    "image_folder": "mptrain.data.folders:load_image_folder",
    "image_masks": "mptrain.data.masks:load_image_masks",
    "text_folder": "mptrain.data.folders:load_text_folder",
    "csv": "mptrain.data.tabular:load_csv",
    "timeseries": "mptrain.data.series:load_series",
    "tfds": "mptrain.data.tfds_source:load_tfds",
}


def load_dataset(cfg, seed: int, status: Callable[[str], object] | None = None) -> Dataset:
    """The configured data set, its splits cached as `data.cache` says (where the kind has
    it). `status(text)` shows progress while a large folder's files are checked."""
    import importlib

    module, _, function = LOADERS[cfg.dataset].partition(":")
    data = getattr(importlib.import_module(module), function)(cfg, seed, status)
    if getattr(cfg, "cache", "none") != "none":
        from mptrain.data.cache import cached

        data = cached(data, cfg)
    return data
