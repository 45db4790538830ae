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


def check_report(machine: Machine, bench: list[BenchResult] | None = None) -> dict:
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
        "bench": [asdict(r) for r in bench] if bench else None,
    }
