"""Training loops behind one interface: `Model.fit` (`fit_loop`) and the guide's custom loop
(`custom_loop`), both reporting every step to a `monitor.TrainingMonitor`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mptrain.data.pipeline import Batches
    from mptrain.precision.policy import PolicyChoice
    from mptrain.training.monitor import TrainingMonitor


class TrainingLoop(Protocol):
    """What a run needs from a loop. `optimizer` is the one that applies the updates: a
    `LossScaleOptimizer` under mixed_float16, which is how a loop knows to scale the loss."""

    model: Any
    optimizer: Any
    loss_fn: Any  # (y, y_pred) → the loss the step minimises (diagnose differentiates it too)

    def train(self, batches: Batches, monitor: TrainingMonitor, start_epoch: int = 0,
              start_step: int = 0) -> None:
        """Train from (start_epoch, start_step) to the end of `batches.epochs`, reporting each
        step to the monitor and stopping after the step where it asks to."""

    def evaluate(self, dataset) -> dict[str, float]:
        """Loss and metrics over a dataset, keyed like Keras' logs ("loss", "accuracy")."""


def make_loop(config, built, objective, optimizer, choice: PolicyChoice,
              strategy=None) -> TrainingLoop:
    """The experiment's loop (`train.loop`), constructed (inside the strategy's scope, when
    there is one) with the built model (`model.BuiltModel`) compiled for its `objective`
    (`compiled.compile_arguments`); its module is imported only when used."""
    from mptrain.training.compiled import compile_arguments

    if config.train.loop == "fit":
        from mptrain.training.fit_loop import FitLoop as Loop
    else:
        from mptrain.training.custom_loop import CustomLoop as Loop
    model = built.model
    model.compile(optimizer=optimizer, jit_compile=choice.jit_compile,
                  **compile_arguments(config, objective, built.output))
    if model.optimizer is not optimizer:  # a silently replaced one would scale otherwise
        from mptrain.errors import MptrainError

        raise MptrainError("internal error: Model.compile replaced the configured optimizer "
                           f"({type(optimizer).__name__}) by a {type(model.optimizer).__name__}")
    return Loop(model, optimizer, every_class_weight(config.train.class_weight, model), choice,
                strategy)


def every_class_weight(class_weight: dict[int, float] | None, model) -> dict[int, float] | None:
    """`train.class_weight` as both loops apply it, as Model.fit does: each example's loss
    times its class's weight (the metrics unweighted), 1.0 for a class it leaves out. Every
    class the model outputs is named, in order: Keras' fit looks labels up in a table only as
    long as the highest class named (a higher label read past its end). None without."""
    if not class_weight:
        return None
    classes = max(max(class_weight) + 1, model.outputs[0].shape[-1], 2)
    return {c: class_weight.get(c, 1.0) for c in range(classes)}
