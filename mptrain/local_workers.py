"""mptrain's own child processes: the command lines, and how they start and end.

compare and plan run each variant as a `mptrain run` child (Keras' global policy, traced
graphs, the XLA and oneDNN caches and the process's peak memory are per process, and some
switches, such as oneDNN's math mode, are read once when TensorFlow starts); `run --workers N`
starts N multi-worker children. Every child:
- runs in its own session, so a terminal's Ctrl-C reaches it once, through the parent
  (`signals.ForwardSignals`), not twice;
- dies with its parent (`signals.die_with_parent`): a parent killed with SIGKILL leaves no
  orphan training on, only a child stopped as by Ctrl-C, with a checkpoint to resume from.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from pydantic import ValidationError

from mptrain.signals import ForwardSignals, die_with_parent
from mptrain.summary import RunSummary


def mptrain_command(*arguments: str) -> list[str]:
    """`mptrain ARGUMENTS` as this interpreter runs it."""
    return [sys.executable, "-m", "mptrain", *arguments]


def run_command(experiment: Path | str, overrides: list[str], *, run_dir: Path | None = None,
                initial_weights: Path | None = None, verbose: bool = False) -> list[str]:
    """`mptrain run EXPERIMENT --json --set ...` for a child whose summary the parent reads."""
    command = mptrain_command("run", str(experiment), "--json")
    for override in overrides:
        command += ["--set", override]
    if run_dir is not None:
        command += ["--run-dir", str(run_dir)]
    if initial_weights is not None:
        command += ["--initial-weights", str(initial_weights)]
    return command + ["--verbose"] * verbose


def resume_command(run_dir: Path, verbose: bool = False) -> list[str]:
    return mptrain_command("run", "--resume", str(run_dir), "--json") + ["--verbose"] * verbose


def start(command: list[str], env: dict[str, str] | None = None, quiet: bool = False,
          own_session: bool = True) -> subprocess.Popen:
    """A child with stdout captured and stderr passed through (its live progress shows on the
    user's terminal) or discarded (`quiet`)."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.DEVNULL if quiet else None,
                            env={**os.environ, **(env or {})}, start_new_session=own_session,
                            preexec_fn=die_with_parent)


def run_child(command: list[str], signals: ForwardSignals,
              env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a child to its end, forwarding signals to it; its exit code and stdout."""
    signals.child = start(command, env)
    stdout, _ = signals.child.communicate()
    code = signals.child.returncode
    signals.child = None
    return code, stdout


def read_child_summary(code: int, stdout: str) -> RunSummary | str:
    """The summary a `run --json` child printed, or why there is none."""
    try:
        return RunSummary.model_validate(json.loads(stdout))
    except (json.JSONDecodeError, ValidationError):
        return f"exit code {code}" if code else "printed no run summary"


def free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


def run_local_workers(arguments: list[str], count: int, grace_seconds: float = 60.0) -> tuple[int, str]:
    """`mptrain run ARGUMENTS` as `count` multi-worker processes on this machine (worker 0,
    the chief, shows its progress; the others are quiet). Returns the chief's exit code and
    stdout. Workers that outlive the chief by `grace_seconds` are stopped."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(count)]}
    command = mptrain_command("run", *arguments, "--set", "distribute.strategy=multi_worker_mirrored")
    workers = []
    for index in range(count):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        workers.append(start(command, {"TF_CONFIG": json.dumps(tf_config)}, quiet=index > 0,
                             own_session=False))
    stdout, _ = workers[0].communicate()
    for worker in workers[1:]:
        try:
            worker.communicate(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
    failed = [i for i, w in enumerate(workers) if w.returncode not in (0, None)]
    code = workers[0].returncode or (1 if failed else 0)
    return code, stdout
