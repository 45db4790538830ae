"""The run summary: step-time statistics, throughput and MFU arithmetic, and its documentation."""

import re
import typing
from pathlib import Path

import pytest

from mptrain.config.names import MATH_LIBRARIES
from mptrain.model.flops import Peak
from mptrain.model.size import MemoryStats
from mptrain.runs.summary import (
    LossScaleStats,
    QualityFigure,
    RunSummary,
    StepTimes,
    learned_nothing,
    output_losses_note,
    quality_of,
    step_times,
    throughput,
)
from mptrain.training.records import Status, StopKind
from tests.helpers import step_records


def test_warmup_and_short_batches_are_left_out_of_step_times():
    # 2 slow warm-up steps, 6 full steps of 10 ms, a short batch that recompiled (1.5 s)
    records = step_records((3.0, 64), (2.0, 64), *[(0.010, 64)] * 6, (1.5, 20))
    times = step_times(records, warmup_steps=2)
    assert times.median_ms == pytest.approx(10.0) and times.mean_ms == pytest.approx(10.0)
    assert times.p90_ms == pytest.approx(10.0)
    assert (times.timed_steps, times.warmup_steps_excluded, times.short_batches_excluded) == (6, 2, 1)
    assert times.enough


def test_too_few_timed_steps_are_flagged_and_a_cut_run_still_has_a_time():
    assert not step_times(step_records(*[(0.01, 64)] * 5), warmup_steps=2).enough  # 3 timed
    cut = step_times(step_records((5.0, 64)), warmup_steps=2)
    assert cut.median_ms == pytest.approx(5000.0) and cut.timed_steps == 1 and not cut.enough
    assert step_times([], 2) is None


def test_throughput_and_mfu_arithmetic():
    times = step_times(step_records(*[(0.5, 100)] * 7), warmup_steps=2)
    speed = throughput(times, batch_size=100, flops_per_example=10**9,
                       peak=Peak(4e11, "AVX-512 FP32"))
    assert speed["examples_per_sec"] == pytest.approx(200.0)
    assert speed["achieved_tflops"] == pytest.approx(0.2) and speed["mfu"] == pytest.approx(0.5)
    assert throughput(None, 100, 10, None)["examples_per_sec"] is None


def test_mfu_reads_against_this_machines_measured_peak_or_says_its_is_nominal(tmp_path, monkeypatch):
    """The nominal peak assumes the base clock (a oneDNN step read 113% of it on an AVX2-only
    EPYC): where this machine's kernels were measured, the peak is the fastest matrix product
    they found in the run's dtype or float32; where not, the summary says it is nominal."""
    from rich.console import Console

    from mptrain.hardware.machine import Machine, parse_cpuinfo
    from mptrain.model.flops import machine_peak
    from mptrain.report.tables import summary_table
    from tests.helpers import make_summary, record_kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    cpu = parse_cpuinfo("model name : Xeon\ncpu MHz : 2000\nflags : avx512f avx512_bf16 amx_bf16")
    kernels = record_kernels(Machine(cpu=cpu), bfloat16=3.0, xla_gain=1.5)  # 1 TFLOP/s in float32
    bf16, fp32 = machine_peak(cpu, "bfloat16", kernels), machine_peak(cpu, "float32", kernels)
    assert bf16.measured and bf16.flops_per_second == pytest.approx(4.5e12)  # XLA's, the fastest
    assert bf16.unit == "matmul 1024² in bfloat16+xla" and fp32.flops_per_second == pytest.approx(1.5e12)
    nominal = machine_peak(cpu, "float32", None)
    assert not nominal.measured
    assert nominal.flops_per_second == pytest.approx(2000e6 * 64 * cpu.physical_cores)

    def shown(**fields):
        console = Console(width=300, record=True)
        console.print(summary_table(make_summary(**fields)))
        return console.export_text()

    assert "10% of this machine's peak as measured (1.00 TFLOP/s: matmul 1024² in float32+onednn" in \
        shown(peak_measured=True, peak_unit="matmul 1024² in float32+onednn")
    assert "10% of this CPU's nominal AVX-512 FP32 peak (1.00 TFLOP/s at the base clock, not measured" in \
        shown()


def test_readme_documents_every_summary_key():
    """The summary.json key list (docs/outputs.md) and the RunSummary model stay in step."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "outputs.md").read_text()
    section = readme.split("`summary.json` keys:")[1].split("\n\n")[0]
    values = {"auto", "null", *typing.get_args(Status), *typing.get_args(StopKind),  # not keys
              *MATH_LIBRARIES}
    documented = set(re.findall(r"`([a-z0-9_]+)`", section)) - values
    nested = {"median_ms", "p10_ms", "p90_ms", "mean_ms", "timed_steps", "warmup_steps_excluded",
              "short_batches_excluded", "enough", "final", "skipped_steps", "skip_rate", "min_scale",
              "steps_at_floor", "process_peak_bytes",
              "device", "device_peak_bytes", "data_bytes", "training_peak_bytes"}
    fields = set(RunSummary.model_fields) | set(StepTimes.model_fields) | \
        set(LossScaleStats.model_fields) | set(MemoryStats.model_fields) | \
        set(QualityFigure.model_fields)
    assert fields - documented == set(), "undocumented keys"
    assert documented - fields - {"summary.json"} == set(), "documented keys that do not exist"
    assert nested <= fields


def test_a_regression_no_better_than_its_mean_is_told_so():
    """Beside the MAE of always predicting the training mean (0.9 of it or more: said; less:
    not); not for other figures, several targets, or labels without the figure."""
    from types import SimpleNamespace

    def mae(value, metric="mae"):
        return QualityFigure(metric=metric, label="MAE", value=value, higher_is_better=False,
                             proportion=False)

    stats = SimpleNamespace(mean_mae=(900.0,), mean=(470_000.0,))
    said = learned_nothing(mae(880.0), stats)
    assert len(said) == 1 and said[0].startswith("test MAE 880 is no better than always "
                                                 "predicting the training targets' mean (900)")
    # the cause the run's own settings point to, first: its targets unscaled, its features raw
    unscaled = SimpleNamespace(labels=SimpleNamespace(scale=None))
    said = learned_nothing(mae(880.0), stats, unscaled, raw_features=(("size", 4000.0),))[0]
    assert "Likely: its targets were trained as stored (train.target_scaling: none), about " \
           "470,000 each" in said and "data.normalize" in said
    scaled = SimpleNamespace(labels=SimpleNamespace(scale=object()))
    said = learned_nothing(mae(880.0), stats, scaled)[0]
    assert "target_scaling" not in said and "data.normalize" not in said and "train.epochs" in said
    assert learned_nothing(mae(700.0), stats) == []
    assert learned_nothing(mae(0.95, "accuracy"), stats) == []
    assert learned_nothing(mae(880.0), SimpleNamespace(mean_mae=(900.0, 5.0))) == []
    assert learned_nothing(mae(None), stats) == [] and learned_nothing(None, stats) == []


def test_a_run_is_judged_by_a_figure_it_has():
    """Where train.metrics leaves the objective's own figure out (keras.io's multi-label
    example names categorical_accuracy; the objective's is AUC), the first figure named, else
    the loss: never "judged by AUC: n/a"."""
    from types import SimpleNamespace

    from mptrain.objective import Quality

    tags = SimpleNamespace(quality=Quality("auc", True, "AUC"), labels=SimpleNamespace(scale=None))
    assert quality_of(tags, {"loss": 0.3, "auc": 0.9}).value == 0.9
    named = quality_of(tags, {"loss": 0.3, "categorical_accuracy": 0.7})
    assert (named.metric, named.value, named.higher_is_better, named.proportion) == (
        "categorical_accuracy", 0.7, True, True)
    alone = quality_of(tags, {"loss": 0.3})
    assert (alone.metric, alone.value, alone.higher_is_better) == ("loss", 0.3, False)


def test_output_losses_that_cannot_add_up_to_the_test_loss_say_why():
    """Keras counts each test batch once in an output's loss and by its examples in the
    loss: said only where a short last batch sets them apart, and only with output losses."""
    figures = {"loss": 1.3, "value_loss": 0.23, "kind_loss": 0.61, "kind_accuracy": 0.7}
    [said] = output_losses_note(figures, 96, 64)
    assert "(value_loss, kind_loss)" in said and "a last batch of 32 beside batches of 64" in said
    assert output_losses_note(figures, 128, 64) == []
    assert output_losses_note({"loss": 1.3, "accuracy": 0.7}, 96, 64) == []
