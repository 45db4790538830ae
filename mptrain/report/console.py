"""The two consoles. Light on purpose: every command imports this, `validate` included."""

from __future__ import annotations

from rich.console import Console

stderr = Console(stderr=True)


def stdout_console() -> Console:
    """Rich's console: the terminal's width, or 80 columns (or $COLUMNS) when redirected.
    Every table is designed to be read whole at 80 columns."""
    return Console()


def plain_text(renderable, width: int = 80) -> str:
    """What a table looks like on an 80-column terminal, without colours: for a file (MLflow's
    copy of compare's and plan's tables)."""
    import io

    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


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
