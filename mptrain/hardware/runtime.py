"""Importing TensorFlow without flooding the terminal, and its op determinism.

TensorFlow prints CUDA probes, oneDNN notices and C++ log lines to the process's stderr file
descriptor while it loads, before Python logging exists (TF_CPP_MIN_LOG_LEVEL does not silence
all of them). Unless `verbose`, fd 2 is pointed at a temporary file for the import and the text
is shown only if the import fails.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import warnings
from contextlib import contextmanager

# Keras imports these at its own import when they are installed (mlflow brings all three):
# scikit-learn for its wrappers, matplotlib for `keras.visualization`, pandas to accept
# DataFrames in `fit`. mptrain calls none of that (it feeds tf.data and NumPy), and they were
# 2.0 s of the 5.9 s of CPU a TensorFlow process took to start on the AMX Xeon (median of 7
# runs each way), paid by every run, compare variant and plan trial. Keras takes them as
# absent (its own `try: import ... except ImportError`); they import normally afterwards.
KERAS_OPTIONAL = ("sklearn", "matplotlib", "pandas")


@contextmanager
def _without(modules: tuple[str, ...]):
    """`modules` unimportable while the block runs (unless imported already), then importable."""
    blocked = [name for name in modules if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # the import system's own "not there": ImportError
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


# TensorFlow's CPU allocator keeps statistics (the peak a run's memory is measured by) only as
# its BFC allocator, which it picks by default where oneDNN is on: where oneDNN is off (an
# AVX2-only CPU, TF_ENABLE_ONEDNN_OPTS=0) `get_memory_info("CPU:0")` raised and no run had a
# memory figure. Asking for it everywhere gives every CPU the oneDNN path's allocator (its
# step times measured the same within noise here: 83 and 89 ms for a 2048² matmul).
# On a GPU, TensorFlow maps nearly all of its memory at the first op unless told to grow as
# needed (TensorFlow's GPU guide, "Limiting GPU memory growth"): compare's and plan's parent
# and variants and local workers are processes on one GPU at once, of which the second would
# fail out of memory. (Written from TensorFlow's docs: no GPU was here to run it on.)
ALLOCATOR = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


# TensorFlow's C++ log, errors included: oneDNN logs "E... oneDNN supports DT_HALF only on
# platforms with AVX-512" at a float16 run's first op on CPUs with AVX-512 but not its FP16
# part (an AMD EPYC Zen 4), an alarm about nothing mptrain runs (float16 there runs XLA's or
# Eigen's kernels, as the summary says), and aborted collectives log errors when mptrain has
# said which worker was lost. A failing op still raises in Python; --verbose shows every line.
QUIET_LOGS = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def import_tensorflow(verbose: bool = False, environment: dict[str, str] | None = None):
    """Return the `tensorflow` module, imported quietly unless `verbose`, with `environment`
    set first (variables TensorFlow reads once, when it starts)."""
    environment = environment or {}
    if "tensorflow" in sys.modules:
        late = [f"{name}={value}" for name, value in environment.items() if not _in_effect(name, value)]
        if late:
            from mptrain.errors import ConfigError

            raise ConfigError(f"{', '.join(late)} must be set before TensorFlow starts, and this "
                              "process (a notebook's, a script's) has started it already, without "
                              "it: run the experiment in a process of its own (`mptrain run`, or "
                              "set it before TensorFlow is imported)")
        return sys.modules["tensorflow"]
    os.environ.update(environment)
    for name, value in ALLOCATOR.items():  # a user's own setting wins
        os.environ.setdefault(name, value)
    # mptrain trains on TensorFlow's backend, whatever a shell or a builder (keras.io's ViT
    # sets "jax") left in the environment: Keras reads it once, at its import, and this
    # process's children (compare's and plan's variants, local workers) inherit it.
    os.environ["KERAS_BACKEND"] = "tensorflow"
    if verbose:
        with _without(KERAS_OPTIONAL):
            import keras  # noqa: F401
            import tensorflow as tf

        return tf
    for name, value in QUIET_LOGS.items():
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", module=r"(tensorflow|keras|google|absl)(\.|$)")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            with _without(KERAS_OPTIONAL):
                import keras  # noqa: F401  (its own import-time chatter goes to the sink too)
                import tensorflow as tf

            # Device discovery (CUDA probing on GPU-less hosts) logs on first use: do it now.
            tf.config.list_physical_devices()
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    tf.get_logger().setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    return tf


def _in_effect(name: str, value: str) -> bool:
    """Whether the running TensorFlow already does what `name=value` asks: for oneDNN, its
    state (on by TensorFlow's default for this CPU needs no variable), else the variable."""
    from mptrain.hardware.machine import ONEDNN_ENV, onednn_enabled, probe_cpu

    if name == ONEDNN_ENV:
        return onednn_enabled(probe_cpu().flags) == (value == "1")
    return os.environ.get(name) == value


def set_op_determinism(tf, on: bool) -> None:
    """TensorFlow's op determinism, on or off for this run. It is process-wide, so a run
    without it after one with it (the Python API, a notebook, compare's rows) would inherit
    it, and with it Keras' silent switch to no XLA (float16 on a CPU then runs oneDNN's
    reference kernel: 125x slower steps measured on the Xeon AVX512_BF16/FP16, no AMX).
    TensorFlow exports only the switch on; the switch off is its own internal one."""
    from tensorflow.python.framework.config import disable_op_determinism

    if on:
        tf.config.experimental.enable_op_determinism()
    else:
        disable_op_determinism()
