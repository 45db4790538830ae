"""An experiment at another batch size: the guide's second lever (16-bit tensors take half the
memory, so "double the training batch size if it does not reduce evaluation accuracy").

A larger batch takes fewer, slower steps, and at the same learning rate it often needs more
examples to reach the same loss. So when compare or plan tries another batch, the learning rate
follows the rule the experiment declares (`train.lr_scaling`), relative to the batch it was set
for (the experiment's own):
- none: unchanged;
- linear: times k = new batch / old (Goyal et al. 2017), warmed up from the old rate over 5% of
  the run (their 5 of 90 epochs): a k-fold step from the first update diverges where the
  gradual one does not;
- sqrt: times sqrt(k) (the square-root rule of some of MLPerf's references), no warm-up.
Every cell sees the same examples in the same order (the input order depends on the seed
alone: `data.pipeline`), so a step limit is scaled by 1/k: one step of batch 2b covers two of b.

The result is ordinary experiment keys (`config.variant` applies them), so the learning rate a
cell resolved to is written into its run's config.yaml and into a plan.yaml as plain numbers.
"""

from __future__ import annotations

import math

from mptrain.config.optimizers import OPTIMIZERS
from mptrain.config.schema import ExperimentConfig

WARMUP_SHARE = 0.05  # of the run's steps, for the linear rule's warm-up (Goyal et al.: 5 of 90 epochs)


def at_batch(config: ExperimentConfig, batch: int, run_steps: int,
             train_examples: int) -> dict[str, object]:
    """The changes that run `config` at `batch` (its `train.lr_scaling` applied): the batch,
    the optimizer when its learning rate moves, and a step limit covering the same examples.
    `run_steps`: the experiment's steps at its own batch (the warm-up is a share of them);
    `train_examples`: an epoch's (its last batch may be short)."""
    train = config.train
    changes: dict[str, object] = {"train.batch_size": batch}
    if batch == train.batch_size:
        return changes
    if train.max_steps is not None:
        wanted = examples_in(train.max_steps, train.batch_size, train_examples)
        steps = max(1, math.ceil(train.max_steps * train.batch_size / batch))
        while examples_in(steps, batch, train_examples) < wanted:
            steps += 1
        changes["train.max_steps"] = steps
    k = batch / train.batch_size
    factor = {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[train.lr_scaling]
    if factor != 1.0:
        warmup = 0
        if train.lr_scaling == "linear" and factor > 1 and train.reduce_lr_on_plateau is None:
            warmup = max(1, round(WARMUP_SHARE * run_steps * train.batch_size / batch))
        changes["train.optimizer"] = scaled_optimizer(train.optimizer.model_dump(), factor, warmup)
    return changes


def examples_in(steps: int, batch: int, train_examples: int) -> int:
    """The examples `steps` steps of `batch` see, each epoch of `train_examples` ending in a
    short batch."""
    per_epoch = math.ceil(train_examples / batch)
    epochs, rest = divmod(steps, per_epoch)
    return epochs * train_examples + min(rest * batch, train_examples)


def scaled_optimizer(optimizer: dict, factor: float, warmup: int) -> dict:
    """`train.optimizer` (as YAML keys) with its learning rate times `factor`. A schedule keeps
    its shape and warm-up; a plain rate (or the optimizer's default) with `warmup` steps
    becomes a constant schedule warmed up from the old rate. A reduce_lr_on_plateau rule
    forbids a schedule, so there the rate is scaled with no warm-up (`at_batch`)."""
    optimizer = {**optimizer, "kwargs": dict(optimizer["kwargs"])}
    schedule = optimizer.get("schedule")
    if schedule is not None:
        schedule = dict(schedule)
        if schedule["kind"] == "piecewise":
            schedule["values"] = [v * factor for v in schedule["values"]]
        else:
            schedule["learning_rate"] *= factor
        optimizer["schedule"] = schedule
        return optimizer
    old = optimizer["kwargs"].pop("learning_rate", None) or OPTIMIZERS[optimizer["name"]].default_rate
    if warmup:
        optimizer["schedule"] = {"kind": "constant", "learning_rate": old * factor,
                                 "warmup_steps": warmup, "warmup_from": old}
    else:
        optimizer["kwargs"]["learning_rate"] = old * factor
    return optimizer
