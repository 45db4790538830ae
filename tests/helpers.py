"""What tests share: tiny experiments, running mptrain as a user does, recorded summaries.

Test modules import from here (and from `datafiles`, the files tests write), never from each
other."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from mptrain.config import apply_overrides
from mptrain.model.size import MemoryStats
from mptrain.runs.summary import LossScaleStats, RunSummary, StepTimes
from mptrain.training.records import StepRecord

TINY = {
    "name": "tiny",
    "seed": 7,
    "policy": "float32",
    "data": {
        "dataset": "synthetic",
        "validation_split": 0.25,
        "train_size": 512, "test_size": 128, "input_shape": [16], "num_classes": 4, "noise": 2.0,
    },
    "model": {"kind": "mlp", "hidden_units": [32, 32], "num_classes": 4},
    # no XLA-compiled optimizer update: compiling it costs a second or two a run and tiny
    # models gain nothing (its own tests turn it on)
    "train": {"loop": "fit", "epochs": 3, "batch_size": 64, "warmup_steps": 1,
              "xla_optimizer_update": False,
              "optimizer": {"name": "adam", "kwargs": {"learning_rate": 0.01}}},
    "output": {"save_model": False},
}
IMAGES = ["data.input_shape=[16, 16, 1]", "data.train_size=192", "data.test_size=48", "data.noise=0.5"]
TOKENS = ["data.dataset=synthetic_text", "data.sequence_length=16", "data.vocab_size=60",
          "data.num_classes=4", "data.train_size=256", "data.test_size=64"]
CNN = ["model.kind=cnn", "model.filters=[8]", "model.dense_units=[16]", "model.num_classes=3"]


def epoch_order(n: int, seed: int, epoch: int):
    """The example indices of one epoch, in training order, as the pipeline computes them."""
    import tensorflow as tf

    from mptrain.data.pipeline import shuffled_indices

    return shuffled_indices(tf, n, seed, tf.constant(epoch, tf.int64)).numpy()


def tiny_raw(*overrides: str) -> dict:
    return apply_overrides(copy.deepcopy(TINY), list(overrides))


def mptrain(*args: str, cwd: Path, env_extra: dict | None = None, timeout: int = 600,
            process: bool = False) -> subprocess.CompletedProcess:
    """`mptrain ARGS` run from `cwd` → its exit code, stdout and stderr.

    In this test's process, through the command line (Typer parses the arguments, the command
    runs, errors become exit codes and messages), unless `process=True`: starting TensorFlow
    costs ~4 s of CPU a process, which was most of the suite's time. A test whose subject is
    the process itself (signals, start-up logs, what TensorFlow reads when it starts) asks for
    one; compare, plan and `--workers` start their children as processes either way."""
    env = {"COLUMNS": "120", **(env_extra or {})}
    if process:
        return subprocess.run([sys.executable, "-m", "mptrain", *args], cwd=cwd,
                              env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=timeout)
    return _in_this_process(list(args), cwd, env)


def _in_this_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    import traceback

    from typer.testing import CliRunner

    from mptrain.cli import app

    previous = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, args, env=env, prog_name="mptrain")
    finally:
        os.chdir(previous)
        if "keras" in sys.modules:  # the models a process would have dropped on exit
            import keras

            keras.backend.clear_session()  # (the global policy: conftest's reset_global_policy)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # an escaped exception, shown as the process would show it (tests assert its absence)
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["mptrain", *args], result.exit_code, result.stdout, stderr)


def mptrain_process(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mptrain", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(process: subprocess.Popen, text: str, timeout: float = 120) -> list[str]:
    """stderr lines until one contains `text` (the process is then mid-training)."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"never saw {text!r}: {''.join(lines)}")


def wait_catching(process: subprocess.Popen, sig: int, timeout: float = 120) -> None:
    """Until the process catches `sig` (a handler of its own, read from /proc: its `SigCgt`
    mask), so a signal sent now reaches mptrain, not Python's default: a fixed sleep before
    it was too short on a loaded host (the process died of the signal, exit -15)."""
    deadline = time.monotonic() + timeout
    status = Path(f"/proc/{process.pid}/status")
    while time.monotonic() < deadline and process.poll() is None:
        caught = next(int(line.split()[1], 16) for line in status.read_text().splitlines()
                      if line.startswith("SigCgt:"))
        if caught & (1 << (sig - 1)):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {process.pid} never caught signal {sig}")


def local_worker(parent: subprocess.Popen, index: int) -> int:
    """The process id of worker `index` of a `mptrain run --workers N` (its child whose
    TF_CONFIG says that task), read from /proc."""
    import json

    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or \
                    int((entry / "stat").read_text().rpartition(")")[2].split()[1]) != parent.pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        for variable in environ:
            if variable.startswith(b"TF_CONFIG=") and \
                    json.loads(variable[len(b"TF_CONFIG="):])["task"]["index"] == index:
                return int(entry.name)
    raise AssertionError(f"process {parent.pid} has no worker {index}")


def experiment(tmp_path: Path, *overrides: str, name: str = "exp.yaml") -> Path:
    """A tiny experiment file writing its runs to tmp_path/runs."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}", *overrides)))
    return path


EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def example(tmp_path: Path, name: str) -> Path:
    """docs/examples/NAME.yaml (and its builder) copied beside the test's data."""
    import shutil

    for builder in EXAMPLES.glob(f"{name}*.py"):
        shutil.copy(builder, tmp_path / builder.name)
    path = tmp_path / f"{name}.yaml"
    path.write_text((EXAMPLES / f"{name}.yaml").read_text())
    return path


def run_json(tmp_path: Path, config: Path, *args: str) -> dict:
    import json

    done = mptrain("run", str(config), "--json", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refuses(tmp_path: Path, config: Path, *messages: str, command: str = "validate") -> str:
    """The command exits 2 with each message, no traceback, nothing on stdout, no run folder."""
    done = mptrain(command, str(config), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for message in messages:
        assert message in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    return done.stderr


def make_summary(median=100.0, accuracy=0.9, memory=1000, status="finished", spread=0.02,
                 scale=None, steps=50, **changes) -> RunSummary:
    """A summary as a run would write it, with the numbers a test cares about."""
    times = StepTimes(median_ms=median, p10_ms=median * (1 - spread), p90_ms=median * (1 + spread),
                      mean_ms=median, timed_steps=steps - 2, warmup_steps_excluded=2,
                      short_batches_excluded=0, enough=steps - 2 >= 5)
    fields = dict(
        name="x", status=status, policy="float32", policy_requested="float32", policy_reason="",
        compute_dtype="float32", variable_dtype="float32", output_dtype="float32", loop="fit",
        jit_compile=False, jit_compile_reason="", xla_optimizer_update=False,
        xla_optimizer_update_reason="", device="CPU", distribution="one device", replicas=1,
        dataset="synthetic", batch_size=64,
        epochs_run=1, steps_run=steps, stop_reason=None, stopped_by=None, step_time=times,
        examples_per_sec=64 / median * 1000, flops_per_example=1000, achieved_tflops=0.1,
        peak_tflops=1.0, peak_unit="AVX-512 FP32", mfu=0.1, speed_warning=None, notes=[],
        first_step_loss=2.0, non_finite_loss_steps=10 if status == "diverged" else 0,
        final_train_loss=None if status == "diverged" else 0.5, final_metrics={},
        test_loss=None if status == "diverged" else 0.5,
        test_accuracy=None if status == "diverged" else accuracy, test_metrics={},
        test_examples=10_000,
        loss_scale=LossScaleStats(final=scale[0], skipped_steps=scale[1], skip_rate=scale[1] / steps,
                                  min_scale=scale[0], steps_at_floor=0) if scale else None,
        memory=MemoryStats(process_peak_bytes=2**30, device="CPU:0", device_peak_bytes=memory + 10,
                           data_bytes=10, training_peak_bytes=memory),
        wall_time_s=10.0, time_to_first_step_s=2.0, tensorflow_version="2", keras_version="3",
        seed=0, run_dir="/tmp/x",
    )
    fields.update(changes)
    return RunSummary(**fields)


def step_records(*seconds_and_sizes, epoch: int = 1) -> list[StepRecord]:
    return [StepRecord(i + 1, epoch, 1.0, s, n) for i, (s, n) in enumerate(seconds_and_sizes)]


def record_kernels(machine, bfloat16: float, float16: float | None = 1.0, device: str = "/CPU:0",
                   xla_bfloat16: float | None = None, xla_float16: float | None = None,
                   xla_gain: float = 1.0, library_gain: float | None = None,
                   kinds: dict[str, float] | None = None, other_bfloat16: float | None = None):
    """A kernel measurement of `machine` in its cache, as if measured: each 16-bit dtype at
    the given speed relative to float32 on every kernel; on a CPU also with XLA (`xla_*`:
    against float32 with XLA, default the same as without, and float16 1.0 where it
    collapsed without; `xla_gain`: float32 with XLA against float32 without) and, given a
    `library_gain` (float32 with the other math library against float32 with the machine's),
    the other library's kernels too, its 16-bit ones at the same ratios (bfloat16 at
    `other_bfloat16` when given). `kinds`: kinds of kernel beyond the general three, each with
    bfloat16's speed on it."""
    from mptrain.hardware.kernels import KernelTiming, store_kernels

    plain = {"float32": 1.0, "bfloat16": bfloat16, "float16": float16}
    on_cpu = device == "/CPU:0"
    modes = {(False, machine.onednn if on_cpu else None): (10.0, plain)}
    if on_cpu:
        collapsed = float16 is not None and float16 < 0.25
        modes[True, None] = (10.0 / xla_gain, {
            "float32": 1.0, "bfloat16": xla_bfloat16 if xla_bfloat16 is not None else bfloat16,
            "float16": xla_float16 if xla_float16 is not None else 1.0 if collapsed else float16})
        if library_gain is not None:
            modes[False, not machine.onednn] = (10.0 / library_gain, {
                **plain, "bfloat16": other_bfloat16 or bfloat16})
    kernels = [("matmul 1024²", "matmul", bfloat16), ("dense 512² fused", "dense", bfloat16),
               ("conv3x3 16×56²×64", "conv2d", bfloat16),
               *((f"{kind} kernel", kind, ratio) for kind, ratio in (kinds or {}).items())]
    timings = []
    for kernel, kind, bf16 in kernels:
        for (xla, onednn), (float32_ms, ratios) in modes.items():
            for dtype, ratio in ratios.items():
                ratio = bf16 if dtype == "bfloat16" and not xla and onednn == machine.onednn else ratio
                if ratio is None:
                    continue
                ms = float32_ms / ratio
                timings.append(KernelTiming(device=device, kernel=kernel, kind=kind, dtype=dtype,
                                            xla=xla, onednn=onednn, ms_per_call=ms,
                                            ms_p10=ms * 0.95, ms_p90=ms * 1.05, tflops=10.0 / ms,
                                            calls=20, cut_short=False, ratio_to_float32=ratio))
    return store_kernels(machine, timings, seconds=1.0)


def compare_row(policy: str, loop: str = "fit", strategy: str = "none", **fields):
    """A compare variant as `compare.plan_variants` makes it, with `fields` (summary,
    rounds, even its label) set."""
    from mptrain.measure.variant import Variant, compare_label
    from mptrain.precision.candidates import candidate

    return Variant(**{"label": compare_label(policy, loop, strategy), "candidate": candidate(policy),
                      "loop": loop, "strategy": strategy, **fields})


def built_for_head(config, spec):
    """`model.build_model` for a test that has no data: the head the experiment's loss and
    `model.num_classes` ask for (`objective.for_head`), as a run's objective would give it."""
    from mptrain.model import build_model
    from mptrain.objective import for_head

    return build_model(config, spec, for_head(config.train.loss, config.model.num_classes))
