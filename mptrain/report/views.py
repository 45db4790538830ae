"""What the commands that look before training print: check-gpu's panel, lint's findings,
diagnose's layers, memory's estimates; and `mptrain runs`' list of run folders (the results
of training are `tables`'); each table fits 80 columns (`report.fitted`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from mptrain.hardware.machine import USABLE_FRACTION
from mptrain.report.console import fmt, human_bytes
from mptrain.report.fitted import Fitted

if TYPE_CHECKING:
    from mptrain.diagnostics.numerics import Diagnosis
    from mptrain.measure.memory import MemoryReport
    from mptrain.precision.check import CheckReport
    from mptrain.precision.lint import LintReport
    from mptrain.runs.folder import RunsReport


def check_gpu_view(report: CheckReport):
    """The `check-gpu` panel: a block a user can paste into a bug report."""
    from rich.panel import Panel

    m = report.machine
    facts = Table(show_header=False, box=None, pad_edge=False)  # aligned with the tables below
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("TensorFlow / Keras", f"{m.tensorflow_version} / {m.keras_version}")
    facts.add_row("oneDNN", m.onednn_state or ("on" if m.onednn else "off"))
    facts.add_row("XLA", {True: "available", False: "not working", None: "not checked"}[m.xla])
    facts.add_row("TF32 execution", {True: "enabled", False: "disabled", None: "n/a"}[m.tf32_enabled])
    facts.add_row("TPU", "present (wants mixed_bfloat16)" if m.tpu else "none")
    features = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in m.cpu.features.items())
    facts.add_row("CPU", f"{m.cpu.name or m.cpu.model}, {m.cpu.physical_cores} cores "
                         f"({m.cpu.logical_cpus} logical CPUs) usable by this process")
    facts.add_row("CPU features", features or "unknown (no /proc/cpuinfo)")
    parts: list[Any] = [facts]
    if m.gpus:
        rows = [(None, [escape(g.name), f"{g.compute_capability[0]}.{g.compute_capability[1]}"
                        if g.compute_capability else "n/a", human_bytes(g.memory_bytes),
                        *("yes" if flag else "no" for flag in
                          (g.float16_tensor_cores, g.fast_bfloat16, g.tf32_by_default, g.float8))])
                for g in m.gpus]
        parts.append(Fitted(None, ["GPU", "CC", "memory", "fp16 TC", "fast bf16", "TF32", "fp8"],
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
    if rec.math_library_reason:
        setting = f"[bold green]{rec.math_library}[/]: " if rec.math_library else ""
        parts.append(f"[bold]Math library:[/] {setting}{escape(rec.math_library_reason)}")
    parts.append("`policy: auto` runs this policy, except in an experiment with a plan beside "
                 "its file (`mptrain plan`) measured on this machine: there, the plan's pick, "
                 "measured on the model itself.")
    if m.gpus:  # (the guide's check is of GPUs: on a CPU the measured kernels say it)
        parts.append(escape(report.compatibility_check))
    dist = report.distribution
    if dist:
        parts.append(f"[bold]tf.distribute[/]: mirrored would use "
                     f"{escape(', '.join(dist.mirrored_devices))}; "
                     f"NCCL {'available' if dist.nccl else 'not available'}; all-reduce: "
                     f"{escape(dist.all_reduce)}" + (f"\n{escape(dist.note)}" if dist.note else ""))
    if report.kernels and not report.bench:
        parts.append(f"kernels measured {report.kernels.measured_at} (cached; `check-gpu --bench` "
                     "measures again)" if report.kernels_cached else
                     f"kernels measured now, in {report.kernels.seconds:.1f} s (kept in the cache "
                     "for `policy: auto` and the next check-gpu)")
    parts += _bench_parts(report)
    return Panel(Group(*parts), title="mptrain check-gpu", title_align="left")


def _bench_parts(report: CheckReport) -> list:
    """`check-gpu --bench`: every kernel timed, per dtype, with what the columns mean."""
    parts = []
    if report.bench:
        rows = [(None, [r.device.strip("/"), r.kernel, r.setting,
                        f"{r.ms_per_call:.2f}" + ("*" if r.cut_short else ""),
                        f"{r.ms_p10:.2f}–{r.ms_p90:.2f}", f"{r.tflops:.3f}",
                        fmt(r.ratio_to_float32, ".3g")]) for r in report.bench]
        parts.append(Fitted(None, ["device", "kernel", "dtype", "ms/call", "p10–p90", "TFLOP/s",
                                    "× fp32"], rows, text_columns={1, 2}))
        if any(r.cut_short for r in report.bench):
            parts.append("* 1 call, cut short: a single call took longer than the budget")
        parts.append("dense = MatMul+BiasAdd+ReLU, which oneDNN fuses (the op behind float16's CPU "
                     "collapse); +xla: compiled with XLA; +onednn, +eigen: the CPU's math "
                     "library (the one TensorFlow does not run here timed by a process of its "
                     "own); × fp32: against float32 in the same mode and library (+xla against "
                     "float32+xla); settings timed in interleaved rounds, medians and p10–p90 "
                     "spreads")
    return parts


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
    return Group(Fitted(head, ["layer", "FLOPs", "finding"], rows, text_columns={2}),
                 f"{report.summary}; {checked}")


def diagnose_view(d: Diagnosis):
    """`mptrain diagnose`: per-layer numbers, verdict per policy, recommendation."""
    rows = [(n.layer, ["", f"{n.activation_max:.3g}", f"{n.activation_overflow:.1%}",
                       f"{n.gradient_underflow:.1%}", f"{n.gradient_underflow_scaled:.1%}",
                       fmt(n.bfloat16_error, ".2%")]) for n in d.layers]
    table = Fitted(f"mptrain diagnose: {d.experiment} ({d.steps} float32 steps; loss scale "
                    f"{d.loss_scale:g})", ["layer", "act\nmax", "act\n>65504", "grad\nunderflow",
                                          "underflow\n× scale", "bf16\nerror"], rows)
    verdicts = [f"[bold]{policy}[/]: {escape(text)}" for policy, text in d.verdicts.items()]
    features = [f"[bold yellow]every policy[/]: {escape(d.features)}"] if d.features else []
    return Group(table, *verdicts, *features,
                 f"[bold green]recommendation[/]: {escape(d.recommendation)}")


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
    totals = Fitted(f"mptrain memory: {report.experiment} (batch {report.batch_size}, "
                     f"{report.parameters:,} parameters)",
                     ["policy", "estimate", "measured", "largest batch\nthat fits"], total_rows)
    parts = Fitted("the estimate's parts", ["policy", "weights", "16-bit\ncopies", "gradients",
                                             "optimizer", "activations"], part_rows)
    fits = (f"largest batch: its training state in {USABLE_FRACTION:.0%} of the "
            f"{human_bytes(report.memory_bytes)} of {report.memory_of}, by the estimate, or by the "
            "measurement where it is larger (m)" if report.memory_bytes else
            f"largest batch: n/a, the size of {report.memory_of} is not known")
    return Group(totals, "", parts, "", report.why,
                 "measured: TensorFlow's allocator peak above the data set in a 3-step run "
                 "(n/a where the allocator reports nothing); "
                 f"{fits}", *notes)


RUN_STATUS_COLOUR = {"finished": "green", "diverged": "red", "failed": "red", "killed": "yellow",
                     "interrupted": "yellow", "running": "cyan", "cut short": "yellow"}


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
            " ".join([run.candidate or run.policy or "-", run.loop or "-",
                      *([run.math_library] if run.math_library else [])]),
            f"[{colour}]{run.status}[/]" + ("*" if run.resumable else ""),
            fmt(run.epochs, "d", "-"),
            fmt(run.median_step_ms, ".1f", "-"),
            run.test_quality or "-",
            time_ago(datetime.fromisoformat(run.when), now),
        ]))
        if run.status in ("failed", "killed", "cut short") and run.reason:
            notes.append(f"[{colour}]{escape(run.name)}[/]: {escape(run.reason)}")
    if not rows:
        return Group(f"no run folders in {escape(report.folder)} (a run folder holds config.yaml "
                     "and summary.json)")
    if any(run.resumable for run in report.runs):
        notes.append(f"* resumable: mptrain run --resume {escape(report.folder)}/RUN")
    # one space between columns (the box's own): it leaves the names room
    return Group(Fitted(f"mptrain runs: {escape(report.folder)}",
                         ["run\ncandidate loop library", "status", "epochs", "ms/step", "test", "when"],
                         rows, text_columns={1}, gap=1), *notes)


def time_ago(when, now) -> str:
    """How long ago, in the largest unit that is not 0: "45s ago", "3h ago", "12d ago"."""
    seconds = max((now - when).total_seconds(), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"
