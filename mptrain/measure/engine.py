"""The measuring engine: the variants of one experiment, run in turns, for compare and plan.

A shared machine's speed drifts (2x within a session was measured here), so variants timed
one after another meet different machines, and their ratio measures the drift as much as the
variants: two plans in a row once picked different winners, and a pick's speed-up did not
survive a check. Benchmark tools solved this by interleaving (Google Benchmark's random
interleaving, asv's interleaved processes, ReBench's randomised order). So here:

- every variant is its own `mptrain run` child (Keras' global policy, traced graphs, the XLA
  and oneDNN caches and some math switches are per process), started one at a time, each
  running its first step (tracing, kernel creation, XLA compiling: one-off costs it reports
  in its summary) and then waiting (`training.turns`);
- then the engine advances them round-robin, a turn of steps each, in a random order every
  round (a periodic drift cannot line up with one variant), so within a round every variant
  meets the same machine, and a speed-up is a ratio within each round (`measure.verdicts.
  paired_speedup`);
- a child that finished training waits once more, and evaluates only once every variant is
  done, so no evaluation runs during another's turn.

Signals: a Ctrl-C or SIGTERM reaches the parent (children run in their own session), which
passes it on to every child (`ForwardSignals`) and then lets each in turn take its last
step, save its checkpoint and write its summary, so an interrupted compare or plan resumes
like a run. A child's live progress would garble the terminal while others run, so its
stderr goes to a log file beside its run folder (shown when it fails); the engine reports
each turn instead.

Both commands keep their folder the same way, here: the shared initial weights and the
prepared experiment (`stage`), each variant's own experiment file and run folder (`Entry`,
`measure`), the record file rewritten as things end (`Ledger`, `load_record` for `--resume`)
and, with `output.mlflow`, one parent run with every variant's run nested in it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mptrain.errors import ConfigError
from mptrain.runs.folder import resumable, to_json, unique_folder, write_atomic
from mptrain.runs.summary import RunSummary
from mptrain.runs.workers import read_child_summary, resume_command, run_command
from mptrain.signals import ForwardSignals, die_with_parent
from mptrain.training.turns import REPORT_FD_ENV, TURN_STEPS_ENV

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.record import Record
    from mptrain.runs.experiment import Prepared

OnTurn = Callable[[int, str, list[float]], None]  # (round, label, its steps' ms)
MIN_TURN_STEPS = 5  # fewer steps a turn: their median is mostly noise
TARGET_ROUNDS = 10  # rounds a run of the experiment's length is cut into, when it can be


def stage(config: ExperimentConfig, kind: str, verbose: bool = False,
          before_folder: Callable[[Prepared], Any] | None = None) -> tuple[Path, Prepared]:
    """The folder a compare or plan works in, OUTPUT_DIR/KIND-NAME-TIMESTAMP/, holding the
    experiment as prepared (experiment.yaml: what the data filled in included) and the
    initial weights every variant starts from: the model built once under float32 and saved
    (the guide's `initial_weights = model.get_weights()`). Everything that can fail on bad
    input, `before_folder(prepared)` included, fails before the folder exists."""
    if (workers := config.distribute.workers) is not None:
        raise ConfigError(
            f"{config.source}: distribute.workers {workers}: {kind} times each variant as one "
            "process, in turns, and each would start its own local workers; --set "
            f"distribute.workers=null to {kind} the single-process step, and train on workers "
            "with `mptrain run`")
    import numpy as np

    from mptrain.runs.experiment import prepare

    with tempfile.TemporaryDirectory() as scratch:
        staged = Path(scratch) / "initial_weights.npz"
        prepared = prepare(config, policy="float32", verbose=verbose)
        np.savez(staged, *prepared.model.get_weights())
        if before_folder is not None:
            before_folder(prepared)
        folder = unique_folder(config.output.dir, f"{kind}-{config.name}")
        shutil.move(staged, folder / "initial_weights.npz")
    write_atomic(folder / "experiment.yaml",
                 yaml.safe_dump(prepared.config.to_yaml_dict(), sort_keys=False))
    return folder, prepared


@dataclass(frozen=True)
class Entry:
    """One variant to measure: its label, its own experiment (`config.variant` of the staged
    one), and its run folder. `resume`: continue the run folder when it stopped with a
    checkpoint (compare), else start it anew (a plan's trial runs again whole)."""

    label: str
    experiment: ExperimentConfig
    run_dir: Path
    resume: bool = False

    @property
    def file_label(self) -> str:
        return self.label.replace("+", "-")


@dataclass(frozen=True)
class Ran:
    """A variant's end: its summary, or why there is none, and its per-round step times."""

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
    """How the variants take turns: `steps` a turn; `slowest_ratio`: stop one whose turn
    steps that many times the first's (plan: it cannot win); `paired_with`: the baseline each
    variant runs with alone, when they do not fit in memory together (`too_big_together`)."""

    steps: int
    slowest_ratio: float | None = None
    paired_with: str | None = None


def measure(ledger: Ledger, entries: list[Entry], turns: Turns, *, verbose: bool = False,
            on_turn: OnTurn | None = None) -> tuple[dict[str, Ran], int | None]:
    """Every entry run to its end in turns (`run_in_turns`), each from the initial weights
    staged in the ledger's folder (and its run nested in the ledger's MLflow parent); the
    label → how it ended (entries never started are absent), and the signal that
    interrupted them (None: none did). Paired (`turns.paired_with`), each entry runs in turns
    with the baseline alone, pair after pair (`pairs`), and its `baseline_rounds` are the
    baseline's in its own pair."""
    ran: dict[str, Ran] = {}
    signal, paired_with = None, turns.paired_with
    for group in ([entries] if paired_with is None else pairs(entries, paired_with)):
        contenders = [Contender(e.label, _command(ledger.folder, e, verbose),
                                ledger.folder / "logs" / f"{e.file_label}.log", ledger.env)
                      for e in group]
        with ForwardSignals() as signals:
            outcomes = run_in_turns(contenders, turns.steps, signals, on_turn,
                                    slowest_ratio=turns.slowest_ratio)
        ends = {label: _ran(outcome) for label, outcome in outcomes.items()}
        if paired_with is not None and len(group) == 2 and group[1].label in ends:
            base = ends.get(group[0].label)
            ends[group[1].label] = replace(ends[group[1].label],
                                           baseline_rounds=base.rounds if base else [])
        ran.update(ends)
        signal = signals.received
        if signal is not None:
            break
    return ran, signal


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
                       run_dir=base.run_dir.with_name(f"{base.run_dir.name}-with-{entry.file_label}"))

    return [[baseline_for(i, e), e] for i, e in enumerate(others)]


def _ran(outcome: Outcome) -> Ran:
    summary = read_child_summary(outcome.code, outcome.stdout)
    if isinstance(summary, str):
        failed = f"{summary}: {outcome.log_tail}" if outcome.log_tail else summary
        return Ran(None, failed, outcome.rounds, outcome.lifetime_s)
    return Ran(summary, None, outcome.rounds, outcome.lifetime_s)


def too_big_together(prepared: Prepared, policies: dict[str, str], baseline: str) -> str | None:
    """None when every variant's process fits in memory beside the others; else why not, said
    as the engine then runs them (each with the baseline alone). A variant's process needs
    what the staging process holds (TensorFlow, the data, the model built once: its peak
    resident memory) plus its training state under its policy (`model.size.estimate`)."""
    from mptrain.hardware.machine import USABLE_FRACTION, machine_memory_bytes
    from mptrain.model.size import estimate
    from mptrain.precision.policy import DTYPES
    from mptrain.runs.memory import peak_rss_bytes

    available = machine_memory_bytes()
    if available is None or len(policies) <= 2:  # two variants in pairs are the same two
        return None
    floor, batch = peak_rss_bytes(), prepared.config.train.batch_size
    needs = {label: floor + estimate(prepared.model, prepared.optimizer,
                                     *DTYPES[policy]).total_bytes(batch)
             for label, policy in policies.items()}
    if sum(needs.values()) <= USABLE_FRACTION * available:
        return None
    gib = 2.0**30
    return (f"the {len(needs)} variants need about {sum(needs.values()) / gib:.1f} GiB together "
            f"({floor / gib:.1f} GiB a process, and each one's training state by the estimate), "
            f"more than {USABLE_FRACTION:.0%} of the {available / gib:.1f} GiB here: each runs in "
            f"turns with {baseline} alone, pair after pair")


def _command(folder: Path, entry: Entry, verbose: bool) -> list[str]:
    """`mptrain run` of the entry: a resume when asked and it stopped with a checkpoint,
    else anew from its own experiment file (variants/LABEL.yaml) and the initial weights."""
    if entry.resume and resumable(entry.run_dir):
        return resume_command(entry.run_dir, verbose)
    shutil.rmtree(entry.run_dir, ignore_errors=True)  # started, but with nothing to resume
    experiment = folder / "variants" / f"{entry.file_label}.yaml"
    experiment.parent.mkdir(exist_ok=True)
    write_atomic(experiment, yaml.safe_dump(entry.experiment.to_yaml_dict(), sort_keys=False))
    return run_command(experiment, run_dir=entry.run_dir,
                       initial_weights=folder / "initial_weights.npz", verbose=verbose)


class Ledger:
    """A compare's or plan's record (KIND.json, rewritten whole as things end) and, with
    `output.mlflow`, its MLflow parent run: `env` nests each variant's run in it."""

    def __init__(self, folder: Path, kind: str, params: dict[str, str]):
        from mptrain.runs.tracking import start_parent

        self.folder, self.kind = folder, kind
        self.tracking = start_parent(folder, kind, params)

    @property
    def env(self) -> dict[str, str]:
        return self.tracking.env if self.tracking else {}

    def write(self, record: Record) -> None:
        write_record(self.folder, self.kind, record)

    def close(self, record, status: str, plot: Callable | None, texts: dict[str, str],
              tags: dict[str, str] | None = None) -> list[str]:
        """The picture (KIND.png, when `plot` is given), the record, and the parent run
        ended with both; what MLflow could not log."""
        picture = self.folder / f"{self.kind}.png"
        if plot is not None:
            record.plot = str(picture)
            plot(record, picture)
        self.write(record)
        if self.tracking is None:
            return []
        self.tracking.finish(status, [self.folder / f"{self.kind}.json", picture], texts,
                             tags=tags or {})
        return self.tracking.notes


def write_record(folder: Path, kind: str, record: Record) -> None:
    """KIND.json, whole or not at all (a reader never sees half a record)."""
    write_atomic(folder / f"{kind}.json", to_json(record.model_dump(), indent=2) + "\n")


def load_record(folder: Path, kind: str, record_type: type[Record]):
    """The record a `--resume` continues, or an error naming the folder."""
    try:
        return record_type.model_validate_json((folder / f"{kind}.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume {folder}: not a {kind} folder ({exc})") from None


def turn_steps(total_steps: int) -> int:
    """Steps a turn, so that a run of `total_steps` gives about TARGET_ROUNDS rounds."""
    return max(MIN_TURN_STEPS, (total_steps - 1) // TARGET_ROUNDS)


@dataclass(frozen=True)
class Contender:
    """One variant: its label, the `mptrain run ... --json` command and extra environment,
    and the file its stderr goes to."""

    label: str
    command: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """What a contender did: its exit code and stdout (the run summary), and the median step
    time (ms) of each of its turns, round by round (None: no full batch was timed in it)."""

    code: int
    stdout: str
    rounds: list[float | None] = field(default_factory=list)
    log: str = ""
    lifetime_s: float | None = None  # from its start to its exit, as the parent saw it

    @property
    def log_tail(self) -> str:
        lines = [line for line in self.log.splitlines() if line.strip()]
        return " | ".join(lines[-3:])


@dataclass
class _Child:
    contender: Contender
    process: subprocess.Popen
    reports: object  # the read end of the report pipe
    log: object
    rounds: list[float | None] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    first_step_done: bool = False
    training: bool = True  # not yet reported its final turn
    batch: int = 0  # the largest batch seen: shorter ones (an epoch's last) are not timed


def run_in_turns(contenders: list[Contender], steps_per_turn: int, signals: ForwardSignals,
                 on_turn: OnTurn | None = None,
                 seed: int = 0, slowest_ratio: float | None = None) -> dict[str, Outcome]:
    """Run every contender to its end in turns; `on_turn(round, label, step_ms)` after each
    turn. With `slowest_ratio`, a contender whose turn's median step is that many times the
    first contender's (the baseline's) in the same round is stopped: it cannot win, and
    finishing it would spend the budget. Returns each contender's outcome by label."""
    children: list[_Child] = []
    order = random.Random(seed)
    try:
        for contender in contenders:  # one at a time: start-up costs are measured alone
            if signals.received is not None:
                break
            child = _start(contender, steps_per_turn, signals)
            children.append(child)
            _take_turn(child, on_turn, 0)
        round_ = 0
        while signals.received is None and any(c.training for c in children):
            round_ += 1
            playing = [c for c in children if c.training]
            order.shuffle(playing)
            for child in playing:
                if signals.received is not None:
                    break
                _take_turn(child, on_turn, round_, _too_slow(child, children[0], slowest_ratio))
    finally:
        outcomes = {}
        for child in children:  # evaluations (or the last step of an interrupted one) one by one
            outcomes[child.contender.label] = _finish(child)
        signals.children = []
    return outcomes


def _start(contender: Contender, steps_per_turn: int, signals: ForwardSignals) -> _Child:
    read_end, write_end = os.pipe()
    contender.log.parent.mkdir(parents=True, exist_ok=True)
    log = open(contender.log, "w")  # noqa: SIM115  (closed in _finish)
    env = {**os.environ, **contender.env, TURN_STEPS_ENV: str(steps_per_turn),
           REPORT_FD_ENV: str(write_end)}
    process = subprocess.Popen(contender.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=log, text=True, env=env, pass_fds=(write_end,),
                               start_new_session=True, preexec_fn=die_with_parent)
    os.close(write_end)  # the child holds it: end of file here means the child is gone
    signals.children.append(process)
    return _Child(contender, process, os.fdopen(read_end), log)


def _too_slow(child: _Child, base: _Child, ratio: float | None) -> str | None:
    """Why the child is to stop, when its last turn ran `ratio` times the baseline's."""
    if ratio is None or child is base or not child.rounds or not base.rounds:
        return None
    mine, theirs = child.rounds[-1], base.rounds[min(len(child.rounds), len(base.rounds)) - 1]
    if mine is None or theirs is None or mine <= ratio * theirs:
        return None
    return (f"too slow to win: {mine:.1f} ms a step, {mine / theirs:.1f}x "
            f"{base.contender.label}'s {theirs:.1f} ms in the same round")


def _take_turn(child: _Child, on_turn, round_: int, stop: str | None = None) -> None:
    """Let the child run its next turn (its first step, for round 0) and read its report;
    `stop`: tell it to stop instead, and why (it still reports its last step)."""
    if child.first_step_done and not _say(child, f"too slow {stop}" if stop else "go"):
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
        on_turn(round_, child.contender.label, [1e3 * s for s in seconds])


def _say(child: _Child, command: str) -> bool:
    try:
        child.process.stdin.write(command + "\n")
        child.process.stdin.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def _finish(child: _Child) -> Outcome:
    """Let the child go on to its end, saying go at each report, and collect it."""
    if child.first_step_done:
        while _say(child, "go") and child.reports.readline():
            pass
    stdout, _ = child.process.communicate()
    child.reports.close()
    child.log.close()
    log = Path(child.contender.log).read_text(errors="replace")
    return Outcome(child.process.returncode, stdout, child.rounds, log,
                   time.perf_counter() - child.started)
