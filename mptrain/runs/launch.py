"""`mptrain run`'s one library call (`launch`), here or on local worker processes; the command
parses its options into `RunOptions` and renders what comes back. `mptrain.run` calls the same.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mptrain.config import ExperimentConfig
from mptrain.errors import ConfigError
from mptrain.precision.planned import plan_beside, start_environment
from mptrain.runs.folder import unique_folder
from mptrain.runs.resume import experiment_to_run
from mptrain.runs.runner import RunResult, Start, run_experiment
from mptrain.runs.workers import (
    LocalRun,
    local_worker_count,
    run_local_workers,
    worker_overrides,
)
from mptrain.telling import LOGGED, Telling
from mptrain.training.cluster import Hosts, form_cluster
from mptrain.training.records import TrainingListener


@dataclass(frozen=True)
class RunOptions:
    """How `mptrain run` trains the experiment it names."""

    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE
    workers: int | None = None  # --workers N: train on N local worker processes
    max_restarts: int = 0  # how often lost local workers are all restarted
    verbose: bool = False
    supervised: bool = False  # this process is one of `--workers`' workers
    hosts: Hosts | None = None  # --hosts, --host-index: this process is one worker of a cluster
    start: Start = Start()  # where the run starts: `start.resume`, the run folder to continue


def launch(experiment: str | ExperimentConfig | None, options: RunOptions = RunOptions(),
           telling: Telling = LOGGED,
           listeners: list[TrainingListener] | None = None) -> RunResult:
    """Train the experiment named (an experiment file or a built-in's name) or given (an
    `ExperimentConfig`, from Python), here or on local workers. With `options.start.resume`
    the run folder's own config is continued: an experiment named or given beside it is
    checked against it (changed keys refused by name), and a run with nothing left to do
    raises `AlreadyFinished`."""
    overrides = [*options.overrides,
                 *(worker_overrides(options.workers) if options.workers is not None else [])]
    if options.hosts is not None and options.workers is not None:
        raise ConfigError("--hosts starts this host's one worker of a cluster; --workers N "
                          "starts N on this machine: give one of them")
    resume = options.start.resume
    chosen = experiment_to_run(experiment, overrides, resume)
    # $TF_CONFIG for this process, before TensorFlow starts: from --hosts, Slurm or a scheduler
    said, cluster = form_cluster(options.hosts, chosen, options.supervised or chosen.distribute.workers
                                 is not None, start_environment(chosen)[1], options.verbose)
    if said is not None:
        telling.say("cluster", said)
    if cluster and chosen.distribute.strategy != "multi_worker_mirrored":
        overrides.append("distribute.strategy=multi_worker_mirrored")
        chosen = experiment_to_run(experiment, overrides, resume)
    count = local_worker_count(chosen.distribute.workers, options.workers, options.supervised,
                               "TF_CONFIG" in os.environ)
    if count is not None:
        with relayable(experiment) as config:  # the run's folder: `resume`, or one reserved now
            run_dir = resume if resume is not None else unique_folder(chosen.output.dir, chosen.name)
            local = LocalRun(count, run_dir, resume is not None, config, overrides,
                             options.verbose)
            return run_local_workers(local, options.max_restarts,
                                     on_restart=lambda line: telling.say("restart", line))
    if options.max_restarts:
        raise ConfigError("--max-restarts restarts lost local workers: it needs --workers N "
                          "(or --resume of a run on local workers)")
    source = experiment.source if isinstance(experiment, ExperimentConfig) else experiment
    if resume is None and source is not None and (beside := plan_beside(source)) is not None:
        if chosen.policy != "auto":  # only `policy: auto` follows a plan: else it reads as followed
            beside += f" (not followed: this experiment's policy is {chosen.policy}, not auto)"
        telling.say("plan", beside)
    return run_experiment(chosen, options.start, listeners=listeners,
                          verbose=options.verbose, on_start=telling.started, status=telling.status)


@contextmanager
def relayable(experiment: str | ExperimentConfig | None):
    """The experiment as local workers are given it: its file or name, as the user gave it;
    one given as an object (from Python) written to a file for as long as they run."""
    if not isinstance(experiment, ExperimentConfig):
        yield experiment
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{experiment.name}.yaml"
        path.write_text(yaml.safe_dump(experiment.to_yaml_dict(), sort_keys=False))
        yield str(path)
