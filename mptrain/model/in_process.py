"""Builders handed to mptrain as Python objects (`mptrain.load_experiment(..., builder=f)`).

A notebook defines its model in a cell, not a file; `register` keeps the function here and
names it `mptrain.model.in_process:NAME`, an ordinary `model.builder` for the `python` kind,
so the rest of mptrain (its checks, its loader) treats it like any builder. It exists only in
this process: compare and plan run each variant in a process of its own, and `run --workers`
each worker, which cannot see it (the error says to save the builder in a .py file).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

MODULE = __name__


def register(builder: Callable) -> str:
    """`model.builder` for a function returning a `keras.Model`."""
    base = re.sub(r"\W", "_", getattr(builder, "__name__", "builder")) or "builder"
    base = base if base[0].isalpha() or base[0] == "_" else f"b_{base}"  # an identifier
    name, module = base, sys.modules[MODULE]
    taken = 1
    while getattr(module, name, builder) is not builder:
        taken += 1
        name = f"{base}_{taken}"
    setattr(module, name, builder)
    return f"{MODULE}:{name}"
