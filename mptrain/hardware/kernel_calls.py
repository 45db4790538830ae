"""The kernels the check times (`kernels.measure`), traced as calls: here, or in a peer
process that runs the other math library, in the same rounds.

One kernel per kind of layer whose speed a precision or a math library changes (`kernels`).
TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, as it starts, so one process runs one math
library: oneDNN or TensorFlow's own Eigen kernels. The kernel check (`kernels.measure`) times
the other one in a peer: this module, run as a child with the variable flipped. It traces the
same kernels, and each time the parent asks, makes one call of one setting
and says how long it took, so the parent puts the peer's calls in its own interleaved rounds
and a machine whose speed drifts slows both libraries alike. Requests and answers go over a
`multiprocessing` pipe of their own (pickled, with its `poll` timeout): nothing TensorFlow
prints can be taken for one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from mptrain.hardware.machine import (
    LIBRARY_NAMES,
    ONEDNN_ENV,
    library_environment,
    library_of,
    onednn_running,
)

PEER = "peer"  # the third part of a peer's setting, (dtype, False, PEER), in `kernels.measure`
START_TIMEOUT_S = 120.0  # TensorFlow's import and the first kernel's tracing, on a loaded machine
CALL_TIMEOUT_S = 60.0  # one call (a float16 kernel on oneDNN's reference path took seconds)


def kernels(tf, scale: float):
    """(name, kind, FLOPs per call, its inputs' shapes, function) for each benchmark kernel:
    one per kind of layer whose speed a precision or a math library changes."""
    n = max(8, int(1024 * scale))
    d = max(8, int(512 * scale))
    batch, hw, ch = max(1, int(16 * scale)), max(4, int(56 * scale)), max(4, int(64 * scale))
    length = max(8, int(512 * scale))  # a Conv1D's sequence (width 7, ch channels)
    steps, units = max(2, int(8 * scale)), max(8, int(256 * scale))  # an LSTM's (unrolled: XLA compiles it)
    heads, tokens, head_dim = max(1, int(32 * scale)), max(8, int(128 * scale)), max(8, int(64 * scale))

    # Each returns one element so that fetching it waits for the device but copies ~nothing.
    def matmul(a, b):
        return tf.matmul(a, b)[0, 0]

    def dense(x, w, bias):
        return tf.nn.relu(tf.matmul(x, w) + bias)[0, 0]

    def conv(x, w):
        return tf.nn.conv2d(x, w, 1, "SAME")[0, 0, 0, 0]

    def conv1d(x, w):
        return tf.nn.conv1d(x, w, 1, "SAME")[0, 0, 0]

    def recurrent(x, w, u, bias):  # an LSTM's steps: its input and recurrent products, its gates
        h = c = tf.zeros_like(x[:, 0, :])
        for t in range(steps):
            gate_in, forget, cell, gate_out = tf.split(tf.matmul(x[:, t], w) + tf.matmul(h, u) + bias, 4, 1)
            c = tf.sigmoid(forget) * c + tf.sigmoid(gate_in) * tf.tanh(cell)
            h = tf.sigmoid(gate_out) * tf.tanh(c)
        return h[0, 0]

    def attention(q, k, v):  # scaled dot-product attention, a softmax in the compute dtype
        scores = tf.matmul(q, k, transpose_b=True) * tf.cast(head_dim ** -0.5, q.dtype)
        return tf.matmul(tf.nn.softmax(scores), v)[0, 0, 0]

    return [
        (f"matmul {n}²", "matmul", 2 * n**3, [(n, n), (n, n)], matmul),
        (f"dense {d}² fused", "dense", 2 * d**3, [(d, d), (d, d), (d,)], dense),
        (f"conv3x3 {batch}×{hw}²×{ch}", "conv2d", 2 * batch * hw * hw * ch * ch * 9,
         [(batch, hw, hw, ch), (3, 3, ch, ch)], conv),
        (f"conv1d {batch}×{length}×{ch}", "conv1d", 2 * batch * length * ch * ch * 7,
         [(batch, length, ch), (7, ch, ch)], conv1d),
        (f"lstm {batch}×{steps}×{units}", "recurrent", 2 * 2 * steps * batch * units * 4 * units,
         [(batch, steps, units), (units, 4 * units), (units, 4 * units), (4 * units,)], recurrent),
        (f"attention {heads}×{tokens}²×{head_dim}", "attention", 2 * 2 * heads * tokens**2 * head_dim,
         [(heads, tokens, head_dim)] * 3, attention),
    ]


def prepared_calls(tf, fn, shapes, settings, device: str) -> dict[tuple[str, bool], tuple[Callable, tuple]]:
    """Each (dtype, XLA) setting of one kernel traced (and compiled) outside the timing; one
    this TensorFlow cannot build (a dtype its kernels lack here) is left out, not the check."""
    calls = {}
    with tf.device(device):
        for dtype, xla in settings:
            try:
                inputs = tuple(tf.cast(tf.random.normal(shape), dtype) for shape in shapes)
                compiled = tf.function(fn, autograph=False, jit_compile=xla)
                compiled.get_concrete_function(*inputs)
                if xla:
                    compiled(*inputs).numpy()  # and compile: the warm-up then times a call
            except Exception:  # TensorFlow raises many kinds of error for a kernel it lacks
                continue
            calls[dtype, xla] = (compiled, inputs)
    return calls


class Peer:
    """The peer process and the pipe to it. Its calls are `PeerCall`s; a peer that fails
    (or whose TensorFlow runs the same library as this one: the variable changed nothing)
    stops answering (`failed` says why) and its calls time nothing from then on."""

    def __init__(self, process: subprocess.Popen | None, pipe, onednn: bool, log,
                 failed: str | None = None):
        self.process, self.pipe, self.onednn, self.log = process, pipe, onednn, log
        self.failed = failed

    @classmethod
    def start(cls, onednn: bool, dtypes: tuple[str, ...], scale: float) -> Peer:
        """A peer running `onednn` (True: oneDNN, False: Eigen), tracing `dtypes`' kernels."""
        from multiprocessing import Pipe

        library = LIBRARY_NAMES[library_of(onednn)]
        log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed in close: its stderr)
        mine, theirs = Pipe()
        spec = json.dumps({"dtypes": list(dtypes), "scale": scale, "pipe": theirs.fileno()})
        try:
            process = subprocess.Popen([sys.executable, "-m", "mptrain.hardware.kernel_calls", spec],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                       env={**os.environ, **library_environment(library_of(onednn))},
                                       pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError as exc:
            mine.close()
            return cls(None, None, onednn, log, f"the {library} peer process did not start: {exc}")
        finally:
            theirs.close()
        return cls(process, mine, onednn, log)

    def calls(self, kernel: int, dtypes: tuple[str, ...]) -> dict[tuple, PeerCall]:
        """Kernel number `kernel` traced in the peer, each dtype it could build as a call for
        `interleaved` (none once the peer has failed)."""
        answer = self._ask(("trace", kernel, None), START_TIMEOUT_S)
        if answer is not None and answer["onednn"] not in (None, self.onednn):  # as its TensorFlow says
            self._fail(f"{ONEDNN_ENV} changed nothing: this TensorFlow runs "
                       f"{LIBRARY_NAMES[library_of(answer['onednn'])]} either way here")
        if answer is None or self.failed is not None:
            return {}
        return {(dtype, False, PEER): PeerCall(self, kernel, dtype) for dtype in answer["traced"]}

    def _ask(self, request: tuple, timeout_s: float):
        """Send one request and read its answer; None once the peer has failed."""
        if self.failed is not None:
            return None
        try:
            self.pipe.send(request)
            if not self.pipe.poll(timeout_s):
                raise TimeoutError(f"no answer in {timeout_s:.0f} s")
            return self.pipe.recv()
        except (OSError, EOFError) as exc:
            why = str(exc) if isinstance(exc, TimeoutError) else self._ended()
            self._fail(f"the {LIBRARY_NAMES[library_of(self.onednn)]} peer process failed: {why}")
            return None

    def _ended(self) -> str:
        """How it ended (its pipe closed), with the last line it wrote on stderr."""
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "its pipe closed"
        self.log.seek(0)
        lines = [line for line in self.log.read().splitlines() if line.strip()]
        return f"it ended (exit code {code}" + (f": {lines[-1][:200]})" if lines else ")")

    def _fail(self, why: str) -> None:
        self.failed = why
        self.close()

    def close(self) -> None:
        """End the peer (it ends by itself when its pipe closes)."""
        if self.pipe is not None:
            self.pipe.close()
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@dataclass(frozen=True)
class PeerCall:
    """One setting of one kernel, called and timed in the peer."""

    peer: Peer
    kernel: int
    dtype: str

    def seconds(self) -> float | None:
        """The call's own time, as the peer measured it; None once the peer has failed."""
        return self.peer._ask(("call", self.kernel, self.dtype), CALL_TIMEOUT_S)


def serve(spec: dict) -> None:
    """The peer's side: trace a kernel when asked (and say which dtypes it could build, and
    its library as its TensorFlow says), then time a call of it when asked, until its pipe
    closes."""
    from multiprocessing.connection import Connection

    from mptrain.hardware.runtime import import_tensorflow

    tf = import_tensorflow()
    catalog = kernels(tf, spec["scale"])
    pipe = Connection(spec["pipe"])
    traced: dict[int, dict] = {}  # the kernel last traced (a call of another one fails)
    while True:
        try:
            op, index, dtype = pipe.recv()
        except EOFError:
            return
        if op == "trace":
            _, _, _, shapes, fn = catalog[index]
            traced = {index: prepared_calls(tf, fn, shapes, [(d, False) for d in spec["dtypes"]], "/CPU:0")}
            pipe.send({"traced": [d for d, _ in traced[index]], "onednn": onednn_running()})
        else:
            fn, inputs = traced[index][dtype, False]
            began = time.perf_counter()
            fn(*inputs).numpy()
            pipe.send(time.perf_counter() - began)


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
