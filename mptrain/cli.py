"""The `mptrain` command line: parse, call one library function, render.

TensorFlow is imported only inside the commands that train or probe devices, so `--help`,
`validate` and `configs` answer instantly.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
import typer.core

from mptrain.errors import ConfigError, DataError, MptrainError
from mptrain.version import __version__

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
                      "setting model.kind drops the old kind's keys. Relative paths given here "
                      "are relative to the current folder."),
]
JsonOpt = Annotated[bool, typer.Option("--json", metavar="", help="Print only a JSON object on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", metavar="", help=(
    "Show TensorFlow's own start-up logs (hidden by default), and the traceback behind an "
    "error raised by your own code (a builder, a saved model's layers)."))]


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


def parse_choices(text: str, allowed: tuple[str, ...] | None, option: str) -> list[str]:
    """`a,b` → ["a", "b"]; empty lists, unknown names (when `allowed` lists them; else the
    library checks them) and duplicates are errors."""
    from mptrain.errors import did_you_mean

    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        example = ",".join(allowed[:2]) if allowed else "float32,mixed_bfloat16"
        raise ConfigError(f"{option} {text!r}: give a comma-separated list, e.g. {example}")
    unknown = [item for item in items if allowed is not None and item not in allowed]
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise ConfigError(f"{option}: unknown {', '.join(map(repr, unknown))}{hint}; "
                          f"allowed: {', '.join(allowed)}")
    duplicates = sorted({item for item in items if items.count(item) > 1})
    if duplicates:
        raise ConfigError(f"{option}: {', '.join(duplicates)} listed more than once")
    return items


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
def _user_errors(interrupted: str = "interrupted", verbose: bool = False,
                 unsaid: type[MptrainError] | None = None):
    """Errors a user can fix → their message and exit code, never a traceback (with
    --verbose, the traceback of the user's own code that caused it); Ctrl-C → 130. An
    `unsaid` error ends with its exit code alone: someone else says it (a local worker's lost
    peer is said once, by `run --workers`)."""
    from mptrain.report.console import stderr

    try:
        yield
    except MptrainError as exc:
        if verbose and exc.__cause__ is not None:
            import traceback

            cause = exc.__cause__
            stderr.print("".join(traceback.format_exception(type(cause), cause, cause.__traceback__)),
                          markup=False, highlight=False, soft_wrap=True)
        if unsaid is None or not isinstance(exc, unsaid):
            _say_error(str(exc))
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt as exc:
        run_dir = getattr(exc, "run_dir", None)  # RunAbandoned: the run folder is known
        stderr.print(f"interrupted: {run_dir} keeps its last checkpoint; continue with\n"
                     f"  mptrain run --resume {run_dir}" if run_dir else interrupted,
                     soft_wrap=True, highlight=False)
        raise typer.Exit(130) from None


def _say_error(message: str) -> None:
    from rich.markup import escape

    from mptrain.report.console import stderr

    # escaped: a message may hold brackets Rich would read as markup ('mptrain[mlflow]')
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False,
                 soft_wrap=True)


def _emit(data, json_out: bool, render) -> None:
    """One JSON object on stdout (nothing else), or the Rich rendering of it."""
    with _stdout_reader_may_stop():
        if json_out:
            from mptrain.runs.folder import to_json

            typer.echo(to_json(data.model_dump()))
        else:
            from mptrain.report.console import stdout_console

            stdout_console().print(render(data))


def _status(text: str):
    from mptrain.report.console import stderr

    return stderr.status(text)


def _notes(notes: list[str]) -> None:
    from rich.markup import escape

    from mptrain.report.console import stderr

    for note in notes:
        stderr.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True, highlight=False)


@app.command(cls=_Command)
def run(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG", show_default=False,
        help="Experiment YAML file, or the name of a built-in one (see `mptrain configs`). "
             "With --resume: optional, checked against the run's own config.")] = None,
    set_: SetOpt = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="RUN_DIR", show_default=False,
        help="Continue the interrupted, killed or failed run in RUN_DIR from its last "
             "checkpoint, with its own config.yaml (a run on local workers: on as many "
             "again); --set train.epochs=N (or a raised train.max_steps) trains a run "
             "further.")] = None,
    workers: Annotated[int | None, typer.Option(
        min=2, metavar="N", show_default=False,
        help="Try multi-worker training on this machine: N worker processes on 127.0.0.1 "
             "(distribute.strategy multi_worker_mirrored); the chief prints the summary. "
             "With --resume: continue that run on N workers.")] = None,
    max_restarts: Annotated[int, typer.Option(
        min=0, metavar="K",
        help="With local workers: when one is lost (killed, or stopped by a signal), restart "
             "them all from the last checkpoint, up to K times; then stop, saying how to "
             "resume.")] = 0,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
    initial_weights: Annotated[Path | None, typer.Option(hidden=True)] = None,  # compare, plan
    run_dir: Annotated[Path | None, typer.Option(hidden=True)] = None,  # compare, plan, --workers
    supervised: Annotated[bool, typer.Option(hidden=True)] = False,  # a --workers worker
) -> None:
    """Train and evaluate one experiment; write its run folder and print a summary.

    The run folder OUTPUT_DIR/NAME-TIMESTAMP/ holds config.yaml (resolved), summary.json,
    metrics.jsonl, steps.jsonl, checkpoints/ and model.keras. Live progress goes to stderr.
    Ctrl-C or SIGTERM stops after the current step, saves a checkpoint and prints the
    --resume command (exit 130 / 143); a diverged run exits 3. With local workers, a lost
    worker stops them all (exit 4, with the --resume command) unless --max-restarts allows
    restarting them.
    """
    from mptrain.config import load_config
    from mptrain.errors import WorkerLost
    from mptrain.report.console import stderr
    from mptrain.report.progress import LiveProgress
    from mptrain.report.tables import run_header, summary_table
    from mptrain.runs.workers import local_worker_count, worker_overrides
    from mptrain.signals import DIVERGED_EXIT_CODE, exit_code, ignoring_interrupts

    overrides = [*(set_ or []), *(worker_overrides(workers) if workers is not None else [])]
    with _user_errors("interrupted (a run folder, if one was made, keeps its last checkpoint)",
                      verbose, unsaid=WorkerLost if supervised else None):
        if resume is not None:
            from mptrain.runs.resume import AlreadyFinished, resume_config

            try:
                experiment = resume_config(resume, config, overrides)
            except AlreadyFinished as done:
                stderr.print(f"nothing to do: {done}", soft_wrap=True, highlight=False)
                raise typer.Exit(0) from None
        elif config is None:
            raise ConfigError("mptrain run: give an experiment (CONFIG) or --resume RUN_DIR")
        else:
            experiment = load_config(config, overrides)
        count = local_worker_count(experiment.distribute.workers, workers, supervised,
                                   "TF_CONFIG" in os.environ)
        if count is not None:
            raise typer.Exit(_run_on_local_workers(experiment, count, config, overrides, resume,
                                                   max_restarts, json_out, verbose))
        if max_restarts:
            raise ConfigError("--max-restarts restarts lost local workers: it needs --workers N "
                              "(or --resume of a run on local workers)")
        if resume is None:
            from mptrain.measure.plan import plan_beside

            if (beside := plan_beside(config)) is not None:
                stderr.print(f"[cyan]plan:[/] {beside}", soft_wrap=True, highlight=False)
        from mptrain.runs.runner import run_experiment

        def on_start(prepared, notes: list[str]) -> None:
            stderr.print(run_header(experiment, prepared.choice, prepared.speed_warning, notes),
                         soft_wrap=True)

        with LiveProgress() as progress:
            result = run_experiment(experiment, resume=resume, listeners=[progress],
                                    verbose=verbose, initial_weights=initial_weights,
                                    run_dir=run_dir, started_at=STARTED_AT, on_start=on_start,
                                    status=_status)
    status = result.summary.status
    # a second Ctrl-C once training has stopped has nothing left to abandon: the summary and
    # the resume command are printed whole
    with ignoring_interrupts() if status == "interrupted" else contextlib.nullcontext():
        _emit(result.summary, json_out, summary_table)
        if status == "interrupted":
            stderr.print(f"[yellow]{result.summary.stop_reason}[/]: checkpoint saved. Continue "
                         f"with:\n  mptrain run --resume {result.run_dir}", soft_wrap=True,
                         highlight=False)
    if status == "interrupted":
        raise typer.Exit(exit_code(result.signal))
    if status == "diverged":
        stderr.print(f"[red]diverged[/]: {result.summary.stop_reason or 'the loss became NaN/inf'}"
                     f"; the last good checkpoint is in {result.run_dir}/checkpoints",
                     soft_wrap=True, highlight=False)
        raise typer.Exit(DIVERGED_EXIT_CODE)


def _run_on_local_workers(experiment, count: int, config: str | None, overrides: list[str],
                          resume: Path | None, max_restarts: int, json_out: bool,
                          verbose: bool) -> int:
    """`run` as `count` local worker processes (`local_workers.run_local_workers`): the
    chief's summary, then the line that says why the run stopped if a worker was lost; the
    exit code."""
    from rich.markup import escape

    from mptrain.report.console import stderr
    from mptrain.runs.workers import local_run, run_local_workers

    result = run_local_workers(
        local_run(experiment, count, config, overrides, resume, json_out, verbose), max_restarts,
        on_restart=lambda line: stderr.print(f"[yellow]restart:[/] {escape(line)}",
                                             soft_wrap=True, highlight=False))
    typer.echo(result.stdout, nl=False)
    if result.message is not None:
        _say_error(result.message)
    return result.code


@app.command(cls=_Command)
def compare(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG", show_default=False,
        help="Experiment YAML file or built-in name. Without it: the guide's mnist_mixed "
             "(needs MNIST; `mptrain compare synthetic` runs anywhere).")] = None,
    policies: Annotated[str | None, typer.Option(
        show_default=False,
        help="Comma-separated policies, or any candidate `mptrain plan` prints "
             "(mixed_bfloat16+xla, float32+onednn_bf16, ...). Default: float32 and the policy "
             "that `policy: auto` picks on this machine (measured; see check-gpu).")] = None,
    loops: Annotated[str | None, typer.Option(
        help="Comma-separated loops (fit,custom); default: the experiment's.")] = None,
    strategies: Annotated[str | None, typer.Option(
        help="Comma-separated tf.distribute strategies (none,mirrored,...); default: the "
             "experiment's distribute.strategy.")] = None,
    epochs: Annotated[int | None, typer.Option(min=1, help="Shortcut for --set train.epochs=N.")] = None,
    steps: Annotated[int | None, typer.Option(
        min=1, help="Stop every variant after N training steps (then evaluate).")] = None,
    max_step_seconds: Annotated[float | None, typer.Option(
        min=0.0, help="Stop a variant once one of its steps takes longer than this (0: never).")] = 60.0,
    set_: SetOpt = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="COMPARE_DIR", show_default=False,
        help="Finish a compare that stopped (Ctrl-C, or killed): run the variants that did "
             "not finish.")] = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run one experiment under several policies (and loops) from the same initial weights.

    Each variant runs in its own process, all of them in turns (a turn of steps each, in a
    random order every round), so the machine's drift falls on every variant alike; a
    speed-up is the median of the per-round ratios. Writes OUTPUT_DIR/compare-NAME-TIMESTAMP/
    with compare.json, compare.png and every variant's run folder, and prints three tables
    that fit 80 columns: the results (speed-up, accuracy, verdict), the details and the whole
    run (one-off costs, wall time). Ctrl-C or SIGTERM stops every variant after its current
    step (with a checkpoint); --resume finishes the compare later.
    """
    from mptrain.config import load_config
    from mptrain.config.schema import LOOPS, STRATEGIES
    from mptrain.measure.compare import (
        DEFAULT_EXPERIMENT,
        default_policies,
        explain_missing_default,
        plan_variants,
        resume_compare,
        run_compare,
    )
    from mptrain.report.console import plain_text, stderr
    from mptrain.report.progress import print_turn
    from mptrain.report.tables import compare_tables
    from mptrain.signals import exit_code

    overrides = list(set_ or [])
    if epochs is not None:
        overrides.append(f"train.epochs={epochs}")
    if steps is not None:
        overrides.append(f"train.max_steps={steps}")
    if max_step_seconds:
        overrides.append(f"train.max_step_seconds={max_step_seconds}")

    with _user_errors(verbose=verbose):
        if resume is not None:
            result = resume_compare(resume, verbose=verbose, on_turn=print_turn,
                                    as_text=lambda record: plain_text(compare_tables(record)))
        else:
            experiment = load_config(config or DEFAULT_EXPERIMENT, overrides)
            chosen = (parse_choices(policies, None, "--policies") if policies is not None
                      else default_policies(experiment, verbose, _status))
            variants = plan_variants(
                experiment, chosen,
                parse_choices(loops, LOOPS, "--loops") if loops else None,
                parse_choices(strategies, STRATEGIES, "--strategies") if strategies else None)

            def notes(warnings: dict[str, str]) -> None:
                for warning in dict.fromkeys(warnings.values()):
                    labels = ", ".join(label for label, w in warnings.items() if w == warning)
                    stderr.print(f"[yellow]note ({labels}):[/] {warning}", soft_wrap=True,
                                 highlight=False)

            try:
                result = run_compare(experiment, variants, verbose=verbose, on_notes=notes,
                                     on_turn=print_turn,
                                     as_text=lambda record: plain_text(compare_tables(record)))
            except DataError as exc:
                raise (explain_missing_default(exc) if config is None else exc) from None
    _emit(result.record, json_out, compare_tables)
    _notes(result.notes)
    if result.record.status == "interrupted":
        stderr.print(f"[yellow]compare interrupted[/]: finished variants are kept. Continue with:\n"
                     f"  mptrain compare --resume {result.folder}", soft_wrap=True, highlight=False)
        raise typer.Exit(exit_code(result.signal))
    if any(row.summary is None for row in result.record.variants):
        raise typer.Exit(1)


@app.command(cls=_Command)
def plan(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG", show_default=False,
        help="Experiment YAML file or built-in name (not needed with --resume).")] = None,
    tolerance: Annotated[float, typer.Option(
        metavar="PT", help="How much higher than float32's a candidate's training loss over its "
                           "trial may be, in percent (with --eval: also test-accuracy points).")] = 3.0,
    budget: Annotated[float, typer.Option(
        metavar="MINUTES", help="Stop starting trials after this long; the untried are named "
                                "and --resume tries them.")] = 20.0,
    steps: Annotated[int, typer.Option(help="Training steps per trial.")] = 30,
    candidates: Annotated[str | None, typer.Option(
        help="Comma-separated candidates to try (float32 is always tried); default: every one "
             "this machine can run.")] = None,
    evaluate: Annotated[bool, typer.Option(
        "--eval", metavar="", help="Also judge each candidate's test accuracy (evaluates the "
                                   "whole test set per trial).")] = False,
    out: Annotated[Path | None, typer.Option(
        metavar="FILE", show_default=False,
        help="Where to write the chosen experiment; default: EXPERIMENT.plan.yaml beside the "
             "experiment file (a built-in's: in the current folder).")] = None,
    set_: SetOpt = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="PLAN_DIR", show_default=False,
        help="Finish a plan that stopped (Ctrl-C, or out of budget): run the untried trials.")] = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure which precision is fastest for this model on this machine, within an accuracy
    tolerance, and write it as a runnable experiment.

    Candidates (this machine's): float32; mixed_bfloat16, without and with XLA; mixed_float16
    where it can be fast; on CPUs float32 with oneDNN's bfloat16 math and with TensorFlow's
    bfloat16 graph rewrite; on GPUs float32 without TF32. Each is a short trial from the same
    initial weights on the same batches, all run in turns, with the most promising 16-bit one
    also tried with its slow layers kept float32 (measured per layer first). Judged per step
    and over the whole experiment (one-off costs included). Prints an 80-column table; writes
    plan.json, plan.png and the trials in OUTPUT_DIR/plan-NAME-TIMESTAMP/, and the plan's
    experiment file (`mptrain run` it). Ctrl-C stops every trial; --resume runs them again.
    """
    from mptrain.measure.plan import plan_file_for, resume_plan, run_plan, start_plan
    from mptrain.precision.candidates import CANDIDATE_NAMES
    from mptrain.report.console import plain_text, stderr
    from mptrain.report.progress import print_turn
    from mptrain.report.tables import plan_tables
    from mptrain.signals import exit_code

    with _user_errors(verbose=verbose):
        if resume is not None:
            record, folder = resume_plan(resume), resume
        else:
            from mptrain.config import load_config

            if config is None:
                raise ConfigError("mptrain plan: give an experiment (CONFIG) or --resume PLAN_DIR")
            experiment = load_config(config, set_)
            names = parse_choices(candidates, CANDIDATE_NAMES, "--candidates") if candidates else None
            record, folder = start_plan(
                experiment, names=names, steps=steps, tolerance_pct=tolerance,
                budget_minutes=budget, evaluate=evaluate,
                out=out.resolve() if out else plan_file_for(config),
                verbose=verbose, status=_status)
        result = run_plan(record, folder, verbose=verbose, on_turn=print_turn, on_layers=_status,
                          as_text=lambda record: plain_text(plan_tables(record)))
    _emit(result.record, json_out, plan_tables)
    _notes(result.notes)
    if result.record.status == "interrupted":
        stderr.print(f"[yellow]plan interrupted[/]: finished trials are kept. Continue with:\n"
                     f"  mptrain plan --resume {result.folder}", soft_wrap=True, highlight=False)
        raise typer.Exit(exit_code(result.signal))


@app.command(cls=_Command)
def runs(
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
    from mptrain.measure.runs import DEFAULT_FOLDER, compare_runs, list_runs, split_arguments
    from mptrain.report.tables import compare_tables, runs_table

    arguments = arguments or []
    with _user_errors():
        if compare:
            folder, named = split_arguments(arguments)
            result = compare_runs(named, folder)
        elif len(arguments) > 1:
            raise ConfigError(f"mptrain runs: give one folder, not {len(arguments)}; to put runs "
                              "side by side: mptrain runs DIR --compare RUN RUN...")
        else:
            result = list_runs(Path(arguments[0]) if arguments else DEFAULT_FOLDER)
    _emit(result, json_out, compare_tables if compare else runs_table)


@app.command(cls=_Command)
def validate(
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
    import yaml

    from mptrain.config import load_config
    from mptrain.runs.preflight import check_experiment

    with _user_errors(verbose=verbose):
        experiment = load_config(config, set_)
        notes = check_experiment(experiment, thorough=True)
        if deep:
            from mptrain.runs.experiment import prepare

            prepare(experiment, verbose=verbose)
    typer.echo(f"# {config}: valid" + (" (data loaded, model built)" if deep else ""), err=True)
    for note in notes:
        typer.echo(f"# note: {note}", err=True)
    with _stdout_reader_may_stop():
        typer.echo(yaml.safe_dump(experiment.to_yaml_dict(), sort_keys=False), nl=False)


@app.command(cls=_Command)
def lint(
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
    from mptrain.diagnostics.lint import lint_experiment
    from mptrain.report.tables import lint_view

    with _user_errors(verbose=verbose):
        (chosen,) = parse_choices(target, ("auto", "gpu", "tpu", "cpu"), "--target")
        report = lint_experiment(load_config(config, set_), chosen, verbose=verbose)
    _emit(report, json_out, lint_view)
    if report.warnings:
        raise typer.Exit(1)


@app.command(cls=_Command)
def diagnose(
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
    from mptrain.config import load_config
    from mptrain.diagnostics.numerics import diagnose as run_diagnosis
    from mptrain.report.tables import diagnose_view

    with _user_errors(verbose=verbose):
        result = run_diagnosis(load_config(config, set_), steps=steps, verbose=verbose)
    _emit(result, json_out, diagnose_view)


@app.command(cls=_Command)
def memory(
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
    from mptrain.config.schema import POLICIES
    from mptrain.measure.memory import plan_memory
    from mptrain.report.tables import memory_view

    with _user_errors(verbose=verbose):
        experiment = load_config(config, set_)
        chosen = parse_choices(policies, tuple(p for p in POLICIES if p != "auto"), "--policies")
        report = plan_memory(experiment, chosen, measure=measure, verbose=verbose)
    _emit(report, json_out, memory_view)


@app.command("check-gpu", cls=_Command)
def check_gpu(
    bench: Annotated[bool, typer.Option("--bench", metavar="", help=(
        "Measure again, every dtype (float32, float16, bfloat16) on each device: a matmul, a "
        "fused dense layer and a 3x3 conv (about 15 s), and show the timings."))] = False,
    no_bench: Annotated[bool, typer.Option("--no-bench", metavar="", help=(
        "Recommend by the hardware's flags alone, without measuring."))] = False,
    bench_scale: Annotated[float, typer.Option(min=0.01, max=4.0, help=(
        "Size factor for the --bench kernels (1 = matmul 1024², conv 16×56²×64); smaller "
        "is quicker, larger is steadier."))] = 1.0,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """What accelerators and CPU matrix units this machine has, and which policy will be fast.

    The recommendation follows this machine's measured kernel speeds: measured once (about
    10 s) and cached per machine and TensorFlow version. Exits 0 without a GPU: that is
    information, not an error.
    """
    from mptrain.precision.check import check_machine
    from mptrain.report.tables import check_gpu_view

    with _user_errors(verbose=verbose):
        report = check_machine(bench=bench, no_bench=no_bench, bench_scale=bench_scale,
                               verbose=verbose, status=_status)
    _emit(report, json_out, check_gpu_view)


@app.command("schema", cls=_Command)
def schema() -> None:
    """Print the JSON Schema of an experiment file (keys, types, defaults, limits, help).

    Point your editor at it for completion and checking as you type: save it
    (`mptrain schema > experiment.schema.json`) and put `# yaml-language-server:
    $schema=./experiment.schema.json` on your experiment's first line. `mptrain validate`
    checks what a schema cannot (rules across keys, optimizer arguments, files on disk).
    """
    import json

    from mptrain.config.json_schema import experiment_schema

    with _stdout_reader_may_stop():
        typer.echo(json.dumps(experiment_schema(), indent=2))


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
