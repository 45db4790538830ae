"""`mptrain run`: train and evaluate one experiment (`runs.launch.launch`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from mptrain.commands import options
from mptrain.commands.options import EpochsOpt, JsonOpt, SetOpt, StepsOpt, VerboseOpt


def run_command(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG", show_default=False,
        help="Experiment YAML file, or the name of a built-in one (see `mptrain configs`). "
             "With --resume: optional, checked against the run's own config.")] = None,
    set_: SetOpt = None,
    epochs: EpochsOpt = None,
    steps: StepsOpt = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="RUN_DIR", show_default=False,
        help="Continue the interrupted, killed or failed run in RUN_DIR (or a plan's trial "
             "its budget cut) from its last checkpoint, with its own config.yaml (a run on "
             "local workers: on as many again); --set train.epochs=N (or a raised "
             "train.max_steps) trains a run further.")] = None,
    workers: Annotated[int | None, typer.Option(
        min=2, metavar="N", show_default=False,
        help="Try multi-worker training on this machine: N worker processes on 127.0.0.1 "
             "(distribute.strategy multi_worker_mirrored, which needs train.loop custom: "
             "--set train.loop=custom); the chief prints the summary. "
             "With --resume: continue that run on N workers.")] = None,
    hosts: Annotated[str | None, typer.Option(
        metavar="HOST:PORT,...", show_default=False,
        help="Train on several hosts (distribute.strategy multi_worker_mirrored): every "
             "worker's address:port, the same list on every host, worker 0 the chief; with "
             "--host-index, this host's entry. Makes $TF_CONFIG (one a scheduler set wins); "
             "checks this host's address and port before starting, and that every host runs "
             "the same experiment before step 1.")] = None,
    host_index: Annotated[int | None, typer.Option(
        min=0, metavar="I", show_default=False,
        help="With --hosts: which entry this host is (0 to N-1).")] = None,
    max_restarts: Annotated[int, typer.Option(
        min=0, metavar="K",
        help="With local workers: when one is lost (killed, or stopped by a signal), restart "
             "them all from the last checkpoint, up to K times; then stop, saying how to "
             "resume.")] = 0,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Train and evaluate one experiment; write its run folder and print a summary.

    The run folder OUTPUT_DIR/NAME-TIMESTAMP/ holds config.yaml (resolved), summary.json,
    metrics.jsonl, steps.jsonl, checkpoints/ and model.keras. Live progress goes to stderr.
    Ctrl-C or SIGTERM stops after the current step, saves a checkpoint and prints the
    --resume command (exit 130 / 143); a diverged run exits 3. With local workers, a lost
    worker stops them all (exit 4, with the --resume command) unless --max-restarts allows
    restarting them.
    """

    from mptrain.errors import ConfigError
    from mptrain.report.console import say
    from mptrain.report.progress import ConsoleTelling, LiveProgress
    from mptrain.report.tables import summary_table
    from mptrain.runs.launch import RunOptions, launch
    from mptrain.runs.runner import Start
    from mptrain.signals import ignoring_interrupts
    from mptrain.training.cluster import parse_hosts, resume_line

    with options.user_errors("interrupted (a run folder, if one was made, keeps its last checkpoint)",
                             verbose, json_out=json_out):
        cluster = parse_hosts(hosts, host_index) if hosts is not None else None
        if cluster is None and host_index is not None:
            raise ConfigError("--host-index names this host's entry of --hosts: give --hosts too")
        asked = RunOptions([*(set_ or []), *options.length_overrides(epochs, steps)], workers,
                           max_restarts, verbose=verbose, hosts=cluster,
                           start=Start(resume=resume, started_at=options.STARTED_AT))
        with LiveProgress() as progress:
            result = launch(config, asked, ConsoleTelling(), listeners=[progress])
    summary = result.summary  # the run's (the chief's), or why there is none
    # how the run ended by itself (None: no summary, or a lost worker ended it)
    ended = None if isinstance(summary, str) or result.message else summary.status
    # a second Ctrl-C once training has stopped has nothing left to abandon: the summary and
    # the resume command are printed whole
    with ignoring_interrupts() if ended == "interrupted" else contextlib.nullcontext():
        if not isinstance(summary, str):
            options.emit(summary, json_out, summary_table)
        if ended == "interrupted":
            say(f"checkpoint saved. Continue with:\n  {resume_line(summary.run_dir, resume)}",
                summary.stop_reason or "", "yellow")
    if ended == "diverged":
        say(f"{summary.stop_reason or 'the loss became NaN/inf'}; the last good checkpoint is in "
            f"{summary.run_dir}/checkpoints", "diverged", "red")
    if result.message is not None:  # why a lost worker stopped the run, after the chief's summary
        options.say_error(result.message)
        if json_out and isinstance(summary, str):  # no summary to print: the error is the object
            options.emit_error(result.message, result.code, result.run_dir)
    raise typer.Exit(result.code)
