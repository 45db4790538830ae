"""tf.distribute on one CPU machine: mirrored over two logical CPUs, two local workers, and
loss scaling that stays consistent across replicas.

Logical devices must be set before TensorFlow starts, so each test runs its TensorFlow work in
a fresh process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)
import yaml

from tests.helpers import tiny_raw

TWO_CPUS = ["distribute.devices=[/cpu:0, /cpu:1]"]


def python(code: str, cwd: Path, timeout: int = 600) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_mirrored_matches_one_device_in_both_loops_and_three_policies(tmp_path):
    """Same seed, same global batch (64, split 32 + 32): the losses agree with a one-device run
    within float rounding of the different summation order (and bf16/fp16 rounding)."""
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from mptrain.config import validate
from mptrain.runs.runner import run_experiment
from tests.helpers import tiny_raw
out = {{}}
for loop in ("fit", "custom"):
    for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
        for strategy in ("none", "mirrored"):
            raw = tiny_raw("output.dir={tmp_path / 'runs'}", f"train.loop={{loop}}", f"policy={{policy}}",
                           f"distribute.strategy={{strategy}}", "distribute.devices=[/cpu:0, /cpu:1]",
                           "train.epochs=1", "train.xla_optimizer_update=false")
            s = run_experiment(validate(raw, "<test>")).summary
            out[f"{{loop}} {{policy}} {{strategy}}"] = [s.replicas, s.first_step_loss, s.final_train_loss,
                                                   s.test_loss, s.status]
print(json.dumps(out))
"""
    results = json.loads(python(code, tmp_path).splitlines()[-1])
    tolerance = {"float32": 1e-3, "mixed_bfloat16": 3e-2, "mixed_float16": 1e-2}
    for loop in ("fit", "custom"):
        for policy, rel in tolerance.items():
            one = results[f"{loop} {policy} none"]
            two = results[f"{loop} {policy} mirrored"]
            assert (one[0], two[0]) == (1, 2) and one[4] == two[4] == "finished"
            for a, b in zip(one[1:4], two[1:4], strict=True):
                assert b == pytest.approx(a, rel=rel), (loop, policy, one, two)


def test_a_non_finite_gradient_on_one_replica_makes_every_replica_skip(tmp_path):
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
import numpy as np, tensorflow as tf, keras
tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)
from mptrain.training.custom_loop import build_compiled, make_train_step
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(3),
                              keras.layers.Activation("softmax", dtype="float32")])
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=256)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy())
x = np.ones((8, 4), np.float32)
y = np.zeros(8, np.int64)
build_compiled(model, x, y, strategy)
step = make_train_step(model, optimizer, None, False, strategy)
before = [w.copy() for w in model.get_weights()]
x[6, 0] = np.inf  # in the second half of the batch: replica 1's share only
dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
xb, yb = next(iter(dataset))
shares = [v.shape[0] for v in strategy.experimental_local_results(xb)]
loss, scale, *_ = step(xb, yb).numpy()
after = model.get_weights()
unchanged = all(np.array_equal(a, b) for a, b in zip(before, after))
xg, yg = next(iter(strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((np.ones((8, 4), np.float32), y)).batch(8))))
loss2, scale2, *_ = step(xg, yg).numpy()
moved = not all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
print(shares, float(scale), unchanged, float(scale2), moved)
"""
    shares, scale, unchanged, scale2, moved = python(code, tmp_path).splitlines()[-1].rsplit(" ", 4)
    assert shares.strip() == "[4, 4]"
    assert float(scale) == 128.0 and unchanged == "True"  # skipped everywhere, halved once
    assert float(scale2) == 128.0 and moved == "True"  # the next finite step applies


def test_two_local_workers_train_one_run_written_by_the_chief(tmp_path):
    """From Python (`mptrain.run(..., workers=2)`: the chief's summary, as `run --workers 2
    --json` prints it; the command itself: test_bring_your_own, test_lost_workers)."""
    import mptrain

    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}", "train.epochs=2",
                                              "train.loop=custom", "train.xla_optimizer_update=false")))
    summary = mptrain.run(mptrain.load_experiment(config), workers=2, progress=False).model_dump()
    assert summary["replicas"] == 2 and summary["status"] == "finished"
    assert "2 replicas on 2 workers" in summary["distribution"]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [Path(summary["run_dir"]).name]
    single = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config), "--json",
                             "--set", f"output.dir={tmp_path / 'single'}"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    one = json.loads(single.stdout)
    assert summary["first_step_loss"] == pytest.approx(one["first_step_loss"], rel=1e-3)
    assert summary["test_loss"] == pytest.approx(one["test_loss"], rel=2e-2)


def test_workers_that_all_stop_on_a_users_error_say_it_once_and_raise_it(tmp_path):
    """A missing data file stops every local worker alike: that is the user's error, said once
    by the command and raised from Python as in one process (it was a WorkerLost, 'the local
    workers ended without a summary (exit code 2)')."""
    import mptrain

    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}", "train.loop=custom",
                                              "data.dataset=npz", "data.path=missing.npz")))
    with pytest.raises(mptrain.DataError, match=f"^{config}: data.path {tmp_path / 'missing.npz'}: "
                                                "no such file"):
        mptrain.run(mptrain.load_experiment(config), workers=2, progress=False)
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config), "--workers", "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("missing.npz") == 1, done.stderr


def test_every_local_worker_restores_the_best_epochs_weights(tmp_path):
    """restore_best_weights under multi_worker_mirrored (no epoch beats the first by min_delta
    100: epoch 1's weights are restored): every worker keeps the best weights in its own
    folder and restores them, so each worker's share of the test set is evaluated with epoch
    1's weights, as one process evaluates it. With the chief alone keeping them, the other
    worker evaluated its share with the last epoch's."""
    import mptrain

    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(
        f"output.dir={tmp_path / 'runs'}", "train.loop=custom", "train.xla_optimizer_update=false",
        "train.early_stopping={monitor: loss, min_delta: 100, patience: 5, "
        "restore_best_weights: true}")))
    summary = mptrain.run(mptrain.load_experiment(config), workers=2, progress=False)
    one = mptrain.run(mptrain.load_experiment(config), progress=False)
    assert summary.status == one.status == "finished"
    assert "weights restored from epoch 1" in " ".join(summary.notes)
    assert summary.test_loss == pytest.approx(one.test_loss, rel=1e-3)  # 3% off, chief alone


def test_multi_worker_without_tf_config_says_how(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}", "train.loop=custom",
                                              "distribute.strategy=multi_worker_mirrored")))
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in __import__("os").environ.items() if k != "TF_CONFIG"})
    assert done.returncode == 2 and "reads the cluster from $TF_CONFIG" in done.stderr
    assert "--workers N" in done.stderr and "Traceback" not in done.stderr
    fit = subprocess.run([sys.executable, "-m", "mptrain", "validate", str(config), "--set",
                          "train.loop=fit"], cwd=tmp_path, capture_output=True, text=True)
    assert fit.returncode == 2 and "keras-team/keras#20585" in fit.stderr


def test_a_mirrored_fit_evaluates_any_test_set_size_as_one_device_would(tmp_path):
    """A test set smaller than a batch, of a size two replicas do not divide (101 at batch
    128: Keras' first-batch build failed on its 51/50 split), is evaluated whole: the run
    finishes with its model saved, and the model evaluated on one device gives the same test
    accuracy. A global batch the replicas do not divide is refused before anything runs."""
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
import keras
from mptrain.config import validate, variant
from mptrain.errors import ConfigError
from mptrain.runs.experiment import prepare
from mptrain.runs.runner import run_experiment
from tests.helpers import tiny_raw
raw = tiny_raw("output.dir={tmp_path / 'runs'}", "distribute.strategy=mirrored",
               "distribute.devices=[/cpu:0, /cpu:1]", "data.test_size=101", "data.validation_split=0.2",
               "train.batch_size=128", "train.epochs=2", "output.save_model=true")
config = validate(raw, "<test>")
s = run_experiment(config).summary
one = prepare(variant(config, {{"distribute.strategy": "none", "distribute.devices": None}}))
model = keras.saving.load_model(s.run_dir + "/model.keras")
model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
alone = model.evaluate(one.batches.test, return_dict=True, verbose=0)
try:
    prepare(variant(config, {{"train.batch_size": 127}}))
    refused = ""
except ConfigError as exc:
    refused = str(exc)
print(json.dumps([s.status, s.replicas, s.test_examples, s.test_accuracy, alone["accuracy"], refused]))
"""
    status, replicas, examples, accuracy, alone, refused = json.loads(python(code, tmp_path).splitlines()[-1])
    assert (status, replicas, examples) == ("finished", 2, 101)
    assert abs(accuracy - alone) <= 1 / 101 + 1e-6
    assert "train.batch_size 127 does not split evenly over the 2 replicas" in refused
