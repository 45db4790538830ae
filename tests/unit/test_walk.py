"""The one walk over a model's layers names what `model.float32_layers` accepts, nested
models included, for plan, memory, lint and the FLOP count alike."""

import keras

from mptrain.model.dtypes import rebuild_with_policies
from mptrain.model.walk import layer_names, leaf_layers


def nested_model():
    inner = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="inner_dense"),
                              keras.layers.Dense(8, name="inner_out")], name="backbone")
    inputs = keras.Input((8,), name="pixels")
    hidden = keras.layers.Dense(8, name="first")(inputs)
    attended = keras.layers.MultiHeadAttention(2, 4, name="attention")(
        keras.layers.Reshape((2, 4))(hidden), keras.layers.Reshape((2, 4))(hidden))
    x = inner(keras.layers.Flatten()(attended))
    return keras.Model(inputs, keras.layers.Dense(3, name="head")(x))


def test_the_walk_reaches_nested_layers_and_leaves_out_inputs():
    model = nested_model()
    names = [layer.name for layer in leaf_layers(model)]
    assert "inner_dense" in names and "inner_out" in names  # inside the backbone
    assert "backbone" not in names and "pixels" not in names
    assert names.index("first") < names.index("inner_dense") < names.index("head")  # model order
    assert [layer.name for layer in leaf_layers(model, whole=("Sequential",))].count("backbone") == 1
    assert {"backbone", "inner_dense", "head"} <= set(layer_names(model))


def test_every_name_the_walk_gives_is_one_float32_layers_accepts():
    """plan once named layers Keras' counters had renamed: every name must rebuild."""
    model = nested_model()
    for layer in leaf_layers(model):
        rebuilt, changed = rebuild_with_policies(model, {layer.name: "float32"}, default="mixed_bfloat16")
        assert f"{layer.name} (float32)" in changed
        kept = {inner.name: inner.dtype_policy.name for inner in leaf_layers(rebuilt)}
        assert kept[layer.name] == "float32"


def test_flops_are_credited_to_the_layer_that_ran_them():
    """A traced call suffixes each layer's scope (`dense`'s ops run under `dense_1/`): each
    layer's count is its own matmul's, never its neighbour's."""
    from mptrain.model.flops import forward_profile
    from mptrain.model.keras_internals import reset_name_counters

    reset_name_counters()  # dense, dense_1, dense_2: names that are one another's stems
    inputs = keras.Input((4,))
    x = keras.layers.Dense(8)(inputs)
    x = keras.layers.Dense(16)(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(x))
    assert forward_profile(model).flops_by_layer == {"dense": 2 * 4 * 8, "dense_1": 2 * 8 * 16,
                                                     "dense_2": 2 * 16 * 2}
