"""Rendering results for people: live progress on stderr, summary tables on stdout.

Library code returns result dicts; only this module and the CLI print. Progress always goes
to stderr so that `--json` leaves stdout holding nothing but the JSON document.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mptrain.training.monitor import EpochRecord, StepRecord

stderr = Console(stderr=True)
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def stdout_console() -> Console:
    """Tables stay readable when piped to a file: 200 columns instead of Rich's 80."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt(value: float | None, spec: str = ".4f", none: str = "n/a") -> str:
    return none if value is None else format(value, spec)


class LiveProgress:
    """A TrainingListener that draws a Rich progress bar per epoch and a line per finished epoch.

    Live bars need a terminal; elsewhere (CI logs, `2>file`) only the epoch lines are printed.
    """

    def __init__(self, console: Console = stderr, label: str = ""):
        self.console = console
        self.label = f"{label} " if label else ""
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[metrics]}"),
            TextColumn("{task.fields[step_ms]} ms/step"),
            TextColumn("{task.fields[scale]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = None

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        self._task = self.progress.add_task(
            f"{self.label}epoch {epoch}/{epochs}", total=steps, loss="…", step_ms="…", scale="",
            metrics=""
        )

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        scale = f"scale {record.loss_scale:g}" if record.loss_scale is not None else ""
        metrics = " ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
        self.progress.update(self._task, completed=step_in_epoch, loss=f"{record.loss:.4f}",
                             metrics=metrics,
                             step_ms=f"{record.seconds * 1000:.1f}", scale=scale)

    def epoch_finished(self, record: EpochRecord) -> None:
        self.progress.remove_task(self._task)
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
        extra = ""
        if record.loss_scale is not None:
            extra = f"  loss scale {record.loss_scale:g}, skipped {record.skipped_steps}"
        self.console.print(f"{self.label}epoch {record.epoch}: {record.steps} steps  {metrics}{extra}",
                           soft_wrap=True, highlight=False)


def run_header(experiment, choice, warning: str | None) -> str:
    """What is about to run, printed before the first step."""
    policy = choice.name if choice.requested == choice.name else f"{choice.name} (from {choice.requested})"
    xla = "XLA step" if choice.jit_compile else (
        "XLA optimizer update" if choice.xla_optimizer_update else "no XLA")
    text = (f"mptrain run [bold]{experiment.name}[/]: {policy}, loop {experiment.train.loop}, "
            f"{experiment.train.epochs} epoch(s), {xla}")
    if warning:
        text += f"\n[yellow]warning:[/] {warning}"
    return text


def summary_table(s: dict[str, Any]) -> Table:
    table = Table(title=f"mptrain run: {s['name']}", show_header=False, title_justify="left")
    table.add_column("", style="bold")
    table.add_column("")
    policy = s["policy"]
    if s["policy_requested"] != policy:
        policy = f"{policy} (from {s['policy_requested']})"
    steps = s["step_time_ms"] or {}
    rows = [
        ("policy", policy),
        ("dtypes", f"compute {s['compute_dtype']}, variables {s['variable_dtype']}, "
                   f"output {s['output_dtype']}"),
        ("loop", s["loop"]),
        ("XLA", f"step {'on' if s['jit_compile'] else 'off'} ({s['jit_compile_reason']}); "
                f"optimizer update {'on' if s['xla_optimizer_update'] else 'off'}"),
        ("device", s["device"]),
        ("steps", f"{s['steps_run']} in {s['epochs_run']} epoch(s), batch {s['batch_size']}"
                  + (f"  [yellow]{s['bounded']}[/]" if s["bounded"] else "")),
        ("step time", (f"median {steps['median']:.1f} ms  p10 {steps['p10']:.1f}  "
                       f"p90 {steps['p90']:.1f}  mean {steps['mean']:.1f}  "
                       f"({s['timed_steps']} timed, {s['warmup_steps_excluded']} warm-up left out)")
         if steps else "n/a"),
        ("throughput", f"{fmt(s['examples_per_sec'], ',.0f')} examples/s"),
        ("compute", _compute_line(s)),
        ("test", f"loss {fmt(s['test_loss'])}  accuracy {fmt(s['test_accuracy'])}"),
    ]
    if s.get("speed_warning"):
        rows.append(("[yellow]warning[/]", s["speed_warning"]))
    if s["non_finite_loss_steps"]:
        rows.append(("[red]diverged[/]", f"{s['non_finite_loss_steps']} step(s) had a NaN/inf loss "
                     "(JSON shows them as null); try a mixed policy or a lower learning rate"))
    if s["loss_scale"] is not None:
        rows.append(("loss scale", f"final {s['loss_scale']['final']:g}, "
                                   f"skipped steps {s['loss_scale']['skipped_steps']}"))
    rows += [
        ("peak memory", f"process {human_bytes(s['peak_memory_bytes'])}, "
                        f"device {human_bytes(s['device_peak_memory_bytes'])}"),
        ("wall time", f"{s['wall_time_s']:.1f} s "
                      f"(first step after {fmt(s['time_to_first_step_s'], '.1f')} s)"),
        ("run folder", s.get("run_dir", "")),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return table


def _tflops_cell(s: dict[str, Any]) -> str:
    if s.get("achieved_tflops") is None:
        return "n/a"
    mfu = f" ({s['mfu']:.0%})" if s.get("mfu") is not None else ""
    return f"{s['achieved_tflops']:.2f}{mfu}"


def _compute_line(s: dict[str, Any]) -> str:
    if s["achieved_tflops"] is None:
        return "n/a"
    line = f"{s['achieved_tflops']:.3f} TFLOP/s"
    if s["mfu"] is not None:
        line += f" = {s['mfu']:.0%} of this CPU's {s['compute_dtype']} peak ({s['peak_tflops']:.2f} TFLOP/s)"
    return line


def check_gpu_view(report: dict[str, Any]):
    """The `check-gpu` panel: a block a user can paste into a bug report."""
    from rich.console import Group
    from rich.panel import Panel

    m = report["machine"]
    facts = Table(show_header=False, box=None)
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("TensorFlow / Keras", f"{m['tensorflow_version']} / {m['keras_version']}")
    facts.add_row("oneDNN", "on" if m["onednn"] else "off (TF_ENABLE_ONEDNN_OPTS=0)")
    facts.add_row("XLA", {True: "available", False: "not working", None: "not checked"}[m["xla"]])
    facts.add_row("TF32 execution", {True: "enabled", False: "disabled", None: "n/a"}[m["tf32_enabled"]])
    facts.add_row("TPU", "present (wants mixed_bfloat16)" if m["tpu"] else "none")
    cpu = m["cpu"]
    features = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in cpu["features"].items())
    facts.add_row("CPU", f"{cpu['model']}, {cpu['cores']} cores")
    facts.add_row("CPU features", features or "unknown (no /proc/cpuinfo)")
    parts: list[Any] = [facts]
    if m["gpus"]:
        gpus = Table("GPU", "compute capability", "memory", "fp16 Tensor Cores", "fast bf16",
                     "TF32 default", "float8")
        for g in m["gpus"]:
            cc = g["compute_capability"]
            gpus.add_row(g["name"], f"{cc[0]}.{cc[1]}" if cc else "n/a", human_bytes(g["memory_bytes"]),
                         *("yes" if g[k] else "no" for k in
                           ("float16_tensor_cores", "fast_bfloat16", "tf32_by_default", "float8")))
        parts.append(gpus)
    else:
        parts.append("[bold]No GPU found[/]: TensorFlow sees no GPU on this machine.")
    rec = report["recommendation"]
    parts.append(f"[bold green]Recommended policy: {rec['policy']}[/]\n{rec['reason']}")
    parts += [f"[yellow]warning:[/] {w}" for w in rec["warnings"]]
    parts.append(report["compatibility_check"])
    if report["bench"]:
        bench = Table("device", "kernel", "dtype", "ms/call", "TFLOP/s", "vs float32", "calls")
        for r in report["bench"]:
            note = " (cut short)" if r["cut_short"] else ""
            bench.add_row(r["device"].strip("/"), r["kernel"], r["dtype"], f"{r['ms_per_call']:.2f}",
                          f"{r['tflops']:.3f}", f"{fmt(r['ratio_to_float32'], '.3g')}x",
                          f"{r['calls']}{note}")
        parts.append(bench)
        parts.append("dense = MatMul+BiasAdd+ReLU, which oneDNN fuses (the op behind float16's CPU collapse)")
    return Panel(Group(*parts), title="mptrain check-gpu", title_align="left")


def compare_table(record: dict[str, Any]):
    """The side-by-side table of `mptrain compare`, with notes for warnings and bounded runs."""
    from rich.console import Group

    base = record["baseline_policy"]
    table = Table(title=f"mptrain compare: {record['experiment']}", title_justify="left")
    for header in ("variant", "compute/vars", "step ms median/p90", "examples/s",
                   f"speed-up vs {base}", "TFLOP/s (MFU)", "peak mem (ratio)", "test loss (Δ)",
                   "accuracy (Δ pt)", "scale/skipped", "verdict"):
        left = header in ("variant", "verdict")
        table.add_column(header, justify="left" if left else "right", no_wrap=header == "variant",
                         min_width=28 if header == "verdict" else None)
    notes = []
    for v in record["variants"]:
        if v.get("failed"):
            table.add_row(v["variant"], *[""] * 9, f"[red]{v['verdict']}[/]")
            continue
        steps = v["step_time_ms"] or {}
        scale = v["loss_scale"]
        memory = v.get("device_peak_memory_bytes") or v.get("peak_memory_bytes")
        table.add_row(
            v["variant"] + (" [yellow]⚠[/]" if v.get("warning") else ""),
            f"{DTYPE_SHORT[v['compute_dtype']]}/{DTYPE_SHORT[v['variable_dtype']]}",
            f"{fmt(steps.get('median'), '.1f')} / {fmt(steps.get('p90'), '.1f')}",
            fmt(v["examples_per_sec"], ",.0f"),
            f"{fmt(v['speedup'], '.2f')}x",
            _tflops_cell(v),
            f"{human_bytes(memory)} ({fmt(v['memory_ratio'], '.2f')}x)",
            f"{fmt(v['test_loss'])} ({fmt(v['test_loss_delta'], '+.4f', '-')})",
            f"{fmt(v['test_accuracy'])} ({fmt(v['accuracy_delta_pt'], '+.2f', '-')})",
            f"{scale['final']:g} / {scale['skipped_steps']}" if scale else "-",
            v["verdict"],
        )
        if v.get("warning"):
            notes.append(f"[yellow]⚠ {v['variant']}[/]: {v['warning']}")
        if v.get("bounded"):
            notes.append(f"[yellow]bounded {v['variant']}[/]: {v['bounded']}")
    notes.append("mem: device allocator peak where TensorFlow reports it, else process peak RSS")
    notes.append(f"folder: {record['folder']}")
    return Group(table, *notes)
