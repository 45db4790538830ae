"""Shared fixtures: tiny experiments, isolated data/cache folders, policy reset between tests."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from mptrain.config import apply_overrides, validate

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TINY = {
    "name": "tiny",
    "seed": 7,
    "policy": "float32",
    "data": {
        "dataset": "synthetic",
        "validation_split": 0.25,
        "train_size": 512, "test_size": 128, "input_shape": [16], "num_classes": 4, "noise": 2.0,
    },
    "model": {"kind": "mlp", "hidden_units": [32, 32], "num_classes": 4},
    "train": {"loop": "fit", "epochs": 3, "batch_size": 64, "warmup_steps": 1,
              "optimizer": {"name": "adam", "kwargs": {"learning_rate": 0.01}}},
    "output": {"save_model": False},
}


def tiny_raw(*overrides: str) -> dict:
    return apply_overrides(copy.deepcopy(TINY), list(overrides))


@pytest.fixture
def tiny_config(tmp_path: Path):
    """`tiny_config("policy=mixed_float16", ...)` → a validated ExperimentConfig writing to tmp."""

    def make(*overrides: str):
        return validate(tiny_raw(f"output.dir={tmp_path / 'runs'}", *overrides), "<test>")

    return make


@pytest.fixture(autouse=True)
def isolated_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """No test may read the user's Keras cache or data folder, or download anything."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv("MPTRAIN_DATA_DIR", raising=False)


@pytest.fixture(autouse=True)
def reset_global_policy():
    yield
    import sys

    if "keras" in sys.modules:
        import keras

        keras.mixed_precision.set_global_policy("float32")
