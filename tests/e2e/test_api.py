"""mptrain from Python, as a notebook or a sweep drives it: the functions the CLI calls, their
typed results, mptrain's own errors with the CLI's messages, a builder passed as a function."""

from pathlib import Path

import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)

import mptrain
from mptrain.measure.compare import CompareRecord
from mptrain.measure.plan import PlanRecord
from mptrain.precision.check import CheckReport
from mptrain.runs.summary import RunSummary
from tests.helpers import TINY, experiment
from tests.helpers import mptrain as mptrain_cli


def tiny(tmp_path: Path, **changes):
    return mptrain.load_experiment({**TINY, "output": {"dir": str(tmp_path / "runs"),
                                                       "save_model": False}},
                                   {"train.epochs": 1, **changes})


def test_a_learning_rate_sweep_from_a_loop(tmp_path):
    base = tiny(tmp_path)
    summaries = {}
    for rate in (1e-3, 3e-3, 1e-2):
        point = mptrain.variant(base, {"train.optimizer.kwargs.learning_rate": rate})
        summaries[rate] = mptrain.run(point, progress=False)
    assert base.train.optimizer.kwargs["learning_rate"] == 0.01  # the original is unchanged
    folders = {Path(s.run_dir) for s in summaries.values()}
    assert len(folders) == 3 and all((f / "summary.json").is_file() for f in folders)
    for rate, s in summaries.items():
        assert isinstance(s, RunSummary) and s.status == "finished"
        saved = RunSummary.model_validate_json((Path(s.run_dir) / "summary.json").read_text())
        assert saved.test_loss == s.test_loss
        assert f"learning_rate: {rate}" in (Path(s.run_dir) / "config.yaml").read_text()
    assert len({s.final_train_loss for s in summaries.values()}) == 3  # three different runs


def test_errors_are_mptrains_own_with_the_clis_message(tmp_path):
    with pytest.raises(mptrain.ConfigError) as caught:
        mptrain.load_experiment("synthetic", {"train.epochz": 1})
    message = str(caught.value)
    assert "train.epochz: unknown key (did you mean epochs?)" in message
    said = mptrain_cli("validate", "synthetic", "--set", "train.epochz=1", cwd=tmp_path)
    assert said.returncode == 2 and "train.epochz: unknown key (did you mean epochs?)" in said.stderr
    with pytest.raises(mptrain.DataError, match="no such file"):
        mptrain.run(mptrain.variant(tiny(tmp_path), {"data": {"dataset": "npz", "path": "none.npz"}}),
                    progress=False)


def test_a_notebooks_builder_function_runs_without_a_file(tmp_path):
    import keras

    def my_model(input_shape, num_classes):
        inputs = keras.Input(input_shape)
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(hidden))

    config = mptrain.load_experiment({**TINY, "output": {"dir": str(tmp_path / "runs")}},
                                     {"train.epochs": 1}, builder=my_model)
    summary = mptrain.run(config, progress=False)
    assert summary.status == "finished" and any("output is probabilities" in n for n in summary.notes)
    with pytest.raises(mptrain.ConfigError, match="exists only in the process that passed it, and "
                                                  "compare runs"):
        mptrain.compare(config, ["float32", "mixed_bfloat16"], progress=False)


def test_compare_plan_and_check_machine_from_python(tmp_path, monkeypatch, caplog):
    """The calls a notebook makes, with their typed results; and what the CLI would print as
    a warning reaches a caller without progress (the record's notes, and `logging`): here on
    this machine recorded as one whose bfloat16 kernels run at half float32's speed."""
    import tensorflow as tf

    from mptrain.hardware.machine import probe
    from tests.helpers import record_kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path / "cache"))  # its children's too
    record_kernels(probe(tf, check_xla=False), bfloat16=0.5)
    config = tiny(tmp_path, **{"train.batch_size": 16})
    with caplog.at_level("WARNING", logger="mptrain"):
        record = mptrain.compare(config, ["float32", "mixed_bfloat16"], progress=False)
    assert isinstance(record, CompareRecord) and record.status == "finished"
    assert [row.candidate.name for row in record.variants] == ["float32", "mixed_bfloat16"]
    assert all(row.summary.status == "finished" for row in record.variants)
    slower = "bfloat16 is slower than float32 on this CPU: bfloat16 kernels run 0.50x float32"
    assert any(slower in note for note in record.notes)
    assert any(slower in r.getMessage() for r in caplog.records)
    assert slower in record.variants[1].summary.speed_warning
    planned = mptrain.plan(config, candidates=["mixed_bfloat16"], batch_sizes=[16], steps=8,
                           progress=False)  # the experiment's batch alone: no 2x cell
    assert isinstance(planned, PlanRecord) and planned.status == "finished" and planned.winner
    assert [t.label for t in planned.trials] == ["float32", "float32-twin", "mixed_bfloat16"]
    report = mptrain.check_machine()
    assert isinstance(report, CheckReport) and report.recommendation.policy in (
        "float32", "mixed_bfloat16", "mixed_float16")


def test_a_file_and_a_built_in_load_as_the_cli_loads_them(tmp_path):
    path = experiment(tmp_path, "train.epochs=2")
    from_file = mptrain.load_experiment(path, ["train.batch_size=32"])
    assert from_file.train.epochs == 2 and from_file.train.batch_size == 32
    assert from_file.output.dir == tmp_path / "runs"
    assert mptrain.load_experiment("synthetic").name == "synthetic"


def test_the_docs_builder_function_example_learns(tmp_path, monkeypatch):
    """docs/python-api.md's "Your model as a function", run as written (it trained to chance,
    loss 2.30 and accuracy 0.10, before it was given a learnable task)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    section = text.split("## Your model as a function")[1]
    code = section.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)  # its runs/ folder
    namespace = {"mptrain": mptrain}
    exec(compile(code, "python-api.md", "exec"), namespace)
    assert namespace["summary"].test_accuracy > 0.5
