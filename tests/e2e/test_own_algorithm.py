"""A model that carries its own training algorithm (issue 66), trained for real through the
command line: keras.io's knowledge distillation and DCGAN as docs/examples writes them (a
compile of their own, their own train_step, two optimizers, images without labels), under
float32, mixed_bfloat16 and mixed_float16; the loss scaling of every optimizer; a step that
never scales a loss refused at its first step; what the run saves, and a resume."""

import json
from pathlib import Path

import numpy as np
import yaml

from tests.helpers import example, mptrain

POLICIES = "float32,mixed_bfloat16,mixed_float16"


def blobs_npz(path: Path, count=320, size=8, seed=0) -> Path:
    """Grey 8x8 images of a bright blob at a random place, x_train and x_test alone: images
    without labels, as a GAN trains on them."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    centres = rng.uniform(2, size - 2, (count, 2))
    images = np.exp(-((yy - centres[:, :1, None]) ** 2 + (xx - centres[:, 1:, None]) ** 2) / 3.0)
    pixels = (255 * images[..., None]).astype(np.uint8)
    np.savez(path, x_train=pixels[:256], x_test=pixels[256:])
    return path


def experiment_of(tmp_path: Path, name: str, **sections) -> Path:
    """docs/examples/NAME.yaml with its sections updated: small data, short runs."""
    path = example(tmp_path, name)
    raw = yaml.safe_load(path.read_text())
    for key, values in sections.items():
        raw[key] = {**raw.get(key, {}), **values} if key != "data" else values
    raw["output"] = {"dir": str(tmp_path / "runs")}
    path.write_text(yaml.safe_dump(raw))
    return path


def gan(tmp_path: Path, **train) -> Path:
    blobs_npz(tmp_path / "blobs.npz")
    return experiment_of(tmp_path, "gan", data={"dataset": "npz", "path": "blobs.npz"},
                         model={"kwargs": {"latent_dim": 16, "width": 8}},
                         train={"epochs": 3, "batch_size": 32, **train})


def distiller(tmp_path: Path, **train) -> Path:
    return experiment_of(tmp_path, "distiller", data={
        "dataset": "synthetic", "input_shape": [8, 8, 1], "num_classes": 4, "noise": 0.6,
        "train_size": 384, "test_size": 128}, model={"kwargs": {"teacher_width": 16}},
        train={"epochs": 4, "batch_size": 32, **train})


def compared(tmp_path: Path, config: Path) -> list:
    """compare of every policy, its variants (float32 first) with their summaries."""
    from mptrain.measure.compare import CompareRecord

    done = mptrain("compare", str(config), "--policies", POLICIES, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return CompareRecord.model_validate_json(done.stdout).variants


def scales(summary: dict, name: str) -> list[float]:
    """An optimizer's loss scale after each step of a run (its steps.jsonl)."""
    lines = (Path(summary["run_dir"]) / "steps.jsonl").read_text().splitlines()
    return [json.loads(line)["loss_scales"][name] for line in lines]


def test_a_distiller_trains_as_it_is_written_under_every_policy(tmp_path):
    """keras.io's Distiller, its compile never called again by mptrain: the student learns
    under each policy (a run each, in this process; the GAN's test compares in turns),
    judged by the accuracy it was compiled with; its step reports no loss of its own (Keras'
    tracker stays 0, left out), so the step's loss is the two it reports; under
    mixed_float16 its optimizer scales the loss."""
    config = distiller(tmp_path)
    summaries = []
    for policy in POLICIES.split(","):
        done = mptrain("run", str(config), "--json", "--set", f"policy={policy}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        summaries.append(json.loads(done.stdout))
    for summary in summaries:
        assert summary["status"] == "finished", summary["policy"]
        assert summary["objective"] == "Distiller's own training step (4 classes)"
        assert summary["quality"]["metric"] == "sparse_categorical_accuracy"
        assert summary["quality"]["value"] > 0.6, summary["quality"]  # 4 classes: 0.25 by chance
        assert summary["step_loss"] == "distillation_loss + student_loss"
        assert "loss" not in summary["test_metrics"] and "student_loss" in summary["test_metrics"]
        assert summary["output_dtype"] == "float32"
    f16 = summaries[2]
    assert f16["compute_dtype"] == "float16" and f16["loss_scale"]["final"] > 0
    assert any("the outputs of Distiller's teacher, student were float16" in n for n in f16["notes"])


def test_a_gan_with_two_optimizers_trains_on_images_alone_with_each_loss_scaled(tmp_path):
    """keras.io's DCGAN on images without labels (an .npz of x arrays alone), under every
    policy: under mixed_float16 both of its optimizers (d_optimizer, g_optimizer) scale their
    losses with the experiment's settings (the scale grows every 4 good steps from 1,024),
    each reported on its own; its d_loss and g_loss judge no quality, and the verdicts say so."""
    rows = compared(tmp_path, gan(tmp_path, epochs=2, loss_scale={"initial_scale": 1024,
                                                                  "dynamic_growth_steps": 4}))
    for row in rows:
        summary = row.summary.model_dump(mode="json")
        assert summary["status"] == "finished" and summary["quality"] is None, row
        assert summary["objective"] == "GAN's own training step (no labels)"
        assert summary["step_loss"] == "d_loss + g_loss"
        assert {"d_loss", "g_loss"} <= set(summary["final_metrics"])
        assert any("not evaluated: GAN has no test_step and no call" in n for n in summary["notes"])
    assert all("quality not judged" in row.verdict.words() for row in rows[1:]), rows
    f16 = rows[2].summary.model_dump(mode="json")
    assert set(f16["loss_scales"]) == {"d_optimizer", "g_optimizer"}  # not the unused `optimizer`
    for name in ("d_optimizer", "g_optimizer"):
        assert max(scales(f16, name)) > 1024, (name, scales(f16, name))


def test_a_step_that_applies_an_optimizer_without_scaling_its_loss_is_refused(tmp_path):
    """The GAN with g_optimizer's scaling line taken out: under mixed_float16 its gradients
    would be divided by the scale in silence (in plain Keras too). Refused at the first step,
    naming that optimizer and the line to add, exit 2, and no run left behind; under
    mixed_bfloat16 (no loss scaling) the same step trains."""
    config = gan(tmp_path, epochs=1)
    source = (tmp_path / "gan.py").read_text()
    line = "            scaled = self.g_optimizer.scale_loss(g_loss)  # for mixed_float16's loss scaling\n"
    assert line in source
    (tmp_path / "gan.py").write_text(source.replace(line, "            scaled = g_loss\n"))
    done = mptrain("run", str(config), "--set", "policy=mixed_float16", cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "applied self.g_optimizer without calling self.g_optimizer.scale_loss" in said
    assert "self.d_optimizer without" not in said and "scaled = self.g_optimizer.scale_loss(loss)" in said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    done = mptrain("run", str(config), "--set", "policy=mixed_bfloat16", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_gan_resumes_with_each_optimizers_scale_and_saves_what_keras_loads(tmp_path):
    """Stopped after 5 steps under mixed_float16 and resumed: each optimizer's scale goes on
    from its checkpoint (2,048 after 4 good steps, never back to 1,024). The finished run
    keeps the GAN's weights (Keras cannot serialise it) and each sub-model as a Keras model:
    the generator loads with keras.models.load_model and makes images of the data's shape,
    and the weights load into the model the builder returns, as the run's note says."""
    import keras

    config = gan(tmp_path, loss_scale={"initial_scale": 1024, "dynamic_growth_steps": 4})
    stopped = mptrain("run", str(config), "--json", "--set", "policy=mixed_float16",
                      "--set", "train.max_steps=5", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    run_dir = json.loads(stopped.stdout)["run_dir"]
    done = mptrain("run", "--resume", run_dir, "--json", "--set", "train.max_steps=null", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "finished" and summary["steps_run"] == 24
    for name in ("d_optimizer", "g_optimizer"):
        assert scales(summary, name)[3:6] == [2048.0, 2048.0, 2048.0], scales(summary, name)
    folder = Path(run_dir)
    assert not (folder / "model.keras").exists() and (folder / "model.weights.h5").exists()
    note = next(n for n in summary["notes"] if n.startswith("no model.keras"))
    assert "model.load_weights(PATH)" in note and "generator.keras" in note
    generator = keras.models.load_model(folder / "generator.keras")
    assert generator.predict(np.zeros((2, 16)), verbose=0).shape == (2, 8, 8, 1)
    import importlib.util

    spec = importlib.util.spec_from_file_location("gan_example", tmp_path / "gan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rebuilt = module.build((8, 8, 1), latent_dim=16, width=8)
    rebuilt.built = True
    rebuilt.load_weights(folder / "model.weights.h5")
    assert all(np.allclose(a, b) for a, b in zip(rebuilt.generator.get_weights(),
                                                  generator.get_weights(), strict=True))


def test_train_monitor_names_the_figure_that_judges_and_a_figure_it_lacks_is_refused(tmp_path):
    """The distiller judged by its student_loss (lower is better), as train.monitor names
    it; the GAN refuses a figure its step does not report, naming those it does, before
    anything is written."""
    summary = json.loads(mptrain("run", str(distiller(tmp_path, epochs=1)), "--json", "--set",
                                 "train.monitor=student_loss", cwd=tmp_path).stdout)
    assert summary["quality"]["metric"] == "student_loss"
    assert summary["quality"]["higher_is_better"] is False
    assert summary["quality"]["value"] == summary["test_metrics"]["student_loss"]
    (tmp_path / "gan").mkdir()
    done = mptrain("run", str(gan(tmp_path / "gan", epochs=1)), "--set", "train.monitor=accuracy",
                   cwd=tmp_path / "gan")
    assert done.returncode == 2 and "train.monitor accuracy: not a figure GAN's step reports (it " \
        "reports loss, d_loss, g_loss, each with val_ first" in " ".join(done.stderr.split()), \
        done.stderr[-2000:]
    assert not any((tmp_path / "gan" / "runs").iterdir())
