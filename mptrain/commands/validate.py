"""`mptrain validate`: an experiment checked and printed fully resolved (`runs.preflight`)."""

from __future__ import annotations

from typing import Annotated

import typer

from mptrain.commands.options import ConfigArg, SetOpt, VerboseOpt, stdout_reader_may_stop, user_errors


def validate_command(
    config: ConfigArg,
    set_: SetOpt = None,
    deep: Annotated[bool, typer.Option("--deep", metavar="", help=(
        "Also load the data and build the model as `run` would (seconds: imports "
        "TensorFlow), so nothing `run` could refuse is left unchecked."))] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Check an experiment and print it fully resolved (every default filled in); no training.

    Checks what `run` can check without TensorFlow: the file, every key, data and model
    files present, the CSV header and label column, image and text folders, batch size
    against the data, saved models' custom layers. --deep goes on to load the data and build
    the model.
    """

    from mptrain.config import load_config
    from mptrain.runs.preflight import check_experiment

    with user_errors(verbose=verbose):
        experiment = load_config(config, set_)
        notes = check_experiment(experiment, thorough=True)
        if deep:
            from mptrain.runs.experiment import prepare

            prepare(experiment, verbose=verbose)
    typer.echo(f"# {config}: valid" + (" (data loaded, model built)" if deep else ""), err=True)
    for note in notes:
        typer.echo(f"# note: {note}", err=True)
    with stdout_reader_may_stop():
        typer.echo(experiment.yaml_text(), nl=False)
