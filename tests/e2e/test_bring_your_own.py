"""What users bring of their own, through the command line as they run it: every data kind
with nothing but its required keys, their own models' outputs, diagnose and memory on any
model, --workers on files, paths beside the experiment file, validate that predicts run."""

import gzip
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests import datafiles
from tests.helpers import experiment, mptrain, refuses, run_json


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def mnist_npz(path: Path, n=200) -> Path:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, n)
    x = (rng.integers(0, 40, (n, 28, 28)) + 20 * y[:, None, None]).astype(np.uint8)
    np.savez(path, x_train=x, y_train=y, x_test=x[:40], y_test=y[:40])
    return path


def fashion_folder(folder: Path, n=200) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", n), ("t10k", 40)):
        y = rng.integers(0, 10, count).astype(np.uint8)
        x = (rng.integers(0, 40, (count, 28, 28)) + 20 * y[:, None, None]).astype(np.uint8)
        for kind, array in (("images-idx3", x), ("labels-idx1", y)):
            header = struct.pack(">BBBB", 0, 0, 8, array.ndim) + b"".join(
                struct.pack(">I", d) for d in array.shape)
            with gzip.open(folder / f"{prefix}-{kind}-ubyte.gz", "wb") as fh:
                fh.write(header + array.tobytes())
    return folder


def required_keys(kind: str, folder: Path) -> dict:
    """The data section with only the keys a kind requires, on files the test writes."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "npz":
        rng = np.random.default_rng(0)
        y = rng.integers(0, 3, 200)
        x = (rng.normal(size=(200, 8)) + y[:, None]).astype(np.float32)
        np.savez(folder / "d.npz", x_train=x, y_train=y, x_test=x[:40], y_test=y[:40])
        return {"dataset": "npz", "path": "d.npz"}
    if kind == "mnist":
        return {"dataset": "mnist", "path": str(mnist_npz(folder / "mnist.npz").name)}
    if kind == "fashion_mnist":
        return {"dataset": "fashion_mnist", "path": fashion_folder(folder / "fashion").name}
    if kind == "image_folder":
        datafiles.image_folder(folder / "photos", per_class=60)
        return {"dataset": "image_folder", "path": "photos"}
    if kind == "text_folder":
        datafiles.text_folder(folder / "texts", per_class=60)
        return {"dataset": "text_folder", "path": "texts"}
    datafiles.csv_table(folder / "table.csv", rows=240)
    return {"dataset": "csv", "path": "table.csv", "label_column": "species"}


@pytest.mark.parametrize("kind", ["npz", "mnist", "fashion_mnist", "image_folder", "text_folder",
                                  "csv"])
def test_every_data_kind_runs_with_only_its_required_keys(tmp_path, kind):
    """The data kinds read from users' files, with the defaults a user gets (seed 0, the
    default model, batch and epochs, num_classes from the data, runs/ beside the file): a CSV
    once crashed on every one of them. (The generated kinds have no required keys; the
    built-in experiments run them.)"""
    config = write_yaml(tmp_path / "exp" / "exp.yaml", {"data": required_keys(kind, tmp_path / "exp")})
    done = mptrain("run", str(config), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    s = json.loads(done.stdout)
    assert s["status"] == "finished" and s["seed"] == 0 and s["test_accuracy"] is not None
    run_dir = Path(s["run_dir"])
    assert run_dir.parent == tmp_path / "exp" / "runs"  # beside the experiment file
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    classes = {"npz": 3, "csv": 3, "image_folder": 3, "text_folder": 3}.get(kind, 10)
    assert resolved["model"]["num_classes"] == classes  # from the data


def test_csv_streams_in_both_loops_and_under_compare(tmp_path):
    data = required_keys("csv", tmp_path)
    config = write_yaml(tmp_path / "csv.yaml", {"data": data, "train": {"epochs": 1},
                                                "model": {"hidden_units": [16]}})
    custom = mptrain("run", str(config), "--json", "--set", "train.loop=custom", cwd=tmp_path)
    assert custom.returncode == 0, custom.stderr[-2000:]
    assert json.loads(custom.stdout)["status"] == "finished"
    compared = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--json",
                       cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert [row["summary"]["status"] for row in json.loads(compared.stdout)["variants"]] == \
        ["finished", "finished"]


@pytest.mark.parametrize("kind", ["image_folder", "text_folder"])
def test_two_local_workers_train_on_files(tmp_path, kind):
    """Collective ops must be configured before anything else touches TensorFlow; loading
    files used to touch it first ("Collective ops must be configured at program startup")."""
    config = write_yaml(tmp_path / "w.yaml", {"data": required_keys(kind, tmp_path),
                                              "model": {"hidden_units": [16]},
                                              "train": {"epochs": 1, "loop": "custom",
                                                        "batch_size": 32}})
    done = mptrain("run", str(config), "--workers", "2", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    s = json.loads(done.stdout)
    assert s["replicas"] == 2 and s["status"] == "finished"


def test_a_model_ending_in_logits_trains_with_from_logits(tmp_path):
    """A builder whose last layer is Dense(num_classes) without softmax: the loss must treat
    its output as logits, so the first loss is near ln(3), not 8.65."""
    models = datafiles.user_models(tmp_path)
    for builder in ("functional_logits", "subclassed"):
        s = run_json(tmp_path, experiment(tmp_path, "model.kind=python",
                                          f"model.builder={models}:{builder}", "data.num_classes=3",
                                          "model.num_classes=3", "train.epochs=2",
                                          name=f"{builder}.yaml"))
        assert abs(s["first_step_loss"] - math.log(3)) < 0.35, (builder, s["first_step_loss"])
        assert any("output is logits" in n for n in s["notes"]), s["notes"]
        assert s["final_train_loss"] < s["first_step_loss"] and s["test_accuracy"] > 0.5


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_a_subclassed_softmax_model_is_probabilities_in_16_bits(tmp_path, policy):
    """The most common hand-written classifier, under the policies mptrain recommends: its
    16-bit softmax rows sum to 1 only within bfloat16's (or float16's) precision. run,
    diagnose and memory all read the same output, on an experiment that leaves
    model.num_classes to the data."""
    models = datafiles.user_models(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={models}:subclassed_softmax",
                        f"policy={policy}", "train.epochs=1")
    s = run_json(tmp_path, config)
    assert any("output is probabilities" in n for n in s["notes"]), s["notes"]
    for command in (["diagnose", "--steps", "2"], ["memory", "--no-measure"]):
        done = mptrain(command[0], str(config), *command[1:], "--json", cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr[-2000:])


@pytest.mark.parametrize("kind", ["image_folder", "csv", "npz"])
def test_data_with_one_class_is_refused_before_training(tmp_path, kind):
    """One class trains to loss 0 and accuracy 1: a run that "succeeds" at nothing."""
    if kind == "image_folder":
        datafiles.image_folder(tmp_path / "photos", classes=("circle",), per_class=40)
        data, where = {"dataset": "image_folder", "path": "photos"}, "photos"
    elif kind == "csv":
        (tmp_path / "t.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 7},cat\n" for i in range(200)))
        data, where = {"dataset": "csv", "path": "t.csv", "label_column": "y"}, "t.csv (data.label_column y)"
    else:
        x = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
        np.savez(tmp_path / "d.npz", x_train=x, y_train=np.full(200, 2), x_test=x[:40],
                 y_test=np.arange(40) % 3)
        data, where = {"dataset": "npz", "path": "d.npz"}, "d.npz"
    config = write_yaml(tmp_path / "one.yaml", {"data": data, "train": {"batch_size": 16}})
    for command in ("validate", "run"):
        said = " ".join(refuses(tmp_path, config, "every training example has the same class",
                                "nothing to learn", command=command).split())
        assert str(tmp_path / where) in said, said


def test_a_model_whose_output_cannot_be_read_asks_what_it_is(tmp_path):
    models = datafiles.user_models(tmp_path)
    config = experiment(tmp_path, "model.kind=python", f"model.builder={models}:ambiguous")
    refuses(tmp_path, config, "cannot tell whether the model's output is probabilities or logits",
            "set model.output_activation", command="run")
    said = experiment(tmp_path, "model.kind=python", f"model.builder={models}:ambiguous",
                      "model.output_activation=linear", "train.epochs=1", name="said.yaml")
    assert run_json(tmp_path, said)["status"] == "finished"


MODEL_KINDS = {
    "functional": ["model.kind=python", "model.builder={models}:functional_logits"],
    "sequential": ["model.kind=python", "model.builder={models}:sequential"],
    "custom_layer": ["model.kind=python", "model.builder={models}:custom_layer"],
    "subclassed": ["model.kind=python", "model.builder={models}:subclassed"],
    "saved": ["model.kind=saved", "model.path={saved}"],
    "application": ["data.input_shape=[32, 32, 3]", "model.kind=application",
                    "model.name=MobileNet", "model.kwargs={alpha: 0.25}"],
    "keras_hub": ["data.input_shape=[32, 32, 3]", "model.kind=keras_hub",
                  "model.backbone=ResNetBackbone",
                  "model.kwargs={input_conv_filters: [64], input_conv_kernel_sizes: [3], "
                  "stackwise_num_filters: [64], stackwise_num_blocks: [1], "
                  "stackwise_num_strides: [1], block_type: basic_block, image_shape: [32, 32, 3]}"],
}


@pytest.mark.parametrize("kind", ["npz", "image_folder", "text_folder", "csv"])
def test_every_command_works_with_only_the_required_keys(tmp_path, kind):
    """diagnose once rebuilt the model from the experiment as written (num_classes: None);
    every command must work from the one prepared experiment, with what the data fills in."""
    data = required_keys(kind, tmp_path / "exp")
    config = write_yaml(tmp_path / "exp" / "exp.yaml", {"data": data, "model": {"hidden_units": [16]},
                                                        "train": {"batch_size": 32}})
    assert mptrain("validate", str(config), cwd=tmp_path).returncode == 0
    for command in (["lint"], ["diagnose", "--steps", "2"], ["memory", "--no-measure"]):
        done = mptrain(command[0], str(config), *command[1:], "--json", cwd=tmp_path)
        assert done.returncode in ((0, 1) if command == ["lint"] else (0,)), (command, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
        if command[0] == "diagnose":
            assert json.loads(done.stdout)["layers"], command
        if command[0] == "memory":  # the experiment's own optimizer, not Adam's two slots
            assert "rmsprop keeps 1 float32 value per weight" in json.loads(done.stdout)["why"]


@pytest.mark.parametrize("kind", list(MODEL_KINDS))
def test_diagnose_and_memory_work_on_every_model_kind(tiny_config, tmp_path, kind):
    from mptrain.diagnostics.numerics import diagnose
    from mptrain.measure.memory import plan_memory

    if kind == "keras_hub":
        import keras_hub  # noqa: F401  (a broken install fails here, never skips)
    models = datafiles.user_models(tmp_path)
    saved = tmp_path / "saved.keras"
    if kind == "saved":
        import keras

        inputs = keras.Input((16,))
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(hidden)).save(saved)
    overrides = [o.replace("{models}", str(models)).replace("{saved}", str(saved))
                 for o in MODEL_KINDS[kind]]
    config = tiny_config(*overrides, "train.batch_size=16", "data.train_size=128", "data.test_size=32")
    d = diagnose(config, steps=2)
    assert d.layers and any(n.gradient_max > 0 for n in d.layers), kind
    assert any(n.bfloat16_error is not None for n in d.layers), kind
    report = plan_memory(config, ["float32", "mixed_bfloat16"], measure=False)
    for plan in report.plans:
        assert plan.parameters > 0 and plan.activations_bytes > 0, (kind, plan)
        assert plan.total_bytes > plan.weights_bytes > 0 and plan.largest_batch > 0, (kind, plan)
    f32, bf16 = report.plans
    assert bf16.activations_bytes <= f32.activations_bytes, kind


def test_paths_in_the_file_are_relative_to_it_and_set_paths_to_the_current_folder(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = required_keys("csv", project)
    config = write_yaml(project / "exp.yaml", {"data": data, "train": {"epochs": 1},
                                               "model": {"hidden_units": [8]}})
    s = run_json(elsewhere, config)  # run from another folder: the file's paths still hold
    assert s["dataset"] == str(project / "table.csv")
    assert Path(s["run_dir"]).parent == project / "runs"
    datafiles.csv_table(elsewhere / "other.csv", rows=200)
    s = run_json(elsewhere, config, "--set", "data.path=other.csv", "--set", "output.dir=out")
    assert s["dataset"] == str(elsewhere / "other.csv")
    assert Path(s["run_dir"]).parent == elsewhere / "out"
    missing = write_yaml(project / "missing.yaml", {"data": {**data, "path": "photos.csv"}})
    done = mptrain("run", str(missing), cwd=elsewhere)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert str(missing) in message and f"data.path {project / 'photos.csv'}: no such file" in message


def test_validate_predicts_what_run_would_refuse(tmp_path):
    folder = datafiles.image_folder(tmp_path / "few", per_class=6)
    small = write_yaml(tmp_path / "small.yaml", {"data": {"dataset": "image_folder", "path": str(folder)}})
    refuses(tmp_path, small, "train.batch_size 128 is larger than the", "training examples")
    # run finds it only once the folder is read: its message names the file too
    refuses(tmp_path, small, f"{small}: ", "train.batch_size 128 is larger than the", command="run")
    (tmp_path / "semi.csv").write_text("y;a;b\n" + "".join(f"{i % 2};{i};1\n" for i in range(50)))
    semi = write_yaml(tmp_path / "semi.yaml", {"data": {"dataset": "csv", "path": "semi.csv",
                                                        "label_column": "y"}})
    refuses(tmp_path, semi, "set data.delimiter: ';'")
    models = datafiles.user_models(tmp_path / "m")
    saver = (f"import sys; sys.path.insert(0, {str(models.parent)!r}); import keras, user_models\n"
             f"user_models.custom_layer((16,), 4).save({str(tmp_path / 'custom.keras')!r})")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", saver], check=True, capture_output=True, timeout=120)
    saved = experiment(tmp_path, "model.kind=saved", f"model.path={tmp_path / 'custom.keras'}",
                       name="saved.yaml")
    refuses(tmp_path, saved, "the model uses Doubler, which cannot be loaded here",
            "register_keras_serializable")
    mnist = write_yaml(tmp_path / "mnist.yaml", {"data": {"dataset": "mnist"}})
    done = mptrain("validate", str(mnist), cwd=tmp_path)
    assert done.returncode == 0 and "mnist is not on this machine" in done.stderr
    assert "will try Keras' download" in done.stderr
    ambiguous = experiment(tmp_path, "model.kind=python",
                           f"model.builder={models}:ambiguous", name="ambiguous.yaml")
    assert mptrain("validate", str(ambiguous), cwd=tmp_path).returncode == 0  # fast: not built
    deep = mptrain("validate", str(ambiguous), "--deep", cwd=tmp_path)
    assert deep.returncode == 2 and "set model.output_activation" in deep.stderr


def test_lint_on_a_cpu_does_not_ask_for_tensor_core_sizes(tmp_path):
    config = experiment(tmp_path, "data.input_shape=[16]", "model.hidden_units=[100, 2048, 36]",
                        "train.batch_size=60", "policy=mixed_bfloat16")
    here = mptrain("lint", str(config), "--json", cwd=tmp_path)
    assert here.returncode in (0, 1), here.stderr
    report = json.loads(here.stdout)
    assert report["alignment_for"] is None and not [f for f in report["findings"]
                                                    if f["kind"] == "alignment"]
    gpu = json.loads(mptrain("lint", str(config), "--json", "--target", "gpu", cwd=tmp_path).stdout)
    by_layer = {(f["layer"], f["message"].split(":")[1].split()[0]): f for f in gpu["findings"]
                if f["kind"] == "alignment" and f["layer"]}
    units_100 = by_layer[("dense_1", "units")]  # 16x100: well under 1% of this model's FLOPs
    assert units_100["flops_share"] < 0.01 and units_100["severity"] == "info"
    assert "would not change the step time" in units_100["message"]
    assert by_layer[("dense_2", "input")]["severity"] == "warning"  # 100x2048: a real share
