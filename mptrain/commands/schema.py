"""`mptrain schema` and `mptrain configs`: what an experiment file may hold, and the ones
shipped (`config`)."""

from __future__ import annotations

from mptrain.commands.options import stdout_reader_may_stop


def schema_command() -> None:
    """Print the JSON Schema of an experiment file (keys, types, defaults, limits, help).

    Point your editor at it for completion and checking as you type: save it
    (`mptrain schema > experiment.schema.json`) and put `# yaml-language-server:
    $schema=./experiment.schema.json` on your experiment's first line. `mptrain validate`
    checks what a schema cannot (rules across keys, optimizer arguments, files on disk).
    """
    import json

    import typer

    from mptrain.config.json_schema import experiment_schema

    with stdout_reader_may_stop():
        typer.echo(json.dumps(experiment_schema(), indent=2))


def configs_command() -> None:
    """List the experiments shipped with mptrain (usable by name: `mptrain run mnist_mixed`)."""
    from rich.console import Console
    from rich.table import Table

    from mptrain.config import builtin_configs

    table = Table("name", "what it is")
    for name, description in builtin_configs().items():
        table.add_row(name, description)
    with stdout_reader_may_stop():
        Console().print(table)
