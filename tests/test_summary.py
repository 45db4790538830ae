"""The run summary: step-time statistics, throughput and MFU arithmetic, and its documentation."""

import re
import typing
from pathlib import Path

import pytest

from mptrain.flops import Peak
from mptrain.summary import (
    LossScaleStats,
    MemoryStats,
    RunSummary,
    Status,
    StepRecord,
    StepTimes,
    step_times,
    throughput,
)


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
        epochs_run=1, steps_run=steps, stop_reason=None, step_time=times,
        examples_per_sec=64 / median * 1000, flops_per_example=1000, achieved_tflops=0.1,
        peak_tflops=1.0, peak_unit="AVX-512 FP32", mfu=0.1, speed_warning=None, notes=[],
        first_step_loss=2.0, non_finite_loss_steps=10 if status == "diverged" else 0,
        final_train_loss=None if status == "diverged" else 0.5, final_metrics={},
        test_loss=None if status == "diverged" else 0.5,
        test_accuracy=None if status == "diverged" else accuracy, test_metrics={},
        loss_scale=LossScaleStats(final=scale[0], skipped_steps=scale[1], skip_rate=scale[1] / steps,
                                  min_scale=scale[0], steps_at_floor=0) if scale else None,
        memory=MemoryStats(process_peak_bytes=2**30, device="CPU:0", device_peak_bytes=memory + 10,
                           data_bytes=10, training_peak_bytes=memory),
        wall_time_s=10.0, time_to_first_step_s=2.0, tensorflow_version="2", keras_version="3",
        seed=0, run_dir="/tmp/x",
    )
    fields.update(changes)
    return RunSummary(**fields)


def steps(*seconds_and_sizes):
    return [StepRecord(i + 1, 1, 1.0, s, n) for i, (s, n) in enumerate(seconds_and_sizes)]


def test_warmup_and_short_batches_are_left_out_of_step_times():
    # 2 slow warm-up steps, 6 full steps of 10 ms, a short batch that recompiled (1.5 s)
    records = steps((3.0, 64), (2.0, 64), *[(0.010, 64)] * 6, (1.5, 20))
    times = step_times(records, warmup_steps=2)
    assert times.median_ms == pytest.approx(10.0) and times.mean_ms == pytest.approx(10.0)
    assert times.p90_ms == pytest.approx(10.0)
    assert (times.timed_steps, times.warmup_steps_excluded, times.short_batches_excluded) == (6, 2, 1)
    assert times.enough


def test_too_few_timed_steps_are_flagged_and_a_cut_run_still_has_a_time():
    assert not step_times(steps(*[(0.01, 64)] * 5), warmup_steps=2).enough  # 3 timed
    cut = step_times(steps((5.0, 64)), warmup_steps=2)
    assert cut.median_ms == pytest.approx(5000.0) and cut.timed_steps == 1 and not cut.enough
    assert step_times([], 2) is None


def test_throughput_and_mfu_arithmetic():
    times = step_times(steps(*[(0.5, 100)] * 7), warmup_steps=2)
    speed = throughput(times, batch_size=100, flops_per_example=10**9,
                       peak=Peak(4e11, "AVX-512 FP32"))
    assert speed.examples_per_sec == pytest.approx(200.0)
    assert speed.achieved_tflops == pytest.approx(0.2) and speed.mfu == pytest.approx(0.5)
    assert throughput(None, 100, 10, None).examples_per_sec is None


def test_readme_documents_every_summary_key():
    """The README's summary.json key list and the RunSummary model stay in step."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("`summary.json` keys:")[1].split("\n\n")[0]
    values = {"auto", "null", *typing.get_args(Status)}  # backticked values, not keys
    documented = set(re.findall(r"`([a-z0-9_]+)`", section)) - values
    nested = {"median_ms", "p10_ms", "p90_ms", "mean_ms", "timed_steps", "warmup_steps_excluded",
              "short_batches_excluded", "enough", "final", "skipped_steps", "skip_rate", "min_scale",
              "steps_at_floor", "process_peak_bytes",
              "device", "device_peak_bytes", "data_bytes", "training_peak_bytes"}
    fields = set(RunSummary.model_fields) | set(StepTimes.model_fields) | \
        set(LossScaleStats.model_fields) | set(MemoryStats.model_fields)
    assert fields - documented == set(), "undocumented keys"
    assert documented - fields - {"summary.json"} == set(), "documented keys that do not exist"
    assert nested <= fields
