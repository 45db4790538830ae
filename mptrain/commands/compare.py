"""`mptrain compare`: one experiment under several precisions, in turns (`measure.compare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mptrain.commands import options
from mptrain.commands.options import BatchSizesOpt, EpochsOpt, JsonOpt, SetOpt, StepsOpt, VerboseOpt


def compare_command(
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
    batch_sizes: BatchSizesOpt = None,
    epochs: EpochsOpt = None,
    steps: StepsOpt = None,
    max_step_seconds: Annotated[float | None, typer.Option(
        min=0.0, help="Stop a variant once one of its steps takes longer than this (0: never).")] = 60.0,
    set_: SetOpt = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="COMPARE_DIR", show_default=False,
        help="Finish a compare that stopped (Ctrl-C, or killed): run the variants that did "
             "not finish, with the experiment and policies it started with (a CONFIG, --set or "
             "--policies or --batch-sizes that would change them is refused, by name).")] = None,
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
    import mptrain.measure.compare
    from mptrain.config.names import LOOPS, STRATEGIES
    from mptrain.report.console import as_text
    from mptrain.report.progress import ConsoleTelling
    from mptrain.report.tables import compare_tables

    with options.user_errors(verbose=verbose, json_out=json_out):
        settings = mptrain.measure.compare.CompareSettings(
            policies=options.parse_choices(policies, None, "--policies") if policies is not None else None,
            loops=options.parse_choices(loops, LOOPS, "--loops") if loops else None,
            strategies=options.parse_choices(strategies, STRATEGIES, "--strategies") if strategies else None,
            batch_sizes=options.parse_batch_sizes(batch_sizes), sets=set_ or [], epochs=epochs,
            steps=steps, max_step_seconds=max_step_seconds or None)
        result = mptrain.measure.compare.run_compare(config, settings, resume=resume,
                                                 telling=ConsoleTelling(), verbose=verbose,
                                                 as_text=as_text(compare_tables))
    options.end_measuring(result, json_out, compare_tables)
    if any(row.summary is None for row in result.record.variants):
        raise typer.Exit(1)
