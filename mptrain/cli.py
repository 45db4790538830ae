"""The `mptrain` command line: parse, call one library function, render.

TensorFlow is imported only inside the commands that train or probe devices, so `--help`,
`validate` and `configs` answer instantly.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from mptrain.errors import MptrainError

STARTED_AT = time.perf_counter()

app = typer.Typer(
    help="Train Keras models in mixed precision from YAML experiment files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigArg = Annotated[
    str,
    typer.Argument(help="Experiment YAML file, or the name of a built-in one (see `mptrain configs`)."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="KEY.PATH=VALUE",
                 help="Override a config key (repeatable), value read as YAML: --set train.epochs=2"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print only a JSON object on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show TensorFlow's own logs.")]


@contextmanager
def _user_errors(interrupted: str = "interrupted"):
    """Errors a user can fix → their message and exit code, never a traceback; Ctrl-C → 130."""
    from mptrain.report import stderr

    try:
        yield
    except MptrainError as exc:
        stderr.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        stderr.print(interrupted)
        raise typer.Exit(130) from None


def _emit(data: dict, json_out: bool, render) -> None:
    """One JSON object on stdout (nothing else), or the Rich rendering of it."""
    if json_out:
        from mptrain.run_folder import to_json

        typer.echo(to_json(data))
    else:
        from mptrain.report import stdout_console

        stdout_console().print(render(data))


@app.command()
def run(
    config: ConfigArg,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
    initial_weights: Annotated[Path | None, typer.Option(hidden=True)] = None,  # used by compare
    output_dir: Annotated[Path | None, typer.Option(hidden=True)] = None,  # used by compare
) -> None:
    """Train and evaluate one experiment; write its run folder and print a summary.

    The run folder OUTPUT_DIR/<name>-<timestamp>/ holds config.yaml (resolved), metrics.jsonl,
    steps.jsonl, summary.json and model.keras.
    """
    from mptrain.config import load_config
    from mptrain.report import LiveProgress, run_header, stderr, summary_table

    with _user_errors("interrupted: the run folder was removed"):
        experiment = load_config(config, set_)
        from mptrain.runner import run_experiment

        with LiveProgress() as progress:
            result = run_experiment(experiment, listeners=[progress], verbose=verbose,
                                    initial_weights=initial_weights, output_dir=output_dir,
                                    started_at=STARTED_AT,
                                    on_start=lambda c, w: stderr.print(run_header(experiment, c, w),
                                                                       soft_wrap=True))
    _emit(result.summary, json_out, summary_table)


@app.command()
def compare(
    config: Annotated[str, typer.Argument(help="Experiment YAML file or built-in name.")] = "mnist_mixed",
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

    Each variant runs in its own process. Writes OUTPUT_DIR/compare-<name>-<timestamp>/ with
    compare.json, compare.png and every variant's run folder, and prints a side-by-side table.
    """
    from mptrain.compare import plan_variants, run_compare
    from mptrain.config import load_config
    from mptrain.report import compare_table, stderr

    overrides = list(set_ or [])
    if epochs is not None:
        overrides.append(f"train.epochs={epochs}")
    if steps is not None:
        overrides.append(f"train.max_steps={steps}")
    if max_step_seconds:
        overrides.append(f"train.max_step_seconds={max_step_seconds}")
    with _user_errors():
        experiment = load_config(config, overrides)
        variants = plan_variants(policies, loops, experiment)

        def announce(index: int, total: int, variant) -> None:
            stderr.rule(f"variant {index}/{total}: {variant.policy} · {variant.loop}")

        result = run_compare(experiment, variants, verbose=verbose, on_variant=announce)
    _emit(result.record, json_out, compare_table)
    if any(v.get("failed") for v in result.record["variants"]):
        raise typer.Exit(1)


@app.command()
def validate(config: ConfigArg, set_: SetOpt = None) -> None:
    """Check an experiment and print it fully resolved (every default filled in); no training."""
    import yaml

    from mptrain.config import load_config

    with _user_errors():
        experiment = load_config(config, set_)
    typer.echo(f"# {config}: valid", err=True)
    typer.echo(yaml.safe_dump(experiment.to_yaml_dict(), sort_keys=False), nl=False)


@app.command("check-gpu")
def check_gpu(
    bench: Annotated[bool, typer.Option("--bench", help="Also time matmul, dense and conv kernels "
                                        "per dtype on each device (a few seconds).")] = False,
    bench_scale: Annotated[float, typer.Option(help="Size factor for --bench kernels.", min=0.01,
                                               max=4.0)] = 1.0,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """What accelerators and CPU matrix units this machine has, and which policy will be fast.

    Exits 0 without a GPU: that is information, not an error.
    """
    from mptrain.hardware import check_report, probe
    from mptrain.tf_runtime import import_tensorflow

    tf = import_tensorflow(verbose)
    machine = probe(tf)
    results = None
    if bench:
        from mptrain.microbench import bench_devices, run_microbench
        from mptrain.report import stderr

        with stderr.status("benchmarking kernels per dtype…"):
            results = run_microbench(tf, bench_devices(tf), scale=bench_scale)
    from mptrain.report import check_gpu_view

    _emit(check_report(machine, results), json_out, check_gpu_view)


@app.command("configs")
def list_configs() -> None:
    """List the experiments shipped with mptrain (usable by name: `mptrain run mnist_mixed`)."""
    from rich.table import Table

    from mptrain.config import builtin_configs
    from mptrain.report import stdout_console

    table = Table("name", "what it is")
    for name, description in builtin_configs().items():
        table.add_row(name, description)
    stdout_console().print(table)

