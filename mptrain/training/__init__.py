"""Training loops behind one interface: `Model.fit` (`fit_loop`) and the guide's custom loop
(`custom_loop`), both reporting every step to a `monitor.TrainingMonitor`.

What a run needs from a loop: `train(batches, monitor, start_epoch=0, start_step=0)` trains
from (start_epoch, start_step) to the end of `batches.epochs`, reporting each step to the
monitor and stopping after the step where it asks to; `evaluate(dataset)` gives the loss and
metrics over a dataset, keyed like Keras' logs ("loss", "accuracy")."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mptrain.precision.policy import PolicyChoice
    from mptrain.training.custom_loop import CustomLoop
    from mptrain.training.fit_loop import FitLoop


def make_loop(config, built, objective, optimizer, choice: PolicyChoice,
              strategy=None) -> FitLoop | CustomLoop:
    """The experiment's loop (`train.loop`), constructed (inside the strategy's scope, when
    there is one) with the built model (`model.BuiltModel`) compiled for its `objective`
    (`compiled.compile_arguments`) and the optimizer's state built
    (`optimizer.build_optimizer_state`); its module is imported only when used. `optimizer`
    is the one that applies the updates: a `LossScaleOptimizer` under mixed_float16. A model
    with a compile of its own keeps it and its optimizers instead, and `optimizer` is not used
    (`keep_own_compile` wraps each of them); `loop.optimizer` is the one the run follows."""
    from mptrain.model.own_step import own_compile
    from mptrain.training.compiled import compile_arguments
    from mptrain.training.optimizer import build_optimizer_state

    model = built.model
    if own_compile(model):
        scaling = keep_own_compile(model, choice, config.train.loss_scale)
    else:
        model.compile(optimizer=optimizer, jit_compile=choice.jit_compile,
                      **compile_arguments(config, objective, built.output))
        if model.optimizer is not optimizer:  # a silently replaced one would scale otherwise
            from mptrain.errors import MptrainError

            raise MptrainError("internal error: Model.compile replaced the configured optimizer "
                               f"({type(optimizer).__name__}) by a {type(model.optimizer).__name__}")
        build_optimizer_state(optimizer, model.trainable_variables, choice.xla_optimizer_update)
        scaling = {"optimizer": optimizer} if choice.loss_scaling else {}
    class_weight = every_class_weight(config.train.class_weight, model)
    if config.train.loop == "fit":  # Model.fit distributes itself: compiled in the strategy's scope
        from mptrain.training.fit_loop import FitLoop

        return FitLoop(model, scaling, class_weight)
    from mptrain.training.custom_loop import CustomLoop

    return CustomLoop(model, optimizer, class_weight, choice, strategy)


def keep_own_compile(model, choice: PolicyChoice, loss_scale) -> dict:
    """A model compiled by its builder with a compile of its own: mptrain never calls that
    compile again (its arguments are the model's: a distiller's losses, a GAN's two
    optimizers). What mptrain must set, it sets as Keras' compile does: XLA on the model
    (`jit_compile`, which fit reads), the step function traced anew; and under
    mixed_float16 dynamic loss scaling, with the experiment's settings, around every optimizer
    the model holds (`loss_scale.scale_every_optimizer`): {name: LossScaleOptimizer}."""
    from mptrain.training.loss_scale import scale_every_optimizer

    model.jit_compile = choice.jit_compile
    model.train_function = model.test_function = model.predict_function = None
    if not choice.loss_scaling:
        return {}
    return scale_every_optimizer(model, loss_scale.initial_scale, loss_scale.dynamic_growth_steps)


def every_class_weight(class_weight: dict[int, float] | None, model) -> dict[int, float] | None:
    """`train.class_weight` as both loops apply it, as Model.fit does: each example's loss
    times its class's weight (the metrics unweighted), 1.0 for a class it leaves out. Every
    class the model outputs is named, in order: Keras' fit looks labels up in a table only as
    long as the highest class named (a higher label read past its end). None without."""
    if not class_weight:
        return None
    classes = max(max(class_weight) + 1, model.outputs[0].shape[-1], 2)
    return {c: class_weight.get(c, 1.0) for c in range(classes)}
