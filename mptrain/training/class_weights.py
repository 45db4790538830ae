"""`train.class_weight`, as both loops apply it and as Model.fit does: each example's loss
times its class's weight, averaged over the batch (the metrics unweighted)."""

from __future__ import annotations


def weight_per_class(class_weight: dict[int, float] | None, model):
    """`class_weight` as a vector indexed by class id, 1.0 for a class it leaves out (as
    Keras' fit has it), long enough for every class the model outputs; None without."""
    if not class_weight:
        return None
    import tensorflow as tf

    classes = max(max(class_weight) + 1, model.outputs[0].shape[-1], 2)
    return tf.constant([class_weight.get(c, 1.0) for c in range(classes)], tf.float32)


def example_weights(weights, y_true):
    """Each example's weight: its class's (`weight_per_class`), by its label."""
    import tensorflow as tf

    return tf.gather(weights, tf.cast(tf.reshape(y_true, [-1]), tf.int32))
