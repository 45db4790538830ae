"""compare.png and plan.png, one picture of a study: what people paste into a report.

Top row: training loss per step (a diverging row is drawn up to its last finite loss and
marked with an x), loss per epoch (train solid, validation dashed), and the test quality per
row (the objective's figure: accuracy, AUC, MAE) or, for a plan that timed them, each layer's
16-bit and float32 time.
Bottom row: step time after warm-up, speed-up over the baseline with its spread, and the loss
scale per step when any row scales its loss (the mixed_float16 story: halvings on overflow,
doublings after `dynamic_growth_steps` good steps).

matplotlib with the headless Agg backend, so it works on servers and in CI.
"""

from __future__ import annotations

import math
from pathlib import Path

from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import timed_steps

STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")


def plot_study(record, path: Path, title: str, layers: list | None = None) -> None:
    """The study's picture (see the module's docstring); `layers`: a plan's layer timings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    rows = [r for r in record.rows if r.summary is not None]
    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    (ax_step, ax_epoch, ax_third), (ax_time, ax_speed, ax_scale) = axes
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    labels = [r.label for r in rows]
    colours = [f"C{i % 10}" for i in range(len(rows))]
    times = []
    for index, row in enumerate(rows):
        colour, dash = colours[index], STYLES[index % len(STYLES)]
        marker = MARKERS[index % len(MARKERS)]
        folder = RunFolder(Path(row.summary.run_dir))
        steps, epochs = folder.read_steps(), folder.read_epochs()
        _loss_line(ax_step, row.label, index, steps)
        for key, style, alpha in (("loss", "-", 0.9), ("val_loss", "--", 0.6)):
            ex, ey = _finite_prefix([e.epoch for e in epochs], [e.metrics.get(key) for e in epochs])
            if ex:
                ax_epoch.plot(ex, ey, marker=marker, color=colour, linestyle=style, alpha=alpha,
                              label=row.label if key == "loss" else None)
        times.append(_timed_ms(row, steps))
        scales = [(s.step, s.loss_scale) for s in steps if s.loss_scale is not None]
        if scales:
            ax_scale.step([x for x, _ in scales], [y for _, y in scales], where="post", color=colour,
                          label=row.label, linestyle=dash)

    _loss_axes(ax_step, ax_epoch, plain, len(rows))
    if layers:
        _layer_bars(ax_third, layers)
    else:
        _quality_bars(ax_third, rows, colours)
    _step_time_boxes(ax_time, times, labels, plain)
    _speedup_bars(ax_speed, rows, colours, record.baseline)
    _loss_scale_axis(ax_scale, plain)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _loss_axes(ax_step, ax_epoch, plain, variants: int) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax_step.set(title="Training loss per step", xlabel="step", ylabel="loss")
    ax_epoch.set(title="Loss per epoch (solid: train, dashed: validation)", xlabel="epoch", ylabel="loss")
    for ax in (ax_step, ax_epoch):
        values = [y for line in ax.get_lines() for y in line.get_ydata()]
        if values and all(y > 0 for y in values) and max(values) / min(values) > 10:
            ax.set_yscale("log")  # late-training differences are invisible on a linear axis
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    ax_step.legend(fontsize=8)
    ax_epoch.legend(fontsize=8, ncols=1 + variants // 4)


def _loss_scale_axis(ax_scale, plain) -> None:
    """The loss scale per step, where any row drew one (else a note why none did)."""
    from matplotlib.ticker import MaxNLocator

    if ax_scale.get_lines():
        ax_scale.set(title="Loss scale per step (mixed_float16)", xlabel="step", ylabel="loss scale")
        ax_scale.set_yscale("log", base=2)
        ax_scale.yaxis.set_major_formatter(plain)
        ax_scale.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax_scale.grid(alpha=0.3)
        ax_scale.legend(fontsize=8)
    else:
        ax_scale.axis("off")
        ax_scale.text(0.5, 0.5, "no variant scales its loss\n(loss scaling is for mixed_float16)",
                      ha="center", va="center", color="0.4")


def _loss_line(ax, label: str, index: int, steps: list) -> None:
    """A variant's training loss per step, up to its last finite loss; one that diverged ends
    in an x marked NaN/inf. Variants from the same weights often overlap: a dash of its own
    keeps every line visible."""
    colour = f"C{index % 10}"
    xs, ys = _finite_prefix([s.step for s in steps], [s.loss for s in steps])
    ax.plot(xs, ys, color=colour, label=label, linewidth=1.4, alpha=0.85,
            linestyle=STYLES[index % len(STYLES)])
    if len(xs) < len(steps):
        stop_x, stop_y = (xs[-1], ys[-1]) if xs else (steps[0].step, 0.0)
        ax.plot([stop_x], [stop_y], marker="x", markersize=12, color=colour, mew=3)
        ax.annotate(f"{label}: NaN/inf", (stop_x, stop_y), textcoords="offset points",
                    xytext=(6, 6), color=colour, fontsize=8)


def _timed_ms(row, steps: list) -> list[float]:
    """A row's timed steps in ms, its warm-up left out as its summary did; [NaN] for none."""
    excluded = row.summary.step_time.warmup_steps_excluded if row.summary.step_time else 0
    return [r.seconds * 1000 for r in timed_steps(steps, excluded)] or [math.nan]


def _finite_prefix(xs: list, ys: list) -> tuple[list, list]:
    """The points before the first missing (null in JSON: NaN/inf) value."""
    end = next((i for i, y in enumerate(ys) if y is None or not math.isfinite(y)), len(ys))
    return xs[:end], ys[:end]


def _by_row(ax, labels: list[str], title: str, xlabel: str | None = None, fontsize: int = 8) -> None:
    """A horizontal chart's rows named top down, its title, and its grid along x."""
    ax.set_yticks(range(len(labels)), labels, fontsize=fontsize)
    ax.invert_yaxis()
    ax.set(title=title, xlabel=xlabel)
    ax.grid(alpha=0.3, axis="x")


def _quality_bars(ax, rows, colours) -> None:
    """Each row's test quality (the objective's figure: accuracy, AUC, MAE...), its change
    against the baseline written on its bar."""
    from mptrain.measure.verdicts import quality_figure

    figures = [quality_figure(r.summary) if r.summary.status != "diverged" else None for r in rows]
    values = [f.value if f is not None else None for f in figures]
    ax.barh(range(len(rows)), [v or 0 for v in values], color=colours, alpha=0.8)
    for y, (value, row) in enumerate(zip(values, rows, strict=True)):
        delta = row.verdict.quality
        text = ("diverged" if row.summary.status == "diverged" else "no test figure" if value is None
                else f"{value:.4g}" + (f" ({delta.shown()})" if delta is not None else ""))
        ax.text(0.01, y, text, va="center", fontsize=9, transform=ax.get_yaxis_transform())
    first = next((f for f in figures if f is not None), None)
    _by_row(ax, [r.label for r in rows], f"Test {first.label if first else 'accuracy'}")
    if first is None or first.proportion or first.label in ("AUC", "mean IoU"):
        ax.set_xlim(0, 1)


def _step_time_boxes(ax, times, labels, plain) -> None:
    if times:
        ax.boxplot(times, orientation="horizontal", showfliers=True, positions=range(len(times)))
        finite = [t for ts in times for t in ts if math.isfinite(t) and t > 0]
        if finite and max(finite) / min(finite) > 20:
            ax.set_xscale("log")
        ax.xaxis.set_major_formatter(plain)
    _by_row(ax, labels, "Step time (timed steps: after warm-up, full batches)", "ms per step")


def _speedup_bars(ax, rows, colours, baseline: str) -> None:
    values = [r.speedup or 0 for r in rows]
    ranges = [r.speedup_range or (v, v) for v, r in zip(values, rows, strict=True)]
    low = [max(0.0, v - lo) for v, (lo, _) in zip(values, ranges, strict=True)]
    high = [max(0.0, hi - v) for v, (_, hi) in zip(values, ranges, strict=True)]
    ax.barh(range(len(rows)), values, xerr=[low, high], color=colours, alpha=0.8, capsize=4)
    for y, row in enumerate(rows):
        text = (f"{row.speedup:.2f}x" if row.speedup is not None else
                "baseline" if row.verdict.baseline else row.verdict.speed.unknown or "not timed")
        ax.text(0.01, y, text, va="center", fontsize=9, transform=ax.get_yaxis_transform())
    ax.axvline(1.0, color="0.3", linewidth=1)
    _by_row(ax, [r.label for r in rows], f"Speed-up over {baseline} (bars: 95% interval)", "× faster")


def _layer_bars(ax, layers: list) -> None:
    """Each layer's forward and backward, in float32 and in 16 bits; the slower in 16 bits,
    the float32 islands, marked."""
    names = [t.layer for t in layers]
    positions = range(len(names))
    ax.barh([p - 0.2 for p in positions], [t.ms_float32 for t in layers], 0.4, label="float32",
            color="C0")
    ax.barh([p + 0.2 for p in positions], [t.ms_16bit for t in layers], 0.4, label="16-bit",
            color="C1")
    for p, timing in zip(positions, layers, strict=True):
        if timing.slower_in_16bit:
            ax.text(timing.ms_16bit, p + 0.2, " slower in 16 bits: float32 island", va="center",
                    fontsize=7, color="C3")
    _by_row(ax, names, "Each layer's forward + backward", "ms per call", fontsize=7)
    ax.legend(fontsize=8)
