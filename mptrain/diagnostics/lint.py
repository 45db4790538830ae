"""`mptrain lint`: what in a model keeps 16-bit training from being fast or safe, statically.

From the built model (nothing trains):
- dimensions that Tensor Cores want as multiples of 8, and TPUs as multiples of 128 (the
  guide's performance advice): Dense units and input features, convolution filters and input
  channels, attention head sizes, embedding sizes and vocabularies, the batch size; each with
  the nearest aligned value and the layer's share of the model's FLOPs, largest first;
- a model too small to gain: its arithmetic per step takes less time than launching the
  step's operations;
- numerics: an output that was not float32, a layer that ignores the policy (variables or
  outputs in an unexpected dtype), a softmax computed in 16 bits.
Every finding says what to change in the YAML. Warnings decide the exit code; infos
(dimensions fixed by the data or the task) are listed for completeness.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

TENSOR_CORE_MULTIPLE, TPU_MULTIPLE = 8, 128
# Per-operation launch cost (kernel dispatch, framework bookkeeping): a rule of thumb, not a
# measurement of this machine; small models are flagged only when far below it.
LAUNCH_SECONDS = {"CPU": 5e-6, "GPU": 10e-6, "TPU": 10e-6}


@dataclass(frozen=True)
class Finding:
    kind: str  # alignment | small_model | output_dtype | policy_ignored | softmax_16bit
    severity: str  # warning | info
    layer: str | None
    message: str
    flops_share: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def lint(model, config, choice, machine, profile, notes: list[str]) -> list[Finding]:
    """Every finding for this model, experiment and machine, warnings first, then by the
    layer's share of the FLOPs."""
    total = max(profile.flops, 1)
    findings = [*_alignment(model, config, profile.flops_by_layer, total, machine),
                *_small_model(config, profile, machine),
                *_numerics(model, choice, notes)]
    return sorted(findings, key=lambda f: (f.severity != "warning", -(f.flops_share or 0)))


def _layers(model):
    """Every layer, those inside nested models (an application's backbone) included."""
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            yield from _layers(layer)
        else:
            yield layer


def _dimensions(layer) -> list[tuple[str, int]]:
    """(what, size) pairs of a layer that matrix units tile."""
    kind = type(layer).__name__
    kernel = getattr(layer, "kernel", None)
    if kind in ("Dense", "EinsumDense") and kernel is not None and len(kernel.shape) == 2:
        return [("input features", int(kernel.shape[0])), ("units", int(kernel.shape[1]))]
    if kind in ("Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose") and kernel is not None:
        return [("input channels", int(kernel.shape[-2])), ("filters", int(kernel.shape[-1]))]
    if kind == "Embedding":
        return [("vocabulary", int(layer.input_dim)), ("embedding size", int(layer.output_dim))]
    if isinstance_name(layer, "MultiHeadAttention"):
        return [("head size (key_dim)", int(layer.key_dim))]
    return []


def isinstance_name(layer, name: str) -> bool:
    return any(cls.__name__ == name for cls in type(layer).__mro__)


def _alignment(model, config, flops_by_layer, total, machine) -> list[Finding]:
    findings = []
    sized = [(layer, dims) for layer in _layers(model) if (dims := _dimensions(layer))]
    first_layer = True
    for layer, dims in sized:
        share = flops_by_layer.get(layer.name, 0) / total
        for what, size in dims:
            # fixed by the data (the first layer's inputs, RGB) or the task (the output layer's
            # units are the classes, whoever wrote the model)
            fixed = ((first_layer and what in ("input features", "input channels"))
                     or (layer is sized[-1][0] and what == "units"))
            message = _misaligned(size, machine)
            if message is None:
                continue
            severity = "info" if fixed else "warning"
            fix = ("set by the data or the number of classes; padding them seldom pays"
                   if fixed else _yaml_hint(layer.name, what, config))
            findings.append(Finding("alignment", severity, layer.name,
                                    f"{layer.name}: {what} {size} {message}; {fix}", share))
        first_layer = False
    batch = config.train.batch_size
    message = _misaligned(batch, machine)
    if message is not None:
        findings.append(Finding("alignment", "warning", None,
                                f"batch size {batch} {message}; set train.batch_size", None))
    return findings


def _misaligned(size: int, machine) -> str | None:
    """'is not a multiple of 8 (Tensor Cores): use 72' or None when aligned. The TPU
    multiple is checked only where a TPU is present."""
    parts = []
    if size % TENSOR_CORE_MULTIPLE:
        parts.append(f"is not a multiple of {TENSOR_CORE_MULTIPLE} (Tensor Cores): "
                     f"use {_nearest(size, TENSOR_CORE_MULTIPLE)}")
    if machine.tpu and size % TPU_MULTIPLE:
        parts.append(f"not a multiple of {TPU_MULTIPLE} (TPU): use {_nearest(size, TPU_MULTIPLE)}")
    return "; ".join(parts) or None


def _nearest(size: int, multiple: int) -> int:
    """The closest multiple (halfway: the larger one, more capacity rather than less)."""
    return max(multiple, int(size / multiple + 0.5) * multiple)


def _yaml_hint(layer: str, what: str, config) -> str:
    kind = config.model.kind
    if kind == "mlp" and (layer.startswith("dense_") or layer == "logits"):
        return "change it in model.hidden_units"
    if kind == "cnn":
        return "change it in model.filters" if layer.startswith("conv_") else \
            "change it in model.dense_units"
    if kind == "transformer":
        return ("change model.embed_dim / model.num_heads / model.mlp_dim"
                if "vocabulary" not in what else "change data.max_tokens or model.vocab_size")
    return "change it in the model's definition (builder kwargs, or the architecture)"


def _small_model(config, profile, machine) -> list[Finding]:
    """Arithmetic per step at float32's peak against the cost of launching the step's ops.
    16 bits can only shorten the arithmetic; when even float32's takes less time than the
    launches, fixed costs dominate and the gain is small. (At the 16-bit peak the test would
    flag models whose measured step is hundreds of times their arithmetic: MFU on a CPU is
    a few percent of the AMX peak.)"""
    from mptrain.flops import cpu_peak

    device = "TPU" if machine.tpu else "GPU" if machine.gpus else "CPU"
    peak = None if machine.accelerated else cpu_peak(machine.cpu, "float32")
    if peak is None:
        return []
    flops = 3 * profile.flops * config.train.batch_size
    compute = flops / peak.flops_per_second
    launch = 3 * profile.ops * LAUNCH_SECONDS[device]
    if compute >= launch:
        return []
    return [Finding("small_model", "warning", None,
                    f"model too small to gain from 16 bits: a step's arithmetic "
                    f"({flops / 1e6:,.1f} MFLOP) takes ~{compute * 1e6:,.0f} µs at this {device}'s "
                    f"float32 peak, less than launching its ~{3 * profile.ops} operations "
                    f"(~{launch * 1e6:,.0f} µs): fixed costs dominate, and halving the arithmetic "
                    "cannot halve the step. A larger train.batch_size or a wider model gives 16 "
                    "bits work to speed up", None)]


def _numerics(model, choice, notes: list[str]) -> list[Finding]:
    import keras

    findings = []
    if any("appended a float32" in note for note in notes):
        findings.append(Finding(
            "output_dtype", "warning", None,
            "the model's own output was not float32 (mptrain appended a float32 output): its "
            "softmax or last layer computes in 16 bits; give the last activation "
            "dtype='float32' in the model, as the guide does", None))
    if choice.compute_dtype == "float32":
        return findings
    for layer in _layers(model):
        policy = layer.dtype_policy.name
        wanted_variables = layer.variable_dtype
        odd = [v.path for v in layer.weights
               if keras.backend.standardize_dtype(v.dtype) not in (wanted_variables, "int64", "int32")
               and "seed_generator" not in v.path]
        if odd:
            findings.append(Finding("policy_ignored", "warning", layer.name,
                                    f"{layer.name}: variables {', '.join(odd[:3])} are not "
                                    f"{wanted_variables} under {policy}: the layer creates them "
                                    "with a fixed dtype instead of following the policy", None))
        output = getattr(layer, "output", None)
        compute = layer.compute_dtype
        if output is not None and compute in ("float16", "bfloat16") and not isinstance_name(
                layer, "InputLayer"):
            out = keras.backend.standardize_dtype(output.dtype)
            if out == "float32" and type(layer).__name__ not in ("LayerNormalization",
                                                                   "BatchNormalization"):
                findings.append(Finding("policy_ignored", "info", layer.name,
                                        f"{layer.name}: computes under {policy} but outputs float32 "
                                        "(it casts up, or ignores the policy)", None))
        is_softmax = type(layer).__name__ == "Softmax" or (
            type(layer).__name__ == "Activation" and getattr(layer.activation, "__name__", "") == "softmax")
        if is_softmax and compute in ("float16", "bfloat16"):
            findings.append(Finding("softmax_16bit", "warning", layer.name,
                                    f"{layer.name}: softmax in {compute}; keep it float32 with "
                                    f"model.float32_layers: [{layer.name}]", None))
        if isinstance_name(layer, "MultiHeadAttention") and getattr(layer, "_dropout", 0) > 0:
            inner = getattr(layer, "_softmax", None)
            if inner is not None and inner.compute_dtype in ("float16", "bfloat16"):
                findings.append(Finding(
                    "softmax_16bit", "warning", layer.name,
                    f"{layer.name}: with attention dropout Keras computes the attention softmax "
                    f"in {inner.compute_dtype}; mptrain's transformer avoids it "
                    "(Float32SoftmaxAttention), or keep the layer float32 with "
                    f"model.float32_layers: [{layer.name}]", None))
    return findings


def summary_line(findings: list[Finding]) -> str:
    warnings = sum(f.severity == "warning" for f in findings)
    infos = len(findings) - warnings
    return f"{warnings} warning(s), {infos} note(s)" if findings else "no findings"


def worth_saying(findings: list[Finding], limit: int = 5) -> list[str]:
    """The warnings `run` prints before training (the rest are in `mptrain lint`)."""
    warnings = [f.message for f in findings if f.severity == "warning"]
    more = len(warnings) - limit
    return warnings[:limit] + ([f"... and {more} more: `mptrain lint` lists them"] if more > 0 else [])



def lint_experiment(config, verbose: bool = False) -> tuple[list[Finding], dict]:
    """Build the experiment's model under the policy it would run with, and lint it."""
    from mptrain.data import load_dataset
    from mptrain.flops import forward_profile
    from mptrain.hardware import probe
    from mptrain.model import build_model, check_model_fits
    from mptrain.policy import apply_policy, choose_policy
    from mptrain.preflight import check_experiment
    from mptrain.tf_runtime import import_tensorflow, seed_everything

    check_experiment(config)
    tf = import_tensorflow(verbose)
    spec = load_dataset(config.data, config.seed).spec
    check_model_fits(config, spec)
    machine = probe(tf, check_xla=False)
    choice = choose_policy(config.policy, config.train.jit_compile, machine,
                           config.train.xla_optimizer_update)
    seed_everything(config.seed)
    apply_policy(choice.name)
    try:
        built = build_model(config, spec)
        profile = forward_profile(built.model)
        findings = lint(built.model, config, choice, machine, profile, built.notes)
    finally:
        apply_policy("float32")
    context = {"experiment": config.name, "policy": choice.name, "device": machine.device_label,
               "flops_per_example": 3 * profile.flops, "operations": profile.ops}
    return findings, context
