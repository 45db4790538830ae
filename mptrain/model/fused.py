"""Fused layers (`model.fused_layers`): the two places a convolutional network loses its
16-bit gain on a CPU, measured on ResNet50 (bench/NOTES.md, section 10):

- Keras' `BatchNormalization` casts 16-bit activations to float32, computes mean, variance
  and the normalisation as a dozen unfused ops, and casts back (`batch_normalization.py`,
  `call`): ResNet50's 53 of them cost as much as its forward convolutions. TensorFlow's
  `FusedBatchNormV3` takes bfloat16 (or float16) activations with float32 scale, offset and
  statistics in one op (oneDNN's on a CPU). `FusedBatchNormalization` is that, with Keras'
  weights, so checkpoints and saved models read alike.
- oneDNN's bfloat16 weight gradient of a convolution (`brgconv_bwd_w`) ran 2-6x slower than
  float32's on the small maps of a network's late stages (2x2, 4x4), erasing the forward and
  input-gradient gains. `Float32GradConv2D` computes the convolution and its input gradient in
  the compute dtype, and its weight gradient in float32, from float32 copies of its input and
  output gradient (more precise too: the float32 variable gets a float32 gradient).

`fuse` rebuilds a built model with them (`model.dtypes.rebuild`, as per-layer policies are);
`unfused` gives Keras' layers back, with the same weights, for the saved model.
"""

from __future__ import annotations

import keras

from mptrain.model.layers import PACKAGE

FUSED = {"BatchNormalization": "FusedBatchNormalization", "Conv2D": "Float32GradConv2D"}


@keras.saving.register_keras_serializable(package=PACKAGE)
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """Keras' BatchNormalization as one `FusedBatchNormV3` (its float32 variables read uncast,
    as Keras reads them). One difference: the op updates the moving variance with the batch's
    unbiased variance (n/(n-1) of Keras'), as Keras 2's `fused=True` did."""

    def call(self, inputs, training=None, mask=None):
        import tensorflow as tf

        if mask is not None or self.renorm or self.axis not in (-1, len(inputs.shape) - 1) \
                or len(inputs.shape) != 4:
            return super().call(inputs, training=training, mask=mask)  # what the op cannot do
        x = tf.cast(inputs, self.compute_dtype)
        scale = self.gamma if self.scale else tf.ones_like(self.moving_mean)
        offset = self.beta if self.center else tf.zeros_like(self.moving_mean)
        learning = bool(training) and self.trainable
        y, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=self.moving_mean, variance=self.moving_variance,
            epsilon=self.epsilon, exponential_avg_factor=1.0 - self.momentum if learning else 1.0,
            data_format="NHWC", is_training=learning)
        if learning:  # the op returns the moving statistics updated with this batch's
            self.moving_mean.assign(mean)
            self.moving_variance.assign(variance)
        return y


@keras.saving.register_keras_serializable(package=PACKAGE)
class Float32GradConv2D(keras.layers.Conv2D):
    """Keras' Conv2D, its weight gradient computed in float32 (the module docstring says why)."""

    def __init__(self, **kwargs):
        kwargs["autocast"] = False  # the float32 kernel reaches the op, cast inside it
        super().__init__(**kwargs)
        if self.data_format != "channels_last" or self.groups != 1:
            raise ValueError(f"{self.name}: Float32GradConv2D takes channels_last and groups=1 only")

    def call(self, inputs):
        import tensorflow as tf

        if self.compute_dtype == "float32":
            return super().call(inputs)
        dtype = self.compute_dtype
        strides, dilations = (1, *self.strides, 1), (1, *self.dilation_rate, 1)
        padding = self.padding.upper()

        @tf.custom_gradient
        def convolve(x, kernel):
            weights = tf.cast(kernel, dtype)

            def gradients(dy):
                dx = tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=tf.shape(x), filter=weights, out_backprop=dy, strides=strides,
                    padding=padding, dilations=dilations)
                dk = tf.raw_ops.Conv2DBackpropFilter(
                    input=tf.cast(x, tf.float32), filter_sizes=tf.shape(kernel),
                    out_backprop=tf.cast(dy, tf.float32), strides=strides, padding=padding,
                    dilations=dilations)
                return dx, dk

            return tf.nn.conv2d(x, weights, strides, padding, dilations=dilations), gradients

        # the kernel as a tensor: tf.custom_gradient refuses a variable read inside it
        y = convolve(tf.cast(inputs, dtype), tf.convert_to_tensor(self.kernel))
        if self.use_bias:
            y = y + tf.cast(self.bias, dtype)
        return self.activation(y) if self.activation is not None else y


def _swappable(layer: dict) -> bool:
    """A Keras layer `fuse` swaps (a Conv2D only if channels_last and not grouped)."""
    config = layer.get("config", {})
    return layer.get("module") == "keras.layers" and layer.get("class_name") in FUSED and \
        config.get("data_format", "channels_last") == "channels_last" and config.get("groups", 1) == 1


NOTHING_TO_FUSE = "the model has no Conv2D or BatchNormalization: the same as mixed_bfloat16"


def why_not_fused(model) -> str | None:
    """Why `fuse` would not change the model (None: it would; plan's `+fused` candidate is
    tried only then): it has no layer to swap, or it trains with its own step, which a
    rebuilt model would lose."""
    from mptrain.model.dtypes import layer_configs
    from mptrain.model.own_step import has_own_step

    if has_own_step(model):
        return (f"{type(model).__name__} trains with its own step, which fused layers would lose "
                "(they rebuild the model as a plain Keras model)")
    swappable = any(map(_swappable, layer_configs(keras.saving.serialize_keras_object(model))))
    return None if swappable else NOTHING_TO_FUSE


def fuse(model):
    """The model with every Keras BatchNormalization and Conv2D the fused ops take swapped
    for its fused layer (weights copied), and how many of each."""
    from collections import Counter

    from mptrain.model.dtypes import rebuild

    swapped = Counter()

    def edit(layer: dict) -> None:
        if _swappable(layer):
            name = layer["class_name"]
            layer.update(module=__name__, class_name=FUSED[name], registered_name=f"{PACKAGE}>{FUSED[name]}")
            swapped[name] += 1

    return rebuild(model, edit), [f"{n} {name}" for name, n in swapped.items()]  # counted as it rebuilds


def unfused(model):
    """The model with Keras' own layers back (weights copied): what a run saves, so its
    model.keras loads wherever Keras does; the fused layers are how it trained, not what it is."""
    from mptrain.model.dtypes import rebuild

    plain = {fused: name for name, fused in FUSED.items()}

    def edit(layer: dict) -> None:
        if layer.get("module") == __name__:
            layer.update(module="keras.layers", class_name=plain[layer["class_name"]], registered_name=None)

    return rebuild(model, edit)
