"""Learning-rate schedules, gradient clipping and gradient accumulation, correct under loss
scaling in both loops."""

import math

import numpy as np
import pytest

from mptrain.runs.runner import Start, run_experiment


def trained_weights(result):
    import keras

    return keras.saving.load_model(result.run_dir / "model.keras").get_weights()


def test_cosine_schedule_with_warmup_is_followed_and_logged(tiny_config):
    import keras

    result = run_experiment(tiny_config(
        "train.loop=custom", "train.epochs=4",
        "train.optimizer={name: sgd, schedule: {kind: cosine, learning_rate: 0.1, warmup_steps: 6}}"))
    steps_per_epoch = 6
    expected = keras.optimizers.schedules.CosineDecay(0.0, 4 * steps_per_epoch - 6,
                                                      warmup_target=0.1, warmup_steps=6)
    logged = [e.learning_rate for e in result.epochs]
    assert logged == pytest.approx([float(expected(steps_per_epoch * (i + 1))) for i in range(4)])
    assert logged[0] == pytest.approx(0.1)  # end of warm-up
    assert logged[-1] == pytest.approx(0.0, abs=1e-6)  # decayed to alpha=0


@pytest.mark.parametrize(("schedule", "rates"), [
    ("{kind: constant, learning_rate: 0.05, warmup_steps: 12}", [0.025, 0.05, 0.05]),
    ("{kind: exponential, learning_rate: 0.1, decay_steps: 6, decay_rate: 0.5}", [0.05, 0.025, 0.0125]),
    ("{kind: piecewise, boundaries: [6, 12], values: [0.1, 0.01, 0.001]}", [0.1, 0.01, 0.001]),
])
def test_schedules_in_fit(tiny_config, schedule, rates):
    result = run_experiment(tiny_config(f"train.optimizer={{name: sgd, schedule: {schedule}}}"))
    assert [e.learning_rate for e in result.epochs] == pytest.approx(rates)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_clipping_sees_unscaled_gradients(tiny_config, tmp_path, loop):
    """clipnorm 50: float32's gradient norm is far below it, the scaled one (x32768) far above.
    Clipping the scaled gradient would shrink the update ~1000x; the mixed_float16 update
    must equal float32's."""
    from mptrain.model import save_initial_weights
    from mptrain.runs.experiment import prepare

    common = (f"train.loop={loop}", "train.max_steps=1", "output.save_model=true",
              "train.optimizer={name: sgd, kwargs: {learning_rate: 0.5, clipnorm: 50}}")
    start = tmp_path / "start.npz"
    save_initial_weights(prepare(tiny_config(*common), policy="float32").model, start)
    before = np.load(start)
    before = [before[f"arr_{i}"] for i in range(len(before.files))]
    deltas = {}
    for policy in ("float32", "mixed_float16"):
        result = run_experiment(tiny_config(*common, f"policy={policy}"), Start(initial_weights=start))
        deltas[policy] = np.concatenate([(a - b).ravel() for a, b in zip(
            trained_weights(result), before, strict=True)])
    assert np.abs(deltas["float32"]).max() > 1e-3
    np.testing.assert_allclose(deltas["mixed_float16"], deltas["float32"], atol=2e-3, rtol=0.05)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_accumulation_skips_non_finite_steps_instead_of_accumulating_them(tiny_config, tmp_path, loop):
    """Accumulating 2 steps under mixed_float16 with one example that overflows float16: the
    steps holding it are skipped (scale halves) and never reach the accumulators, so training
    stays finite and learns."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)
    x[17, 3] = 1e5
    path = tmp_path / "overflow.npz"
    np.savez(path, x_train=x, y_train=y, x_test=x[18:82], y_test=y[18:82])
    result = run_experiment(tiny_config(
        f"train.loop={loop}", "policy=mixed_float16", "data.dataset=npz", f"data.path={path}",
        "data.validation_split=0", "train.epochs=4", "output.save_model=true",
        "train.optimizer={name: adam, kwargs: {learning_rate: 0.01, gradient_accumulation_steps: 2}}"))
    s = result.summary
    assert s.loss_scale.skipped_steps == 4  # one batch per epoch holds example 17
    assert all(np.isfinite(w).all() for w in trained_weights(result))
    assert math.isfinite(s.test_loss) and s.test_accuracy > 0.45  # 4 classes: chance is 0.25
    assert result.epochs[-1].metrics["loss"] < result.epochs[0].metrics["loss"]


def test_gradient_accumulation_needs_two_steps_or_more(tiny_config):
    from mptrain.errors import ConfigError

    with pytest.raises(ConfigError, match="gradient_accumulation_steps = 1: must be at least 2"):
        tiny_config("train.optimizer.kwargs={gradient_accumulation_steps: 1}")


def test_tensorboard_logs_the_rate_each_step_trained_at_after_a_reduction_and_a_resume(tiny_config):
    """No epoch beats the first by min_delta 100: reduce_lr_on_plateau halves the rate after
    epoch 2, so epoch 3's steps train at half the first rate (metrics.jsonl's record).
    TensorBoard logged the rate read when the session opened for every step, and a resumed
    run's opening rate was read before its checkpoint (the lowered rate) was restored."""
    import tensorflow as tf
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mptrain.runs.resume import resume_config

    def logged_as_trained(result):
        events = EventAccumulator(str(result.run_dir / "tensorboard"), size_guidance={"tensors": 0})
        events.Reload()
        logged = {e.step: float(tf.make_ndarray(e.tensor_proto))
                  for e in events.Tensors("step/learning_rate")}
        rates = {e.epoch: e.learning_rate for e in result.epochs}
        assert logged == pytest.approx({r.step: rates[r.epoch] for r in result.steps})
        return rates

    reducing = ("train.reduce_lr_on_plateau={monitor: loss, patience: 1, min_delta: 100, "
                "factor: 0.5}")
    assert logged_as_trained(run_experiment(tiny_config(reducing))) == pytest.approx(
        {1: 0.01, 2: 0.01, 3: 0.005})
    stopped = run_experiment(tiny_config(reducing, "train.max_steps=14"))  # inside epoch 3
    resumed = run_experiment(resume_config(stopped.run_dir, None, ["train.max_steps=null"]),
                             Start(resume=stopped.run_dir))
    # the stop inside epoch 3 decided nothing: the resumed epoch trained as the whole run's did
    assert logged_as_trained(resumed) == pytest.approx({1: 0.01, 2: 0.01, 3: 0.005})
