"""Three rules once caught only end to end (a deliberate break of each failed no unit test),
pinned down here on recorded inputs, in seconds: `auto` follows its measured kernels, the
loss is told what the model emits, and every variant of compare and plan starts from the
staged initial weights."""

import re
from pathlib import Path

import pytest

from mptrain.config import validate
from mptrain.hardware.machine import Machine, parse_cpuinfo
from mptrain.measure.study import spec_for
from mptrain.precision.policy import choose_policy
from tests.helpers import compare_row, record_kernels, tiny_raw

AVX512_BF16 = Machine(cpu=parse_cpuinfo("model name : Xeon\nflags : avx512f avx512_bf16"),
                      tensorflow_version="2.21.0")


def test_auto_decides_by_the_kernels_it_measured(tmp_path, monkeypatch):
    """The same CPU, two recorded measurements: auto goes with the measurement, both ways."""
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    slow, fast = record_kernels(AVX512_BF16, bfloat16=0.8), record_kernels(AVX512_BF16, bfloat16=2.0)
    assert choose_policy("auto", AVX512_BF16, kernels=fast).name == "mixed_bfloat16"
    chosen = choose_policy("auto", AVX512_BF16, kernels=slow)
    assert chosen.name == "float32" and "0.80x float32" in chosen.reason


@pytest.mark.parametrize("loss", [[], ["train.loss=binary_crossentropy", "model.num_classes=1",
                                         "data.num_classes=2", "model.output_activation=sigmoid"]])
def test_the_loss_is_told_whether_the_model_emits_logits(loss):
    """A cross-entropy is computed on what the model outputs, and binary accuracy is taken
    at a logit of 0 (a probability of 0.5); every other name is Keras' own to resolve."""
    from mptrain.objective import for_head
    from mptrain.training.compiled import compile_arguments

    config = validate(tiny_raw(*loss), "<test>")
    objective = for_head(config.train.loss, config.model.num_classes)
    for output, from_logits in (("logits", True), ("probabilities", False)):
        arguments = compile_arguments(config, objective, output)
        assert arguments["loss"].get_config()["from_logits"] is from_logits
    if loss:
        accuracy = compile_arguments(config, objective, "logits")["metrics"][0]
        assert accuracy.get_config()["threshold"] == 0.0
    regression = validate(tiny_raw("train.loss={name: huber, kwargs: {delta: 0.3}}",
                                   "train.metrics=[mae, TruePositives]"), "<test>")
    arguments = compile_arguments(regression, for_head(regression.train.loss, 1), "logits")
    huber = arguments["loss"]  # its delta given: an error of 1 beyond it counts 0.3 * (1 - 0.3 / 2)
    assert type(huber).__name__ == "Huber" and float(huber([[0.0]], [[1.0]])) == pytest.approx(0.255)
    assert arguments["metrics"] == ["mae", "TruePositives"]


def test_auc_over_several_labels_is_keras_own_auc():
    """`auc` means what Keras' compile makes of the name, several labels or one: one curve
    over every label's scores pooled (a per-label average read 0.88 where Keras' own read 0.99
    on keras.io's multi-label text classifier, one of whose columns is never positive)."""
    import keras

    from mptrain.objective import for_head

    ours = for_head("binary_crossentropy", 5).metric("auc", "probabilities").get_config()
    keras_own = keras.metrics.get("auc").get_config()
    assert {k: ours[k] for k in ("multi_label", "num_thresholds", "curve")} == \
        {k: keras_own[k] for k in ("multi_label", "num_thresholds", "curve")}


def test_every_variant_starts_from_the_staged_initial_weights(tmp_path):
    """A fresh variant runs its own experiment file from the folder's initial weights; one
    that stopped with a checkpoint resumes from it instead (its weights are in it)."""
    config = validate(tiny_raw(), "<test>")
    fresh = spec_for(tmp_path, compare_row("mixed_bfloat16", label="mixed_bfloat16",
                                           run_dir=str(tmp_path / "run-a")), config, verbose=False)
    assert Path(fresh.initial_weights) == tmp_path / "initial_weights.npz"
    assert Path(fresh.run_dir) == tmp_path / "run-a" and not fresh.resume
    assert Path(fresh.experiment) == tmp_path / "variants" / "mixed_bfloat16.yaml"
    assert Path(fresh.experiment).is_file()

    stopped = tmp_path / "run-b"
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "checkpoints" / "ckpt-1.index").write_text("")
    (stopped / "config.yaml").write_text("name: tiny\n")
    (stopped / "summary.json").write_text('{"status": "running", "name": "tiny", "pid": 1, '
                                          '"host": "elsewhere", "started": "2026-01-01T00:00:00"}')
    resumed = spec_for(tmp_path, compare_row("float32", run_dir=str(stopped)), config, verbose=False)
    assert resumed.resume and resumed.run_dir == str(stopped) and resumed.initial_weights is None


def test_variants_that_do_not_fit_together_pair_with_the_baseline_each(tmp_path):
    from mptrain.measure.study import pairs

    entries = [compare_row("float32", label=name, run_dir=str(tmp_path / name))
               for name in ("float32", "bf16", "f16+xla")]
    grouped = pairs(entries, "float32")
    assert [[e.label for e in group] for group in grouped] == [
        ["float32", "bf16"], ["float32 with f16+xla", "f16+xla"]]
    assert grouped[1][0].run_dir == str(tmp_path / "float32-with-f16-xla")  # its own run folder
    assert [[e.label for e in g] for g in pairs(entries[1:], "float32")] == [["bf16"], ["f16+xla"]]


def test_a_paired_variant_is_judged_against_its_own_pairs_baseline():
    """Rounds pair only within the turns they ran in: with pairs, that is the variant's own."""
    from mptrain.measure.compare import CompareRecord, judge_compare
    from tests.helpers import compare_row, make_summary

    def row(policy, rounds, paired=None):
        return compare_row(policy, summary=make_summary(), rounds=rounds, baseline_rounds=paired)

    record = judge_compare(CompareRecord(
        experiment="x", folder="/tmp/x", baseline="float32-fit", baseline_policy="float32",
        pairs="memory", variants=[row("float32", [100.0] * 6), row("mixed_bfloat16", [50.0] * 6),
                                  row("float16", [50.0] * 6, paired=[200.0] * 6)]))
    rows = record.variants
    assert rows[1].speedup == pytest.approx(2.0) and rows[2].speedup == pytest.approx(4.0)
    assert rows[2].verdict.speed.paired


def test_compare_and_plan_refuse_local_workers_before_anything_starts(tmp_path):
    """Each variant runs as one process in turns; with distribute.workers each would start
    its own workers, so the experiment is refused, naming the key and the way out, before
    TensorFlow, the staging or any folder."""
    from mptrain.errors import ConfigError
    from mptrain.measure.compare import CompareRecord
    from mptrain.measure.plan import PlanRecord
    from mptrain.measure.study import new_study

    config = validate(tiny_raw(f"output.dir={tmp_path / 'runs'}", "distribute.workers=2",
                               "distribute.strategy=multi_worker_mirrored", "train.loop=custom"), "exp.yaml")
    source = re.escape(config.source)
    for kind, record_type in (("compare", CompareRecord), ("plan", PlanRecord)):
        with pytest.raises(ConfigError, match=rf"^{source}: distribute\.workers 2: {kind} .*"
                                              r"--set distribute\.workers=null"):
            new_study(record_type, config, lambda prepared: None)
    assert not (tmp_path / "runs").exists()
