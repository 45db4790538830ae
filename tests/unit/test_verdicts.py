"""Reading numbers side by side: speed-ups, accuracy within noise, compare.json's rows and
its tables, on recorded summaries (nothing trains)."""

import json

import pytest

from mptrain.commands.options import parse_choices
from mptrain.config.names import POLICIES
from mptrain.errors import ConfigError
from mptrain.measure.compare import CompareRecord, judge_compare
from mptrain.measure.variant import QualityDelta, Verdict
from mptrain.measure.verdicts import (
    accuracy_noise_pt,
    judge,
    quality_against,
    quality_figure,
    speed,
    wilson_half_width,
)
from tests.helpers import compare_row, make_summary, tiny_raw


@pytest.mark.parametrize(("policies", "message"), [
    ("", "comma-separated list"),
    ("float32,,bfloat16", "comma-separated list"),
    ("float32,fp8", "unknown 'fp8'; allowed: float32"),
    ("float32,float32", "float32 listed more than once"),
])
def test_bad_policies(policies, message):
    with pytest.raises(ConfigError, match=message):
        parse_choices(policies, POLICIES, "--policies")


def record_of(*rows, strategy="none", rounds=None, sessions=None):
    """compare.json's record of (policy, summary or why it failed) rows, judged (the first
    float32 row is the baseline)."""
    built = []
    for policy, s in rows:
        label = compare_row(policy, strategy=strategy).label
        built.append(compare_row(policy, strategy=strategy, run_dir=f"/nonexistent/{label}",
                                 summary=None if isinstance(s, str) else s,
                                 failed=s if isinstance(s, str) else None,
                                 rounds=(rounds or {}).get(label, []),
                                 session=(sessions or {}).get(label, 1)))
    base = next((v for v in built if v.candidate.name == "float32"), built[0])
    return judge_compare(CompareRecord(experiment="x", folder="/tmp/x", baseline=base.label,
                                baseline_policy=base.candidate.name, variants=built))


def test_ratios_and_verdicts_come_from_the_numbers():
    record = record_of(("float32", make_summary(median=100.0, accuracy=0.90, memory=1000)),
                       ("mixed_bfloat16", make_summary(median=50.0, accuracy=0.8988, memory=600)))
    bf16 = record.variants[1]
    assert bf16.speedup == 2.0 and bf16.verdict.memory_ratio == 0.6
    assert record.variants[0].verdict.memory_ratio == 1.0  # the baseline's own
    unseen = make_summary()
    unseen = unseen.model_copy(update={"memory": unseen.memory.model_copy(
        update={"training_peak_bytes": None, "device_peak_bytes": None})})
    no_figure = record_of(("float32", unseen), ("mixed_bfloat16", make_summary(memory=600)))
    assert [r.verdict.memory_ratio for r in no_figure.variants] == [None, None]  # not "1.00x"
    assert bf16.verdict.quality.delta == pytest.approx(-0.12) and bf16.verdict.quality.proportion
    assert bf16.verdict.speed.word == "faster" and not bf16.verdict.speed.paired
    assert bf16.verdict.words() == "faster, accuracy within noise"  # 10,000 test examples
    slower = record_of(("float32", make_summary(median=40.0)),
                       ("float16", make_summary(median=100.0, accuracy=0.88)))
    assert slower.variants[1].verdict.words() == "slower, accuracy lower"
    assert slower.variants[1].speedup == 0.4
    assert slower.variants[1].verdict.quality.delta == pytest.approx(-2)
    noisy = record_of(("float32", make_summary(median=100.0)),
                      ("mixed_bfloat16", make_summary(median=99.0, spread=0.2)))
    low, high = noisy.variants[1].speedup_range  # across 1, and wide: no verdict either way
    assert low < 1 < high and (low < 1 / 1.05 or high > 1.05)
    assert noisy.variants[1].verdict.words() == (
        f"inconclusive ({low:.2f}-{high:.2f}x), same accuracy")
    same = record_of(("float32", make_summary(median=100.0, spread=0.05)),
                     ("mixed_bfloat16", make_summary(median=99.8, spread=0.05)))
    assert same.variants[1].verdict.words() == "same speed, same accuracy"  # within 5% of 1
    # without float32 the first policy listed is the baseline
    no_f32 = record_of(("mixed_bfloat16", make_summary()))
    assert no_f32.baseline_policy == "mixed_bfloat16" and no_f32.variants[0].verdict.words() == "baseline"


def test_a_compare_json_from_before_the_one_variant_type_still_loads_and_rejudges():
    record = record_of(("float32", make_summary(memory=1000)), ("mixed_bfloat16", make_summary(memory=600)))
    old = json.loads(record.model_dump_json())
    for row in old["variants"]:  # as compare.json kept them until 2026-12-03: the memory ratio
        row["memory_ratio"] = row["verdict"].pop("memory_ratio")  # beside the verdict, and
        row["policy"] = row.pop("candidate")["name"]  # the candidate by its name alone
    loaded = CompareRecord.model_validate(old)
    assert loaded.variants[1].candidate == record.variants[1].candidate
    assert loaded.variants[1].verdict.memory_ratio is None  # the old copy dropped...
    assert judge_compare(loaded).variants[1].verdict.memory_ratio == 0.6  # ...and judged again


def test_only_the_baseline_variant_is_called_baseline_across_strategies():
    rows = [compare_row("float32", "fit", s, summary=make_summary(median=m))
            for s, m in (("none", 100.0), ("mirrored", 400.0))]
    record = judge_compare(CompareRecord(experiment="x", folder="/tmp/x", baseline=rows[0].label,
                                  baseline_policy="float32", variants=rows))
    single, mirrored = record.variants
    assert single.verdict.baseline and not mirrored.verdict.baseline
    assert mirrored.speedup == 0.25 and mirrored.verdict.words().startswith("slower")


def test_failed_variant_is_a_row_not_a_crash():
    record = record_of(("float32", make_summary()), ("mixed_float16", "exit code 3"))
    row = record.variants[1]
    assert row.summary is None and row.verdict.words() == "failed (exit code 3)"


def test_accuracy_is_judged_against_what_the_test_set_can_resolve():
    """On 41 test examples one example is 2.44 points: such a difference is noise, not
    'higher/lower'. On 10,000 the same 2.44 points is real."""
    def said(delta, noise):
        return QualityDelta(label="accuracy", delta=delta, noise=noise, proportion=True).word()

    small = accuracy_noise_pt(0.76, 41)
    assert small > 2.44 and said(-2.44, small) == "accuracy within noise"
    large = accuracy_noise_pt(0.76, 10_000)
    assert large < 1.0 and said(-2.44, large) == "accuracy lower"
    assert said(2.44, large) == "accuracy higher"
    assert said(-0.001, large) == "same accuracy"  # shown as -0.00
    # the Wilson half-width: 95% interval of 0.5 at n=100 is about ±9.6 points
    assert wilson_half_width(0.5, 100) == pytest.approx(0.096, abs=0.002)
    assert accuracy_noise_pt(1.0, 20) >= 100 / 20  # never less than one example


def test_a_small_test_set_makes_a_compare_verdict_say_noise():
    record = record_of(("float32", make_summary(accuracy=0.7805, test_examples=41)),
                       ("mixed_bfloat16", make_summary(median=50.0, accuracy=0.7561, test_examples=41)))
    row = record.variants[1]
    assert row.verdict.quality.delta == pytest.approx(-2.44) and row.verdict.quality.noise > 2.44
    assert row.verdict.words() == "faster, accuracy within noise"


def test_each_objective_is_judged_by_its_own_figure():
    """A regression by its MAE (lower is better, a relative change), AUC by AUC (higher is
    better); a compare.json from before objectives (accuracy in points) still reads."""
    def regression(mae):
        return make_summary(quality={"metric": "mae", "label": "MAE", "value": mae,
                                     "higher_is_better": False, "proportion": False})

    record = record_of(("float32", regression(2.00)), ("mixed_bfloat16", regression(2.10)),
                       ("float32+xla", regression(1.90)), ("mixed_float16", regression(2.01)))
    worse, better, same = (row.verdict.quality for row in record.variants[1:])
    assert worse.relative_pct == pytest.approx(5.0) and worse.word() == "MAE worse (+5.0%)"
    assert worse.worse and not better.worse and better.word() == "MAE better (-5.0%)"
    assert same.word() == "same MAE"
    refusing = quality_against(quality_figure(regression(2.10)), quality_figure(regression(2.0)),
                               100, tolerance_pct=3.0)
    assert refusing.worse and not quality_against(quality_figure(regression(2.05)),
                                                  quality_figure(regression(2.0)), 100, 3.0).worse
    old = Verdict.model_validate({"accuracy_delta_pt": -2.44, "accuracy_noise_pt": 3.0})
    assert old.quality.word() == "accuracy within noise"


def measured(label, **fields):
    return compare_row("float32", label=label, **fields)


def pair(base, other, base_rounds=(), rounds=(), sessions=(1, 1)):
    """The speed of `other` against `base` (summaries), with their rounds in turns."""
    return speed(measured("b", summary=other, rounds=list(rounds), session=sessions[1]),
                 measured("a", summary=base, rounds=list(base_rounds), session=sessions[0]))


def test_a_speed_up_is_judged_on_the_medians_uncertainty():
    """13% faster with steps that jitter ±20%: resolved by 40 timed steps each, not by 5 (the
    p10-p90 spreads overlap either way: that rule called every small model's gain noise)."""
    quick = pair(make_summary(median=2.4, spread=0.2, steps=42),
                 make_summary(median=2.1, spread=0.2, steps=42))
    low, high = quick.interval
    assert quick.ratio == pytest.approx(2.4 / 2.1) and 1.0 < low < quick.ratio < high
    assert quick.word == "faster"
    few = pair(make_summary(median=2.4, spread=0.2, steps=7), make_summary(median=2.1, spread=0.2, steps=7))
    assert few.word == "inconclusive"  # across 1 and wider than 5% either side
    none = pair(make_summary(steps=5), make_summary(steps=5))
    assert none.ratio is None and none.unknown == "too few steps timed (3, 5 needed)"


def test_rounds_in_turns_see_through_a_drift_the_old_rule_called_a_speed_up():
    """The machine halves its speed between the first and second half of a session. Run one
    after another, float32 meets the slow half and the candidate the fast one: their own
    medians and spreads say 2x faster, with a tight interval. Run in turns, each round's
    ratio sees both at the same speed: the same speed within noise."""
    sequential = pair(make_summary(median=4.0, spread=0.03), make_summary(median=2.0, spread=0.03))
    assert sequential.ratio == 2.0 and sequential.word == "faster"  # the drift, read as speed
    machine = [2.0, 2.0, 2.1, 2.0, 4.0, 4.1, 4.0, 3.9]  # ms a step of either side, round by round
    base = [m * (1 + 0.02 * (-1) ** i) for i, m in enumerate(machine)]
    other = [m * (1 - 0.02 * (-1) ** i) for i, m in enumerate(machine)]
    turns = pair(make_summary(), make_summary(), base, other)
    assert 0.95 < turns.ratio < 1.05 and turns.word == "same speed" and turns.paired
    faster = pair(make_summary(), make_summary(), base, [m / 1.5 for m in other])
    assert faster.word == "faster" and 1.4 < faster.ratio < 1.6


def test_too_few_rounds_say_so_and_how_many_steps_give_enough():
    """compare, plan and `runs --compare` give the same two runs the same answer: from their
    rounds in turns, or none, and why (the one rule: `verdicts.speed`)."""
    two = speed(measured("b", summary=make_summary(median=50.0, stopped_by="max_steps"), rounds=[50.0, 50.0]),
                measured("a", summary=make_summary(median=100.0), rounds=[100.0, 100.0]), 5)
    assert two.ratio is None and two.unknown == "2 round(s) in turns, 3 needed: --steps 16 gives 3"
    # a run its epochs ended (2 of 6 steps): more steps would change nothing, more epochs do
    ended = make_summary(median=50.0, steps=12, epochs_run=2)
    by_epochs = speed(measured("b", summary=ended, rounds=[50.0, 50.0]),
                      measured("a", summary=make_summary(median=100.0), rounds=[100.0, 100.0]), 5)
    assert by_epochs.unknown == "2 round(s) in turns, 3 needed: --epochs 3 gives 3"
    # a trial plan dropped (or out of budget): no option gives it more rounds, none is said
    dropped = make_summary(median=50.0, steps=12, epochs_run=2, stopped_by="dropped")
    assert speed(measured("b", summary=dropped, rounds=[50.0, 50.0]),
                 measured("a", summary=make_summary(median=100.0), rounds=[100.0, 100.0]),
                 5).unknown == "2 round(s) in turns, 3 needed"
    # nor to one stopped as too slow to win (its experiment already runs the epochs it has)
    slow = make_summary(median=50.0, steps=12, epochs_run=2, stopped_by="max_step_seconds")
    assert speed(measured("b", summary=slow, rounds=[50.0, 50.0]),
                 measured("a", summary=make_summary(median=100.0), rounds=[100.0, 100.0]),
                 5).unknown == "2 round(s) in turns, 3 needed"
    record = record_of(("float32", make_summary(median=100.0)), ("mixed_bfloat16", make_summary(median=50.0)),
                       rounds={"float32-fit": [100.0, 100.0], "mixed_bfloat16-fit": [50.0, 50.0]})
    assert record.variants[1].speedup is None
    assert record.variants[1].verdict.words().startswith("not timed: 2 round(s) in turns, 3 needed")


def test_a_twin_sets_the_noise_floor_of_faster():
    """float32 run twice in the same turns: its twin's interval is what noise alone makes; a
    candidate whose interval clears 1 but not the twin's is the same speed."""
    rounds = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    quick = measured("c", summary=make_summary(), rounds=[95.0, 96.0, 95.5, 95.0, 96.0, 95.2])
    base = measured("a", summary=make_summary(), rounds=rounds)
    assert speed(quick, base).word == "faster"
    assert speed(quick, base, floor=(0.93, 1.08)).word == "same speed"


def test_the_median_interval_widens_with_fewer_rounds():
    from mptrain.measure.verdicts import median_interval

    assert median_interval([1.0, 2.0, 3.0]) == (1.0, 3.0)  # too few for 95%: the whole range
    assert median_interval([float(i) for i in range(1, 11)]) == (2.0, 9.0)  # ranks 2 and 9 of 10
    assert median_interval([float(i) for i in range(1, 21)]) == (6.0, 15.0)
    one = pair(make_summary(), make_summary(), [1.0, None], [1.0, 1.0])
    assert one.ratio is None  # one timed pair is no measurement


def test_a_step_as_slow_as_the_input_pipeline_is_input_bound():
    from mptrain.measure.verdicts import input_bound

    assert input_bound(step_ms=5.0, input_ms=4.6)
    assert not input_bound(step_ms=10.0, input_ms=4.6)  # the step does more than wait
    assert not input_bound(step_ms=None, input_ms=4.6) and not input_bound(5.0, None)


def test_rounds_pair_only_within_one_session_of_turns():
    """A variant resumed after the baseline finished did not run in the same rounds: its
    speed-up falls back to each run's own median and spread, not to rounds from another time."""
    outcomes = (("float32", make_summary(median=100.0)), ("mixed_bfloat16", make_summary(median=50.0)))
    rounds = {"float32-fit": [100.0] * 6, "mixed_bfloat16-fit": [100.0] * 6}  # in turns: the same
    together = record_of(*outcomes, rounds=rounds)
    assert together.variants[1].speedup == pytest.approx(1.0)
    apart = record_of(*outcomes, rounds=rounds, sessions={"mixed_bfloat16-fit": 2})
    assert apart.variants[1].speedup == pytest.approx(2.0) and apart.variants[1].session == 2


def test_every_policy_runs_at_every_batch_size_the_experiments_batch_first():
    from mptrain.config import validate
    from mptrain.measure.compare import plan_variants
    from tests.helpers import tiny_raw

    config = validate(tiny_raw(), "tiny.yaml")
    labels = [v.label for v in plan_variants(config, ["float32", "mixed_bfloat16+fused"],
                                             batch_sizes=[64, 128])]
    assert labels == ["float32-fit@b64", "mixed_bfloat16-fused-fit@b64", "float32-fit@b128",
                      "mixed_bfloat16-fused-fit@b128"]
    assert [v.label for v in plan_variants(config, ["float32"])] == ["float32-fit"]


def test_compare_names_the_rows_that_run_xla_and_adds_float32_with_xla_as_their_control(tmp_path,
                                                                                       monkeypatch):
    """On a CPU whose float16 collapses without XLA, `--policies float32,mixed_float16` runs
    mixed_float16 with XLA: its rows say so, float32+xla runs beside them, and the verdict
    gives the precision's own effect against it: 1.22x over float32 is 0.87x of float32+xla
    (issue 49's AVX2-only figures)."""
    from mptrain.config import validate
    from mptrain.hardware.machine import Machine, parse_cpuinfo
    from mptrain.measure.compare import plan_variants, with_xla_axis
    from tests.helpers import record_kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    config = validate(tiny_raw(), "<test>")
    xeon = Machine(cpu=parse_cpuinfo("model name : Xeon\nflags : avx512f avx512_bf16"))
    kernels = record_kernels(xeon, bfloat16=0.6, float16=0.001)
    rows, said = with_xla_axis(config, plan_variants(config, ["float32", "mixed_float16"],
                                                     ["fit", "custom"]), xeon, kernels)
    assert [r.label for r in rows] == ["float32-fit", "mixed_float16-xla-fit", "float32-custom",
                                       "mixed_float16-xla-custom", "float32-xla-fit",
                                       "float32-xla-custom"]
    assert rows[1].candidate.jit_compile is True and rows[1].settings["train.jit_compile"] is True
    assert "mixed_float16 runs with XLA here" in said[0] and "0.001x" in said[0]
    # where float16 needs no XLA (oneDNN off), nothing is renamed and no control is added
    zen3 = Machine(cpu=parse_cpuinfo("model name : EPYC\nflags : avx2"), onednn=False)
    fine = record_kernels(zen3, bfloat16=0.27, float16=0.96)
    rows, said = with_xla_axis(config, plan_variants(config, ["float32", "mixed_float16"]), zen3, fine)
    assert [r.label for r in rows] == ["float32-fit", "mixed_float16-fit"] and not said
    # the verdict: against float32 and against its control, in the same rounds
    base = make_summary(median=195.0)
    record = judge_compare(CompareRecord(
        experiment="x", folder="/tmp/x", baseline="float32-fit", baseline_policy="float32",
        turn_steps=5, variants=[
            compare_row("float32", summary=base, rounds=[195.0] * 8),
            compare_row("mixed_float16+xla", summary=make_summary(median=160.0), rounds=[160.0] * 8),
            compare_row("float32+xla", summary=make_summary(median=139.0), rounds=[139.0] * 8)]),
        same_start=False)
    fp16 = record.variants[1].verdict
    assert record.variants[1].speedup == pytest.approx(195 / 160)
    assert fp16.control == "float32-xla-fit" and fp16.against_control.ratio == pytest.approx(139 / 160)
    assert fp16.precision_alone() == "precision alone 0.87x float32-xla-fit's (slower)"
    assert record.variants[2].verdict.control is None  # the control itself is XLA's own effect


def test_only_a_run_cut_before_its_planned_end_is_said_stopped_early():
    """A trial's own step limit is its planned end; the plan's budget, its race or a signal
    cut it short, and its verdict says how (every plan trial and every `compare --steps` row
    once read "(stopped early)"). A trial the race dropped is judged on the rounds it ran and
    stays eligible: it is not refused."""
    base = measured("float32", summary=make_summary())

    def verdict(stopped_by, reason):
        row = measured("b", summary=make_summary(stopped_by=stopped_by, stop_reason=reason))
        return judge(row, base)

    assert "(" not in verdict("max_steps", "stopped after 50 steps (step limit 50)").words()
    assert verdict("budget", "cut by the budget after 3 rounds").words().endswith("(cut)")
    dropped = verdict("dropped", "dropped after 3 rounds: at most 0.80x float32 (in each of 3 rounds)")
    # (in its first words: the table's notes give the reason whole)
    assert dropped.words().endswith("(dropped)")
    assert not dropped.refused


def test_a_trial_cut_short_is_no_verdict_on_its_quality():
    """A trial the race dropped after 3 rounds, beside a float32 that ran on: its lower test
    accuracy is less training, not its precision's doing, and its verdict never says
    "accuracy lower" (it read so, and `mptrain runs` "finished"); cut at the same point as
    float32 (the budget cuts every trial after the same round), they compare."""
    base = measured("float32", summary=make_summary(accuracy=0.90, steps=50))
    cut = make_summary(accuracy=0.34, steps=15, stopped_by="dropped", stop_reason="dropped after 3 rounds")
    verdict = judge(measured("b", summary=cut), base)
    assert verdict.quality is None and "accuracy" not in verdict.words()
    both = measured("float32", summary=make_summary(accuracy=0.90, steps=15, stopped_by="budget"))
    budget = make_summary(accuracy=0.34, steps=15, stopped_by="budget")
    assert judge(measured("b", summary=budget), both).quality.word() == "accuracy lower"
