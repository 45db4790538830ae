"""A run that takes turns with others: the child's side of the measuring engine (`measure.engine`).

compare and plan run their variants in turns (why: `measure/engine.py`). A child started by
the engine (told once, in its `runs.child.ChildSpec`: a `TurnLink`) stops
after its first step (tracing, kernel creation: a one-off cost) and then after every turn of
steps, writes what it measured to the pipe as one JSON line, and waits on stdin until the
engine says `go`, or one of `STOPS` with its reason: `too slow` (it cannot win, and stops as
`train.max_step_seconds` would stop it), `drop` (a plan's race found it cannot be picked),
`cut` (the plan's budget is spent) or `decided` (the plan's race decided its pick): the last
two stop it before its planned end, as a Ctrl-C does, without validating the epoch they cut,
resumable with `--resume` alone.
After its last step it reports `final` and waits once more, so its evaluation does
not overlap another variant's turn. The time spent waiting is kept, and subtracted from the
run's wall time: a variant's whole-run time is its own work only.

Step times are the monitor's (step begin to step end), so the wait, which happens between
two steps, is in none of them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import NamedTuple

from mptrain.training.records import StepRecord, StopKind, TrainingListener

# what the engine may tell a child instead of `go` (followed by the reason), and the stop it makes
STOPS: dict[str, StopKind] = {"too slow": "max_step_seconds", "drop": "dropped", "cut": "budget",
                              "decided": "decided"}


@dataclass(frozen=True)
class Report:
    """What a child says after its first step, each turn and its last (child → engine: one
    JSON line on the report pipe): the steps' seconds and examples since the last report."""

    turn: int
    step: int
    seconds: list[float]
    examples: list[int]
    final: bool

    def line(self) -> str:
        return json.dumps(asdict(self)) + "\n"

    @classmethod
    def read(cls, line: str) -> Report:
        return cls(**json.loads(line))


class TurnCommand(NamedTuple):
    """What the engine tells a child before its next turn (engine → child: one line on its
    stdin): `go`, one of `STOPS` and why, or `stop` (as a Ctrl-C)."""

    word: str
    why: str = ""

    def line(self) -> str:
        return f"{self.word} {self.why}".rstrip() + "\n"

    @classmethod
    def read(cls, line: str) -> TurnCommand | None:
        """The command a line says; None at the end of input (the engine is gone)."""
        if not line:
            return None
        text = line.strip()
        stop = next((word for word in STOPS if text.startswith(word + " ")), None)
        if stop is not None:
            return cls(stop, text.removeprefix(stop + " "))
        return cls("go") if text == "go" else cls("stop")


GO = TurnCommand("go")


@dataclass(frozen=True)
class TurnLink:
    """How a child takes turns: `steps` a turn, its reports written to the pipe `report_fd`
    (the engine's end reads them)."""

    steps: int
    report_fd: int


def planned_steps(train, steps_per_epoch: int) -> int:
    """The global step training ends at (`train`: the experiment's TrainConfig), unless a
    stop comes first."""
    total = train.epochs * steps_per_epoch
    return min(total, train.max_steps) if train.max_steps else total


class TakeTurns(TrainingListener):
    """Pauses training at turn boundaries until the engine says go (see the module doc)."""

    def __init__(self, monitor, link: TurnLink, total_steps: int, commands=None):
        self.monitor, self.turn_steps, self.total_steps = monitor, link.steps, total_steps
        self.report = os.fdopen(link.report_fd, "w", buffering=1)
        self.commands = commands or sys.stdin  # the engine's words
        self.seconds: list[float] = []
        self.examples: list[int] = []
        self.turn = 0
        self.waited_s = 0.0

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        if self.report is None:  # its last turn was reported, or the engine is gone
            return
        self.seconds.append(record.seconds)
        self.examples.append(record.examples)
        last = record.step >= self.total_steps or self.monitor.stop_requested
        if self.turn == 0 or last or len(self.seconds) >= self.turn_steps:
            self._hand_over(record.step, final=last)

    def finish(self) -> None:
        """After training, however it ended (an interrupt between turns, a stop before the
        last planned step): say so once, and wait for the go to evaluate."""
        if self.report is not None:
            self._hand_over(len(self.monitor.steps), final=True)

    def _hand_over(self, step: int, final: bool) -> None:
        try:
            self.report.write(Report(self.turn, step, self.seconds, self.examples, final).line())
        except OSError:  # the engine is gone (killed outright): stop like a SIGTERM, waiting for no one
            self.report = None
            signal.raise_signal(signal.SIGTERM)
            return
        self.turn += 1
        self.seconds, self.examples = [], []
        started = time.perf_counter()
        command = TurnCommand.read(self.commands.readline())
        self.waited_s += time.perf_counter() - started
        if final:
            self.report.close()
            self.report = None
        if command is None:  # the engine is gone (end of input): stop like a SIGTERM
            signal.raise_signal(signal.SIGTERM)
        elif command.word in STOPS:
            self.monitor.request_stop(command.why, STOPS[command.word])
        elif command != GO:  # "stop": as a Ctrl-C
            signal.raise_signal(signal.SIGINT)
