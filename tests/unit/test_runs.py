"""`mptrain runs` on recorded run folders: statuses (a dead `running` is killed), order,
resumability, the 80-column table, and `--compare` with compare's rows and verdicts. Also
the pure parts of MLflow tracking (params, batches) and its check in `validate`."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from mptrain.config import validate
from mptrain.errors import ConfigError
from mptrain.measure.side_by_side import compare_runs, split_arguments
from mptrain.runs.folder import list_runs, record_text, resumable
from mptrain.runs.summary import RunState
from tests.helpers import make_summary, tiny_raw


def run_folder(root: Path, name: str, record, mtime: float, *overrides: str,
               checkpoint: bool = False) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(validate(tiny_raw(*overrides), "x").to_yaml_dict()))
    (path / "summary.json").write_text(record_text(record))
    if checkpoint:
        (path / "checkpoints").mkdir()
        (path / "checkpoints" / "ckpt-1.index").write_text("")
    os.utime(path / "summary.json", (mtime, mtime))
    return path


def state(status: str, pid: int | None = None, reason: str | None = None) -> RunState:
    return RunState(status=status, name="tiny", pid=pid, host=socket.gethostname(),
                    started="2026-12-01T10:00:00", reason=reason)


def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    run_folder(root, "a-finished", make_summary(median=20.0, accuracy=0.91), 1000)
    run_folder(root, "b-interrupted", make_summary(status="interrupted", stop_reason="interrupted by "
                                                   "SIGINT"), 2000, checkpoint=True)
    run_folder(root, "c-failed", state("failed", reason="ValueError: boom"), 3000,
               "policy=mixed_bfloat16", checkpoint=True)
    run_folder(root, "d-killed", state("running", pid=dead_pid()), 4000, "train.loop=custom",
               checkpoint=True)
    run_folder(root, "e-running", state("running", pid=os.getpid()), 5000)
    run_folder(root / "compare-tiny-1", "tiny-mixed_bfloat16-fit",
               make_summary(median=10.0, accuracy=0.9, policy="mixed_bfloat16"), 500)
    (root / "not-a-run").mkdir()
    (root / "compare-tiny-1" / "compare.json").write_text("{}")
    return root


def test_every_run_folder_with_its_status_newest_first(runs):
    report = list_runs(runs)
    rows = {row.name: row for row in report.runs}
    assert [row.name for row in report.runs] == [
        "e-running", "d-killed", "c-failed", "b-interrupted", "a-finished",
        "compare-tiny-1/tiny-mixed_bfloat16-fit"]
    assert {name: (row.status, row.resumable) for name, row in rows.items()} == {
        "e-running": ("running", False), "d-killed": ("killed", True),
        "c-failed": ("failed", True), "b-interrupted": ("interrupted", True),
        "a-finished": ("finished", False), "compare-tiny-1/tiny-mixed_bfloat16-fit": ("finished", False)}
    assert (rows["a-finished"].median_step_ms, rows["a-finished"].test_quality) == (20.0, "accuracy 0.9100")
    # a run without a summary says what its config asked for, and why it stopped
    assert (rows["c-failed"].policy, rows["d-killed"].loop) == ("mixed_bfloat16", "custom")
    assert rows["c-failed"].reason == "ValueError: boom" and "is gone" in rows["d-killed"].reason
    assert rows["b-interrupted"].reason == "interrupted by SIGINT"


def test_the_table_fits_80_columns_and_marks_the_resumable(runs):
    from mptrain.report.views import runs_table

    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(runs_table(list_runs(runs)))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "killed*" in text and "interrupted*" in text and "running*" not in text
    # a long temporary path wraps anywhere, even mid-word: compare without the white space
    assert f"mptrainrun--resume{runs}/RUN" in "".join(text.split())
    assert "ValueError: boom" in text  # why it failed


def test_when_reads_as_how_long_ago():
    from datetime import datetime, timedelta

    from mptrain.report.views import time_ago

    now = datetime(2026, 12, 1, 12, 0, 0)
    assert [time_ago(now - timedelta(seconds=s), now) for s in (5, 125, 7300, 3 * 86400 + 5)] == [
        "5s ago", "2m ago", "2h ago", "3d ago"]


def test_a_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        list_runs(tmp_path / "nowhere")


def test_compare_runs_side_by_side_with_compare_rules(runs):
    record = compare_runs(["compare-tiny-1/tiny-mixed_bfloat16-fit", "a-finished", "c-failed"], runs)
    assert record.baseline_policy == "float32"  # a float32 run is the baseline, wherever named
    by_name = {row.label: row for row in record.variants}
    assert by_name["a-finished"].verdict.baseline
    fast = by_name["compare-tiny-1/tiny-mixed_bfloat16-fit"]
    assert fast.speedup == pytest.approx(2.0) and fast.verdict.words().startswith("faster")
    assert by_name["c-failed"].summary is None and "failed" in by_name["c-failed"].verdict.words()
    # the first named is the baseline when none is float32
    run_folder(runs, "f-fp16", make_summary(median=30.0, policy="mixed_float16"), 6000)
    record = compare_runs([str(runs / "compare-tiny-1" / "tiny-mixed_bfloat16-fit"), "f-fp16"], runs)
    assert record.baseline_policy == "mixed_bfloat16"
    assert record.variants[1].verdict.words().startswith("slower")

    from mptrain.report.tables import compare_tables

    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(compare_tables(record))
    assert "f-fp16" in console.export_text()


def test_compare_runs_reads_each_run_as_the_candidate_it_ran(runs):
    """A float32 policy with oneDNN's bfloat16 math is bfloat16 math: never the float32
    baseline, and labelled by its candidate (a new user's `runs --compare` called it
    `float32 fit` and read a mixed_bfloat16 run against it)."""
    run_folder(runs, "g-graph", make_summary(median=8.0, candidate="float32+graph_bf16"), 7000,
               "train.math_mode=graph_bf16")
    record = compare_runs(["g-graph", "compare-tiny-1/tiny-mixed_bfloat16-fit", "a-finished"], runs)
    assert record.baseline_policy == "float32" and record.baseline == "a-finished"
    graph = record.variants[0]
    assert graph.candidate.name == "float32+graph_bf16" and graph.candidate.sixteen_bit
    assert graph.speedup == pytest.approx(20.0 / 8.0)


def test_runs_from_one_compare_are_judged_with_what_that_compare_measured(tmp_path):
    """Its input pipeline's own time (which makes a step input-bound) and why its rows ran in
    pairs are the compare's, in compare.json: `runs --compare` of its runs says what it said."""
    from mptrain.measure.compare import CompareRecord
    from tests.helpers import compare_row

    folder = tmp_path / "runs" / "compare-tiny-1"
    for policy, median in (("float32", 100.0), ("mixed_bfloat16", 50.0)):
        run_folder(folder, f"tiny-{policy}-fit", make_summary(median=median, policy=policy), 500)
    rows = [compare_row(p, run_dir=str(folder / f"tiny-{p}-fit")) for p in ("float32", "mixed_bfloat16")]
    CompareRecord(experiment="tiny", folder=str(folder), baseline=rows[0].label,
                  baseline_policy="float32", variants=rows, turn_steps=5, input_ms_per_batch=90.0,
                  pairs="the 2 variants need more than the memory here").write()
    record = compare_runs(["compare-tiny-1/tiny-float32-fit", "compare-tiny-1/tiny-mixed_bfloat16-fit"],
                          tmp_path / "runs")
    assert (record.input_ms_per_batch, record.turn_steps) == (90.0, 5)
    assert record.pairs == "the 2 variants need more than the memory here"
    assert [row.verdict.input_bound for row in record.variants] == [True, True]  # 100 and 50 ms <= 1.2 x 90


def test_compare_refuses_what_it_cannot_compare(runs):
    with pytest.raises(ConfigError, match="at least two"):
        compare_runs(["a-finished"], runs)
    with pytest.raises(ConfigError, match="not-there: not a run folder"):
        compare_runs(["a-finished", "not-there"], runs)
    with pytest.raises(ConfigError, match="named twice"):
        compare_runs(["a-finished", str(runs / "a-finished")], runs)


def test_dir_then_runs(runs, monkeypatch):
    assert split_arguments([str(runs), "a", "b"]) == (runs, ["a", "b"])
    assert split_arguments([str(runs / "a-finished"), "b"]) == (Path("runs"), [str(runs / "a-finished"), "b"])
    monkeypatch.chdir(runs.parent)
    assert compare_runs(["a-finished", "b-interrupted"]).baseline_policy == "float32"  # in ./runs


# --- MLflow tracking: the pure parts --------------------------------------------------------


def test_params_are_the_flattened_config_within_mlflows_limit():
    from mptrain.runs.tracking import MAX_PARAM_VALUE, flatten

    flat = flatten({"train": {"optimizer": {"name": "adam", "kwargs": {}}, "metrics": ["accuracy"]},
                    "seed": 0, "model": {"layers": ["x" * 600]}, "note": None})
    assert flat == {"train.optimizer.name": "adam", "train.optimizer.kwargs": "{}",
                    "train.metrics": '["accuracy"]', "seed": "0",
                    "model.layers": flat["model.layers"], "note": "null"}
    assert len(flat["model.layers"]) == MAX_PARAM_VALUE and flat["model.layers"].endswith("...")


def test_validate_without_mlflow_says_what_to_install(tmp_path, monkeypatch):
    """As if mlflow were not installed: the check finds that out without importing it."""
    import importlib.util

    from typer.testing import CliRunner

    from mptrain.cli import app
    from mptrain.runs.preflight import check_experiment

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}", "output.mlflow={}")))
    with pytest.raises(ConfigError, match=r"output.mlflow needs MLflow: pip install 'mptrain\[mlflow\]'"):
        check_experiment(validate(tiny_raw("output.mlflow={}"), "x"))
    check_experiment(validate(tiny_raw(f"output.dir={tmp_path / 'runs'}"), "x"))  # off: no check
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 2
    assert "output.mlflow needs MLflow: pip install 'mptrain[mlflow]'" in " ".join(done.output.split())
    assert "Traceback" not in done.output


def test_a_process_that_exists_but_cannot_be_signalled_is_alive(monkeypatch):
    """Another user's (or another container's) live process: os.kill(pid, 0) is refused, and
    the run it holds must not be taken for dead (a second resume would write the same folder)."""
    from mptrain.runs import folder

    state = RunState(status="running", name="x", pid=4242, host=socket.gethostname(),
                     started="2026-12-01T00:00:00")

    def refuse(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(folder.os, "kill", refuse)
    assert folder.alive(state)

    def gone(pid, sig):
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(folder.os, "kill", gone)
    assert not folder.alive(state)
    assert not folder.alive(state.model_copy(update={"host": "another-host"}))


def test_a_torn_last_record_is_left_out_and_said_and_a_damaged_one_before_it_refused(tmp_path):
    from mptrain.errors import DataError
    from mptrain.record import read_jsonl

    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    said: list[str] = []
    assert read_jsonl(path, said) == [{"step": 1}, {"step": 2}]
    assert said == ["steps.jsonl: its last line was cut short (the run stopped while writing it) "
                    "and is left out"]
    path.write_text('{"step": 1}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(DataError, match=r"steps.jsonl, line 2: not a whole record"):
        read_jsonl(path)
    path.write_text('{"step": 1}\n{"step": 2, "lo\n')  # ends with a newline: written whole, damaged
    with pytest.raises(DataError, match="line 2"):
        read_jsonl(path)


def test_a_run_whose_summary_is_damaged_is_listed_as_such_not_left_out(runs):
    (runs / "c-failed" / "summary.json").write_text("{half a summ")
    row = next(r for r in list_runs(runs).runs if r.name == "c-failed")
    assert row.status == "failed" and "summary.json cannot be read" in row.reason and row.resumable


def test_a_run_folder_with_brackets_is_printed_as_it_is(capsys):
    """Rich reads `[...]` as markup: a folder named after a sweep's point (`exp[lr=0.1]`) must
    reach the user whole, or the resume command it prints is wrong."""
    import typer

    from mptrain.commands.options import user_errors
    from mptrain.signals import RunAbandoned

    folder = Path("/runs/exp[lr=0.1]-20261202")
    with pytest.raises(typer.Exit), user_errors():
        raise RunAbandoned(folder)
    assert f"mptrain run --resume {folder}" in capsys.readouterr().err


def test_a_second_ctrl_c_on_a_full_disk_abandons_the_run_without_a_traceback(tmp_path, monkeypatch):
    """The run's last status cannot be written (the disk is full): a second Ctrl-C still
    abandons it cleanly, saying how to resume, as a failure on a full disk does."""
    import errno

    from mptrain.runs.folder import RunFolder
    from mptrain.runs.runner import Start, _failed
    from mptrain.signals import RunAbandoned

    folder = RunFolder(tmp_path)
    folder.mark_running("tiny")

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("mptrain.runs.folder.write_atomic", full)
    instead = _failed(KeyboardInterrupt(), None, folder, None, Start())
    assert isinstance(instead, RunAbandoned) and instead.run_dir == tmp_path
    assert RunFolder(tmp_path).state().status == "running"  # its pid dead: recognisably stopped


def test_a_sigterm_before_training_is_a_sigterm_not_a_second_ctrl_c(tmp_path):
    """A scheduler's SIGTERM after the run folder exists and before training's handler
    (`Terminated`, a KeyboardInterrupt to Python): the run says it was stopped by SIGTERM and
    ends with its 143, never as abandoned by a second Ctrl-C (130, "SIGINT")."""
    import signal

    from mptrain.runs.folder import RunFolder
    from mptrain.runs.runner import Start, _failed
    from mptrain.signals import Terminated

    folder = RunFolder(tmp_path)
    folder.mark_running("tiny")
    assert _failed(Terminated(signal.SIGTERM), None, folder, None, Start()) is None  # raised as itself
    state = RunFolder(tmp_path).state()
    assert state.status == "interrupted" and state.reason.startswith("stopped by SIGTERM")


def test_a_finished_run_resumes_only_where_it_has_more_to_do(tmp_path):
    """A run cut by a plan's budget stopped before its planned end: it resumes as it is; one
    that ended (or stopped at its own limit) says how to train it further."""
    from mptrain.errors import AlreadyFinished
    from mptrain.runs.resume import resume_config

    cut = run_folder(tmp_path, "cut", make_summary(stopped_by="budget", stop_reason="cut by the "
                                                   "budget after 3 rounds"), 1000, "train.max_steps=40",
                     checkpoint=True)
    assert resume_config(cut, None, []).train.max_steps == 40
    ended = run_folder(tmp_path, "ended", make_summary(), 1000, checkpoint=True)
    assert resumable(cut) and not resumable(ended)  # `mptrain runs` marks the one, not the other
    rows = {row.name: row for row in list_runs(tmp_path).runs}
    assert rows["cut"].status == "cut short" and rows["ended"].status == "finished"
    with pytest.raises(AlreadyFinished, match="finished already .*--set train.epochs=N"):
        resume_config(ended, None, [])
    limited = run_folder(tmp_path, "limited", make_summary(stopped_by="max_steps"), 1000,
                         "train.max_steps=40")
    with pytest.raises(AlreadyFinished, match="its limit train.max_steps 40"):
        resume_config(limited, None, [])
    assert resume_config(limited, None, ["train.max_steps=80"]).train.max_steps == 80
