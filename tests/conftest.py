"""Shared fixtures: tiny experiments, isolated data/cache folders, policy reset between tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mptrain.config import validate
from mptrain.hardware.runtime import ALLOCATOR, QUIET_LOGS
from tests.helpers import tiny_raw

# what mptrain's own processes set before TensorFlow starts: this process imports TensorFlow
# (test modules do) before any mptrain call could, and the processes it starts inherit it
for _name, _value in {**QUIET_LOGS, **ALLOCATOR}.items():
    os.environ.setdefault(_name, _value)
# Rich reads COLUMNS when a console is made: the shared stderr console must read it at each
# print, so that `mptrain(..., env_extra={"COLUMNS": ...})` in this process is obeyed.
os.environ.pop("COLUMNS", None)


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory):
    """One cache folder for the session, its xdist workers' too (children inherit it): this
    machine's kernel measurement is made once, not once per worker or per test that uses
    `policy: auto`."""
    root = tmp_path_factory.getbasetemp()
    shared = (root.parent if root.name.startswith("popen-gw") else root) / "mptrain-cache"
    shared.mkdir(exist_ok=True)
    os.environ["MPTRAIN_CACHE_DIR"] = str(shared)


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
