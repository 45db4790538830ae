"""Advice followed literally does what it says: for each piece of advice that names a key
and its value (or a bound), the setting is read out of mptrain's own words, given back to the
same command with `--set`, and the complaint is gone (the command passes, or the finding is
no longer there). Advice that once failed so: compare's "--steps 16 gives 3", which changed
nothing, since --steps only caps train.epochs' steps (`test_compare.py` follows the
--epochs it says now)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.datafiles import regression_table
from tests.helpers import experiment, mptrain

SOFTMAX_INSIDE = '''
import keras
from keras import layers


def build(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    weights = layers.Softmax(name="attention")(layers.Dense(16)(inputs))
    hidden = layers.Dense(16, activation="relu")(layers.Multiply()([weights, layers.Dense(16)(inputs)]))
    return keras.Model(inputs, layers.Dense(num_classes)(hidden))
'''
SIGMOID_ONE = '''
import keras
from keras import layers


def build(input_shape):
    inputs = keras.Input(shape=input_shape)
    return keras.Model(inputs, layers.Dense(1, activation="sigmoid")(inputs))
'''
HOUSES = ["data={dataset: csv, path: houses.csv, label_column: price}", "model.num_classes=null",
          "train.loss=mean_squared_error"]

# (what: the overrides that bring the advice on, the command, the advice as a pattern whose
# groups are the key and the value to set, the finding kind a lint names it under: None for
# a refusal, which exits 2)
CASES = {
    "batch larger than the data": (["train.batch_size=1000"], "validate",
                                   r"(train\.batch_size) \d+ is larger .*?lower it to at most (\d+)", None),
    "labels past num_classes": (["model.num_classes=3"], "validate --deep",
                                r"set (model\.num_classes) to at least (\d+)", None),
    "a validation figure without validation": (
        ["data.validation_split=0", "train.early_stopping={monitor: val_loss, patience: 2}"],
        "validate --deep", r"set (data\.validation_split) \(e\.g\. ([\d.]+)\)", None),
    "one output for a sparse loss": (
        ["data.num_classes=2", "model={kind: python, builder: 'sigmoid_one.py:build'}",
         "train.loss=sparse_categorical_crossentropy"], "validate --deep",
        r"use (train\.loss): (\w+)", None),
    "targets past float16": ([*HOUSES, "policy=mixed_float16", "train.target_scaling=none"], "lint",
                             r"set (train\.target_scaling): (\w+)", "targets"),
    "features on scales apart": ([*HOUSES, "data.normalize=false", "train.target_scaling=standard"],
                                 "lint", r"set (data\.normalize): (\w+)", "features"),
    "an npz's features on scales apart": (["data={dataset: npz, path: scales.npz}"], "lint",
                                          r"set (data\.normalize): (\w+)", "features"),
    "a softmax in 16 bits": (["policy=mixed_bfloat16", "model={kind: python, builder: "
                              "'softmax_inside.py:build'}"], "lint",
                             r"with (model\.float32_layers): (\[\w+\])", "softmax_16bit"),
}


def complaint(tmp_path: Path, config: Path, command: str, kind: str | None, *sets: str) -> str | None:
    """What the command says against the experiment (None: nothing): the refusal's words, or
    the lint finding of `kind`."""
    args = [*command.split()[:1], str(config), *command.split()[1:],
            *(a for s in sets for a in ("--set", s))]
    if kind is not None:
        done = mptrain(*args, "--json", cwd=tmp_path)
        found = [f["message"] for f in json.loads(done.stdout)["findings"] if f["kind"] == kind]
        return found[0] if found else None
    done = mptrain(*args, cwd=tmp_path)
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 2), done.stderr
    return " ".join(done.stderr.split()) if done.returncode else None


@pytest.mark.parametrize("case", list(CASES))
def test_advice_followed_literally_ends_the_complaint(tmp_path, case):
    overrides, command, advice, kind = CASES[case]
    regression_table(tmp_path / "houses.csv", raw=True)
    (tmp_path / "softmax_inside.py").write_text(SOFTMAX_INSIDE)
    (tmp_path / "sigmoid_one.py").write_text(SIGMOID_ONE)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 4)) * [1000.0, 1.0, 0.01, 1.0]
    np.savez(tmp_path / "scales.npz", x_train=x[:128], y_train=np.arange(128) % 4, x_test=x[128:],
             y_test=np.arange(32) % 4)
    config = experiment(tmp_path, *overrides)
    said = complaint(tmp_path, config, command, kind)
    assert said is not None, f"{case}: no advice"
    found = re.search(advice, said)
    assert found, said
    key, value = found.groups()
    assert complaint(tmp_path, config, command, kind, f"{key}={value}") is None, (case, key, value)
