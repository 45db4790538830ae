"""`mptrain run --resume RUN_DIR`: which runs can be continued, and with what changes.

A resumed run trains with the run folder's own resolved config.yaml. It may go further
(`train.epochs`, `train.max_steps`, `train.max_step_seconds`), but nothing that changes what
the checkpoint means: another model, policy, batch size, data or seed would continue a
different experiment from weights that are not its own, so those are refused by name.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from mptrain.config import ExperimentConfig, load_config, validate
from mptrain.config.loading import apply_overrides, read_yaml
from mptrain.errors import ConfigError
from mptrain.run_folder import RunFolder

MAY_CHANGE = ("train.epochs", "train.max_steps", "train.max_step_seconds")


class AlreadyFinished(Exception):
    """The run folder holds a finished run: there is nothing to resume."""


def resume_config(run_dir: Path, config_ref: str | None, overrides: list[str]) -> ExperimentConfig:
    """The experiment to continue in `run_dir`: its config.yaml with the allowed changes
    (from `--set`, or from a CONFIG given beside --resume)."""
    folder = RunFolder(run_dir)
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        raise ConfigError(f"--resume {run_dir}: not a run folder (no config.yaml)")
    state = folder.status()
    if state.get("status") == "running" and _alive(state):
        raise ConfigError(f"--resume {run_dir}: still running (process {state['pid']} on this "
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
    if state.get("status") == "finished" and wanted.train.epochs <= stored.train.epochs:
        raise AlreadyFinished(f"{run_dir} finished already ({stored.train.epochs} epochs); to "
                              "train it longer: --resume with --set train.epochs=N")
    return wanted


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]


def _alive(state: dict[str, Any]) -> bool:
    if state.get("host") != socket.gethostname() or not state.get("pid"):
        return False
    try:
        os.kill(int(state["pid"]), 0)
    except (ProcessLookupError, PermissionError, ValueError):
        return False
    return True
