"""The `mptrain` command line: the Typer app, one command per module of `commands/`.

TensorFlow is imported only inside the commands that train or probe devices, so `--help`,
`validate` and `configs` answer instantly.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from mptrain.commands import check_gpu, compare, diagnose, lint, memory, plan, run, runs, schema, validate
from mptrain.commands.options import Command, Group
from mptrain.version import __version__

app = typer.Typer(
    cls=Group,
    rich_markup_mode=None,
    help="Train Keras models in mixed precision from YAML experiment files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mptrain {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", metavar="", callback=_version, is_eager=True,
                                          help="Print mptrain's version and exit.")] = False,
) -> None:
    """Train Keras models in mixed precision from YAML experiment files."""


for name, function in [("run", run.run), ("compare", compare.compare), ("plan", plan.plan),
                       ("runs", runs.runs), ("validate", validate.validate), ("lint", lint.lint),
                       ("diagnose", diagnose.diagnose), ("memory", memory.memory),
                       ("check-gpu", check_gpu.check_gpu), ("schema", schema.schema),
                       ("configs", schema.list_configs)]:
    app.command(name, cls=Command)(function)


def main() -> None:
    import signal

    from mptrain.errors import WorkerLost
    from mptrain.signals import exit_code

    try:
        app(prog_name="mptrain")
    except SystemExit as done:
        if done.code in (exit_code(signal.SIGINT), exit_code(signal.SIGTERM)):
            # stopped by a signal and all said: a late second Ctrl-C, arriving while the
            # interpreter exits, has nothing left to abandon (it would turn 130 into a kill)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if done.code != WorkerLost.exit_code:
            raise
        # A worker was lost: TensorFlow's runtime cannot be reset in this process ("Restart
        # your program to reset"), and its finalisers may wait on the dead peer or print
        # tracebacks from its thread pools. Everything is said and written: leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(done.code)
