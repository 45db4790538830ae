"""lint, diagnose, memory, per-layer dtypes and telemetry, on models built to have (and not
to have) each problem."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import IMAGES, TOKENS, experiment, mptrain, run_json


def lint_json(tmp_path: Path, *overrides: str, name="exp.yaml", target="gpu"):
    done = mptrain("lint", str(experiment(tmp_path, *overrides, name=name)), "--json",
                   "--target", target, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_lint_finds_misaligned_dimensions_sorted_by_flops(tmp_path):
    code, report = lint_json(tmp_path, "data.input_shape=[64]", "model.hidden_units=[100, 256, 36]",
                             "train.batch_size=60", "policy=mixed_bfloat16")
    assert code == 1
    warnings = [f for f in report["findings"] if f["severity"] == "warning"]
    messages = [f["message"] for f in warnings]
    # dense_1 (64->100) has units 100; dense_2 (100->256) input 100; dense_3 (256->36): units 36
    assert "dense_2: input features 100 is not a multiple of 8 (Tensor Cores): use 104" in messages[0]
    assert any("dense_1: units 100 is not a multiple of 8 (Tensor Cores): use 104; change it in "
               "model.hidden_units" in m for m in messages)
    assert any("dense_3: units 36 is not a multiple of 8 (Tensor Cores): use 40" in m for m in messages)
    assert any(m.startswith("batch size 60 is not a multiple of 8") for m in messages)
    shares = [f["flops_share"] for f in warnings if f["flops_share"] is not None]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0.5  # dense_2 does most work
    # the classes are the task's: a note, not a warning
    notes = [f["message"] for f in report["findings"] if f["severity"] == "info"]
    assert any(m.startswith("logits: units 4") for m in notes)
    # and no size is suggested for them ('use 8' would drop or invent classes)
    assert not any(m.startswith("logits: units") and "use " in m for m in notes)


def test_lint_passes_an_aligned_model(tmp_path):
    code, report = lint_json(tmp_path, "data.input_shape=[1024]", "model.hidden_units=[1024, 1024]",
                             "train.batch_size=256", "data.train_size=1024", "policy=mixed_bfloat16")
    assert code == 0, report
    assert all(f["severity"] == "info" for f in report["findings"])


def test_lint_flags_a_model_too_small_to_gain(tmp_path):
    code, report = lint_json(tmp_path, "model.hidden_units=[8]", "train.batch_size=8",
                             "data.input_shape=[8]")
    (small,) = [f for f in report["findings"] if f["kind"] == "small_model"]
    assert small["severity"] == "info" and code == 0  # an estimate: a note, never a warning
    assert "too small to gain from 16 bits" in json.dumps(report)
    assert "gives 16 bits work to speed up" in json.dumps(report)  # the whole sentence


BUILDERS = '''
import keras


def softmax_in_policy(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
    weights = keras.layers.Softmax(name="my_softmax")(x)  # inside the model: weights, not the output
    x = keras.layers.Dense(num_classes, name="scores")(keras.layers.Multiply()([x, weights]))
    return keras.Model(inputs, keras.layers.Softmax(name="probabilities")(x))


def logits_in_policy(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="scores")(x))


def tiny_weights(input_shape, num_classes):
    """Tiny initial weights: the first layers' gradients are products of tiny numbers."""
    init = keras.initializers.RandomNormal(stddev=1e-3)
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for i in range(4):
        x = keras.layers.Dense(32, kernel_initializer=init, name=f"tiny_{i}")(x)
    x = keras.layers.Dense(num_classes, name="scores")(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x))


def huge_activations(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
    x = keras.layers.Rescaling(1e6, name="amplifier")(x)
    x = keras.layers.Dense(num_classes, name="scores")(keras.layers.Rescaling(1e-6)(x))
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x))


def states_and_scores(input_shape, num_classes):
    """An LSTM returning its states and an attention returning its scores: layers whose
    output is a list of tensors."""
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Reshape((4, -1))(inputs)
    sequence, state, _ = keras.layers.LSTM(8, return_sequences=True, return_state=True,
                                           name="lstm")(x)
    attended, _ = keras.layers.MultiHeadAttention(2, 4, name="attention")(
        sequence, sequence, return_attention_scores=True)
    x = keras.layers.Concatenate()([keras.layers.Flatten()(attended), state])
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="scores")(x))


class OwnStep(keras.Model):
    def train_step(self, data):
        return super().train_step(data)


def own_step_softmax(input_shape, num_classes):
    """A model with its own step: mptrain keeps it as it is, its softmax in the policy."""
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
    return OwnStep(inputs, keras.layers.Dense(num_classes, activation="softmax", name="probs")(x))
'''


def with_builders(tmp_path: Path) -> Path:
    path = tmp_path / "builders.py"
    path.write_text(BUILDERS)
    return path


def test_lint_finds_a_16bit_softmax_inside_the_model_and_not_the_output_mptrain_keeps_float32(tmp_path):
    builders = with_builders(tmp_path)
    code, report = lint_json(tmp_path, "model.kind=python", f"model.builder={builders}:softmax_in_policy",
                             "policy=mixed_bfloat16")
    warned = [(f["kind"], f["message"]) for f in report["findings"] if f["severity"] == "warning"]
    assert ("softmax_16bit", "my_softmax: softmax in bfloat16; keep it float32 with "
                             "model.float32_layers: [my_softmax]") in warned
    # the output's softmax mptrain computes in float32 itself: nothing to say about it
    assert not [m for k, m in warned if m.startswith("probabilities") or k == "output_dtype"], warned
    # the output layer's units are the classes, also in a model mptrain did not write: a note
    notes = [f["message"] for f in report["findings"] if f["severity"] == "info"]
    assert any(m.startswith("scores: units 4 is not a multiple of 8") for m in notes)
    # acting on the advice removes both
    code, report = lint_json(tmp_path, "model.kind=python", f"model.builder={builders}:softmax_in_policy",
                             "policy=mixed_bfloat16", "model.float32_layers=[my_softmax]", name="fixed.yaml")
    assert not {"softmax_16bit", "output_dtype"} & {f["kind"] for f in report["findings"]}
    # logits computed in 16 bits are what mptrain wants: cast to float32, softmax in the loss
    code, report = lint_json(tmp_path, "model.kind=python", f"model.builder={builders}:logits_in_policy",
                             "policy=mixed_bfloat16", name="logits.yaml")
    assert "output_dtype" not in {f["kind"] for f in report["findings"]}, report["findings"]


def test_lint_reads_layers_whose_output_is_a_list(tmp_path):
    """An LSTM with return_state and an attention with return_attention_scores output lists:
    lint read `.dtype` of the list, and every 16-bit run of such a model failed before
    training (run lints first)."""
    builders = with_builders(tmp_path)
    _, report = lint_json(tmp_path, "model.kind=python", f"model.builder={builders}:states_and_scores",
                          "policy=mixed_bfloat16")
    assert report["flops_per_example"] > 0


def test_lint_warns_of_a_16bit_softmax_output_that_mptrain_casts_after(tmp_path):
    """A model with its own training step keeps its layers as built (own_step.py): its
    softmax output computes in bfloat16, and the float32 cast mptrain adds comes after it.
    lint read that from a note's wording, which a model cast in its own call did not have."""
    builders = with_builders(tmp_path)
    code, report = lint_json(tmp_path, "model.kind=python", f"model.builder={builders}:own_step_softmax",
                             "policy=mixed_bfloat16")
    (warning,) = [f for f in report["findings"] if f["kind"] == "output_dtype"]
    assert warning["severity"] == "warning" and code == 1
    assert warning["message"].startswith("the model's softmax or sigmoid output computes in bfloat16")


def test_float32_layers_keeps_that_layer_float32_and_the_rest_16bit(tiny_config):
    from mptrain.data.dataset import InputSpec
    from mptrain.precision.policy import apply_policy
    from tests.helpers import built_for_head

    apply_policy("mixed_bfloat16")
    built = built_for_head(tiny_config("model.float32_layers=[dense_2]",
                                    "model.layer_policies={'dense_1': mixed_float16}"),
                        InputSpec((16,), "vector"))
    model = built.model
    assert model.get_layer("dense_2").compute_dtype == "float32"
    assert model.get_layer("dense_2").kernel.dtype == "float32"
    assert model.get_layer("dense_1").compute_dtype == "float16"
    assert model.get_layer("logits").compute_dtype == "bfloat16"
    assert "per-layer policies: dense_1 (mixed_float16), dense_2 (float32)" in built.notes
    from mptrain.errors import ConfigError

    with pytest.raises(ConfigError, match="'dens_9' matches no layer"):
        built_for_head(tiny_config("model.float32_layers=[dens_9]"), InputSpec((16,), "vector"))


def test_diagnose_finds_underflow_that_loss_scaling_fixes(tmp_path):
    builders = with_builders(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={builders}:tiny_weights",
                        "train.optimizer.name=sgd")
    done = mptrain("diagnose", str(config), "--json", "--steps", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["gradient_underflow"] > 0.01  # float16 would flush these gradients to zero
    assert d["gradient_underflow_scaled"] < d["gradient_underflow"] / 10  # the scale brings them back
    low, high = d["scale_range"]
    assert low < d["loss_scale"] <= high
    assert "underflow float16 without loss scaling" in d["verdicts"]["mixed_float16"]


def test_diagnose_names_the_layer_whose_activations_overflow(tmp_path):
    builders = with_builders(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={builders}:huge_activations")
    done = mptrain("diagnose", str(config), "--json", "--steps", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["overflowing_layers"] == ["amplifier"]
    assert "layer 'amplifier' activations overflow float16" in d["verdicts"]["mixed_float16"]
    assert "model.float32_layers: [amplifier]" in d["verdicts"]["mixed_float16"]
    assert d["recommendation"].startswith("mixed_bfloat16")


@pytest.mark.parametrize("kind", ["application", "tokens"])
def test_diagnose_runs_on_nested_backbones_and_embeddings(tiny_config, kind):
    """An application's backbone is a model nested in mptrain's (its `layer.output` is not
    connected to the outer inputs); an Embedding's gradient is IndexedSlices. Both crashed."""
    from mptrain.diagnostics.numerics import diagnose

    overrides = {
        "application": IMAGES + ["data.input_shape=[32, 32, 3]", "model.kind=application",
                                 "model.name=MobileNet", "model.kwargs={alpha: 0.25}"],
        "tokens": TOKENS + ["model.kind=transformer", "model.num_layers=1", "model.num_heads=2",
                            "model.embed_dim=16", "model.mlp_dim=32"],
    }[kind]
    d = diagnose(tiny_config(*overrides, "train.batch_size=16"), steps=2)
    by_layer = {n.layer: n for n in d.layers}
    inner = "mobilenet_0.25_32" if kind == "application" else "token_embedding"
    assert inner in by_layer, list(by_layer)
    assert by_layer[inner].gradient_max > 0  # its weights' gradients were read
    assert by_layer["logits"].bfloat16_error is not None


@pytest.mark.kernel_path
def test_memory_estimate_matches_keras_and_the_measured_peak(tmp_path):
    """Every part counted from the built model and optimizer, the total their sum, and the
    total near TensorFlow's allocator peak (leaving out Adam's two slots per weight, 40% of
    this model's state, would put it below 0.6 of it)."""
    config = experiment(tmp_path, "data.input_shape=[256]", "model.hidden_units=[1024, 1024]",
                        "train.batch_size=128", "train.optimizer.name=adam")
    done = mptrain("memory", str(config), "--json", "--policies", "float32,mixed_bfloat16", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    params = 256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 4 + 4
    assert report["parameters"] == params
    f32, bf16 = report["plans"]
    assert f32["weights_bytes"] == bf16["weights_bytes"] == 4 * params  # variables stay float32
    assert f32["gradients_bytes"] == 4 * params
    assert 2 * 4 * params <= f32["optimizer_bytes"] <= 2 * 4 * params + 64  # slots, step counter
    assert bf16["weight_copies_bytes"] == 2 * params and f32["weight_copies_bytes"] == 0
    assert bf16["activations_bytes"] < f32["activations_bytes"]
    for plan in (f32, bf16):
        parts = ("weights_bytes", "weight_copies_bytes", "gradients_bytes", "optimizer_bytes",
                 "activations_bytes")
        assert plan["total_bytes"] == sum(plan[k] for k in parts)
        assert plan["measured_peak_bytes"], "the allocator reports a peak for a 5 MB model"
        assert 0.6 < plan["total_bytes"] / plan["measured_peak_bytes"] < 1.5, plan
    assert bf16["largest_batch"] > f32["largest_batch"] > 128
    assert "variables stay float32" in report["why"]


def test_memory_estimate_counts_the_attention_scores(tmp_path):
    """On a 128-token transformer the heads x tokens x tokens scores (and their softmax) are
    most of the training memory; an estimate from layer outputs alone was 4x too low, so the
    "largest batch that fits" was 4x too large."""
    config = experiment(tmp_path, "data.dataset=synthetic_text", "data.sequence_length=128",
                        "data.vocab_size=60", "data.num_classes=4", "data.train_size=256",
                        "data.test_size=64", "model.kind=transformer", "model.num_layers=1",
                        "model.num_heads=4", "model.embed_dim=16", "model.mlp_dim=32",
                        "model.dropout=0.1", "train.batch_size=64")
    done = mptrain("memory", str(config), "--json", "--policies", "float32", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (f32,) = json.loads(done.stdout)["plans"]
    scores = 64 * 4 * 128 * 128 * 4  # one float32 score tensor of the batch
    assert f32["activations_bytes"] > 2 * scores
    if f32["measured_peak_bytes"]:
        assert 0.5 < f32["total_bytes"] / f32["measured_peak_bytes"] < 2.0, f32


def test_measured_training_memory_leaves_the_data_set_out(tiny_config):
    """A 20 MB data set and a 10 KB model: the allocator's peak during training minus what it
    held before the model was built must be the model's share, not a second copy of the data
    (tf.data copied captured constants whenever an iterator was made: 534 MiB of
    "training memory" for every policy on Fashion-MNIST)."""
    from mptrain.runs.runner import run_experiment

    result = run_experiment(tiny_config("data.train_size=40000", "data.input_shape=[128]",
                                        "model.hidden_units=[16]", "train.batch_size=256",
                                        "train.max_steps=4"))
    memory = result.summary.memory
    if memory.device_peak_bytes is None:
        pytest.skip("this allocator reports no statistics")
    x_bytes = 40000 * 128 * 4
    assert memory.data_bytes >= x_bytes
    assert memory.training_peak_bytes < x_bytes / 4, memory


def test_tensorboard_events_hold_the_telemetry(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    s = run_json(tmp_path, experiment(tmp_path, "policy=mixed_float16", "train.epochs=2",
                                      "train.loss_scale.initial_scale=1048576",
                                      "train.optimizer={name: adam, schedule: {kind: cosine, "
                                      "learning_rate: 0.01, warmup_steps: 3}, "
                                      "kwargs: {gradient_accumulation_steps: 2}}"))
    events = EventAccumulator(str(Path(s["run_dir"]) / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"]) | set(events.Tags()["scalars"])
    for tag in ("step/loss", "step/accuracy", "step/learning_rate", "step/loss_scale", "step/skipped",
                "step/seconds", "step/examples_per_sec", "epoch/loss", "epoch/val_loss",
                "epoch/learning_rate"):
        assert tag in tags, tag
    losses = events.Tensors("step/loss")
    assert [e.step for e in losses] == list(range(1, s["steps_run"] + 1))
    rates = [float(tf.make_ndarray(e.tensor_proto)) for e in events.Tensors("step/learning_rate")]
    skipped = [bool(tf.make_ndarray(e.tensor_proto)) for e in events.Tensors("step/skipped")]
    # each step at the rate of the updates applied before it (a skipped step applies none; a
    # loss scale of 2^20 overflows float16 in the first steps; the schedule counts every step
    # applied, accumulated or not): the warm-up climbs from 0 to its peak in 3 applied updates
    applied = [sum(not s for s in skipped[:i]) for i in range(len(skipped))]
    assert rates[0] == 0.0 and any(skipped[:4]) and max(applied) > 3
    for rate, before in zip(rates, applied, strict=True):
        if before <= 3:
            assert rate == pytest.approx(0.01 * before / 3, abs=1e-6), (rates, skipped)


def test_tensorboard_dates_each_scheduled_rate_by_the_updates_applied_before_its_step(tmp_path):
    """A schedule gives a step the rate at the updates applied before it, as Keras counts
    them (`_iterations` of a LossScaleOptimizer's inner optimizer; its public `iterations` is
    divided by gradient_accumulation_steps): a skipped step applies none, and after a recovery
    goes back to a checkpoint the count is the checkpoint's."""
    from types import SimpleNamespace

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mptrain.training.records import StepRecord
    from mptrain.training.tensorboard import TensorBoardWriter

    inner = SimpleNamespace(_iterations=10, iterations=5)  # two updates accumulated in each
    checkpointer = SimpleNamespace(restores=0)
    writer = TensorBoardWriter(tmp_path, SimpleNamespace(inner_optimizer=inner), float, checkpointer)
    writer.epoch_started(1, 1, 4)
    # applied; skipped; diverged (a NaN loss: the guard restores a checkpoint at 6); applied
    for step, count_after, skipped in ((1, 11, False), (2, 11, True), (3, 6, False), (4, 7, False)):
        inner._iterations = count_after
        checkpointer.restores += step == 3
        writer.step_finished(StepRecord(step=step, epoch=1, loss=1.0, seconds=0.1, examples=8,
                                        loss_scale=2.0**15, skipped=skipped), step)
    writer.flush()
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    events.Reload()
    rates = [float(tf.make_ndarray(e.tensor_proto)) for e in events.Tensors("step/learning_rate")]
    assert rates == [10.0, 11.0, 11.0, 6.0]


def test_injected_overflows_give_exact_skips_in_steps_and_summary(tiny_config, tmp_path):
    """A custom-loop run with non-finite gradients at known steps: steps.jsonl marks exactly
    those as skipped, each halves the scale, and the summary's rate and minimum agree."""
    from mptrain.runs.runner import run_experiment
    from tests.helpers import epoch_order

    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 16)).astype(np.float32)
    x[[5, 77], 2] = 1e5  # two examples overflow float16
    np.savez(tmp_path / "o.npz", x_train=x, y_train=rng.integers(0, 4, 128), x_test=x[:16] * 0,
             y_test=np.zeros(16, np.int64))
    result = run_experiment(tiny_config(
        "train.loop=custom", "policy=mixed_float16", "data.dataset=npz", f"data.path={tmp_path / 'o.npz'}",
        "data.validation_split=0", "train.batch_size=16", "train.epochs=2",
        "train.loss_scale.initial_scale=64", "train.loss_scale.dynamic_growth_steps=1000"))
    expected = sorted({epoch * 8 + int(np.where(epoch_order(128, 7, epoch) == i)[0][0]) // 16 + 1
                       for epoch in range(2) for i in (5, 77)})
    steps = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s["skipped"]] == expected
    assert steps[-1]["loss_scale"] == 64 / 2 ** len(expected)
    ls = result.summary.loss_scale
    assert ls.skipped_steps == len(expected) and ls.skip_rate == pytest.approx(len(expected) / 16)
    assert ls.min_scale == 64 / 2 ** len(expected)


