"""Tables for stdout: the run summary, the compare tables, the check-gpu panel.

Each is designed to be read whole at 80 columns without cutting what a user reads or copies:
numbers never wrap or get cut (their columns are as wide as their widest value), text
(verdicts, findings) wraps between words, and a name a user copies into a command (a run, a
variant, a layer) is never wrapped: one too wide for its column has a line of its own above
its row (`_Fitted`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mptrain.report.console import fmt, human_bytes
from mptrain.runs.summary import RunSummary

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.diagnostics.numerics import Diagnosis
    from mptrain.measure.compare import CompareRecord
    from mptrain.measure.memory import MemoryReport
    from mptrain.measure.plan import PlanRecord
    from mptrain.precision.check import CheckReport
    from mptrain.precision.lint import LintReport
    from mptrain.precision.policy import PolicyChoice
    from mptrain.runs.listing import RunsReport

DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def run_header(experiment: ExperimentConfig, choice: PolicyChoice, warning: str | None,
               notes: list[str]) -> str:
    """What is about to run, printed before the first step."""
    policy = choice.name if choice.requested == choice.name else f"{choice.name} (from {choice.requested})"
    xla = "XLA step" if choice.jit_compile else (
        "XLA optimizer update" if choice.xla_optimizer_update else "no XLA")
    text = (f"mptrain run [bold]{experiment.name}[/]: {policy}, loop {experiment.train.loop}, "
            f"{experiment.train.epochs} epoch(s), {xla}")
    for note in notes:
        text += f"\nnote: {note}"
    if warning:
        text += f"\n[yellow]warning:[/] {warning}"
    return text


def summary_table(s: RunSummary) -> Group:
    """What ran and what it measured; the run folder goes under the table, where the whole
    line is its room (a path folded in the table's value column could not be copied)."""
    table = Table(title=f"mptrain run: {s.name}", show_header=False, title_justify="left",
                  box=box.SIMPLE)
    table.add_column("", style="bold", no_wrap=True)
    table.add_column("", overflow="fold")
    policy = s.policy if s.policy_requested == s.policy else f"{s.policy} (from {s.policy_requested})"
    rows = [
        ("status", _status(s)),
        ("policy", policy),
        ("dtypes", f"compute {s.compute_dtype}, variables {s.variable_dtype}, output {s.output_dtype}"),
        ("loop", s.loop),
        ("XLA", f"step {'on' if s.jit_compile else 'off'} ({s.jit_compile_reason}); "
                f"optimizer update {'on' if s.xla_optimizer_update else 'off'}"),
        ("device", s.device if s.replicas == 1 else f"{s.device}; {s.distribution}"),
        ("steps", f"{s.steps_run} in {s.epochs_run} epoch(s), batch {s.batch_size}"),
        ("step time", _step_time(s)),
        ("throughput", f"{fmt(s.examples_per_sec, ',.0f')} examples/s"),
        ("compute", _compute_line(s)),
        ("test", f"loss {fmt(s.test_loss)}  accuracy {fmt(s.test_accuracy)}"),
    ]
    if s.notes:
        rows.append(("notes", escape("; ".join(s.notes))))
    if s.speed_warning:
        rows.append(("[yellow]warning[/]", s.speed_warning))
    if s.loss_scale is not None:
        rows.append(("loss scale", f"final {fmt(s.loss_scale.final, 'g')}, "
                                   f"skipped steps {s.loss_scale.skipped_steps}"))
    m = s.memory
    rows += [
        ("memory", f"training {human_bytes(m.training_peak_bytes)} (peak on {m.device} above the "
                   f"{human_bytes(m.data_bytes)} data set); "
                   f"process peak {human_bytes(m.process_peak_bytes)}"),
        ("wall time", f"{s.wall_time_s:.1f} s "
                      f"(first step after {fmt(s.time_to_first_step_s, '.1f')} s)"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return Group(table, f"run folder: {escape(s.run_dir)}")


def _status(s: RunSummary) -> str:
    if s.status == "diverged":
        return (f"[red]diverged[/]: {s.non_finite_loss_steps} step(s) had a NaN/inf loss (JSON "
                "shows them as null); try mixed_bfloat16 or float32, or a lower learning rate")
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
    if s.achieved_tflops is None:
        return "n/a"
    line = f"{s.achieved_tflops:.3f} TFLOP/s achieved"
    if s.mfu is not None:
        line += (f" = {s.mfu:.0%} of this CPU's {s.peak_unit} peak ({s.peak_tflops:.2f} TFLOP/s, "
                 "the unit that runs this policy's matmuls)")
    return line


def compare_tables(record: CompareRecord) -> Group:
    """Two tables that each fit 80 columns: the answer (step time, speed-up, accuracy, loss
    scale, verdict) and the details (spread, throughput, compute, training memory)."""
    from mptrain.measure.compare import NOT_RUN, WAITING, Variant

    base = record.baseline_policy
    result_rows, detail_rows, time_rows, notes = [], [], [], []
    warnings: dict[str, list[str]] = {}  # one note per distinct warning
    peaks: dict[str, str] = {}
    for row in record.variants:
        s = row.summary
        where = "" if row.strategy == "none" else f" {row.strategy}"
        name, what = None, f"{row.policy}\n{row.loop}{where}"
        if row.variant != Variant(row.policy, row.loop, row.strategy).label:  # runs --compare
            name, what = row.variant, f"{row.policy} {row.loop}{where}"
        if s is None:
            colour = "yellow" if row.failed in (NOT_RUN, WAITING) else "red"
            result_rows.append((name, [what, "-", "-", "-", "-", f"[{colour}]{row.verdict}[/]"]))
            continue
        t = s.step_time if s.step_time is not None and s.step_time.enough else None
        colour = "red" if s.status == "diverged" else "yellow" if s.stop_reason or t is None else ""
        result_rows.append((name, [
            what + (" [yellow]⚠[/]" if s.speed_warning else ""),
            f"{t.median_ms:.1f}" if t else "-",
            f"{row.speedup:.2f}x" if row.speedup is not None else "-",
            "-" if s.status == "diverged" else _accuracy_cell(s.test_accuracy, row.accuracy_delta_pt),
            f"{fmt(s.loss_scale.final, 'g')}/{s.loss_scale.skipped_steps}" if s.loss_scale else "-",
            f"[{colour}]{row.verdict}[/]" if colour else row.verdict,
        ]))
        detail_rows.append((name, [
            what,
            f"{t.p10_ms:.1f}–{t.p90_ms:.1f}" if t else "-",
            fmt(s.examples_per_sec, ",.0f") if t else "-",
            f"{s.achieved_tflops:.2f}" if t and s.achieved_tflops is not None else "-",
            f"{s.mfu:.0%}" if t and s.mfu is not None else "-",
            f"{human_bytes(s.memory.training_peak_bytes)} {fmt(row.memory_ratio, '.2f', '-')}x",
        ]))
        time_rows.append((name, [what, fmt(s.time_to_first_step_s, ".1f", "-"),
                                 _duration(s.wall_time_s), _duration(s.turn_wait_s)]))
        if s.peak_unit:
            peaks[s.compute_dtype] = f"{s.compute_dtype}: {s.peak_unit} {s.peak_tflops:.2f}"
        label = f"{row.policy} {row.loop}" + ("" if row.strategy == "none" else f" {row.strategy}")
        if s.speed_warning:
            warnings.setdefault(s.speed_warning, []).append(label)
        if s.stop_reason:
            notes.append(f"[yellow]{label}[/]: {s.stop_reason}")
    notes[:0] = [f"[yellow]⚠ {', '.join(labels)}[/]: {text}" for text, labels in warnings.items()]
    results = _Fitted(f"mptrain compare: {record.experiment} (baseline: {base})",
                      ["variant", "ms/step", "speed-up", "accuracy\n(Δ pt)", "loss scale\n/ skips",
                       "verdict"], result_rows, text_columns={5})
    details = _Fitted("details", ["variant", "p10–p90\nms/step", "examples\n/s", "TFLOP/s", "MFU",
                                  "training\nmemory (×)"], detail_rows)
    times = _Fitted("the whole run", ["variant", "start to\n1st step", "whole\nrun", "waited for\nturns"],
                    time_rows)
    notes += _compare_footnotes(record, peaks)
    notes.append(f"folder: {record.folder}")
    return Group(results, "", details, "", times, "", *notes)


def _compare_footnotes(record: CompareRecord, peaks: dict[str, str]) -> list[str]:
    """What compare's columns mean, and how its speed-ups were measured."""
    base, notes = record.baseline_policy, []
    turns = (f"the variants ran in turns of {record.turn_steps} steps; speed-up: the median over "
             f"rounds of {base}'s median step / this one's in the same round, a verdict says "
             "faster or slower only when its 95% interval (from the rounds' ratios) is on one side "
             "of 1" if record.turn_steps else
             f"speed-up: {base}'s median / this median; a verdict says faster or slower only when "
             "the 95% interval of the speed-up (from each median, its spread and its timed steps) "
             "is on one side of 1")
    notes.append(f"ms/step: median over timed steps (warm-up and short batches left out); {turns}; "
                 "higher or lower accuracy only beyond what the test set's size can resolve (a 95% "
                 "Wilson interval). start to 1st step (s): process start, data, model, tracing, "
                 "compiling and the first step itself; whole run: its own wall time, waits for "
                 "the others' turns left out.")
    if peaks:
        notes.append("MFU: achieved TFLOP/s over the peak of the unit that runs each dtype's "
                     f"matmuls ({'; '.join(peaks.values())} TFLOP/s).")
    notes.append("training memory: TensorFlow's allocator peak above the data set (weights, "
                 "gradients, optimizer state, activations), × the baseline's.")
    return notes


def _accuracy_cell(accuracy: float | None, delta: float | None) -> str:
    if accuracy is None:
        return "-"
    return f"{accuracy:.4f}" + (f" ({delta:+.2f})" if delta is not None else "")


READABLE = 16  # a verdict or finding gets this before names get theirs: "faster, accuracy"


@dataclass
class _Fitted:
    """A table that fits the console's width (80 columns by design) with nothing cut.

    Number columns are as wide as their widest cell and never wrap; text columns (column 0 and
    `text_columns`: verdicts, findings) wrap between words and are never narrower than their
    widest word. A row's name (a run, a variant, a layer: one word a user copies into a
    command) leads column 0 when it fits there, else it has a line of its own above its row,
    where the whole width is its room. Rich's own layout would fold such a name, or, to keep
    it, shrink every column and cut numbers and headers. The widths are worked out when
    rendered, so a wider terminal keeps more names in their rows.

    `rows`: (name or None, cells); cells[0] is what column 0 shows under the name."""

    title: str | None
    headers: list[str]
    rows: list[tuple[str | None, list[str]]]
    text_columns: set[int] = field(default_factory=set)  # besides column 0
    gap: int = 2  # spaces between columns

    def __rich_console__(self, console, options):
        widths = self._widths(options.max_width)
        if self.title:
            yield Text.from_markup(self.title, style="table.title")
        table = self._table(widths, header=True)
        for name, cells in self.rows:
            first = cells[0]
            if name is not None and cell_len(name) > widths[0]:
                yield table  # the rows so far; the same widths continue under the name
                yield Text(name, overflow="fold")  # folded only if wider than the console
                table = self._table(widths, header=False)
            elif name is not None:
                first = escape(name) + (f"\n{first}" if first else "")
            table.add_row(first, *cells[1:])
        yield table

    def _table(self, widths: list[int], header: bool) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_header=header, show_edge=False, pad_edge=False,
                      collapse_padding=True, padding=(0, self.gap - 1))
        for index, (head, width) in enumerate(zip(self.headers, widths, strict=True)):
            if index == 0 or index in self.text_columns:
                table.add_column(head, width=width, overflow="fold")
            else:
                table.add_column(head, width=width, justify="right", no_wrap=True)
        return table

    def _widths(self, width: int) -> list[int]:
        """Every number its width and every word its own; then the verdicts READABLE
        columns, column 0 what its names need (those that can fit), the verdicts the rest."""
        columns = [[head, *(Text.from_markup(cells[i]).plain for _, cells in self.rows)]
                   for i, head in enumerate(self.headers)]

        def longest(i: int) -> int:
            return max((cell_len(line) for cell in columns[i] for line in cell.splitlines()), default=0)

        def widest_word(i: int) -> int:
            return max((cell_len(word) for cell in columns[i] for word in cell.split()), default=0)

        text = sorted({0, *self.text_columns})
        widths = [widest_word(i) if i in text else longest(i) for i in range(len(columns))]
        spare = width - self.gap * (len(columns) - 1) - sum(widths)
        if spare < 0:  # a word wider than all the room left (a path in a finding): it folds
            widest = max(text, key=widths.__getitem__)
            widths[widest] = max(widths[widest] + spare, 1)
            spare = 0

        def grow(i: int, target: int) -> None:
            nonlocal spare
            step = max(0, min(spare, target - widths[i]))
            widths[i] += step
            spare -= step

        for i in text[1:]:
            grow(i, min(longest(i), READABLE))
        reach = widths[0] + spare
        grow(0, max([longest(0), *(cell_len(name) for name, _ in self.rows
                                   if name is not None and cell_len(name) <= reach)]))
        for i in text[1:]:
            grow(i, longest(i))
        return widths


def check_gpu_view(report: CheckReport):
    """The `check-gpu` panel: a block a user can paste into a bug report."""
    from rich.panel import Panel

    m = report.machine
    facts = Table(show_header=False, box=None, pad_edge=False)  # aligned with the tables below
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("TensorFlow / Keras", f"{m.tensorflow_version} / {m.keras_version}")
    facts.add_row("oneDNN", "on" if m.onednn else "off (TF_ENABLE_ONEDNN_OPTS=0)")
    facts.add_row("XLA", {True: "available", False: "not working", None: "not checked"}[m.xla])
    facts.add_row("TF32 execution", {True: "enabled", False: "disabled", None: "n/a"}[m.tf32_enabled])
    facts.add_row("TPU", "present (wants mixed_bfloat16)" if m.tpu else "none")
    features = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in m.cpu.features.items())
    facts.add_row("CPU", f"{m.cpu.model}, {m.cpu.physical_cores} cores "
                         f"({m.cpu.logical_cpus} logical CPUs) usable by this process")
    facts.add_row("CPU features", features or "unknown (no /proc/cpuinfo)")
    parts: list[Any] = [facts]
    if m.gpus:
        rows = [(None, [escape(g.name), f"{g.compute_capability[0]}.{g.compute_capability[1]}"
                        if g.compute_capability else "n/a", human_bytes(g.memory_bytes),
                        *("yes" if flag else "no" for flag in
                          (g.float16_tensor_cores, g.fast_bfloat16, g.tf32_by_default, g.float8))])
                for g in m.gpus]
        parts.append(_Fitted(None, ["GPU", "CC", "memory", "fp16 TC", "fast bf16", "TF32", "fp8"],
                             rows))
    else:
        parts.append("[bold]No GPU found[/]: TensorFlow sees no GPU on this machine.")
    rec = report.recommendation
    basis = ("measured" if rec.measured else "by rule, not measured: `mptrain check-gpu` without "
             "--no-bench measures")
    # the texts hold brackets (`[/cpu:0, /cpu:1]`) that Rich would read as markup
    parts.append(f"[bold green]Recommended policy: {rec.policy}[/] ({escape(basis)})\n"
                 f"{escape(rec.reason)}")
    parts += [f"[yellow]warning:[/] {escape(w)}" for w in rec.warnings]
    parts.append(escape(report.compatibility_check))
    dist = report.distribution
    if dist:
        parts.append(f"[bold]tf.distribute[/]: mirrored would use "
                     f"{escape(', '.join(dist.mirrored_devices))}; "
                     f"NCCL {'available' if dist.nccl else 'not available'}; all-reduce: "
                     f"{escape(dist.all_reduce)}" + (f"\n{escape(dist.note)}" if dist.note else ""))
    if report.kernels and not report.bench:
        when = (f"kernels measured {report.kernels.measured_at} (cached; `check-gpu --bench` "
                "measures again)" if report.kernels_cached else
                f"kernels measured now, in {report.kernels.seconds:.1f} s (kept in the cache for "
                "`policy: auto` and the next check-gpu)")
        parts.append(when)
    if report.bench:
        rows = [(None, [r.device.strip("/"), r.kernel, r.dtype,
                        f"{r.ms_per_call:.2f}" + ("*" if r.cut_short else ""),
                        f"{r.ms_p10:.2f}–{r.ms_p90:.2f}", f"{r.tflops:.3f}",
                        fmt(r.ratio_to_float32, ".3g")]) for r in report.bench]
        parts.append(_Fitted(None, ["device", "kernel", "dtype", "ms/call", "p10–p90", "TFLOP/s",
                                    "× fp32"], rows, text_columns={1, 2}))
        if any(r.cut_short for r in report.bench):
            parts.append("* 1 call, cut short: a single call took longer than the budget")
        parts.append("dense = MatMul+BiasAdd+ReLU, which oneDNN fuses (the op behind float16's CPU "
                     "collapse); dtypes timed in interleaved rounds, medians and p10–p90 spreads")
    return Panel(Group(*parts), title="mptrain check-gpu", title_align="left")


def lint_view(report: LintReport):
    """`mptrain lint`: findings, warnings first, largest FLOPs share first."""
    head = (f"mptrain lint: {report.experiment} under {report.policy} on {report.device}; "
            f"{report.flops_per_example:,} training FLOPs per example")
    checked = (f"dimensions checked for {report.alignment_for}" if report.alignment_for else
               "dimensions not checked: no Tensor Cores or TPU here (`--target gpu` checks them)")
    if not report.findings:
        return Group(head, f"[green]no findings[/]: numerics as the guide wants; {checked}")
    rows = [(f.layer, ["" if f.layer else "-",  # "-": the whole model, not the row above
                       "" if f.flops_share is None else f"{f.flops_share:.0%}",
                       ("[yellow]warning[/]" if f.severity == "warning" else "note")
                       + f": {escape(f.message)}"]) for f in report.findings]
    return Group(_Fitted(head, ["layer", "FLOPs", "finding"], rows, text_columns={2}),
                 f"{report.summary}; {checked}")


def diagnose_view(d: Diagnosis):
    """`mptrain diagnose`: per-layer numbers, verdict per policy, recommendation."""
    rows = [(n.layer, ["", f"{n.activation_max:.3g}", f"{n.activation_overflow:.1%}",
                       f"{n.gradient_underflow:.1%}", f"{n.gradient_underflow_scaled:.1%}",
                       fmt(n.bfloat16_error, ".2%")]) for n in d.layers]
    table = _Fitted(f"mptrain diagnose: {d.experiment} ({d.steps} float32 steps; loss scale "
                    f"{d.loss_scale:g})", ["layer", "act\nmax", "act\n>65504", "grad\nunderflow",
                                          "underflow\n× scale", "bf16\nerror"], rows)
    verdicts = [f"[bold]{policy}[/]: {escape(text)}" for policy, text in d.verdicts.items()]
    return Group(table, *verdicts, f"[bold green]recommendation[/]: {escape(d.recommendation)}")


def memory_view(report: MemoryReport):
    """`mptrain memory`: per policy the estimate, the measured peak and the largest batch; then
    the estimate's parts. Two tables, so each fits 80 columns with every number whole."""
    total_rows, part_rows, notes = [], [], []
    for p in report.plans:
        largest = fmt(p.largest_batch, ",d") + (" (m)" if p.largest_batch_basis == "measured" else "")
        total_rows.append((p.policy, ["", human_bytes(p.total_bytes),
                                      human_bytes(p.measured_peak_bytes), largest]))
        part_rows.append((p.policy, ["", *(human_bytes(v) for v in (
            p.weights_bytes, p.weight_copies_bytes, p.gradients_bytes, p.optimizer_bytes,
            p.activations_bytes))]))
        if p.note:
            notes.append(f"{p.policy}: {p.note}")
    totals = _Fitted(f"mptrain memory: {report.experiment} (batch {report.batch_size}, "
                     f"{report.parameters:,} parameters)",
                     ["policy", "estimate", "measured", "largest batch\nthat fits"], total_rows)
    parts = _Fitted("the estimate's parts", ["policy", "weights", "16-bit\ncopies", "gradients",
                                             "optimizer", "activations"], part_rows)
    return Group(totals, "", parts, "", report.why,
                 "measured: TensorFlow's allocator peak above the data set in a 3-step run "
                 "(n/a where the allocator reports nothing, as for small models on a CPU); "
                 "largest batch from the estimate, or from the measurement where it is larger "
                 "(m)", *notes)


def plan_tables(record: PlanRecord) -> Group:
    """`mptrain plan`: each candidate measured (or why not), the layers timed, the choice."""
    rows = []
    for trial in record.trials:
        s = trial.summary
        t = s.step_time if s is not None and s.step_time is not None and s.step_time.enough else None
        colour = "green" if trial.candidate.name == record.winner else "" if trial.counts else "yellow"
        verdict = f"[{colour}]{escape(trial.verdict)}[/]" if colour else escape(trial.verdict)
        first = s.time_to_first_step_s if s is not None else None
        rows.append((trial.candidate.name, [
            "",
            f"{t.median_ms:.1f}" if t else "-",
            f"{trial.speedup:.2f}x" if trial.speedup is not None else "-",
            f"{first:.1f}" if first is not None else "-",
            _duration(trial.whole_run_s),
            f"{trial.loss_delta_pct:+.1f}%" if trial.loss_delta_pct is not None else "-",
            verdict]))
    parts: list[Any] = [_Fitted(f"mptrain plan: {record.experiment} ({record.steps}-step trials in "
                                "turns)",
                                ["candidate", "ms/step", "speed-up", "start to\n1st step", "whole\nrun",
                                 "loss Δ", "verdict"], rows, text_columns={6})]
    for candidate in record.candidates:
        if candidate.why_not:
            parts.append(f"[dim]{escape(candidate.name)}: skipped, {escape(candidate.why_not)}[/]")
    if record.untried:
        parts.append(f"[yellow]not tried ({record.status})[/]: "
                     f"{', '.join(c.name for c in record.untried)}; "
                     f"mptrain plan --resume {record.folder} tries them")
    if record.layers:
        slow = sorted(record.layers, key=lambda t: t.ms_float32 / t.ms_16bit)[:8]
        layers = _Fitted("layers (forward + backward), slowest in 16 bits first",
                         ["layer", "16-bit\nms", "float32\nms", "16-bit\n×", "island"],
                         [(t.layer, ["", f"{t.ms_16bit:.2f}", f"{t.ms_float32:.2f}",
                                     f"{t.ms_float32 / t.ms_16bit:.2f}x",
                                     "yes" if t.slower_in_16bit else ""]) for t in slow])
        parts += ["", layers]
    parts.append(f"[bold green]plan: {escape(record.winner or 'float32')}[/] — {escape(record.reason)}")
    parts.append(f"measured on {escape(record.machine)}; trials ran in turns of "
                 f"{record.turn_steps} steps. speed-up: the median over rounds of float32's "
                 "median step / this one's in the same round, a verdict says faster only when its "
                 "95% interval is above 1; start to 1st step (s): process start, data, model, tracing, "
                 "compiling and the first step; whole run: "
                 f"estimated for the experiment's {record.experiment_steps} steps (start to 1st step + the "
                 "rest at the median, evaluation left out); loss Δ: the trial's loss over its "
                 "second half against float32's on the same batches")
    if record.plan_file:
        parts.append(f"runnable plan: {record.plan_file}  (mptrain run {record.plan_file})")
    parts.append(f"folder: {record.folder}")
    return Group(*parts)


def _duration(seconds: float | None) -> str:
    """A whole run's time, short: 42 s, 12 min, 3.5 h."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


RUN_STATUS_COLOUR = {"finished": "green", "diverged": "red", "failed": "red", "killed": "yellow",
                     "interrupted": "yellow", "running": "cyan"}


def runs_table(report: RunsReport) -> Group:
    """`mptrain runs`: one row per run folder, newest first; * marks the resumable. A run's
    name is what `--compare` and `--resume` take (a run inside a compare or plan folder:
    FOLDER/RUN), on one line: its policy and loop go under it, so the name has the columns
    the two would take; a name wider still has its own line above its row."""
    from datetime import datetime

    now = datetime.now()
    rows, notes = [], []
    for run in report.runs:
        colour = RUN_STATUS_COLOUR[run.status]
        rows.append((run.name, [
            f"{run.policy or '-'} {run.loop or '-'}",
            f"[{colour}]{run.status}[/]" + ("*" if run.resumable else ""),
            fmt(run.epochs, "d", "-"),
            fmt(run.median_step_ms, ".1f", "-"),
            fmt(run.test_accuracy, ".4f", "-"),
            _ago(datetime.fromisoformat(run.when), now),
        ]))
        if run.status in ("failed", "killed") and run.reason:
            notes.append(f"[{colour}]{escape(run.name)}[/]: {escape(run.reason)}")
    if not rows:
        return Group(f"no run folders in {escape(report.folder)} (a run folder holds config.yaml "
                     "and summary.json)")
    if any(run.resumable for run in report.runs):
        notes.append(f"* resumable: mptrain run --resume {escape(report.folder)}/RUN")
    # one space between columns (the box's own): it leaves the names room
    return Group(_Fitted(f"mptrain runs: {escape(report.folder)}",
                         ["run\npolicy loop", "status", "epochs", "ms/step", "test\nacc", "when"],
                         rows, text_columns={1}, gap=1), *notes)


def _ago(when, now) -> str:
    """How long ago, in the largest unit that is not 0: "45s ago", "3h ago", "12d ago"."""
    seconds = max((now - when).total_seconds(), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"
