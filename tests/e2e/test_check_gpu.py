"""`mptrain check-gpu` on this machine, as a user runs it (a real process), and the kernel
measurement behind `policy: auto` and `--bench`."""

import json
import os
import subprocess
import sys

import pytest


def test_microbench_tiny_sizes_give_positive_rates():
    import tensorflow as tf

    from mptrain.hardware.kernels import KINDS, measure

    results = measure(tf, ["/CPU:0"], scale=0.03, budget_s=0.02)
    assert {r.dtype for r in results} == {"float32", "float16", "bfloat16"}
    assert len(results) == 18 and {r.kind for r in results} == set(KINDS)
    assert all(r.tflops > 0 and r.calls >= 3 and r.ms_p10 <= r.ms_per_call <= r.ms_p90
               for r in results)
    assert all(r.ratio_to_float32 == 1.0 for r in results if r.dtype == "float32")


def test_a_peer_that_cannot_run_leaves_only_its_library_unmeasured(monkeypatch):
    """The other math library's peer process ends at once (here: an interpreter that exits 1):
    this process's kernels are timed all the same, and the failure is said, with its exit."""
    import tensorflow as tf

    from mptrain.hardware.kernels import measure_machine
    from mptrain.hardware.machine import probe

    machine = probe(tf, check_xla=False)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    timings, failed = measure_machine(tf, machine, ["/CPU:0"], ("float32", "bfloat16"), (False,),
                                      scale=0.03)
    library = "Eigen" if machine.onednn else "oneDNN"
    assert failed.startswith(f"the {library} peer process failed: it ended (exit code 1")
    assert {t.onednn for t in timings} == {machine.onednn} and len(timings) == 2 * 6


@pytest.mark.kernel_path
def test_bench_and_its_warnings_agree_and_onednn_is_what_tensorflow_says(tmp_path, monkeypatch):
    """`check-gpu --bench`'s recommendation and warnings quote the figures its own table
    shows (issue 49: a warning said "orders of magnitude slower" above a float16 row of
    0.957x), and the oneDNN it reports is the one TensorFlow runs (it is off on AVX2-only
    CPUs without TF_ENABLE_ONEDNN_OPTS saying so)."""
    from tensorflow.python.util import _pywrap_util_port

    from mptrain.hardware.kernels import KINDS, times
    from mptrain.precision.check import machine_report

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    report = machine_report(bench=True, bench_scale=0.1)
    assert report.machine.onednn == _pywrap_util_port.IsMklEnabled()
    assert {(r.dtype, r.xla) for r in report.bench} == {
        (d, x) for d in ("float32", "float16", "bfloat16") for x in (False, True)}
    if report.gpu_found:
        pytest.skip("a GPU is here: the CPU's float16 warning is not given")
    # both math libraries, this process's and its peer's, each dtype of each kind of kernel
    plain = [r for r in report.bench if not r.xla]
    assert {r.onednn for r in plain} == {True, False} and len(plain) == 2 * 3 * len(KINDS)
    measured = report.kernels
    assert measured.onednn == report.machine.onednn and measured.library_gain() > 0
    assert measured.describe_library() in report.recommendation.math_library_reason
    worst = measured.slowest("float16", "/CPU:0")
    warning = next(w for w in report.recommendation.warnings if w.startswith("mixed_float16 on this CPU"))
    assert times(worst.ratio_to_float32) in warning and "not measured" not in warning
    assert f"{measured.speedup('bfloat16', '/CPU:0'):.2f}x float32" in report.recommendation.reason


def test_check_gpu_command_json_on_this_machine(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mptrain", "check-gpu", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["recommendation"]["policy"] in ("float32", "mixed_float16", "mixed_bfloat16")
    assert report["machine"]["tensorflow_version"]
    assert "Mixed precision compatibility check" in report["compatibility_check"]
    assert report["gpu_found"] == bool(report["machine"]["gpus"])
    assert report["bench"] is None


def test_check_gpu_text_report_prints_in_full(tmp_path):
    """The report a user reads (not --json): its texts hold brackets Rich must not parse."""
    done = subprocess.run([sys.executable, "-m", "mptrain", "check-gpu"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300, env={**os.environ, "COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "Recommended policy:" in done.stdout
    if "fp16 TC" in done.stdout:  # a GPU table: the one-CPU note (and its brackets) is not said
        assert "Mixed precision compatibility check" in done.stdout
        pytest.skip("a GPU is here: the note whose brackets this checks is for a CPU alone")
    assert "[/cpu:0, /cpu:1]" in done.stdout
    # the guide's check is of GPUs: on a CPU its "does not have a GPU" warning is noise
    assert "Mixed precision compatibility check" not in done.stdout


@pytest.mark.slow
def test_check_gpu_bench_through_the_cli(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mptrain", "check-gpu", "--bench", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # 6 kinds x 3 dtypes, with and without XLA on each device, and on a CPU alone without it in
    # the other math library too (a GPU does the math where there is one)
    gpus = len(report["machine"]["gpus"])
    assert len(report["bench"]) == 6 * 3 * (2 * (1 + gpus) + (0 if gpus else 1))
    assert all(r["tflops"] > 0 for r in report["bench"])
    assert "measured on" in report["recommendation"]["reason"]
