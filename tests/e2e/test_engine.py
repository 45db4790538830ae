"""The measuring engine's turns with fake children: small Python processes that speak the
turn protocol (`training.turns`) with set step times, so the engine's rules are tested on
known speeds in a second, without TensorFlow: who runs when, who is stopped, and why."""

import sys
import time
from pathlib import Path

import pytest

from mptrain.measure import engine
from mptrain.measure.engine import Turns, run_in_turns
from mptrain.runs.child import ChildSpec
from mptrain.telling import Telling
from tests.helpers import compare_row, make_summary

# A child: `STEP_MS TOTAL_STEPS START_S`, then the spec the engine gives it (`runs.child`).
FAKE = '''
import json, os, sys, time
step_ms, total = float(sys.argv[1]), int(float(sys.argv[2]))
time.sleep(float(sys.argv[3]))  # its start (compiling)
spec = json.loads(sys.argv[4])
per, fd = spec["turn_steps"], spec["report_fd"]
report = os.fdopen(fd, "w", buffering=1)
step, seconds, stopping = 0, [], False
while True:
    time.sleep(step_ms / 1e3)
    step += 1
    seconds.append(step_ms / 1e3)
    final = step >= total or stopping
    if step == 1 or final or len(seconds) >= per:
        report.write(json.dumps({"turn": 0, "step": step, "seconds": seconds,
                                 "examples": [8] * len(seconds), "final": final}) + "\\n")
        seconds = []
        word = sys.stdin.readline().strip()
        if final:
            break
        stopping = word != "go"
'''


@pytest.fixture
def study(tmp_path):
    """The study's folder (each child's log goes there), and the environment children start with."""
    return tmp_path, {}


class FakeSpec(ChildSpec):
    """A child spec the fake child runs: its speeds, then the spec as JSON."""

    script: str
    speeds: list[float]

    def command(self) -> list[str]:
        return [sys.executable, self.script, *map(str, self.speeds), self.model_dump_json()]


def children(tmp_path: Path, **speeds) -> list:
    """label → (step ms, steps[, start s]): a variant, its batch and its fake child's spec each.
    Each summary file holds a summary from an earlier run: the fake writes none, so a summary
    read back would be that stale one."""
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE)
    for label in speeds:
        (tmp_path / f"{label}.json").write_text(make_summary().model_dump_json())
    return [(compare_row("float32", label=label, run_dir=str(tmp_path / label)), 8,
             FakeSpec(run_dir=str(tmp_path / label), summary_file=str(tmp_path / f"{label}.json"),
                      script=str(script), speeds=[*spec, 0.0][:3]))
            for label, spec in speeds.items()]


class Heard(Telling):
    """What the engine tells: each turn, as (round, label), and each line it says."""

    def __init__(self):
        self.turns, self.lines = [], []

    def turn(self, round_, label, step_ms):
        self.turns.append((round_, label))

    def say(self, kind, line):
        self.lines.append(line)


def in_turns(tmp_path, study, turns: Turns, heard: Heard | None = None, **speeds):
    heard, ends = heard or Heard(), {}
    run_in_turns(children(tmp_path, **speeds), *study, turns, heard,
                 on_end=lambda row: ends.setdefault(row.label, row))
    return ends, heard.turns


def test_every_child_runs_its_turn_each_round_in_a_changing_order(tmp_path, study):
    ends, said = in_turns(tmp_path, study, Turns(steps=5), a=(5, 26), b=(5, 26), c=(5, 26))
    assert [label for round_, label in said if round_ == 0] == ["a", "b", "c"]  # started one by one
    rounds = [[label for r, label in said if r == n] for n in range(1, 6)]
    assert all(sorted(members) == ["a", "b", "c"] for members in rounds), rounds
    assert len({tuple(members) for members in rounds}) > 1  # a random order every round
    for label in "abc":  # five turns of five steps timed, at the child's 5 ms
        assert ends[label].rounds == [pytest.approx(5.0, abs=0.5)] * 5
        assert ends[label].summary is None and "wrote no run summary" in ends[label].failed


def test_a_child_twice_as_slow_as_the_baseline_in_three_rounds_is_stopped(tmp_path, study):
    """Slower than the ratio in each of its last `SLOW_ROUNDS` rounds: stopped then (told at
    its first turn after the base's third), never on one round (issue 67)."""
    ends, _ = in_turns(tmp_path, study, Turns(steps=5, baseline="base", slowest_ratio=2.0),
                       base=(5, 31), close=(8, 31), slow=(15, 31))
    assert len(ends["base"].rounds) == 6 and len(ends["close"].rounds) == 6
    assert engine.SLOW_ROUNDS <= len(ends["slow"].rounds) <= engine.SLOW_ROUNDS + 1


def test_a_plans_race_stops_who_cannot_win_and_ends_once_decided(tmp_path, study):
    """Plan's race (`trials.race`) in the engine: after three rounds, the trial too slow to be
    picked takes no more turns, and once the leader is alone and faster beyond the noise,
    every trial still running stops after the same round, with the reason said; without the
    race, every trial runs all its rounds."""
    from mptrain.measure.trials import race

    heard = Heard()
    turns = Turns(steps=5, baseline="float32", controls=frozenset({"float32"}), race=race)
    ends, said = in_turns(tmp_path, study, turns, heard, float32=(10, 51), fast=(4, 51),
                          slow=(12, 51))
    assert [len(ends[label].rounds) for label in ("float32", "fast", "slow")] == [4, 4, 4]
    assert any(line.startswith("slow: dropped after 3 rounds") for line in heard.lines)
    decided = [line for line in heard.lines if "decided after 3 rounds: fast 2.50x float32" in line]
    assert len(decided) == 1 and set(decided[0].split(":")[0].split(", ")) == {"float32", "fast"}
    ends, _ = in_turns(tmp_path, study, Turns(steps=5, baseline="float32"), float32=(10, 26),
                       fast=(4, 26), slow=(12, 26))
    assert [len(ends[label].rounds) for label in ("float32", "fast", "slow")] == [5, 5, 5]


def test_children_start_two_at_a_time_and_first_steps_are_read_in_order(tmp_path, study, monkeypatch):
    """A start is one-threaded work (ResNet50's 25-30 s): the second child starts while the
    first is still starting, the third once the first's first step has ended."""
    events = []
    real_start, real_first = engine._start, engine._first_turn

    def start(launch, *args):
        events.append(("start", launch[0].label))
        return real_start(launch, *args)

    def first(child, *args):
        real_first(child, *args)
        events.append(("first step", child.row.label))

    monkeypatch.setattr(engine, "STARTS_AT_ONCE", 2)
    monkeypatch.setattr(engine, "_start", start)
    monkeypatch.setattr(engine, "_first_turn", first)
    ends, _ = in_turns(tmp_path, study, Turns(steps=5), a=(5, 11, 0.3), b=(5, 11, 0.3), c=(5, 11))
    assert events == [("start", "a"), ("start", "b"), ("first step", "a"), ("start", "c"),
                      ("first step", "b"), ("first step", "c")]
    assert all(len(ends[label].rounds) == 2 for label in "abc")


def test_past_the_deadline_no_round_starts(tmp_path, study):
    """No round starts after the deadline, and no start either: a child whose start would
    begin past it is not started (under load, starting two Python processes took longer than
    0.4 s, and the second never ran: it has no end to report)."""
    started = time.monotonic()
    ends, said = in_turns(tmp_path, study, Turns(steps=5, deadline=time.monotonic() + 2.0),
                          a=(20, 400), b=(20, 400))
    assert time.monotonic() - started < 12  # 400 steps each would take 16 s
    assert 1 <= len(ends["a"].rounds) < 79
    if "b" in ends:  # started before the deadline: it ran every round a did
        assert len(ends["a"].rounds) == len(ends["b"].rounds)
    else:  # the deadline passed while a started: nothing more was started
        assert not any(label == "b" for _, label in said)
    late, _ = in_turns(tmp_path, study, Turns(steps=5, deadline=time.monotonic() - 1), c=(20, 400))
    assert late == {}  # past the deadline, no start at all


def test_a_start_far_slower_than_the_first_is_stopped_there(tmp_path, study, monkeypatch):
    monkeypatch.setattr(engine, "MIN_START_LIMIT_S", 0.5)
    ends, said = in_turns(tmp_path, study, Turns(steps=5, baseline="quick", first_step_ratio=4.0),
                          quick=(5, 11), compiling=(5, 11, 3.0))
    assert ends["compiling"].rounds == [] and "too slow to start" in ends["compiling"].failed
    assert len(ends["quick"].rounds) == 2 and ("quick" in {label for _, label in said})


def test_a_child_is_read_against_the_baseline_not_the_first_started(tmp_path, study):
    """Plan resumed after float32 ended, or a baseline not started first: a candidate twice as
    slow as another candidate is no slower than the baseline, and can still win against it
    (were the faster one refused for its loss). Read against the first started, it was cut."""
    ends, _ = in_turns(tmp_path, study, Turns(steps=5, baseline="base", slowest_ratio=2.0),
                       fast=(5, 26), base=(10, 26), slow=(15, 26))
    assert [len(ends[label].rounds) for label in ("fast", "base", "slow")] == [5, 5, 5]
    ends, _ = in_turns(tmp_path, study, Turns(steps=5, baseline="base", slowest_ratio=2.0),
                       fast=(5, 26), slow=(15, 26))  # the baseline ended before: nothing to read against
    assert len(ends["slow"].rounds) == 5


def test_a_start_is_read_against_the_baselines_start(tmp_path, study, monkeypatch):
    """The start limit is so many times the baseline's start, whoever started first."""
    monkeypatch.setattr(engine, "MIN_START_LIMIT_S", 0.5)
    ends, _ = in_turns(tmp_path, study, Turns(steps=5, baseline="base", first_step_ratio=4.0),
                       quick=(5, 11), base=(5, 11, 1.5), other=(5, 11, 2.0))
    assert [len(ends[label].rounds) for label in ("quick", "base", "other")] == [2, 2, 2]


def test_a_row_that_cannot_be_kept_leaves_no_child_running(tmp_path, study, monkeypatch):
    """A row the study cannot write (a full disk) is raised, after every other child has
    ended and been kept: none is left running, no kept row is lost."""
    kept, started = [], []
    real_start = engine._start
    monkeypatch.setattr(engine, "_start", lambda *a: started.append(c := real_start(*a)) or c)

    def keep(row):
        if row.label == "a":
            raise OSError(28, "No space left on device")
        kept.append(row.label)

    with pytest.raises(OSError, match="No space left"):
        run_in_turns(children(tmp_path, a=(5, 12), b=(5, 12)), *study, Turns(steps=4), Heard(),
                     on_end=keep)
    assert kept == ["b"] and all(c.process.returncode is not None for c in started)
