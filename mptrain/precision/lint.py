"""Lint rules: what in a model keeps 16-bit training from being fast or safe, statically.

From the built model (nothing trains):
- dimensions that Tensor Cores want as multiples of 8, and TPUs as multiples of 128 (the
  guide's performance advice): Dense units and input features, convolution filters and input
  channels, attention head sizes, embedding sizes and vocabularies, the batch size; each with
  the nearest aligned value and the layer's share of the model's FLOPs, largest first. Only
  for hardware that has such units: a GPU with Tensor Cores or a TPU here, or the target the
  user names (`lint --target gpu`); a layer with under 1% of the FLOPs is a note at most;
- a model too small to gain: its arithmetic per step takes less time than launching the
  step's operations;
- numerics: an output that was not float32, a layer that ignores the policy (variables or
  outputs in an unexpected dtype), a softmax computed in 16 bits, a regression whose targets
  square past float16's range or outgrow a 16-bit output layer's precision;
- features fed as stored on scales orders of magnitude apart (not a 16-bit matter, but a
  run that learns nothing in any precision: a regression no better than its mean).
Every finding says what to change in the YAML. Warnings decide the exit code; infos
(dimensions fixed by the data or the task) are listed for completeness.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from mptrain.model.keras_internals import attention_dropout, attention_softmax, inputs_of, producer
from mptrain.model.kinds import model_kind
from mptrain.precision.policy import F16_MAX
from mptrain.record import FrozenRecord

if TYPE_CHECKING:
    from mptrain.model.flops import ForwardProfile

TENSOR_CORE_MULTIPLE, TPU_MULTIPLE = 8, 128
# A layer doing less of the work than this cannot make a model slow, whatever its shape.
NEGLIGIBLE_SHARE = 0.01
Target = Literal["auto", "gpu", "tpu", "cpu"]
# Per-operation launch cost on a CPU (kernel dispatch, framework bookkeeping): a rule of
# thumb, not a measurement of this machine; small models are flagged only when far below it.
LAUNCH_SECONDS = 5e-6


class Finding(FrozenRecord):
    kind: Literal["alignment", "small_model", "output_dtype", "policy_ignored", "softmax_16bit",
                  "targets", "features"]
    severity: Literal["warning", "info"]
    layer: str | None
    message: str
    flops_share: float | None = None


class LintReport(FrozenRecord):
    """What `mptrain lint` found, for the renderers and `--json`."""

    experiment: str
    policy: str
    device: str
    alignment_for: str | None  # the units dimensions were checked for, or None: not checked
    flops_per_example: int
    operations: int
    findings: list[Finding]

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def summary(self) -> str:
        notes = len(self.findings) - self.warnings
        return f"{self.warnings} warning(s), {notes} note(s)" if self.findings else "no findings"


def _finding(kind: str, severity: str, layer: str | None, message: str,
             flops_share: float | None = None) -> Finding:
    return Finding(kind=kind, severity=severity, layer=layer, message=message, flops_share=flops_share)


def alignment_units(machine, target: Target) -> str | None:
    """Which matrix units the dimensions are checked for: those here (Tensor Cores, a TPU),
    or the target named; None on a CPU, whose units do not care."""
    if target == "tpu" or (target == "auto" and machine.tpu):
        return "TPU"
    if target == "gpu" or (target == "auto" and any(g.float16_tensor_cores for g in machine.gpus)):
        return "Tensor Cores"
    return None


def lint(prepared, profile: ForwardProfile, target: Target = "auto") -> list[Finding]:
    """Every finding for this model, experiment and machine (`prepared`: the experiment as
    `runs.experiment.prepare` set it up), warnings first, then by the layer's share of the
    FLOPs."""
    config, machine = prepared.config, prepared.machine
    units = alignment_units(machine, target)
    findings = [*(_alignment(profile, config, units) if units else []),
                *_small_model(config, profile, machine),
                *_numerics(prepared.model, profile.layers, prepared.choice, prepared.output),
                *target_findings(prepared.objective, prepared.data.labels, prepared.choice.compute_dtype),
                *feature_findings(prepared.data.raw_features, prepared.model, config)]
    return sorted(findings, key=lambda f: (f.severity != "warning", -(f.flops_share or 0)))



def target_findings(objective, stats, compute: str) -> list[Finding]:
    """A regression's targets as 16 bits of `compute` see them (before training: from the
    data's targets; `diagnose` asks for float16 too). Under float16 a squared error of
    targets past 256 exceeds 65,504, and its gradient times the loss scale overflows until
    the scale has fallen: steps are skipped, and a 16-bit output layer cannot even hold
    targets past 65,504. Under bfloat16
    the range is float32's but a value keeps 8 bits: near 1,000 the values a 16-bit output
    layer can give are 8 apart. Standardised targets (train.target_scaling) are near 1."""
    from mptrain.objective import Values

    if not isinstance(objective, Values) or objective.labels.scale is not None or isinstance(stats, dict):
        return []
    largest = max(abs(stats.low), abs(stats.high))
    fix = "set train.target_scaling: standard (the summary says the mean and deviation fitted)"
    if compute == "float16" and largest ** 2 > F16_MAX:
        return [_finding("targets", "warning", None,
                         f"the targets reach {largest:,.4g}: their squared error reaches "
                         f"{largest ** 2:,.4g}, past float16's 65,504, and its gradient times the "
                         "loss scale overflows until the scale has fallen (skipped steps)" +
                         (", and a float16 output layer cannot hold them" if largest > F16_MAX else "")
                         + f"; {fix}")]
    if compute == "bfloat16" and largest >= 256:
        step = 2.0 ** (int(largest).bit_length() - 8)
        return [_finding("targets", "info", None,
                         f"the targets reach {largest:,.4g}: a bfloat16 output layer's values near "
                         f"them are {step:g} apart (mptrain's own heads compute a regression's "
                         f"last layer in float32; a model of your own may not); {fix}")]
    return []


def feature_findings(features: tuple[tuple[str, float], ...], model, config) -> list[Finding]:
    """Vector features fed as stored (`Dataset.raw_features`) whose largest magnitudes are
    two orders of magnitude apart or more, unless the model adapts a Normalization of its
    own: a Dense layer's first steps follow the largest and learn little from the rest (a
    CSV of house sizes in the thousands beside distances in tenths trained to an MAE no
    better than predicting the mean)."""
    from mptrain.model.walk import leaf_layers

    scaled = sorted((top, name) for name, top in features if top > 0)
    if len(scaled) < 2 or scaled[-1][0] < 100 * scaled[0][0]:
        return []
    if any(type(layer).__name__ == "Normalization" for layer in leaf_layers(model)):
        return []
    (low, low_name), (high, high_name) = scaled[0], scaled[-1]
    fix = ("set data.normalize: true (each feature standardised with the training rows' mean "
           "and deviation)" if getattr(config.data, "normalize", None) is not None else
           "standardise them with the training rows' mean and deviation before saving, or start "
           "the model with a keras.layers.Normalization adapted on the training features")
    return [_finding("features", "warning", None,
                     f"the features are fed as stored, on scales {math.log10(high / low):.0f} orders "
                     f"of magnitude apart: {high_name} reaches {high:,.4g} and {low_name} "
                     f"{low:,.4g}; a Dense layer's first steps follow the largest and learn little "
                     f"from the rest (a regression can end no better than predicting the mean); {fix}")]


def _dimensions(layer) -> list[tuple[str, int]]:
    """(what, size) pairs of a layer that matrix units tile."""
    import keras

    kind = type(layer).__name__
    kernel = getattr(layer, "kernel", None)
    if kind in ("Dense", "EinsumDense") and kernel is not None and len(kernel.shape) == 2:
        return [("input features", int(kernel.shape[0])), ("units", int(kernel.shape[1]))]
    if kind in ("Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose") and kernel is not None:
        return [("input channels", int(kernel.shape[-2])), ("filters", int(kernel.shape[-1]))]
    if kind == "Embedding":
        return [("vocabulary", int(layer.input_dim)), ("embedding size", int(layer.output_dim))]
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return [("head size (key_dim)", int(layer.key_dim))]
    return []


def _alignment(profile: ForwardProfile, config, units: str) -> list[Finding]:
    findings = []
    sized = [(layer, dims) for layer in profile.layers if (dims := _dimensions(layer))]
    for index, (layer, dims) in enumerate(sized):
        share = profile.flops_by_layer.get(layer.name, 0) / max(profile.flops, 1)
        for what, size in dims:
            # fixed by the data (the first layer's inputs, RGB) or the task (the output layer's
            # units are the classes, whoever wrote the model)
            fixed = ((index == 0 and what in ("input features", "input channels"))
                     or (index == len(sized) - 1 and what == "units"))
            if (misaligned := _misaligned(size, units)) is None:
                continue
            message, nearest = misaligned
            negligible = share < NEGLIGIBLE_SHARE and what != "vocabulary"
            severity = "info" if fixed or negligible else "warning"
            if fixed:  # no size to suggest: it is not the model's to choose
                fix = "set by the data or the number of classes; padding them seldom pays"
            elif negligible:
                fix = (f"use {nearest}; only {share:.1%} of the FLOPs: aligning it would not change "
                       "the step time")
            else:
                fix = f"use {nearest}; {model_kind(config.model).resize_hint(layer.name, what)}"
            findings.append(_finding("alignment", severity, layer.name,
                                    f"{layer.name}: {what} {size} {message}: {fix}", share))
    batch = config.train.batch_size
    if (misaligned := _misaligned(batch, units)) is not None:
        message, nearest = misaligned
        findings.append(_finding("alignment", "warning", None,
                                f"batch size {batch} {message}: use {nearest}; set train.batch_size",
                                None))
    return findings


def _misaligned(size: int, units: str) -> tuple[str, int] | None:
    """('is not a multiple of 8 (Tensor Cores)', the closest multiple: halfway, the larger
    one, more capacity rather than less), or None when aligned."""
    multiple = TPU_MULTIPLE if units == "TPU" else TENSOR_CORE_MULTIPLE
    nearest = max(multiple, int(size / multiple + 0.5) * multiple)
    return None if size % multiple == 0 else (f"is not a multiple of {multiple} ({units})", nearest)


def _small_model(config, profile, machine) -> list[Finding]:
    """Arithmetic per step at float32's peak against the cost of launching the step's ops.
    16 bits can only shorten the arithmetic; when even float32's takes less time than the
    launches, fixed costs dominate and the gain is small. (At the 16-bit peak the test would
    flag models whose measured step is hundreds of times their arithmetic: MFU on a CPU is
    a few percent of the AMX peak.)"""
    from mptrain.model.flops import cpu_peak

    if machine.accelerated or (peak := cpu_peak(machine.cpu, "float32")) is None:
        return []
    flops = profile.training_flops * config.train.batch_size
    compute = flops / peak.flops_per_second
    launch = 3 * profile.ops * LAUNCH_SECONDS
    if compute >= launch:
        return []
    # A note, never a warning: it is an estimate from a rule of thumb, which a measured step
    # time (`run`'s summary, `mptrain plan`) overrules; so `run` does not print it.
    return [_finding("small_model", "info", None,
                    f"model may be too small to gain from 16 bits (an estimate): a step's arithmetic "
                    f"({flops / 1e6:,.1f} MFLOP) takes ~{compute * 1e6:,.0f} µs at this CPU's "
                    f"float32 peak, less than launching its ~{3 * profile.ops} operations "
                    f"(~{launch * 1e6:,.0f} µs): fixed costs dominate, and halving the arithmetic "
                    "cannot halve the step. A larger train.batch_size or a wider model gives 16 "
                    "bits work to speed up; `mptrain plan` measures it", None)]


def _numerics(model, layers, choice, output: str) -> list[Finding]:
    import keras

    findings = []
    # Logits in 16 bits are fine: mptrain casts them to float32 and the loss applies its
    # softmax there (from_logits). Probabilities are not: their softmax already ran in 16 bits.
    if output == "probabilities" and _cast_after_16_bits(model):
        findings.append(_finding(
            "output_dtype", "warning", None,
            f"the model's softmax or sigmoid output computes in {choice.compute_dtype} (mptrain "
            "casts it to float32 after): give that last activation dtype='float32' in the "
            "model, as the guide does, or return logits (mptrain then applies the softmax in "
            "float32 inside the loss)", None))
    if choice.compute_dtype == "float32":
        return findings
    for layer in layers:
        policy = layer.dtype_policy.name
        wanted_variables = layer.variable_dtype
        odd = [v.path for v in layer.weights
               if keras.backend.standardize_dtype(v.dtype) not in (wanted_variables, "int64", "int32")
               and "seed_generator" not in v.path]
        if odd:
            findings.append(_finding("policy_ignored", "warning", layer.name,
                                    f"{layer.name}: variables {', '.join(odd[:3])} are not "
                                    f"{wanted_variables} under {policy}: the layer creates them "
                                    "with a fixed dtype instead of following the policy", None))
        compute = layer.compute_dtype
        # every tensor of its output: an LSTM's states, an attention's scores come beside it
        produced = keras.tree.flatten(getattr(layer, "output", []))
        if compute in ("float16", "bfloat16") and "float32" in {
                keras.backend.standardize_dtype(t.dtype) for t in produced} and type(
                layer).__name__ not in ("LayerNormalization", "BatchNormalization"):
            findings.append(_finding("policy_ignored", "info", layer.name,
                                    f"{layer.name}: computes under {policy} but outputs float32 "
                                    "(it casts up, or ignores the policy)", None))
        is_softmax = type(layer).__name__ == "Softmax" or (
            type(layer).__name__ == "Activation" and getattr(layer.activation, "__name__", "") == "softmax")
        if is_softmax and compute in ("float16", "bfloat16"):
            findings.append(_finding("softmax_16bit", "warning", layer.name,
                                    f"{layer.name}: softmax in {compute}; keep it float32 with "
                                    f"model.float32_layers: [{layer.name}]", None))
        if isinstance(layer, keras.layers.MultiHeadAttention) and attention_dropout(layer) > 0:
            inner = attention_softmax(layer)
            if inner is not None and inner.compute_dtype in ("float16", "bfloat16"):
                findings.append(_finding(
                    "softmax_16bit", "warning", layer.name,
                    f"{layer.name}: with attention dropout Keras computes the attention softmax "
                    f"in {inner.compute_dtype}; mptrain's transformer avoids it "
                    "(Float32SoftmaxAttention), or keep the layer float32 with "
                    f"model.float32_layers: [{layer.name}]", None))
    return findings


def _cast_after_16_bits(model) -> bool:
    """Whether the model's first output was computed in 16 bits and cast to float32 after:
    by the linear float32 Activation `model.ensure_float32_output` appends (or one of the
    model's own), or in the call of a model with its own step (`own_step.casts_in_place`:
    its symbolic output keeps the 16-bit dtype)."""
    import keras

    tensor = model.outputs[0]
    cast = producer(tensor)
    if type(cast).__name__ == "Activation" and cast.compute_dtype == "float32" and getattr(
            cast.activation, "__name__", "") == "linear" and inputs_of(tensor):
        tensor = inputs_of(tensor)[0]
    return keras.backend.standardize_dtype(tensor.dtype) in ("float16", "bfloat16")


def worth_saying(findings: list[Finding], limit: int = 5) -> list[str]:
    """The warnings `run` prints before training (the rest are in `mptrain lint`)."""
    warnings = [f.message for f in findings if f.severity == "warning"]
    more = len(warnings) - limit
    return warnings[:limit] + ([f"... and {more} more: `mptrain lint` lists them"] if more > 0 else [])
