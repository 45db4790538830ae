"""What a resume may change, for every command that resumes (`refuse_resume`), and which runs
`mptrain run --resume RUN_DIR` can continue.

A resumed run trains with the run folder's own resolved config.yaml. It may go further
(`train.epochs`, `train.max_steps`, `train.max_step_seconds`), or on another number of local
workers (`distribute.workers`), but nothing that changes what the checkpoint means: another
model, policy, batch size, data or seed would continue a different experiment from weights
that are not its own, so those are refused by name. A compare or plan resumed continues its
variants from the experiment it staged: any change to it, and any option that sets up the
measurement (the policies, the trial steps...), is refused by name the same way. Nothing
given beside `--resume` is ignored in silence.
"""

from __future__ import annotations

from pathlib import Path

from mptrain.config import ExperimentConfig, load_config, validate, variant
from mptrain.config.diff import changed_keys, value_at
from mptrain.config.loading import apply_overrides, read_yaml
from mptrain.config.schema import TrainConfig
from mptrain.errors import AlreadyFinished, ConfigError
from mptrain.precision.planned import PLANNED_KEYS
from mptrain.runs.folder import RunFolder, alive
from mptrain.runs.summary import RunState, RunSummary
from mptrain.training.records import CUT_SHORT

# distribute.workers too: the checkpoint holds every worker's (mirrored) variables once, and
# the data position counts global batches, so any number of local workers continues it
MAY_CHANGE = ("train.epochs", "train.max_steps", "train.max_step_seconds", "distribute.workers")


def experiment_to_run(experiment: str | ExperimentConfig | None, overrides: list[str],
                      resume: Path | None) -> ExperimentConfig:
    """What `run` trains: the experiment named or given (with its overrides), or with a
    resume the run's own config (checked against the one named or given, if any)."""
    if resume is not None:
        return resume_config(resume, experiment, overrides)
    if experiment is None:
        raise ConfigError("mptrain run: give an experiment (CONFIG) or --resume RUN_DIR")
    return load_config(experiment, overrides)


def resume_config(run_dir: Path, experiment: str | ExperimentConfig | None,
                  overrides: list[str]) -> ExperimentConfig:
    """The experiment to continue in `run_dir`: its config.yaml with the allowed changes
    (from the overrides, or from an experiment named or given beside the resume). Nothing in
    the folder is touched before this returns."""
    folder = RunFolder(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"cannot resume {run_dir}: no such folder")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"cannot resume {run_dir}: not a run folder (no config.yaml)")
    state = folder.state()
    if isinstance(state, RunState) and state.status == "running" and alive(state):
        raise ConfigError(f"cannot resume {run_dir}: still running (process {state.pid} on "
                          f"{state.host}); stop it first (Ctrl-C leaves a checkpoint)")
    stored, wanted = refuse_resume(run_dir, "run", experiment, overrides, may_change=MAY_CHANGE)
    folder.read_steps(), folder.read_epochs()  # a damaged record is refused here, untouched
    if isinstance(state, RunSummary) and state.status == "finished" \
            and not _goes_further(state, stored.train, wanted.train):
        raise AlreadyFinished(_how_to_go_further(run_dir, state, stored.train))
    # the run's own config, resolved as it ran, with only the changes a resume may make
    asked = wanted.to_yaml_dict()
    return variant(stored, {key: value_at(asked, key) for key in MAY_CHANGE})


def refuse_resume(folder: Path, kind: str, experiment: str | ExperimentConfig | None,
                  overrides: list[str], *, options: dict[str, object] | None = None,
                  may_change: tuple[str, ...] = ()) -> tuple[ExperimentConfig, ExperimentConfig]:
    """The folder's experiment and the one asked for beside `--resume` (the experiment named
    or given, with `overrides`; else the folder's own with them), or a ConfigError naming
    every option given that a resume cannot apply (`options`: flag → value, None when not
    given) and every key that changes beyond `may_change`. Under `policy: auto` what a plan
    resolved may differ (`PLANNED_KEYS`): that is what auto chose when it ran."""
    path = folder / ("config.yaml" if kind == "run" else "experiment.yaml")
    raw = read_yaml(path)
    stored = validate(raw, str(path))
    wanted = (load_config(experiment, overrides) if experiment is not None
              else validate(apply_overrides(raw, overrides), str(path), overrides))
    resolved = PLANNED_KEYS if wanted.policy == "auto" else ()
    changed = [key for key in changed_keys(stored.to_yaml_dict(), wanted.to_yaml_dict())
               if key not in may_change and not key.startswith(resolved)]
    named = [f"{flag} {value}" for flag, value in (options or {}).items() if value is not None]
    if changed or named:
        given = "the experiment given changes" if experiment is not None else "the options given change"
        what = [*named, *([f"{given} {', '.join(changed)}"] if changed else [])]
        kept = path.name if kind == "run" else f"{path.name}, {kind}.json"
        may = f"; it may change only {', '.join(may_change)}" if may_change else ""
        raise ConfigError(f"cannot resume {folder}: {'; '.join(what)}: a {kind} resumes with the "
                          f"settings it started with ({kept}{may}): leave "
                          f"{'it' if len(named) + len(changed) == 1 else 'them'} out, or start a "
                          f"new {kind}")
    return stored, wanted


def _goes_further(state: RunSummary, before: TrainConfig, after: TrainConfig) -> bool:
    """Whether a finished run has more to do with the new settings: more epochs, a raised (or
    removed) limit where that limit is what stopped it, or any when a plan cut it short (its
    budget, or its race decided)."""
    if after.epochs > before.epochs or state.stopped_by in CUT_SHORT:
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
