"""Training memory as a run measures it (the estimates are `model.size`'s).

A CPU run's process peak is dominated by TensorFlow and the data set, which are the same under
every policy; what a policy changes is the training state. So the meter notes what the
allocator holds before the model is built (the data set's tensors) and reports the training
peak above it (`MemoryStats`).
"""

from __future__ import annotations

import contextlib
import resource
import sys

from mptrain.record import FrozenRecord


class MemoryStats(FrozenRecord):
    """Memory, as far as this machine can tell.

    The process peak (RSS) includes TensorFlow itself and the whole data set, so it barely
    moves between policies. TensorFlow's allocator (`device`) reports what it holds: the data
    set's tensors before the model is built (`data_bytes`) and the peak during training; their
    difference, `training_peak_bytes`, is the training state a policy changes: weights,
    gradients, optimizer state and activations.
    """

    process_peak_bytes: int
    device: str
    device_peak_bytes: int | None
    data_bytes: int | None
    training_peak_bytes: int | None


class MemoryMeter:
    """`start()` once the data is on the device and before the model is built; `stats()` after
    training. Allocators that keep no statistics (a CPU with oneDNN off) report None."""

    def __init__(self, tf, device: str):
        self.tf, self.device = tf, device
        self.data_bytes: int | None = None

    def start(self) -> MemoryMeter:
        info = self._info()
        self.data_bytes = info["current"] if info else 0
        with contextlib.suppress(ValueError, RuntimeError):
            self.tf.config.experimental.reset_memory_stats(self.device)
        return self

    def stats(self) -> MemoryStats:
        info = self._info()
        peak = info["peak"] if info else None
        training = peak - self.data_bytes if peak is not None and self.data_bytes is not None else None
        return MemoryStats(process_peak_bytes=peak_rss_bytes(), device=self.device,
                           device_peak_bytes=peak, data_bytes=self.data_bytes,
                           training_peak_bytes=training)

    def _info(self) -> dict[str, int] | None:
        """{current, peak} in bytes; None when the allocator keeps no statistics, or has seen
        nothing (on CPUs small tensors bypass the allocator that counts)."""
        try:
            info = self.tf.config.experimental.get_memory_info(self.device)
        except (ValueError, RuntimeError):
            return None
        return {k: int(v) for k, v in info.items()} if info.get("peak") else None


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
