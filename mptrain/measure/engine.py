"""The measuring engine: the variants of one experiment, run in turns, for compare and plan.

A shared machine's speed drifts (2x within a session was measured here), so variants timed
one after another measure the drift as much as themselves: two plans in a row once picked
different winners. Benchmark tools interleave (Google Benchmark, asv, ReBench); so here:

- every variant is its own `mptrain run` child (Keras' global policy, traced graphs, the XLA
  and oneDNN caches and some math switches are per process), started one at a time, each
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

Compare and plan differ as data given to `run_rows`, the one sequence both run: which rows,
from which staged experiment, in which turns. Their folder, record and MLflow parent run are
`ledger.py`'s; each variant's experiment file and run folder are made here (`Entry`,
`command_for`).
"""

from __future__ import annotations

import json
import math
import os
import random
import select
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mptrain.measure.ledger import Ledger, to_run
from mptrain.precision.candidates import file_label
from mptrain.record import write_atomic
from mptrain.runs.folder import resumable
from mptrain.runs.summary import RunSummary
from mptrain.runs.workers import read_child_summary, resume_command, run_command, start
from mptrain.signals import ForwardSignals
from mptrain.training.turns import TurnLink

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.measure.verdicts import Measured

OnTurn = Callable[[int, str, list[float]], None]  # (round, label, its steps' ms)
MIN_TURN_STEPS = 5  # fewer steps a turn: their median is mostly noise
MIN_START_LIMIT_S = 60.0  # a start is never stopped sooner (`Turns.first_step_ratio`)
TARGET_ROUNDS = 10  # rounds a run of the experiment's length is cut into, when it can be


@dataclass(frozen=True)
class Entry:
    """One variant to measure: its label, its own experiment (`config.variant` of the staged
    one), its run folder (continued when it stopped with a checkpoint: `command_for`), and the
    row (a compare's variant, a plan's trial) it measures."""

    label: str
    experiment: ExperimentConfig
    run_dir: Path
    row: Measured | None = None

    @classmethod
    def of(cls, row: Measured, staged: ExperimentConfig) -> Entry:
        """The row's variant: the staged experiment with its settings, named after its run folder."""
        from mptrain.config import variant

        run_dir = Path(row.run_dir)
        return cls(row.label, variant(staged, {"name": run_dir.name, **row.settings}), run_dir, row)



@dataclass(frozen=True)
class Ran:
    """A variant's end: its summary, or why there is none, and its median step (ms) in each
    round it ran in turns (None: no full batch was timed in that round)."""

    summary: RunSummary | None
    failed: str | None
    rounds: list[float | None]
    lifetime_s: float | None = None  # its process, from start to exit
    baseline_rounds: list[float | None] | None = None  # paired for memory: its baseline's rounds

    @property
    def overhead_s(self) -> float | None:
        """What its process spent outside its own clock: the interpreter's start before
        mptrain's and the exit after the summary (its waits for others' turns, and the model's
        save, which is timed on its own, left out)."""
        s = self.summary
        if s is None or self.lifetime_s is None:
            return None
        return max(0.0, self.lifetime_s - s.wall_time_s - s.turn_wait_s - (s.model_save_s or 0.0))


@dataclass(frozen=True)
class Turns:
    """How the variants take turns, and when one is stopped early."""

    steps: int  # a turn
    slowest_ratio: float | None = None  # stop one whose turn steps this many times the first's (plan)
    paired_with: str | None = None  # the baseline each runs with alone, when all do not fit in memory
    deadline: float | None = None  # the `time.monotonic()` after which no round starts (plan's budget)
    first_step_ratio: float | None = None  # stop one whose start takes this many times the first's
    # never stopped by either ratio: the controls every verdict is read against (plan's A/A
    # twin, whose spread against the baseline is the noise floor; the baseline itself)
    controls: frozenset[str] = frozenset()


def measure(ledger: Ledger, entries: list[Entry], turns: Turns, *, verbose: bool = False,
            on_turn: OnTurn | None = None) -> tuple[dict[str, Measured], int | None]:
    """Every entry run to its end in turns (`run_in_turns`), each from the initial weights
    staged in the ledger's folder (and its run nested in the ledger's MLflow parent); label →
    its row with how its run ended (entries never started are absent), and the signal that
    interrupted them (None: none did). Paired (`turns.paired_with`), each entry runs in turns
    with the baseline alone, pair after pair (`pairs`), and its `baseline_rounds` are the
    baseline's in its own pair."""
    ran: dict[str, Ran] = {}
    signal, paired_with = None, turns.paired_with
    for group in ([entries] if paired_with is None else pairs(entries, paired_with)):
        with ForwardSignals() as signals:
            ends = run_in_turns([(e, command_for(ledger.folder, e, verbose)) for e in group],
                                ledger, turns, signals, on_turn)
        if paired_with is not None and len(group) == 2 and group[1].label in ends:
            base = ends.get(group[0].label)
            ends[group[1].label] = replace(ends[group[1].label],
                                           baseline_rounds=base.rounds if base else [])
        ran.update(ends)
        signal = signals.received
        if signal is not None or past(turns.deadline):
            break
    ended = {}
    for entry in entries:  # (a pair's extra baseline run is in `ran` too: not an entry's row)
        if (end := ran.get(entry.label)) is not None:
            ended[entry.label] = entry.row.model_copy(update={
                "summary": end.summary, "failed": end.failed, "rounds": end.rounds,
                "baseline_rounds": end.baseline_rounds, "overhead_s": end.overhead_s})
    return ended, signal


def run_rows(ledger: Ledger, rows: list, turns: Turns, telling, verbose: bool = False, *,
             rerun_failed: bool = True) -> tuple[list, int | None]:
    """The one sequence compare and plan run: the rows whose runs have not ended (`to_run`;
    not one that failed, unless `rerun_failed`), each the experiment staged in the ledger's
    folder (`Ledger.staged`) with its own settings, in turns in one session; every row back
    in its order, with what its run measured, and the signal that interrupted them."""
    from mptrain.config import load_config

    staged = load_config(ledger.folder / ledger.staged)
    todo = [row for row in to_run(rows) if rerun_failed or row.failed is None]
    ended, signal = measure(ledger, [Entry.of(row, staged) for row in todo], turns,
                            verbose=verbose, on_turn=telling.turn)
    return [ended.get(row.label, row) for row in rows], signal


def past(deadline: float | None) -> bool:
    """Whether a `time.monotonic()` deadline (None: none) has passed."""
    return deadline is not None and time.monotonic() > deadline


def pairs(entries: list[Entry], baseline: str) -> list[list[Entry]]:
    """Each entry with the baseline, in turns two by two: the baseline's own entry in the
    first pair, a copy of it (its own run folder, `BASELINE with LABEL`) in each other. Without
    the baseline among the entries (a resume after it finished), each entry runs alone."""
    base = next((e for e in entries if e.label == baseline), None)
    others = [e for e in entries if e.label != baseline]
    if base is None:
        return [[e] for e in others]
    if not others:
        return [[base]]

    def baseline_for(index: int, entry: Entry) -> Entry:
        if index == 0:
            return base
        return replace(base, label=f"{base.label} with {entry.label}",
                       run_dir=base.run_dir.with_name(f"{base.run_dir.name}-with-{file_label(entry.label)}"))

    return [[baseline_for(i, e), e] for i, e in enumerate(others)]


def command_for(folder: Path, entry: Entry, verbose: bool) -> list[str]:
    """`mptrain run` of the entry: a resume when it stopped with a checkpoint (a compare or
    plan resumed), else anew from its own experiment file (variants/LABEL.yaml) and the
    initial weights."""
    if resumable(entry.run_dir):
        return resume_command(entry.run_dir, verbose)
    shutil.rmtree(entry.run_dir, ignore_errors=True)  # started, but with nothing to resume
    experiment = folder / "variants" / f"{file_label(entry.label)}.yaml"
    experiment.parent.mkdir(exist_ok=True)
    write_atomic(experiment, yaml.safe_dump(entry.experiment.to_yaml_dict(), sort_keys=False))
    return run_command(experiment, run_dir=entry.run_dir,
                       initial_weights=folder / "initial_weights.npz", verbose=verbose)


def turn_steps(total_steps: int) -> int:
    """Steps a turn, so that a run of `total_steps` gives about TARGET_ROUNDS rounds."""
    return max(MIN_TURN_STEPS, (total_steps - 1) // TARGET_ROUNDS)


@dataclass
class _Child:
    """A variant's process while it runs, and what it reported so far."""

    entry: Entry
    process: subprocess.Popen
    reports: object  # the read end of the report pipe
    log: object
    rounds: list[float | None] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    first_step_done: bool = False
    training: bool = True  # not yet reported its final turn
    batch: int = 0  # the largest batch seen: shorter ones (an epoch's last) are not timed
    stopped: str | None = None  # why the engine stopped it before its first step ended


def run_in_turns(commands: list[tuple[Entry, list[str]]], ledger: Ledger, turns: Turns,
                 signals: ForwardSignals, on_turn: OnTurn | None = None) -> dict[str, Ran]:
    """Run every entry's command to its end in turns; `on_turn(round, label, step_ms)` after
    each turn. With `turns.slowest_ratio`, an entry whose turn's median step is that many times
    the first entry's (the baseline's) in the same round is stopped: it cannot win, and
    finishing it would spend the budget (never one of `turns.controls`: a loaded host slows a
    control too, and a cut control leaves nothing to judge against); past `turns.deadline`,
    every one still training is stopped after its round. Returns each entry's end by label."""
    children: list[_Child] = []
    order = random.Random(0)
    try:
        limit = None
        for entry, command in commands:  # one at a time: start-up costs are measured alone
            if signals.received is not None or past(turns.deadline):
                break
            child = _start(entry, command, ledger, same_examples(turns.steps, commands[0][0], entry),
                           signals)
            children.append(child)
            _first_turn(child, on_turn, None if entry.label in turns.controls else limit)
            if limit is None and turns.first_step_ratio and child.first_step_done:
                limit = max(MIN_START_LIMIT_S, turns.first_step_ratio *
                            (time.perf_counter() - child.started))
        round_ = 0
        while signals.received is None and any(c.training for c in children):
            round_ += 1
            playing = [c for c in children if c.training]
            order.shuffle(playing)
            budget = past(turns.deadline)
            for child in playing:
                if signals.received is not None:
                    break
                stop = (f"cut by the budget after {len(child.rounds)} rounds" if budget else
                        too_slow(child, children[0], turns))
                _take_turn(child, on_turn, round_, stop)
    finally:
        ends = {}
        for child in children:  # evaluations (or the last step of an interrupted one) one by one
            ends[child.entry.label] = _finish(child)
        signals.children = []
    return ends


def same_examples(steps: int, base: Entry, entry: Entry) -> int:
    """A turn of `steps` of the baseline's batches, in the entry's: a variant at another batch
    size covers the same examples a turn, so every round times the same work."""
    # rounded up: a cell's last turn then ends in the baseline's last round, not one after it
    return max(1, math.ceil(steps * base.experiment.train.batch_size / entry.experiment.train.batch_size))


def _start(entry: Entry, command: list[str], ledger: Ledger, steps_per_turn: int,
           signals: ForwardSignals) -> _Child:
    read_end, write_end = os.pipe()
    path = ledger.folder / "logs" / f"{file_label(entry.label)}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "w")  # noqa: SIM115  (closed in _finish)
    process = start([*command, *TurnLink(steps_per_turn, write_end).option()], ledger.env, log=log,
                    talk=True, pass_fds=(write_end,))
    os.close(write_end)  # the child holds it: end of file here means the child is gone
    signals.children.append(process)
    return _Child(entry, process, os.fdopen(read_end), log)


def too_slow(child: _Child, base: _Child, turns: Turns) -> str | None:
    """Why the child is to stop, when its last turn ran `turns.slowest_ratio` times the
    baseline's in the same round; None for the baseline and the other controls."""
    ratio = turns.slowest_ratio
    if (ratio is None or child is base or child.entry.label in turns.controls
            or not child.rounds or not base.rounds):
        return None
    mine, theirs = child.rounds[-1], base.rounds[min(len(child.rounds), len(base.rounds)) - 1]
    if mine is None or theirs is None:
        return None
    # per example: a step of twice the batch does twice the work
    slower = (mine / child.entry.experiment.train.batch_size) / (
        theirs / base.entry.experiment.train.batch_size)
    if slower <= ratio:
        return None
    per = "" if slower == mine / theirs else " per example"
    return (f"too slow to win: {mine:.1f} ms a step, {slower:.1f}x {base.entry.label}'s "
            f"{theirs:.1f} ms{per} in the same round")


def _first_turn(child: _Child, on_turn, limit: float | None) -> None:
    """The child's start, to the end of its first step; past `limit` seconds, it is stopped
    there (a kill: it is compiling, and would not hear a word before its step ends)."""
    if limit is not None and not select.select([child.reports], [], [], limit)[0]:
        child.process.kill()
        child.training = False
        child.stopped = (f"too slow to start: its first step had not ended after {limit:.0f} s "
                         "(XLA compiling?)")
        return
    _take_turn(child, on_turn, 0)


def _take_turn(child: _Child, on_turn, round_: int, stop: str | None = None) -> None:
    """Let the child run its next turn (its first step, for round 0) and read its report;
    `stop`: tell it to stop instead, and why (it still reports its last step): cut by the
    budget, it stops as a step limit stops a run (it did nothing wrong), else as too slow."""
    if child.first_step_done:
        command = "go" if stop is None else f"{'cut' if stop.startswith('cut') else 'too slow'} {stop}"
        if not _say(child, command):
            child.training = False
            return
    line = child.reports.readline()
    if not line:  # it ended on its own (failed, or stopped before reporting)
        child.training = False
        return
    report = json.loads(line)
    child.first_step_done = True
    child.training = not report["final"]
    seconds = report["seconds"]
    child.batch = max([child.batch, *report["examples"]])
    timed = [1e3 * s for s, n in zip(seconds, report["examples"], strict=True) if n == child.batch]
    if round_ > 0:
        child.rounds.append(statistics.median(timed) if timed else None)
    if on_turn is not None:
        on_turn(round_, child.entry.label, [1e3 * s for s in seconds])


def _say(child: _Child, command: str) -> bool:
    try:
        child.process.stdin.write(command + "\n")
        child.process.stdin.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def _finish(child: _Child) -> Ran:
    """Let the child go on to its end, saying go at each report, and collect it: its summary,
    or why there is none (with the last lines of its log)."""
    if child.first_step_done:
        while _say(child, "go") and child.reports.readline():
            pass
    stdout, _ = child.process.communicate()
    child.reports.close()
    child.log.close()
    lifetime = time.perf_counter() - child.started
    summary = read_child_summary(child.process.returncode, stdout)
    if not isinstance(summary, str):
        return Ran(summary, None, child.rounds, lifetime)
    if child.stopped is not None:
        return Ran(None, child.stopped, child.rounds, lifetime)
    lines = [line for line in Path(child.log.name).read_text(errors="replace").splitlines()
             if line.strip()]
    failed = f"{summary}: {' | '.join(lines[-3:])}" if lines else summary
    return Ran(None, failed, child.rounds, lifetime)
