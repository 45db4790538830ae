"""Benchmark: bfloat16 convolutions, mptrain against PyTorch on the same CPU (issue 37).

ResNet50 on 64x64x3 images, batch 32, Adam: mptrain's float32, mixed_bfloat16, and each
with fused layers (`model.fused_layers`: one fused BatchNorm op, float32 weight gradients
for the convolutions), and, in the same rounds, PyTorch's float32 and
bfloat16 autocast (and channels_last), each a turn of 5 steps, in a random order every round.
Each framework's speed-up is its own float32's median step over the variant's, within each
round (a drift moves both), printed as the median and range over the rounds beside each
side's own spread.

The PyTorch side runs in another Python, one with torch and torchvision (they stay out of
`make install` and CI: PyPI's torch pulls about 3 GB of CUDA packages):

    python3 -m venv ~/torch-venv && ~/torch-venv/bin/pip install torch torchvision
    MPTRAIN_TORCH_PYTHON=~/torch-venv/bin/python python bench/conv_bf16.py

Without it (no $MPTRAIN_TORCH_PYTHON, or one without torch), the PyTorch rows are left out
with a note. `--profile` also prints where a step's time goes, per TensorFlow op type, in
float32 and in each bfloat16 variant (TensorFlow's profiler).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, quiet_tensorflow, table  # noqa: E402

HERE = Path(__file__).resolve().parent
ROUNDS, TURN, WARMUP = 7, 5, 3
RESNET50 = {"name": "r50", "seed": 0,
            "data": {"dataset": "synthetic", "input_shape": [64, 64, 3], "train_size": 640,
                     "test_size": 64, "num_classes": 10},
            "model": {"kind": "application", "name": "ResNet50"},
            "train": {"batch_size": 32, "optimizer": {"name": "adam"}}}
TF_VARIANTS = {"float32": ["policy=float32"], "float32+fused": ["model.fused_layers=true"],
               "mixed_bfloat16": ["policy=mixed_bfloat16"],
               "mixed_bfloat16+fused": ["policy=mixed_bfloat16", "model.fused_layers=true"]}
TORCH_VARIANTS = ("float32", "bf16 autocast", "bf16 autocast channels_last")


def tensorflow_steps() -> dict:
    """mptrain's variants, each prepared as `mptrain run` prepares it: name → one step."""
    from mptrain.config import validate, variant
    from mptrain.runs.experiment import prepare

    base = validate(RESNET50, "<bench>")
    steps = {}
    for name, changes in TF_VARIANTS.items():
        prepared = prepare(variant(base, changes))
        x, y = next(iter(prepared.batches.train))
        model = prepared.model
        for _ in range(WARMUP):
            model.train_on_batch(x, y)
        steps[f"mptrain {name}"] = lambda model=model, x=x, y=y: model.train_on_batch(x, y)
    return steps


class TorchPeer:
    """PyTorch's variants in their own Python (`torch_peer.py`), a turn on request."""

    def __init__(self, python: str):
        self.process = subprocess.Popen([python, str(HERE / "torch_peer.py")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.ready = json.loads(self.process.stdout.readline())

    def turn(self, name: str, steps: int) -> list[float]:
        self.process.stdin.write(f"{name} {steps}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())


def torch_peer() -> tuple[TorchPeer | None, str]:
    python = os.environ.get("MPTRAIN_TORCH_PYTHON")
    if not python:
        return None, "PyTorch side left out: set MPTRAIN_TORCH_PYTHON to a Python with torch and torchvision"
    try:
        peer = TorchPeer(python)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        return None, f"PyTorch side left out: {python} did not start the peer ({exc})"
    return peer, f"PyTorch {peer.ready['ready']}, {peer.ready['threads']} threads"


def in_rounds(tf_steps: dict, peer: TorchPeer | None) -> dict[str, list[float]]:
    """Each variant's median step (ms) in each round, the variants in a random order."""
    turns = {name: (lambda step=step: _timed(step, TURN)) for name, step in tf_steps.items()}
    if peer is not None:
        turns |= {f"PyTorch {name}": (lambda name=name: peer.turn(name, TURN)) for name in TORCH_VARIANTS}
    rounds: dict[str, list[float]] = {name: [] for name in turns}
    order = random.Random(0)
    for _ in range(ROUNDS):
        names = list(turns)
        order.shuffle(names)
        for name in names:
            rounds[name].append(statistics.median(turns[name]()))
    return rounds


def _timed(step, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        step()
        times.append(1e3 * (time.perf_counter() - started))
    return times


def report(rounds: dict[str, list[float]], note: str) -> str:
    rows = []
    for name, values in rounds.items():
        base = rounds["mptrain float32" if name.startswith("mptrain") else "PyTorch float32"]
        ratios = sorted(b / v for b, v in zip(base, values, strict=True))
        rows.append([name, f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})",
                     f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"])
    return (f"ResNet50 64x64x3, batch 32, Adam, on {cpu_model()}; {ROUNDS} rounds of {TURN} steps, "
            f"in a random order; {note}\n\n"
            + table(rows, ["variant", "ms a step: median (range over rounds)",
                           "speed-up over its float32 (per round)"]))


def main() -> str:
    quiet_tensorflow()
    peer, note = torch_peer()
    text = report(in_rounds(tensorflow_steps(), peer), note)
    if "--profile" in sys.argv:
        text += "\n\n" + profile()
    return text


# the convolution ops of a step, by phase (TensorFlow's CPU op names, oneDNN's kernels)
PHASES = {"forward": ("_MklNativeFusedConv2D", "_MklNativeConv2D", "Conv2D"),
          "input gradient": ("_MklNativeConv2DBackpropInput", "Conv2DBackpropInput"),
          "weight gradient": ("_MklNativeConv2DBackpropFilter", "_MklNativeConv2DBackpropFilterWithBias",
                              "Conv2DBackpropFilter")}


def profile() -> str:
    """Where a step's time goes in each of mptrain's variants: per op type (ms a step, summed
    self time over 5 profiled steps; the two cores overlap ops, so a column sums to more than
    a step), and the convolutions' achieved FLOP/s per phase against the CPU's peak for the
    dtype that phase computes in (the rest of the step beside them)."""
    from mptrain.config import validate, variant
    from mptrain.model.flops import cpu_peak, forward_profile
    from mptrain.runs.experiment import prepare

    base, columns, phases = validate(RESNET50, "<bench>"), {}, []
    for name, changes in TF_VARIANTS.items():
        prepared = prepare(variant(base, changes))
        columns[name] = _op_ms(prepared)
        # forward and input gradient: the same FLOPs (the first convolution needs no input
        # gradient: counted anyway, a 1.5% overstatement); the weight gradient the same again
        flops = forward_profile(prepared.model).flops * RESNET50["train"]["batch_size"]
        for phase, ops in PHASES.items():
            ms = sum(columns[name][op] for op in ops)
            in_float32 = name.startswith("float32") or (phase == "weight gradient" and "fused" in name)
            dtype = "float32" if in_float32 else "bfloat16"
            peak = cpu_peak(prepared.machine.cpu, dtype)
            achieved = flops / (ms / 1e3)
            phases.append([name, phase, dtype, f"{ms:.0f}", f"{achieved / 1e12:.2f}",
                           f"{100 * achieved / peak.flops_per_second:.0f}% of {peak.unit}" if peak else "?"])
        rest = sum(columns[name].values()) - sum(columns[name][op] for ops in PHASES.values() for op in ops)
        phases.append([name, "everything else", "", f"{rest:.0f}", "", ""])
    kinds = sorted(set().union(*columns.values()), key=lambda k: -max(c[k] for c in columns.values()))
    rows = [[kind, *(f"{c[kind]:.1f}" for c in columns.values())] for kind in kinds[:16]]
    rows.append(["all ops", *(f"{sum(c.values()):.1f}" for c in columns.values())])
    return ("Self time per op type, ms a step (TensorFlow's profiler)\n\n" + table(rows, ["op", *columns])
            + "\n\nThe convolutions' achieved FLOP/s, per phase (op time from the profile above)\n\n"
            + table(phases, ["variant", "phase", "computes in", "ms a step", "TFLOP/s", "of peak"]))


def _op_ms(prepared) -> dict[str, float]:
    """ms a step per op type, over 5 profiled steps after the warm-up."""
    import glob
    import tempfile
    from collections import Counter

    import tensorflow as tf
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    x, y = next(iter(prepared.batches.train))
    for _ in range(WARMUP):
        prepared.model.train_on_batch(x, y)
    folder = tempfile.mkdtemp(prefix="mptrain-profile-")
    tf.profiler.experimental.start(folder)
    for _ in range(5):
        prepared.model.train_on_batch(x, y)
    tf.profiler.experimental.stop()
    data, _ = plugin.xspace_to_tools_data(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True),
                                          "framework_op_stats", {})
    stats = json.loads(data)[0]
    ids = [c["id"] for c in stats["cols"]]
    ms = Counter()
    for row in stats["rows"]:
        cells = {i: c.get("v") for i, c in zip(ids, row["c"], strict=True)}
        if cells["type"] != "IDLE":
            ms[cells["type"]] += cells["total_self_time"] / 5 / 1e3
    return ms


if __name__ == "__main__":
    print(main())
