"""`mptrain lint`: what keeps the model from being fast or safe in 16 bits
(`diagnostics.speed`)."""

from __future__ import annotations

from typing import Annotated

import typer

from mptrain.commands.options import ConfigArg, JsonOpt, SetOpt, VerboseOpt, emit, parse_choices, user_errors


def lint_command(
    config: ConfigArg,
    set_: SetOpt = None,
    target: Annotated[str, typer.Option(help=(
        "The hardware to check dimensions for: auto (what is here: Tensor Cores, a TPU, or "
        "none on a CPU), gpu (multiples of 8), tpu (multiples of 128), cpu (none)."))] = "auto",
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """What keeps this model from being fast or safe in 16 bits, without training it.

    Dimensions Tensor Cores want as multiples of 8 (TPUs: 128) where there are such units,
    largest FLOPs share first; a model too small to gain; outputs, layers and softmaxes in the
    wrong dtype. Each finding says what to change in the YAML. Exit 0: no warnings; 1:
    warnings; 2: bad input.
    """
    from mptrain.config import load_config
    from mptrain.diagnostics.speed import lint_experiment
    from mptrain.report.views import lint_view

    with user_errors(verbose=verbose, json_out=json_out):
        (chosen,) = parse_choices(target, ("auto", "gpu", "tpu", "cpu"), "--target")
        report = lint_experiment(load_config(config, set_), chosen, verbose=verbose)
    emit(report, json_out, lint_view)
    if report.warnings:
        raise typer.Exit(1)
