"""`mptrain compare`: one experiment under several policies (and loops), side by side.

The input pipeline's order depends only on the seed, so every variant, from the same initial
weights (`study.new_study`), also sees the same batches.

XLA is an axis of its own. A row that will run XLA (named so, or by mptrain's choice for its
policy here: float16 on a CPU whose float16 kernels collapse without it) is named with
`+xla`, and when the baseline runs without XLA, `float32+xla` runs beside it in the same turns
as its control: on an AVX2-only CPU XLA alone made float32 1.33x faster, and a
mixed_float16 row that ran XLA read 1.22x faster than float32 while its precision was 0.87x
float32 with XLA. Each such row's verdict carries both figures (`verdicts.control_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from mptrain.config import ExperimentConfig, load_config
from mptrain.errors import ConfigError, DataError
from mptrain.measure.plot import plot_study
from mptrain.measure.study import Measurement, Staging, StudyRecord, new_study, run_study, steps_of, to_run
from mptrain.measure.variant import Variant, compare_label
from mptrain.measure.verdicts import Rules, control_of, judge_rows
from mptrain.precision.candidates import candidate
from mptrain.runs.resume import refuse_resume
from mptrain.telling import LOGGED, Telling

DEFAULT_EXPERIMENT = "mnist_mixed"  # the guide's experiment
OFFLINE_EXPERIMENTS = ("synthetic", "fashion_mnist_mixed")


class CompareRecord(StudyRecord):
    """compare.json."""

    KIND: ClassVar[str] = "compare"
    ROWS: ClassVar[str] = "variants"

    status: Literal["running", "finished", "interrupted"] = "finished"
    baseline: str
    baseline_policy: str
    variants: list[Variant]
    notes: list[str] = []  # what was said before the runs: XLA's rows, known-slow variants

    def params(self) -> dict[str, str]:
        return {"variants": ",".join(r.label for r in self.variants)}

    def nothing_left(self) -> str | None:
        """None while a variant has still to run, or while the compare was never closed (its
        process killed outright: a resume judges what ended)."""
        return None if self.status == "running" or to_run(self.variants) else "every variant has ended"

    def draw(self, path: Path) -> None:
        plot_study(self, path, f"mptrain compare: {self.experiment} (baseline {self.baseline_policy})")

    def closed(self, signal: int | None) -> tuple[CompareRecord, dict[str, str], None]:
        ended = "interrupted" if signal is not None else "finished"
        return judge_compare(self.model_copy(update={"status": ended})), {}, None


@dataclass(frozen=True)
class CompareSettings:
    """What a user asks of a compare, with `mptrain compare`'s defaults: the candidates
    (None: float32 and what `policy: auto` picks here), loops and strategies (None: the
    experiment's), changes to the experiment (`--set` strings), and the shortcuts for how
    long each variant trains (`epochs`, `steps`) and when a step too slow to wait for stops
    it (`max_step_seconds`, None: never)."""

    policies: list[str] | None = None
    loops: list[str] | None = None
    strategies: list[str] | None = None
    batch_sizes: list[int] | None = None  # None: the experiment's batch alone
    sets: list[str] = field(default_factory=list)
    epochs: int | None = None
    steps: int | None = None
    max_step_seconds: float | None = 60.0

    @property
    def overrides(self) -> list[str]:
        shortcuts = {"train.epochs": self.epochs, "train.max_steps": self.steps,
                     "train.max_step_seconds": self.max_step_seconds}
        return [*self.sets, *(f"{key}={value}" for key, value in shortcuts.items()
                              if value is not None)]

    def check_resumable(self, folder: Path, experiment: str | ExperimentConfig | None) -> None:
        """What a resume of the compare in `folder` is given changes nothing, or is refused
        (`runs.resume.refuse_resume`): an experiment named is held to what a new compare of
        it would stage; without one, the step limit's default is no change (the compare may
        have been started without a limit)."""
        options = {f"--{key}": ",".join(value) if value else None
                   for key, value in (("policies", self.policies), ("loops", self.loops),
                                      ("strategies", self.strategies),
                                      ("batch-sizes", [str(b) for b in self.batch_sizes or []]))}
        default = f"train.max_step_seconds={CompareSettings.max_step_seconds}"
        refuse_resume(folder, "compare", experiment, self.overrides if experiment is not None
                      else [o for o in self.overrides if o != default], options=options)


def run_compare(experiment: str | ExperimentConfig | None, settings: CompareSettings = CompareSettings(),
                *, resume: Path | None = None, telling: Telling = LOGGED, verbose: bool = False,
                as_text: Callable[[CompareRecord], str] | None = None) -> Measurement:
    """`mptrain compare` and `mptrain.compare`: the experiment named or given (default: the
    guide's) under each candidate, loop and strategy, every variant in a process of its own
    from shared initial weights, all in turns (`measure.study`); or, with `resume`, the
    compare in that folder finished. Writes compare.json and compare.png into
    OUTPUT_DIR/compare-<name>-<timestamp>/. `as_text(record)`: the tables as text, for MLflow
    (with `output.mlflow`)."""
    if resume is not None:
        record = CompareRecord.load(resume)
        settings.check_resumable(resume, experiment)
    else:
        try:
            config = load_config(experiment or DEFAULT_EXPERIMENT, settings.overrides)
            policies = settings.policies or default_policies(config, verbose, telling.status)
            variants = plan_variants(config, policies, settings.loops, settings.strategies,
                                     settings.batch_sizes)
            record = start_compare(config, variants, telling, verbose)
        except DataError as exc:
            raise (explain_missing_default(exc) if experiment is None else exc) from None
    return run_study(record, telling, verbose, as_text)


def default_policies(config: ExperimentConfig, verbose: bool = False,
                     status: Callable[[str], object] | None = None) -> list[str]:
    """`compare`'s policies when none are given: `policies_worth_comparing` on this machine,
    with its kernels measured (or the cached measurement)."""
    from mptrain.hardware.kernels import measured_kernels
    from mptrain.hardware.machine import probe
    from mptrain.hardware.runtime import import_tensorflow
    from mptrain.precision.policy import math_environment

    tf = import_tensorflow(verbose, environment=math_environment(config.train.math_mode,
                                                                 config.train.math_library))
    machine = probe(tf, check_xla=False)
    return policies_worth_comparing(machine, measured_kernels(tf, machine, status))


def policies_worth_comparing(machine, kernels) -> list[str]:
    """float32 and what `policy: auto` picks here: the comparison a user without
    `--policies` is asking for. When auto picks float32, the 16-bit policy it weighed
    (bfloat16, unless a GPU lacks fast bfloat16), so the default compare still shows what 16
    bits would cost here. Never mixed_float16 on a CPU, where it is known to be slow."""
    from mptrain.precision.policy import recommend

    picked = recommend(machine, kernels).policy
    if picked != "float32":
        return ["float32", picked]
    float16_only = machine.gpus and not all(g.fast_bfloat16 for g in machine.gpus)
    return ["float32", "mixed_float16" if float16_only else "mixed_bfloat16"]


def plan_variants(config: ExperimentConfig, policies: list[str], loops: list[str] | None = None,
                  strategies: list[str] | None = None,
                  batch_sizes: list[int] | None = None) -> list[Variant]:
    """Every policy (a precision candidate's name) under every loop, strategy and batch size,
    the policies innermost (the first float32 is of the first loop, strategy and batch: the
    baseline); a name that is no candidate is an error before anything runs, naming
    --policies."""
    try:
        options = [candidate(name) for name in policies]
    except ConfigError as exc:
        raise ConfigError(f"--policies {exc}") from None
    return [Variant(label=compare_label(c.name, loop, s, b), candidate=c, loop=loop, strategy=s,
                    batch={"train.batch_size": b} if b else {})
            for s in (strategies or [config.distribute.strategy])
            for loop in (loops or [config.train.loop]) for b in (batch_sizes or [None])
            for c in options]


def _choice(config: ExperimentConfig, row: Variant, machine, kernels):
    """What the row's run will choose here (`policy.choose_policy`), with its own number of
    replicas (XLA is off with several)."""
    from mptrain.precision.policy import XlaAsked, choose_policy
    from mptrain.training.distribute import replicas_for

    option = row.candidate
    jit = option.jit_compile if option.jit_compile is not None else config.train.jit_compile
    asked = XlaAsked(jit, config.train.xla_optimizer_update, config.deterministic)
    return choose_policy(option.policy, machine, asked,
                         replicas_for(row.strategy, config.distribute.devices, machine), kernels)


def with_xla_axis(config: ExperimentConfig, variants: list[Variant], machine,
                  kernels) -> tuple[list[Variant], list[str]]:
    """The rows as they will run here, and what to say about them: a row whose run chooses
    XLA is named `+xla` (its XLA made explicit), and when the baseline runs without XLA,
    each loop, strategy and batch with such a row gets a `float32+xla` control, so the
    precision's own effect is measured against float32 with XLA in the same turns."""
    def under(row: Variant, option) -> Variant:  # the row with another candidate, named for it
        return row.model_copy(update={"candidate": option, "label": compare_label(
            option.name, row.loop, row.strategy or "none", row.batch_size)})

    rows, said = [], []
    for row in variants:
        choice = _choice(config, row, machine, kernels)
        if choice.jit_compile and not row.candidate.jit_compile:
            named = row.candidate.changed(jit_compile=True)
            said.append(f"{row.candidate.name} runs with XLA here ({choice.jit_reason}): its "
                        f"rows are named {named.name}")
            row = under(row, named)
        rows.append(row)
    base = next((r for r in rows if r.candidate.policy == "float32"), rows[0])
    for row in list(rows):
        control = row.candidate.control
        needed = row.candidate.sixteen_bit and control.name != base.candidate.control.name
        if needed and control_of(row, rows, base) is None:
            rows.append(under(row, control))
            said.append(f"{control.name} runs beside {row.label} as its control: the speed-up of a "
                        "row with XLA or another math library is also given against float32 "
                        "with the same, the precision's own effect")
    return rows, list(dict.fromkeys(said))


def start_compare(config: ExperimentConfig, variants: list[Variant], telling: Telling = LOGGED,
                  verbose: bool = False) -> CompareRecord:
    """A new compare (`study.new_study`): its rows as they will run here (`with_xla_axis`),
    what is known to be slow here said, with every variant still to run; the baseline is
    the first float32 row."""
    from mptrain.hardware.kernels import measured_kernels
    from mptrain.precision.policy import speed_warning

    def chosen(prepared) -> Staging:  # the rows as they will run, and what is known, before any does
        examples = prepared.data.train.size
        too_big = sorted({v.batch_size for v in variants if (v.batch_size or 0) > examples})
        if too_big:
            raise ConfigError(f"--batch-sizes: {', '.join(map(str, too_big))} is more than the "
                              f"{examples:,} training examples of {config.name}")
        machine, notes = prepared.machine, []
        kernels = (None if machine.gpus or machine.tpu else
                   measured_kernels(prepared.tf, machine, telling.status, notes))
        rows, said = with_xla_axis(config, variants, machine, kernels)
        for line in said:
            telling.say("xla", line)
        warnings: dict[str, list[str]] = {}  # what is known to be slow here → the rows it is about
        for row in rows:
            if warning := speed_warning(_choice(config, row, machine, kernels), machine, kernels):
                warnings.setdefault(warning, []).append(row.label)
        for warning, labels in warnings.items():  # once, with every variant it is about
            about = ", ".join(labels)
            telling.say(f"note ({about})", warning)
            said.append(f"{about}: {warning}")
        baseline = next((v for v in rows if v.candidate.name == "float32"), rows[0])
        return Staging(rows, {"baseline": baseline.label, "baseline_policy": baseline.candidate.name,
                              "notes": [*notes, *said]})

    return new_study(CompareRecord, config, chosen, verbose)


def judge_compare(record: CompareRecord, same_start: bool = True) -> CompareRecord:
    """Every row judged against the baseline (`verdicts.judge`), on the rounds they ran in
    turns and, when they started from the same weights on the same batches (`same_start`),
    the losses of their runs (read from their steps.jsonl)."""
    steps = steps_of(record.variants) if same_start else {}
    rules = Rules(turn_steps=record.turn_steps, input_ms=record.input_ms_per_batch)
    return record.model_copy(update={"variants": judge_rows(record.variants, steps, rules, record.baseline)})


def explain_missing_default(error: DataError) -> DataError:
    """`mptrain compare` without CONFIG runs the guide's MNIST experiment; when MNIST is not
    here, say that and name the experiments that do run offline."""
    offline = ", ".join(f"`mptrain compare {name}`" for name in OFFLINE_EXPERIMENTS)
    return DataError(f"{error}\nNo CONFIG was given, so compare ran the guide's experiment "
                     f"({DEFAULT_EXPERIMENT}), which needs MNIST. Experiments that run here "
                     f"without a download: {offline}.")
