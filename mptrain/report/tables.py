"""The results of training, for stdout: the run summary, compare's, plan's and the runs list
(what the commands that look before training print is `views`'); each fits 80 columns with
nothing cut (`report.fitted`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mptrain.measure.variant import compare_label
from mptrain.measure.verdicts import INPUT_BOUND_NOTE, TWIN, quality_figure
from mptrain.report.console import fmt, human_bytes
from mptrain.report.fitted import Fitted
from mptrain.runs.summary import RunSummary

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.measure.compare import CompareRecord
    from mptrain.measure.plan import PlanRecord
    from mptrain.precision.policy import PolicyChoice


def run_header(experiment: ExperimentConfig, choice: PolicyChoice, warning: str | None,
               notes: list[str]) -> Text:
    """What is about to run, printed before the first step."""
    policy = choice.name if choice.requested == choice.name else f"{choice.name} (from {choice.requested})"
    xla = "XLA step" if choice.jit_compile else (
        "XLA optimizer update" if choice.xla_optimizer_update else "no XLA")
    text = Text.assemble("mptrain run ", (experiment.name, "bold"),
                         f": {policy}, loop {experiment.train.loop}, "
                         f"{experiment.train.epochs} epoch(s)"
                         + (f", {limit} steps at most" if (limit := experiment.train.max_steps) else "")
                         + f", {xla}")
    for note in notes:
        text.append(f"\nnote: {note}")
    if warning:
        text.append("\n").append("warning:", "yellow").append(f" {warning}")
    return text


def summary_table(s: RunSummary) -> Group:
    """What ran and what it measured; the run folder goes under the table, where the whole
    line is its room (a path folded in the table's value column could not be copied)."""
    table = Table(title=f"mptrain run: {s.name}", show_header=False, title_justify="left",
                  box=box.SIMPLE)
    table.add_column("", style="bold", no_wrap=True)
    table.add_column("", overflow="fold")
    policy = s.policy if s.policy_requested == s.policy else f"{s.policy} (from {s.policy_requested})"
    if s.candidate and s.candidate != s.policy:  # what plan and compare call it
        policy += f"; candidate {s.candidate}"
    rows = [
        ("status", _status(s)),
        ("policy", policy),
        ("dtypes", f"compute {s.compute_dtype}, variables {s.variable_dtype}, output {s.output_dtype}"),
        ("loop", s.loop),
        ("XLA", f"step {'on' if s.jit_compile else 'off'} ({s.jit_compile_reason}); "
                f"optimizer update {'on' if s.xla_optimizer_update else 'off'}"),
        ("device", s.device if s.replicas == 1 else f"{s.device}; {s.distribution}"),
        *([("math library", s.math_library_reason)] if s.math_library else []),
        ("steps", f"{s.steps_run} in {s.epochs_run} epoch(s), batch {s.batch_size}"),
        ("step time", _step_time(s)),
        ("throughput", f"{fmt(s.examples_per_sec, ',.0f')} examples/s"),
        ("compute", _compute_line(s)),
        ("test", "  ".join([*(["on standardised targets:"] if _standardised(s) else []),
                            f"loss {fmt(s.test_loss)}",
                            *(f"{name} {fmt(value)}" for name, value in s.test_metrics.items()
                              if name != "loss")])),
    ]
    if s.objective:
        quality = s.quality
        judged = (f"; judged by {quality.label} ({'higher' if quality.higher_is_better else 'lower'} "
                  f"is better): {fmt(quality.value)}" if quality is not None else "")
        rows.insert(4, ("objective", escape(s.objective + judged)))
    if s.notes:
        rows.append(("notes", escape("; ".join(s.notes))))
    if s.speed_warning:
        rows.append(("[yellow]warning[/]", s.speed_warning))
    for name, scaled in (s.loss_scales or {"": s.loss_scale}).items():
        if scaled is not None:
            rows.append((f"loss scale{f' ({name})' if name else ''}",
                         f"final {fmt(scaled.final, 'g')}, skipped steps {scaled.skipped_steps}"))
    rows += [
        ("memory", _memory_line(s.memory)),
        ("wall time", f"{s.wall_time_s:.1f} s "
                      f"(first step after {fmt(s.time_to_first_step_s, '.1f')} s)"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return Group(table, f"run folder: {escape(s.run_dir)}")


def _memory_line(m) -> str:
    """Training memory as the allocator saw it, or why it has no figure (a CPU's allocator
    keeps none for small tensors, and a data set streamed from files holds nothing there)."""
    if m.training_peak_bytes is None:
        training = f"training not measured (TensorFlow's allocator on {m.device} kept no statistics)"
    elif m.data_bytes:
        training = (f"training {human_bytes(m.training_peak_bytes)} (peak on {m.device} above the "
                    f"{human_bytes(m.data_bytes)} data set)")
    else:
        training = f"training {human_bytes(m.training_peak_bytes)} (peak on {m.device})"
    return f"{training}; process peak {human_bytes(m.process_peak_bytes)}"


def _standardised(s: RunSummary) -> bool:
    """Whether the test metrics are Keras' on standardised targets (train.target_scaling),
    where the figure a regression is judged by is back in the targets' units."""
    q = s.quality
    return q is not None and q.value is not None and q.metric in s.test_metrics \
        and s.test_metrics[q.metric] != q.value


def _status(s: RunSummary) -> str:
    if s.status == "diverged":
        return (f"[red]diverged[/]: {s.non_finite_loss_steps} step(s) had a NaN/inf loss (JSON "
                "shows them as null); try mixed_bfloat16 or float32, or a lower learning rate")
    if s.stopped_by == "signal" and s.stop_reason:  # "interrupted by SIGINT at ..."
        return f"[yellow]{s.stop_reason}[/]"
    return f"{s.status}" + (f", [yellow]{s.stop_reason}[/]" if s.stop_reason else "")


def _step_time(s: RunSummary) -> str:
    t = s.step_time
    if t is None:
        return "n/a"
    text = (f"median {t.median_ms:.1f} ms  p10 {t.p10_ms:.1f}  p90 {t.p90_ms:.1f}  "
            f"mean {t.mean_ms:.1f}  ({t.timed_steps} timed; left out: {t.warmup_steps_excluded} "
            f"warm-up, {t.short_batches_excluded} short "
            f"batch{'' if t.short_batches_excluded == 1 else 'es'})")
    if not t.enough:
        text += "  [yellow]too few timed steps for a reliable figure[/]"
    return text


def _compute_line(s: RunSummary) -> str:
    if s.achieved_tflops is None or s.mfu is None:
        return "n/a" if s.achieved_tflops is None else f"{s.achieved_tflops:.3f} TFLOP/s achieved"
    return f"{s.achieved_tflops:.3f} TFLOP/s achieved = {s.mfu:.0%} of " + (
        f"this machine's peak as measured ({s.peak_tflops:.2f} TFLOP/s: {s.peak_unit}, the fastest "
        "matrix product its kernel check found)" if s.peak_measured else
        f"this CPU's nominal {s.peak_unit} peak ({s.peak_tflops:.2f} TFLOP/s at the base clock, "
        "not measured: `mptrain check-gpu` measures it)")


def compare_tables(record: CompareRecord) -> Group:
    """Three tables that each fit 80 columns: the answer (step time, speed-up, accuracy, loss
    scale, verdict), the details (spread, throughput, compute, training memory) and the whole
    run (one-off costs, wall time)."""
    result_rows, detail_rows, time_rows, notes = _compare_rows(record)
    results = Fitted(f"mptrain compare: {record.experiment} (baseline: {record.baseline_policy})",
                      ["variant", "ms/step", "speed-up", _quality_header(record.variants), "verdict"],
                      result_rows, text_columns={4})
    details = Fitted("details", ["variant", "p10–p90\nms/step", "examples\n/s", "TFLOP/s", "MFU",
                                  "training\nmemory (×)", "loss scale\n/skips"], detail_rows)
    times = Fitted("the whole run", ["variant", "start to\n1st step", "whole\nrun", "waited for\nturns"],
                    time_rows)
    notes += _compare_footnotes(record)
    notes.append(f"folder: {record.folder}")
    batches = ([batch_table(record.variants, record.baseline), ""]
               if any(r.batch for r in record.variants) else [])
    return Group(results, "", details, "", times, "", *batches, *notes)


def batch_table(rows, baseline: str) -> Fitted:
    """Across batch sizes (compare's and plan's --batch-sizes): each row's batch and learning
    rate, examples a second, and its way to the baseline's training loss (`measure.to_target`)."""
    lines = []
    for row in rows:
        s, target = row.summary, row.verdict.to_target
        if s is None:
            continue
        rate = _rate(row)
        lines.append((row.label, [
            "", str(s.batch_size), "as set" if rate is None else f"{rate:.3g}",
            fmt(s.examples_per_sec, ",.0f", "-"),
            "-" if target is None else f"{target.examples:,}" if target.reached else
            f"not in {target.seen:,}",
            "-" if target is None or target.speedup is None else f"{target.speedup:.2f}x"]))
    return Fitted(f"batch sizes: the way to {baseline}'s training loss",
                  ["cell", "batch", "learning\nrate", "examples\n/s", "examples\nto target",
                   "time to\ntarget ×"], lines)


def _rate(row) -> float | None:
    """The learning rate a cell at another batch runs with (its changes say), else None (the
    experiment's, as set)."""
    optimizer = row.batch.get("train.optimizer")
    if not optimizer:
        return None
    schedule = optimizer.get("schedule") or {}
    return schedule.get("learning_rate") or optimizer["kwargs"].get("learning_rate")


def _compare_rows(record: CompareRecord):
    """compare's three tables' rows, and the notes under them."""
    result_rows, detail_rows, time_rows, notes = [], [], [], []
    warnings: dict[str, list[str]] = {}  # one note per distinct warning
    for row in record.variants:
        s, verdict = row.summary, row.verdict
        policy = row.candidate.name
        where = ("" if row.strategy in (None, "none") else f" {row.strategy}") + (
            f" b{row.batch_size}" if row.batch_size else "")
        label = f"{policy} {row.loop}{where}"
        # runs --compare: a row is its run, by the run's name
        named = row.label != compare_label(policy, row.loop, row.strategy or "none", row.batch_size)
        name, what = (row.label, label) if named else (None, f"{policy}\n{row.loop}{where}")
        if s is None:
            said = (f"failed ({row.failed})" if row.failed else "waiting" if record.status == "running"
                    else "not run: compare --resume runs it")
            result_rows.append((name, [what, "-", "-", "-",
                                       f"[{'red' if row.failed else 'yellow'}]{escape(said)}[/]"]))
            continue
        t = s.step_time if s.step_time is not None and s.step_time.enough else None
        colour = "red" if verdict.refused else "yellow" if s.stop_reason or t is None else ""
        words = escape(verdict.words())
        result_rows.append((name, [
            what + (" [yellow]⚠[/]" if s.speed_warning else ""),
            f"{t.median_ms:.1f}" if t else "-",
            f"{row.speedup:.2f}x" if row.speedup is not None else "-",
            "-" if s.status == "diverged" else _quality_cell(quality_figure(s), verdict.quality),
            f"[{colour}]{words}[/]" if colour else words,
        ]))
        detail_rows.append((name, [
            what,
            f"{t.p10_ms:.1f}–{t.p90_ms:.1f}" if t else "-",
            fmt(s.examples_per_sec, ",.0f") if t else "-",
            f"{s.achieved_tflops:.2f}" if t and s.achieved_tflops is not None else "-",
            f"{s.mfu:.0%}" if t and s.mfu is not None else "-",
            f"{human_bytes(s.memory.training_peak_bytes)} {fmt(row.verdict.memory_ratio, '.2f', '-')}x",
            f"{fmt(s.loss_scale.final, 'g')}/{s.loss_scale.skipped_steps}" if s.loss_scale else "-",
        ]))
        time_rows.append((name, [what, fmt(s.time_to_first_step_s, ".1f", "-"),
                                 _duration(s.wall_time_s), _duration(s.turn_wait_s)]))
        if s.speed_warning:
            warnings.setdefault(s.speed_warning, []).append(label)
        if s.stop_reason:
            notes.append(f"[yellow]{label}[/]: {escape(s.stop_reason)}")
        if alone := verdict.precision_alone():
            notes.append(f"{label}: {escape(alone)}")
    notes[:0] = [f"[yellow]⚠ {', '.join(labels)}[/]: {text}" for text, labels in warnings.items()]
    if any(row.verdict.input_bound for row in record.variants):
        notes.append(escape(INPUT_BOUND_NOTE))
    return result_rows, detail_rows, time_rows, notes


def _compare_footnotes(record: CompareRecord) -> list[str]:
    """How compare's speed-ups were measured, and where every word is defined: a few lines
    (the tables' words are docs/glossary.md's)."""
    base = record.baseline_policy
    # by the peak (a oneDNN math mode's float32 matmuls run in bfloat16: against its peak)
    peaks = {s.peak_unit: f"{s.peak_unit} {s.peak_tflops:.2f}"
             for s in (r.summary for r in record.variants) if s is not None and s.peak_unit}
    notes = [f"[yellow]in pairs:[/] {escape(record.pairs)}"] if record.pairs else []
    measured = (f"the variants ran in turns of {record.turn_steps} steps; speed-up: {base}'s median "
                "step / this one's in the same round, the median over rounds" if record.turn_steps
                else "[yellow]not measured in turns[/] (runs made apart: a speed-up can be the "
                     f"machine's drift between their times); speed-up: {base}'s median / this one's")
    notes.append(f"{measured}; a verdict says faster or slower only when its 95% interval is on "
                 "one side of 1" + (f"; MFU against {'; '.join(peaks.values())} TFLOP/s" if peaks else "")
                 + (PER_EXAMPLE if any(r.batch for r in record.variants) else "")
                 + ". Every word in these tables: docs/glossary.md.")
    return notes


def _quality_header(rows) -> str:
    """The results' quality column, named for the figure the rows are judged by."""
    figure = next((f for r in rows if r.summary is not None and (f := quality_figure(r.summary))), None)
    if figure is None:
        return "quality"
    if figure.proportion:
        return f"{figure.label}\n(Δ pt)"
    return f"{figure.label}\n(Δ %)"


def _quality_cell(figure, delta) -> str:
    if figure is None or figure.value is None:
        return "-"
    value = f"{figure.value:.4f}" if figure.proportion or abs(figure.value) < 10 else f"{figure.value:.4g}"
    if delta is None:
        return value
    return value + (f" ({delta.delta:+.2f})" if delta.proportion else
                    f" ({delta.relative_pct:+.1f})" if delta.relative_pct is not None else "")


def plan_tables(record: PlanRecord) -> Group:
    """`mptrain plan`: each trial measured (or why not), the layers timed, the choice."""
    parts: list[Any] = [Fitted(f"mptrain plan: {record.experiment} ({record.steps}-step trials in "
                                "turns)",
                                ["trial", "ms/step", "speed-up", "whole\nrun", "loss\nprogress",
                                 "verdict"], _plan_rows(record), text_columns={5})]
    parts += _plan_notes(record)
    if any(trial.batch for trial in record.trials):
        parts += ["", batch_table(record.trials, "float32")]
    if record.layers:
        slow = sorted(record.layers, key=lambda t: t.ms_float32 / t.ms_16bit)[:8]
        layers = Fitted("layers (forward + backward), slowest in 16 bits first",
                         ["layer", "16-bit\nms", "float32\nms", "16-bit\n×", "island"],
                         [(t.layer, ["", f"{t.ms_16bit:.2f}", f"{t.ms_float32:.2f}",
                                     f"{t.ms_float32 / t.ms_16bit:.2f}x",
                                     "yes" if t.slower_in_16bit else ""]) for t in slow])
        parts += ["", layers]
    parts.append(f"[bold green]plan: {escape(record.winner or 'float32')}[/] — {escape(record.reason)}")
    if record.pairs:
        parts.append(f"[yellow]in pairs:[/] {escape(record.pairs)}")
    parts.append(_plan_footnote(record))
    if record.plan_file:
        parts.append(f"runnable plan: {record.plan_file}  (mptrain run {record.plan_file})")
    parts.append(f"folder: {record.folder}")
    return Group(*parts)


def _plan_rows(record: PlanRecord) -> list:
    rows = []
    for trial in record.trials:
        s, verdict = trial.summary, trial.verdict
        t = s.step_time if s is not None and s.step_time is not None and s.step_time.enough else None
        if s is None and trial.failed is None:
            words = {"running": "waiting", "interrupted": "not run (interrupted)"}.get(
                record.status, "not run (budget spent)")
            colour = "yellow"
        elif trial.label == TWIN:
            words, colour = "A/A twin: the noise floor", ""
        else:
            words = verdict.words(quality=record.evaluate)
            colour = ("green" if trial.label == record.winner else
                      "" if verdict.eligible or verdict.baseline else "yellow")
        share = verdict.training.share if verdict.training else None
        rows.append((trial.label, [
            "",
            f"{t.median_ms:.1f}" if t else "-",
            f"{trial.speedup:.2f}x" if trial.speedup is not None else "-",
            _duration(verdict.whole_run_s),
            f"{share:.1%}" if share is not None else "-",
            f"[{colour}]{escape(words)}[/]" if colour else escape(words)]))
    return rows


def _plan_notes(record: PlanRecord) -> list[str]:
    """What was skipped, failed, cut or left untried, and the input-bound note."""
    notes = [f"[dim]{escape(option.name)}: skipped, {escape(option.why_not)}[/]"
             for option in record.candidates if option.why_not]
    notes += [f"[dim]{escape(cell)}: not tried[/]" for cell in record.cells_not_tried]
    notes += [f"[yellow]{escape(t.label)}[/]: {escape(t.failed)}" for t in record.trials if t.failed]
    notes += [f"{escape(t.label)}: {escape(alone)}" for t in record.trials
              if (alone := t.verdict.precision_alone())]
    if record.untried or record.cut:
        what = "; ".join(filter(None, [
            record.cut and f"cut short: {', '.join(record.cut)}",
            record.untried and f"not tried: {', '.join(record.untried)}"]))
        notes.append(f"[yellow]{record.status}[/]: {escape(what)}; mptrain plan --resume "
                     f"{escape(record.folder)} runs what was not")
    decided = next((t.summary.stop_reason for t in record.trials
                    if t.summary is not None and t.summary.stopped_by == "decided"), None)
    if decided:
        notes.append(f"race {escape(decided)}: the trials still running stopped there")
    if any(t.verdict.input_bound for t in record.trials):
        notes.append(escape(INPUT_BOUND_NOTE))
    return notes


def _plan_footnote(record: PlanRecord) -> str:
    return (f"measured on {escape(record.machine)}; trials ran in turns of {record.turn_steps} "
            f"steps, each read against float32 in the same rounds and against {TWIN} (the "
            f"machine's own noise); whole run: estimated for the experiment's "
            f"{record.experiment_steps} steps" + (PER_EXAMPLE if any(t.batch for t in record.trials) else "")
            + ". Every word in these tables: docs/glossary.md.")


# (a cell at another batch: said wherever its speed-up is, as it is read otherwise than a step's)
PER_EXAMPLE = "; at another batch, speed-up is per example (a step of 2b does twice the work)"


def _duration(seconds: float | None) -> str:
    """A whole run's time, short: 42 s, 12 min, 3.5 h."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
