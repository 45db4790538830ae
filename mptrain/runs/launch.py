"""`mptrain run`'s one library call: what to train (an experiment, or the run `--resume`
continues) and where (in this process, or on local worker processes this one supervises).

The command parses its options into `RunOptions`, calls `launch` with the experiment it
names, and renders what comes back: a `RunResult` (trained here) or a `WorkersResult` (trained
on local workers, whose chief printed the summary). What the run says along the way goes
through `Telling`, so the words and their colours stay the command's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mptrain.config.loading import plan_beside
from mptrain.errors import ConfigError
from mptrain.runs.resume import experiment_to_run
from mptrain.runs.runner import RunResult, Start, run_experiment
from mptrain.runs.workers import (
    Relayed,
    WorkersResult,
    local_run,
    local_worker_count,
    run_local_workers,
    worker_overrides,
)
from mptrain.training.records import TrainingListener


@dataclass(frozen=True)
class RunOptions:
    """How `mptrain run` trains the experiment it names."""

    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE
    workers: int | None = None  # --workers N: train on N local worker processes
    max_restarts: int = 0  # how often lost local workers are all restarted
    json_out: bool = False  # relayed to local workers: the chief prints the summary
    verbose: bool = False
    supervised: bool = False  # this process is one of `--workers`' workers
    start: Start = Start()  # where the run starts: `start.resume`, the run folder to continue


@dataclass(frozen=True)
class Telling:
    """How a run tells its user what it does: `plan(line)` names a plan written beside the
    experiment, `start(prepared, notes)` says what will train once the model is built,
    `restart(line)` says that lost local workers restart, and `status(text)` is a context
    manager shown while a long set-up step runs."""

    plan: Callable[[str], None] = lambda line: None
    start: Callable[[Any, list[str]], None] | None = None
    restart: Callable[[str], None] = lambda line: None
    status: Callable[[str], object] | None = None


def launch(config: str | None, options: RunOptions = RunOptions(), telling: Telling = Telling(),
           listeners: list[TrainingListener] | None = None) -> RunResult | WorkersResult:
    """Train the experiment `config` names (an experiment file or a built-in's name; with
    `options.start.resume` optional, and checked against the run's own), here or on local workers;
    raise `AlreadyFinished` when the run to resume has nothing left to do."""
    overrides = [*options.overrides,
                 *(worker_overrides(options.workers) if options.workers is not None else [])]
    experiment = experiment_to_run(config, overrides, options.start.resume)
    count = local_worker_count(experiment.distribute.workers, options.workers, options.supervised,
                               "TF_CONFIG" in os.environ)
    if count is not None:
        relayed = Relayed(config, overrides, options.json_out, options.verbose)
        local = local_run(experiment, count, relayed, options.start.resume)
        return run_local_workers(local, options.max_restarts, on_restart=telling.restart)
    if options.max_restarts:
        raise ConfigError("--max-restarts restarts lost local workers: it needs --workers N "
                          "(or --resume of a run on local workers)")
    if options.start.resume is None and (beside := plan_beside(config)) is not None:
        telling.plan(beside)
    return run_experiment(experiment, options.start, listeners=listeners,
                          verbose=options.verbose, on_start=telling.start, status=telling.status)
