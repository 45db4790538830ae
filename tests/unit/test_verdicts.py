"""Reading numbers side by side: speed-ups, accuracy within noise, compare.json's rows and
its tables, on recorded summaries (nothing trains)."""

import re
from pathlib import Path

import pytest

from mptrain.commands.options import parse_choices
from mptrain.config.schema import POLICIES
from mptrain.errors import ConfigError
from mptrain.measure.compare import Known, Variant, build_record
from mptrain.measure.verdicts import accuracy_noise_pt, accuracy_words, wilson_half_width
from tests.helpers import make_summary


@pytest.mark.parametrize(("policies", "message"), [
    ("", "comma-separated list"),
    ("float32,,bfloat16", "comma-separated list"),
    ("float32,fp8", "unknown 'fp8'; allowed: float32"),
    ("float32,float32", "float32 listed more than once"),
])
def test_bad_policies(policies, message):
    with pytest.raises(ConfigError, match=message):
        parse_choices(policies, POLICIES, "--policies")


def record_of(*rows):
    variants = [Variant(policy, "fit") for policy, _ in rows]
    return build_record("x", Path("/tmp/x"), variants,
                        Known({v.label: s for v, (_, s) in zip(variants, rows, strict=True)}))


def test_ratios_and_verdicts_come_from_the_numbers():
    record = record_of(("float32", make_summary(median=100.0, accuracy=0.90, memory=1000)),
                       ("mixed_bfloat16", make_summary(median=50.0, accuracy=0.8988, memory=600)))
    bf16 = record.variants[1]
    assert bf16.speedup == 2.0 and bf16.memory_ratio == 0.6
    assert bf16.accuracy_delta_pt == pytest.approx(-0.12)
    assert bf16.verdict == "faster, accuracy within noise (±0.6 pt)"  # 10,000 test examples
    slower = record_of(("float32", make_summary(median=40.0)),
                       ("float16", make_summary(median=100.0, accuracy=0.88)))
    assert slower.variants[1].verdict == "slower, accuracy lower"
    assert slower.variants[1].speedup == 0.4 and slower.variants[1].accuracy_delta_pt == pytest.approx(-2)
    same = record_of(("float32", make_summary(median=100.0)),
                     ("mixed_bfloat16", make_summary(median=99.0, spread=0.2)))
    assert same.variants[1].verdict == "same speed within noise, same accuracy"
    # without float32 the first policy listed is the baseline
    no_f32 = record_of(("mixed_bfloat16", make_summary()))
    assert no_f32.baseline_policy == "mixed_bfloat16" and no_f32.variants[0].verdict == "baseline"


def test_only_the_baseline_variant_is_called_baseline_across_strategies():
    variants = [Variant("float32", "fit", "none"), Variant("float32", "fit", "mirrored")]
    record = build_record("x", Path("/tmp/x"), variants,
                          Known({variants[0].label: make_summary(median=100.0),
                                 variants[1].label: make_summary(median=400.0)}))
    single, mirrored = record.variants
    assert single.verdict.startswith("baseline")
    assert mirrored.speedup == 0.25 and mirrored.verdict.startswith("slower")


def test_failed_variant_is_a_row_not_a_crash():
    record = record_of(("float32", make_summary()), ("mixed_float16", "exit code 3"))
    row = record.variants[1]
    assert row.summary is None and row.verdict == "failed (exit code 3)"


def test_tables_fit_80_columns_and_never_cut_a_number():
    from rich.console import Console

    from mptrain.report.tables import compare_tables

    record = record_of(
        ("float32", make_summary(median=1234.5, accuracy=0.9123, memory=123_456_789)),
        ("mixed_bfloat16", make_summary(median=321.9, accuracy=0.9101, memory=61_234_567,
                                        scale=None)),
        ("mixed_float16", make_summary(median=1456.7, accuracy=0.9110, memory=70_000_000,
                                       scale=(32768.0, 12))),
        ("float16", make_summary(median=1500.0, status="diverged")),
    )
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(compare_tables(record))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for number in ("1234.5", "321.9", "3.84x", "0.9101 (-0.22)", "32768/12", "0.85x",
                   "117.7 MiB", "0.50x", "1209.8–1259.2"):
        assert number in text, number
    assert re.search(r"^float16 .*diverged \(NaN/inf", text, re.MULTILINE)




def test_accuracy_is_judged_against_what_the_test_set_can_resolve():
    """On 41 test examples one example is 2.44 points: such a difference is noise, not
    'higher/lower'. On 10,000 the same 2.44 points is real."""
    small = accuracy_noise_pt(0.76, 41)
    assert small > 2.44 and accuracy_words(-2.44, small).startswith("accuracy within noise")
    large = accuracy_noise_pt(0.76, 10_000)
    assert large < 1.0 and accuracy_words(-2.44, large) == "accuracy lower"
    assert accuracy_words(2.44, large) == "accuracy higher"
    assert accuracy_words(-0.001, large) == "same accuracy"  # shown as -0.00
    # the Wilson half-width: 95% interval of 0.5 at n=100 is about ±9.6 points
    assert wilson_half_width(0.5, 100) == pytest.approx(0.096, abs=0.002)
    assert accuracy_noise_pt(1.0, 20) >= 100 / 20  # never less than one example


def test_a_small_test_set_makes_a_compare_verdict_say_noise():
    record = record_of(("float32", make_summary(accuracy=0.7805, test_examples=41)),
                       ("mixed_bfloat16", make_summary(median=50.0, accuracy=0.7561, test_examples=41)))
    row = record.variants[1]
    assert row.accuracy_delta_pt == pytest.approx(-2.44) and row.accuracy_noise_pt > 2.44
    assert row.verdict.startswith("faster, accuracy within noise")


def test_memory_tables_fit_80_columns_with_every_number_whole():
    from rich.console import Console

    from mptrain.measure.memory import MemoryPlan, MemoryReport
    from mptrain.report.views import memory_view

    plan = {"batch_size": 256, "parameters": 85_000, "weights_bytes": 340_000,
            "weight_copies_bytes": 170_000, "gradients_bytes": 340_000, "optimizer_bytes": 680_000,
            "activations_bytes": 277_000, "total_bytes": 1_800_000,
            "measured_peak_bytes": 1_250_000, "largest_batch": 18_650_123,
            "largest_batch_basis": "estimate"}
    report = MemoryReport(experiment="synthetic", batch_size=256, parameters=85_000,
                          training_examples=4096, why="why",
                          plans=[MemoryPlan(policy=p, **plan) for p in
                                 ("float32", "mixed_float16", "mixed_bfloat16")])
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(memory_view(report))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    for cell in ("mixed_float16", "mixed_bfloat16", "18,650,123", "1.7 MiB", "332.0 KiB"):
        assert cell in text, cell


def test_the_largest_batch_is_never_more_hopeful_than_the_measurement():
    """A measured peak above the estimate (XLA's buffers under mixed_float16 on a CPU: 72 MiB
    measured where 26 MiB was estimated) scales every part up by that ratio; a batch far
    beyond the data set is said to be a memory figure only."""
    from mptrain.measure.memory import MemoryPlan, _with_largest_batch

    mib = 2**20
    parts = {"policy": "mixed_float16", "batch_size": 100, "parameters": 1000,
             "weights_bytes": 4 * mib, "weight_copies_bytes": 2 * mib, "gradients_bytes": 4 * mib,
             "optimizer_bytes": 8 * mib, "activations_bytes": 8 * mib, "total_bytes": 26 * mib}
    estimated = _with_largest_batch(MemoryPlan(**parts), available=1000 * mib, examples=60_000)
    measured = _with_largest_batch(MemoryPlan(**parts, measured_peak_bytes=72 * mib),
                                   available=1000 * mib, examples=60_000)
    per_example = 8 * mib / 100
    assert estimated.largest_batch == int((800 * mib - 18 * mib) // per_example)
    assert estimated.largest_batch_basis == "estimate" and estimated.note is None
    assert measured.largest_batch == int((800 * mib * 26 / 72 - 18 * mib) // per_example)
    assert measured.largest_batch_basis == "measured"
    assert measured.largest_batch < estimated.largest_batch / 2
    tiny = _with_largest_batch(MemoryPlan(**parts), available=1000 * mib, examples=500)
    assert "memory figure only" in tiny.note and "500 training examples" in tiny.note


def test_a_speed_up_is_judged_on_the_medians_uncertainty():
    """13% faster with steps that jitter ±20%: resolved by 40 timed steps each, not by 5 (the
    p10-p90 spreads overlap either way: that rule called every small model's gain noise)."""
    from mptrain.measure.verdicts import speed_words, speedup

    base = make_summary(median=2.4, spread=0.2, steps=42)
    quick = make_summary(median=2.1, spread=0.2, steps=42)
    ratio, (low, high) = speedup(base, quick)
    assert ratio == pytest.approx(2.4 / 2.1) and 1.0 < low < ratio < high
    assert speed_words((low, high)) == "faster"
    few = speedup(make_summary(median=2.4, spread=0.2, steps=7),
                  make_summary(median=2.1, spread=0.2, steps=7))
    assert speed_words(few[1]) == "same speed within noise"


def test_rounds_in_turns_see_through_a_drift_the_old_rule_called_a_speed_up():
    """The machine halves its speed between the first and second half of a session. Run one
    after another, float32 meets the slow half and the candidate the fast one: their own
    medians and spreads say 2x faster, with a tight interval. Run in turns, each round's
    ratio sees both at the same speed: the same speed within noise."""
    from mptrain.measure.verdicts import paired_speedup, speed_words, speedup
    from tests.helpers import make_summary

    sequential = speedup(make_summary(median=4.0, spread=0.03), make_summary(median=2.0, spread=0.03))
    assert sequential[0] == 2.0 and speed_words(sequential[1]) == "faster"  # the drift, read as speed
    machine = [2.0, 2.0, 2.1, 2.0, 4.0, 4.1, 4.0, 3.9]  # ms a step of either side, round by round
    base = [m * (1 + 0.02 * (-1) ** i) for i, m in enumerate(machine)]
    other = [m * (1 - 0.02 * (-1) ** i) for i, m in enumerate(machine)]
    ratio, interval = paired_speedup(base, other)
    assert 0.95 < ratio < 1.05 and speed_words(interval) == "same speed within noise"
    faster = paired_speedup(base, [m / 1.5 for m in other])  # a real 1.5x gain under the drift
    assert speed_words(faster[1]) == "faster" and 1.4 < faster[0] < 1.6


def test_the_median_interval_widens_with_fewer_rounds():
    from mptrain.measure.verdicts import median_interval, paired_speedup

    assert median_interval([1.0, 2.0, 3.0]) == (1.0, 3.0)  # too few for 95%: the whole range
    assert median_interval([float(i) for i in range(1, 11)]) == (2.0, 9.0)  # ranks 2 and 9 of 10
    assert median_interval([float(i) for i in range(1, 21)]) == (6.0, 15.0)
    assert paired_speedup([1.0, None], [1.0, 1.0]) is None  # one timed pair is no measurement


def test_a_step_as_slow_as_the_input_pipeline_is_input_bound():
    from mptrain.measure.verdicts import input_bound

    said = input_bound(step_ms=5.0, input_ms=4.6)
    assert said.startswith("input-bound: the input pipeline alone takes 4.6 ms a batch")
    assert "data.cache: memory" in said
    assert input_bound(step_ms=10.0, input_ms=4.6) is None  # the step does more than wait
    assert input_bound(step_ms=None, input_ms=4.6) is None and input_bound(5.0, None) is None


def test_rounds_pair_only_within_one_session_of_turns():
    """A variant resumed after the baseline finished did not run in the same rounds: its
    speed-up falls back to each run's own median and spread, not to rounds from another time."""
    variants = [Variant("float32", "fit"), Variant("mixed_bfloat16", "fit")]
    outcomes = {"float32-fit": make_summary(median=100.0), "mixed_bfloat16-fit": make_summary(median=50.0)}
    rounds = {"float32-fit": [100.0] * 6, "mixed_bfloat16-fit": [100.0] * 6}  # in turns: the same
    together = build_record("x", Path("/tmp/x"), variants,
                            Known(outcomes, rounds=rounds,
                                  sessions={"float32-fit": 1, "mixed_bfloat16-fit": 1}))
    assert together.variants[1].speedup == pytest.approx(1.0)
    apart = build_record("x", Path("/tmp/x"), variants,
                         Known(outcomes, rounds=rounds,
                               sessions={"float32-fit": 1, "mixed_bfloat16-fit": 2}))
    assert apart.variants[1].speedup == pytest.approx(2.0) and apart.variants[1].session == 2
