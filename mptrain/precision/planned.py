"""`policy: auto` follows the plan made for the experiment, where that plan applies.

A kernel measurement (`hardware.kernels`) says which 16-bit type is fast on this machine for
matmuls and convolutions; a plan (`mptrain plan`) measured this very model, trial by trial,
and can find the opposite (a CNN whose bfloat16 kernels are 2-3x float32's ran 0.92x). So
`auto` runs the plan's pick when a plan of this experiment is beside its file and was measured
on this machine, and says so; otherwise it decides on the kernels, and says why the plan
beside it was not followed (another machine, an experiment changed since).

A plan applies when:
- its stamp (the last comment line of EXPERIMENT.plan.yaml, written by `measure.plan`) names
  this machine: the same CPU and flags, GPUs and TensorFlow (`plan_key`; the pick names its
  math library, which a run that follows it runs);
- it is no older than the experiment's file (an edited experiment is another experiment);
- its experiment is this one, but for the keys a plan chooses (`PLANNED_KEYS`; with a pick at
  another batch size, `BATCH_KEYS`, and the experiment's batch must be the one it was made
  from), the run's name and output folder, and its length (`RUN_LENGTH`: a plan judges its
  candidates per step and on their loss over the same batches, so a shorter or longer run of
  the same experiment is the same choice; following such a plan says so).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from mptrain.config.diff import changed_keys, value_at
from mptrain.config.loading import find_config, is_builtin, load_config
from mptrain.errors import ConfigError

STAMP = "# mptrain-plan: "
# what a plan decides, and so may differ between the plan and the experiment it was made for
PLANNED_KEYS = ("policy", "train.jit_compile", "train.math_mode", "train.math_library",
                "model.fused_layers", "model.float32_layers")
# what a plan whose pick runs at another batch size decides too (`config.batch_scaling`)
BATCH_KEYS = ("train.batch_size", "train.optimizer", "train.max_steps")
IGNORED = ("name", "output")  # the run's name and output folder: never a reason to re-plan
# how long it trains: followed, and said (a plan's pick does not depend on the run's length)
RUN_LENGTH = ("train.epochs", "train.max_steps", "train.max_step_seconds")


def stamp(machine_key: str, winner: str, batch_from: int | None = None) -> str:
    """The plan file's machine-readable last comment line; `batch_from`: the experiment's
    batch, when the pick runs at another (the plan applies to that experiment only)."""
    fields = {"machine_key": machine_key, "pick": winner}
    if batch_from is not None:
        fields["batch_from"] = batch_from
    return STAMP + json.dumps(fields)


@dataclass(frozen=True)
class Planned:
    """The plan beside an experiment: its file, what it picked, and the pick's settings; and
    `why_not`, when it does not apply (None: it does, once its machine is this one)."""

    path: Path
    pick: str
    settings: dict[str, object]
    machine_key: str
    why_not: str | None = None
    other_length: tuple[str, ...] = ()  # the run-length keys this experiment sets otherwise

    def follow(self, plan_key: str) -> str | None:
        """Why the plan does not apply to this machine (None: follow it)."""
        if self.why_not is not None:
            return self.why_not
        # (a stamp from before 2026-12-05 ends with oneDNN's state, which `plan_key` leaves out)
        if plan_key != self.machine_key.rsplit("; oneDNN ", 1)[0]:
            return (f"{self.path} was measured on another machine ({self.machine_key}); run "
                    "`mptrain plan` here")
        return None


def planned(config) -> Planned | None:
    """The plan beside the experiment's file, read without TensorFlow (its math mode must be
    set before TensorFlow starts); None when there is none to read."""
    try:
        path = plan_file_for(config.source)
        source = find_config(config.source)
    except ConfigError:  # an experiment with no file: a mapping, from Python
        return None
    if not path.is_file() or source.resolve() == path.resolve():
        return None
    line = next((x for x in path.read_text(errors="replace").splitlines() if x.startswith(STAMP)), None)
    try:
        fields = json.loads(line.removeprefix(STAMP)) if line else None
        plan = load_config(path)
    except (ConfigError, ValueError) as exc:  # a plan that does not read is not followed, and said
        return Planned(path, "?", {}, "", f"{path} does not read as a plan ({exc})")
    if not fields:
        return Planned(path, "?", {}, "", f"{path} has no machine stamp (made by an older "
                                          "mptrain): run `mptrain plan` again")
    batch_from = fields.get("batch_from")
    keys = PLANNED_KEYS + (BATCH_KEYS if batch_from is not None else ())
    settings = {key: value_at(plan.to_yaml_dict(), key) for key in keys}
    # a stamp from before 2026-12-05 ends with the oneDNN state its trials ran: its library
    measured = fields["machine_key"].rpartition("; oneDNN ")[2]
    if settings["train.math_library"] == "default" and measured in ("on", "off"):
        settings["train.math_library"] = "onednn" if measured == "on" else "eigen"
    found = Planned(path, fields["pick"], settings, fields["machine_key"])
    if path.stat().st_mtime < source.stat().st_mtime:
        return replace(found, why_not=f"{path} is older than {source}: run `mptrain plan` again")
    if batch_from is not None and config.train.batch_size != batch_from:
        return replace(found, why_not=f"{path} was made for train.batch_size {batch_from} (its pick "
                                      f"runs at {plan.train.batch_size}), not "
                                      f"{config.train.batch_size}: run `mptrain plan` again")
    changed = [key for key in changed_keys(plan.to_yaml_dict(), config.to_yaml_dict())
               if not key.startswith(keys + IGNORED)]
    differ = [key for key in changed if key not in RUN_LENGTH]
    if differ:
        return replace(found, why_not=f"{path} was made for other settings ({', '.join(differ[:4])}); "
                                      "run `mptrain plan` again for these")
    return replace(found, other_length=tuple(changed))


def plan_file_for(source: str) -> Path:
    """Where plan.yaml goes by default: beside the experiment file (`exp.plan.yaml`), or in
    the current folder for a built-in experiment."""
    path = find_config(source)
    folder = Path.cwd() if is_builtin(path) else path.resolve().parent
    return folder / f"{path.name.removesuffix('.yaml')}.plan.yaml"


def plan_beside(source: str) -> str | None:
    """The first line of the plan written beside an experiment, if there is one."""
    if source.endswith(".plan.yaml"):
        return None
    try:
        beside = plan_file_for(source)
        first = beside.read_text().splitlines()[0] if beside.is_file() else None
    except (OSError, ConfigError, IndexError):
        return None
    return f"{beside}: {first.lstrip('# ')}" if first else None


def start_environment(config, policy: str | None = None) -> tuple[Planned | None, dict[str, str]]:
    """The plan `policy: auto` may follow (None: none, or another policy than auto), and
    what TensorFlow must read when it starts for this experiment: its math mode's, or that of
    the plan's pick when the plan applies as far as can be told before TensorFlow starts (the
    CPU, its flags, TensorFlow's version: `Planned.follow`)."""
    from importlib.metadata import version

    from mptrain.hardware.kernels import plan_key
    from mptrain.hardware.machine import Machine, probe_cpu
    from mptrain.precision.policy import math_environment

    plan = planned(config) if (policy or config.policy) == "auto" else None
    mode, library = config.train.math_mode, config.train.math_library
    if plan is not None:
        here = Machine(cpu=probe_cpu(), tensorflow_version=version("tensorflow"))
        if plan.follow(plan_key(here)) is None:
            mode, library = plan.settings["train.math_mode"], plan.settings["train.math_library"]
    return plan, math_environment(mode, library)


def follow_plan(config, plan: Planned, machine) -> tuple[object, str, str]:
    """`policy: auto` beside a plan: the experiment with the plan's pick (its XLA, math mode and
    float32 layers; the policy to request), and what to say; or, when the plan does not
    apply here, the experiment as it is, `auto` to decide, and why not."""
    from mptrain.config import variant
    from mptrain.hardware.kernels import plan_key

    if (why_not := plan.follow(plan_key(machine))) is not None:
        return config, "auto", f"policy auto did not follow the plan beside the experiment: {why_not}"
    said = f"follows {plan.path}, measured on this machine: {plan.pick}"
    if plan.other_length:
        said += (f" (this run's length differs from the plan's experiment: "
                 f"{', '.join(plan.other_length)}; a plan judges per step, so its pick holds)")
    return variant(config, plan.settings), plan.settings["policy"], said
