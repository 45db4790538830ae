"""The Keras internals mptrain reads (`model.keras_internals`), each called on a small model:
when a Keras release renames one, the test that fails names it."""

import keras
import pytest

from mptrain.model import keras_internals as internals


def small_model():
    inputs = keras.Input((4,), name="x")
    hidden = keras.layers.Dense(3, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Activation("softmax", name="probabilities")(hidden))


def test_a_symbolic_tensor_names_the_layer_that_made_it_and_its_inputs():
    model = small_model()
    assert internals.producer(model.outputs[0]).name == "probabilities"
    (hidden,) = internals.inputs_of(model.outputs[0])
    assert internals.producer(hidden).name == "hidden"
    eager = keras.ops.ones((1,))
    assert internals.producer(eager) is None and internals.inputs_of(eager) == []
    # which of a nested model's outputs a tensor is: a dict's, in its flattened (sorted) order
    inputs = keras.Input((4,))
    two = keras.Model(inputs, {"value": keras.layers.Dense(1)(inputs), "kind": keras.layers.Dense(3)(inputs)})
    called = two(keras.Input((4,)))
    assert [internals.output_index(called[k]) for k in ("kind", "value")] == [0, 1]
    assert internals.output_index(eager) == 0


def test_a_layers_first_call_and_the_models_own_graph():
    model = small_model()
    (first,) = internals.first_call_inputs(model.get_layer("hidden"))
    assert tuple(first.shape) == (None, 4)
    assert internals.first_call_inputs(keras.layers.Dense(2)) is None  # never called
    outer = keras.Model(model.inputs, model(model.inputs))  # the small model nested in another
    outputs = internals.graph_outputs(outer)
    assert outputs[id(model)] is outer.outputs[0]


def test_the_layer_name_counters_restart():
    keras.layers.Dense(1)
    internals.reset_name_counters()
    assert keras.layers.Dense(1).name == "dense"


def test_multi_head_attention_keeps_its_softmax_and_dropout_where_mptrain_reads_them():
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1)
    layer(keras.ops.ones((1, 3, 8)), keras.ops.ones((1, 3, 8)))
    assert isinstance(internals.attention_softmax(layer), keras.layers.Softmax)
    assert internals.attention_dropout(layer) == pytest.approx(0.1)
    for name in internals.ATTENTION_OVERRIDES:  # what Float32SoftmaxAttention overrides
        assert callable(getattr(keras.layers.MultiHeadAttention, name)), name


def test_a_checkpoint_keeps_the_trainable_weights_under_the_optimizer(tmp_path):
    import tensorflow as tf

    model = small_model()
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    kept = [shape for name, shape in tf.train.list_variables(path)
            if internals.CHECKPOINT_TRAINABLE.match(name)]
    assert sorted(map(tuple, kept)) == sorted(tuple(w.shape) for w in model.trainable_weights)


def test_keras_compiles_no_step_with_xla_under_op_determinism_and_the_switch_turns_back():
    """Why deterministic runs choose no XLA (`policy.NO_XLA_DETERMINISTIC`), and why each run
    sets op determinism both ways (`runtime.set_op_determinism`): it is process-wide, and a
    run after a deterministic one would otherwise lose XLA without a word."""
    import tensorflow as tf

    from mptrain.hardware.runtime import set_op_determinism

    try:
        set_op_determinism(tf, True)
        model = small_model()
        model.compile(loss="mse", jit_compile=True)
        assert model.jit_compile is False
    finally:
        set_op_determinism(tf, False)
    model = small_model()
    model.compile(loss="mse", jit_compile=True)
    assert model.jit_compile is True
