"""Live training progress on stderr: a Rich bar per epoch and a line per finished epoch."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mptrain.report.console import stderr
from mptrain.summary import EpochRecord, StepRecord

SKIP_WINDOW, SKIP_WARNING = 50, 0.2


class LiveProgress:
    """A TrainingListener. Live bars need a terminal; elsewhere (CI logs, `2>file`) only the
    epoch lines are printed."""

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
        self._recent_skips: list[bool] = []
        self._warned = False

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
        if record.skipped is not None:
            self._recent_skips = [*self._recent_skips[-(SKIP_WINDOW - 1):], record.skipped]
            rate = sum(self._recent_skips) / len(self._recent_skips)
            if len(self._recent_skips) >= 10 and rate > SKIP_WARNING and not self._warned:
                self._warned = True
                self.console.print(
                    f"[yellow]warning:[/] {rate:.0%} of the last {len(self._recent_skips)} steps "
                    "were skipped (non-finite gradients under float16); the loss scale is at "
                    f"{record.loss_scale:g}. Persistent skipping wastes the steps: try "
                    "mixed_bfloat16, or `mptrain diagnose` to see which layer overflows",
                    soft_wrap=True, highlight=False)
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
