"""mptrain: train Keras models in mixed precision from YAML experiment files.

From Python (notebooks, sweeps), the functions the command line calls (`mptrain.api`):
`load_experiment`, `variant`, `run`, `compare`, `plan`, `check_machine`, and mptrain's errors.
Importing mptrain imports none of them: each name is resolved when first used (a module
`__getattr__`, as NumPy and SciPy do for their submodules), so `mptrain --help` does not pay
for the experiment schema, and nothing imports TensorFlow until a function needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mptrain.version import __version__

_WHERE = {
    **dict.fromkeys(("check_machine", "compare", "load_experiment", "plan", "run", "variant"),
                    "mptrain.api"),
    **dict.fromkeys(("AlreadyFinished", "ConfigError", "DataError", "MptrainError",
                     "RunInterrupted", "WorkerLost"), "mptrain.errors"),
}

__all__ = ["__version__", *sorted(_WHERE)]

if TYPE_CHECKING:
    from mptrain.api import check_machine, compare, load_experiment, plan, run, variant  # noqa: F401
    from mptrain.errors import (  # noqa: F401
        AlreadyFinished,
        ConfigError,
        DataError,
        MptrainError,
        RunInterrupted,
        WorkerLost,
    )


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'mptrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # once: later uses do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
