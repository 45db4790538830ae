"""A plain Keras script ported to mptrain, without training: builders called with what they
declare, the pixel range a model expects read from its layers, the size images are given at,
errors that speak Python to Python, and a plan file that can move with its experiment."""

from collections import Counter
from pathlib import Path

import pytest

from mptrain.config import validate
from mptrain.config.loading import as_file_in, load_config, resolve_paths
from mptrain.errors import ConfigError
from mptrain.model.kinds.python_builder import arguments, check_builder
from tests.helpers import tiny_raw


def python_model(tmp_path: Path, source: str, function: str = "build", **kwargs):
    """The `model` section of an experiment whose builder is `source`, in a file."""
    path = tmp_path / "builder.py"
    path.write_text(source)
    raw = tiny_raw("model.kind=python", f"model.builder={path}:{function}")
    if kwargs:
        raw["model"]["kwargs"] = kwargs
    return validate(raw, "exp.yaml").model


@pytest.mark.parametrize("signature, kwargs, given", [
    ("()", {}, ([], {})),
    ("(num_classes)", {}, ([], {"num_classes": 4})),
    ("(input_shape, num_classes)", {}, ([], {"input_shape": (16,), "num_classes": 4})),
    ("(num_classes, width=32)", {"width": 8}, ([], {"num_classes": 4, "width": 8})),
    ("(shape_=None, /, *, num_classes)", {}, ([], {"num_classes": 4})),
    ("(input_shape, /, num_classes)", {}, ([(16,)], {"num_classes": 4})),
    ("(**kwargs)", {"depth": 2}, ([], {"input_shape": (16,), "num_classes": 4, "depth": 2})),
])
def test_a_builder_is_called_with_the_arguments_it_declares(tmp_path, signature, kwargs, given):
    """What `validate` reads from the file (no import) and what `run` passes agree."""
    cfg = python_model(tmp_path, f"def build{signature}:\n    pass\n", **kwargs)
    check_builder(cfg)  # without running the file
    namespace: dict = {}
    exec(f"def build{signature}:\n    pass\n", namespace)
    from mptrain.model.kinds.python_builder import declared_parameters

    offered = {"input_shape": (16,), "num_classes": 4, **kwargs}
    assert arguments(cfg, declared_parameters(namespace["build"]), offered) == given


@pytest.mark.parametrize("source, kwargs, refused", [
    ("def build(img_size, num_classes):\n    pass\n", {},
     "is build(img_size, num_classes): mptrain cannot give 'img_size' (it gives input_shape, "
     "num_classes, train_inputs and the keys of model.kwargs, by name); add img_size to model.kwargs"),
    ("def build(num_classes):\n    pass\n", {"width": 8},
     "model.kwargs width: model.builder"),
    ("import keras\n", {}, "defines no function 'build' (functions there: none)"),
])
def test_a_builder_mptrain_cannot_call_is_refused_by_validate(tmp_path, source, kwargs, refused):
    cfg = python_model(tmp_path, source, **kwargs)
    with pytest.raises(ConfigError) as caught:
        check_builder(cfg)
    assert refused in str(caught.value)


def test_a_builder_imported_from_the_module_beside_it_is_read_there(tmp_path):
    """`from my_keras_train import build_model`: the signature is read in the sibling file;
    a name bound otherwise (an assignment) is left for the call to check."""
    (tmp_path / "my_keras_train.py").write_text("def build_model(num_classes, depth):\n    pass\n")
    cfg = python_model(tmp_path, "from my_keras_train import build_model\n", "build_model")
    with pytest.raises(ConfigError, match="mptrain cannot give 'depth'"):
        check_builder(cfg)
    check_builder(python_model(tmp_path, "from my_keras_train import build_model\n",
                               "build_model", depth=2))
    check_builder(python_model(tmp_path, "import functools\nbuild = functools.partial(print)\n"))


def keras_model(*first_layers):
    import keras

    inputs = keras.Input((8, 8, 3))
    x = inputs
    for layer in first_layers:
        x = layer(x)
    x = keras.layers.Conv2D(4, 3)(x)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(x)))


def test_the_pixel_range_a_model_expects_is_read_from_its_first_layers():
    import keras
    import numpy as np

    from mptrain.model.inputs import read_pixel_range

    layers = keras.layers
    assert read_pixel_range(keras_model(layers.Rescaling(1 / 255))).range == "0-255"
    assert read_pixel_range(keras_model(layers.Rescaling(1 / 127.5, offset=-1))).range == "0-255"
    assert read_pixel_range(keras_model(layers.RandomFlip(), layers.Rescaling(1 / 255))).range == "0-255"
    assert read_pixel_range(keras_model()).range == "0-1"
    assert read_pixel_range(keras_model(layers.Rescaling(255.0))).range == "0-1"
    raw = layers.Normalization(mean=[120.0, 110.0, 100.0], variance=[3000.0] * 3)
    assert read_pixel_range(keras_model(raw)).range == "0-255"
    scaled = layers.Normalization()
    scaled.adapt(np.random.default_rng(0).uniform(0, 1, (16, 8, 8, 3)).astype("float32"))
    assert read_pixel_range(keras_model(scaled)).range == "0-1"
    nested = keras.Sequential([keras.Input((8, 8, 3)), layers.Rescaling(1 / 255), layers.Conv2D(2, 3)])
    inputs = keras.Input((8, 8, 3))
    assert read_pixel_range(keras.Model(inputs, nested(inputs))).range == "0-255"


def test_a_range_that_cannot_be_read_is_an_error_naming_the_layer_and_the_key():
    import keras

    from mptrain.model.inputs import pixel_range

    model = keras_model(keras.layers.Normalization(name="norm"))  # never adapted
    with pytest.raises(ConfigError) as caught:
        pixel_range(model, "auto", own_model=True)
    assert "'norm' (Normalization) was never adapted" in str(caught.value)
    assert "set model.pixel_range: 0-255" in str(caught.value)
    assert pixel_range(model, "0-255", own_model=True)[0] == "0-255"  # declared: not read
    assert pixel_range(keras_model(), "auto", own_model=False) == ("0-1", [])  # mptrain's own


def test_images_are_given_at_their_own_size_unless_they_differ_or_one_is_set():
    from mptrain.data.folders import image_size

    cfg = validate(tiny_raw("data.dataset=image_folder", "data.path=x"), "e").data
    assert image_size(cfg, Counter({(32, 32): 90})) == ((32, 32), [])
    size, notes = image_size(cfg, Counter({(32, 32): 88, (40, 48): 2}))
    assert size == (32, 32)
    assert notes == ["2 of 90 images resized to 32x32 (the most common size, as data.image_size "
                     "is unset; the images are 32x32 (88), 40x48 (2))"]
    cfg = validate(tiny_raw("data.dataset=image_folder", "data.path=x", "data.image_size=[64, 64]"),
                   "e").data
    size, notes = image_size(cfg, Counter({(32, 32): 90}))
    assert size == (64, 64) and notes[0].startswith("90 of 90 images resized to 64x64 (data.image_size")


def test_pythons_overrides_are_named_as_python_wrote_them():
    from mptrain.api import load_experiment

    with pytest.raises(ConfigError) as caught:
        load_experiment("synthetic", {"train.epochs": "many"})
    message = str(caught.value)
    assert message.startswith("invalid override for the experiment synthetic")
    assert "override {'train.epochs': 'many'}: train.epochs" in message and "--set" not in message
    with pytest.raises(ConfigError, match=r"override 'train\.\.epochs': expected a key path"):
        load_experiment("synthetic", {"train..epochs": 1})
    with pytest.raises(ConfigError, match="invalid --set option"):
        load_experiment("synthetic", ["train.epochs=many"])


def test_a_plan_file_names_its_paths_relative_to_itself(tmp_path):
    """plan.yaml can be committed and moved with its data: its paths are relative to its
    folder, and read back to the same places; a system path stays absolute."""
    (tmp_path / "data").mkdir()
    (tmp_path / "exp.yaml").write_text(
        "data: {dataset: csv, path: data/t.csv, label_column: y}\n"
        "model: {kind: python, builder: 'models/m.py:build'}\n")
    config = load_config(tmp_path / "exp.yaml")
    written = as_file_in(config, tmp_path / "plans")
    assert written["data"]["path"] == "../data/t.csv"
    assert written["model"]["builder"] == "../models/m.py:build"
    assert written["output"]["dir"] == "../runs"
    again = resolve_paths(validate(written, "plan.yaml"), tmp_path / "plans")
    assert (again.data.path, again.model.builder) == (config.data.path, config.model.builder)
    system = config.model_copy(update={"output": config.output.model_copy(
        update={"dir": Path("/usr/share/runs")})})
    assert as_file_in(system, tmp_path)["output"]["dir"] == "/usr/share/runs"


def test_every_path_key_of_every_kind_is_relative_to_the_experiment_file(tmp_path, monkeypatch):
    """The keys that hold paths are read from the schema, so a kind's own (image_masks'
    masks_path, once missed by a hand-kept list) is resolved like every other: against the
    experiment file's folder, whatever the current folder."""
    from mptrain.config.loading import DATA_KINDS, PATH_KEYS

    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "masks.yaml").write_text(
        "data: {dataset: image_masks, path: images, masks_path: masks}\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(tmp_path / "exp" / "masks.yaml")
    assert (config.data.path, config.data.masks_path) == (tmp_path / "exp" / "images",
                                                          tmp_path / "exp" / "masks")
    typed_as_paths = {("data", key) for kind in DATA_KINDS.values()
                      for key, field in kind.model_fields.items() if "Path" in str(field.annotation)}
    assert typed_as_paths <= set(PATH_KEYS)


def test_a_home_folder_in_a_string_path_key_is_expanded(tmp_path, monkeypatch):
    """model.weights and a builder's file are strings that hold a path: a `~` in them is the
    user's home, as in the keys typed as paths (they were kept as written, and then refused:
    no such file)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "builder.yaml").write_text("model: {kind: python, builder: '~/models/m.py:build'}\n")
    config = load_config(tmp_path / "builder.yaml")
    assert config.model.builder == f"{tmp_path}/home/models/m.py:build"
    (tmp_path / "app.yaml").write_text(
        "model: {kind: application, name: MobileNetV2, weights: '~/w/mobilenet.weights.h5'}\n")
    assert load_config(tmp_path / "app.yaml").model.weights == f"{tmp_path}/home/w/mobilenet.weights.h5"
    (tmp_path / "named.yaml").write_text(  # names and absolute paths as written
        "model: {kind: application, name: MobileNetV2, weights: imagenet}\n"
        "data: {dataset: csv, path: /data//t.csv, label_column: y}\n")
    named = load_config(tmp_path / "named.yaml")
    assert (named.model.weights, str(named.data.path)) == ("imagenet", "/data/t.csv")
