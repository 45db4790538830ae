"""`mptrain check-gpu`: this machine's accelerators and matrix units, and which policy is
fast on them (`precision.check`)."""

from __future__ import annotations

from typing import Annotated

import typer

from mptrain.commands.options import JsonOpt, VerboseOpt, emit, user_errors


def check_gpu_command(
    bench: Annotated[bool, typer.Option("--bench", metavar="", help=(
        "Measure again, every dtype (float32, float16, bfloat16) on each device: a matmul, a "
        "fused dense layer and a 3x3 conv (about 15 s), and show the timings."))] = False,
    no_bench: Annotated[bool, typer.Option("--no-bench", metavar="", help=(
        "Recommend by the hardware's flags alone, without measuring."))] = False,
    bench_scale: Annotated[float, typer.Option(min=0.01, max=4.0, help=(
        "Size factor for the --bench kernels (1 = matmul 1024², conv 16×56²×64); smaller "
        "is quicker, larger is steadier."))] = 1.0,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """What accelerators and CPU matrix units this machine has, and which policy will be fast.

    The recommendation follows this machine's measured kernel speeds: measured once (about
    10 s) and cached per machine and TensorFlow version. Exits 0 without a GPU: that is
    information, not an error.
    """
    from mptrain.precision.check import machine_report
    from mptrain.report.console import stderr
    from mptrain.report.views import check_gpu_view

    with user_errors(verbose=verbose, json_out=json_out):
        report = machine_report(bench=bench, no_bench=no_bench, bench_scale=bench_scale,
                               verbose=verbose, status=stderr.status)
    emit(report, json_out, check_gpu_view)
