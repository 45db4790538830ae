"""What a compare or plan resumed may be given beside `--resume`: nothing that would change
what it measures, as `run --resume` refuses changed keys.

A resume continues the variants (or trials) the folder staged, from its own experiment
(`experiment.yaml`) and initial weights: an experiment named beside it, or a `--set`, is
checked against that experiment and refused by key when it differs (exit 2, the folder
untouched); an option that sets up the measurement (the policies, the trial steps...) is
refused by name. Nothing given is ignored in silence.
"""

from __future__ import annotations

from pathlib import Path

from mptrain.config import ExperimentConfig, load_config, validate
from mptrain.config.diff import changed_keys
from mptrain.config.loading import apply_overrides, read_yaml
from mptrain.errors import ConfigError


def refuse_changes(folder: Path, kind: str, experiment: str | ExperimentConfig | None,
                   overrides: list[str]) -> None:
    """Refuse an `experiment` or `overrides` that differ from what the folder staged."""
    if experiment is None and not overrides:
        return
    staged_path = folder / "experiment.yaml"
    staged = validate(read_yaml(staged_path), str(staged_path))
    wanted = (load_config(experiment, overrides) if experiment is not None
              else validate(apply_overrides(read_yaml(staged_path), overrides), str(staged_path),
                            overrides))
    changed = changed_keys(staged.to_yaml_dict(), wanted.to_yaml_dict())
    if changed:
        given = "the experiment given" if experiment is not None else "--set"
        raise ConfigError(f"--resume {folder}: {given} changes {', '.join(changed)}; a {kind} "
                          f"resumes with the experiment it started with ({staged_path}): leave "
                          f"them out, or start a new {kind}")


def refuse_options(folder: Path, kind: str, given: dict[str, object]) -> None:
    """Refuse the options (flag → value, None when not given) a resume cannot apply."""
    named = [f"{flag} {value}" for flag, value in given.items() if value is not None]
    if named:
        raise ConfigError(f"--resume {folder}: {', '.join(named)}: a {kind} resumes with the "
                          f"settings it started with (its {kind}.json); leave "
                          f"{'it' if len(named) == 1 else 'them'} out, or start a new {kind}")
