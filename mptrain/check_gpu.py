"""`mptrain check-gpu`: this machine's facts, the policy to use, and optionally measurements.

One JSON-able report (also meant to be pasted into bug reports, like `accelerate env`):
the facts from `hardware`, the advice from `policy`, and with `--bench` the kernels timed by
`microbench`, which the recommendation then cites.
"""

from __future__ import annotations

from dataclasses import asdict

from mptrain.hardware import Machine, machine_to_dict
from mptrain.microbench import BenchResult, best_16bit
from mptrain.policy import compatibility_check, recommend


def distribution_facts(tf, machine: Machine) -> dict:
    """What tf.distribute would use here: the devices a mirrored strategy takes by default,
    and how replicas would exchange gradients."""
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    return {
        "logical_devices": cpus + gpus,
        "mirrored_devices": gpus or cpus[:1],
        "nccl": bool(gpus) and tf.test.is_built_with_cuda(),
        "all_reduce": ("NCCL between this machine's GPUs" if gpus and tf.test.is_built_with_cuda()
                       else "TensorFlow's collective ops (ring all-reduce): CPU replicas and "
                            "workers over gRPC"),
        "note": ("one CPU device: `distribute.devices: [/cpu:0, /cpu:1]` splits it into logical "
                 "devices to try mirrored training" if not gpus else ""),
    }


def check_report(machine: Machine, bench: list[BenchResult] | None = None,
                 distribution: dict | None = None) -> dict:
    """Everything `check-gpu` shows, as one dict."""
    rec = recommend(machine)
    reason = rec.reason
    if bench:
        device = "/GPU:0" if machine.gpus else "/CPU:0"
        best = best_16bit(bench, device)
        if best is not None:
            reason += (f"; measured on {device.strip('/')}: {best[0]} runs {best[1]:.1f}x float32 "
                       "(geometric mean over matmul, dense and conv)")
    return {
        "machine": machine_to_dict(machine),
        "gpu_found": bool(machine.gpus),
        "recommendation": {"policy": rec.policy, "reason": reason, "warnings": rec.warnings},
        "compatibility_check": compatibility_check(machine.gpus),
        "distribution": distribution,
        "bench": [asdict(r) for r in bench] if bench else None,
    }
