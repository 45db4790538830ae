"""The measuring engine: the variants of one experiment, run in turns, for compare and plan.

A shared machine's speed drifts (2x within a session was measured here), so variants timed
one after another measure the drift as much as themselves: two plans in a row once picked
different winners. Benchmark tools interleave (Google Benchmark, asv, ReBench); so here:

- every variant is a child process of its own, training as `mptrain run` does (`runs.child`;
  Keras' global policy, traced graphs, the XLA and oneDNN caches and some math switches are
  per process), started two at a time (a start is one-threaded work: `_Starts`), each
  running its first step (tracing, kernel creation, XLA compiling: one-off costs it reports
  in its summary) and then waiting (`training.turns`);
- then the engine advances them round-robin, a turn of steps each, in a random order every
  round (a periodic drift cannot line up with one variant), so within a round every variant
  meets the same machine, and a speed-up is a ratio within each round (`measure.verdicts.
  speed`);
- a child that finished training waits once more, and evaluates only once every variant is
  done, so no evaluation runs during another's turn.

Signals: a Ctrl-C or SIGTERM reaches the parent (children run in their own session), which
passes it on to every child (`ForwardSignals`) and then lets each in turn take its last
step, save its checkpoint and write its summary, so an interrupted compare or plan resumes
like a run. A child's live progress would garble the terminal, so its stderr
goes to a log file beside its run folder (shown when it fails); the engine reports turns.

What the children run, and what becomes of the rows as they end, is the study's
(`study.run_rows`); the engine runs processes in turns.
"""

from __future__ import annotations

import math
import os
import random
import select
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from mptrain.precision.candidates import file_label
from mptrain.runs.child import ChildSpec, read_summary
from mptrain.runs.summary import RunSummary
from mptrain.runs.workers import start
from mptrain.signals import ForwardSignals
from mptrain.training.turns import GO, Report, TurnCommand

if TYPE_CHECKING:
    from mptrain.measure.variant import Variant

MIN_TURN_STEPS = 5  # fewer steps a turn: their median is mostly noise
SLOW_ROUNDS = 3  # rounds a trial is slower than `Turns.slowest_ratio` in before it is stopped
MIN_START_LIMIT_S = 60.0  # a start is never stopped sooner (`Turns.first_step_ratio`)
STARTS_AT_ONCE = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)
TARGET_ROUNDS = 10  # rounds a run of the experiment's length is cut into, when it can be


@dataclass(frozen=True)
class Turns:
    """How the variants take turns, and when one is stopped early."""

    steps: int  # a turn, in the baseline's batches (`same_examples`)
    baseline: str | None = None  # the label of the row every other is read against
    slowest_ratio: float | None = None  # stop one stepping this many times the baseline's (plan: `too_slow`)
    paired: bool = False  # each runs with the baseline alone, when all do not fit in memory
    deadline: float | None = None  # the `time.monotonic()` after which no round starts (plan's budget)
    first_step_ratio: float | None = None  # stop one whose start takes this many times the baseline's
    # never stopped by either ratio: the controls every verdict is read against (plan's A/A
    # twin, whose spread against the baseline is the noise floor; the baseline itself)
    controls: frozenset[str] = frozenset()
    rerun_failed: bool = True  # a resume runs a row that failed again (plan's: a result, kept)
    # plan's race (`trials.race`): after each round, from every child's rounds and the
    # baseline's label, label → what to tell it instead of go (not in pairs: none sees the others)
    race: Callable[[dict[str, Racer], str | None], dict[str, TurnCommand]] | None = None


class Racer(NamedTuple):
    """A trial as the race sees it after a round: its median step in each round (ms), its
    batch, whether it still takes turns, and whether it is a control (float32, its twin:
    never dropped)."""

    rounds: list[float | None]
    batch_size: int
    running: bool
    control: bool = False


def past(deadline: float | None) -> bool:
    """Whether a `time.monotonic()` deadline (None: none) has passed."""
    return deadline is not None and time.monotonic() > deadline


def turn_steps(total_steps: int) -> int:
    """Steps a turn, so that a run of `total_steps` gives about TARGET_ROUNDS rounds."""
    return max(MIN_TURN_STEPS, (total_steps - 1) // TARGET_ROUNDS)


@dataclass
class _Child:
    """A variant's process while it runs, and what it reported so far."""

    row: Variant
    batch_size: int  # its experiment's (a turn's steps follow it: `same_examples`)
    spec: ChildSpec
    process: subprocess.Popen
    reports: object  # the read end of the report pipe
    log: object
    rounds: list[float | None] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    first_step_done: bool = False
    training: bool = True  # not yet reported its final turn
    largest: int = 0  # the largest batch seen: shorter ones (an epoch's last) are not timed
    stopped: str | None = None  # why the engine stopped it before its first step ended


def run_in_turns(launches: list[tuple[Variant, int, ChildSpec]], folder: Path, env: dict[str, str],
                 turns: Turns, telling, on_end) -> int | None:
    """Run every variant's child (beside its batch size) to its end in turns;
    `telling.turn(round, label, step_ms)` after each turn, `on_end(variant)` as each ends,
    with what it measured; `telling.say` why one was stopped early. With `turns.race`, the
    rounds so far decide before each round who stops (plan's race: `trials.race`). Each is
    read against the baseline's child (`turns.baseline`) when it
    runs: with `turns.slowest_ratio`, a variant whose median step is that many times the
    baseline's in each of its last rounds is stopped (`too_slow`: it cannot win, and finishing
    it would spend the budget), and with `turns.first_step_ratio` one whose start takes that many times
    the baseline's; never one of `turns.controls` (a loaded host slows a control too, and a
    cut control leaves nothing to judge against), and neither without the baseline (a
    resume after it ended: another candidate's speed says nothing of what can win). Past
    `turns.deadline`, every one still training is stopped after its round. A Ctrl-C or
    SIGTERM is passed on to the children (`ForwardSignals`); returns it (None: none came)."""
    children: list[_Child] = []
    base_batch = next((batch for row, batch, _ in launches if row.label == turns.baseline), None)
    order = random.Random(0)
    with ForwardSignals() as signals:
        try:
            starts = _Starts(turns, telling.turn)
            for row, batch_size, spec in launches:
                if signals.received is not None or past(turns.deadline):
                    break
                # (without the baseline, the first's batch: a turn is the same examples for all)
                steps = same_examples(turns.steps, base_batch or launches[0][1], batch_size)
                children.append(starts.add(_start((row, batch_size, spec), folder, env, steps, signals)))
            starts.wait()
            round_ = 0
            while signals.received is None and any(c.training for c in children):
                round_ += 1
                playing = [c for c in children if c.training]
                order.shuffle(playing)
                stops = round_stops(children, starts.base, turns)
                for (word, why), labels in _grouped(stops).items():
                    if word != "cut":  # (the budget's cut is said by the record's status)
                        telling.say("plan", f"{', '.join(labels)}: {why}")
                for child in playing:
                    if signals.received is not None:
                        break
                    _take_turn(child, telling.turn, round_, stops.get(child.row.label))
        finally:  # evaluations (or the last step of an interrupted one) one by one, each row
            unkept = None  # kept as it ends; one that cannot be (a full disk) leaves none running
            for child in children:
                try:
                    on_end(_finish(child))
                except OSError as exc:
                    unkept = unkept or exc
            if unkept:
                raise unkept
    return signals.received


def round_stops(children: list[_Child], base: _Child | None, turns: Turns) -> dict[str, TurnCommand]:
    """What each child still training is told instead of `go` this round (the word, and
    why: a `training.turns.TurnCommand`): past the deadline, cut; else what the race says
    (`turns.race`, from every child's rounds so far), or too slow (`too_slow`)."""
    playing = [c for c in children if c.training]
    if past(turns.deadline):
        return {c.row.label: TurnCommand("cut", f"cut by the budget after {len(c.rounds)} rounds")
                for c in playing}
    racing = turns.race is not None and not turns.paired  # in pairs, none sees the others
    raced = turns.race({c.row.label: Racer(c.rounds, c.batch_size, c.training, c.row.label in turns.controls)
                        for c in children}, turns.baseline) if racing else {}
    stops = {}
    for child in playing:
        if child.row.label in raced:
            stops[child.row.label] = raced[child.row.label]
        elif slow := too_slow(child, base, turns):
            stops[child.row.label] = TurnCommand("too slow", slow)
    return stops


def _grouped(stops: dict[str, TurnCommand]) -> dict[TurnCommand, list[str]]:
    """The stops by what is said (a decided race stops every trial for one reason)."""
    grouped: dict[TurnCommand, list[str]] = {}
    for label, stop in stops.items():
        grouped.setdefault(stop, []).append(label)
    return grouped


def same_examples(steps: int, base_batch: int, batch: int) -> int:
    """A turn of `steps` of the baseline's batches, in a variant's: a variant at another batch
    size covers the same examples a turn, so every round times the same work."""
    # rounded up: a cell's last turn then ends in the baseline's last round, not one after it
    return max(1, math.ceil(steps * base_batch / batch))


def _start(launch: tuple[Variant, int, ChildSpec], folder: Path, env: dict[str, str],
           steps_per_turn: int, signals: ForwardSignals) -> _Child:
    row, batch_size, spec = launch
    read_end, write_end = os.pipe()
    path = folder / "logs" / f"{file_label(row.label)}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "w")  # noqa: SIM115  (closed in _finish)
    spec = spec.model_copy(update={"turn_steps": steps_per_turn, "report_fd": write_end})
    process = start(spec, env, log=log, talk=True, pass_fds=(write_end,))
    os.close(write_end)  # the child holds it: end of file here means the child is gone
    signals.children.append(process)
    return _Child(row, batch_size, spec, process, os.fdopen(read_end), log)


def too_slow(child: _Child, base: _Child | None, turns: Turns) -> str | None:
    """Why the child is to stop: its step ran `turns.slowest_ratio` times the baseline's (per
    example: a step of twice the batch does twice the work) in each of the last
    `SLOW_ROUNDS` rounds both ran, every one of them, as the race drops a trial only on
    evidence that holds across rounds: one turn slowed by another process (a loaded host ran
    a tiny MLP's bfloat16 turn at 2.2x float32's, and dropped the machine's best candidate)
    stops nothing. None for the baseline and the other controls, and without the baseline
    (`base` None: it is not running)."""
    ratio = turns.slowest_ratio
    if ratio is None or base is None or child is base or child.row.label in turns.controls:
        return None
    shared = min(len(child.rounds), len(base.rounds))
    pairs = [(mine, theirs) for mine, theirs in zip(child.rounds[:shared], base.rounds[:shared],
                                                    strict=True) if mine and theirs][-SLOW_ROUNDS:]
    slower = [(mine / child.batch_size) / (theirs / base.batch_size) for mine, theirs in pairs]
    if len(slower) < SLOW_ROUNDS or min(slower) <= ratio:
        return None
    per = "" if child.batch_size == base.batch_size else " per example"
    return (f"too slow to win: {min(slower):.1f}-{max(slower):.1f}x {base.row.label}'s step{per} "
            f"in each of the last {len(slower)} rounds")


class _Starts:
    """The children's starts, `STARTS_AT_ONCE` at a time: a start (Python, TensorFlow's import,
    the model, tracing the step) is one-threaded work, ResNet50's 25-30 s of it, so two share
    two cores without slowing each other much, where one at a time left a core idle through
    every start (eleven ResNet50 trials took six minutes to start). Each start is waited for
    to the end of its first step (`_first_turn`) in the order they began; once the baseline's
    has ended, a later start is stopped past `turns.first_step_ratio` times it."""

    def __init__(self, turns: Turns, on_turn):
        self.turns, self.on_turn = turns, on_turn
        self.starting: list[_Child] = []
        self.base: _Child | None = None  # the baseline's child, once its first step ended
        self.limit: float | None = None

    def add(self, child: _Child) -> _Child:
        self.starting.append(child)
        if len(self.starting) >= STARTS_AT_ONCE:
            self._first(self.starting.pop(0))
        return child

    def wait(self) -> None:
        while self.starting:
            self._first(self.starting.pop(0))

    def _first(self, child: _Child) -> None:
        label = child.row.label
        _first_turn(child, self.on_turn, None if label in self.turns.controls else self.limit)
        if label == self.turns.baseline:
            self.base = child
            if self.turns.first_step_ratio and child.first_step_done:
                self.limit = max(MIN_START_LIMIT_S, self.turns.first_step_ratio *
                                 (time.perf_counter() - child.started))


def _first_turn(child: _Child, on_turn, limit: float | None) -> None:
    """The child's start, to the end of its first step; past `limit` seconds from its start,
    it is stopped there (a kill: it is compiling, and would not hear a word before its step
    ends)."""
    left = None if limit is None else max(0.0, limit - (time.perf_counter() - child.started))
    if left is not None and not select.select([child.reports], [], [], left)[0]:
        child.process.kill()
        child.training = False
        child.stopped = (f"too slow to start: its first step had not ended after {limit:.0f} s "
                         "(XLA compiling?)")
        return
    _take_turn(child, on_turn, 0)


def _take_turn(child: _Child, on_turn, round_: int, stop: TurnCommand | None = None) -> None:
    """Let the child run its next turn (its first step, for round 0) and read its report;
    `stop`: tell it to stop instead, how and why (it still reports its last step): "cut" by
    the budget (before its planned end: it did nothing wrong), or "too slow" (as by
    max_step_seconds)."""
    if child.first_step_done and not _say(child, stop or GO):
        child.training = False
        return
    line = child.reports.readline()
    if not line:  # it ended on its own (failed, or stopped before reporting)
        child.training = False
        return
    report = Report.read(line)
    child.first_step_done = True
    child.training = not report.final
    child.largest = max([child.largest, *report.examples])
    timed = [1e3 * s for s, n in zip(report.seconds, report.examples, strict=True) if n == child.largest]
    if round_ > 0:
        child.rounds.append(statistics.median(timed) if timed else None)
    on_turn(round_, child.row.label, [1e3 * s for s in report.seconds])


def _say(child: _Child, command: TurnCommand) -> bool:
    try:
        child.process.stdin.write(command.line())
        child.process.stdin.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def _finish(child: _Child) -> Variant:
    """Let the child go on to its end, saying go at each report, and collect it: the variant
    with its summary, or why there is none (with the last lines of its log), its rounds, and
    what its process spent outside its own clock (`overhead`)."""
    if child.first_step_done:
        while _say(child, GO) and child.reports.readline():
            pass
    child.process.communicate()
    child.reports.close()
    child.log.close()
    lifetime = time.perf_counter() - child.started
    summary = read_summary(child.spec, child.process.returncode)
    ended = {"rounds": child.rounds, "baseline_rounds": None, "summary": None, "overhead_s": None}
    if not isinstance(summary, str):
        ended.update(summary=summary, failed=None, overhead_s=overhead(summary, lifetime))
    elif child.stopped is not None:
        ended["failed"] = child.stopped
    else:
        lines = [line for line in Path(child.log.name).read_text(errors="replace").splitlines()
                 if line.strip()]
        ended["failed"] = f"{summary}: {' | '.join(lines[-3:])}" if lines else summary
    return child.row.model_copy(update=ended)


def overhead(summary: RunSummary, lifetime_s: float) -> float:
    """What a variant's process spent outside its own clock: the interpreter's start before
    mptrain's and the exit after the summary (its waits for others' turns, and the model's
    save, which is timed on its own, left out)."""
    s = summary
    return max(0.0, lifetime_s - s.wall_time_s - s.turn_wait_s - (s.model_save_s or 0.0))
