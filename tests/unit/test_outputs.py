"""Probabilities or logits, read from a model in the precision it computes in (no training).

Each model is wrapped the way mptrain wraps a user's model (`python` builder: a subclassed
or Sequential model called on a symbolic input; then the float32 output), so what is read
here is what `run`, `diagnose`, `memory` and `plan` read."""

import keras
import numpy as np
import pytest

from mptrain.model import ensure_float32_output
from mptrain.model.outputs import read_output, sum_tolerance
from mptrain.precision.policy import (
    DTYPES,
    apply_policy,
)

HEADS = {"softmax": (10, "probabilities"), "sigmoid": (1, "probabilities"), "linear": (10, "logits")}


class Subclassed(keras.Model):
    """The most common way to write a classifier by hand: no graph mptrain can read."""

    def __init__(self, units, activation):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(units, activation=activation)

    def call(self, x):
        return self.out(self.hidden(x))


def build(style: str, head: str):
    units, _ = HEADS[head]
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12,))
    if style == "subclassed":
        model = Subclassed(units, head)
    else:
        layers = [keras.layers.Dense(16, activation="relu"), keras.layers.Dense(units, activation=head)]
        model = keras.Sequential(layers) if style == "sequential" else None
        if style == "functional":
            return ensure_float32_output(keras.Model(inputs, layers[1](layers[0](inputs))))[0]
    return ensure_float32_output(keras.Model(inputs, model(inputs)))[0]


@pytest.mark.parametrize("policy", list(DTYPES))
@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("style", ["functional", "sequential", "subclassed"])
def test_a_models_output_is_read_under_every_policy(style, head, policy):
    apply_policy(policy)
    sample = np.random.default_rng(0).uniform(size=(8, 12)).astype(np.float32)
    reading = read_output(build(style, head), sample)
    assert reading.kind == HEADS[head][1], reading.evidence


def test_values_that_are_neither_cannot_be_told():
    """Values in [0, 1] whose rows do not sum to 1 at any scale: not guessed."""
    apply_policy("float32")
    inputs = keras.Input((4,))
    clipped = keras.layers.Lambda(lambda x: keras.ops.clip(x, 0.0, 1.0) * 0.5)(inputs)
    reading = read_output(keras.Model(inputs, clipped), np.full((8, 4), 0.3, np.float32))
    assert reading.kind is None


def test_the_sum_tolerance_follows_the_least_precise_compute_dtype():
    assert sum_tolerance({"float32"}) == pytest.approx(1e-3)
    assert sum_tolerance({"float32", "float16"}) == pytest.approx(4 * 2.0**-10)
    assert sum_tolerance({"float32", "bfloat16", "float16"}) == pytest.approx(4 * 2.0**-7)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_every_output_of_a_model_with_several_is_float32_under_a_16_bit_policy(policy):
    """A model with two outputs by name (a value and a class), built under the policy: each
    output, by its name, comes back float32, symbolically and when called (the loss per
    output is computed on it); its values are the 16-bit model's own."""
    apply_policy(policy)
    try:
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        kind = keras.layers.Dense(3, activation="softmax", name="kind")(hidden)
        model = keras.Model(inputs, {"value": keras.layers.Dense(1, name="value")(hidden), "kind": kind})
        wrapped, said = ensure_float32_output(model)
        assert said and "float32" in said[0]
        x = np.random.default_rng(0).normal(size=(4, 6)).astype("float32")
        called = wrapped(x)
        assert sorted(called) == ["kind", "value"]
        dtypes = {name: keras.backend.standardize_dtype(t.dtype) for name, t in called.items()}
        assert dtypes == {"kind": "float32", "value": "float32"}
        assert {keras.backend.standardize_dtype(t.dtype) for t in wrapped.outputs} == {"float32"}
        own = model(x)
        for name in ("value", "kind"):
            np.testing.assert_allclose(np.asarray(called[name]), np.asarray(own[name], "float32"))
    finally:
        apply_policy("float32")


def test_the_saved_model_takes_raw_inputs_and_returns_the_targets_units(tmp_path):
    """What mptrain's pipeline did around the model (pixels / 255, features standardised,
    targets standardised) is the saved model's first and last layers, so plain Keras predicts
    from raw inputs in the targets' units; saved and loaded, mptrain takes the trained model
    back out of them (`model.kind: saved` trains it again through its own pipeline)."""
    from mptrain.model.exported import exported, trained_part
    from mptrain.objective.labels import TargetScale

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    assert exported(model, False, None, None) == (model, None)  # nothing to add
    mean, std = [10.0, 200.0, 0.5], [2.0, 40.0, 0.1]
    wrapped, said = exported(model, True, (mean, std), TargetScale([1000.0], [250.0]))
    assert said.startswith("model.keras takes the pixels (0-255) and features as the data stores them "
                           "and returns the targets in their own units")
    raw = np.array([[25.5, 229.5, 102.0], [0.0, 255.0, 51.0]], "float32")
    fed = ((raw / 255 - np.array(mean)) / np.array(std)).astype("float32")  # as the pipeline feeds it
    expected = np.asarray(model(fed)) * 250.0 + 1000.0
    np.testing.assert_allclose(wrapped.predict(raw, verbose=0), expected, rtol=1e-4)
    wrapped.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict(raw, verbose=0), expected, rtol=1e-4)
    inner = trained_part(loaded)
    assert [w.shape for w in inner.weights] == [w.shape for w in model.weights]
    np.testing.assert_allclose(inner.predict(fed, verbose=0), np.asarray(model(fed)), rtol=1e-5)
    assert trained_part(model) is model
