"""`mptrain plan`: the fastest safe precision here, measured, written as an experiment
(`measure.plan`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mptrain.commands import options
from mptrain.commands.options import BatchSizesOpt, JsonOpt, SetOpt, VerboseOpt


def plan_command(
    config: Annotated[str | None, typer.Argument(
        metavar="CONFIG", show_default=False,
        help="Experiment YAML file or built-in name (not needed with --resume).")] = None,
    tolerance: Annotated[float, typer.Option(
        metavar="PT", help="How far a candidate's training loss may fall short of float32's "
                           "progress over the trial, in percent of that progress (of float32's "
                           "loss where it barely moved; with --eval: also test-accuracy "
                           "points).")] = 3.0,
    budget: Annotated[float, typer.Option(
        metavar="MINUTES", help="The whole plan's time, staging included: no round of trials "
                                "starts after it; what was measured by then is judged, what was "
                                "cut is named, and --resume runs the rest.")] = 20.0,
    steps: Annotated[int, typer.Option(help="Training steps per trial.")] = 30,
    candidates: Annotated[str | None, typer.Option(
        help="Comma-separated candidates to try (float32 is always tried); default: every one "
             "this machine can run.")] = None,
    batch_sizes: BatchSizesOpt = None,
    evaluate: Annotated[bool, typer.Option(
        "--eval", metavar="", help="Also judge each candidate's test accuracy (evaluates the "
                                   "whole test set per trial).")] = False,
    race: Annotated[bool, typer.Option(
        "--race/--no-race", help="Stop a trial from taking turns once its 95% interval says it "
                                 "cannot be picked, and every trial once the pick is decided; "
                                 "--no-race runs each to its end (the same pick, every "
                                 "candidate's whole figure, more time).")] = True,
    out: Annotated[Path | None, typer.Option(
        metavar="FILE", show_default=False,
        help="Where to write the chosen experiment; default: EXPERIMENT.plan.yaml beside the "
             "experiment file (a built-in's: in the current folder).")] = None,
    set_: SetOpt = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", metavar="PLAN_DIR", show_default=False,
        help="Finish a plan that stopped (Ctrl-C, or out of budget): run the untried trials, "
             "as the plan set them up (a CONFIG, --set, --steps, --tolerance, --eval or "
             "--candidates or --batch-sizes that would change them is refused, by name); --budget "
             "and --out "
             "apply to the resume.")] = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure which precision is fastest for this model on this machine, within an accuracy
    tolerance, and write it as a runnable experiment.

    Candidates (this machine's): float32; mixed_bfloat16, without and with XLA; mixed_float16
    where it can be fast; on CPUs float32 with oneDNN's bfloat16 math and with TensorFlow's
    bfloat16 graph rewrite, and the math library TensorFlow does not run on this CPU (oneDNN
    where it leaves it off: AVX2-only CPUs); on GPUs float32 without TF32, each ruled out or
    ordered by this machine's kernels of the model's kinds of layer. Each is a short trial
    from the same initial weights on the same batches, all run in turns, in a race (a trial
    that cannot be picked stops; --no-race), with the most promising 16-bit one
    also tried with its slow layers kept float32 (measured per layer first) and at twice the
    experiment's batch where that fits in memory (the guide's second lever; --batch-sizes
    tries every candidate at each size). Judged per example, over the whole experiment
    (one-off costs included) and, across batch sizes, by the time to float32's loss. Prints
    an 80-column table; writes plan.json, plan.png and the trials in
    OUTPUT_DIR/plan-NAME-TIMESTAMP/, and the plan's experiment file (`mptrain run` it).
    Ctrl-C stops every trial; --resume runs them again.
    """
    import mptrain.measure.plan
    from mptrain.precision.candidates import CANDIDATE_NAMES
    from mptrain.report.console import as_text
    from mptrain.report.progress import ConsoleTelling
    from mptrain.report.tables import plan_tables

    with options.user_errors(verbose=verbose, json_out=json_out):
        settings = mptrain.measure.plan.PlanSettings(
            candidates=(options.parse_choices(candidates, CANDIDATE_NAMES, "--candidates")
                        if candidates else None),
            batch_sizes=options.parse_batch_sizes(batch_sizes), steps=steps, tolerance_pct=tolerance,
            budget_minutes=budget, evaluate=evaluate, race=race, out=out, sets=set_ or [])
        result = mptrain.measure.plan.run_plan(config, settings, resume=resume, telling=ConsoleTelling(),
                                           verbose=verbose, as_text=as_text(plan_tables))
    options.end_measuring(result, json_out, plan_tables)
