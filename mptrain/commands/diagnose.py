"""`mptrain diagnose`: would the model's numbers survive 16 bits (`diagnostics.numerics`)."""

from __future__ import annotations

from typing import Annotated

import typer

from mptrain.commands.options import ConfigArg, JsonOpt, SetOpt, VerboseOpt, emit, user_errors


def diagnose_command(
    config: ConfigArg,
    set_: SetOpt = None,
    steps: Annotated[int, typer.Option(min=1, help="Training steps before the measured one.")] = 5,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Would this model's numbers survive 16 bits? A few float32 steps, measured per layer.

    Activations and gradients that overflow (> 65504) or underflow float16, with and without
    the loss scale; the loss-scale range that keeps gradients representable; bfloat16's
    relative error per layer; a verdict per policy and a recommendation.
    """
    import mptrain.diagnostics.numerics
    from mptrain.config import load_config
    from mptrain.report.views import diagnose_view

    with user_errors(verbose=verbose, json_out=json_out):
        result = mptrain.diagnostics.numerics.diagnose(load_config(config, set_), steps=steps,
                                                       verbose=verbose)
    emit(result, json_out, diagnose_view)
