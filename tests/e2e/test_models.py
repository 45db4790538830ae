"""Every model kind trains for real through the command line; bad models give clean errors."""

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import IMAGES, TOKENS, experiment, mptrain, refuses, run_json


def test_vision_transformer_trains_on_images_in_bfloat16(tmp_path):
    config = experiment(tmp_path, *IMAGES, "policy=mixed_bfloat16", "model.kind=transformer",
                        "model.num_layers=2", "model.num_heads=2", "model.embed_dim=16",
                        "model.mlp_dim=32", "model.patch_size=4", "train.epochs=3")
    s = run_json(tmp_path, config)
    assert s["status"] == "finished" and s["output_dtype"] == "float32"
    assert s["compute_dtype"] == "bfloat16" and s["test_accuracy"] > 0.5
    assert "images cut into 16 patches of 4x4 pixels" in s["notes"]
    assert s["final_train_loss"] < s["first_step_loss"]


def test_token_transformer_learns_the_generated_text_task(tmp_path):
    config = experiment(tmp_path, *TOKENS, "model.kind=transformer", "model.num_layers=1",
                        "model.num_heads=2", "model.embed_dim=16", "model.mlp_dim=32",
                        "train.loop=custom", "train.epochs=4",
                        "train.optimizer.kwargs={learning_rate: 3e-3}")
    s = run_json(tmp_path, config)
    assert s["test_accuracy"] > 0.8  # 4 classes: chance is 0.25


def test_transformer_mixed_float16_stays_finite_where_naive_float16_overflows(tiny_config, tmp_path):
    """Inputs ~400x the usual scale make the residual stream large: a float16 layer-norm
    variance (mean of squares) overflows 65504. mptrain's encoder under mixed_float16 (Keras'
    float32 layer-norm statistics, float32 attention softmax, pre-LN blocks, float32 head)
    trains on it with finite losses."""
    import keras
    import tensorflow as tf

    from mptrain.data.dataset import InputSpec
    from mptrain.precision.policy import apply_policy
    from mptrain.runs.runner import run_experiment
    from tests.helpers import built_for_head

    rng = np.random.default_rng(0)
    x = rng.normal(0, 400, (192, 16, 16, 1)).astype(np.float32)
    y = rng.integers(0, 4, 192)
    x[y == 1, :8] += 800  # something to learn
    np.savez(tmp_path / "large.npz", x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:])
    config = tiny_config("data.dataset=npz", f"data.path={tmp_path / 'large.npz'}",
                         "policy=mixed_float16", "model.kind=transformer", "model.num_layers=2",
                         "model.num_heads=2", "model.embed_dim=16", "model.mlp_dim=32",
                         "model.patch_size=4", "model.dropout=0.1", "train.epochs=2",
                         "train.loop=custom", "train.optimizer.kwargs={learning_rate: 1e-3}",
                         "train.jit_compile=false")  # XLA compiles add 25 s here
    apply_policy("mixed_float16")
    model = built_for_head(config, InputSpec((16, 16, 1), "image")).model
    # the softmax of dropout attention (Keras' explicit path) is float32; its projections are not
    attention = model.get_layer("block_1_attention")
    assert attention._softmax.compute_dtype == "float32"
    assert attention._query_dense.compute_dtype == "float16"
    # what a naive float16 computation of the first layer norm would see
    probe = keras.Model(model.inputs, model.get_layer("position_embedding").output)
    residual = probe(x[:8])
    assert np.isfinite(np.asarray(tf.cast(residual, tf.float32))).all()
    naive_variance = tf.reduce_mean(tf.square(tf.cast(residual, tf.float16)), axis=-1)
    assert not np.isfinite(naive_variance.numpy()).all(), "the inputs were meant to overflow"
    result = run_experiment(config)
    assert result.summary.status == "finished"
    assert sum(np.isfinite(r.loss) for r in result.steps) > len(result.steps) // 2
    assert np.isfinite(result.summary.test_loss)


def test_application_on_grayscale_images_resized_inside_the_model(tmp_path):
    config = experiment(tmp_path, "data.input_shape=[28, 28, 1]", "data.train_size=96",
                        "data.test_size=32", "policy=mixed_bfloat16", "model.kind=application",
                        "model.name=MobileNet", "model.kwargs={alpha: 0.25}",
                        "model.image_size=[32, 32]", "model.dropout=0.1", "train.epochs=1",
                        "train.batch_size=16")
    s = run_json(tmp_path, config)
    assert s["status"] == "finished" and s["output_dtype"] == "float32"
    assert "images resized from 28x28 to 32x32 inside the model" in s["notes"]
    assert "grayscale images repeated to 3 channels for the application" in s["notes"]
    assert s["flops_per_example"] > 1e6  # the backbone's convolutions are counted


def test_application_preprocessing_matches_keras(tmp_path):
    """mptrain's float32 layer does what each family's own preprocess_input does."""
    import keras

    from mptrain.model.layers import ImagePreprocessing

    images = np.random.default_rng(0).random((2, 4, 4, 3)).astype(np.float32)
    for mode, module in (("caffe", "resnet"), ("tf", "mobilenet_v2"), ("torch", "densenet")):
        ours = np.asarray(ImagePreprocessing(mode)(images))
        theirs = getattr(keras.applications, module).preprocess_input(images * 255.0)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-3, err_msg=mode)


def test_application_table_matches_keras_applications():
    import inspect

    import keras

    from mptrain.config.kinds import APPLICATIONS

    installed = {n for n in dir(keras.applications)
                 if n[0].isupper() and inspect.isfunction(getattr(keras.applications, n))}
    assert set(APPLICATIONS) == installed
    for name, app in APPLICATIONS.items():
        assert getattr(keras.applications, name).__module__.endswith("." + app.module), name


@pytest.mark.parametrize(("overrides", "messages"), [
    (["model.kind=application", "model.name=ResNet5O"],
     ["model.name = 'ResNet5O': not one of ConvNeXtTiny", "MobileNetV2", "(did you mean ResNet50?)"]),
    (["model.kind=application", "model.name=ResNet50", "data.input_shape=[28, 28, 1]"],
     ["ResNet50 needs images of at least 32x32; these are 28x28", "model.image_size: [32, 32]"]),
    (["model.kind=application", "model.name=Xception", "data.input_shape=[64, 64, 3]"],
     ["Xception needs images of at least 71x71"]),
    (["model.kind=transformer", "data.input_shape=[10, 10, 1]", "model.patch_size=4"],
     ["model.patch_size 4 does not divide the 10x10 images"]),
    (["model.kind=transformer", "model.embed_dim=30", "model.num_heads=4"],
     ["model.embed_dim 30 must be a multiple of model.num_heads 4"]),
    ([*TOKENS, "model.kind=transformer", "model.vocab_size=10"],
     ["model.vocab_size 10 is smaller than the data's vocabulary (60 token ids)"]),
    (["model.kind=python", "model.builder=nowhere.py:build"],
     ["{tmp}/exp.yaml: model.builder '{tmp}/nowhere.py:build': {tmp}/nowhere.py: no such file"]),
    (["model.kind=python", "model.builder=no_such_package.models:build"],
     ["no_such_package.models: no such module on the Python path"]),
    (["model.kind=saved", "model.path=missing.keras"],
     ["{tmp}/exp.yaml: model.path {tmp}/missing.keras: no such file"]),
])
def test_bad_models_are_refused_before_anything_runs(tmp_path, overrides, messages):
    """Paths in the file are relative to its folder; the error names the file, the key and
    the absolute path tried."""
    refuses(tmp_path, experiment(tmp_path, *overrides), *(m.format(tmp=tmp_path) for m in messages))


def write_builder(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "my_model.py"
    path.write_text('''
import keras


def build(input_shape, num_classes, width=8):
    """A user's model whose softmax follows the global policy (16-bit under mixed)."""
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Dense(width, activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))


def compiled(input_shape, num_classes):
    model = build(input_shape, num_classes)
    model.compile("adam", "sparse_categorical_crossentropy", steps_per_execution=4)
    return model


def not_a_model(input_shape, num_classes):
    return "a string"


def broken(input_shape, num_classes):
    raise RuntimeError("the builder broke")
''')
    return path


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_python_builder_gets_the_policy_and_a_float32_output(tmp_path, policy):
    write_builder(tmp_path)
    config = experiment(tmp_path, "model.kind=python", "model.builder=my_model.py:build",
                        "model.kwargs={width: 16}", f"policy={policy}", name="models/exp.yaml")
    s = run_json(tmp_path, config)  # the builder is found beside the experiment file
    assert s["compute_dtype"] == policy.removeprefix("mixed_") and s["output_dtype"] == "float32"
    # its softmax output layer computes in float32 (in 16 bits it rounds to 0 and 1)
    assert any(n.startswith("the layer(s) making the model's probabilities (dense_1) compute in "
                            "float32") for n in s["notes"]), s["notes"]
    assert s["test_accuracy"] > 0.4


@pytest.mark.parametrize(("function", "message"), [
    ("missing", "defines no function 'missing' (functions there: build, compiled, not_a_model, broken)"),
    ("compiled", "compiled the model with steps_per_execution=4: mptrain times and records every step"),
    ("not_a_model", "returned str, not a keras.Model"),
    ("broken", "raised RuntimeError: the builder broke"),
])
def test_bad_builders_give_clean_errors(tmp_path, function, message):
    builder = write_builder(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={builder}:{function}")
    refuses(tmp_path, config, message, command="run")


def test_saved_model_is_retrained_under_the_new_policy(tmp_path):
    first = run_json(tmp_path, experiment(tmp_path, "output.save_model=true", "train.epochs=1"))
    saved = Path(first["run_dir"]) / "model.keras"
    config = experiment(tmp_path, "model.kind=saved", f"model.path={saved}", "policy=mixed_bfloat16",
                        "output.save_model=true", "train.epochs=1", name="again.yaml")
    s = run_json(tmp_path, config)
    assert s["compute_dtype"] == "bfloat16" and s["output_dtype"] == "float32"
    import keras

    import mptrain.model.layers  # noqa: F401

    retrained = keras.saving.load_model(Path(s["run_dir"]) / "model.keras")
    policies = {layer.name: layer.dtype_policy.name for layer in retrained.layers[1:]}
    assert policies["dense_1"] == "mixed_bfloat16" and policies["predictions"] == "float32"
    # it started from the saved weights, not from fresh ones: the saved model's loss
    assert s["first_step_loss"] < first["first_step_loss"]


@pytest.mark.parametrize("kind", ["text", "image"])
def test_keras_hub_backbone_from_kwargs(tmp_path, kind):
    import keras_hub  # noqa: F401  (a broken install fails here, never skips)
    if kind == "text":
        overrides = [*TOKENS, "model.kind=keras_hub", "model.backbone=BertBackbone",
                     "model.kwargs={vocabulary_size: 60, num_layers: 1, num_heads: 2, hidden_dim: 16, "
                     "intermediate_dim: 32, max_sequence_length: 16}", "train.epochs=3",
                     "train.optimizer.kwargs={learning_rate: 3e-3}"]
    else:
        overrides = ["data.input_shape=[32, 32, 3]", "data.train_size=64", "data.test_size=16",
                     "model.kind=keras_hub", "model.backbone=ResNetBackbone",
                     "model.kwargs={input_conv_filters: [64], input_conv_kernel_sizes: [3], "
                     "stackwise_num_filters: [64], stackwise_num_blocks: [1], "
                     "stackwise_num_strides: [1], block_type: basic_block, image_shape: [32, 32, 3]}",
                     "train.epochs=4", "train.batch_size=16"]
    s = run_json(tmp_path, experiment(tmp_path, "policy=mixed_bfloat16", *overrides))
    assert s["status"] == "finished" and s["output_dtype"] == "float32"
    assert s["final_train_loss"] < s["first_step_loss"]  # it learns, text and image alike


def test_keras_hub_preset_offline_is_a_clear_error(tmp_path):
    import keras_hub  # noqa: F401  (a broken install fails here, never skips)
    config = experiment(tmp_path, *TOKENS, "model.kind=keras_hub", "model.backbone=BertBackbone",
                        "model.preset=bert_tiny_en_uncased")
    # a process of its own: urllib keeps the proxies it first saw for the process's life
    done = mptrain("run", str(config), cwd=tmp_path, process=True,
                   env_extra={"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
                              "KAGGLEHUB_CACHE": str(tmp_path / "kaggle"), "HF_HOME": str(tmp_path / "hf")})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "must be downloaded once" in done.stderr and not (tmp_path / "runs").exists()


def test_fine_tuning_recipe_freezes_then_unfreezes(tiny_config, tmp_path):
    """Stage 1 trains the head of a frozen application; stage 2 reloads it as `saved` with
    `unfreeze: true` and every weight trains (the README's fine-tuning recipe)."""
    from mptrain.data.dataset import InputSpec
    from mptrain.precision.policy import apply_policy
    from tests.helpers import built_for_head

    spec = InputSpec((32, 32, 3), "image")
    apply_policy("mixed_bfloat16")
    frozen = built_for_head(tiny_config("model.kind=application", "model.name=MobileNet",
                                     "model.kwargs={alpha: 0.25}", "model.trainable_backbone=false",
                                     "data.input_shape=[32, 32, 3]"), spec)
    assert any("frozen" in note for note in frozen.notes)
    head_only = len(frozen.model.trainable_weights)
    assert head_only == 2  # the Dense logits: kernel and bias
    frozen.model.save(tmp_path / "stage1.keras")
    trainable = {}
    for unfreeze in ("false", "true"):
        config = tiny_config("model.kind=saved", f"model.path={tmp_path / 'stage1.keras'}",
                             f"model.unfreeze={unfreeze}", "data.input_shape=[32, 32, 3]")
        trainable[unfreeze] = len(built_for_head(config, spec).model.trainable_weights)
    assert trainable["false"] == head_only  # the saved model stays as it was saved
    # all but BatchNorm's moving statistics: every kernel, BN scale and offset
    assert trainable["true"] == len([w for w in frozen.model.weights if "moving" not in w.path])


def test_missing_extras_say_what_to_install(monkeypatch):
    import sys

    from mptrain.data.tfds_source import import_tfds
    from mptrain.errors import MptrainError
    from mptrain.model.kinds.hub import import_keras_hub

    monkeypatch.setitem(sys.modules, "keras_hub", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(MptrainError, match=r"pip install 'mptrain\[hub\]'"):
        import_keras_hub()
    with pytest.raises(MptrainError, match=r"pip install 'mptrain\[tfds\]'"):
        import_tfds()
