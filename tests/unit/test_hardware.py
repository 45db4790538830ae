"""Detection and recommendation as pure functions over fake machines (the real command, and
the kernels it measures, are `tests/e2e/test_check_gpu.py`'s)."""

from pathlib import Path

import pytest

from mptrain.hardware.machine import CpuInfo, Machine, gpu_from_details, parse_cpuinfo
from mptrain.model.flops import cpu_peak
from mptrain.precision.policy import (
    XlaAsked,
    choose_jit_compile,
    choose_policy,
    compatibility_check,
    recommend,
)

SAPPHIRE = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
cpu MHz\t\t: 2000.000
flags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile avx512_fp16
"""
SKYLAKE = "model name\t: Intel(R) Xeon(R) Gold 6148\ncpu MHz : 2400.0\nflags : sse avx2 avx512f\n"
OLD = "model name\t: AMD Opteron\nflags : sse sse2 avx2\n"
NO_FLAGS = ""
ROOT = Path(__file__).resolve().parents[2]


def cpu(text=OLD):
    return parse_cpuinfo(text)


def gpu(major, minor, name="GPU"):
    return gpu_from_details({"device_name": name, "compute_capability": (major, minor)})


def test_parse_cpuinfo_features():
    info = cpu(SAPPHIRE)
    assert info.model == "Intel(R) Xeon(R) Platinum 8480+" and info.mhz == 2000.0
    assert info.features == {"AVX-512": True, "AVX512_BF16": True, "AMX-BF16": True,
                             "AVX512_FP16": True, "AMX-FP16": False}
    assert info.has_bf16_matrix_units
    assert not cpu(SKYLAKE).has_bf16_matrix_units
    unknown = cpu(NO_FLAGS)
    assert unknown.flags == frozenset() and not any(unknown.features.values())
    # a hypervisor names every EPYC "AMD EPYC": its family and model still say which
    rome = cpu("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\n"
               "model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma\n")
    assert rome.name == "AMD EPYC (family 23, model 49)" and info.name == info.model


def test_gpu_capabilities_by_compute_capability():
    pascal, volta, ampere, ada, hopper = gpu(6, 1), gpu(7, 0), gpu(8, 0), gpu(8, 9), gpu(9, 0)
    assert not pascal.float16_tensor_cores
    assert volta.float16_tensor_cores and not volta.fast_bfloat16 and not volta.tf32_by_default
    assert ampere.fast_bfloat16 and ampere.tf32_by_default and not ampere.float8
    assert ada.float8 and hopper.float8
    assert gpu_from_details({}).compute_capability is None


@pytest.mark.parametrize(("machine", "policy"), [
    (Machine(cpu=cpu(), gpus=(gpu(6, 1),)), "float32"),
    (Machine(cpu=cpu(), gpus=(gpu(7, 0),)), "mixed_float16"),
    (Machine(cpu=cpu(), gpus=(gpu(8, 0),)), "mixed_bfloat16"),
    (Machine(cpu=cpu(), gpus=(gpu(9, 0),)), "mixed_bfloat16"),
    (Machine(cpu=cpu(), gpus=(gpu(8, 0), gpu(7, 0))), "mixed_float16"),  # the weakest decides
    (Machine(cpu=cpu(), tpu=True), "mixed_bfloat16"),
    (Machine(cpu=cpu(SAPPHIRE)), "mixed_bfloat16"),
    (Machine(cpu=cpu(SKYLAKE)), "float32"),
    (Machine(cpu=cpu(NO_FLAGS)), "float32"),
])
def test_recommendation(machine, policy):
    rec = recommend(machine)
    assert rec.policy == policy
    assert rec.reason


def test_cpu_without_bf16_warns_that_16_bit_is_slower():
    rec = recommend(Machine(cpu=cpu(SKYLAKE)))
    assert any("slower than float32" in w for w in rec.warnings)


def test_compatibility_check_matches_the_guide():
    ok = compatibility_check([gpu(7, 0, "Tesla V100-SXM2-16GB")])
    assert ok == ("Mixed precision compatibility check (mixed_float16): OK\n"
                  "Your GPU will likely run quickly with dtype policy mixed_float16 as it has "
                  "compute capability of at least 7.0. Your GPU: Tesla V100-SXM2-16GB, "
                  "compute capability 7.0")
    old = compatibility_check([gpu(6, 1, "GeForce GTX 1080")])
    assert "WARNING" in old and "GeForce GTX 1080, compute capability 6.1" in old
    assert "does not have a GPU" in compatibility_check([])
    assert "(x2)" in compatibility_check([gpu(6, 0, "P100"), gpu(6, 0, "P100")])


def test_auto_policy_and_per_policy_xla_choice():
    amx_cpu = Machine(cpu=cpu(SAPPHIRE))
    choice = choose_policy("auto", amx_cpu)
    assert choice.requested == "auto" and choice.name == "mixed_bfloat16"
    assert not choice.jit_compile  # XLA would lose AMX
    assert choose_jit_compile("mixed_float16", None, amx_cpu)[0] is True  # avoid the slow kernel
    assert choose_jit_compile("mixed_float16", False, amx_cpu) == (
        False, "set in the experiment (train.jit_compile)")
    assert choose_jit_compile("mixed_float16", None, Machine(cpu=cpu(), gpus=(gpu(7, 0),)))[0] is False
    assert choose_policy("auto", Machine(cpu=cpu(), gpus=(gpu(7, 5),))).name == "mixed_float16"


def test_whether_float16_needs_xla_on_a_cpu_is_this_machines_measurement(tmp_path, monkeypatch):
    """Where oneDNN's fused float16 kernel collapsed (0.001x), XLA, quoting it; where float16
    ran at float32's speed without XLA (an AVX2-only CPU, oneDNN off), no XLA; and the
    warnings quote the measured ratio in the run's own XLA mode (`check-gpu --bench` shows
    the same figures)."""
    from mptrain.precision.policy import speed_warning
    from tests.helpers import record_kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    xeon, zen3 = Machine(cpu=cpu(SKYLAKE)), Machine(cpu=cpu(OLD), onednn=False)
    collapsed = record_kernels(xeon, bfloat16=0.6, float16=0.001, xla_float16=0.95)
    jit, why = choose_jit_compile("mixed_float16", None, xeon, kernels=collapsed)
    assert jit is True and "0.001x float32 on this CPU (oneDNN's reference kernel)" in why
    fine = record_kernels(zen3, bfloat16=0.27, float16=0.957)
    jit, why = choose_jit_compile("mixed_float16", None, zen3, kernels=fine)
    assert jit is False and "float16 kernels run 0.96x float32" in why and "none collapsed" in why
    # bfloat16 without oneDNN's bfloat16 kernels: no XLA by TensorFlow's default, and what XLA
    # alone would do to its kernels here said beside it (XLA is its own axis)
    eigen = record_kernels(zen3, bfloat16=0.27, float16=0.957, xla_gain=1.3)
    jit, why = choose_jit_compile("mixed_bfloat16", None, zen3, kernels=eigen)
    assert jit is False and "oneDNN runs no bfloat16 here" in why
    assert "with XLA its kernels run 1.30x as fast here" in why
    assert "oneDNN's kernels run it" in choose_jit_compile("mixed_bfloat16", None, Machine(
        cpu=cpu(SAPPHIRE)))[1]
    choice = choose_policy("mixed_float16", zen3, kernels=fine)
    assert speed_warning(choice, zen3, fine) is None  # 0.96x: no warning against its own figure
    bf16 = choose_policy("mixed_bfloat16", zen3, kernels=fine)
    assert speed_warning(bf16, zen3, fine).startswith(
        "bfloat16 is slower than float32 on this CPU: bfloat16 kernels run 0.27x float32")
    forced_off = choose_policy("mixed_float16", xeon, XlaAsked(jit_compile=False), kernels=collapsed)
    warned = speed_warning(forced_off, xeon, collapsed)
    assert "float16 kernels run 0.001x float32" in warned and "max_step_seconds" in warned
    # nothing measured: a rule on oneDNN, said as one
    assert choose_jit_compile("mixed_float16", None, zen3)[0] is False
    assert "not measured" in choose_jit_compile("mixed_float16", None, xeon)[1]
    rec = recommend(xeon, collapsed)
    assert any("0.001x float32 on this CPU" in w for w in rec.warnings)


def test_under_op_determinism_no_step_runs_xla_and_asking_for_it_is_an_error():
    """Keras' fit would silently drop XLA under op determinism: mptrain chooses none (both
    loops), says why, and refuses `train.jit_compile: true` (a `+xla` row) instead."""
    from mptrain.errors import ConfigError

    xeon = Machine(cpu=cpu(SKYLAKE))
    jit, why = choose_jit_compile("mixed_float16", None, xeon, deterministic=True)
    assert jit is False and why.startswith("deterministic: true: Keras compiles no step with XLA")
    assert choose_policy("float32", xeon, XlaAsked(deterministic=True)).jit_compile is False
    with pytest.raises(ConfigError, match="train.jit_compile: true .* deterministic: true"):
        choose_jit_compile("float32", True, xeon, deterministic=True)
    assert choose_jit_compile("float32", True, xeon) == (True, "set in the experiment (train.jit_compile)")


def test_onednn_is_on_where_tensorflow_turns_it_on(monkeypatch):
    """TensorFlow's own rule: on by default for CPUs with VNNI, AVX512_BF16 or AMX, off on an
    AVX2-only CPU (AMD Zen 3), and TF_ENABLE_ONEDNN_OPTS over both."""
    from mptrain.hardware.machine import onednn_enabled

    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert onednn_enabled(cpu(OLD).flags) is False
    assert onednn_enabled(cpu(SAPPHIRE).flags) is True
    assert onednn_enabled(cpu(SKYLAKE).flags) is False  # AVX-512 without VNNI or BF16
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert onednn_enabled(cpu(SAPPHIRE).flags) is False
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "true")
    assert onednn_enabled(cpu(OLD).flags) is True


def test_onednn_is_said_with_what_decided_it_and_where_bfloat16_goes(monkeypatch):
    """check-gpu's oneDNN line: off on an AVX2-only CPU is TensorFlow's default, not the
    variable; forced on there, its ops take no bfloat16 (TensorFlow's
    IsBF16SupportedByOneDNNOnThisCPU: AVX-512F), so bfloat16 still runs through Eigen."""
    from mptrain.hardware.machine import describe_onednn

    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert describe_onednn(False, cpu(OLD).flags) == (
        "off (TensorFlow's default on a CPU without AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX)")
    assert describe_onednn(True, cpu(SAPPHIRE).flags) == "on (TensorFlow's default on this CPU)"
    assert Machine(cpu=cpu(SAPPHIRE), onednn=True).onednn_bfloat16
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert describe_onednn(False, cpu(SAPPHIRE).flags) == "off (TF_ENABLE_ONEDNN_OPTS=0)"
    assert not Machine(cpu=cpu(SAPPHIRE), onednn=False).onednn_bfloat16
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    assert describe_onednn(True, cpu(OLD).flags) == (
        "on (TF_ENABLE_ONEDNN_OPTS=1); 16-bit math runs through Eigen (oneDNN takes bfloat16 and "
        "float16 only with AVX-512)")
    assert not Machine(cpu=cpu(OLD), onednn=True).onednn_bfloat16


def test_xla_optimizer_update_choice():
    from mptrain.precision.policy import choose_xla_optimizer_update

    cpu_only, with_gpu = Machine(cpu=cpu(SAPPHIRE)), Machine(cpu=cpu(), gpus=(gpu(8, 0),))
    assert choose_xla_optimizer_update(None, False, cpu_only)[0] is True
    assert choose_xla_optimizer_update(None, False, with_gpu)[0] is False
    assert choose_xla_optimizer_update(True, True, cpu_only)[0] is False  # whole step is XLA
    assert choose_xla_optimizer_update(False, False, cpu_only)[0] is False


def test_peak_flops_by_dtype_names_the_unit():
    sapphire = parse_cpuinfo(SAPPHIRE)
    assert sapphire.physical_cores == 1
    assert cpu_peak(sapphire, "float32").flops_per_second == 2000e6 * 64
    assert cpu_peak(sapphire, "bfloat16").unit == "AMX-BF16"
    assert cpu_peak(sapphire, "bfloat16").flops_per_second == 2000e6 * 1024
    assert cpu_peak(sapphire, "float16").unit == "AVX-512 FP32"  # no fast float16 CPU path
    assert cpu_peak(CpuInfo("x", 2, 2), "float32") is None


TWO_SOCKETS_HT = "\n\n".join(
    f"processor\t: {p}\nmodel name\t: Xeon\ncpu MHz\t: 1000\nphysical id\t: {p // 4}\n"
    f"core id\t: {p % 2}\nflags\t: avx512f amx_bf16" for p in range(8))


def test_cores_are_physical_and_limited_to_the_affinity_mask():
    """8 logical CPUs = 2 sockets x 2 cores x 2 hyper-threads; peak FLOP/s counts cores."""
    every = parse_cpuinfo(TWO_SOCKETS_HT)
    assert (every.logical_cpus, every.physical_cores) == (8, 4)
    # a container allowed CPUs 0 and 2: two hyper-threads of one core
    pinned = parse_cpuinfo(TWO_SOCKETS_HT, allowed_cpus={0, 2})
    assert (pinned.logical_cpus, pinned.physical_cores) == (2, 1)
    assert cpu_peak(pinned, "float32").flops_per_second == 1000e6 * 64


def test_bench_names_this_machine():
    """`make bench` ends by writing this line into RESULTS.md (a renamed field once broke it
    after 20 minutes of measuring)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "bench" / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    line = common.cpu_model()
    assert " cores, flags: " in line and not line.startswith("None")


@pytest.mark.parametrize(("machine", "bfloat16", "expected"), [
    (Machine(cpu=cpu(SKYLAKE)), 1.8, ["float32", "mixed_bfloat16"]),  # measured fast (AMD-like)
    (Machine(cpu=cpu(SKYLAKE)), 0.6, ["float32", "mixed_bfloat16"]),  # slow: still the one to weigh
    (Machine(cpu=cpu(), gpus=(gpu(7, 0),)), None, ["float32", "mixed_float16"]),
    (Machine(cpu=cpu(), gpus=(gpu(6, 1),)), None, ["float32", "mixed_float16"]),
    (Machine(cpu=cpu(), gpus=(gpu(8, 0),)), None, ["float32", "mixed_bfloat16"]),
])
def test_compare_by_default_weighs_float32_against_what_auto_would_pick(machine, bfloat16, expected):
    """Never float32 against mixed_float16 on a CPU, the pair mptrain itself warns is slow."""
    from mptrain.measure.compare import policies_worth_comparing
    from tests.helpers import record_kernels

    kernels = record_kernels(machine, bfloat16=bfloat16, float16=0.01) if bfloat16 else None
    assert policies_worth_comparing(machine, kernels) == expected


def test_a_failed_kernel_measurement_is_said_not_swallowed(tmp_path, monkeypatch):
    """policy auto falls back to the hardware's flags when the kernels cannot be timed, and
    says why (the run's notes, check-gpu's warnings)."""
    from mptrain.hardware import kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))  # nothing cached: a measurement

    def broken(*args, **kwargs):
        raise RuntimeError("the device went away\nmore detail")

    monkeypatch.setattr(kernels, "measure", broken)
    said: list[str] = []
    assert kernels.measured_kernels(None, Machine(cpu=cpu(SAPPHIRE)), said=said) is None
    assert said == ["this machine's kernels could not be measured (RuntimeError: the device went "
                    "away); the policy is chosen by the hardware's flags instead"]


def test_a_measurement_whose_peer_failed_is_used_said_and_not_kept(tmp_path, monkeypatch):
    """The other library's peer failed (a TensorFlow that runs one library either way, a
    start that timed out): this process's own figures serve it, the failure is what its
    library advice says, and nothing is cached, so the next use measures both again."""
    from mptrain.hardware import kernels
    from mptrain.hardware.kernels import KernelTiming
    from mptrain.precision.policy import library_advice

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path))
    machine = Machine(cpu=cpu(SAPPHIRE), tensorflow_version="2.21.0")
    timings = [KernelTiming(device="/CPU:0", kernel="matmul", kind="matmul", dtype=d, xla=x,
                            onednn=None if x else True, ms_per_call=1.0, ms_p10=1.0, ms_p90=1.0,
                            tflops=1.0, calls=5, cut_short=False, ratio_to_float32=1.0)
               for d in kernels.TIMED_DTYPES for x in (False, True)]
    failed = "the Eigen peer process failed: it ended (exit code 1: ImportError)"
    monkeypatch.setattr(kernels, "measure_machine", lambda *a, **k: (timings, failed))
    speeds = kernels.measured_kernels(None, machine)
    assert speeds.peer_failed == failed and speeds.library_gain() is None
    assert kernels.cached_kernels(machine) is None  # not kept
    assert library_advice(machine, speeds) == (None, "oneDNN (TensorFlow's default on this CPU); the "
                                                     f"other library was not measured ({failed})")


def test_training_memory_is_the_gpus_where_a_run_trains_on_one(monkeypatch):
    """`mptrain memory`'s largest batch fits a run's training state where it lives: the
    smallest GPU's memory (recorded device details, as TensorFlow and nvidia-smi give them),
    the machine's without a GPU, and $MPTRAIN_MEMORY_BYTES over both."""
    from mptrain.hardware.machine import machine_memory_bytes, training_memory

    monkeypatch.delenv("MPTRAIN_MEMORY_BYTES", raising=False)
    t4 = {"device_name": "Tesla T4", "compute_capability": (7, 5)}
    a100 = {"device_name": "NVIDIA A100-SXM4-40GB", "compute_capability": (8, 0)}
    two = Machine(cpu=cpu(), gpus=(gpu_from_details(a100, 40 * 2**30), gpu_from_details(t4, 15 * 2**30)))
    assert training_memory(two) == (15 * 2**30, "GPU memory")
    assert training_memory(Machine(cpu=cpu(), gpus=(gpu(8, 0),))) == (None, "GPU memory")  # no nvidia-smi
    assert training_memory(Machine(cpu=cpu())) == (machine_memory_bytes(), "memory here")
    monkeypatch.setenv("MPTRAIN_MEMORY_BYTES", str(2**30))
    assert training_memory(two) == (2**30, "$MPTRAIN_MEMORY_BYTES")
