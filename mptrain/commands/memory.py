"""`mptrain memory`: training memory per policy, estimated and measured (`measure.memory`)."""

from __future__ import annotations

from typing import Annotated

import typer

from mptrain.commands.options import ConfigArg, JsonOpt, SetOpt, VerboseOpt, emit, parse_choices, user_errors


def memory_command(
    config: ConfigArg,
    policies: Annotated[str, typer.Option(help="Comma-separated policies.")] = (
        "float32,mixed_float16,mixed_bfloat16"),
    set_: SetOpt = None,
    measure: Annotated[bool, typer.Option(help="Also measure a 3-step run per policy.")] = True,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Training memory per policy: weights, gradients, optimizer state and activations,
    estimated from the built model and measured in a short run; the largest batch that fits.
    """
    from mptrain.config import load_config
    from mptrain.config.names import POLICIES
    from mptrain.measure.memory import plan_memory
    from mptrain.report.views import memory_view

    with user_errors(verbose=verbose, json_out=json_out):
        experiment = load_config(config, set_)
        chosen = parse_choices(policies, tuple(p for p in POLICIES if p != "auto"), "--policies")
        report = plan_memory(experiment, chosen, measure=measure, verbose=verbose)
    emit(report, json_out, memory_view)
