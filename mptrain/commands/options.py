"""What every command shares: its option types, how a user's error is said, and how a result
is printed (JSON or Rich). Not a command: the command modules import it, never each other."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager, redirect_stdout
from typing import Annotated

import typer
import typer.core

from mptrain.errors import ConfigError, MptrainError

STARTED_AT = time.perf_counter()  # `run` reports its start-up from the process's own start


class _FlagHelp:
    """Typer labels its own --help flag `<bool>`; a flag takes no value, so show none."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class Command(_FlagHelp, typer.core.TyperCommand):
    pass


class Group(_FlagHelp, typer.core.TyperGroup):
    pass


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


def parse_batch_sizes(text: str | None) -> list[int] | None:
    """`--batch-sizes 32,64` → [32, 64]: whole numbers of at least 1, each once."""
    if text is None:
        return None
    items = parse_choices(text, None, "--batch-sizes")
    if not all(item.isdigit() and int(item) >= 1 for item in items):
        raise ConfigError(f"--batch-sizes {text!r}: give whole numbers of at least 1, e.g. 32,64")
    return [int(item) for item in items]


EpochsOpt = Annotated[int | None, typer.Option(
    min=1, show_default=False, help="Shortcut for --set train.epochs=N.")]
StepsOpt = Annotated[int | None, typer.Option(
    min=1, show_default=False,
    help="Stop training after N steps (then evaluate): shortcut for --set train.max_steps=N.")]


def length_overrides(epochs: int | None, steps: int | None) -> list[str]:
    """--epochs and --steps as the --set strings they stand for."""
    return [f"{key}={value}" for key, value in (("train.epochs", epochs), ("train.max_steps", steps))
            if value is not None]


BatchSizesOpt = Annotated[str | None, typer.Option(
    "--batch-sizes", metavar="B,B", show_default=False,
    help="Comma-separated batch sizes (the guide's second lever: 16 bits halve the memory, so "
         "a doubled batch may fit): every candidate at each, the learning rate following "
         "train.lr_scaling (none, linear, sqrt), every cell on the same examples, judged by its "
         "time to float32's training loss at the experiment's batch.")]


@contextmanager
def stdout_reader_may_stop():
    """A reader that stops early (`mptrain validate x | head -1`) is not an error: exit 0
    quietly instead of click's exit 1."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


def leave(code: int | str | None) -> None:
    """Exit the process with `code`, as a command's end asks (`SystemExit`'s code)."""
    import signal

    from mptrain.errors import WorkerLost
    from mptrain.signals import exit_code

    if code in (exit_code(signal.SIGINT), exit_code(signal.SIGTERM)):
        # stopped by a signal and all said: a late second Ctrl-C, arriving while the
        # interpreter exits, has nothing left to abandon (it would turn 130 into a kill)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code != WorkerLost.exit_code:
        sys.exit(code)
    # A worker was lost: TensorFlow's runtime cannot be reset in this process ("Restart your
    # program to reset"), and its finalisers may wait on the dead peer or print tracebacks
    # from its thread pools. Everything is said and written: leave at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextmanager
def user_errors(interrupted: str = "interrupted", verbose: bool = False,
                unsaid: bool = False, json_out: bool = False):
    """Errors a user can fix → their message and exit code, never a traceback (with
    --verbose, the traceback of the user's own code that caused it); a resume with nothing
    to do (`AlreadyFinished`) → what to do instead, exit 0; Ctrl-C → 130. `unsaid`: an
    error ends with its exit code alone, someone else says it (a local worker's is said
    once, by `run --workers`). `json_out`: the error is also one JSON object on stdout
    (`emit_error`), so a script reading `--json` always has one to parse.

    While the block runs, what anything prints goes to stderr: a command's results are
    printed after it, and stdout holds them alone. User code prints (a builder's
    `model.summary()`, a `print` in a model's `call`), and a summary table in front of `run
    --json`'s JSON broke what reads it."""

    from mptrain.errors import AlreadyFinished
    from mptrain.report.console import say, stderr
    from mptrain.signals import RunAbandoned, Terminated, exit_code, terminating_as_interrupts

    def stop(message: str, code: int, run_dir=None) -> typer.Exit:
        """The exit with `code`; with --json, the error said as a JSON object first."""
        if json_out:
            emit_error(message, code, run_dir)
        return typer.Exit(code)

    try:
        with terminating_as_interrupts(), redirect_stdout(sys.stderr):
            yield
    except AlreadyFinished as done:  # a resume of a finished run: said, and not an error
        say(str(done), "nothing to do")
        raise typer.Exit(0) from None
    except MptrainError as exc:
        if verbose and exc.__cause__ is not None:
            import traceback

            cause = exc.__cause__
            stderr.print("".join(traceback.format_exception(type(cause), cause, cause.__traceback__)),
                          markup=False, highlight=False, soft_wrap=True)
        if not unsaid:
            say_error(str(exc))
        raise stop(str(exc), exc.exit_code, exc.run_dir) from None
    except RunAbandoned as exc:  # a second Ctrl-C: the run folder is known
        said = f"{exc.run_dir} keeps its last checkpoint; continue with\n  mptrain run --resume {exc.run_dir}"
        say(said, "interrupted")
        raise stop(f"interrupted: {said}", 130, exc.run_dir) from None
    except Terminated as exc:  # SIGTERM before training's own handler: said, not silence
        say(str(exc), "stopped")
        raise stop(str(exc), exit_code(exc.signum)) from None
    except KeyboardInterrupt:
        say(interrupted)
        raise stop(interrupted, 130) from None


def say_error(message: str) -> None:
    from mptrain.report.console import say

    say(message, "error", "bold red")


def emit_error(message: str, exit_code: int, run_dir) -> None:
    """An error as `--json` gives it: one JSON object on stdout, as a result would be."""
    from mptrain.record import to_json

    with stdout_reader_may_stop():
        typer.echo(to_json({"error": message, "exit_code": exit_code,
                            "run_dir": str(run_dir) if run_dir is not None else None}))


def emit(data, json_out: bool, render) -> None:
    """One JSON object on stdout (nothing else), or the Rich rendering of it."""
    with stdout_reader_may_stop():
        if json_out:
            from mptrain.record import to_json

            typer.echo(to_json(data.model_dump()))
        else:
            from rich.console import Console

            # the terminal's width, or 80 columns (or $COLUMNS) when redirected: every table is
            # designed to be read whole at 80 columns
            Console().print(render(data))


def end_measuring(result, json_out: bool, render) -> None:
    """How compare and plan end: the record (JSON or tables), what MLflow could not log, and
    after an interrupt the command that resumes it, with the signal's exit code."""

    from mptrain.report.console import say
    from mptrain.signals import exit_code

    emit(result.record, json_out, render)
    for note in result.notes:
        say(note, "note", "yellow")
    kind, kept = result.record.KIND, result.record.ROWS
    if result.record.status == "interrupted":
        say(f"finished {kept} are kept. Continue with:\n  mptrain {kind} --resume {result.record.folder}",
            f"{kind} interrupted", "yellow")
        raise typer.Exit(exit_code(result.signal))
