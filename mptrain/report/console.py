"""The two consoles. Light on purpose: every command imports this, `validate` included."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

stderr = Console(stderr=True)


def say(text, label: str | None = None, style: str | None = None) -> None:
    """One line (or a few) on stderr, never wrapped: `label:` in `style`, then `text` as
    written. Never read as Rich markup: a path or a message may hold brackets
    (`runs/exp[lr=0.1]`, `mptrain[mlflow]`) that Rich would take for styles and drop. A Rich
    `Text` (the run's header) is printed as it is styled."""
    line = text if isinstance(text, Text) else Text(text)
    if label is not None:
        line = Text.assemble((f"{label}:", style or ""), " ", line)
    stderr.print(line, soft_wrap=True, highlight=False)


def as_text(tables):
    """`record → the tables as plain text`, for what MLflow keeps beside a compare or plan:
    what they look like on an 80-column terminal, without colours."""
    def text(record) -> str:
        console = Console(file=io.StringIO(), width=80, color_system=None, record=True)
        console.print(tables(record))
        return console.export_text()

    return text


def human_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def fmt(value: float | None, spec: str = ".4f", none: str = "n/a") -> str:
    return none if value is None else format(value, spec)
