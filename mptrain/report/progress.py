"""Live progress on stderr: a Rich bar per epoch and a line per finished epoch of a run, and
what run, compare and plan say as they go (`ConsoleTelling`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mptrain.report.console import stderr
from mptrain.telling import Telling
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class LiveProgress(TrainingListener):
    """Live bars need a terminal; elsewhere (CI logs, `2>file`) only the epoch lines and
    notices are printed."""

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
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        # the live display starts with training: until then (set-up, or a run whose local
        # workers show their own progress) the terminal is left to other output
        self.progress.start()
        self._task = self.progress.add_task(
            f"{self.label}epoch {epoch}/{epochs}", total=steps, loss="…", step_ms="…", scale="",
            metrics=""
        )

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        scale = f"scale {record.loss_scale:g}" if record.loss_scale is not None else ""
        metrics = " ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
        self.progress.update(self._task, completed=step_in_epoch, loss=f"{record.loss:.4f}",
                             metrics=metrics, step_ms=f"{record.seconds * 1000:.1f}", scale=scale)

    def epoch_finished(self, record: EpochRecord) -> None:
        self.progress.remove_task(self._task)
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
        extra = ""
        if record.loss_scale is not None:
            extra = f"  loss scale {record.loss_scale:g}, skipped {record.skipped_steps}"
        steps = f"{record.steps} step" + ("" if record.steps == 1 else "s")
        self.console.print(f"{self.label}epoch {record.epoch}: {steps}  {metrics}{extra}",
                           soft_wrap=True, highlight=False)

    def notice(self, text: str) -> None:
        self.console.print(f"[yellow]warning:[/] {text}", soft_wrap=True, highlight=False)


def turn_line(round_: int, label: str, step_ms: list[float]) -> str:
    """One line per turn of compare's or plan's variants (`measure.engine`): round 0 is a variant's
    first step (its one-off costs), each later round a turn of steps."""
    import statistics

    if round_ == 0:
        return f"{label}: started; first step {step_ms[0] / 1e3:.2f} s (tracing, kernels, compiling)"
    median = statistics.median(step_ms) if step_ms else float("nan")
    return f"round {round_} · {label}: {len(step_ms)} steps, median {median:.1f} ms"


COLOURS = {"plan": "cyan", "restart": "yellow"}


class ConsoleTelling(Telling):
    """What run, compare and plan say, on stderr: the command line's, and Python's with
    `progress=True` (Rich renders in notebooks too)."""

    def say(self, kind: str, line: str) -> None:
        colour = COLOURS.get(kind.split()[0], "yellow")
        stderr.print(f"[{colour}]{escape(kind)}:[/] {escape(line)}", soft_wrap=True,
                     highlight=False)

    def started(self, prepared, notes: list[str]) -> None:
        from mptrain.report.tables import run_header

        stderr.print(run_header(prepared.config, prepared.choice, prepared.speed_warning, notes),
                     soft_wrap=True, highlight=False)

    def status(self, text: str):
        return stderr.status(text)

    def turn(self, round_: int, label: str, step_ms: list[float]) -> None:
        stderr.print(turn_line(round_, label, step_ms), highlight=False, soft_wrap=True)
