"""The child's side of the measuring engine, on recorded steps (no training, no processes):
when it hands over, what it reports, and what the engine's words make it do."""

import io
import json
import os
import time
from types import SimpleNamespace

from mptrain.measure.engine import Turns, same_examples, too_slow, turn_steps
from mptrain.training.records import StepRecord
from mptrain.training.turns import TakeTurns, TurnLink


class SlowEngine(io.StringIO):
    """The engine's words on stdin, each said after WAIT seconds (others' turns)."""

    WAIT = 0.02

    def readline(self, *args):
        time.sleep(self.WAIT)
        return super().readline(*args)


def take_turns(monkeypatch, commands: str, total: int, every: int):
    read_end, write_end = os.pipe()
    monitor = SimpleNamespace(stop_requested=False, steps=[], stops=[])
    monitor.request_stop = lambda reason, kind: monitor.stops.append((reason, kind))
    monkeypatch.setattr("sys.stdin", SlowEngine(commands))
    return TakeTurns(monitor, TurnLink(every, write_end), total), os.fdopen(read_end), monitor


def test_a_run_hands_over_after_its_first_step_and_every_turn_then_once_more_at_its_end(monkeypatch):
    turns, reports, _ = take_turns(monkeypatch, "go\n" * 10, total=12, every=5)
    for step in range(1, 13):
        turns.step_finished(StepRecord(step, 1, 1.0, 0.01 * step, 8), step)
    said = [json.loads(line) for line in reports.read().splitlines()]
    assert [len(r["seconds"]) for r in said] == [1, 5, 5, 1]  # first step, two turns, the rest
    assert [r["final"] for r in said] == [False, False, False, True]
    assert said[1]["seconds"] == [0.02, 0.03, 0.04, 0.05, 0.06] and said[-1]["step"] == 12
    turns.finish()  # already said final: nothing more
    # the waits for the engine's word (four hand-overs) are kept: the run subtracts them
    assert 4 * SlowEngine.WAIT <= turns.waited_s < 4 * SlowEngine.WAIT + 0.5


def test_too_slow_stops_it_as_a_step_limit_would(monkeypatch):
    turns, reports, monitor = take_turns(monkeypatch, "go\ntoo slow 9x float32's\n", total=20, every=5)
    for step in range(1, 7):
        turns.step_finished(StepRecord(step, 1, 1.0, 0.01, 8), step)
    assert monitor.stops == [("9x float32's", "max_step_seconds")]


def test_cut_by_the_budget_stops_it_as_a_step_limit_would(monkeypatch):
    turns, reports, monitor = take_turns(monkeypatch, "go\ncut after 3 rounds\n", total=20, every=5)
    for step in range(1, 7):
        turns.step_finished(StepRecord(step, 1, 1.0, 0.01, 8), step)
    assert monitor.stops == [("after 3 rounds", "budget")]


def test_turns_cut_a_run_into_about_ten_rounds_of_at_least_five_steps():
    assert turn_steps(30) == 5 and turn_steps(12) == 5
    assert turn_steps(1001) == 100


def test_too_slow_stops_a_candidate_on_rounds_never_one_turn_and_never_a_control():
    """A trial slower than float32 by the ratio in each of its last three rounds is stopped;
    one turn slowed by another process (2.7x, then 1.2x) is not, nor a control: a loaded host
    slows float32's A/A twin as much as any candidate, and cut, it would leave the plan no
    noise floor to judge against (CI met a cut twin)."""
    def child(label, *rounds, batch=64):
        return SimpleNamespace(row=SimpleNamespace(label=label), batch_size=batch, rounds=list(rounds))

    base = child("float32", 2.5, 2.5, 2.5, 2.5)
    turns = Turns(5, slowest_ratio=2.0, controls=frozenset({"float32", "float32-twin"}))
    said = too_slow(child("mixed_bfloat16", 3.0, 6.7, 5.5, 6.0), base, turns)
    assert said == "too slow to win: 2.2-2.7x float32's step in each of the last 3 rounds"
    assert too_slow(child("mixed_bfloat16", 6.7, 6.7), base, turns) is None  # two rounds: not yet
    # a turn at 1.2x among its last three rounds: not on evidence that holds across rounds
    assert too_slow(child("mixed_bfloat16", 6.7, 3.0, 6.7, 6.7), base, turns) is None
    assert too_slow(child("mixed_bfloat16", 6.7, 6.7, 3.0, 6.7), base, turns) is None
    assert too_slow(child("float32-twin", 6.7, 6.7, 6.7), base, turns) is None
    assert too_slow(child("mixed_bfloat16", 4.9, 4.9, 4.9), base, turns) is None  # within 2x
    assert too_slow(base, base, turns) is None
    # without the baseline running (a plan resumed after it ended), nothing says who cannot win
    assert too_slow(child("mixed_bfloat16", 6.7, 6.7, 6.7), None, turns) is None
    # at twice the batch a step does twice the work: 6.7 ms is 1.3x float32's per example
    assert too_slow(child("mixed_bfloat16@b128", 6.7, 6.7, 6.7, batch=128), base, turns) is None
    said = too_slow(child("mixed_bfloat16@b128", 13.0, 13.0, 13.0, batch=128), base, turns)
    assert said == "too slow to win: 2.6-2.6x float32's step per example in each of the last 3 rounds"


def test_a_turn_at_another_batch_covers_the_same_examples():
    assert same_examples(10, 64, 128) == 5  # 640 examples a turn either way
    assert same_examples(5, 256, 512) == 3  # 2.5, up: no round of its own at the end
    assert same_examples(10, 64, 32) == 20
    assert same_examples(10, 64, 64) == 10 and same_examples(1, 8, 64) == 1


def test_the_engine_and_a_child_speak_one_protocol_in_one_process():
    """Both sides of the turns protocol, joined by two pipes in one process, no TensorFlow:
    the engine's `_take_turn` (it says go or stop, reads the report) against a child's
    `TakeTurns` (it reports each turn, obeys the word): the steps reported are those timed,
    a stop reaches the child as the kind of stop the engine meant, and its last report ends
    its turns."""
    import threading

    from mptrain.measure.engine import _say, _take_turn
    from mptrain.training.turns import GO, TurnCommand

    report_read, report_write = os.pipe()
    command_read, command_write = os.pipe()
    monitor = SimpleNamespace(stop_requested=False, steps=[], stops=[])

    def request_stop(why, kind):
        monitor.stops.append((why, kind))
        monitor.stop_requested = True

    monitor.request_stop = request_stop
    turns = TakeTurns(monitor, TurnLink(2, report_write), 10, commands=os.fdopen(command_read))

    def train():  # the child's loop: a step at a time until told to stop, then its end
        for step in range(1, 11):
            if monitor.stop_requested:
                break
            turns.step_finished(StepRecord(step, 1, 1.0, 0.01 * step, 8), step)
        turns.finish()

    child = SimpleNamespace(process=SimpleNamespace(stdin=os.fdopen(command_write, "w")),
                            reports=os.fdopen(report_read), first_step_done=False, training=True,
                            largest=0, rounds=[], row=SimpleNamespace(label="mixed_bfloat16"))
    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    seen = []
    _take_turn(child, lambda round_, label, ms: seen.append((round_, label, ms)), 0)  # its first step
    _take_turn(child, lambda round_, label, ms: seen.append((round_, label, ms)), 1)  # go: steps 2, 3
    assert child.training and child.rounds == [25.0] and seen[1] == (1, "mixed_bfloat16", [20.0, 30.0])
    _take_turn(child, lambda *_: None, 2, TurnCommand("drop", "at most 0.70x fast's speed"))
    assert not child.training and monitor.stops == [("at most 0.70x fast's speed", "dropped")]
    assert _say(child, GO)  # the go to evaluate, after its final report
    trainer.join(timeout=10)
    assert not trainer.is_alive() and [s[0] for s in seen] == [0, 1]
    assert TurnCommand.read("too slow 9x float32's\n") == ("too slow", "9x float32's")
    assert TurnCommand.read("") is None and TurnCommand.read("go\n") == GO
    assert TurnCommand.read("halt\n").word == "stop"
