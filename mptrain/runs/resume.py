"""`mptrain run --resume RUN_DIR`: which runs can be continued, and with what changes.

A resumed run trains with the run folder's own resolved config.yaml. It may go further
(`train.epochs`, `train.max_steps`, `train.max_step_seconds`), or on another number of local
workers (`distribute.workers`), but nothing that changes what the checkpoint means: another
model, policy, batch size, data or seed would continue a different experiment from weights
that are not its own, so those are refused by name.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from mptrain.config import ExperimentConfig, load_config, validate
from mptrain.config.loading import apply_overrides, read_yaml
from mptrain.config.schema import TrainConfig
from mptrain.errors import ConfigError
from mptrain.runs.folder import RunFolder
from mptrain.runs.summary import RunState, RunSummary

# distribute.workers too: the checkpoint holds every worker's (mirrored) variables once, and
# the data position counts global batches, so any number of local workers continues it
MAY_CHANGE = ("train.epochs", "train.max_steps", "train.max_step_seconds", "distribute.workers")


class AlreadyFinished(Exception):
    """The run folder holds a finished run: there is nothing to resume."""


def experiment_to_run(config_ref: str | None, overrides: list[str],
                      resume: Path | None) -> ExperimentConfig:
    """What `run` trains: the experiment named (with its overrides), or with `--resume` the
    run's own config (checked against the one named, if any)."""
    if resume is not None:
        return resume_config(resume, config_ref, overrides)
    if config_ref is None:
        raise ConfigError("mptrain run: give an experiment (CONFIG) or --resume RUN_DIR")
    return load_config(config_ref, overrides)


def resume_config(run_dir: Path, config_ref: str | None, overrides: list[str]) -> ExperimentConfig:
    """The experiment to continue in `run_dir`: its config.yaml with the allowed changes
    (from `--set`, or from a CONFIG given beside --resume)."""
    folder = RunFolder(run_dir)
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        raise ConfigError(f"--resume {run_dir}: not a run folder (no config.yaml)")
    state = folder.state()
    if isinstance(state, RunState) and state.status == "running" and alive(state):
        raise ConfigError(f"--resume {run_dir}: still running (process {state.pid} on this "
                          "host); stop it first (Ctrl-C leaves a checkpoint)")
    stored_raw = read_yaml(stored_path)
    stored = validate(stored_raw, str(stored_path))
    if config_ref is not None:
        wanted = load_config(config_ref, overrides)
    else:
        wanted = validate(apply_overrides(stored_raw, overrides), str(stored_path), overrides)
    changed = [key for key in _differences(stored.to_yaml_dict(), wanted.to_yaml_dict())
               if key not in MAY_CHANGE]
    if changed:
        raise ConfigError(f"--resume {run_dir}: refusing to continue with a different "
                          f"{', '.join(changed)} (the checkpoint belongs to the run's own "
                          f"settings; a resume may change only {', '.join(MAY_CHANGE)})")
    if isinstance(state, RunSummary) and state.status == "finished" \
            and not _goes_further(state, stored.train, wanted.train):
        raise AlreadyFinished(_how_to_go_further(run_dir, state, stored.train))
    return wanted


def _goes_further(state: RunSummary, before: TrainConfig, after: TrainConfig) -> bool:
    """Whether a finished run has more to do with the new settings: more epochs, or a raised
    (or removed) limit where that limit is what stopped it."""
    if after.epochs > before.epochs:
        return True
    for limit in ("max_steps", "max_step_seconds"):
        if state.stopped_by == limit:
            old, new = getattr(before, limit), getattr(after, limit)
            return new is None or new > old
    return False


def _how_to_go_further(run_dir: Path, state: RunSummary, train: TrainConfig) -> str:
    if state.stopped_by in ("max_steps", "max_step_seconds"):
        limit = state.stopped_by
        return (f"{run_dir} stopped at its limit train.{limit} {getattr(train, limit):g}; to "
                f"continue it: --resume with --set train.{limit}=N (larger) or =null")
    return (f"{run_dir} finished already ({train.epochs} epochs); to train it longer: --resume "
            "with --set train.epochs=N")


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]


def alive(state: RunState) -> bool:
    """Whether the process a `running` folder names is alive (on this host: elsewhere we
    cannot tell, and say no)."""
    if state.host != socket.gethostname() or not state.pid:
        return False
    try:
        os.kill(state.pid, 0)
    except (ProcessLookupError, PermissionError, ValueError):
        return False
    return True
