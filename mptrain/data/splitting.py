"""How a data source divides its examples into training, validation and test: by a hash of
each example's key, so the split is the same on every machine and run, whatever order the
files are listed in, and an example never changes sides when others are added."""

from __future__ import annotations

import zlib
from collections.abc import Sequence


def hash_fraction(key: str, salt: str) -> float:
    """A stable pseudo-random number in [0, 1) for `key`: splits files into train, validation
    and test the same way on every machine and run, independent of listing order."""
    return zlib.crc32(f"{salt}:{key}".encode()) / 2**32


def split_keys(keys: Sequence[str], fraction: float, salt: str) -> tuple[list[int], list[int]]:
    """Indices of `keys` kept, and those (about `fraction` of them) taken out."""
    taken = [i for i, k in enumerate(keys) if hash_fraction(k, salt) < fraction]
    chosen = set(taken)
    return [i for i in range(len(keys)) if i not in chosen], taken
