"""The `mptrain` command line: parse, call one library function, render.

TensorFlow is imported only inside the commands that train or probe devices, so `--help`,
`validate` and `configs` answer instantly.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
import typer.core

from mptrain import __version__
from mptrain.errors import DataError, MptrainError

STARTED_AT = time.perf_counter()


class _FlagHelp:
    """Typer labels its own --help flag `<bool>`; a flag takes no value, so show none."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class _Command(_FlagHelp, typer.core.TyperCommand):
    pass


class _Group(_FlagHelp, typer.core.TyperGroup):
    pass


app = typer.Typer(
    cls=_Group,
    rich_markup_mode="markdown",
    help="Train Keras models in mixed precision from YAML experiment files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ConfigArg = Annotated[
    str,
    typer.Argument(metavar="CONFIG", show_default=False,
                   help="Experiment YAML file, or the name of a built-in one (see `mptrain configs`)."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="KEY.PATH=VALUE",
                 help="Override a config key (repeatable); the value is read as YAML: "
                      "--set train.epochs=2. KEY=null removes the key (its default applies); "
                      "setting model.kind drops the old kind's keys."),
]
JsonOpt = Annotated[bool, typer.Option("--json", metavar="", help="Print only a JSON object on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", metavar="",
                                          help="Show TensorFlow's own start-up logs (hidden by default).")]


def main() -> None:
    app(prog_name="mptrain")


@contextmanager
def _stdout_reader_may_stop():
    """A reader that stops early (`mptrain validate x | head -1`) is not an error: exit 0
    quietly instead of click's exit 1."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


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


@contextmanager
def _user_errors(interrupted: str = "interrupted"):
    """Errors a user can fix → their message and exit code, never a traceback; Ctrl-C → 130."""
    from mptrain.report.console import stderr

    try:
        yield
    except MptrainError as exc:
        stderr.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        stderr.print(interrupted)
        raise typer.Exit(130) from None


def _emit(data, json_out: bool, render) -> None:
    """One JSON object on stdout (nothing else), or the Rich rendering of it."""
    with _stdout_reader_may_stop():
        if json_out:
            from mptrain.run_folder import to_json

            typer.echo(to_json(data if isinstance(data, dict) else data.model_dump()))
        else:
            from mptrain.report.console import stdout_console

            stdout_console().print(render(data))


@app.command(cls=_Command)
def run(
    config: ConfigArg,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
    initial_weights: Annotated[Path | None, typer.Option(hidden=True)] = None,  # used by compare
    output_dir: Annotated[Path | None, typer.Option(hidden=True)] = None,  # used by compare
) -> None:
    """Train and evaluate one experiment; write its run folder and print a summary.

    The run folder OUTPUT_DIR/NAME-TIMESTAMP/ holds config.yaml (resolved), metrics.jsonl,
    steps.jsonl, summary.json and model.keras. Live progress goes to stderr.
    """
    from mptrain.config import load_config
    from mptrain.report.console import stderr
    from mptrain.report.progress import LiveProgress
    from mptrain.report.tables import run_header, summary_table

    with _user_errors("interrupted: the run folder was removed"):
        experiment = load_config(config, set_)
        from mptrain.runner import run_experiment

        with LiveProgress() as progress:
            result = run_experiment(experiment, listeners=[progress], verbose=verbose,
                                    initial_weights=initial_weights, output_dir=output_dir,
                                    started_at=STARTED_AT,
                                    on_start=lambda c, w, notes: stderr.print(
                                        run_header(experiment, c, w, notes), soft_wrap=True))
    _emit(result.summary, json_out, summary_table)


@app.command(cls=_Command)
def compare(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG", show_default=False,
        help="Experiment YAML file or built-in name. Without it: the guide's mnist_mixed "
             "(needs MNIST; `mptrain compare synthetic` runs anywhere).")] = None,
    policies: Annotated[str, typer.Option(help="Comma-separated policies to compare.")] = (
        "float32,mixed_float16"),
    loops: Annotated[str | None, typer.Option(
        help="Comma-separated loops (fit,custom); default: the experiment's.")] = None,
    epochs: Annotated[int | None, typer.Option(min=1, help="Shortcut for --set train.epochs=N.")] = None,
    steps: Annotated[int | None, typer.Option(
        min=1, help="Stop every variant after N training steps (then evaluate).")] = None,
    max_step_seconds: Annotated[float | None, typer.Option(
        min=0.0, help="Stop a variant once one of its steps takes longer than this (0: never).")] = 60.0,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run one experiment under several policies (and loops) from the same initial weights.

    Each variant runs in its own process. Writes OUTPUT_DIR/compare-NAME-TIMESTAMP/ with
    compare.json, compare.png and every variant's run folder, and prints two tables that fit
    80 columns: the results (speed-up, accuracy, verdict) and the details.
    """
    from mptrain.compare import DEFAULT_EXPERIMENT, explain_missing_default, plan_variants, run_compare
    from mptrain.config import load_config
    from mptrain.report.console import stderr
    from mptrain.report.tables import compare_tables

    overrides = list(set_ or [])
    if epochs is not None:
        overrides.append(f"train.epochs={epochs}")
    if steps is not None:
        overrides.append(f"train.max_steps={steps}")
    if max_step_seconds:
        overrides.append(f"train.max_step_seconds={max_step_seconds}")
    with _user_errors():
        experiment = load_config(config or DEFAULT_EXPERIMENT, overrides)
        variants = plan_variants(policies, loops, experiment)

        def notes(warnings: dict[str, str]) -> None:
            for warning in dict.fromkeys(warnings.values()):
                labels = ", ".join(label for label, w in warnings.items() if w == warning)
                stderr.print(f"[yellow]note ({labels}):[/] {warning}", soft_wrap=True, highlight=False)

        def announce(index: int, total: int, variant) -> None:
            stderr.rule(f"variant {index}/{total}: {variant.policy} · {variant.loop}")

        try:
            result = run_compare(experiment, variants, verbose=verbose, on_notes=notes,
                                 on_variant=announce)
        except DataError as exc:
            raise (explain_missing_default(exc) if config is None else exc) from None
    _emit(result.record, json_out, compare_tables)
    if any(row.failed for row in result.record.variants):
        raise typer.Exit(1)


@app.command(cls=_Command)
def validate(config: ConfigArg, set_: SetOpt = None) -> None:
    """Check an experiment and print it fully resolved (every default filled in); no training."""
    import yaml

    from mptrain.config import load_config
    from mptrain.preflight import check_experiment

    with _user_errors():
        experiment = load_config(config, set_)
        check_experiment(experiment)
    typer.echo(f"# {config}: valid", err=True)
    with _stdout_reader_may_stop():
        typer.echo(yaml.safe_dump(experiment.to_yaml_dict(), sort_keys=False), nl=False)


@app.command("check-gpu", cls=_Command)
def check_gpu(
    bench: Annotated[bool, typer.Option("--bench", metavar="", help=(
        "Also time a matmul, a fused dense layer and a 3x3 conv in float32, float16 and "
        "bfloat16 on each device (a few seconds), and cite the measurement."))] = False,
    bench_scale: Annotated[float, typer.Option(min=0.01, max=4.0, help=(
        "Size factor for the --bench kernels (1 = matmul 1024², conv 16×56²×64); smaller "
        "is quicker, larger is steadier."))] = 1.0,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """What accelerators and CPU matrix units this machine has, and which policy will be fast.

    Exits 0 without a GPU: that is information, not an error.
    """
    from mptrain.check_gpu import check_report
    from mptrain.hardware import probe
    from mptrain.tf_runtime import import_tensorflow

    tf = import_tensorflow(verbose)
    machine = probe(tf)
    results = None
    if bench:
        from mptrain.microbench import bench_devices, run_microbench
        from mptrain.report.console import stderr

        with stderr.status("benchmarking kernels per dtype…"):
            results = run_microbench(tf, bench_devices(tf), scale=bench_scale)
    from mptrain.report.tables import check_gpu_view

    _emit(check_report(machine, results), json_out, check_gpu_view)


@app.command("configs", cls=_Command)
def list_configs() -> None:
    """List the experiments shipped with mptrain (usable by name: `mptrain run mnist_mixed`)."""
    from rich.table import Table

    from mptrain.config import builtin_configs
    from mptrain.report.console import stdout_console

    table = Table("name", "what it is")
    for name, description in builtin_configs().items():
        table.add_row(name, description)
    with _stdout_reader_may_stop():
        stdout_console().print(table)
