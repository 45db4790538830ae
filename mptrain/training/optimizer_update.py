"""The optimizer update as one XLA computation.

Under a mixed policy the variables, gradients and optimizer slots stay float32, so the
update (RMSprop: read and write three float32 tensors per weight) does not get faster with
16-bit compute: on the guide's MLP on a 2-core AMX CPU it is ~50 ms of a ~265 ms bfloat16
step. TensorFlow runs it as a chain of element-wise kernels, each a full pass over memory;
XLA fuses them. Measured side by side: float32 step -4%, mixed_bfloat16 step -8 to -12%
(bench/NOTES.md). The rest of the step stays on oneDNN, which keeps AMX for bfloat16.
"""

from __future__ import annotations


def build_optimizer_state(optimizer, variables, xla_update: bool) -> None:
    """The optimizer's state (its slots, and the loss scale) created now, before training:
    lazy creation inside a tf.function or a distribution strategy fails, the first timed step
    should not pay for it, and the monitor and checkpoints read it from the start. With
    `xla_update`, its update is compiled with XLA as well."""
    if xla_update:
        compile_optimizer_update(optimizer, variables)
    else:
        optimizer.build(variables)


def compile_optimizer_update(optimizer, variables) -> None:
    """Make `optimizer.apply` (and so `apply_gradients`, which Model.fit calls) run under XLA.

    The optimizer is built first: XLA cannot create its slot variables while tracing. The
    variables are captured rather than passed, because Keras variables cannot cross a
    `tf.function` boundary as arguments; callers must update exactly these variables.
    """
    import tensorflow as tf

    variables = list(variables)
    optimizer.build(variables)
    unbound_apply = type(optimizer).apply
    compiled = tf.function(lambda grads: unbound_apply(optimizer, grads, variables),
                           jit_compile=True, autograph=False)

    def apply(grads, trainable_variables=None):
        if trainable_variables is not None and [id(v) for v in trainable_variables] != [
            id(v) for v in variables
        ]:
            raise ValueError("the XLA optimizer update was built for a different variable list")
        return compiled(list(grads))

    optimizer.apply = apply
