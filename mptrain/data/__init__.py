"""Data sets: where examples come from (`arrays`, `folders`, `tabular`, `series`, `tfds_source`), what a
split is (`dataset`), and how splits become batches in a fixed order (`pipeline`).

`load_dataset` is the one entry point: it asks the kind's source (`source.source_of`) and
applies the cache. Whether the data fits the model is the model's to check (`model.checks.fit_to_data`).
"""

from __future__ import annotations

from collections.abc import Callable

from mptrain.data.dataset import Dataset, InputSpec, Split

__all__ = ["Dataset", "InputSpec", "Split", "load_dataset"]


def load_dataset(cfg, seed: int, status: Callable[[str], object] | None = None) -> Dataset:
    """The configured data set, its splits cached as `data.cache` says (where the kind has
    it), without its labels where `data.labels` is false (the pipeline's batches are then
    its inputs alone). `status(text)` shows progress while a large folder's files are
    checked."""
    from dataclasses import replace

    from mptrain.data.source import source_of

    data = source_of(cfg).load(cfg, seed, status)
    if not cfg.labels and data.labels is not None:
        data = replace(data, labels=None, notes=[*data.notes, f"{data.source}: its labels left out "
                                                 "(data.labels: false): batches of inputs alone"])
    if getattr(cfg, "cache", "none") != "none":
        from mptrain.data.cache import cached

        data = cached(data, cfg)
    return data
