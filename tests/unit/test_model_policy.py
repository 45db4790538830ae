import math

import keras
import pytest

from mptrain.config import validate
from mptrain.data.dataset import InputSpec
from mptrain.model import output_dtype
from mptrain.precision.policy import (
    DTYPES,
    apply_policy,
)
from tests.helpers import built_for_head, tiny_raw

POLICIES = list(DTYPES)


def model_of(*overrides, shape=(5,)):
    config = validate(tiny_raw(*overrides), "<test>")
    return built_for_head(config, InputSpec(shape, "image" if len(shape) == 3 else "vector")).model


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("head", ["softmax", "linear", "sigmoid"])
def test_outputs_are_float32_under_every_policy(policy, head):
    apply_policy(policy)
    loss = "binary_crossentropy" if head == "sigmoid" else "sparse_categorical_crossentropy"
    model = model_of("model.hidden_units=[8]", "model.num_classes=" + ("1" if head == "sigmoid" else "3"),
                     f"model.output_activation={head}", f"train.loss={loss}")
    assert output_dtype(model) == "float32"
    predictions = model(keras.ops.ones((2, 5)))
    assert keras.backend.standardize_dtype(predictions.dtype) == "float32"


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_sets_compute_and_variable_dtypes_of_built_layers(policy):
    compute, variables = DTYPES[policy]
    apply_policy(policy)
    model = model_of("model.kind=cnn", "model.filters=[4]", "model.dense_units=[8]",
                     "model.num_classes=3", shape=(6, 6, 1))
    for name in ("conv_1", "dense_1", "logits"):
        layer = model.get_layer(name)
        assert layer.compute_dtype == compute, name
        assert layer.variable_dtype == variables, name
        assert layer.kernel.dtype == variables, name
    head = model.get_layer("predictions")
    assert head.compute_dtype == "float32"
    # the logits layer really computes in the 16-bit type: its output tensor says so
    assert keras.backend.standardize_dtype(model.get_layer("logits").output.dtype) == compute


def test_cnn_rejects_flat_inputs():
    from mptrain.errors import ConfigError

    with pytest.raises(ConfigError, match="needs image inputs"):
        model_of("model.kind=cnn", shape=(784,))


def test_an_application_sees_its_own_preprocessing(tmp_path):
    """What the backbone inside mptrain's model receives is exactly what keras.applications'
    preprocess_input gives (MobileNet: pixels scaled to [-1, 1]), not mptrain's [0, 1]
    pixels. (Its outputs cannot tell: batch normalisation removes a scale and shift.)"""
    import keras
    import numpy as np

    apply_policy("float32")
    config = validate(tiny_raw("data.input_shape=[32, 32, 3]", "model.kind=application",
                               "model.name=MobileNet", "model.kwargs={alpha: 0.25}"), "<test>")
    model = built_for_head(config, InputSpec((32, 32, 3), "image")).model
    backbone = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    (node,) = [node for nodes in model._nodes_by_depth.values() for node in nodes
               if node.operation is backbone]
    fed = keras.Model(model.inputs, node.input_tensors[0])
    images = np.random.default_rng(0).random((2, 32, 32, 3)).astype(np.float32)
    expected = keras.applications.mobilenet.preprocess_input(images * 255.0)
    np.testing.assert_allclose(np.asarray(fed(images)), expected, rtol=1e-5, atol=1e-5)


def test_a_model_built_twice_names_its_layers_alike_and_float32_layers_takes_them(tmp_path):
    """plan and diagnose build an experiment's model several times in one process; Keras'
    name counters used to move on (conv2d_2 for conv2d), so plan named layers that
    `model.float32_layers` then refused."""
    apply_policy("mixed_bfloat16")
    models = convnet_builder(tmp_path)
    first = model_of("model.kind=python", f"model.builder={models}:convnet", shape=(6, 6, 1))
    second = model_of("model.kind=python", f"model.builder={models}:convnet", shape=(6, 6, 1))
    names = [layer.name for layer in first.layers]
    assert names == [layer.name for layer in second.layers]
    assert {"conv2d", "conv2d_1", "dense", "dense_1"} <= set(names)
    kept = model_of("model.kind=python", f"model.builder={models}:convnet",
                    "model.float32_layers=[conv2d_1, dense_1]", shape=(6, 6, 1))
    assert kept.get_layer("conv2d_1").compute_dtype == "float32"
    assert kept.get_layer("conv2d").compute_dtype == "bfloat16"


def convnet_builder(folder):
    path = folder / "convnet.py"
    path.write_text(
        "import keras\n\n"
        "def convnet(input_shape, num_classes):\n"
        "    inputs = keras.Input(input_shape)\n"
        "    x = keras.layers.Conv2D(4, 3)(keras.layers.Conv2D(4, 3)(inputs))\n"
        "    x = keras.layers.Dense(8)(keras.layers.Flatten()(x))\n"
        "    return keras.Model(inputs, keras.layers.Dense(num_classes, activation='softmax')(x))\n")
    return path


def fusable_model():
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", use_bias=False, name="conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.Conv2D(4, 3, groups=2, name="grouped")(x)  # the fused op takes no groups
    x = keras.layers.Conv2D(4, 3, strides=2, name="strided")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, dtype="float32", name="logits")(x))


def bfloat16_gradient_tolerance(terms: int) -> float:
    """How far Keras' bfloat16 weight gradient may be from the fused layers' float32 one, as a
    share of the gradient's scale, by the kernel path that computes it: oneDNN accumulates in
    float32, a few of bfloat16's rounding steps off (u = 2^-8; 0.003 measured); TensorFlow's
    own kernels, where oneDNN is off or takes no bfloat16 (AVX2-only CPUs, oneDNN on or not;
    TF_ENABLE_ONEDNN_OPTS=0), keep the running sum in bfloat16, whose error grows as
    sqrt(terms) u (0.11 measured at 1,024)."""
    from mptrain.hardware.machine import Machine, onednn_enabled, probe_cpu

    u = 2.0**-8
    cpu = probe_cpu()
    through_onednn = Machine(cpu=cpu, onednn=onednn_enabled(cpu.flags)).onednn_bfloat16
    return 5 * u if through_onednn else 2 * math.sqrt(terms) * u


@pytest.mark.kernel_path
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_fused_layers_compute_what_keras_layers_do(policy):
    """`model.fused_layers` swaps what the fused ops take and nothing else, keeps the weights,
    computes Keras' outputs, gradients and moving statistics (the weight gradient from float32
    copies: within bfloat16's rounding), and the saved model gets Keras' own layers back."""
    import numpy as np
    import tensorflow as tf

    from mptrain.model.fused import fuse, unfused, why_not_fused

    apply_policy(policy)
    keras.utils.set_random_seed(0)
    model = fusable_model()
    fused, swapped = fuse(model)
    assert swapped == ["2 Conv2D", "1 BatchNormalization"] and why_not_fused(model) is None \
        and why_not_fused(fused) is not None
    kinds = {layer.name: type(layer).__name__ for layer in fused.layers}
    assert (kinds["conv"], kinds["bn"], kinds["grouped"], kinds["strided"]) == \
        ("Float32GradConv2D", "FusedBatchNormalization", "Conv2D", "Float32GradConv2D")
    x = np.random.default_rng(0).random((16, 8, 8, 3), dtype=np.float32)
    y = np.arange(16) % 3

    def trained_step(m):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, m(x, training=True),
                                                                               from_logits=True))
        return tape.gradient(loss, m.trainable_variables), m.non_trainable_variables

    close = 1e-5 if policy == "float32" else bfloat16_gradient_tolerance(terms=16 * 8 * 8)
    for (keras_grad, fused_grad, variable) in zip(*(trained_step(model)[0], trained_step(fused)[0]),
                                                  model.trainable_variables, strict=True):
        assert fused_grad.dtype == tf.float32  # float32 variables get float32 gradients
        scale = float(tf.reduce_max(tf.abs(keras_grad)))
        assert float(tf.reduce_max(tf.abs(keras_grad - fused_grad))) <= close * scale, variable.path
    for keras_stat, fused_stat in zip(model.non_trainable_variables, fused.non_trainable_variables,
                                      strict=True):  # the moving mean and variance were updated alike
        np.testing.assert_allclose(keras_stat.numpy(), fused_stat.numpy(), rtol=1e-3, atol=1e-5)
    assert not np.allclose(fused.get_layer("bn").moving_mean.numpy(), 0)
    same = 1e-5 if policy == "float32" else 2e-2  # one forward pass: a few bfloat16 roundings
    np.testing.assert_allclose(model(x).numpy(), fused(x).numpy(), rtol=same, atol=same)
    plain = unfused(fused)
    assert {type(layer).__module__.split(".")[0] for layer in plain.layers} == {"keras"}
    np.testing.assert_allclose(plain(x).numpy(), fused(x).numpy(), rtol=1e-5, atol=1e-6)
    apply_policy("float32")


def test_a_batch_normalization_on_another_axis_computes_what_keras_does_when_fused():
    """The fused op normalises the last axis only: a BatchNormalization on another one (axis=1,
    a channels_first habit) keeps Keras' computation, training and inference alike."""
    import numpy as np

    from mptrain.model.fused import fuse

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 6, 3))
    x = keras.layers.BatchNormalization(axis=1, name="rows")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(keras.layers.Flatten()(x)))
    fused, _ = fuse(model)
    x = np.random.default_rng(0).normal(3.0, 2.0, (16, 8, 6, 3)).astype(np.float32)
    for training in (True, False):
        np.testing.assert_allclose(fused(x, training=training).numpy(),
                                   model(x, training=training).numpy(), rtol=1e-5, atol=1e-5)


def test_builders_given_in_process_get_names_that_are_identifiers():
    """`mptrain.run(builder=fn)` registers fn under a name `model.builder` can import: a
    name that is no identifier is prefixed, and two builders of one name stay apart."""
    from mptrain.model.in_process import register

    first, second = (lambda: 1), (lambda: 2)
    first.__name__ = second.__name__ = "3d-net"
    names = [register(first), register(second), register(first)]
    assert names == ["mptrain.model.in_process:b_3d_net", "mptrain.model.in_process:b_3d_net_2",
                     "mptrain.model.in_process:b_3d_net"]
    assert all(name.split(":")[1].isidentifier() for name in names)
