"""The guide's second lever on recorded curves (nothing trains): an experiment at another batch
(the learning rate by `train.lr_scaling`, the same examples), and the judgement across batch
sizes, time to float32's loss (`measure.to_target`), in plan's choice."""

import math

import pytest

from mptrain.config import validate, variant
from mptrain.config.batch_scaling import at_batch, examples_in
from mptrain.measure.to_target import examples_to, loss_over_examples
from mptrain.measure.trials import choose
from mptrain.measure.variant import Variant
from mptrain.measure.verdicts import Rules, judge_rows
from mptrain.precision.candidates import candidate
from mptrain.training.records import StepRecord
from tests.helpers import make_summary, tiny_raw


def config_with(**train):
    return variant(validate(tiny_raw(), "tiny.yaml"),
                   {f"train.{key}": value for key, value in train.items()})


def test_a_batch_step_limit_covers_the_same_examples_short_last_batches_counted():
    assert examples_in(16, 256, 3687) == 3687 + 256  # an epoch of 15 steps, then one more
    config = config_with(batch_size=256, max_steps=16)
    changes = at_batch(config, 512, run_steps=45, train_examples=3687)
    assert changes["train.max_steps"] == 9  # 8 steps of 512 are one epoch: 3,687 < 3,943
    assert examples_in(9, 512, 3687) >= examples_in(16, 256, 3687)
    assert at_batch(config, 256, 45, 3687) == {"train.batch_size": 256}  # its own batch: nothing


@pytest.mark.parametrize(("rule", "factor"), [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_the_learning_rate_follows_the_declared_rule(rule, factor):
    config = config_with(batch_size=32, lr_scaling=rule,
                         optimizer={"name": "adam", "kwargs": {"learning_rate": 0.001}})
    changed = variant(config, at_batch(config, 128, run_steps=1000, train_examples=32_000))
    optimizer = changed.train.optimizer
    assert changed.train.batch_size == 128
    if rule == "linear":  # Goyal et al.: warmed up from the old rate over 5% of the run
        assert optimizer.schedule.learning_rate == pytest.approx(0.004)
        assert optimizer.schedule.warmup_from == pytest.approx(0.001)
        assert optimizer.schedule.warmup_steps == round(0.05 * 1000 / 4)
        assert "learning_rate" not in optimizer.kwargs
    else:
        assert optimizer.schedule is None
        assert optimizer.kwargs["learning_rate"] == pytest.approx(0.001 * factor)


def test_a_schedule_keeps_its_shape_and_an_unset_rate_is_the_optimizers_default():
    cosine = config_with(batch_size=32, lr_scaling="sqrt", optimizer={
        "name": "sgd", "schedule": {"kind": "cosine", "learning_rate": 0.1, "warmup_steps": 7}})
    schedule = variant(cosine, at_batch(cosine, 128, 100, 3200)).train.optimizer.schedule
    assert schedule.kind == "cosine" and schedule.learning_rate == pytest.approx(0.2)
    assert schedule.warmup_steps == 7
    piecewise = config_with(batch_size=32, lr_scaling="linear", optimizer={
        "name": "sgd", "schedule": {"kind": "piecewise", "boundaries": [10], "values": [0.1, 0.01]}})
    values = variant(piecewise, at_batch(piecewise, 64, 100, 3200)).train.optimizer.schedule.values
    assert values == pytest.approx([0.2, 0.02])
    default = config_with(batch_size=32, lr_scaling="sqrt", optimizer={"name": "sgd"})
    kwargs = variant(default, at_batch(default, 128, 100, 3200)).train.optimizer.kwargs
    assert kwargs["learning_rate"] == pytest.approx(0.02)  # Keras' SGD default 0.01, times 2


def test_the_linear_warm_up_runs_from_the_old_rate_to_the_new_in_keras():
    from mptrain.training.optimizer import learning_rate_schedule

    config = config_with(batch_size=32, lr_scaling="linear",
                         optimizer={"name": "adam", "kwargs": {"learning_rate": 0.001}})
    schedule = variant(config, at_batch(config, 64, 800, 3200)).train.optimizer.schedule
    assert schedule.warmup_steps == 20
    rate = learning_rate_schedule(schedule, 400)
    assert float(rate(0)) == pytest.approx(0.001)
    assert float(rate(10)) == pytest.approx(0.0015)
    assert float(rate(20)) == pytest.approx(0.002) and float(rate(300)) == pytest.approx(0.002)


# --- time to target -----------------------------------------------------------------------


def curve(batch: int, steps: int, scale: float, step_s: float = 0.1) -> list[StepRecord]:
    """Step records whose loss falls with the examples seen: 0.5 + 1.8 exp(-seen / scale)
    (a larger scale needs more examples to get as far)."""
    return [StepRecord(i + 1, 1, 0.5 + 1.8 * math.exp(-(i + 1) * batch / scale), step_s, batch)
            for i in range(steps)]


def cell(label: str, batch: int, step_ms: float, records, policy="mixed_bfloat16"):
    summary = make_summary(median=step_ms, spread=0.01, batch_size=batch, steps=len(records))
    rounds = [step_ms] * 6
    changes = {} if batch == 64 else {"train.batch_size": batch}
    option = candidate(policy)
    return Variant(label=label, candidate=option, batch=changes, run_dir="/tmp/x", summary=summary,
                 rounds=rounds), records


def judged_cells(*cells):
    trials = [t for t, _ in cells]
    steps = {t.label: records for t, records in cells}
    return judge_rows(trials, steps, Rules(3.0, turn_steps=5))


def test_the_examples_to_target_are_read_over_a_trailing_window():
    points = loss_over_examples(curve(64, 24, 400))
    assert points[0] == (64, pytest.approx(0.5 + 1.8 * math.exp(-64 / 400)))
    final = sum(loss for seen, loss in points if seen > 768) / 12
    assert examples_to(points, final, 768) == 1536  # only the whole window's mean gets there
    assert examples_to(points, 0.4, 768) is None


def test_a_larger_batch_that_needs_twice_the_examples_loses_to_its_faster_steps():
    base = cell("float32", 64, 10.0, curve(64, 24, 400), policy="float32")
    # batch 128 at 12 ms a step: 1.67x float32's examples a second, but it needs twice the
    # examples to get as far (run long enough to show it)
    slow_learner = cell("mixed_bfloat16@b128", 128, 12.0, curve(128, 24, 800))
    trials = judged_cells(base, slow_learner)
    target = trials[1].verdict.to_target
    assert trials[1].speedup == pytest.approx(10 / 12 * 2)  # per example
    assert target.reached and target.speedup < 1.0  # twice the examples: slower to the loss
    assert choose(trials)[0] == "float32"


def test_a_larger_batch_that_gets_as_far_per_example_wins_by_its_time_to_target():
    base = cell("float32", 64, 10.0, curve(64, 24, 400), policy="float32")
    same_bf16 = cell("mixed_bfloat16", 64, 8.0, curve(64, 24, 400))
    doubled = cell("mixed_bfloat16@b128", 128, 12.0, curve(128, 12, 400))
    trials = judged_cells(base, same_bf16, doubled)
    assert trials[2].verdict.to_target.speedup == pytest.approx(10 / 12 * 2, rel=0.02)
    assert trials[2].verdict.training is None  # not judged step by step: other batches
    winner, reason = choose(trials)
    assert winner == "mixed_bfloat16@b128"
    assert reason.startswith("1.67x float32's time to its loss at batch 128")


def test_a_larger_batch_that_never_reaches_the_loss_is_refused_with_its_examples():
    base = cell("float32", 64, 10.0, curve(64, 24, 400), policy="float32")
    never = cell("mixed_bfloat16@b128", 128, 6.0, curve(128, 12, 1600))  # 3.3x per example
    trials = judged_cells(base, never)
    verdict = trials[1].verdict
    assert not verdict.to_target.reached
    assert "did not reach float32's loss in its 1,536 examples" in verdict.refused
    assert choose(trials)[0] == "float32"


def test_a_pick_at_another_batch_is_written_with_its_rate_and_auto_follows_it_for_that_batch(tmp_path):
    """plan.yaml carries the pick's batch and the learning rate it resolved to, as plain keys;
    `policy: auto` runs them, for the batch the plan was made from only."""
    import os

    import yaml

    from mptrain.config.loading import load_config
    from mptrain.measure.plan import PlanRecord, write_plan_file
    from mptrain.precision.planned import planned

    raw = tiny_raw("policy=auto", "train.lr_scaling=linear")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump(raw))
    (tmp_path / "experiment.yaml").write_text(yaml.safe_dump(tiny_raw("train.lr_scaling=linear")))
    doubled, _ = cell("mixed_bfloat16@b128", 128, 12.0, [])
    record = PlanRecord(experiment="tiny", folder=str(tmp_path), machine="here", machine_key="key",
                        measured_at="now", steps=16, tolerance_pct=3.0, evaluate=False,
                        budget_minutes=5, experiment_steps=400, train_examples=384,
                        candidates=[candidate("float32"), candidate("mixed_bfloat16")],
                        trials=[doubled], winner="mixed_bfloat16@b128", reason="measured")
    path = tmp_path / "exp.plan.yaml"
    write_plan_file(record, tmp_path, path)
    later = experiment.stat().st_mtime + 10
    os.utime(path, (later, later))
    written = load_config(path)
    assert written.policy == "mixed_bfloat16" and written.train.batch_size == 128
    schedule = written.train.optimizer.schedule  # tiny's adam at 0.01 for batch 64, linear
    assert schedule.learning_rate == pytest.approx(0.02) and schedule.warmup_from == pytest.approx(0.01)
    assert schedule.warmup_steps == 10  # 5% of the run's 400 steps of 64, in steps of 128
    plan = planned(load_config(experiment))
    assert plan.follow("key") is None and plan.settings["train.batch_size"] == 128
    other = load_config(experiment, ["train.batch_size=32"])
    assert "made for train.batch_size 64 (its pick runs at 128), not 32" in planned(other).follow("key")


def test_plans_cells_are_the_guides_double_for_one_16_bit_candidate_unless_it_would_not_fit(monkeypatch):
    from types import SimpleNamespace

    from mptrain.measure import plan

    prepared = SimpleNamespace(config=SimpleNamespace(train=SimpleNamespace(batch_size=64)),
                               data=SimpleNamespace(train=SimpleNamespace(size=1000)))
    monkeypatch.setattr(plan, "too_big_alone", lambda prepared, policy, batch: (
        f"batch {batch} needs about 9.0 GiB by the estimate" if batch > 200 else None))
    tried = [candidate("float32"), candidate("float32+onednn_bf16"), candidate("mixed_bfloat16"),
             candidate("mixed_bfloat16+fused")]
    not_tried: list[str] = []
    cells = plan.batch_cells(prepared, tried, None, not_tried)
    assert [(c.name, c.batch_size) for c in cells] == [  # the first 16-bit policy, at twice the batch
        ("float32", None), ("float32+onednn_bf16", None), ("mixed_bfloat16", None),
        ("mixed_bfloat16+fused", None), ("mixed_bfloat16@b128", 128)]
    cells = plan.batch_cells(prepared, tried[:3:2], [32, 256, 2000], not_tried)
    assert [(c.name, c.batch_size) for c in cells] == [  # float32 at 64: the baseline
        ("float32", None), ("float32@b32", 32), ("mixed_bfloat16@b32", 32)]
    assert not_tried == ["float32@b256: batch 256 needs about 9.0 GiB by the estimate",
                         "mixed_bfloat16@b256: batch 256 needs about 9.0 GiB by the estimate",
                         "float32@b2000: batch 2000 is more than the 1,000 training examples",
                         "mixed_bfloat16@b2000: batch 2000 is more than the 1,000 training examples"]
