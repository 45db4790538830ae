"""compare.png: training loss per step and per epoch for every variant, and step-time spread.

matplotlib with the headless Agg backend, so it works on servers and in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mptrain.run_folder import read_jsonl

STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")


def plot_compare(record: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in record["variants"] if v.get("run_dir")]
    fig, (ax_step, ax_epoch, ax_time) = plt.subplots(1, 3, figsize=(17, 5.2))
    times, labels = [], []
    for index, v in enumerate(variants):
        # Variants from the same weights often overlap: distinct dashes and markers keep
        # every line visible.
        color, dash = f"C{index % 10}", STYLES[index % len(STYLES)]
        marker = MARKERS[index % len(MARKERS)]
        run_dir = Path(v["run_dir"])
        steps = read_jsonl(run_dir / "steps.jsonl")
        epochs = read_jsonl(run_dir / "metrics.jsonl")
        ax_step.plot([s["step"] for s in steps], [s["loss"] for s in steps], color=color,
                     label=v["variant"], linewidth=1.4, alpha=0.85, linestyle=dash)
        xs = [e["epoch"] for e in epochs]
        ax_epoch.plot(xs, [e["metrics"].get("loss") for e in epochs], marker=marker, color=color,
                      linestyle=dash, label=f"{v['variant']} train")
        if epochs and "val_loss" in epochs[0]["metrics"]:
            ax_epoch.plot(xs, [e["metrics"]["val_loss"] for e in epochs], marker=marker,
                          color=color, linestyle=dash, alpha=0.5, markerfacecolor="none",
                          label=f"{v['variant']} val")
        warm = v.get("warmup_steps_excluded", 0)
        times.append([s["seconds"] * 1000 for s in steps[warm:]] or [float("nan")])
        labels.append(v["variant"] + (" (bounded)" if v.get("bounded") else ""))

    ax_step.set(title="Training loss per step", xlabel="step", ylabel="loss")
    ax_epoch.set(title="Loss per epoch", xlabel="epoch", ylabel="loss")
    ax_epoch.xaxis.get_major_locator().set_params(integer=True)
    for ax in (ax_step, ax_epoch):
        if all(y > 0 for line in ax.get_lines() for y in line.get_ydata()):
            ax.set_yscale("log")  # late-training differences are invisible on a linear axis
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if times:
        ax_time.boxplot(times, vert=False, showfliers=True)
        ax_time.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
        finite = [t for ts in times for t in ts if t == t and t > 0]
        if finite and max(finite) / min(finite) > 20:
            ax_time.set_xscale("log")
    ax_time.set(title="Step time after warm-up", xlabel="ms per step")
    ax_time.grid(alpha=0.3, axis="x")
    fig.suptitle(f"mptrain compare: {record['experiment']} (baseline {record['baseline_policy']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
