"""The measuring engine: the variants of one experiment, run in turns, for compare and plan.

A shared machine's speed drifts (2x within a session was measured here), so variants timed
one after another measure the drift as much as themselves: two plans in a row once picked
different winners. Benchmark tools interleave (Google Benchmark, asv, ReBench); so here:

- every variant is a child process of its own, training as `mptrain run` does (`runs.child`;
  Keras' global policy, traced graphs, the XLA and oneDNN caches and some math switches are
  per process), started one at a time, each
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
from which staged experiment, in which turns. Their folder and MLflow parent run are
`study.py`'s; their record is rewritten here as each row ends, and each variant's experiment
file and run folder are made here (`spec_for`).
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
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from mptrain.precision.candidates import file_label
from mptrain.record import write_atomic
from mptrain.runs.child import ChildSpec, read_summary
from mptrain.runs.folder import RunFolder, resumable
from mptrain.runs.summary import RunSummary
from mptrain.runs.workers import start
from mptrain.signals import ForwardSignals

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.measure.variant import Variant

MIN_TURN_STEPS = 5  # fewer steps a turn: their median is mostly noise
MIN_START_LIMIT_S = 60.0  # a start is never stopped sooner (`Turns.first_step_ratio`)
TARGET_ROUNDS = 10  # rounds a run of the experiment's length is cut into, when it can be


@dataclass(frozen=True)
class Turns:
    """How the variants take turns, and when one is stopped early."""

    steps: int  # a turn, in the baseline's batches (`same_examples`)
    baseline: str | None = None  # the label of the row every other is read against
    slowest_ratio: float | None = None  # stop one whose turn steps this many times the baseline's (plan)
    paired: bool = False  # each runs with the baseline alone, when all do not fit in memory
    deadline: float | None = None  # the `time.monotonic()` after which no round starts (plan's budget)
    first_step_ratio: float | None = None  # stop one whose start takes this many times the baseline's
    # never stopped by either ratio: the controls every verdict is read against (plan's A/A
    # twin, whose spread against the baseline is the noise floor; the baseline itself)
    controls: frozenset[str] = frozenset()
    rerun_failed: bool = True  # a resume runs a row that failed again (plan's: a result, kept)
    # plan's race (`trials.race`): after each round, label → what to tell it instead of go
    race: Callable[[dict[str, Racer]], dict[str, tuple[str, str]]] | None = None


class Racer(NamedTuple):
    """A trial as the race sees it after a round: its median step in each round (ms), its
    batch, whether it still takes turns, and whether it is a control (float32, its twin:
    never dropped)."""

    rounds: list[float | None]
    batch_size: int
    running: bool
    control: bool = False


def run_rows(record, env: dict[str, str], turns: Turns, telling, verbose: bool = False):
    """The one sequence compare and plan run, on a study's record (a `study.StudyRecord`): the
    rows whose runs have not ended (`to_run`; not one that failed, unless
    `turns.rerun_failed`), each the experiment staged in the study's folder (`STAGED`) with
    its own settings, from the initial weights staged there (its run nested in the study's
    MLflow parent run by `env`), in turns in one session. The record is rewritten as each row
    ends, so a parent killed outright loses no row that ended. Returns the record with every
    row back in its order, with what its run measured, and the signal that interrupted them
    (None: none did). Paired (`turns.paired`), each runs in turns with the baseline alone,
    pair after pair (`pairs`), and its `baseline_rounds` are the baseline's in its pair."""
    from mptrain.config import load_config, variant

    folder = Path(record.folder)
    staged = load_config(folder / record.STAGED)
    todo = [row for row in to_run(record.rows) if turns.rerun_failed or row.failed is None]
    ended: dict[str, Variant] = {}  # (a pair's extra baseline too, under a label no row has)

    def as_ended():  # the record with every row as it stands
        return record.model_copy(update={record.ROWS: [ended.get(r.label, r) for r in record.rows]})

    def keep(group: list[Variant], row: Variant) -> None:  # a row as it ends, on disk at once
        if turns.paired and row.label != group[0].label:  # its rounds' baseline: its pair's
            row = row.model_copy(update={"baseline_rounds": ended[group[0].label].rounds})
        ended[row.label] = row
        as_ended().write()

    signal = None
    for group in (pairs(todo, turns.baseline) if turns.paired else [todo]):
        launches = []
        for row in group:
            experiment = variant(staged, {"name": Path(row.run_dir).name, **row.settings})
            launches.append((row, experiment.train.batch_size,
                             spec_for(folder, row, experiment, verbose)))
        # in a pair, each is read against the pair's baseline (the baseline's row, or its copy)
        group_turns = replace(turns, baseline=group[0].label) if turns.paired else turns
        signal = run_in_turns(launches, folder, env, group_turns, telling, partial(keep, group))
        if signal is not None or past(turns.deadline):
            break
    return as_ended(), signal


def past(deadline: float | None) -> bool:
    """Whether a `time.monotonic()` deadline (None: none) has passed."""
    return deadline is not None and time.monotonic() > deadline


def pairs(rows: list[Variant], baseline: str) -> list[list[Variant]]:
    """Each variant with the baseline, in turns two by two: the baseline's own row in the
    first pair, a copy of it (its own run folder, `BASELINE with LABEL`) in each other. Without
    the baseline among the rows (a resume after it finished), each runs alone."""
    base = next((r for r in rows if r.label == baseline), None)
    others = [r for r in rows if r.label != baseline]
    if base is None:
        return [[r] for r in others]
    if not others:
        return [[base]]

    def baseline_for(index: int, row: Variant) -> Variant:
        if index == 0:
            return base
        run_dir = Path(base.run_dir)
        return base.model_copy(update={
            "label": f"{base.label} with {row.label}",
            "run_dir": str(run_dir.with_name(f"{run_dir.name}-with-{file_label(row.label)}"))})

    return [[baseline_for(i, r), r] for i, r in enumerate(others)]


def spec_for(folder: Path, row: Variant, experiment: ExperimentConfig, verbose: bool) -> ChildSpec:
    """The variant's run (`runs.child`): a resume when it stopped with a checkpoint (a compare
    or plan resumed), else anew from its own experiment file (variants/LABEL.yaml) and the
    initial weights; its summary written to logs/LABEL.summary.json."""
    run_dir = Path(row.run_dir)
    summary_file = str(folder / "logs" / f"{file_label(row.label)}.summary.json")
    if resumable(run_dir):
        return ChildSpec(run_dir=str(run_dir), resume=True, summary_file=summary_file,
                         verbose=verbose)
    shutil.rmtree(run_dir, ignore_errors=True)  # started, but with nothing to resume
    path = folder / "variants" / f"{file_label(row.label)}.yaml"
    path.parent.mkdir(exist_ok=True)
    write_atomic(path, experiment.yaml_text())
    return ChildSpec(experiment=str(path), run_dir=str(run_dir), summary_file=summary_file,
                     initial_weights=str(folder / "initial_weights.npz"), verbose=verbose)


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
    runs: with `turns.slowest_ratio`, a variant whose turn's median step is that many times
    the baseline's in the same round is stopped (it cannot win, and finishing it would spend
    the budget), and with `turns.first_step_ratio` one whose start takes that many times
    the baseline's; never one of `turns.controls` (a loaded host slows a control too, and a
    cut control leaves nothing to judge against), and neither without the baseline (a
    resume after it ended: another candidate's speed says nothing of what can win). Past
    `turns.deadline`, every one still training is stopped after its round. A Ctrl-C or
    SIGTERM is passed on to the children (`ForwardSignals`); returns it (None: none came)."""
    children: list[_Child] = []
    base: _Child | None = None  # the baseline's child, once started
    base_batch = next((batch for row, batch, _ in launches if row.label == turns.baseline), None)
    order = random.Random(0)
    with ForwardSignals() as signals:
        try:
            limit = None
            for row, batch_size, spec in launches:  # one at a time: start-ups measured alone
                if signals.received is not None or past(turns.deadline):
                    break
                # (without the baseline, the first's batch: a turn is the same examples for all)
                steps = same_examples(turns.steps, base_batch or launches[0][1], batch_size)
                child = _start((row, batch_size, spec), folder, env, steps, signals)
                children.append(child)
                _first_turn(child, telling.turn, None if row.label in turns.controls else limit)
                if row.label == turns.baseline:
                    base = child
                    if turns.first_step_ratio and child.first_step_done:
                        limit = max(MIN_START_LIMIT_S, turns.first_step_ratio *
                                    (time.perf_counter() - child.started))
            round_ = 0
            while signals.received is None and any(c.training for c in children):
                round_ += 1
                playing = [c for c in children if c.training]
                order.shuffle(playing)
                stops = round_stops(children, base, turns)
                for child in playing:
                    if signals.received is not None:
                        break
                    stop = stops.get(child.row.label)
                    if stop is not None and stop[0] != "cut":
                        telling.say("plan", f"{child.row.label}: {stop[1]}")
                    _take_turn(child, telling.turn, round_, stop)
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


def round_stops(children: list[_Child], base: _Child | None, turns: Turns) -> dict[str, tuple[str, str]]:
    """What each child still training is told instead of `go` this round (the word, and
    why; `training.turns.STOPS`): past the deadline, cut; else what the race says
    (`turns.race`, from every child's rounds so far), or too slow (`too_slow`)."""
    playing = [c for c in children if c.training]
    if past(turns.deadline):
        return {c.row.label: ("cut", f"cut by the budget after {len(c.rounds)} rounds") for c in playing}
    raced = turns.race({c.row.label: Racer(c.rounds, c.batch_size, c.training, c.row.label in turns.controls)
                        for c in children}) if turns.race is not None else {}
    stops = {}
    for child in playing:
        if child.row.label in raced:
            stops[child.row.label] = raced[child.row.label]
        elif slow := too_slow(child, base, turns):
            stops[child.row.label] = ("too slow", slow)
    return stops


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
    """Why the child is to stop, when its last turn ran `turns.slowest_ratio` times the
    baseline's in the same round; None for the baseline and the other controls, and
    without the baseline (`base` None: it is not running)."""
    ratio = turns.slowest_ratio
    if (ratio is None or base is None or child is base or child.row.label in turns.controls
            or not child.rounds or not base.rounds):
        return None
    mine, theirs = child.rounds[-1], base.rounds[min(len(child.rounds), len(base.rounds)) - 1]
    if mine is None or theirs is None:
        return None
    # per example: a step of twice the batch does twice the work
    slower = (mine / child.batch_size) / (theirs / base.batch_size)
    if slower <= ratio:
        return None
    per = "" if child.batch_size == base.batch_size else " per example"
    return (f"too slow to win: {mine:.1f} ms a step, {slower:.1f}x {base.row.label}'s "
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


def _take_turn(child: _Child, on_turn, round_: int, stop: tuple[str, str] | None = None) -> None:
    """Let the child run its next turn (its first step, for round 0) and read its report;
    `stop`: tell it to stop instead, how and why (it still reports its last step): "cut" by
    the budget (before its planned end: it did nothing wrong), or "too slow" (as by
    max_step_seconds)."""
    if child.first_step_done:
        command = "go" if stop is None else " ".join(stop)
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
    child.largest = max([child.largest, *report["examples"]])
    timed = [1e3 * s for s, n in zip(seconds, report["examples"], strict=True) if n == child.largest]
    if round_ > 0:
        child.rounds.append(statistics.median(timed) if timed else None)
    on_turn(round_, child.row.label, [1e3 * s for s in seconds])


def _say(child: _Child, command: str) -> bool:
    try:
        child.process.stdin.write(command + "\n")
        child.process.stdin.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def _finish(child: _Child) -> Variant:
    """Let the child go on to its end, saying go at each report, and collect it: the variant
    with its summary, or why there is none (with the last lines of its log), its rounds, and
    what its process spent outside its own clock (`overhead`)."""
    if child.first_step_done:
        while _say(child, "go") and child.reports.readline():
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


def to_run(rows: list[Variant]) -> list[Variant]:
    """The rows a compare or plan runs now, one way for both, new or resumed: every row whose
    run has not ended (a resumed record's rows hold their folders' ended summaries:
    `StudyRecord.load`), in a new session of turns; a run stopped with a
    checkpoint continues from it (`spec_for`), one never started starts. Rounds pair only
    within a session, so a row resumed after its baseline ended is judged on the two runs'
    medians (`verdicts.speed`)."""
    session = max((r.session for r in rows if r.summary is not None or r.failed is not None),
                  default=0) + 1
    return [row.model_copy(update={"session": session}) for row in rows
            if not has_ended(row.summary)]


def ended_summary(row: Variant) -> RunSummary | None:
    """The summary in the row's run folder when its run has ended; None while it has not
    (never started, stopped with a checkpoint, or failed)."""
    state = RunFolder(Path(row.run_dir)).state() if row.run_dir else None
    return state if isinstance(state, RunSummary) and has_ended(state) else None


def has_ended(summary: RunSummary | None) -> bool:
    """Whether a run ended for good (finished, or diverged): an interrupted one continues."""
    return summary is not None and summary.status in ("finished", "diverged")
