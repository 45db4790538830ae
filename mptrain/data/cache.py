"""`data.cache`: decode a streamed data set once instead of every epoch.

`memory` keeps the decoded examples in memory. A path keeps them in memory-mapped `.npy` files
(`<path>.<split>.x.npy`, `.y.npy`, and `.json` describing what they hold): the next run with
the same data and settings reads them instead of decoding again, and only the rows a batch
needs are paged in, so the cache may be larger than memory. Images are stored as uint8.
A cache whose description does not match the experiment is rebuilt, never silently reused.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from mptrain.data.dataset import Dataset, Split
from mptrain.data.pipeline import examples


def cached(data: Dataset, cfg) -> Dataset:
    fingerprint = _fingerprint(data, cfg)
    return replace(data, **{split: _materialize(getattr(data, split), cfg.cache, split, fingerprint)
                            for split in ("train", "val", "test")})


def _fingerprint(data: Dataset, cfg) -> str:
    """What the cached arrays depend on: the experiment's data settings and the source."""
    settings = cfg.model_dump(mode="json", exclude={"cache"})
    return hashlib.sha256(json.dumps([settings, data.source, str(data.spec)], sort_keys=True)
                          .encode()).hexdigest()[:16]


def _materialize(split: Split | None, cache, name: str, fingerprint: str) -> Split | None:
    if split is None or split.arrays is not None:
        return split
    batches = examples(split).batch(512)
    if cache == "memory":
        xs, ys = zip(*batches.as_numpy_iterator(), strict=True)
        return Split(split.size, arrays=(np.concatenate(xs), np.concatenate(ys)))
    base = Path(f"{cache}.{name}")
    meta_path, x_path, y_path = Path(f"{base}.json"), Path(f"{base}.x.npy"), Path(f"{base}.y.npy")
    expected = {"fingerprint": fingerprint, "size": split.size}

    def mapped() -> Split:
        return Split(split.size, arrays=(np.load(x_path, mmap_mode="r"), np.load(y_path)))

    if meta_path.is_file() and x_path.is_file() and y_path.is_file():
        try:
            if json.loads(meta_path.read_text()) == expected:
                return mapped()
        except (ValueError, OSError):
            pass  # unreadable: rebuilt below
    base.parent.mkdir(parents=True, exist_ok=True)
    spec = batches.element_spec[0]
    tmp_x = Path(f"{x_path}.tmp")
    rows = np.lib.format.open_memmap(tmp_x, mode="w+", dtype=np.dtype(spec.dtype.as_numpy_dtype),
                                     shape=(split.size, *spec.shape[1:]))
    labels, filled = [], 0
    for x, y in batches.as_numpy_iterator():
        rows[filled:filled + len(x)] = x
        labels.append(y)
        filled += len(x)
    rows.flush()
    del rows
    os.replace(tmp_x, x_path)
    np.save(y_path, np.concatenate(labels))
    meta_path.write_text(json.dumps(expected))  # last: a half-written cache is never matched
    return mapped()
