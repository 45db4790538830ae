"""Checkpoints and resume, interrupts and kills with real processes, divergence recovery,
hostile input: nothing trained is lost and no folder misleads."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from mptrain.runs.runner import Start, run_experiment
from tests.helpers import mptrain_process, tiny_raw, wait_catching, wait_for

# 384 training examples in batches of 32: 12 steps an epoch
DETERMINISTIC = ("deterministic=true", "train.batch_size=32", "output.save_model=true",
                 "train.loss_scale.initial_scale=1024", "train.loss_scale.dynamic_growth_steps=5")


def final_weights(run_dir: Path):
    import keras

    return keras.saving.load_model(run_dir / "model.keras", compile=False).get_weights()


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_stopped_after_an_epoch_and_resumed_is_bit_identical(tiny_config, loop, policy):
    from mptrain.runs.resume import resume_config

    overrides = (*DETERMINISTIC, f"train.loop={loop}", f"policy={policy}")
    whole = run_experiment(tiny_config(*overrides, "train.epochs=3"))
    first = run_experiment(tiny_config(*overrides, "train.epochs=1"))
    config = resume_config(first.run_dir, None, ["train.epochs=3"])
    resumed = run_experiment(config, Start(resume=first.run_dir))
    for a, b in zip(final_weights(whole.run_dir), final_weights(resumed.run_dir), strict=True):
        np.testing.assert_array_equal(a, b)
    assert resumed.summary.epochs_run == 3 and resumed.summary.steps_run == 36
    assert [r.step for r in resumed.steps] == list(range(1, 37))
    if policy == "mixed_float16":
        # the resumed run continued with the saved loss scale, not the initial one
        assert first.summary.loss_scale.final > 1024
        assert resumed.steps[12].loss_scale >= first.summary.loss_scale.final
        assert resumed.summary.loss_scale == whole.summary.loss_scale


def test_resumed_run_counts_the_skips_before_its_checkpoint(tiny_config):
    """A scale far too large makes the first steps skip; the resumed run's total must still
    count them (they live only in the records before the checkpoint)."""
    from mptrain.runs.resume import resume_config

    overrides = (*DETERMINISTIC, "policy=mixed_float16", "train.loss_scale.initial_scale=1e12",
                 "train.loop=custom")
    whole = run_experiment(tiny_config(*overrides, "train.epochs=2"))
    first = run_experiment(tiny_config(*overrides, "train.epochs=1"))
    resumed = run_experiment(resume_config(first.run_dir, None, ["train.epochs=2"]),
                             Start(resume=first.run_dir))
    skipped = first.summary.loss_scale.skipped_steps
    assert skipped > 0
    assert resumed.summary.loss_scale.skipped_steps == whole.summary.loss_scale.skipped_steps >= skipped


def long_experiment(tmp_path: Path, *overrides: str) -> Path:
    """Enough steps that a signal arrives mid-training: 8 epochs of 48 steps."""
    path = tmp_path / "long.yaml"
    raw = tiny_raw(f"output.dir={tmp_path / 'runs'}", *DETERMINISTIC, "train.batch_size=8",
                   "train.epochs=8", "model.hidden_units=[64, 64]",
                   "train.checkpoint.every_steps=10", *overrides)
    path.write_text(yaml.safe_dump(raw))
    return path


def only_run_dir(tmp_path: Path) -> Path:
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return run_dir


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_after_the_step_checkpoints_and_resumes_identically(tmp_path, sig, code):
    config = long_experiment(tmp_path)
    process = mptrain_process(tmp_path, "run", str(config), "--json")
    wait_for(process, "epoch 2:")
    time.sleep(0.3)  # somewhere inside epoch 3
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    summary = json.loads(stdout)
    run_dir = Path(summary["run_dir"])
    assert summary["status"] == "interrupted" and f"mptrain run --resume {run_dir}" in stderr
    assert (run_dir / "checkpoints" / "checkpoint").is_file()
    steps_done = summary["steps_run"]
    assert 96 <= steps_done < 8 * 48  # stopped inside epoch 3 or later, not at the start
    if sig == signal.SIGTERM:  # stopped as by Ctrl-C (one handler): its resume is tested once
        return
    resumed = subprocess.run([sys.executable, "-m", "mptrain", "run", "--resume", str(run_dir),
                              "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "finished"
    again = subprocess.run([sys.executable, "-m", "mptrain", "run", "--resume", str(run_dir)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "nothing to do" in again.stderr and "finished" in again.stderr
    # the same weights as a run never interrupted
    whole = run_experiment(validate_file(config, tmp_path / "whole"))
    for a, b in zip(final_weights(whole.run_dir), final_weights(run_dir), strict=True):
        np.testing.assert_array_equal(a, b)


def test_second_ctrl_c_abandons_at_once_and_says_where_to_resume(tmp_path):
    process = mptrain_process(tmp_path, "run", str(long_experiment(tmp_path)))
    wait_for(process, "epoch 1:")
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr
    run_dir = only_run_dir(tmp_path)
    assert f"mptrain run --resume {run_dir}" in " ".join(stderr.split())
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert (run_dir / "checkpoints" / "checkpoint").is_file()


def test_sigterm_during_start_up_ends_with_a_line_and_one_json_object(tmp_path):
    """A scheduler's SIGTERM while TensorFlow starts (srun --kill-on-bad-exit after another
    task failed): Python's default ended the process without a word; it says why, exits 143
    and, with --json, still prints one object."""
    process = mptrain_process(tmp_path, "run", str(long_experiment(tmp_path)), "--json")
    wait_catching(process, signal.SIGTERM)  # mptrain's handler is in place: it is starting up
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-2000:]
    assert "stopped by SIGTERM outside training" in stderr and "Traceback" not in stderr
    assert json.loads(stdout) == {"error": "stopped by SIGTERM outside training (while starting up, "
                                           "or after it ended)", "exit_code": 143, "run_dir": None}


def validate_file(path: Path, output: Path):
    from mptrain.config import load_config

    return load_config(path, [f"output.dir={output}"])


def test_sigkill_leaves_a_resumable_folder_that_does_not_claim_to_be_done(tmp_path):
    config = long_experiment(tmp_path, "train.loop=custom")
    process = mptrain_process(tmp_path, "run", str(config), "--json")
    wait_for(process, "epoch 2:")
    time.sleep(0.3)
    process.kill()
    process.communicate(timeout=60)
    run_dir = only_run_dir(tmp_path)
    state = json.loads((run_dir / "summary.json").read_text())
    assert state["status"] == "running" and state["pid"] == process.pid
    assert not (run_dir / "model.keras").exists()
    for line in (run_dir / "steps.jsonl").read_text().splitlines():
        json.loads(line)  # whole lines only
    resumed = subprocess.run([sys.executable, "-m", "mptrain", "run", "--resume", str(run_dir),
                              "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["status"] == "finished" and summary["steps_run"] == 8 * 48
    whole = run_experiment(validate_file(config, tmp_path / "whole"))
    for a, b in zip(final_weights(whole.run_dir), final_weights(run_dir), strict=True):
        np.testing.assert_array_equal(a, b)


def test_resume_refuses_other_settings_and_names_them(tmp_path):
    first = run_experiment(validate_file(long_experiment(tmp_path, "train.epochs=1"), tmp_path / "runs"))
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", "--resume", str(first.run_dir),
                           "--set", "policy=mixed_bfloat16", "--set", "train.batch_size=16"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "policy, train.batch_size" in done.stderr and "may change only train.epochs" in done.stderr


def test_divergence_restores_then_stops_with_exit_3(tmp_path):
    config = tmp_path / "nan.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(
        f"output.dir={tmp_path / 'runs'}", "train.optimizer={name: sgd, kwargs: {learning_rate: 1e6}}",
        "train.recovery.max_trials=2", "train.epochs=2")))
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "diverged"
    assert "after 2 recoveries from the last good checkpoint" in summary["stop_reason"]
    assert re.search(r"NaN/inf loss at epoch \d, step \d+", summary["stop_reason"])
    assert sum("restored the last good checkpoint" in n for n in summary["notes"]) == 2
    assert (Path(summary["run_dir"]) / "checkpoints" / "checkpoint").is_file()
    assert "diverged" in done.stderr and "Traceback" not in done.stderr


def test_recovery_restores_the_last_good_weights_and_trains_on(tiny_config, tmp_path):
    """A few outlier examples (1e30: finite, so the data checks pass) give a huge loss and a
    gradient that would wreck plain SGD's weights for good. Each time the guard restores the
    last good checkpoint; training then goes on to a normal result. Without the restore every
    later loss stays huge and the run ends as diverged."""
    rng = np.random.default_rng(1)
    y = np.arange(320) % 4
    x = (rng.normal(0, 0.5, (320, 16)) + 2 * y[:, None]).astype(np.float32)
    x[[5, 77, 150], :] = 1e30
    np.savez(tmp_path / "outliers.npz", x_train=x[:256], y_train=y[:256], x_test=x[256:],
             y_test=y[256:])
    result = run_experiment(tiny_config(
        "data.dataset=npz", f"data.path={tmp_path / 'outliers.npz'}", "data.validation_split=0",
        "train.optimizer={name: sgd, kwargs: {learning_rate: 0.05}}", "train.batch_size=32",
        "train.checkpoint.every_steps=2", "train.recovery.loss_upper_bound=1000",
        "train.recovery.max_trials=10", "train.epochs=3"))
    s = result.summary
    restored = [n for n in s.notes if "restored the last good checkpoint" in n]
    assert s.status == "finished", s.stop_reason
    assert 2 <= len(restored) <= 9  # each outlier batch once per epoch (two may share one)
    huge = [r for r in result.steps if not r.loss < 1000]
    assert len(huge) == len(restored)  # every huge loss was one outlier batch, then recovered
    assert s.test_loss < 3.0  # wrecked weights give losses near 1e26


def test_loss_scale_collapse_is_divergence_with_advice(tiny_config, tmp_path):
    x = np.full((256, 16), 1e5, np.float32)  # overflows float16 in every batch
    np.savez(tmp_path / "huge.npz", x_train=x, y_train=np.arange(256) % 4, x_test=x[:32],
             y_test=np.arange(32) % 4)
    result = run_experiment(tiny_config("policy=mixed_float16", "data.dataset=npz",
                                        f"data.path={tmp_path / 'huge.npz'}",
                                        "train.recovery.collapse_steps=5"))
    s = result.summary
    assert s.status == "diverged" and s.steps_run == 5 and s.loss_scale.skipped_steps == 5
    assert "loss scale collapsed" in s.stop_reason and "mixed_bfloat16" in s.stop_reason


def test_loss_upper_bound_counts_as_divergence(tiny_config):
    result = run_experiment(tiny_config("train.recovery.loss_upper_bound=0.01",
                                        "train.recovery.max_trials=1"))
    assert result.summary.status == "diverged" and "above train.recovery.loss_upper_bound" in \
        result.summary.stop_reason


def test_runs_started_in_the_same_second_never_collide(tmp_path):
    from mptrain.runs.folder import unique_folder

    folders = {unique_folder(tmp_path, "compare-x") for _ in range(3)}
    assert len(folders) == 3 and all(f.is_dir() for f in folders)


@pytest.mark.parametrize(("overrides", "message"), [
    (["output.dir=README.md"], "bad.yaml: output.dir {tmp}/README.md: is a file"),
    (["output.dir=/proc/mptrain-runs"], "cannot create folders in /proc"),
    (["data.dataset=npz", "data.path=README.md"],
     "README.md: not a readable .npz archive (not a zip archive)"),
    (["model.hidden_units=[100000, 100000]", "data.input_shape=[784]"],
     "GiB to train (weights, gradients, optimizer state and activations"),
    (["train.batch_size=1000"], "train.batch_size 1000 is larger than the 384 training examples"),
])
def test_hostile_values_are_refused_before_training(tmp_path, overrides, message):
    (tmp_path / "README.md").write_text("not a folder")
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}", *overrides)))
    if overrides[0].startswith("output.dir"):
        config.write_text(yaml.safe_dump(tiny_raw(*overrides)))
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    message = message.format(tmp=tmp_path)
    assert done.returncode == 2 and message in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_full_disk_is_found_before_training(tiny_config, monkeypatch):
    import shutil

    from mptrain.errors import ConfigError

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10, 10, 2**20))
    with pytest.raises(ConfigError, match="only 1 MiB free on its disk"):
        run_experiment(tiny_config())


@pytest.mark.parametrize(("make", "message"), [
    (lambda x: x.__setitem__((3, 2), np.nan), "1 input values are NaN or infinite"),
    (lambda x: None, "labels go up to 9 but model.num_classes is 4"),
])
def test_bad_data_values_are_found_before_training(tiny_config, tmp_path, make, message):
    from mptrain.errors import MptrainError

    x = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32)
    make(x)
    y = np.arange(64) % (4 if "NaN" in message else 10)
    np.savez(tmp_path / "bad.npz", x_train=x, y_train=y, x_test=x[:8], y_test=y[:8])
    with pytest.raises(MptrainError, match=message):
        run_experiment(tiny_config("data.dataset=npz", f"data.path={tmp_path / 'bad.npz'}"))
    assert not (tmp_path / "runs").exists()  # refused before any folder was made


def test_a_failure_mid_run_keeps_the_folder_as_failed(tiny_config, tmp_path, monkeypatch):
    from mptrain.training import custom_loop

    original = custom_loop.CustomLoop.evaluate

    def broken(self, dataset, prefix=""):
        if not prefix:
            raise RuntimeError("the evaluation broke")
        return original(self, dataset, prefix)

    monkeypatch.setattr(custom_loop.CustomLoop, "evaluate", broken)
    with pytest.raises(RuntimeError):
        run_experiment(tiny_config("train.loop=custom"))
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = json.loads((run_dir / "summary.json").read_text())
    assert state["status"] == "failed" and "the evaluation broke" in state["reason"]
    assert (run_dir / "checkpoints" / "checkpoint").is_file()  # what was trained is kept
