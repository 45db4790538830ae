"""The `mptrain` command line: the Typer app, one command per module of `commands/`.

TensorFlow is imported only inside the commands that train or probe devices, so `--help`,
`validate` and `configs` answer instantly.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mptrain.commands import check_gpu, compare, diagnose, lint, memory, plan, run, runs, schema, validate
from mptrain.commands.options import Command, Group, leave
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


for name, function in [
        ("run", run.run_command), ("compare", compare.compare_command), ("plan", plan.plan_command),
        ("runs", runs.runs_command), ("validate", validate.validate_command),
        ("lint", lint.lint_command), ("diagnose", diagnose.diagnose_command),
        ("memory", memory.memory_command), ("check-gpu", check_gpu.check_gpu_command),
        ("schema", schema.schema_command), ("configs", schema.configs_command)]:
    app.command(name, cls=Command)(function)


def main() -> None:
    try:
        app(prog_name="mptrain")
    except SystemExit as done:
        leave(done.code)
