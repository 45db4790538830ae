"""Live progress on stderr: a Rich bar per epoch and a line per finished epoch of a run, and
what run, compare and plan say as they go (`ConsoleTelling`)."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mptrain.report.console import say, stderr
from mptrain.telling import Telling
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class LiveProgress(TrainingListener):
    """Live bars need a terminal; elsewhere (CI logs, `2>file`) only the epoch lines and
    notices are printed."""

    def __init__(self):
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[metrics]}"),
            TextColumn("{task.fields[step_ms]} ms/step"),
            TextColumn("{task.fields[scale]}"),
            TimeElapsedColumn(),
            console=stderr,
            transient=True,
        )
        self._task = None

    def __enter__(self) -> LiveProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.progress.live.is_started:  # stopping one never started prints an empty line
            self.progress.stop()

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        # the live display starts with training: until then (set-up, or a run whose local
        # workers show their own progress) the terminal is left to other output
        self.progress.start()
        self._task = self.progress.add_task(f"epoch {epoch}/{epochs}", total=steps, loss="…",
                                            step_ms="…", scale="", metrics="")

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        scale = f"scale {_scales(record)}" if record.loss_scale is not None else ""
        metrics = " ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
        self.progress.update(self._task, completed=step_in_epoch, loss=f"{record.loss:.4f}",
                             metrics=metrics, step_ms=f"{record.seconds * 1000:.1f}", scale=scale)

    def epoch_finished(self, record: EpochRecord) -> None:
        self.progress.remove_task(self._task)
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in record.metrics.items())
        extra = (f"  loss scale {_scales(record)}, skipped {record.skipped_steps} in all"
                 if record.loss_scale is not None else "")
        steps = f"{record.steps} step" + ("" if record.steps == 1 else "s")
        say(f"epoch {record.epoch}: {steps}  {metrics}{extra}")

    def notice(self, text: str, label: str = "warning") -> None:
        say(text, label, "yellow" if label == "warning" else "cyan")


def _scales(record: StepRecord | EpochRecord) -> str:
    """The loss scale, or each optimizer's ("d_optimizer 32768, g_optimizer 16384")."""
    if record.loss_scales:
        return ", ".join(f"{name} {value:g}" for name, value in record.loss_scales.items())
    return f"{record.loss_scale:g}"


COLOURS = {"plan": "cyan", "restart": "yellow"}


class ConsoleTelling(Telling):
    """What run, compare and plan say, on stderr: the command line's, and Python's with
    `progress=True` (Rich renders in notebooks too)."""

    def say(self, kind: str, line: str) -> None:
        say(line, kind, COLOURS.get(kind.split()[0], "yellow"))

    def started(self, prepared, notes: list[str]) -> None:
        from mptrain.report.tables import run_header

        say(run_header(prepared.config, prepared.choice, prepared.speed_warning, notes))

    def status(self, text: str):
        return stderr.status(text)

    def turn(self, round_: int, label: str, step_ms: list[float]) -> None:
        """A child may run no step in a turn: resumed at its last step, or stopped before its
        first."""
        import statistics

        if round_ == 0:
            first = (f"first step {step_ms[0] / 1e3:.2f} s (tracing, kernels, compiling)" if step_ms
                     else "no step to run")
            say(f"{label}: started; {first}")
        else:
            median = f", median {statistics.median(step_ms):.1f} ms" if step_ms else ""
            say(f"round {round_} · {label}: {len(step_ms)} steps{median}")
