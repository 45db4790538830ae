"""mptrain: train Keras models in mixed precision from YAML experiment files.

From Python (notebooks, sweeps), the functions the command line calls (`mptrain.api`):
`load_experiment`, `variant`, `run`, `compare`, `plan`, `check_machine`. Importing mptrain
does not import TensorFlow; the first function that needs it does.
"""

from mptrain.api import check_machine, compare, load_experiment, plan, run, variant
from mptrain.errors import ConfigError, DataError, MptrainError, WorkerLost
from mptrain.version import __version__

__all__ = ["ConfigError", "DataError", "MptrainError", "WorkerLost", "__version__", "check_machine",
           "compare", "load_experiment", "plan", "run", "variant"]
