"""Your Keras work, as it is: a plain Keras script's CNN and builder, ported in one step,
trains on an image folder as Keras would have fed it; and from Python, the command line's
protections hold (a resume of the wrong experiment is refused, Ctrl-C stops a script)."""

import hashlib
import json
import signal
from pathlib import Path

import numpy as np
import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)

import mptrain
from tests.helpers import TINY, experiment
from tests.helpers import mptrain as mptrain_cli

COLOURS = {"blue": (50, 60, 200), "green": (40, 180, 60), "red": (200, 40, 40)}

# keras.io's "Image classification from scratch", small: its own Rescaling first, then
# BatchNormalization, Dropout and a softmax; a script's `build_model(num_classes)`.
KERAS_SCRIPT = '''
import keras
from keras import layers


def build_model(num_classes):
    inputs = keras.Input((32, 32, 3))
    x = {first}
    x = layers.Conv2D(16, 3, activation="relu")(x)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(32, 3, activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    return keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x))
'''


def colour_folder(root: Path, per_class: int = 30, odd_sizes: int = 0) -> Path:
    """32x32 RGB images of three colours a human tells apart at a glance (and `odd_sizes`
    images of 40x40 among them)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, rgb in COLOURS.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            side = 40 if i < odd_sizes else 32
            pixels = np.clip(np.array(rgb) + rng.normal(0, 40, (side, side, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i:03d}.png")
    return root


@pytest.mark.parametrize("rescales", [True, False], ids=["with-rescaling", "without"])
def test_a_keras_cnn_learns_on_an_image_folder_as_keras_would_feed_it(tmp_path, rescales):
    """The same CNN learns whether it rescales its own pixels (it is given them as stored,
    0-255) or not (divided by 255); its builder imports the module beside it and is run from
    another folder; images are given at their own size, and the few that differ are resized
    with a note."""
    project = tmp_path / f"project_{int(rescales)}"
    project.mkdir()
    module = f"my_keras_train_{int(rescales)}"  # one module per test: this process caches them
    (project / f"{module}.py").write_text(KERAS_SCRIPT.format(
        first="layers.Rescaling(1.0 / 255)(inputs)" if rescales else "inputs"))
    (project / "my_cnn.py").write_text(f"from {module} import build_model\n")
    colour_folder(project / "images", odd_sizes=0 if rescales else 2)
    (project / "exp.yaml").write_text(
        "data: {dataset: image_folder, path: images}\n"
        "model: {kind: python, builder: 'my_cnn.py:build_model'}\n"
        "train: {epochs: 6, batch_size: 16, optimizer: {name: adam, kwargs: {learning_rate: 0.003}}}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = mptrain_cli("run", str(project / "exp.yaml"), "--json", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["test_accuracy"] >= 0.8, summary["notes"]
    notes = " ".join(summary["notes"])
    if rescales:
        assert "pixels given as stored, 0-255" in notes and "'rescaling' (Rescaling)" in notes
        assert "resized" not in notes
    else:
        assert "pixels given divided by 255, 0-1" in notes
        assert "6 of 90 images resized to 32x32 (the most common size" in notes
    config = (Path(summary["run_dir"]) / "config.yaml").read_text()
    assert "image_size:\n  - 32\n  - 32\n" in config


@pytest.mark.parametrize("signature, arguments", [
    ("()", "(16,), 4"),
    ("(input_shape, num_classes)", "input_shape, num_classes"),
], ids=["no-arguments", "keras-io"])
def test_builders_declaring_what_they_need_train(tmp_path, signature, arguments):
    (tmp_path / "models.py").write_text(
        "import keras\n\n"
        f"def make_model{signature}:\n"
        f"    input_shape, num_classes = {arguments}\n"
        "    inputs = keras.Input(input_shape)\n"
        "    hidden = keras.layers.Dense(16, activation='relu')(inputs)\n"
        "    return keras.Model(inputs, keras.layers.Dense(num_classes)(hidden))\n")
    config = experiment(tmp_path, "model.kind=python", f"model.builder={tmp_path / 'models.py'}:make_model",
                        "train.epochs=1")
    done = mptrain_cli("run", str(config), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"


def test_validate_refuses_a_builder_mptrain_cannot_call(tmp_path):
    (tmp_path / "models.py").write_text("import no_such_module\n\ndef build(img_size, num_classes):\n"
                                        "    pass\n")
    config = experiment(tmp_path, "model.kind=python", f"model.builder={tmp_path / 'models.py'}:build")
    done = mptrain_cli("validate", str(config), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "mptrain cannot give 'img_size'" in done.stderr  # read, not run: its import is never tried


def folder_contents(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_resuming_from_python_refuses_another_experiment_and_leaves_the_run_whole(tmp_path):
    """Another batch size, or another model, is refused by name before anything is touched;
    the command line then still finishes the run."""
    base = mptrain.load_experiment({**TINY, "output": {"dir": str(tmp_path / "runs"),
                                                       "save_model": False}})
    stopped = mptrain.run(mptrain.variant(base, {"train.max_steps": 4}), progress=False)
    run_dir = Path(stopped.run_dir)
    before = folder_contents(run_dir)
    wider = mptrain.variant(base, {"train.batch_size": 32, "train.max_steps": None})
    with pytest.raises(mptrain.ConfigError, match="the experiment given changes "
                                                  "train.batch_size"):
        mptrain.run(wider, resume=run_dir, progress=False)
    with pytest.raises(mptrain.ConfigError, match="the experiment given changes") as caught:
        mptrain.run(mptrain.load_experiment("synthetic"), resume=run_dir, progress=False)
    assert "model.hidden_units" in str(caught.value)
    with pytest.raises(mptrain.AlreadyFinished, match="train.max_steps"):
        mptrain.run(base.model_copy(update={"train": base.train.model_copy(
            update={"max_steps": 4})}), resume=run_dir, progress=False)
    assert folder_contents(run_dir) == before
    done = mptrain_cli("run", "--resume", str(run_dir), "--set", "train.max_steps=null", "--json",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    finished = json.loads(done.stdout)
    assert finished["status"] == "finished" and finished["stopped_by"] is None
    assert finished["steps_run"] == 3 * 6  # 384 training examples at batch 64, three epochs


def test_ctrl_c_in_a_python_sweep_raises_run_interrupted_once_the_run_is_saved(tmp_path, monkeypatch):
    """A Python user's Ctrl-C stops the script (a KeyboardInterrupt) after the run's
    checkpoint and summary are written; the exception carries them, and the run resumes."""
    from mptrain.report.progress import LiveProgress

    steps = []

    def press_ctrl_c_at_step_two(self, record, step_in_epoch):
        steps.append(record)
        if len(steps) == 2:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(LiveProgress, "step_finished", press_ctrl_c_at_step_two)
    experiment_ = mptrain.load_experiment({**TINY, "output": {"dir": str(tmp_path / "runs"),
                                                              "save_model": False}})
    with pytest.raises(KeyboardInterrupt) as caught:
        mptrain.run(experiment_)
    stopped = caught.value
    assert isinstance(stopped, mptrain.RunInterrupted)
    assert stopped.summary.status == "interrupted" and stopped.summary.steps_run == 2
    saved = json.loads((stopped.run_dir / "summary.json").read_text())
    assert saved["status"] == "interrupted"
    monkeypatch.undo()
    resumed = mptrain.run(experiment_, resume=stopped.run_dir, progress=False)
    assert resumed.status == "finished" and resumed.steps_run == 3 * 6


def test_a_keras_cnn_trains_with_fused_layers_as_it_does_in_float32(tmp_path):
    """The `+fused` candidate (one fused BatchNorm op, float32 convolution weight gradients)
    on the Keras script's CNN: compare runs it beside float32 from the same initial weights,
    and its loss keeps up with float32's within the rule plan's guard applies; what it saves
    is the plain Keras model."""
    from mptrain.measure.compare import CompareRecord

    (tmp_path / "my_cnn.py").write_text(KERAS_SCRIPT.format(first="inputs"))
    colour_folder(tmp_path / "images")
    (tmp_path / "exp.yaml").write_text(
        "data: {dataset: image_folder, path: images}\n"
        "model: {kind: python, builder: 'my_cnn.py:build_model'}\n"
        "train: {epochs: 4, batch_size: 16, optimizer: {name: adam, kwargs: {learning_rate: 0.003}}}\n"
        f"output: {{dir: {tmp_path / 'runs'}}}\n")
    done = mptrain_cli("compare", str(tmp_path / "exp.yaml"), "--policies", "float32,mixed_bfloat16+fused",
                       "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    baseline, fused = CompareRecord.model_validate_json(done.stdout).variants
    assert fused.summary.candidate == "mixed_bfloat16+fused" and fused.summary.compute_dtype == "bfloat16"
    assert "fused layers (model.fused_layers): 2 Conv2D, 1 BatchNormalization" in fused.summary.notes
    training = fused.verdict.training
    assert training is not None and training.share is not None and not training.behind, training
    assert not fused.verdict.refused, fused.verdict.refused
    assert fused.summary.test_accuracy >= 0.8 and baseline.summary.test_accuracy >= 0.8
    saved = keras_layers_of(Path(fused.run_dir) / "model.keras")
    assert "BatchNormalization" in saved and "Conv2D" in saved and not any("Fused" in k for k in saved)


def keras_layers_of(path: Path) -> set[str]:
    """The layer classes a saved model.keras names, the trained model's inside the one that
    takes raw pixels (`model.exported`) too (read from its config, nothing loaded)."""
    import zipfile

    def classes(layers) -> set[str]:
        return {layer["class_name"] for layer in layers}.union(
            *(classes(layer["config"]["layers"]) for layer in layers if "layers" in layer["config"]))

    return classes(json.loads(zipfile.ZipFile(path).read("config.json"))["config"]["layers"])
