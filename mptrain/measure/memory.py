"""`mptrain memory`: training memory per policy, estimated and measured, and what fits; and
whether compare's and plan's variants fit in it together (`too_big_together`).

For each policy the experiment is set up as `run` would (`runs.experiment.prepare`) and its
training state estimated part by part (`model.size.estimate`); a short real run per policy gives
TensorFlow's allocator peak where the allocator reports one. The largest batch that fits in
80% of the memory training uses (a GPU's, or the machine's: `hardware.machine.training_memory`)
follows from the estimate, scaled up by the measurement where it
is larger (XLA's buffers, for one, are in no estimate): a figure never more hopeful than what
was measured.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

from mptrain.config import ExperimentConfig, variant
from mptrain.hardware.machine import USABLE_FRACTION, training_memory
from mptrain.model.own_step import optimizers_of, own_compile
from mptrain.model.size import MemoryPlan, estimate, peak_rss_bytes
from mptrain.record import Record

if TYPE_CHECKING:
    from mptrain.runs.experiment import Prepared

GIB = 2.0**30


def why_not_half(optimizer: str, state_per_weight: float | None) -> str:
    """Why 16 bits do not halve memory, naming this experiment's optimizer and how many
    float32 values of state it keeps per weight (measured from the built optimizer); None: a
    model's own optimizers, whose state its first step builds."""
    kept = (f"{optimizer} keeps none" if state_per_weight == 0 else
            f"{optimizer} (the model's own) are built by its first step: the estimate leaves their "
            "state out, the measured peak holds it" if state_per_weight is None else
            f"{optimizer} keeps {state_per_weight:g} float32 value{'s' * (state_per_weight != 1)} per weight")
    return ("Why 16-bit training does not halve memory: under a mixed policy the variables stay "
            f"float32, and so do their gradients and the optimizer's state ({kept}); the step "
            "adds 16-bit copies of the weights. Only the activations kept for the backward pass "
            "are halved, so the saving is large when activations dominate (big batches, big "
            "images, long sequences) and small when weights do. The guide's advice follows: "
            "with the memory saved, double the batch size.")


class MemoryReport(Record):
    experiment: str
    batch_size: int
    parameters: int
    training_examples: int
    plans: list[MemoryPlan]
    why: str
    memory_bytes: int | None = None  # what the largest batches fit in 80% of (None: not known)
    memory_of: str = "memory here"  # what that memory is ("GPU memory", $MPTRAIN_MEMORY_BYTES)


def plan_memory(config: ExperimentConfig, policies: list[str], measure: bool = True,
                verbose: bool = False) -> MemoryReport:
    """One MemoryPlan per policy for the experiment's model, optimizer and batch size."""
    from mptrain.precision.policy import apply_policy
    from mptrain.runs.experiment import prepare

    plans, examples = [], 0
    for policy in policies:
        try:
            prepared = prepare(config, policy=policy, verbose=verbose)
            choice = prepared.choice
            plans.append(estimate(prepared.model, prepared.optimizer, policy, choice.compute_dtype,
                                  choice.variable_dtype, config.train.batch_size))
        finally:
            apply_policy("float32")
        examples = prepared.batches.train_examples
        import keras  # (after prepare: it imports TensorFlow quietly, keras would not)

        keras.backend.clear_session()
    if measure:
        plans = [p.model_copy(update={"measured_peak_bytes": _measured(config, p.policy, verbose)})
                 for p in plans]
    available, memory_of = training_memory(prepared.machine)
    plans = [with_largest_batch(p, available, examples) for p in plans]
    first = plans[0]
    # (to a tenth: the optimizer also keeps a few scalars, its iteration count)
    state = round(first.optimizer_bytes / first.weights_bytes, 1) if first.weights_bytes else 0
    why = (why_not_half(", ".join(optimizers_of(prepared.model)), None) if own_compile(prepared.model)
           else why_not_half(config.train.optimizer.name, state))
    return MemoryReport(experiment=config.name, batch_size=config.train.batch_size,
                        parameters=first.parameters, training_examples=examples, plans=plans,
                        why=why, memory_bytes=available, memory_of=memory_of)


def with_largest_batch(plan: MemoryPlan, available: int | None, examples: int) -> MemoryPlan:
    """The largest batch whose training state fits in 80% of memory, by the estimate; where
    the measured peak exceeds the estimate (allocator overheads, XLA's buffers), every part
    is scaled up by that ratio, so the figure is never more hopeful than the measurement."""
    fixed = plan.total_bytes - plan.activations_bytes
    per_example = plan.activations_bytes / plan.batch_size
    if not available or per_example <= 0:
        return plan
    scale, basis = 1.0, "estimate"
    if plan.measured_peak_bytes and plan.measured_peak_bytes > plan.total_bytes:
        scale, basis = plan.measured_peak_bytes / plan.total_bytes, "measured"
    largest = max(int((USABLE_FRACTION * available / scale - fixed) // per_example), 0)
    note = (f"{largest:,} is a memory figure only: {largest // examples:,}x the {examples:,} "
            "training examples" if examples and largest > 10 * examples else None)
    return plan.model_copy(update={"largest_batch": largest, "largest_batch_basis": basis,
                                   "note": note})


def _measured(config: ExperimentConfig, policy: str, verbose: bool) -> int | None:
    """The allocator's training peak over a few real steps (None where it reports nothing)."""
    from mptrain.runs.runner import run_experiment

    with tempfile.TemporaryDirectory() as scratch:
        short = variant(config, {"policy": policy, "train.epochs": 1, "train.max_steps": 3,
                                 "train.checkpoint": {"every_epochs": None, "every_steps": None},
                                 "output.dir": scratch, "output.save_model": False})
        summary = run_experiment(short, verbose=verbose).summary
    return summary.memory.training_peak_bytes


def variant_bytes(prepared: Prepared, policy: str, batch: int | None) -> int:
    """What a variant's process needs of the memory training uses (`training_memory`): its
    training state under `policy` at `batch` (None: the experiment's) by the estimate and,
    without a GPU, where both share the machine's memory, what the staging process holds
    (TensorFlow, the data, the model built once: its peak resident memory)."""
    from mptrain.precision.policy import DTYPES

    state = estimate(prepared.model, prepared.optimizer, policy, *DTYPES[policy],
                     batch or prepared.config.train.batch_size).total_bytes
    return state if prepared.machine.gpus else peak_rss_bytes() + state


def too_big_alone(prepared: Prepared, policy: str, batch: int) -> str | None:
    """Why a variant at `batch` would not fit in the memory training uses, with the
    estimate; None when it fits (or the memory is not known)."""
    need = variant_bytes(prepared, policy, batch)
    if (over := _beyond(prepared, need)) is None:
        return None
    return f"batch {batch} needs about {need / GIB:.1f} GiB by the estimate, {over}"


def too_big_together(prepared: Prepared, cells: dict[str, tuple[str, int | None]],
                     baseline: str) -> str | None:
    """None when every variant's process fits in the memory training uses beside the others
    (on a GPU, their training states share its memory); else why not, said as the engine
    then runs them (each with the baseline alone). `cells`: label → (policy, batch size;
    None: the experiment's); what each needs: `variant_bytes`."""
    if len(cells) <= 2:  # two variants in pairs are the same two
        return None
    need = sum(variant_bytes(prepared, policy, batch) for policy, batch in cells.values())
    if (over := _beyond(prepared, need)) is None:
        return None
    each = ("each one's training state" if prepared.machine.gpus else
            f"{peak_rss_bytes() / GIB:.1f} GiB a process, and each one's training state")
    return (f"the {len(cells)} variants need about {need / GIB:.1f} GiB together ({each} by the "
            f"estimate), {over}: each runs in turns with {baseline} alone, pair after pair")


def _beyond(prepared: Prepared, need: int) -> str | None:
    """'more than 80% of the 15.0 GiB of GPU memory' when `need` bytes do not fit in the
    memory training uses; None when they fit, or that memory is not known."""
    available, where = training_memory(prepared.machine)
    if available is None or need <= USABLE_FRACTION * available:
        return None
    return f"more than {USABLE_FRACTION:.0%} of the {available / GIB:.1f} GiB of {where}"
