"""Every Keras internal mptrain reads, in one place, each for a reason Keras' public API does
not serve. A Keras release may rename any of them: `tests/unit/test_keras_internals.py`
calls each one on a small model and fails, naming it, when one is gone or changed.

- A functional model's graph: which layer call produced a symbolic tensor, which of its
  outputs it is, and from what (`_keras_history`, `_inbound_nodes`); the calls of this model's own graph
  (`_nodes_by_depth`: `layer.output` is a nested model's first call, in its own graph).
- Keras' layer-name counters (`global_state`'s `object_name_uids`), reset by `build_model`.
- `MultiHeadAttention`'s softmax layer and attention dropout (`_softmax`, `_dropout`; its
  `_build_attention` and `_masked_softmax` are overridden by `layers.Float32SoftmaxAttention`).
- Where a TensorFlow checkpoint of a Keras optimizer keeps the trainable weights it updates
  (`optimizer/_trainable_variables/N/`).
- What a model was compiled with, as its builder passed it (`_compile_config.config`): the
  public `get_compile_config()` serializes it, and a loss function of the user's own may not
  come back from that.
"""

from __future__ import annotations

import re

# A checkpoint of a Keras optimizer keeps each trainable weight once, under this key.
CHECKPOINT_TRAINABLE = re.compile(r"optimizer/_trainable_variables/\d+/")
ATTENTION_OVERRIDES = ("_build_attention", "_masked_softmax")  # Float32SoftmaxAttention's


def producer(tensor):
    """The layer (operation) that produced a symbolic tensor, or None."""
    history = getattr(tensor, "_keras_history", None)
    return history.operation if history is not None else None


def output_index(tensor) -> int:
    """Which of its producer's outputs a symbolic tensor is (a nested model's second output
    is its 1)."""
    history = getattr(tensor, "_keras_history", None)
    return history.tensor_index if history is not None else 0


def inputs_of(tensor) -> list:
    """The symbolic tensors the call that produced `tensor` took."""
    history = getattr(tensor, "_keras_history", None)
    if history is None:
        return []
    return list(history.operation._inbound_nodes[history.node_index].input_tensors)


def first_call_inputs(layer) -> list | None:
    """The symbolic tensors of a layer's first call (None: never called on symbolic inputs)."""
    try:
        return list(layer._inbound_nodes[0].input_tensors)
    except (AttributeError, IndexError):
        return None


def graph_outputs(model) -> dict[int, object]:
    """id(layer) → the output of its call in this model's own graph."""
    return {id(node.operation): node.output_tensors[0]
            for nodes in model._nodes_by_depth.values() for node in nodes}


def reset_name_counters() -> None:
    import collections

    from keras.src.backend.common import global_state

    global_state.set_global_attribute("object_name_uids", collections.defaultdict(int))


def attention_softmax(layer):
    """A MultiHeadAttention's Softmax layer (used with attention dropout), or None."""
    return getattr(layer, "_softmax", None)


def attention_dropout(layer) -> float:
    return getattr(layer, "_dropout", 0.0)


def compiled_with(model) -> dict:
    """The arguments a compiled model's `compile` was given (optimizer, loss, loss_weights,
    metrics, weighted_metrics, run_eagerly, steps_per_execution, jit_compile), as objects."""
    return dict(model._compile_config.config)
