"""How a long library call tells its user what it is doing, without printing anything itself.

A run, a compare or a plan takes minutes to hours, and its user should learn as it goes what
will train, what is known to be slow here, and how each variant's turn went. The library says
it to a `Telling`: the command line hands it one that prints on the terminal
(`report.progress.ConsoleTelling`), Python the same one, or with `progress=False` this base,
which keeps quiet. So the words and their colours stay the reporting layer's, and a command
and its Python function say the same things.
"""

from __future__ import annotations

import contextlib
from typing import Any


class Telling:
    """Says nothing: the base every way of telling overrides what it shows."""

    def say(self, kind: str, line: str) -> None:
        """A line worth reading as it happens; `kind` is what it is about: "plan" (a plan
        beside the experiment), "restart" (lost workers restart), "note" (known to be slow)."""

    def started(self, prepared: Any, notes: list[str]) -> None:
        """What will train (a `runs.experiment.Prepared`), once its model is built, with what
        mptrain did to it and what is known to be slow."""

    def status(self, text: str) -> contextlib.AbstractContextManager:
        """Shown while a long set-up step runs (measuring kernels, checking images)."""
        return contextlib.nullcontext()

    def turn(self, round_: int, label: str, step_ms: list[float]) -> None:
        """One turn of compare's or plan's variants ended: round 0 is a variant's first step."""


QUIET = Telling()  # the default of every call that tells: nothing is said
