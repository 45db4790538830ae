"""mptrain plan's decisions on recorded machines and timings (nothing trains): which
candidates a machine can run, the accuracy guard, the choice, float32 islands; and the kernel
measurement `policy: auto` decides on, cached per machine and TensorFlow version."""

import re

import pytest

from mptrain.errors import ConfigError
from mptrain.hardware.kernels import cached_kernels
from mptrain.hardware.machine import Machine, gpu_from_details, parse_cpuinfo
from mptrain.measure.islands import LayerTiming, islands
from mptrain.measure.trials import choose
from mptrain.measure.variant import Variant
from mptrain.measure.verdicts import TWIN, Rules, judge_rows
from mptrain.measure.whole_run import RunLength, whole_run_estimate
from mptrain.model.fused import NOTHING_TO_FUSE
from mptrain.precision.candidates import CANDIDATE_NAMES, Candidate, candidate_name, candidates, select
from mptrain.precision.policy import recommend
from tests.helpers import make_summary, record_kernels, tiny_raw

AMX = Machine(cpu=parse_cpuinfo("model name : Xeon AMX\nflags : avx512f avx512_bf16 amx_bf16"),
              tensorflow_version="2.21.0")
AVX512_BF16 = Machine(cpu=parse_cpuinfo("model name : Xeon\nflags : avx512f avx512_bf16"),
                      tensorflow_version="2.21.0")
PLAIN = Machine(cpu=parse_cpuinfo("model name : Old\nflags : avx2"), tensorflow_version="2.21.0")


def gpu_machine(major, minor):
    return Machine(cpu=PLAIN.cpu, tensorflow_version="2.21.0", gpus=(gpu_from_details(
        {"device_name": "GPU", "compute_capability": (major, minor)}),))


def names(found):
    return [c.name for c in found if c.why_not is None]


def test_each_machine_gets_the_candidates_that_can_win_there():
    """Without a measurement, only the rules said as rules; XLA is an axis of its own:
    float32+xla, the control of every 16-bit candidate with XLA, on CPUs and GPUs alike."""
    assert names(candidates(AMX)) == ["float32", "float32+xla", "mixed_bfloat16", "mixed_bfloat16+xla",
                                      "mixed_bfloat16+fused", "mixed_float16+xla", "float32+onednn_bf16",
                                      "float32+graph_bf16"]
    # +fused only where the model has a Conv2D or BatchNormalization for it to change
    unfusable = {c.name: c.why_not for c in candidates(AMX, unfused=NOTHING_TO_FUSE)}
    assert "the same as mixed_bfloat16" in unfusable["mixed_bfloat16+fused"]
    skipped = {c.name: c.why_not for c in candidates(AMX) if c.why_not}
    # oneDNN on, nothing measured: float16 takes XLA by the rule, which says it is not measured
    assert "the same as mixed_float16+xla" in skipped["mixed_float16"]
    assert "not measured" in skipped["mixed_float16"]
    plain = candidates(PLAIN)
    assert names(plain) == ["float32", "float32+xla", "mixed_float16+xla"]
    assert all("no bfloat16 instructions" in c.why_not and "not measured" in c.why_not
               for c in plain if c.policy == "mixed_bfloat16" and c.math_library == "default")
    # the math library TensorFlow does not choose: oneDNN is tried unmeasured where TensorFlow
    # leaves it off (the largest lever of an AVX2-only CPU), Eigen only once it measured near
    zen3 = candidates(Machine(cpu=PLAIN.cpu, tensorflow_version="2.21.0", onednn=False))
    assert "float32+onednn" in names(zen3) and "float32+eigen" not in {c.name for c in zen3}
    zen3_skipped = {c.name: c.why_not for c in zen3 if c.why_not}
    assert "oneDNN takes no bfloat16 on this CPU" in zen3_skipped["mixed_bfloat16+onednn"]
    assert "not measured" in skipped["float32+eigen"]
    # oneDNN off: no math mode of its to change, and float16 needs no XLA (TensorFlow's own kernels)
    off = Machine(cpu=AMX.cpu, tensorflow_version="2.21.0", onednn=False)
    off_skipped = {c.name: c.why_not for c in candidates(off) if c.why_not}
    assert "oneDNN is off" in off_skipped["float32+onednn_bf16"]
    # oneDNN forced on where it takes no bfloat16 (AVX2 only): its math modes change nothing
    forced = Machine(cpu=PLAIN.cpu, tensorflow_version="2.21.0", onednn=True)
    forced_skipped = {c.name: c.why_not for c in candidates(forced) if c.why_not}
    assert "oneDNN takes no bfloat16 on this CPU" in forced_skipped["float32+graph_bf16"]
    assert "float32+onednn_bf16" not in {c.name: c.why_not for c in candidates(AMX) if c.why_not}
    assert "mixed_float16" in names(candidates(off))
    assert names(candidates(gpu_machine(7, 0))) == ["float32", "float32+xla", "mixed_float16",
                                                    "mixed_float16+xla"]
    assert names(candidates(gpu_machine(8, 0))) == ["float32", "float32+xla", "mixed_bfloat16",
                                                    "mixed_bfloat16+xla", "mixed_float16",
                                                    "mixed_float16+xla", "float32+tf32_off"]
    assert names(candidates(Machine(cpu=PLAIN.cpu, tpu=True))) == ["float32", "mixed_bfloat16"]
    every = {c.name for m in (AMX, PLAIN, gpu_machine(8, 0)) for c in candidates(m)}
    assert every <= set(CANDIDATE_NAMES)


def test_a_candidate_is_ruled_out_by_this_machines_own_figure_and_tried_when_named(tmp_path, monkeypatch):
    """An AVX2-only CPU (oneDNN off): bfloat16 emulated at 0.27x, float16 at float32's speed
    without XLA. The bfloat16 candidates are skipped quoting 0.27x from this machine (never
    another machine's figure), float16 runs without XLA, float32+xla is tried; and any
    candidate named is tried."""
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    zen3 = Machine(cpu=PLAIN.cpu, tensorflow_version="2.21.0", onednn=False)
    kernels = record_kernels(zen3, bfloat16=0.27, float16=0.96, xla_gain=1.3, library_gain=3.2)
    found = candidates(zen3, kernels)
    # the kernels order what is tried: oneDNN's 3.2x first (float32+xla, a control, stays second)
    assert names(found) == ["float32", "float32+xla", "float32+onednn", "mixed_float16+xla",
                            "mixed_float16"]
    why = {c.name: c.why_not for c in found if c.why_not}
    assert "oneDNN takes no float16 on this CPU" in why["mixed_float16+onednn"]
    assert "bfloat16 kernels run 0.27x float32 on CPU:0" in why["mixed_bfloat16"]
    assert "bfloat16 kernels with XLA run 0.27x float32 with XLA" in why["mixed_bfloat16+xla"]
    assert not any("guide's MLP" in w or "bench/NOTES" in w for w in why.values())
    assert names(select(found, ["mixed_bfloat16"])) == ["float32", "mixed_bfloat16"]
    # the AVX512_BF16 Xeon with oneDNN on: float16's fused kernel collapsed without XLA
    xeon = record_kernels(AVX512_BF16, bfloat16=0.67, float16=0.001, xla_bfloat16=1.1)
    why = {c.name: c.why_not for c in candidates(AVX512_BF16, xeon) if c.why_not}
    assert "0.001x float32 on this CPU (oneDNN's reference kernel)" in why["mixed_float16"]
    assert "mixed_bfloat16+xla" not in why and "0.67x" in why["mixed_bfloat16"]
    # Eigen where TensorFlow runs oneDNN: ruled out by its own figure, each library's 16 bits
    # read against float32 as TensorFlow runs it here (0.67x in Eigen x Eigen's 0.5x)
    eigen_slow = record_kernels(AVX512_BF16, bfloat16=0.67, float16=0.001, library_gain=0.5)
    why = {c.name: c.why_not for c in candidates(AVX512_BF16, eigen_slow) if c.why_not}
    assert "measured 0.50x float32 as TensorFlow runs it here, with float32 and Eigen together" in \
        why["float32+eigen"]
    assert "measured 0.34x float32 as TensorFlow runs it here, with bfloat16 and Eigen together" in \
        why["mixed_bfloat16+eigen"]
    eigen_near = record_kernels(AVX512_BF16, bfloat16=0.67, float16=0.001, library_gain=0.95)
    assert "float32+eigen" in names(candidates(AVX512_BF16, eigen_near))


def test_the_models_own_kinds_of_layer_decide_its_candidates(tmp_path, monkeypatch):
    """bfloat16's matrix products measured 1.2x but its Conv1D 0.15x: a Conv1D model does not
    try bfloat16 (a Conv1D autoencoder ran 0.15x where check-gpu had measured 0.95x), an MLP
    does; a model with none of the timed kinds is read by the general ones. A model's kinds
    weigh as its FLOPs do: a Conv1D stack with a small Dense head reads its convolutions."""
    import keras

    from mptrain.hardware.kernels import kind_shares
    from mptrain.model.layers import Float32SoftmaxAttention

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    kernels = record_kernels(AVX512_BF16, bfloat16=1.2, float16=0.001, kinds={"conv1d": 0.15})
    conv1d = kind_shares([(keras.layers.InputLayer, 0), (keras.layers.Conv1D, 900),
                          (keras.layers.Conv1DTranspose, 90), (keras.layers.Dense, 10)])
    assert conv1d == {"conv1d": 0.99, "dense": 0.01}
    assert kind_shares([(keras.layers.Dense, 0), (keras.layers.LSTM, 0)]) == {"dense": 0.5, "recurrent": 0.5}
    assert kind_shares([(Float32SoftmaxAttention, 5)]) == {"attention": 1.0}  # by its ancestry
    why = {c.name: c.why_not for c in candidates(AVX512_BF16, kernels, kinds=conv1d) if c.why_not}
    assert "bfloat16 kernels run 0.15x float32 on CPU:0 (dense 1.20x, conv1d 0.15x)" in why["mixed_bfloat16"]
    weighed = 1 / (0.99 / 0.15 + 0.01 / 1.2)  # the model's time at float32 over its time at bfloat16
    assert kernels.speedup("bfloat16", "/CPU:0", kinds=conv1d) == pytest.approx(weighed)
    assert "mixed_bfloat16" in names(candidates(AVX512_BF16, kernels, kinds=("dense",)))
    assert "mixed_bfloat16" in names(candidates(AVX512_BF16, kernels, kinds=("embedding",)))


def test_plan_reads_the_kernels_of_the_models_own_kinds_of_layer(tmp_path, monkeypatch):
    """The wiring, on a built Conv1D model (nothing trains): plan's candidates are ruled out
    by this machine's kernels of the model's own kinds, its convolutions (0.15x in bfloat16
    here), not by the general ones (1.2x), which would have tried a trial that cannot win."""
    from mptrain.config import validate
    from mptrain.precision.candidates import model_candidates
    from mptrain.runs.experiment import prepare

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    (tmp_path / "conv1d.py").write_text(
        "import keras\n"
        "def build(input_shape, num_classes):\n"
        "    inputs = keras.Input(input_shape)\n"
        "    x = keras.layers.Conv1D(32, 5, activation='relu')(inputs)\n"
        "    x = keras.layers.GlobalAveragePooling1D()(x)\n"
        "    return keras.Model(inputs, keras.layers.Dense(num_classes, activation='softmax')(x))\n")
    builder = f"model={{kind: python, builder: '{tmp_path / 'conv1d.py'}:build'}}"
    prepared = prepare(validate(tiny_raw(f"output.dir={tmp_path}", "data.input_shape=[64, 4]", builder),
                                "<test>"))
    record_kernels(prepared.machine, bfloat16=1.2, float16=0.001, kinds={"conv1d": 0.15})
    found, kinds = model_candidates(prepared)
    assert max(kinds, key=kinds.get) == "conv1d"
    why = {c.name: c.why_not for c in found}
    assert "conv1d 0.15x" in why["mixed_bfloat16"], why


def test_measured_kernels_put_the_promising_candidates_first(tmp_path, monkeypatch):
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    slow_bf16 = record_kernels(AVX512_BF16, bfloat16=0.85, float16=1.2)
    order = [c.name for c in candidates(AVX512_BF16, slow_bf16)]
    assert order[:2] == ["float32", "float32+xla"]  # float32+xla: the control, second
    assert order[2].startswith("mixed_float16")  # bf16 measured slower


def test_under_op_determinism_no_candidate_runs_xla_and_naming_one_is_refused(tmp_path, monkeypatch):
    """Keras compiles no step with XLA under op determinism, so a `+xla` trial would measure
    something else than its name; mixed_float16 is then its own collapsed kernel, not XLA's."""
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    xeon = record_kernels(AVX512_BF16, bfloat16=1.2, float16=0.001, xla_float16=0.95)
    found = {c.name: c.why_not for c in candidates(AVX512_BF16, xeon, deterministic=True)}
    assert all(why and "deterministic: true" in why for name, why in found.items() if "+xla" in name)
    assert "0.001x float32" in found["mixed_float16"] and found["mixed_bfloat16"] is None
    with pytest.raises(ConfigError, match="--candidates float32[+]xla: deterministic: true"):
        select(candidates(AVX512_BF16, xeon, deterministic=True), ["float32+xla"])
    assert all(c.why_not is None for c in candidates(AVX512_BF16, xeon) if c.name == "float32+xla")


def test_select_keeps_float32_and_refuses_unknown_names():
    found = candidates(AMX)
    assert [c.name for c in select(found, ["mixed_bfloat16"])] == ["float32", "mixed_bfloat16"]
    with pytest.raises(ConfigError, match=re.escape("unknown 'float32+tf32_off'; on this machine")):
        select(found, ["float32+tf32_off"])


def rounds_of(median, spread=0.02, count=8, seed=0):
    """Per-round medians as the engine records them: around `median`, within its spread,
    each trial's noise its own."""
    import random

    noise = random.Random(seed)
    return [median * (1 + noise.uniform(-spread, spread)) for _ in range(count)]


def losses(start, end, count=12, nan=0):
    """Step records whose loss falls evenly from `start` to `end` (the last `nan` NaN)."""
    from mptrain.training.records import StepRecord

    values = [start + (end - start) * i / (count - 1) for i in range(count)]
    values[count - nan:] = [float("nan")] * nan
    return [StepRecord(i + 1, 1, v, 0.2, 64) for i, v in enumerate(values)]


def trial(name, policy, median, spread=0.02, end=0.5, status="finished", nan=0, accuracy=0.9,
          first_step_s=2.0, rounds=None, start=2.3):
    """A trial as plan records it, and its step records (float32's loss falls 2.3 → 0.5)."""
    summary = make_summary(median=median, spread=spread, status=status, accuracy=accuracy,
                           time_to_first_step_s=first_step_s)
    made = Variant(label=name, candidate=Candidate(name=name.replace(TWIN, "float32"), policy=policy),
                 run_dir="/tmp/x", summary=summary,
                 rounds=rounds if rounds is not None else rounds_of(median, spread, seed=name))
    return made, losses(start, end, nan=nan)


def judged(*specs, tolerance=3.0, evaluate=False, experiment_steps=0):
    made = [trial(*spec[:3], **(spec[3] if len(spec) > 3 else {})) for spec in specs]
    steps = {t.label: records for t, records in made}
    return judge_rows([t for t, _ in made], steps,
                      Rules(tolerance, evaluate, length=RunLength(experiment_steps)))


def test_where_bf16_wins_plan_picks_it():
    trials = judged(("float32", "float32", 300.0), ("mixed_bfloat16", "mixed_bfloat16", 100.0),
                    ("mixed_bfloat16+xla", "mixed_bfloat16", 280.0))
    assert [t.verdict.eligible for t in trials] == [False, True, True]  # float32 is the baseline
    winner, reason = choose(trials)
    assert winner == "mixed_bfloat16" and reason.startswith("3.00x float32")


def test_where_bf16_loses_plan_keeps_float32():
    """AVX512_BF16 without AMX: bf16 measured 1.9x slower on the guide's MLP."""
    trials = judged(("float32", "float32", 3000.0), ("mixed_bfloat16", "mixed_bfloat16", 5700.0),
                    ("float32+onednn_bf16", "float32", 3020.0))
    assert trials[1].verdict.speed.word == "slower" and trials[2].verdict.speed.word == "same speed"
    assert choose(trials) == ("float32", "no candidate tried (mixed_bfloat16, float32+onednn_bf16) "
                                         "was faster than float32 beyond the noise")


def test_a_plan_that_ran_only_float32_says_so_and_states_no_verdict():
    """An AVX2-only CPU whose candidates were all ruled out: no 'faster beyond the noise'
    about trials that never ran."""
    only = judged(("float32", "float32", 195.0))
    winner, reason = choose(only, ["mixed_bfloat16", "mixed_float16"])
    assert winner == "float32" and reason.startswith("only float32 was measured (not tried: "
                                                     "mixed_bfloat16, mixed_float16")
    assert "noise" not in reason


def test_the_loss_guard_holds_a_candidate_to_float32s_progress_not_its_final_loss():
    """Issue 34's ResNet50: every candidate fell from 3.5 to near zero, as float32 did; a
    tolerance relative to the final loss called them +55% to +122% worse. Against float32's
    progress they made 98-100% of it, and pass; a candidate whose loss stays well above
    float32's, or that trains nowhere, is behind."""
    trials = judged(("float32", "float32", 700.0, {"start": 3.494, "end": 0.0325}),
                    ("mixed_bfloat16", "mixed_bfloat16", 600.0, {"start": 3.512, "end": 0.0444}),
                    ("float32+graph_bf16", "float32", 690.0, {"start": 3.453, "end": 0.0728}),
                    ("mixed_bfloat16+islands", "mixed_bfloat16", 650.0, {"start": 3.511, "end": 0.0961}),
                    ("mixed_float16+xla", "mixed_float16", 600.0, {"start": 3.5, "end": 0.6}))
    assert [t.verdict.training.behind for t in trials[1:]] == [False, False, False, True]
    assert trials[1].verdict.training.share == pytest.approx(0.997, abs=0.002)
    assert "loss behind (84%)" in trials[4].verdict.words()
    assert not trials[4].verdict.eligible and trials[1].verdict.eligible
    assert choose(trials)[0] == "mixed_bfloat16"
    stuck = judged(("float32", "float32", 300.0, {"start": 2.3, "end": 2.2}),
                   ("mixed_bfloat16", "mixed_bfloat16", 100.0, {"start": 2.3, "end": 2.3}))
    assert stuck[1].verdict.training.share is None  # the loss barely moved: against its level
    assert stuck[1].verdict.training.behind


def test_float32s_twin_widens_the_loss_allowance_and_sets_the_speed_floor():
    """The A/A twin: float32's own run-to-run difference (here 0.1 in loss, and a noisy
    speed) is not held against a candidate."""
    noisy = [300.0 * f for f in (0.9, 1.1, 0.95, 1.05, 0.92, 1.08, 1.0, 0.97)]
    alone = judged(("float32", "float32", 300.0, {"start": 2.3, "end": 2.0, "rounds": [300.0] * 8}),
                   ("mixed_bfloat16", "mixed_bfloat16", 290.0,
                    {"start": 2.3, "end": 2.15, "rounds": [290.0, 291.0, 289.0, 290.0] * 2}))
    assert alone[1].verdict.training.behind and alone[1].verdict.speed.word == "faster"
    twinned = judged(("float32", "float32", 300.0, {"start": 2.3, "end": 2.0, "rounds": [300.0] * 8}),
                     (TWIN, "float32", 300.0, {"start": 2.3, "end": 2.1, "rounds": noisy}),
                     ("mixed_bfloat16", "mixed_bfloat16", 290.0,
                      {"start": 2.3, "end": 2.15, "rounds": [290.0, 291.0, 289.0, 290.0] * 2}))
    assert not twinned[2].verdict.training.behind
    assert twinned[2].verdict.speed.word == "same speed"  # 1.03x is inside the twin's noise
    assert choose(twinned)[0] == "float32"


def test_a_trial_cut_short_by_the_step_limit_is_too_slow_not_inaccurate():
    """A trial stopped after 2 steps is compared with float32's first 2 steps, not with its
    later, lower losses (a ViT's bf16 trials once read "loss +21%" that way), and its verdict
    is the stop."""
    from mptrain.measure.verdicts import training_against

    base = [x.loss for x in losses(2.83, 2.37, count=8)]
    assert not training_against(base, [2.84, 2.77], 3.0).behind
    base_trial, base_steps = trial("float32", "float32", 230.0)
    cut, _ = trial("mixed_bfloat16", "mixed_bfloat16", 9990.0)
    stop = "stopped after 2 steps: a step took 10.0 s (limit 5 s)"
    cut = cut.model_copy(update={"summary": cut.summary.model_copy(update={
        "stopped_by": "max_step_seconds", "stop_reason": stop})})
    judged_ = judge_rows([base_trial, cut], {"float32": base_steps,
                                             "mixed_bfloat16": base_steps[:2]}, Rules())
    assert not judged_[1].verdict.eligible and stop in judged_[1].verdict.words()
    assert "loss" not in judged_[1].verdict.words()


def test_when_every_16bit_candidate_is_refused_plan_picks_float32_and_says_why():
    trials = judged(("float32", "float32", 300.0),
                    ("mixed_float16+xla", "mixed_float16", 100.0, {"status": "diverged"}),
                    ("mixed_bfloat16", "mixed_bfloat16", 120.0, {"end": 2.0}),
                    ("float32+graph_bf16", "float32", 120.0, {"nan": 2}))
    winner, reason = choose(trials)
    assert winner == "float32" and reason.startswith("every 16-bit candidate was refused")
    assert "mixed_float16+xla: diverged (NaN/inf loss)" in reason
    assert "mixed_bfloat16: loss behind float32's" in reason
    assert "2 NaN/inf loss(es) no loss scaler explains" in reason


def test_among_candidates_within_each_others_noise_the_simplest_wins():
    trials = judged(("float32", "float32", 300.0), ("mixed_bfloat16", "mixed_bfloat16", 102.0),
                    ("mixed_bfloat16+xla", "mixed_bfloat16", 100.0))
    assert choose(trials)[0] == "mixed_bfloat16"


def test_with_eval_a_lower_test_accuracy_beyond_noise_fails_the_guard():
    trials = judged(("float32", "float32", 300.0, {"accuracy": 0.90}),
                    ("mixed_bfloat16", "mixed_bfloat16", 100.0, {"accuracy": 0.85}), evaluate=True)
    assert not trials[1].verdict.eligible and "accuracy -5.00 pt" in trials[1].verdict.words()


def test_one_slow_layer_becomes_a_float32_island():
    """The late-stage convolutions of a ResNet were measured 2-5x slower in bf16 (their weight
    gradients); the rest faster. Only a layer slower beyond the noise becomes an island, and
    so does a layer whose activations overflow float16."""
    timings = [LayerTiming(layer="conv1", ms_16bit=1.0, ms_float32=2.0, spread_16bit=(0.9, 1.1),
                           spread_float32=(1.9, 2.1)),
               LayerTiming(layer="conv5_block3", ms_16bit=4.0, ms_float32=1.5,
                           spread_16bit=(3.8, 4.3), spread_float32=(1.4, 1.6)),
               LayerTiming(layer="dense", ms_16bit=1.05, ms_float32=1.0, spread_16bit=(0.9, 1.2),
                           spread_float32=(0.9, 1.1))]
    assert islands(timings, []) == ["conv5_block3"]
    assert islands(timings, ["amplifier"]) == ["conv5_block3", "amplifier"]
    assert islands(timings[:1], []) == []


def test_auto_follows_the_measurement_not_the_flags(tmp_path, monkeypatch):
    """The same AVX512_BF16 CPU: recorded 0.8x bf16 → float32; recorded 2x → mixed_bfloat16.
    Without a measurement, the rule: AMX → bf16, AVX512_BF16 alone → float32."""
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    slow = record_kernels(AVX512_BF16, bfloat16=0.8)
    rec = recommend(AVX512_BF16, slow)
    assert rec.policy == "float32" and rec.measured and "0.80x float32" in rec.reason
    fast = record_kernels(AVX512_BF16, bfloat16=2.0)
    assert recommend(AVX512_BF16, fast).policy == "mixed_bfloat16"
    assert recommend(AMX).policy == "mixed_bfloat16" and not recommend(AMX).measured
    assert recommend(AVX512_BF16).policy == "float32"


def test_a_kernel_measurement_is_not_reused_on_another_cpu_or_tensorflow(tmp_path, monkeypatch):
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    record_kernels(AVX512_BF16, bfloat16=0.8)
    assert cached_kernels(AVX512_BF16) is not None
    newer = Machine(cpu=AVX512_BF16.cpu, tensorflow_version="2.22.0")
    other_cpu = Machine(cpu=parse_cpuinfo("model name : Xeon 2\nflags : avx512f avx512_bf16"),
                        tensorflow_version="2.21.0")
    more_flags = Machine(cpu=parse_cpuinfo("model name : Xeon\nflags : avx512f avx512_bf16 amx_bf16"),
                         tensorflow_version="2.21.0")
    assert cached_kernels(newer) is None and cached_kernels(other_cpu) is None
    assert cached_kernels(more_flags) is None
    (tmp_path / "garbage").mkdir()
    for path in tmp_path.glob("kernels-*.json"):
        path.write_text("{not json")
    assert cached_kernels(AVX512_BF16) is None  # a damaged cache is measured again


def test_run_names_the_plan_beside_its_experiment(tmp_path, monkeypatch):
    from mptrain.precision.planned import plan_beside, plan_file_for

    experiment = tmp_path / "exp.yaml"
    experiment.write_text("data: {dataset: synthetic}\n")
    assert plan_file_for(str(experiment)) == tmp_path / "exp.plan.yaml"
    assert plan_beside(str(experiment)) is None
    (tmp_path / "exp.plan.yaml").write_text("# mptrain plan for exp: mixed_bfloat16 (2.1x float32).\n")
    assert plan_beside(str(experiment)) == (f"{tmp_path / 'exp.plan.yaml'}: mptrain plan for exp: "
                                            "mixed_bfloat16 (2.1x float32).")
    assert plan_beside(str(tmp_path / "exp.plan.yaml")) is None  # running the plan itself
    monkeypatch.chdir(tmp_path)
    assert plan_file_for("synthetic") == tmp_path / "synthetic.plan.yaml"  # a built-in's: here


def test_a_trial_that_failed_is_a_result_one_that_was_interrupted_is_still_to_try():
    from mptrain.measure.plan import PlanRecord

    found = [c for c in candidates(AMX) if c.why_not is None][:4]
    interrupted = make_summary(status="interrupted")
    record = PlanRecord(experiment="x", folder="/tmp/x", machine="m", measured_at="t", steps=30,
                        tolerance_pct=3.0, evaluate=False, budget_minutes=20.0, candidates=found,
                        trials=[trial("float32", "float32", 100.0)[0],
                                Variant(label=found[1].name, candidate=found[1], failed="exit code 1"),
                                Variant(label=found[2].name, candidate=found[2], summary=interrupted),
                                Variant(label=found[3].name, candidate=found[3])])
    assert record.untried == [found[2].name, found[3].name]


def test_a_plan_written_beside_an_experiment_of_this_repository_is_ignored_by_git(tmp_path):
    """`mptrain plan configs/x.yaml` once left x.plan.yaml untracked in the checkout."""
    import fnmatch
    from pathlib import Path

    from mptrain.precision.planned import plan_file_for

    experiment_file = tmp_path / "x.yaml"
    experiment_file.write_text("name: x\n")
    written = plan_file_for(str(experiment_file)).name
    ignored = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().split()
    assert any(fnmatch.fnmatch(written, pattern) for pattern in ignored), written


def test_a_candidate_faster_per_step_but_slower_over_the_whole_run_is_not_picked():
    """XLA's compile can cost more than it saves over a short experiment: 25 s of one-off
    costs against float32's 2 s, for 10 ms a step saved over 500 steps (5 s)."""
    short = judged(("float32", "float32", 100.0),
                   ("mixed_bfloat16+xla", "mixed_bfloat16", 90.0, {"first_step_s": 25.0}),
                   experiment_steps=500)
    slow = short[1]
    assert slow.speedup > 1.05 and slow.verdict.slower_over_run and not slow.verdict.faster
    assert slow.verdict.whole_run_s == pytest.approx(25.0 + 499 * 0.09)
    assert slow.verdict.words(quality=False) == "faster, but slower over the run"
    winner, reason = choose(short)
    assert winner == "float32" and "not over the experiment's length" in reason
    longer = judged(("float32", "float32", 100.0),
                    ("mixed_bfloat16+xla", "mixed_bfloat16", 90.0, {"first_step_s": 25.0}),
                    experiment_steps=50_000)  # over a long run the same compile pays off
    assert longer[1].verdict.eligible and choose(longer)[0] == "mixed_bfloat16+xla"


def test_the_whole_run_estimate_counts_evaluation_and_the_process_start_and_exit():
    """Predicted against the run's own wall time, the estimate once left out the per-epoch
    validation, the test evaluation and the process's exit (11-32% short)."""
    trial_ = trial("float32", "float32", 30.0, first_step_s=4.0)[0].summary
    timed = trial_.model_copy(update={"evaluation_s": 0.5, "test_examples": 128})
    # 4 s to the first step's end, 99 more steps at 30 ms, the trial's own 2-batch evaluation
    # (0.5 s), 18 more evaluation batches at a third of a step, 1.5 s outside mptrain's clock
    assert whole_run_estimate(timed, RunLength(steps=100, eval_batches=20, overhead_s=1.5)) \
        == pytest.approx(4.0 + 99 * 0.03 + 0.5 + 18 * 0.01 + 1.5)
    # without an evaluation measured or a process timed: the steps alone
    assert whole_run_estimate(trial_, RunLength(steps=100, eval_batches=20)) == \
        pytest.approx(4.0 + 99 * 0.03)
    assert whole_run_estimate(timed, RunLength()) is None  # the experiment's length not known


def test_every_candidate_plan_prints_is_a_name_compare_takes():
    """One name, one meaning: the candidate plan tries is the one `candidate(name)` parses."""
    from mptrain.config import validate, variant
    from mptrain.precision.candidates import candidate

    base = validate(tiny_raw(), "<test>")
    for machine in (AMX, AVX512_BF16, PLAIN, gpu_machine(7, 0), gpu_machine(8, 0)):
        for planned in candidates(machine):
            parsed = candidate(planned.name)
            assert (parsed.policy, parsed.jit_compile, parsed.math_mode, parsed.math_library,
                    parsed.fused) == (planned.policy, planned.jit_compile, planned.math_mode,
                                      planned.math_library, planned.fused), planned.name
            # and a run made with its settings is called by that name (runs, the summary)
            assert candidate_name(variant(base, parsed.settings)) == planned.name
    islands = variant(base, {"policy": "mixed_float16", "train.jit_compile": True,
                             "model.float32_layers": ["softmax"]})
    assert candidate_name(islands) == "mixed_float16+xla+islands"
    assert candidate_name(variant(base, {"policy": "auto"}), "mixed_bfloat16") == "mixed_bfloat16"
    assert candidate("mixed_bfloat16+xla").settings == {  # the experiment's own library stays
        "policy": "mixed_bfloat16", "train.math_mode": "default", "train.jit_compile": True,
        "model.fused_layers": False}
    # the math library is an axis of its own, in any order a user writes it
    assert candidate("float32+xla+onednn").settings["train.math_library"] == "onednn"
    assert candidate_name(variant(base, candidate("float32+onednn+xla").settings)) == "float32+xla+onednn"
    assert candidate("mixed_bfloat16+eigen").control.name == "float32+eigen"
    assert candidate("mixed_bfloat16+xla").control.name == "float32+xla"
    assert candidate("mixed_bfloat16+fused").settings["model.fused_layers"] is True
    islands = candidate("mixed_bfloat16").changed(float32_layers=["softmax"])
    assert islands.settings["model.float32_layers"] == ["softmax"]
    assert islands.name == "mixed_bfloat16+islands"
    # one spelling, whatever order a user writes the parts in; an axis changed renames it
    assert candidate("float32+onednn+xla").name == "float32+xla+onednn"
    assert candidate("mixed_bfloat16+fused").changed(jit_compile=True).name == "mixed_bfloat16+xla+fused"
    for bad, says in (("mixed_bfloat+xla", "did you mean mixed_bfloat16?"),
                      ("mixed_bfloat16+fast", "'fast' is not one of +xla, a math mode (onednn_bf16, "
                                              "graph_bf16, tf32_off), a math library (onednn, eigen), "
                                              "+fused"),
                      ("mixed_bfloat16+fused+fused", "or is given twice"),
                      ("float32+onednn+eigen", "or is given twice"),
                      ("float32+onednn_bf16+eigen", "a mode of oneDNN's, and eigen turns oneDNN off"),
                      ("mixed_bfloat16+onednn_bf16", "use float32+onednn_bf16")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            candidate(bad)


def test_the_whole_run_estimate_counts_the_experiments_checkpoints():
    from mptrain.config import validate
    from mptrain.measure.plan import checkpoint_saves
    from tests.helpers import tiny_raw

    train = validate(tiny_raw("train.epochs=5"), "<t>").train
    assert checkpoint_saves(train, per_epoch=20) == 5 + 1  # each epoch's, and where it stops
    every = validate(tiny_raw("train.epochs=2", "train.checkpoint.every_steps=8"), "<t>").train
    assert checkpoint_saves(every, per_epoch=20) == 2 + 4 + 1  # steps 8, 16, 28, 36 (not 40: an epoch's end)
    saving = trial("float32", "float32", 100.0, first_step_s=4.0)[0].summary.model_copy(
        update={"checkpoint_save_s": 2.0})
    assert whole_run_estimate(saving, RunLength(steps=100, checkpoints=6)) == \
        pytest.approx(4.0 + 99 * 0.1 + 6 * 2.0)
    # the saved model: timed on its own, after the summary's clock, and counted once
    model = saving.model_copy(update={"model_save_s": 3.0})
    assert whole_run_estimate(model, RunLength(steps=100, checkpoints=6)) == \
        pytest.approx(4.0 + 99 * 0.1 + 6 * 2.0 + 3.0)


def test_a_variants_process_overhead_leaves_out_its_waits_and_its_model_save():
    from mptrain.measure.engine import overhead

    summary = trial("float32", "float32", 100.0, first_step_s=4.0)[0].summary.model_copy(
        update={"wall_time_s": 20.0, "turn_wait_s": 5.0, "model_save_s": 1.5})
    assert overhead(summary, lifetime_s=30.0) == pytest.approx(30.0 - 20.0 - 5.0 - 1.5)
    assert overhead(summary, lifetime_s=20.0) == 0.0


def test_one_trials_slow_exit_does_not_move_the_whole_run_estimates(monkeypatch):
    """The process's start and exit are the same program for every candidate: the median over
    the trials, so a trial whose exit the host delayed (46 s once, on VGG16) does not make its
    candidate look slower over the whole run."""
    from mptrain.measure import plan as planning
    from mptrain.measure.plan import PlanRecord

    trials = [trial(name, "float32", 100.0)[0].model_copy(update={"overhead_s": o})
              for name, o in (("float32", 1.1), ("mixed_bfloat16", 46.4), ("float32+graph_bf16", 1.0))]
    record = PlanRecord(experiment="e", folder="/tmp/x", machine="m", measured_at="t", steps=12,
                        tolerance_pct=3.0, evaluate=False, budget_minutes=30, candidates=[],
                        trials=trials, experiment_steps=87, experiment_eval_batches=20,
                        experiment_checkpoints=4)
    seen = {}
    monkeypatch.setattr(planning, "judge_rows",
                        lambda trials, steps, rules: seen.setdefault("length", rules.length) and trials)
    monkeypatch.setattr(planning, "steps_of", lambda rows: {})
    planning.judge_plan(record)
    assert seen["length"] == RunLength(87, 20, 4, pytest.approx(1.1))


def test_the_one_off_costs_end_with_the_first_step():
    """The first step's own time is its tracing and XLA's compile: a one-off cost, which the
    whole-run estimate counts once (the later steps are at the median)."""
    from types import SimpleNamespace

    from mptrain.runs.summary import time_to_first_step
    from mptrain.training.records import StepRecord

    first = StepRecord(step=1, epoch=1, loss=2.3, seconds=2.5, examples=32)
    later = StepRecord(step=2, epoch=1, loss=2.2, seconds=0.1, examples=32)
    monitor = SimpleNamespace(first_start=10.0, steps=[first, later])
    assert time_to_first_step(monitor, started_at=4.0) == pytest.approx(6.0 + 2.5)
    assert time_to_first_step(SimpleNamespace(first_start=None, steps=[]), 4.0) is None


def test_auto_follows_a_plan_only_where_it_applies(tmp_path):
    """A plan beside the experiment's file, made for it, no older than it, measured on this
    machine: followed; otherwise the reason it is not."""
    import os

    import yaml

    from mptrain.config.loading import load_config
    from mptrain.precision.planned import planned, stamp
    from tests.helpers import tiny_raw

    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump(tiny_raw("policy=auto")))
    config = load_config(experiment)
    assert planned(config) is None  # no plan beside it

    def write_plan(*changes, mark=True, key="this machine"):
        raw = tiny_raw("policy=float32", "train.math_mode=graph_bf16", *changes)
        head = stamp(key, "float32+graph_bf16") + "\n" if mark else ""
        (tmp_path / "exp.plan.yaml").write_text(head + yaml.safe_dump(raw))
        later = experiment.stat().st_mtime + 10
        os.utime(tmp_path / "exp.plan.yaml", (later, later))

    write_plan()
    plan = planned(config)
    assert plan.follow("this machine") is None and plan.pick == "float32+graph_bf16"
    assert plan.settings["train.math_mode"] == "graph_bf16" and plan.settings["policy"] == "float32"
    assert "measured on another machine (this machine)" in plan.follow("another machine")
    write_plan("train.batch_size=32")
    assert "made for other settings (train.batch_size)" in planned(config).follow("this machine")
    # only the run's length differs: followed, and said (a plan judges per step)
    write_plan("train.max_steps=16", "train.epochs=1")
    shorter = planned(config)
    assert shorter.follow("this machine") is None
    assert shorter.other_length == ("train.epochs", "train.max_steps")
    write_plan(mark=False)
    assert "has no machine stamp" in planned(config).follow("this machine")
    # a stamp from before the math library was an axis names the oneDNN state its trials ran:
    # followed on this machine, in that library, whatever the shell says now
    write_plan(key="this machine; oneDNN off")
    old = planned(config)
    assert old.follow("this machine") is None and old.settings["train.math_library"] == "eigen"
    write_plan("train.math_library=onednn", key="this machine; oneDNN off")
    assert planned(config).settings["train.math_library"] == "onednn"  # the file's own, named
    write_plan()
    newer = (tmp_path / "exp.plan.yaml").stat().st_mtime + 10
    os.utime(experiment, (newer, newer))
    assert "is older than" in planned(config).follow("this machine")


def test_plan_judges_a_regression_by_its_mae_and_refuses_one_worse_beyond_the_tolerance():
    """With --eval a trial's test quality counts against it: a regression's MAE 5% worse than
    float32's (tolerance 3%) is refused, 1% worse is not; both faster."""
    def with_mae(spec, mae):
        made, records = trial(*spec)
        from mptrain.runs.summary import QualityFigure

        quality = QualityFigure(metric="mae", label="MAE", value=mae, higher_is_better=False,
                                proportion=False)
        summary = made.summary.model_copy(update={"quality": quality})
        return made.model_copy(update={"summary": summary}), records

    made = [with_mae(("float32", "float32", 300.0), 2.0),
            with_mae(("mixed_bfloat16", "mixed_bfloat16", 150.0), 2.10),
            with_mae(("float32+onednn_bf16", "float32", 200.0), 2.02)]
    trials = judge_rows([t for t, _ in made], {t.label: r for t, r in made},
                        Rules(3.0, quality_counts=True, length=RunLength(0)))
    worse, fine = trials[1].verdict, trials[2].verdict
    assert worse.refused == ["MAE +5.0%"] and "MAE worse (+5.0%)" in worse.words()
    assert not fine.refused and fine.quality.word() == "MAE worse (+1.0%)"
    assert choose(trials)[0] == "float32+onednn_bf16"


def test_only_trials_the_budget_stopped_are_cut_short():
    """A trial the budget stopped is cut short (the plan is then "out of budget"), whatever
    its reason says; one stopped at its own step limit ended as planned."""
    from mptrain.measure.plan import PlanRecord

    def stopped(name, kind, reason):
        made, _ = trial(name, "float32", 100.0)
        return made.model_copy(update={"summary": made.summary.model_copy(
            update={"stopped_by": kind, "stop_reason": reason})})

    record = PlanRecord(experiment="e", folder="/tmp/x", machine="m", measured_at="t", steps=12,
                        tolerance_pct=3.0, evaluate=False, budget_minutes=1, candidates=[],
                        trials=[stopped("float32", "budget", "the plan's minutes ran out"),
                                stopped("mixed_bfloat16", "max_steps", "cut by the budget (no)")])
    assert record.cut == ["float32"]


def racers(rounds: int, **speedups):
    """The race's view after `rounds` rounds: float32 at 100 ms a round, its twin within 2%,
    and each trial at 100 / SPEEDUP ms (a tuple: its rounds one by one; `@b` in a label: twice
    the batch), all still running."""
    from mptrain.measure.engine import Racer

    field = {"float32": Racer([100.0] * rounds, 32, True, True),
             TWIN: Racer([100.0 * (1.02 if r % 2 else 0.98) for r in range(rounds)], 32, True, True)}
    for label, speedup in speedups.items():
        batch = 64 if "_at_b" in label else 32
        each = speedup if isinstance(speedup, tuple) else (speedup,) * rounds
        field[label.replace("_at_b", "@b")] = Racer([s and 100.0 * batch / 32 / s for s in each[:rounds]],
                                                    batch, True)
    return field


def test_the_race_drops_a_trial_that_cannot_be_picked_and_ends_a_decided_plan():
    """After 3 rounds in turns (not before), a trial whose speed-up cannot reach the 1.05x a
    pick needs stops taking turns, as does one slower than the leader beyond the noise; one
    within 5% of the leader races on (`choose` may prefer it, as the simpler). Once the
    leader is alone and faster than float32 beyond the noise, every trial still running stops:
    the pick is decided, and what they measured is judged."""
    from mptrain.measure.trials import race

    assert race(racers(2, slow=0.6, fast=2.0)) == {}  # too few rounds to judge anyone
    stops = race(racers(3, slow=0.6, near=(1.95, 2.1, 1.9), fast=(2.0, 1.9, 2.1)))
    assert stops["slow"] == ("drop", "dropped after 3 rounds: at most 0.60x float32 (in each of 3 "
                                     "rounds), a pick needs 1.05x")
    assert "near" not in stops
    assert "fast" not in stops and "float32" not in stops
    behind = race(racers(4, fast=2.0, fair=1.5))
    assert behind["fair"] == ("drop", "dropped after 4 rounds: at most 0.75x fast's speed (in each "
                                      "of 4 rounds)")
    # ...and with it gone the leader is alone, faster beyond the noise: decided for everyone left
    assert {label: word for label, (word, _) in behind.items()} == {
        "fair": "drop", "fast": "decided", "float32": "decided", TWIN: "decided"}
    assert "decided after 4 rounds: fast 2.00x float32" in behind["fast"][1]
    # two left, both faster beyond the noise, the first listed within 5% of the other: `choose`
    # picks it (the simpler) whatever more rounds show, so it is decided too
    twins = race(racers(3, first=(2.0, 2.02, 1.98), second=(2.04, 2.0, 2.06)))
    assert set(twins.values()) == {("decided", "decided after 3 rounds: first 2.00x float32 (in "
                                               "each of 3 rounds 1.98-2.02x), within 5% of second or "
                                               "faster, and simpler")}
    assert race(racers(3, first=(2.0, 2.02, 1.98), second=(2.0, 2.4, 1.9))) == {}  # not yet sure
    # a leader whose own interval still reaches float32's noise is not decided
    assert race(racers(4, unsure=(1.4, 0.99, 1.5, 1.3))) == {}
    # a leader faster than float32 beyond the noise, but by less than the practical gain
    # (1.04x, its interval 1.03-1.06x reaching a pick's 1.05x): raced on, never decided on
    assert race(racers(3, close=(1.03, 1.04, 1.06))) == {}
    # an upper bound is said rounded down: 1.049x is "at most 1.04x", below the 1.05x needed
    assert "at most 1.04x float32" in race(racers(3, close=1.049))["close"][1]
    # nothing left but the controls: float32 is the pick, nothing to race
    gone = race(racers(3, slow=0.5, slower=0.4))
    assert gone["float32"] == ("decided", "decided: no trial but float32 is left to race")


def test_a_trial_at_another_batch_is_dropped_by_its_speed_per_example_but_never_leads():
    """Its pick is judged by its time to float32's loss, which its speed per example bounds
    from above: a double batch at 0.9x per example cannot win, nor one at 1.4x beside a
    leader at 2x; one at 3x cannot lead the race (the others are not dropped against it, nor
    decided while it runs)."""
    from mptrain.measure.trials import race

    stops = race(racers(3, fast=2.0, mixed_at_b=0.9))
    assert stops["mixed@b"][0] == "drop" and stops["fast"][0] == "decided"
    assert race(racers(3, fast=2.0, mixed_at_b=3.0)) == {}
    # at most 1.4x per example where the leader is 2x: its time to target cannot beat it
    behind = race(racers(3, fast=2.0, mixed_at_b=1.4))
    assert behind["mixed@b"] == ("drop", "dropped after 3 rounds: at most 0.70x fast's speed (in "
                                         "each of 3 rounds)")
    assert behind["fast"][0] == "decided"


def test_the_race_pairs_its_rounds_by_round_and_races_only_beside_its_baseline():
    """A round a trial has no time for (a shorter batch) leaves the others' rounds where they
    are: ratios pair round by round. Without the baseline (a resume after it ended, or pairs,
    where the engine gives none) nothing is raced."""
    from mptrain.measure.trials import race

    field = racers(4, fast=2.0, fair=1.5)
    field["fair"] = field["fair"]._replace(rounds=[None, *field["fair"].rounds[1:]])
    assert race(field)["fair"] == ("drop", "dropped after 3 rounds: at most 0.75x fast's speed (in "
                                           "each of 3 rounds)")
    assert race(field, None) == {} and race(field, "float32 with fair") == {}
    # rounds the two never shared cannot put one behind the other
    apart = racers(5, fast=(2.0, 2.0, 2.0, None, None), fair=(None, None, None, 1.5, 1.5))
    assert "fair" not in race(apart, min_rounds=2)


def test_a_candidate_whose_axes_together_cannot_win_is_not_tried(tmp_path, monkeypatch):
    """Each axis read against its own control passes (bfloat16 with XLA at 0.94x float32 with
    XLA), yet XLA's convolutions at 0.7x TensorFlow's make it 0.66x in all: ResNet50's three
    XLA trials each took 36-69 s to start on an AMX Xeon and then ran 3.5-4.6x float32's step.
    float32+xla stays while a candidate it is the control of is tried."""
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    slow_xla = record_kernels(AMX, bfloat16=2.5, float16=0.001, xla_gain=0.7, xla_bfloat16=0.94,
                              xla_float16=0.93)
    why = {c.name: c.why_not for c in candidates(AMX, slow_xla) if c.why_not}
    assert "measured 0.66x float32 as TensorFlow runs it here, with bfloat16 and XLA together" in \
        why["mixed_bfloat16+xla"]
    assert "with float32 and XLA together" in why["float32+xla"]
    assert "mixed_bfloat16" in names(candidates(AMX, slow_xla))
    fast_bf16_xla = record_kernels(AMX, bfloat16=2.5, float16=0.001, xla_gain=0.7, xla_bfloat16=1.5)
    assert {"float32+xla", "mixed_bfloat16+xla"} <= set(names(candidates(AMX, fast_bf16_xla)))


def test_one_measurement_serves_both_math_libraries_each_read_as_its_own(tmp_path, monkeypatch):
    """A process running Eigen reads the cache a oneDNN process wrote (one file holds both
    libraries): its own figures are Eigen's, the other library's gain the inverse; and it
    is advised oneDNN where oneDNN's bfloat16 is what pays off, with the policy to run."""
    from mptrain.precision.policy import library_advice

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    on = Machine(cpu=AMX.cpu, tensorflow_version="2.21.0", onednn=True)
    record_kernels(on, bfloat16=2.5, float16=0.001, library_gain=0.86, other_bfloat16=0.93)
    mine = cached_kernels(on)
    assert mine.onednn is True and mine.speedup("bfloat16", "/CPU:0") == pytest.approx(2.5)
    assert library_advice(on, mine)[0] is None
    assert library_advice(on, mine)[1].startswith("oneDNN (TensorFlow's default on this CPU) runs here, "
                                                  "and mptrain keeps it: float32 kernels with Eigen run "
                                                  "0.86x oneDNN's")
    off = Machine(cpu=AMX.cpu, tensorflow_version="2.21.0", onednn=False)
    theirs = cached_kernels(off)
    assert theirs.onednn is False and theirs.speedup("bfloat16", "/CPU:0") == pytest.approx(0.93)
    assert theirs.library_gain() == pytest.approx(1 / 0.86)
    library, why = library_advice(off, theirs)
    assert library == "onednn" and "set train.math_library: onednn (with policy: mixed_bfloat16)" in why
    # the AVX2-only CPU: oneDNN's float32 alone is the lever
    zen3 = Machine(cpu=PLAIN.cpu, tensorflow_version="2.21.0", onednn=False)
    library, why = library_advice(zen3, record_kernels(zen3, bfloat16=0.27, library_gain=3.2))
    assert library == "onednn" and why.startswith("float32 kernels with oneDNN run 3.20x Eigen's here")
    assert "TF_ENABLE_ONEDNN_OPTS=1" in why and "(with policy" not in why
    assert "not measured (no kernel was measured)" in library_advice(zen3, None)[1]



def test_each_axis_names_its_values_and_says_where_it_applies():
    """A candidate's axes, one class each (`precision.axes`): its key is an experiment key,
    its name part reads back as its value and as no other axis's, and what it offers beside a
    policy depends on the machine; the batch is printed by its axis, never parsed."""
    from mptrain.config import validate
    from mptrain.precision.axes import AXES, Where
    from mptrain.precision.candidates import candidate

    base = validate(tiny_raw(), "<test>")
    for axis in AXES:
        section, key = axis.key.split(".")
        assert hasattr(getattr(base, section), key), axis.key
        for value in axis.values:
            part = axis.part(value)
            assert [other.parse(part) for other in AXES] == [value if other is axis else None
                                                             for other in AXES], part
    assert all(candidate(name).name == name for name in CANDIDATE_NAMES)

    def offered(machine, policy):
        where = Where(machine)
        return {axis.field: values for axis in AXES if (values := axis.offers(policy, where))}

    assert offered(AMX, "mixed_bfloat16") == {"jit_compile": (True,), "math_library": ("eigen",),
                                              "fused": (True,)}
    assert offered(AMX, "float32") == {"jit_compile": (True,), "math_mode": ("onednn_bf16", "graph_bf16"),
                                       "math_library": ("eigen",)}
    zen3 = Machine(cpu=PLAIN.cpu, tensorflow_version="2.21.0", onednn=False)
    assert offered(zen3, "mixed_float16") == {"jit_compile": (True,), "math_library": ("onednn",)}
    assert offered(gpu_machine(8, 0), "float32") == {"jit_compile": (True,), "math_mode": ("tf32_off",)}
    assert offered(gpu_machine(8, 0), "mixed_bfloat16") == {"jit_compile": (True,)}
    assert offered(Machine(cpu=PLAIN.cpu, tpu=True), "mixed_bfloat16") == {}
    cell = candidate("mixed_bfloat16+xla").changed(batch_size=256)
    assert cell.name == "mixed_bfloat16+xla@b256"
    assert "train.batch_size" not in cell.settings  # given with what it scales (`Variant.batch`)
    with pytest.raises(ConfigError, match="did you mean mixed_bfloat16"):
        candidate("mixed_bfloat16@b256")
