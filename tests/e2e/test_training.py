"""Both training loops, for real, on tiny synthetic data."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from mptrain.runs.runner import Start, run_experiment


def epoch_losses(result):
    return [e.metrics["loss"] for e in result.epochs]


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_loops_learn(tiny_config, loop, policy):
    result = run_experiment(tiny_config(f"train.loop={loop}", f"policy={policy}"))
    losses = epoch_losses(result)
    assert losses[-1] < 0.7 * losses[0], losses
    s = result.summary
    assert s.status == "finished" and s.test_accuracy > 0.5  # 4 classes: chance is 0.25
    assert s.compute_dtype == ("float32" if policy == "float32" else "bfloat16")
    assert s.output_dtype == "float32" and s.loss_scale is None
    # both loops list metrics in the same order: loss first, validation last
    assert list(result.epochs[-1].metrics) == ["loss", "accuracy", "val_loss", "val_accuracy"]


def test_fit_and_custom_see_the_same_batches_in_every_epoch(tiny_config):
    """Same seed → same initial weights and the same data order in *every* epoch, so the two
    loops' per-step losses agree all the way (including the short last batch of each epoch,
    whose loss fit reports by undoing Keras' running mean)."""
    fit = run_experiment(tiny_config("train.loop=fit", "data.train_size=500"))
    custom = run_experiment(tiny_config("train.loop=custom", "data.train_size=500"))
    assert [r.examples for r in fit.steps[:6]] == [64] * 5 + [55]  # 375 examples: short batch
    np.testing.assert_allclose([r.loss for r in fit.steps], [r.loss for r in custom.steps],
                               rtol=2e-3)
    assert len(fit.steps) == 3 * 6
    assert fit.summary.test_loss == pytest.approx(custom.summary.test_loss, rel=1e-3)
    for a, b in zip(fit.steps, custom.steps, strict=True):
        assert set(a.metrics) == set(b.metrics) == {"accuracy"}
        assert a.metrics["accuracy"] == pytest.approx(b.metrics["accuracy"], abs=1e-6)


def test_class_weights_that_leave_out_the_highest_classes_weigh_them_one_in_both_loops(tiny_config):
    """Keras' fit looks each label up in a table as long as the highest class named: {0: 2.0}
    over 4 classes gathered past its end (an error on a CPU) where the custom loop weighed
    classes 1-3 at 1.0; both loops are given every class's weight, and weigh alike."""
    fit = run_experiment(tiny_config("train.loop=fit", "train.class_weight={0: 2.0}"))
    custom = run_experiment(tiny_config("train.loop=custom", "train.class_weight={0: 2.0}"))
    plain = run_experiment(tiny_config("train.loop=fit"))
    np.testing.assert_allclose([r.loss for r in fit.steps], [r.loss for r in custom.steps],
                               rtol=2e-3)
    assert fit.steps[0].loss > plain.steps[0].loss * 1.05  # class 0 weighs twice


def test_epoch_order_is_a_function_of_seed_and_epoch():
    from tests.helpers import epoch_order

    first, second = epoch_order(100, seed=3, epoch=0), epoch_order(100, seed=3, epoch=1)
    assert sorted(first) == list(range(100)) and not np.array_equal(first, second)
    np.testing.assert_array_equal(first, epoch_order(100, seed=3, epoch=0))
    assert not np.array_equal(first, epoch_order(100, seed=4, epoch=0))


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_mixed_float16_starts_with_the_configured_scale_and_grows_it(tiny_config, loop):
    """Fit must train with the LossScaleOptimizer built from the experiment, not Keras'
    default one (initial scale 32768)."""
    result = run_experiment(tiny_config(
        f"train.loop={loop}", "policy=mixed_float16",
        "train.loss_scale.initial_scale=1024", "train.loss_scale.dynamic_growth_steps=4",
    ))
    scales = [r.loss_scale for r in result.steps]
    assert scales[:4] == [1024.0] * 3 + [2048.0]  # doubles after 4 finite steps
    s = result.summary
    assert s.loss_scale.final == scales[-1] and s.loss_scale.skipped_steps == 0
    assert epoch_losses(result)[-1] < epoch_losses(result)[0]
    assert s.compute_dtype == "float16" and s.output_dtype == "float32"


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_skipped_steps_are_counted_and_halve_the_scale(tiny_config, tmp_path, loop):
    """One training example overflows float16 (1e5 > 65504): the batch holding it has an
    inf activation, so each epoch exactly one step is skipped and the scale halves."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    x[17, 3] = 1e5
    path = tmp_path / "overflow.npz"
    np.savez(path, x_train=x, y_train=rng.integers(0, 4, 256), x_test=x[:32] * 0,
             y_test=np.zeros(32, np.int64))
    result = run_experiment(tiny_config(
        f"train.loop={loop}", "policy=mixed_float16", "data.dataset=npz", f"data.path={path}",
        "data.validation_split=0", "train.loss_scale.initial_scale=1024",
        "train.loss_scale.dynamic_growth_steps=1000", "train.epochs=3"))
    assert result.summary.loss_scale.skipped_steps == 3
    assert result.summary.loss_scale.final == 1024 / 2**3
    # the halvings happen exactly at the steps whose batch holds example 17
    from tests.helpers import epoch_order

    expected = [epoch * 4 + int(np.where(epoch_order(256, seed=7, epoch=epoch) == 17)[0][0]) // 64 + 1
                for epoch in range(3)]
    before = [1024.0] + [r.loss_scale for r in result.steps[:-1]]
    assert [r.step for r, b in zip(result.steps, before, strict=True) if r.loss_scale < b] == expected
    assert [e.skipped_steps for e in result.epochs] == [1, 2, 3]


def test_custom_loop_differentiates_the_scaled_loss(tiny_config):
    """One SGD step under mixed_float16 moves the weights as float32 does. Were the gradients
    taken of the unscaled loss, `apply` would still divide them by the scale (2**15) and the
    step would be ~32768x too small."""
    import keras

    from mptrain.precision.policy import apply_policy
    from mptrain.training.custom_loop import build_compiled, make_train_step
    from mptrain.training.loss_scale import wrap_optimizer
    from mptrain.training.optimizer import build_optimizer

    x = np.random.default_rng(0).normal(size=(32, 16)).astype(np.float32)
    y = np.arange(32) % 4
    deltas = {}
    for policy in ("float32", "mixed_float16"):
        config = tiny_config(f"policy={policy}", "train.optimizer.name=sgd",
                             "train.optimizer.kwargs={learning_rate: 0.5}")
        keras.utils.set_random_seed(0)
        apply_policy(policy)
        model = model_of(config)
        optimizer = wrap_optimizer(build_optimizer(config.train.optimizer, 100),
                                   policy == "mixed_float16", 2.0**15, 2000)
        optimizer.build(model.trainable_variables)
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy())
        build_compiled(model, x, y)
        before = [w.copy() for w in model.get_weights()]
        step = make_train_step(model, optimizer, None, False)
        step(x, y)
        after = model.get_weights()
        deltas[policy] = np.concatenate([(a - b).ravel() for a, b in zip(after, before, strict=True)])
    assert np.abs(deltas["float32"]).max() > 1e-3
    np.testing.assert_allclose(deltas["mixed_float16"], deltas["float32"], atol=2e-3, rtol=0.05)


def model_of(config):
    from mptrain.data.dataset import InputSpec
    from tests.helpers import built_for_head

    return built_for_head(config, InputSpec((16,), "vector")).model


@pytest.mark.parametrize("xla_update", [False, True])
def test_non_finite_gradient_is_skipped_and_halves_the_scale(tiny_config, xla_update):
    import keras

    from mptrain.precision.policy import apply_policy
    from mptrain.training.custom_loop import build_compiled, make_train_step
    from mptrain.training.loss_scale import wrap_optimizer
    from mptrain.training.optimizer import build_optimizer, build_optimizer_state

    config = tiny_config("policy=mixed_float16")
    apply_policy("mixed_float16")
    model = model_of(config)
    optimizer = wrap_optimizer(build_optimizer(config.train.optimizer, 100), True, 256, 2000)
    build_optimizer_state(optimizer, model.trainable_variables, xla_update)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy())
    x = np.ones((8, 16), np.float32)
    y = np.zeros(8, np.int32)
    build_compiled(model, x, y)
    step = make_train_step(model, optimizer, None, False)
    before = [w.copy() for w in model.get_weights()]

    x_bad = x.copy()
    x_bad[0, 0] = np.inf
    loss, scale, *_ = step(x_bad, y).numpy()
    assert scale == 128.0 and not np.isfinite(loss)  # skipped, scale halved
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)

    loss, scale, *_ = step(x, y).numpy()
    assert np.isfinite(loss) and scale == 128.0  # a good step is applied
    assert any(not np.array_equal(o, n) for o, n in zip(before, model.get_weights(), strict=True))


def test_initial_weights_file_is_what_trains(tiny_config, tmp_path):
    """compare gives every variant one weights file; the run must start from it. All-zero
    weights make every class equally likely: the first loss is exactly ln(4)."""
    from mptrain.precision.policy import apply_policy

    config = tiny_config("train.max_steps=1")
    apply_policy("float32")
    zeros = [np.zeros_like(w) for w in model_of(config).get_weights()]
    path = tmp_path / "zeros.npz"
    np.savez(path, *zeros)
    started = run_experiment(config, Start(initial_weights=path))
    assert started.summary.first_step_loss == pytest.approx(math.log(4), abs=1e-5)
    seeded = run_experiment(config)
    assert abs(seeded.summary.first_step_loss - math.log(4)) > 1e-2


def test_run_folder_contents(tiny_config, tmp_path):
    result = run_experiment(tiny_config("output.save_model=true", "train.epochs=2"))
    folder = result.run_dir
    assert folder.parent == tmp_path / "runs" and folder.name.startswith("tiny-")
    assert {p.name for p in folder.iterdir()} == {
        "config.yaml", "metrics.jsonl", "steps.jsonl", "summary.json", "model.keras", "checkpoints",
        "tensorboard"}
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    steps = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == result.summary.steps_run == 2 * 6  # 384 train examples / 64
    assert {s["examples"] for s in steps} == {64}
    from mptrain.runs.summary import RunSummary

    summary = RunSummary.model_validate_json((folder / "summary.json").read_text())
    assert summary == result.summary
    assert summary.step_time.timed_steps == 12 - 1  # warmup_steps: 1
    assert summary.memory.process_peak_bytes > 50 * 2**20
    import keras

    reloaded = keras.saving.load_model(folder / "model.keras")
    predictions = reloaded.predict(np.zeros((3, 16), np.float32), verbose=0)
    assert predictions.shape == (3, 4) and predictions.dtype == np.float32


def test_max_steps_bounds_a_run(tiny_config):
    result = run_experiment(tiny_config("train.max_steps=4", "train.loop=custom"))
    assert result.summary.steps_run == 4
    assert result.summary.stop_reason == "stopped after 4 steps (step limit 4)"
    assert result.summary.test_loss is not None  # still evaluated


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_max_step_seconds_stops_after_the_slow_step(tiny_config, loop):
    result = run_experiment(tiny_config(f"train.loop={loop}", "train.max_step_seconds=1e-9"))
    assert result.summary.steps_run == 2 and result.summary.epochs_run == 1  # the first is free
    assert "stopped after 2 steps: a step took" in result.summary.stop_reason
    # a stop, not a failure: the run still evaluates on the whole test set, and finishes
    s = result.summary
    assert s.status == "finished" and s.test_examples == 128 and 0.0 <= s.test_accuracy <= 1.0


@pytest.mark.parametrize(("bf16_ratio", "expected"), [(0.8, "float32"), (3.0, "mixed_bfloat16")])
def test_auto_follows_this_machines_recorded_kernel_speeds(tiny_config, tmp_path, monkeypatch,
                                                           bf16_ratio, expected):
    """`policy: auto` decides on the cached measurement of this machine's kernels: a recorded
    one where bfloat16 is 0.8x float32 (AVX512_BF16 without AMX) gives float32, one where it
    is 3x (AMX) gives mixed_bfloat16, whatever this CPU's flags say."""
    from mptrain.hardware.machine import probe
    from tests.helpers import record_kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    record_kernels(probe(tf, check_xla=False), bfloat16=bf16_ratio)
    result = run_experiment(tiny_config("policy=auto", "train.epochs=1"))
    assert result.summary.policy_requested == "auto" and result.summary.policy == expected
    assert f"{bf16_ratio:.2f}x float32" in result.summary.policy_reason
    header = (result.run_dir / "config.yaml").read_text()
    # config.yaml holds what ran: a resume continues in it, whatever auto would pick by then
    assert f"policy: auto resolved to {expected}" in header and f"\npolicy: {expected}\n" in header
    # its MFU reads against the fastest matrix product measured in its dtype or float32 (the
    # recording's: 1 TFLOP/s a ratio), not the nominal peak at the base clock
    s = result.summary
    assert s.peak_measured and s.peak_tflops == pytest.approx(max(bf16_ratio, 1.0) if expected
                                                              != "float32" else 1.0)
    assert s.mfu == pytest.approx(s.achieved_tflops / s.peak_tflops)
    if bf16_ratio < 1:  # (once) where nothing was measured, the peak is nominal, and said so
        monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path / "empty"))
        nominal = run_experiment(tiny_config("train.epochs=1")).summary
        assert not nominal.peak_measured and "FP32" in nominal.peak_unit


def test_json_outputs_are_strict_even_when_a_run_diverges():
    from mptrain.record import to_json

    text = to_json({"loss": float("nan"), "steps": [1.0, float("inf")], "ok": 2.5})
    assert json.loads(text) == {"loss": None, "steps": [1.0, None], "ok": 2.5}


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_xla_optimizer_update_gives_the_same_training(tiny_config, loop):
    plain = run_experiment(tiny_config(f"train.loop={loop}", "train.xla_optimizer_update=false"))
    fused = run_experiment(tiny_config(f"train.loop={loop}", "train.xla_optimizer_update=true"))
    assert fused.summary.xla_optimizer_update and not plain.summary.xla_optimizer_update
    np.testing.assert_allclose([r.loss for r in fused.steps], [r.loss for r in plain.steps],
                               rtol=2e-3)


def test_the_custom_loop_compiles_with_xla_on_one_replica_under_a_strategy(tiny_config):
    """one_device is one replica: the step is XLA-compiled, as the summary says (the custom
    loop built every strategy's step without XLA, so float16 on a CPU ran oneDNN's reference
    kernels, seconds a step, while the summary said XLA on)."""
    from mptrain.runs.experiment import prepare

    config = tiny_config("train.loop=custom", "distribute.strategy=one_device",
                         "train.jit_compile=true")
    prepared = prepare(config)
    loop = prepared.loop
    x, y = next(iter(loop.strategy.experimental_distribute_dataset(prepared.batches.test)))
    # TensorFlow gives a function's XLA program only when it is compiled with XLA
    assert "HloModule" in loop.train_step.experimental_get_compiler_ir(x, y, tf.constant(0.0))(stage="hlo")
    summary = run_experiment(config).summary
    assert summary.jit_compile and summary.replicas == 1 and summary.status == "finished"


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize("head", ["sigmoid", "linear"])
def test_binary_classification_head(tiny_config, loop, head):
    result = run_experiment(tiny_config(
        f"train.loop={loop}", "policy=mixed_bfloat16", "data.num_classes=2",
        "model.num_classes=1", f"model.output_activation={head}", "train.loss=binary_crossentropy",
    ))
    losses = epoch_losses(result)
    assert losses[-1] < losses[0]
    assert result.summary.test_accuracy > 0.8  # two well-separated blobs
    assert result.summary.output_dtype == "float32"


def test_top5_accuracy_metric_in_both_loops(tiny_config):
    fit = run_experiment(tiny_config("train.metrics=[accuracy, top5_accuracy]",
                                     "data.num_classes=8", "model.num_classes=8"))
    custom = run_experiment(tiny_config("train.metrics=[accuracy, top5_accuracy]", "train.loop=custom",
                                        "data.num_classes=8", "model.num_classes=8"))
    for result in (fit, custom):
        metrics = result.summary.test_metrics
        assert set(metrics) == {"loss", "accuracy", "top5_accuracy"}
        assert metrics["top5_accuracy"] >= metrics["accuracy"]


def test_training_flops_of_the_guide_mlp_match_a_hand_count():
    import keras

    from mptrain.config import validate
    from mptrain.data.dataset import InputSpec
    from mptrain.model.flops import forward_profile
    from mptrain.precision.policy import apply_policy
    from tests.helpers import built_for_head, tiny_raw

    apply_policy("mixed_bfloat16")  # the count does not depend on the dtype
    config = validate(tiny_raw("model.hidden_units=[4096, 4096]", "model.num_classes=10"), "<test>")
    model = built_for_head(config, InputSpec((784,), "vector")).model
    multiply_adds = 784 * 4096 + 4096 * 4096 + 4096 * 10
    assert forward_profile(model).training_flops == 3 * 2 * multiply_adds
    conv = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, padding="same")])
    assert forward_profile(conv).training_flops == 3 * 2 * (8 * 8 * 4) * (3 * 3 * 3)


def test_flops_of_convolutions_over_open_lengths_and_of_every_kind_are_counted_or_named():
    """keras.io's text classifier takes Input(shape=(None,)): traced with the data's length,
    its Conv1D layers are counted (they were 0, and the compute figure read 0% of peak);
    Conv3D and transposed convolutions are counted; a grouped Conv2D, which Keras runs as an
    XLA function whose ops the graph does not show, is named, never silently zero."""
    import keras
    from keras import layers

    from mptrain.model.flops import forward_profile

    tokens = keras.Input(shape=(None,), dtype="int64")
    x = layers.Conv1D(8, 7, strides=3, name="conv")(layers.Embedding(50, 4)(tokens))
    text = keras.Model(tokens, layers.Dense(1)(layers.GlobalMaxPooling1D()(x)))
    assert forward_profile(text).uncounted == ("conv",)  # lengths open: said, not zero
    profile = forward_profile(text, (500,))
    assert profile.flops_by_layer["conv"] == 2 * ((500 - 7) // 3 + 1) * 8 * (7 * 4) and not profile.uncounted
    images = keras.Input((6, 6, 2))
    y = layers.Conv2DTranspose(4, 3, name="up")(images)
    y = layers.Conv2D(4, 3, groups=2, name="grouped")(y)
    volumes = keras.Input((4, 4, 4, 2))
    cube = keras.Model(volumes, layers.Conv3D(3, 3, name="cube")(volumes))
    assert forward_profile(cube).flops_by_layer["cube"] == 2 * (2 * 2 * 2 * 3) * (3 * 3 * 3 * 2)
    profile = forward_profile(keras.Model(images, y))
    assert profile.flops_by_layer["up"] == 2 * (6 * 6 * 2) * (3 * 3 * 4)
    assert profile.uncounted == ("grouped",)


@pytest.mark.parametrize("xla_update", [False, True])
def test_float32_is_a_plain_keras_script_bit_for_bit_or_the_summary_says_why_not(tiny_config,
                                                                                 tmp_path, xla_update):
    """Issue 25, item 5: "the same experiment" means the same numbers. A plain Keras script
    of the experiment (compile, fit on the same arrays in mptrain's batch order, from the same
    weights) ends with mptrain's weights bit for bit; the one thing mptrain does differently
    by default on a CPU, the XLA-compiled optimizer update, changes them, and the summary
    names it."""
    import keras

    from mptrain.runs.experiment import prepare

    config = tiny_config("data.validation_split=0", "train.epochs=2", "output.save_model=true",
                         "train.optimizer={name: rmsprop}", "model.hidden_units=[32]",
                         f"train.xla_optimizer_update={str(xla_update).lower()}")
    prepared = prepare(config)
    start = prepared.model.get_weights()
    np.savez(tmp_path / "start.npz", *start)
    x, y = prepared.data.train.arrays
    plain = keras.models.clone_model(prepared.model)
    plain.set_weights(start)
    plain.compile(optimizer=keras.optimizers.RMSprop(), loss="sparse_categorical_crossentropy")
    for epoch in range(2):  # mptrain's order: each epoch shuffled by (seed, epoch)
        order = tf.random.experimental.stateless_shuffle(tf.range(len(x), dtype=tf.int64),
                                                         seed=[config.seed, epoch]).numpy()
        plain.fit(x[order], y[order], batch_size=64, epochs=1, shuffle=False, verbose=0)

    result = run_experiment(config, Start(initial_weights=tmp_path / "start.npz"))
    trained = keras.saving.load_model(result.run_dir / "model.keras").get_weights()
    same = all(np.array_equal(a, b) for a, b in zip(trained, plain.get_weights(), strict=True))
    named = [n for n in result.summary.notes if "optimizer update compiled with XLA" in n]
    if xla_update:
        assert not same and named and "train.xla_optimizer_update: false" in named[0]
    else:
        assert same and not named


def test_a_pure_16bit_policy_trains_and_says_its_weights_are_16bit(tiny_config):
    """Pure bfloat16 is a valid thing to measure, but its lower accuracy must not read as
    16-bit math's fault: the run's notes say the weights are bfloat16 too."""
    s = run_experiment(tiny_config("policy=bfloat16", "train.epochs=1")).summary
    assert s.status == "finished" and s.variable_dtype == "bfloat16"
    assert any(n.startswith("bfloat16: the weights and their updates are bfloat16") for n in s.notes), s.notes
    mixed = run_experiment(tiny_config("policy=mixed_bfloat16", "train.epochs=1")).summary
    assert not any("the weights and their updates" in n for n in mixed.notes)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_an_epoch_a_ctrl_c_cut_short_is_not_validated_one_a_step_limit_ended_is(tiny_config, loop):
    """A Ctrl-C does not wait for a validation pass over an epoch it cut short (nobody reads
    it: the run resumes the epoch and validates it whole); a run that ends at its step limit
    inside an epoch validates it (its last figures)."""
    import os
    import signal

    from mptrain.training.records import TrainingListener

    class CtrlCAtStepTwo(TrainingListener):
        def step_finished(self, record, step_in_epoch):
            if record.step == 2:
                os.kill(os.getpid(), signal.SIGINT)  # the run's own handler takes it

    stopped = run_experiment(tiny_config(f"train.loop={loop}"), listeners=[CtrlCAtStepTwo()])
    assert stopped.summary.stopped_by == "signal" and len(stopped.steps) == 2
    assert "val_loss" not in stopped.epochs[-1].metrics and "loss" in stopped.epochs[-1].metrics
    resumed = run_experiment(tiny_config(f"train.loop={loop}"), Start(resume=stopped.run_dir))
    assert [("val_loss" in e.metrics) for e in resumed.epochs] == [True, True, True]
    limited = run_experiment(tiny_config(f"train.loop={loop}", "train.max_steps=2"))
    assert limited.summary.stopped_by == "max_steps" and "val_loss" in limited.epochs[-1].metrics
