"""`mptrain run`'s one library call (`launch`), here or on local worker processes; the command
parses its options into `RunOptions` and renders what comes back. `mptrain.run` calls the same.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mptrain.config import ExperimentConfig, load_config, variant
from mptrain.config.diff import changed_keys, value_at
from mptrain.errors import ConfigError, MptrainError
from mptrain.model.kinds.python_builder import check_builder_travels
from mptrain.precision.planned import plan_beside
from mptrain.runs.folder import unique_folder
from mptrain.runs.resume import experiment_to_run
from mptrain.runs.runner import RunResult, Start, run_experiment
from mptrain.runs.workers import LocalRun, local_worker_count, run_local_workers
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
           telling: Telling = LOGGED, listeners: list[TrainingListener] | None = None) -> RunResult:
    """Train the experiment named (an experiment file or a built-in's name) or given (an
    `ExperimentConfig`, from Python), here or on local workers. With `options.start.resume`
    the run folder's own config is continued: an experiment named or given beside it is
    checked against it (changed keys refused by name), and a run with nothing left to do
    raises `AlreadyFinished`."""
    if options.hosts is not None and options.workers is not None:
        raise ConfigError("--hosts starts this host's one worker of a cluster; --workers N "
                          "starts N on this machine: give one of them")
    workers = {} if options.workers is None else {"distribute.strategy": "multi_worker_mirrored",
                                                  "distribute.workers": options.workers}
    resume, overrides = options.start.resume, [*options.overrides, *(f"{k}={v}" for k, v in workers.items())]
    if workers and resume is None:  # a resume's own config says as many
        chosen = _on_workers(experiment_to_run(experiment, list(options.overrides), None),
                             f"--workers {options.workers}", workers)
    else:
        chosen = experiment_to_run(experiment, overrides, resume)
    count = local_worker_count(chosen.distribute.workers, options.workers, options.supervised,
                               "TF_CONFIG" in os.environ)
    if count is not None:
        with relayable(experiment, chosen) as (config, sets):
            # the run's folder, known before any worker starts: `resume`, or one reserved now
            run_dir = resume if resume is not None else unique_folder(chosen.output.dir, chosen.name)
            local = LocalRun(count, run_dir, resume is not None, config, [*sets, *overrides],
                             options.verbose)
            return run_local_workers(local, options.max_restarts,
                                     on_restart=lambda line: telling.say("restart", line))
    if options.max_restarts:
        raise ConfigError("--max-restarts restarts lost local workers: it needs --workers N "
                          "(or --resume of a run on local workers)")
    # $TF_CONFIG for this process, before TensorFlow starts: from --hosts, Slurm or a scheduler
    said, cluster = form_cluster(options.hosts, chosen, options.supervised, options.verbose)
    if said is not None:
        telling.say("cluster", said)
    if cluster and chosen.distribute.strategy != "multi_worker_mirrored":
        if resume is not None:
            raise ConfigError(f"cannot resume {resume} on a cluster ({said}): it trained with "
                              f"distribute.strategy {chosen.distribute.strategy}, and a cluster "
                              "trains with multi_worker_mirrored; resume it on one machine "
                              "(without --hosts, Slurm's srun or $TF_CONFIG), or start a new run")
        chosen = _on_workers(chosen, f"a cluster ({said})", {})
    source = experiment.source if isinstance(experiment, ExperimentConfig) else experiment
    if resume is None and source is not None and (beside := plan_beside(source)) is not None:
        if chosen.policy != "auto":  # only `policy: auto` follows a plan: else it reads as followed
            beside += f" (not followed: this experiment's policy is {chosen.policy}, not auto)"
        telling.say("plan", beside)
    return run_experiment(chosen, options.start, listeners=listeners,
                          verbose=options.verbose, on_start=telling.started, status=telling.status)


def _on_workers(chosen: ExperimentConfig, why: str, changes: dict[str, object]) -> ExperimentConfig:
    """`chosen` trained by worker processes, as `why` (an option, a cluster) asks: under
    multi_worker_mirrored, refused for a Model.fit loop by what the user did ask for (the
    schema's refusal would name a strategy they never set)."""
    if chosen.train.loop == "fit":
        raise ConfigError(f"{why}: workers train under multi_worker_mirrored, where Keras 3's "
                          "Model.fit does not run (keras-team/keras#20585): add --set train.loop=custom")
    return variant(chosen, {"distribute.strategy": "multi_worker_mirrored", **changes})


@contextmanager
def relayable(experiment: str | ExperimentConfig | None, chosen: ExperimentConfig):
    """The experiment as local workers are given it, with the --set options that go first:
    its file or name, as the user gave it; one given as an object (from Python), as its own
    file and what differs from it (so `policy: auto` follows the plan beside that file, and
    a worker's error names it), or else (a mapping has no file) written to a file for as
    long as they run. What they would train (`chosen`) with a builder passed as a Python
    object cannot go to another process: refused before any starts."""
    check_builder_travels(chosen, "run --workers")
    if not isinstance(experiment, ExperimentConfig):
        yield experiment, []
        return
    given = experiment.to_yaml_dict()
    try:
        own = load_config(experiment.source).to_yaml_dict()
        # both ways: a key one side resolved and the other asks to resolve (`policy: auto`) too
        differ = sorted({*changed_keys(own, given), *changed_keys(given, own)})
        sets = [f"{key}={json.dumps(value_at(given, key))}" for key in differ]
        made_again = load_config(experiment.source, sets).to_yaml_dict() == given
    except MptrainError:  # no such file (a mapping's), or one that no longer reads
        made_again = False
    if made_again:
        yield experiment.source, sets
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{experiment.name}.yaml"
        path.write_text(experiment.yaml_text())
        yield str(path), []
