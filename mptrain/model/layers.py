"""The few layers mptrain adds to Keras', registered so a saved `model.keras` loads again
(`keras.saving.load_model` finds them once `mptrain.model.layers` is imported)."""

from __future__ import annotations

import keras
from keras import ops

PACKAGE = "mptrain"

# ImageNet statistics the applications' own `preprocess_input` use.
IMAGENET_MEAN_BGR_255 = (103.939, 116.779, 123.68)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ImagePreprocessing(keras.layers.Layer):
    """mptrain's images (float32 in [0, 1]) → what a `keras.applications` model expects.

    The same arithmetic as the application's `preprocess_input` (`config.kinds.APPLICATIONS`
    for the modes), as a layer, so it is part of the saved model. Grayscale images are repeated
    to three channels, the ImageNet weights' input. Runs in float32 whatever the policy:
    subtracting a mean of ~120 from values up to 255 loses digits in 16 bits.
    """

    def __init__(self, mode: str, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.mode = mode

    def call(self, images):
        if images.shape[-1] == 1:
            images = ops.concatenate([images] * 3, axis=-1)
        if self.mode == "raw255":
            return images * 255.0
        if self.mode == "tf":
            return images * 2.0 - 1.0
        if self.mode == "torch":
            return (images - ops.array(IMAGENET_MEAN)) / ops.array(IMAGENET_STD)
        return ops.flip(images * 255.0, axis=-1) - ops.array(IMAGENET_MEAN_BGR_255)  # caffe

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], 3)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}


@keras.saving.register_keras_serializable(package=PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """A learned vector per position, added to the token or patch embeddings."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        self.positions = self.add_weight(shape=tuple(input_shape[1:]), name="positions",
                                         initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, inputs):
        return inputs + ops.cast(self.positions, inputs.dtype)


@keras.saving.register_keras_serializable(package=PACKAGE)
class Float32SoftmaxAttention(keras.layers.MultiHeadAttention):
    """`MultiHeadAttention` whose softmax always runs in float32 (why: `transformer.py`).

    The projections and both attention einsums stay 16-bit, where the speed is; only the
    normalisation is float32, and its result is cast back for the einsum with the values. It
    overrides two Keras internals (`keras_internals.ATTENTION_OVERRIDES`, checked by a test).
    """

    def _build_attention(self, rank):
        super()._build_attention(rank)
        self._softmax = keras.layers.Softmax(axis=self._softmax.axis, dtype="float32")

    def _masked_softmax(self, attention_scores, attention_mask=None):
        probabilities = super()._masked_softmax(attention_scores, attention_mask)
        return ops.cast(probabilities, self.compute_dtype)
