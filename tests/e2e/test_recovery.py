"""Runs that meet trouble keep what they trained: resumes with the right metrics, limits that
can be raised, models Keras cannot serialise, damaged run folders, a full disk, signals
between epochs, a compare whose parent is killed."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mptrain.errors import AlreadyFinished, MptrainError
from mptrain.runs.resume import resume_config
from mptrain.runs.runner import Start, run_experiment
from tests import datafiles
from tests.helpers import experiment, mptrain, mptrain_process, run_json, wait_for

# 384 training examples in batches of 32: 12 steps an epoch; bit-identical reruns
SAME = ("deterministic=true", "train.batch_size=32", "train.epochs=2")


def test_a_run_stopped_mid_epoch_resumes_with_the_uninterrupted_metrics(tiny_config):
    """Stopped by its step limit after 7 of 12 steps, resumed with the limit lifted: epoch 1's
    accuracy is the whole epoch's, as in a run never stopped (the loop's metrics restart at
    the resume; its first 7 steps come from their records)."""
    whole = run_experiment(tiny_config(*SAME))
    first = run_experiment(tiny_config(*SAME, "train.max_steps=7"))
    assert first.summary.status == "finished" and first.summary.stopped_by == "max_steps"
    with pytest.raises(AlreadyFinished, match="--set train.max_steps=N"):
        resume_config(first.run_dir, None, [])
    resumed = run_experiment(resume_config(first.run_dir, None, ["train.max_steps=null"]),
                             Start(resume=first.run_dir))
    assert "resumed at epoch 1, step 8 (after 7 steps)" in resumed.summary.notes
    assert resumed.summary.steps_run == whole.summary.steps_run == 24
    for a, b in zip(whole.epochs, resumed.epochs, strict=True):
        assert set(a.metrics) == set(b.metrics)
        for key in a.metrics:
            assert b.metrics[key] == pytest.approx(a.metrics[key], abs=1e-6), key
    for a, b in zip(whole.steps, resumed.steps, strict=True):
        assert b.metrics["accuracy"] == pytest.approx(a.metrics["accuracy"], abs=1e-6), a.step


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_signal_between_epochs_stops_there(tiny_config, loop):
    """SIGTERM while an epoch ends (fit: during its validation): the run stops before the
    next epoch's first step, and says where."""
    from mptrain.training.records import TrainingListener

    class SignalAtEpochEnd(TrainingListener):
        def epoch_finished(self, record):
            if record.epoch == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    result = run_experiment(tiny_config(f"train.loop={loop}"), listeners=[SignalAtEpochEnd()])
    assert result.summary.status == "interrupted" and result.code == 128 + signal.SIGTERM
    assert result.summary.steps_run == 6  # one whole epoch, not a step of the next
    assert result.summary.stop_reason == "interrupted by SIGTERM at the end of epoch 1"


def test_a_model_keras_cannot_save_keeps_its_training(tmp_path):
    """A subclassed model without get_config trains; model.keras cannot be written, so its
    weights are: the run finishes (exit 0), says why, leaves no temporary file, resumes, and
    compares from shared initial weights."""
    models = datafiles.user_models(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={models}:subclassed",
                        "output.save_model=true", "train.epochs=1")
    s = run_json(tmp_path, config)
    run_dir = Path(s["run_dir"])
    assert s["status"] == "finished"
    (note,) = [n for n in s["notes"] if "no model.keras: Keras cannot serialise this model" in n]
    assert "must override `get_config()` in order to be serializable.)" in note  # whole, not cut
    assert (run_dir / "model.weights.h5").is_file() and not (run_dir / "model.keras").exists()
    assert not list(run_dir.glob("*tmp*"))
    longer = mptrain("run", "--resume", str(run_dir), "--set", "train.epochs=2", "--json", cwd=tmp_path)
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert json.loads(longer.stdout)["epochs_run"] == 2
    from mptrain.config import load_config
    from mptrain.model import save_initial_weights
    from mptrain.runs.experiment import prepare

    shared = tmp_path / "initial_weights.npz"  # what compare gives its variants
    save_initial_weights(prepare(load_config(config), policy="float32").model, shared)
    again = run_experiment(load_config(config, ["policy=mixed_bfloat16", "output.save_model=false"]),
                           Start(initial_weights=shared))
    assert again.summary.first_step_loss == pytest.approx(s["first_step_loss"], rel=2e-2)


def test_compare_variants_start_from_the_shared_weights_not_their_own(tmp_path):
    """A builder whose initial weights differ in every process (an unseeded generator): only
    the shared initial weights make the variants' first losses agree."""
    models = datafiles.user_models(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={models}:unseeded",
                        "train.max_steps=2")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--json",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    f32, bf16 = (v["summary"] for v in json.loads(done.stdout)["variants"])
    assert bf16["first_step_loss"] == pytest.approx(f32["first_step_loss"], rel=1e-2)


@pytest.fixture(scope="module")
def three_epochs(tmp_path_factory):
    """One run of 3 epochs with a checkpoint after each (and the first), trained once for the
    module; each test damages its own copy."""
    from mptrain.config import validate
    from tests.helpers import tiny_raw

    output = tmp_path_factory.mktemp("three-epochs")
    raw = tiny_raw(f"output.dir={output}", "train.epochs=3", "train.checkpoint.keep=5")
    return run_experiment(validate(raw, "<test>")).run_dir


@pytest.fixture
def damaged(three_epochs, tmp_path):
    """(a copy of the 3-epoch run folder, its checkpoints folder)."""
    import shutil

    folder = tmp_path / three_epochs.name
    shutil.copytree(three_epochs, folder)
    return folder, folder / "checkpoints"


def test_resume_passes_over_a_truncated_newest_checkpoint(damaged):
    run_dir, checkpoints = damaged
    number = lambda p: int(p.name.split("-")[1].split(".")[0])  # noqa: E731
    newest = sorted(checkpoints.glob("ckpt-*.data-*"), key=number)[-1]
    newest.write_bytes(newest.read_bytes()[:100])
    resumed = run_experiment(resume_config(run_dir, None, ["train.epochs=4"]), Start(resume=run_dir))
    assert resumed.summary.status == "finished" and resumed.summary.epochs_run == 4
    passed = [n for n in resumed.summary.notes if n.startswith("checkpoint passed over")]
    assert passed and newest.name.split(".")[0] in passed[0] and "unreadable" in passed[0]
    assert "resumed at epoch 3, step 1" in " ".join(resumed.summary.notes)  # from epoch 2's


def test_resume_finds_checkpoints_without_their_index_file(damaged):
    run_dir, checkpoints = damaged
    (checkpoints / "checkpoint").unlink()
    resumed = run_experiment(resume_config(run_dir, None, ["train.epochs=4"]), Start(resume=run_dir))
    assert resumed.summary.epochs_run == 4 and resumed.summary.steps_run == 24
    assert "resumed at epoch 4, step 1 (after 18 steps)" in resumed.summary.notes


def test_a_folder_whose_every_checkpoint_is_broken_is_a_clean_error(tmp_path, damaged):
    run_dir, checkpoints = damaged
    for data in checkpoints.glob("ckpt-*.data-*"):
        data.write_bytes(b"\0" * 10)
    done = mptrain("run", "--resume", str(run_dir), "--set", "train.epochs=4", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "none of its 4 checkpoints reads" in message and "start it again" in message


@pytest.mark.parametrize("breakage", ["summary", "config", "not a run", "running"])
def test_other_damage_to_a_run_folder_is_said_cleanly(tmp_path, damaged, breakage):
    folder, _ = damaged
    if breakage == "summary":
        (folder / "summary.json").write_text("{half a summ")
    elif breakage == "config":
        (folder / "config.yaml").write_text("train: {epochs: many}\n")
    elif breakage == "not a run":
        folder = tmp_path / "photos"
        folder.mkdir()
    else:  # a second resume while the first still runs: its live pid is in summary.json
        state = {"status": "running", "name": "tiny", "pid": os.getpid(), "host": os.uname().nodename,
                 "started": "2026-12-01T00:00:00"}
        (folder / "summary.json").write_text(json.dumps(state))
    done = mptrain("run", "--resume", str(folder), "--set", "train.epochs=4", cwd=tmp_path)
    expected = {"summary": 0, "config": 2, "not a run": 2, "running": 2}[breakage]
    assert done.returncode == expected, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    said = {"summary": "", "config": "train.epochs = 'many'", "not a run": "not a run folder",
            "running": "still running (process"}[breakage]
    assert said in done.stderr


def test_a_damaged_step_record_is_refused_naming_its_line_and_a_torn_last_one_is_left_out(
        tmp_path, damaged):
    """A line in the middle of steps.jsonl that does not read is refused before the folder is
    touched (skipping it would shift every later record by a step); a last line cut short by
    a kill is left out, said, and the run resumes."""
    folder, _ = damaged
    steps = folder / "steps.jsonl"
    lines = steps.read_text().splitlines(keepends=True)
    steps.write_text("".join(lines[:2] + ['{"step": 3, "loss": 0.\n'] + lines[3:]))
    before = (folder / "summary.json").read_text()
    done = mptrain("run", "--resume", str(folder), "--set", "train.epochs=4", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{steps}, line 3: not a whole record" in " ".join(done.stderr.split())
    assert (folder / "summary.json").read_text() == before
    steps.write_text("".join(lines) + '{"step": 19, "lo')
    resumed = run_experiment(resume_config(folder, None, ["train.epochs=4"]), Start(resume=folder))
    assert resumed.summary.steps_run == 24 and [r.step for r in resumed.steps] == list(range(1, 25))
    assert any("steps.jsonl: its last line was cut short" in n for n in resumed.summary.notes)


def test_another_models_checkpoint_is_refused_as_such_not_called_unreadable(tmp_path, damaged,
                                                                           three_epochs):
    """Checkpoints that read but belong to another model (here: a run of a wider MLP) are
    refused naming what differs, not passed over as damaged."""
    import shutil

    from mptrain.config import validate
    from tests.helpers import tiny_raw

    folder, checkpoints = damaged
    raw = tiny_raw(f"output.dir={tmp_path / 'other'}", "train.epochs=1", "model.hidden_units=[48, 32]")
    other = run_experiment(validate(raw, "<test>")).run_dir
    shutil.rmtree(checkpoints)
    shutil.copytree(other / "checkpoints", checkpoints)
    done = mptrain("run", "--resume", str(folder), "--set", "train.epochs=4", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "was written by another model" in message and "unreadable" not in message
    assert "[16, 48] weight there" in message and "[16, 32] weight here" in message


def fail_from_the_second_call(real, matches):
    """`real`, except that from its second call on whatever `matches` raises a full disk."""
    calls = []

    def wrapper(*args, **kwargs):
        if matches(args):
            calls.append(args)
            if len(calls) > 1:
                raise OSError(errno.ENOSPC, "No space left on device", str(args[-1]))
        return real(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize("site", ["steps.jsonl", "metrics.jsonl", "summary.json", "checkpoint"])
def test_a_full_disk_stops_cleanly_and_the_run_resumes_once_there_is_space(tiny_config, monkeypatch,
                                                                          site):
    """Each place a run writes, failing the way a full disk fails: a clean error naming what
    could not be written and how to continue, the earlier checkpoints intact, and once there
    is space the run resumes to its end."""
    import mptrain.runs.folder as run_folder
    from mptrain.training.checkpoints import Checkpointer

    if site == "checkpoint":
        monkeypatch.setattr(Checkpointer, "save",
                            fail_from_the_second_call(Checkpointer.save, lambda args: True))
    elif site == "summary.json":
        monkeypatch.setattr(run_folder, "write_atomic", fail_from_the_second_call(
            run_folder.write_atomic, lambda args: args[0].name == "summary.json"))
    else:
        monkeypatch.setattr(run_folder, "append_lines", fail_from_the_second_call(
            run_folder.append_lines, lambda args: args[0].name == site))
    with pytest.raises(MptrainError) as error:
        run_experiment(tiny_config("train.epochs=3", "train.checkpoint.every_steps=4"))
    message = str(error.value)
    assert "No space left on device" in message and "mptrain run --resume" in message
    monkeypatch.undo()
    run_dir = Path(message.split("--resume ")[-1])
    state = json.loads((run_dir / "summary.json").read_text())
    if site == "summary.json":  # it could not say `failed` either; once its process has
        assert state["status"] == "running"  # ended, `running` with a dead pid is resumable
        (run_dir / "summary.json").write_text(json.dumps({**state, "pid": 2**22 + 12345}))
    else:
        assert state["status"] == "failed" and "No space left on device" in state["reason"]
    assert (run_dir / "checkpoints" / "checkpoint").is_file()  # the earlier checkpoints stand
    resumed = run_experiment(resume_config(run_dir, None, []), Start(resume=run_dir))
    assert resumed.summary.status == "finished" and resumed.summary.steps_run == 18


def test_texts_in_other_encodings_and_empty_texts_train(tmp_path):
    folder = datafiles.text_folder(tmp_path / "texts", per_class=20)
    for text in (folder / "sports").glob("*.txt"):  # saved by a Latin-1 editor
        text.write_bytes(text.read_bytes() + " café du match".encode("latin-1"))
    (folder / "weather" / "empty.txt").write_bytes(b"")
    common = ["data.dataset=text_folder", f"data.path={folder}", "data.sequence_length=12",
              "model.hidden_units=[16]", "model.num_classes=3", "train.epochs=1",
              "train.batch_size=8"]
    s = run_json(tmp_path, experiment(tmp_path, *common))  # UTF-8: the stray byte is U+FFFD
    assert s["status"] == "finished"
    latin = run_json(tmp_path, experiment(tmp_path, *common, "data.encoding=latin-1", name="l.yaml"))
    vocabulary = (Path(latin["run_dir"]) / "vocabulary.txt").read_text().split("\n")
    assert "café" in vocabulary


def variants_stopped_with(tmp_path: Path) -> None:
    """No variant of the compare in `tmp_path` trains on (each is stopped with its parent)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = subprocess.run(["pgrep", "-f", f"mptrain run {tmp_path}"], capture_output=True,
                               text=True).stdout
        if not alive.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"a variant outlived its compare: {alive}")


def test_a_compare_killed_outright_or_interrupted_keeps_what_ran_and_resumes(tmp_path):
    """SIGKILL of the compare process: its running children are stopped with it (parent-death
    signal: a checkpoint, no orphan training on), and `compare --resume` continues from the
    folder as it was left. A SIGTERM to that resumed compare stops each variant after its
    current step (143, said, a checkpoint each), and the next resume finishes them all, each
    in its own run folder, every step once."""
    config = experiment(tmp_path, "train.batch_size=8", "train.epochs=2",
                        "model.hidden_units=[64, 64]", "train.checkpoint.every_steps=10")
    process = mptrain_process(tmp_path, "compare", str(config), "--policies",
                              "float32,mixed_bfloat16", "--json")
    wait_for(process, "round 1 ·")  # the variants are training, in turns
    process.kill()
    process.communicate(timeout=60)
    variants_stopped_with(tmp_path)
    (folder,) = (tmp_path / "runs").glob("compare-*")
    record = json.loads((folder / "compare.json").read_text())
    assert record["status"] == "running" and [v["run_dir"] for v in record["variants"]]

    resumed = mptrain_process(tmp_path, "compare", "--resume", str(folder), "--json")
    wait_for(resumed, "round 2 ·")  # both variants training again, in turns
    resumed.send_signal(signal.SIGTERM)
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 143, stderr[-3000:]
    record = json.loads(stdout)
    assert record["status"] == "interrupted"
    first, second = record["variants"]
    # each stopped after its current step, with a checkpoint, and said so
    assert first["summary"]["status"] == second["summary"]["status"] == "interrupted"
    assert second["verdict"]["refused"] == ["interrupted: not finished"]
    variants_stopped_with(tmp_path)
    assert f"mptrain compare --resume {folder}" in stderr

    done = subprocess.run([sys.executable, "-m", "mptrain", "compare", "--resume", str(folder),
                           "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads(done.stdout)
    assert final["status"] == "finished"
    assert [v["summary"]["status"] for v in final["variants"]] == ["finished", "finished"]
    assert final["variants"][0]["summary"]["run_dir"] == first["summary"]["run_dir"]
    for variant in final["variants"]:
        summary = variant["summary"]
        assert summary["steps_run"] == 2 * 48 and any("resumed at" in n for n in summary["notes"])
        steps = [json.loads(line)["step"] for line in
                 (Path(summary["run_dir"]) / "steps.jsonl").read_text().splitlines()]
        assert steps == list(range(1, 2 * 48 + 1))
    assert np.isfinite(final["variants"][0]["summary"]["test_loss"])


def test_what_an_epoch_line_reports_is_on_disk_before_it_is_printed(tmp_path):
    """SIGKILL the moment `epoch 1:` is printed: its record, its steps and its checkpoint are
    already saved, so the resume continues at epoch 2, not at step 1."""
    config = experiment(tmp_path, "train.batch_size=8", "train.epochs=2",
                        "model.hidden_units=[512, 512]")
    process = mptrain_process(tmp_path, "run", str(config), "--json")
    wait_for(process, "epoch 1:")
    process.kill()
    process.communicate(timeout=60)
    (run_dir,) = (tmp_path / "runs").iterdir()
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = (run_dir / "steps.jsonl").read_text().splitlines()
    assert [e["epoch"] for e in epochs][:1] == [1] and len(steps) >= 48  # 384 examples / 8
    done = mptrain("run", "--resume", str(run_dir), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    resumed = [n for n in summary["notes"] if n.startswith("resumed at")]
    assert resumed and not resumed[0].startswith("resumed at epoch 1,"), resumed
    assert summary["epochs_run"] == 2 and summary["steps_run"] == 2 * 48
