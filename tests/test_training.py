"""Both training loops, for real, on tiny synthetic data."""

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from mptrain.runner import run_experiment  # noqa: E402


def epoch_losses(result):
    return [e.metrics["loss"] for e in result.epochs]


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_loops_learn(tiny_config, loop, policy):
    result = run_experiment(tiny_config(f"train.loop={loop}", f"policy={policy}"))
    losses = epoch_losses(result)
    assert losses[-1] < 0.7 * losses[0], losses
    s = result.summary
    assert s["test_accuracy"] > 0.5  # 4 classes: chance is 0.25
    assert s["compute_dtype"] == ("float32" if policy == "float32" else "bfloat16")
    assert s["output_dtype"] == "float32" and s["loss_scale"] is None
    assert set(result.epochs[-1].metrics) == {"loss", "accuracy", "val_loss", "val_accuracy"}


def test_fit_and_custom_start_identically_and_match(tiny_config):
    fit = run_experiment(tiny_config("train.loop=fit"))
    custom = run_experiment(tiny_config("train.loop=custom"))
    # same seed → same initial weights and data order → same first-step loss
    assert fit.steps[0].loss == pytest.approx(custom.steps[0].loss, rel=1e-5)
    # the per-step loss fit reports is the step's own loss, not Keras' running mean
    np.testing.assert_allclose([r.loss for r in fit.steps[:5]],
                               [r.loss for r in custom.steps[:5]], rtol=1e-3)
    assert fit.summary["test_loss"] == pytest.approx(custom.summary["test_loss"], rel=1e-2)
    # live metrics: both loops report the epoch's running accuracy at every step
    for a, b in zip(fit.steps[:5], custom.steps[:5], strict=True):
        assert set(a.metrics) == set(b.metrics) == {"accuracy"}
        assert a.metrics["accuracy"] == pytest.approx(b.metrics["accuracy"], abs=1e-6)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_mixed_float16_uses_dynamic_loss_scaling(tiny_config, loop):
    result = run_experiment(tiny_config(
        f"train.loop={loop}", "policy=mixed_float16",
        "train.loss_scale.initial_scale=1024", "train.loss_scale.dynamic_growth_steps=4",
    ))
    scales = [r.loss_scale for r in result.steps]
    assert all(s is not None for s in scales)
    # growth every 4 finite steps: the scale must have doubled at least once
    assert max(scales) >= 2048
    s = result.summary
    assert s["loss_scale"]["final"] == scales[-1]
    assert s["loss_scale"]["skipped_steps"] >= 0
    assert epoch_losses(result)[-1] < epoch_losses(result)[0]
    assert s["compute_dtype"] == "float16" and s["output_dtype"] == "float32"


def test_fit_under_mixed_float16_compiles_a_loss_scale_optimizer(tiny_config):
    import keras

    from mptrain.model import build_loss, build_metrics, build_model, build_optimizer
    from mptrain.policy import apply_policy
    from mptrain.training.fit_loop import FitLoop

    config = tiny_config("policy=mixed_float16")
    apply_policy("mixed_float16")
    model = build_model(config.model, (16,))
    loop = FitLoop(model, build_optimizer(config.train.optimizer, True, config),
                   build_loss(config), build_metrics(config), jit_compile=False, loss_scaling=True)
    assert isinstance(loop.optimizer, keras.optimizers.LossScaleOptimizer)
    assert float(loop.optimizer.initial_scale) == 2.0**15


@pytest.mark.parametrize("xla_update", [False, True])
def test_non_finite_gradient_is_skipped_and_halves_the_scale(tiny_config, xla_update):
    import keras

    from mptrain.model import build_loss, build_model, build_optimizer
    from mptrain.policy import apply_policy
    from mptrain.training.custom_loop import make_train_step
    from mptrain.training.optimizer_update import compile_optimizer_update

    config = tiny_config("policy=mixed_float16", "train.loss_scale.initial_scale=256")
    apply_policy("mixed_float16")
    model = build_model(config.model, (16,))
    optimizer = build_optimizer(config.train.optimizer, True, config)
    if xla_update:
        compile_optimizer_update(optimizer, model.trainable_variables)
    else:
        optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer, build_loss(config), [], keras.metrics.Mean(),
                           loss_scaling=True, jit_compile=False)
    x = np.ones((8, 16), np.float32)
    y = np.zeros(8, np.int32)
    before = [w.copy() for w in model.get_weights()]

    x_bad = x.copy()
    x_bad[0, 0] = np.inf
    loss, scale, applied = step(x_bad, y).numpy()
    assert scale == 128.0 and applied == 0  # skipped, scale halved
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)

    loss, scale, applied = step(x, y).numpy()
    assert np.isfinite(loss) and scale == 128.0 and applied == 1  # a good step is applied
    assert any(not np.array_equal(o, n) for o, n in zip(before, model.get_weights(), strict=True))


def test_run_folder_contents(tiny_config, tmp_path):
    result = run_experiment(tiny_config("output.save_model=true", "train.epochs=2"))
    folder = result.run_dir
    assert folder.parent == tmp_path / "runs" and folder.name.startswith("tiny-")
    assert {p.name for p in folder.iterdir()} == {
        "config.yaml", "metrics.jsonl", "steps.jsonl", "summary.json", "model.keras"}
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    steps = (folder / "steps.jsonl").read_text().splitlines()
    assert len(steps) == result.summary["steps_run"] == 2 * 6  # 384 train examples / 64
    summary = json.loads((folder / "summary.json").read_text())
    for key in ("policy", "compute_dtype", "variable_dtype", "output_dtype", "loop",
                "step_time_ms", "examples_per_sec", "test_loss", "test_accuracy", "loss_scale",
                "peak_memory_bytes", "wall_time_s"):
        assert key in summary
    assert set(summary["step_time_ms"]) == {"median", "p10", "p90", "mean"}
    assert summary["timed_steps"] == 12 - 1  # warmup_steps: 1
    assert summary["peak_memory_bytes"] > 50 * 2**20
    import keras

    reloaded = keras.saving.load_model(folder / "model.keras")
    predictions = reloaded.predict(np.zeros((3, 16), np.float32), verbose=0)
    assert predictions.shape == (3, 4) and predictions.dtype == np.float32


def test_max_steps_bounds_a_run(tiny_config):
    result = run_experiment(tiny_config("train.max_steps=4", "train.loop=custom"))
    assert result.summary["steps_run"] == 4
    assert "step limit 4" in result.summary["bounded"]
    assert result.summary["test_loss"] is not None  # still evaluated


def test_failed_run_leaves_no_folder(tiny_config, tmp_path):
    from mptrain.errors import ConfigError

    with pytest.raises(ConfigError, match="rejects"):
        run_experiment(tiny_config("train.optimizer.kwargs={bogus: 1}"))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_auto_policy_records_request_and_resolution(tiny_config):
    from mptrain.hardware import probe, recommend

    result = run_experiment(tiny_config("policy=auto", "train.epochs=1"))
    expected = recommend(probe(tf, check_xla=False)).policy
    assert result.summary["policy_requested"] == "auto"
    assert result.summary["policy"] == expected
    header = (result.run_dir / "config.yaml").read_text()
    assert f"policy: auto resolved to {expected}" in header and "\npolicy: auto\n" in header


def test_json_outputs_are_strict_even_when_a_run_diverges():
    from mptrain.run_folder import to_json

    text = to_json({"loss": float("nan"), "steps": [1.0, float("inf")], "ok": 2.5})
    assert json.loads(text) == {"loss": None, "steps": [1.0, None], "ok": 2.5}


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_xla_optimizer_update_gives_the_same_training(tiny_config, loop):
    plain = run_experiment(tiny_config(f"train.loop={loop}", "train.xla_optimizer_update=false"))
    fused = run_experiment(tiny_config(f"train.loop={loop}", "train.xla_optimizer_update=true"))
    assert fused.summary["xla_optimizer_update"] and not plain.summary["xla_optimizer_update"]
    np.testing.assert_allclose([r.loss for r in fused.steps], [r.loss for r in plain.steps],
                               rtol=2e-3)


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize("head", ["sigmoid", "linear"])
def test_binary_classification_head(tiny_config, loop, head):
    result = run_experiment(tiny_config(
        f"train.loop={loop}", "policy=mixed_bfloat16", "data.synthetic.num_classes=2",
        "model.num_classes=1", f"model.output_activation={head}", "train.loss=binary_crossentropy",
    ))
    losses = epoch_losses(result)
    assert losses[-1] < losses[0]
    assert result.summary["test_accuracy"] > 0.8  # two well-separated blobs
    assert result.summary["output_dtype"] == "float32"


def test_top5_accuracy_metric_in_both_loops(tiny_config):
    fit = run_experiment(tiny_config("train.metrics=[accuracy, top5_accuracy]",
                                     "data.synthetic.num_classes=8", "model.num_classes=8"))
    custom = run_experiment(tiny_config("train.metrics=[accuracy, top5_accuracy]", "train.loop=custom",
                                        "data.synthetic.num_classes=8", "model.num_classes=8"))
    for result in (fit, custom):
        metrics = result.summary["test_metrics"]
        assert set(metrics) == {"loss", "accuracy", "top5_accuracy"}
        assert metrics["top5_accuracy"] >= metrics["accuracy"]
