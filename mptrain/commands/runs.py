"""`mptrain runs`: the run folders here, and any of them side by side (`runs.folder`,
`measure.side_by_side`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mptrain.commands.options import JsonOpt, emit, user_errors


def runs_command(
    arguments: Annotated[list[str] | None, typer.Argument(
        metavar="[DIR] [RUN...]", show_default=False,
        help="The folder the run folders are in (default: runs); with --compare, the runs "
             "to put side by side: folder names in DIR, or paths.")] = None,
    compare: Annotated[bool, typer.Option(
        "--compare", metavar="", help="Put the RUNs side by side with compare's tables and "
                                      "verdicts (the baseline: the first float32 run named, "
                                      "else the first).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List the run folders in DIR (and in its compare and plan folders), newest first:
    status (finished, interrupted, diverged, failed, running, or killed: `running` with its
    process gone), policy, loop, epochs, median step time, test accuracy, when. * marks a run
    `mptrain run --resume` can continue.
    """
    from mptrain.errors import ConfigError
    from mptrain.measure.side_by_side import compare_runs, split_arguments
    from mptrain.report.tables import compare_tables
    from mptrain.report.views import runs_table
    from mptrain.runs.folder import DEFAULT_FOLDER, list_runs

    arguments = arguments or []
    with user_errors(json_out=json_out):
        if compare:
            folder, named = split_arguments(arguments)
            result = compare_runs(named, folder)
        elif len(arguments) > 1:
            raise ConfigError(f"mptrain runs: give one folder, not {len(arguments)}; to put runs "
                              "side by side: mptrain runs DIR --compare RUN RUN...")
        else:
            result = list_runs(Path(arguments[0]) if arguments else DEFAULT_FOLDER)
    emit(result, json_out, compare_tables if compare else runs_table)
