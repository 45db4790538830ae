"""The one way an experiment is set up, for every command that needs its model (run, compare,
plan, lint, diagnose, memory): `prepare`, in the guide's order. Everything that can fail on
bad input happens here, before any run folder exists; what each command then does with a
`Prepared` is its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mptrain.config import ExperimentConfig
from mptrain.data import Dataset, load_dataset
from mptrain.data.pipeline import Batches, hold_on_host, make_batches, training_inputs
from mptrain.errors import MptrainError
from mptrain.hardware.kernels import measured_kernels
from mptrain.hardware.machine import Machine, probe
from mptrain.hardware.runtime import import_tensorflow, set_op_determinism
from mptrain.model import build_model
from mptrain.model.checks import check_built, fit_to_data, objective_of
from mptrain.model.outputs import OutputKind
from mptrain.model.own_step import carries_algorithm, own_compile
from mptrain.model.size import MemoryMeter
from mptrain.precision.planned import follow_plan, start_environment
from mptrain.precision.policy import (
    PolicyChoice,
    XlaAsked,
    apply_math_mode,
    apply_policy,
    choose_policy,
    needs_kernels,
    pure_policy_note,
    speed_warning,
)
from mptrain.runs.preflight import check_experiment
from mptrain.training import make_loop
from mptrain.training.distribute import Placement, place_run, scope
from mptrain.training.loss_scale import wrap_optimizer
from mptrain.training.optimizer import build_optimizer

if TYPE_CHECKING:
    import keras

    from mptrain.objective import Objective
    from mptrain.training.custom_loop import CustomLoop
    from mptrain.training.fit_loop import FitLoop


@dataclass(frozen=True)
class Prepared:
    """An experiment ready to train: everything decided, built and seeded."""

    config: ExperimentConfig  # as run: `model.num_classes` filled in from the data
    tf: ModuleType
    machine: Machine
    place: Placement
    choice: PolicyChoice
    speed_warning: str | None  # a known-slow combination here (`policy.speed_warning`)
    data: Dataset
    batches: Batches
    memory: MemoryMeter  # started after the data, before the model: it measures training
    model: keras.Model
    output: OutputKind
    objective: Objective  # what kind of problem it is: its loss, metrics, quality (`objective`)
    optimizer: keras.optimizers.Optimizer
    loop: FitLoop | CustomLoop
    notes: tuple[str, ...] = ()  # what mptrain did to the model
    scaled_pixels: bool = False  # the pipeline divides pixels by 255 (the model does not)


def prepare(config: ExperimentConfig, *, policy: str | None = None, verbose: bool = False,
            initial_weights: Path | None = None,
            status: Callable[[str], Any] | None = None) -> Prepared:
    """Set the experiment up under `policy` (default: the experiment's own).

    `initial_weights` (an .npz from `model.save_initial_weights`) makes several runs start from the
    same weights; `status(text)` is a context manager showing progress for slow set-up steps
    (the first measurement of this machine's kernels: `policy: auto`, 16 bits on a CPU)."""
    check_experiment(config)  # missing files and impossible shapes, before TensorFlow's import
    requested = policy or config.policy
    plan, environment = start_environment(config, requested)
    tf = import_tensorflow(verbose, environment=environment)
    set_op_determinism(tf, config.deterministic)
    place = place_run(config, tf)
    machine = probe(tf, check_xla=False)
    notes = []
    if plan is not None:
        config, requested, said = follow_plan(config, plan, machine)
        notes.append(said)
    kernels = (measured_kernels(tf, machine, status, notes)
               if needs_kernels(requested, machine) else None)
    asked = XlaAsked(config.train.jit_compile, config.train.xla_optimizer_update, config.deterministic)
    choice = choose_policy(requested, machine, asked, replicas=place.replicas, kernels=kernels)
    if plan is not None and requested != "auto":  # auto, resolved by the plan
        choice = replace(choice, requested="auto", reason=f"auto: {said}")
    if (pure := pure_policy_note(choice)) is not None:
        notes.append(pure)
    apply_math_mode(tf, config.train.math_mode)
    # set before the data: its one layer (text_folder's TextVectorization) gives integer
    # token ids under any policy, and every layer the model creates follows it
    apply_policy(choice.name)
    data = load_dataset(config.data, config.seed, status)
    held = hold_on_host(data)  # before the meter starts: the data set is not training memory
    memory = MemoryMeter(tf, machine.memory_device).start()

    import keras  # imported with TensorFlow

    # Python's, NumPy's and TensorFlow's seeds: the same seed builds identical initial weights
    # (the data's order has its own seeds: stateless shuffles)
    keras.utils.set_random_seed(config.seed)
    config, objective, built, said = _model_for(config, data, held, place, initial_weights)
    scaled_pixels = built.pixel_range == "0-1"
    batches = make_batches(held, config, objective.batch_labels if data.labels is not None else None,
                           scale_pixels=scaled_pixels, replicas=place.replicas)
    with scope(place):
        scale = config.train.loss_scale
        optimizer = wrap_optimizer(
            build_optimizer(config.train.optimizer, config.train.epochs * batches.steps_per_epoch),
            choice.loss_scaling, scale.initial_scale, scale.dynamic_growth_steps)
        loop = make_loop(config, built, objective, optimizer, choice, place.strategy)
    if own_compile(built.model):  # its own optimizers update what its step names
        choice = replace(choice, xla_optimizer_update=False, xla_optimizer_reason=(
            f"off: {type(built.model).__name__}'s own optimizers update the variables its own step "
            "names"))
    return Prepared(config, tf, machine, place, choice, speed_warning(choice, machine, kernels), data,
                    batches, memory, built.model, built.output, objective, loop.optimizer, loop,
                    (*notes, *data.notes, *said, *built.notes), scaled_pixels)


def _model_for(config: ExperimentConfig, data: Dataset, held: Dataset, place: Placement,
               initial_weights: Path | None):
    """What the model is for (its objective, from the loss and the labels; from its
    builder's compile once it has run, where that decides), the experiment fitted to the
    data, and the model built for it and checked against both: (config, objective, built,
    notes). An error names the experiment file."""
    try:
        objective, said = objective_of(config, data.labels, tentative=True)
        config = fit_to_data(config, data, objective)
        with scope(place):  # model, optimizer, metrics (and checkpoints) live on the replicas
            built = build_model(config, data.spec, objective, initial_weights,
                                train_inputs=partial(training_inputs, held, config.train.batch_size))
        algorithm = (type(built.model).__name__
                     if carries_algorithm(built.model, data.labels is not None) else None)
        if built.compiled is not None or objective is None or algorithm:  # the model decides
            objective, said = objective_of(config, data.labels, built.compiled, algorithm=algorithm)
        checked = check_built(config, built.model, objective)
    except MptrainError as exc:
        if str(exc).startswith(config.source):
            raise
        raise type(exc)(f"{config.source}: {exc}") from exc.__cause__
    return config, objective, built, [*said, *checked]
