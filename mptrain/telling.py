"""How a long library call tells its user what it is doing, without printing anything itself.

A run, a compare or a plan takes minutes to hours, and its user should learn as it goes what
will train, what is known to be slow here, and how each variant's turn went. The library says
it to a `Telling`: the command line hands it one that prints on the terminal
(`report.progress.ConsoleTelling`), Python the same one, or with `progress=False` this base,
which hands it to Python's `logging` (logger "mptrain": warnings at WARNING, so an
unconfigured script still sees "slower than float32" on stderr; the rest at INFO). So the words
and their colours stay the reporting layer's, a command and its Python function say the same
things, and nothing worth a warning is said nowhere.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

LOG = logging.getLogger("mptrain")
WARNING_KINDS = ("note", "warning", "xla")  # what a user should act on: logged at WARNING


class Telling:
    """Says it through `logging`: the base every way of telling overrides what it shows."""

    def say(self, kind: str, line: str) -> None:
        """A line worth reading as it happens; `kind` is what it is about: "plan" (a plan
        beside the experiment), "restart" (lost workers restart), "note" (known to be slow),
        "xla" (a variant runs with XLA)."""
        level = logging.WARNING if kind.split()[0] in WARNING_KINDS else logging.INFO
        LOG.log(level, "%s: %s", kind, line)

    def started(self, prepared: Any, notes: list[str]) -> None:
        """What will train (a `runs.experiment.Prepared`), once its model is built, with what
        mptrain did to it and what is known to be slow."""
        if prepared.speed_warning:
            LOG.warning("warning: %s", prepared.speed_warning)
        for note in notes:
            LOG.info("note: %s", note)

    def status(self, text: str) -> contextlib.AbstractContextManager:
        """Shown while a long set-up step runs (measuring kernels, checking images)."""
        return contextlib.nullcontext()

    def turn(self, round_: int, label: str, step_ms: list[float]) -> None:
        """One turn of compare's or plan's variants ended: round 0 is a variant's first step."""


LOGGED = Telling()  # the default of every call that tells: said through `logging`
