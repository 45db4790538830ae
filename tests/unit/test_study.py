"""A compare's or plan's record as its rows end, what a resume makes of it, what it says as its
rows take turns and how its picture captions them, on records and run folders built here (no
child process, no training)."""

import json
from pathlib import Path

import pytest
import yaml

from mptrain.measure import study
from mptrain.measure.compare import CompareRecord, CompareSettings, run_compare
from mptrain.measure.engine import Turns
from mptrain.measure.plan import PlanRecord
from mptrain.measure.study import run_rows
from mptrain.runs.folder import RunFolder
from mptrain.telling import LOGGED
from tests.helpers import compare_row, make_summary, tiny_raw


def a_compare(tmp_path, *policies: str, **fields) -> CompareRecord:
    """A compare staged in tmp_path, its rows never run, its record written."""
    (tmp_path / "experiment.yaml").write_text(yaml.safe_dump(tiny_raw()))
    rows = [compare_row(p, run_dir=str(tmp_path / f"tiny-{p}")) for p in policies]
    record = CompareRecord(experiment="tiny", folder=str(tmp_path), status="running",
                           baseline=rows[0].label, baseline_policy=policies[0], variants=rows,
                           turn_steps=5, **fields)
    record.write()
    return record


def on_disk(tmp_path) -> dict:
    return json.loads((tmp_path / "compare.json").read_text())


def test_a_row_is_in_the_record_as_it_ends_not_when_the_study_ends(tmp_path, monkeypatch):
    """The parent killed outright after one row ended (its children finishing) keeps that
    row: its summary and rounds are on disk before the next row ends."""
    record = a_compare(tmp_path, "float32", "mixed_bfloat16")
    seen = []

    def one_ends_then_the_parent_dies(launches, folder, env, turns, on_turn, on_end):
        row = launches[0][0]
        on_end(row.model_copy(update={"summary": make_summary(), "rounds": [10.0, 11.0]}))
        seen.append(on_disk(tmp_path))
        raise SystemExit(9)

    monkeypatch.setattr(study, "run_in_turns", one_ends_then_the_parent_dies)
    with pytest.raises(SystemExit):
        run_rows(record, {}, Turns(5), LOGGED)
    first, second = seen[0]["variants"]
    assert first["summary"] is not None and first["rounds"] == [10.0, 11.0]
    assert second["summary"] is None and seen[0]["status"] == "running"


def test_each_pair_keeps_its_own_baselines_rounds_as_its_row_ends(tmp_path, monkeypatch):
    record = a_compare(tmp_path, "float32", "mixed_bfloat16", "mixed_float16",
                       pairs="they do not fit together")

    def pair_by_pair(launches, folder, env, turns, on_turn, on_end):
        for index, (row, _, _) in enumerate(launches):
            on_end(row.model_copy(update={"summary": make_summary(), "rounds": [len(row.label) + index]}))

    monkeypatch.setattr(study, "run_in_turns", pair_by_pair)
    ended, signal = run_rows(record, {}, Turns(5, "float32-fit", paired=True), LOGGED)
    base, bf16, fp16 = ended.variants
    assert signal is None and base.rounds == [len("float32-fit")]
    assert bf16.baseline_rounds == [len("float32-fit")]  # the baseline's own row, in the first pair
    assert fp16.baseline_rounds == [len("float32-fit with mixed_float16-fit")]  # its copy's
    assert [v["baseline_rounds"] for v in on_disk(tmp_path)["variants"]] == [
        None, bf16.baseline_rounds, fp16.baseline_rounds]


def ended_in_its_folder(row, **changes) -> None:
    """The row's run ended: its summary.json, as the run wrote it before its process exited."""
    Path(row.run_dir).mkdir(parents=True, exist_ok=True)
    RunFolder(Path(row.run_dir)).write_summary(make_summary(run_dir=row.run_dir, **changes))


def test_a_compare_killed_as_its_last_rows_ended_is_finished_by_its_resume(tmp_path):
    """Every run ended, but the compare's process was killed before it wrote so: its resume
    judges the rows from their run folders (it refused: "every variant has ended"), and
    none of them is "not run"."""
    record = a_compare(tmp_path, "float32", "mixed_bfloat16")
    for row in record.variants:
        ended_in_its_folder(row)
    resumed = CompareRecord.load(tmp_path)
    assert all(row.summary is not None for row in resumed.variants)
    done = run_compare(None, CompareSettings(), resume=tmp_path).record
    assert done.status == "finished" and all(row.summary for row in done.variants)
    assert not any("not run" in row.verdict.words() for row in done.variants)
    assert on_disk(tmp_path)["status"] == "finished"


def test_a_plan_killed_as_its_trials_ended_has_nothing_left_untried(tmp_path):
    trials = [compare_row("float32", label=label, run_dir=str(tmp_path / label))
              for label in ("float32", "mixed_bfloat16")]
    PlanRecord(experiment="tiny", folder=str(tmp_path), machine="m", measured_at="now", steps=30,
               tolerance_pct=3.0, evaluate=False, budget_minutes=1.0, candidates=[],
               trials=trials).write()
    ended_in_its_folder(trials[0])
    ended_in_its_folder(trials[1], status="diverged")
    resumed = PlanRecord.load(tmp_path)
    assert resumed.untried == [] and resumed.nothing_left() is None
    assert [t.summary.status for t in resumed.trials] == ["finished", "diverged"]


def test_a_turn_without_a_step_is_said_not_a_crash(capsys):
    """A child resumed at its final step, or stopped before its first, reports no step time:
    the compare goes on saying so (an IndexError stopped it)."""
    from mptrain.report.progress import ConsoleTelling

    telling = ConsoleTelling()
    telling.turn(0, "mixed_bfloat16-fit", [])
    telling.turn(3, "mixed_bfloat16-fit", [])
    telling.turn(0, "float32-fit", [1234.0])
    telling.turn(1, "float32-fit", [10.0, 12.0, 11.0])
    said = capsys.readouterr().err
    assert "mixed_bfloat16-fit: started; no step to run" in said
    assert "round 3 · mixed_bfloat16-fit: 0 steps" in said and "nan" not in said
    assert "float32-fit: started; first step 1.23 s" in said
    assert "round 1 · float32-fit: 3 steps, median 11.0 ms" in said


def test_the_picture_captions_a_row_without_a_test_figure_as_such_not_as_diverged():
    """A run interrupted before its evaluation has no test figure; it did not diverge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mptrain.measure.plot import _quality_bars
    from mptrain.measure.variant import Verdict

    rows = [compare_row("float32", summary=make_summary(accuracy=0.9), verdict=Verdict()),
            compare_row("mixed_float16", summary=make_summary(status="diverged"), verdict=Verdict()),
            compare_row("mixed_bfloat16", verdict=Verdict(),
                        summary=make_summary(status="interrupted", test_accuracy=None, test_loss=None))]
    figure, ax = plt.subplots()
    _quality_bars(ax, rows, ["C0", "C1", "C2"])
    plt.close(figure)
    assert [text.get_text() for text in ax.texts] == ["0.9", "diverged", "no test figure"]
