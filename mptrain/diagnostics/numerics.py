"""`mptrain diagnose`: would this model's numbers survive 16 bits? Measured, in float32.

The experiment is set up as `run` sets it up (`runs.experiment.prepare`, under float32) and trains
a few steps with its own training loop; then, on the next batch, every layer's activations,
the gradients flowing back into them, and the weight gradients are compared with float16's
limits:
- overflow: |x| > 65504 becomes inf;
- underflow: 0 < |x| < 2^-24 (the smallest subnormal) becomes 0, and below 2^-14 (the
  smallest normal) keeps fewer digits;
with and without the configured loss scale (gradients are what loss scaling multiplies), and
the range of scales that keeps every gradient representable. For bfloat16, whose range is
float32's, what is lost is precision: the same batch through the model built under
mixed_bfloat16 with the same weights gives each layer's relative error against float32.

Layers are the model's top-level layers: a nested model (an application's backbone, a
subclassed model) is one row, read as a whole.
"""

from __future__ import annotations

import numpy as np

from mptrain.errors import ConfigError
from mptrain.model.own_step import has_graph
from mptrain.precision.policy import F16_MAX
from mptrain.record import Record

F16_MIN_SUBNORMAL = 2.0**-24


class LayerNumbers(Record):
    layer: str
    activation_max: float
    activation_overflow: float  # fraction of activation values above float16's max
    gradient_max: float
    gradient_min_nonzero: float | None
    gradient_underflow: float  # fraction of nonzero gradient values float16 rounds to zero
    gradient_underflow_scaled: float  # the same, gradients times the loss scale
    gradient_overflow_scaled: float  # fraction above 65504 once scaled
    bfloat16_error: float | None = None  # relative error of the outputs under mixed_bfloat16


class Diagnosis(Record):
    experiment: str
    steps: int
    loss_scale: float
    layers: list[LayerNumbers]
    gradient_underflow: float  # over all gradient values
    gradient_underflow_scaled: float
    gradient_overflow_scaled: float
    scale_range: tuple[float, float] | None  # scales keeping gradients in float16's range
    overflowing_layers: list[str]
    verdicts: dict[str, str] = {}
    recommendation: str = ""
    targets: str | None = None  # a regression's targets past what float16 holds (lint's rule)
    features: str | None = None  # features fed as stored on scales apart (lint's rule): any policy


def gradient_fractions(values: np.ndarray, scale: float) -> dict[str, float]:
    """Of the nonzero `values`, the fractions float16 flushes to zero, as they are and times
    `scale`, and those past its max once scaled: the fields LayerNumbers and Diagnosis share."""
    magnitudes = np.abs(values.astype(np.float64))
    nonzero = magnitudes[magnitudes > 0]
    if not nonzero.size:
        return dict.fromkeys(("gradient_underflow", "gradient_underflow_scaled",
                              "gradient_overflow_scaled"), 0.0)
    return {"gradient_underflow": float(np.mean(nonzero < F16_MIN_SUBNORMAL)),
            "gradient_underflow_scaled": float(np.mean(nonzero * scale < F16_MIN_SUBNORMAL)),
            "gradient_overflow_scaled": float(np.mean(nonzero * scale > F16_MAX))}


def diagnose(config, steps: int = 5, verbose: bool = False) -> Diagnosis:
    from mptrain.precision.lint import feature_findings, target_findings
    from mptrain.runs.experiment import prepare
    from mptrain.training.monitor import TrainingMonitor

    prepared = prepare(config, policy="float32", verbose=verbose)
    import keras  # after prepare, which imports TensorFlow quietly


    tf, model, batches = prepared.tf, prepared.model, prepared.batches
    layers, probe = layer_probe(model)  # (a model without a graph is refused before it trains)
    warm = min(steps, batches.steps_per_epoch) - 1
    if warm:  # the experiment's own training loop: its optimizer, loss, step
        monitor = TrainingMonitor(epochs=batches.epochs, steps_per_epoch=batches.steps_per_epoch,
                                  max_steps=warm)
        prepared.loop.train(batches, monitor)
    x, y = next(iter(batches.train_from(0, warm)))
    with tf.GradientTape() as tape:
        *outputs, prediction = probe(x, training=True)
        loss = model.compute_loss(y=y, y_pred=prediction)  # the loss the step minimises
    activation_grads, weight_grads = tape.gradient(loss, (outputs, model.trainable_variables))
    # the prepared experiment: what the data filled in (num_classes, input shape) included
    errors = _bfloat16_errors(prepared.config, prepared.data, prepared.objective, model, x)
    scale = config.train.loss_scale.initial_scale
    owner = {id(v): layer.name for layer in layers for v in layer.trainable_weights}
    numbers, all_grads = [], []
    for layer, output, activation_grad in zip(layers, outputs, activation_grads, strict=True):
        acts = np.asarray(output, np.float64)
        grads = [activation_grad, *(g for g, v in zip(weight_grads, model.trainable_variables, strict=True)
                                    if owner.get(id(v)) == layer.name)]
        # (an Embedding's gradient comes as IndexedSlices: convert_to_numpy makes it dense)
        flat = np.concatenate([keras.ops.convert_to_numpy(g).ravel() for g in grads if g is not None]
                              or [np.zeros(0)])
        all_grads.append(flat)
        nonzero = np.abs(flat[flat != 0])
        numbers.append(LayerNumbers(
            layer=layer.name,
            activation_max=float(np.abs(acts).max()) if acts.size else 0.0,
            activation_overflow=float(np.count_nonzero(np.abs(acts) > F16_MAX)) / max(acts.size, 1),
            gradient_max=float(nonzero.max()) if nonzero.size else 0.0,
            gradient_min_nonzero=float(nonzero.min()) if nonzero.size else None,
            **gradient_fractions(flat, scale), bfloat16_error=errors.get(layer.name)))
    everything = np.concatenate(all_grads) if all_grads else np.zeros(0)
    result = Diagnosis(
        experiment=config.name, steps=warm + 1, loss_scale=scale, layers=numbers,
        **gradient_fractions(everything, scale), scale_range=scale_range(everything),
        overflowing_layers=[n.layer for n in numbers if n.activation_overflow > 0])
    result.verdicts, result.recommendation = verdicts(result)
    said = target_findings(prepared.objective, prepared.data.labels, "float16")
    if said:
        result.targets = said[0].message
        result.verdicts["mixed_float16"] += f"; {said[0].message}"
    apart = feature_findings(prepared.data.raw_features, model, prepared.config)
    if apart:  # not a 16-bit matter: said before the recommendation, which it outranks
        result.features = apart[0].message
    return result


def layer_probe(model):
    """The model's top-level layers, and a model returning each one's output and then the
    model's own output.

    Not `layer.output`: that is the output of the layer's first call, which for a nested
    model (a keras.applications backbone) lies in its own graph, not connected to this
    model's inputs; this graph's own calls are read (`keras_internals.graph_outputs`)."""
    if not has_graph(model):
        raise ConfigError(f"diagnose follows one loss through the model's graph of layers, and "
                          f"{type(model).__name__} computes its own losses over sub-models of its "
                          "own in its train_step; `mptrain compare` runs that step under each "
                          "policy (a loss scale that keeps skipping steps shows there)")
    import keras

    from mptrain.model.keras_internals import graph_outputs

    outputs = graph_outputs(model)
    layers = [layer for layer in model.layers
              if type(layer).__name__ != "InputLayer" and id(layer) in outputs]
    return layers, keras.Model(model.inputs, [*(outputs[id(layer)] for layer in layers),
                                              model.outputs[0]])


def scale_range(gradients: np.ndarray) -> tuple[float, float] | None:
    """Scales S that keep the largest gradient below 65504 (max|g| * S <= 65504) and 99% of
    the nonzero ones from flushing to zero (their 1st percentile * S >= 2^-24): the range
    dynamic loss scaling should settle in. Empty (low > high) when no scale does both."""
    magnitudes = np.abs(gradients[gradients != 0]).astype(np.float64)
    if not magnitudes.size:
        return None
    high = F16_MAX / magnitudes.max()
    low = F16_MIN_SUBNORMAL / np.percentile(magnitudes, 1)
    return (float(low), float(high))


def _bfloat16_errors(config, data, objective, model32, x) -> dict[str, float]:
    """Each layer's outputs under mixed_bfloat16 (same weights, same batch) against float32.
    Layers are matched by position: a user's layers are named by Keras' counters, which
    differ between two builds; the float32 output mptrain appends to a 16-bit model has no
    float32 twin and is left out."""
    from functools import partial

    import keras

    from mptrain.data.pipeline import training_inputs
    from mptrain.model import build_model
    from mptrain.precision.policy import apply_policy

    def outputs(model) -> list[tuple[str, object]]:
        layers, probe = layer_probe(model)
        values = probe(x, training=False)[:-1]  # the last is the model's own output
        return [(layer.name, value) for layer, value in zip(layers, values, strict=True)
                if layer.name != "float32_output"]

    apply_policy("mixed_bfloat16")
    try:
        model16 = build_model(config, data.spec, objective, train_inputs=partial(
            training_inputs, data, config.train.batch_size)).model
        model16.set_weights(model32.get_weights())
        outs16, outs32 = outputs(model16), outputs(model32)
    finally:
        apply_policy("float32")
    if len(outs16) != len(outs32):
        return {}
    errors = {}
    for (name, a32), (_, a16) in zip(outs32, outs16, strict=True):
        reference = np.asarray(a32, np.float64)
        norm = np.linalg.norm(reference)
        if norm > 0:
            difference = np.asarray(keras.ops.cast(a16, "float32"), np.float64) - reference
            errors[name] = float(np.linalg.norm(difference) / norm)
    return errors


def verdicts(d: Diagnosis) -> tuple[dict[str, str], str]:
    f16 = (f"{d.gradient_underflow:.1%} of gradient values underflow float16 without loss "
           f"scaling, {d.gradient_underflow_scaled:.1%} with the loss scale {d.loss_scale:g}")
    if d.gradient_overflow_scaled:
        f16 += f" (and {d.gradient_overflow_scaled:.1%} overflow at that scale: it will halve)"
    if d.scale_range:
        low, high = d.scale_range
        f16 += (f"; scales from {low:.3g} to {high:.3g} keep 99% of the gradients representable"
                if low <= high else "; no single scale keeps 99% of the gradients representable")
    for layer in d.overflowing_layers:
        entry = next(n for n in d.layers if n.layer == layer)
        f16 += (f"; layer {layer!r} activations overflow float16 (max {entry.activation_max:.3g}"
                f" > 65504): keep it float32 (model.float32_layers: [{layer}])")
    worst = max((n for n in d.layers if n.bfloat16_error is not None),
                key=lambda n: n.bfloat16_error, default=None)
    bf16 = "float32's range: nothing overflows or underflows"
    if worst is not None:
        bf16 += (f"; precision: layer outputs differ from float32 by up to "
                 f"{worst.bfloat16_error:.2%} (layer {worst.layer!r})")
    verdicts_ = {"mixed_float16": f16, "mixed_bfloat16": bf16}
    trouble = d.overflowing_layers or (d.scale_range and d.scale_range[0] > d.scale_range[1])
    if trouble:
        advice = ("mixed_bfloat16: float16's range is too small for this model's values"
                  + (f" (or mixed_float16 with model.float32_layers: {d.overflowing_layers})"
                     if d.overflowing_layers else ""))
    elif d.gradient_underflow_scaled > 0.01:
        advice = ("mixed_bfloat16, or mixed_float16 with a larger train.loss_scale.initial_scale: "
                  "too many gradients underflow even with loss scaling")
    else:
        advice = ("either: the values fit float16 with dynamic loss scaling, and bfloat16 needs "
                  "none; pick by speed (`mptrain plan`)")
    return verdicts_, advice
