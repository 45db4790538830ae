"""Checks of an experiment before anything heavy runs: the one place `validate` and `run` ask.

The data and the model check themselves (`data.source`, `model.checks`); here are the rest
(the output folder, tracking) and the order. Nothing here imports TensorFlow, so `validate` stays
fast. Every error names the experiment file, the key, and the absolute path it looked at.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from mptrain.config.schema import ExperimentConfig
from mptrain.data.source import source_of
from mptrain.errors import ConfigError, MptrainError
from mptrain.model.checks import check_fits, check_model
from mptrain.model.kinds import model_kind
from mptrain.objective import objective_for

MIN_FREE_BYTES = 64 * 2**20


def check_experiment(config: ExperimentConfig, thorough: bool = False) -> list[str]:
    """Raise on anything `run` would refuse; return notes on what it cannot know yet.

    `thorough` (validate) also reads what `run` reads anyway before its first step: every
    row of a CSV, every file name of a folder, the arrays' sizes in an .npz, so the batch
    size is checked against the real number of training examples."""
    try:
        _check_output(config.output.dir)
        _check_tracking(config)
        source = source_of(config.data)
        notes = source.check_files(config.data)  # what cannot be known before `run` (a download)
        examples, labels = (source.training_examples(config.data) if thorough or source.counts_cheaply
                            else (None, None))
        check_model(config)
        if not config.data.labels and not model_kind(config.model).runs_code:
            raise ConfigError(f"data.labels false: model.kind {config.model.kind} learns from labels; "
                              "the inputs alone are for a model whose own train_step needs none "
                              "(model.kind python: a GAN, an autoencoder of its own)")
        check_fits(config, source.input_spec(config.data), examples)
        # the labels against the objective, when they were read and the loss is known (a
        # builder that compiles its model names its loss only when it runs)
        if labels is not None and (config.train.loss is not None or not model_kind(config.model).runs_code):
            objective_for(config.train.loss, labels,
                          target_scaling=config.train.target_scaling)
    except MptrainError as exc:
        raise type(exc)(f"{config.source}: {exc}") from exc.__cause__
    return notes


def _check_output(folder: Path) -> None:
    """The output folder can be created and written, and its disk is not full: found now,
    not after an hour of training."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output.dir {folder}: is a file; point output.dir at a folder")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    try:  # what stands in the way, found by trying: permissions, a file, a read-only or virtual file system
        os.rmdir(tempfile.mkdtemp(prefix=".mptrain-check-", dir=existing))
    except OSError as exc:
        raise ConfigError(f"output.dir {folder}: cannot create folders in {existing} "
                          f"({exc.strerror}); choose another output.dir") from None
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise ConfigError(f"output.dir {folder}: only {free / 2**20:.0f} MiB free on its disk; "
                          f"a run needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB (checkpoints, model)")


def _check_tracking(config: ExperimentConfig) -> None:
    """`output.mlflow` needs the package; found without importing it (an import costs a
    second or two, and `validate` stays fast)."""
    if config.output.mlflow is not None and importlib.util.find_spec("mlflow") is None:
        raise ConfigError("output.mlflow needs MLflow: pip install 'mptrain[mlflow]' (or set "
                          "output.mlflow: null to train without tracking)")


