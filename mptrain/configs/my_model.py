"""The builder of the `python_builder` experiment: an example of bringing your own model.

mptrain calls `build(input_shape=..., num_classes=..., **kwargs)` after setting the global
dtype policy, so every layer here follows it (bfloat16 or float16 compute, float32 variables
under a mixed policy). Return the model uncompiled: mptrain compiles it with the experiment's
optimizer, loss and loss scaling. Following the guide, the final softmax is float32 here; had
it not been, mptrain would append a float32 output and say so.
"""

import keras
from keras import layers


def build(input_shape, num_classes, width=64):
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for filters in (width, 2 * width):
        x = layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(momentum=0.9)(x)
        x = layers.Activation("relu")(x)
        x = layers.MaxPooling2D()(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(num_classes)(x)
    outputs = layers.Activation("softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="my_model")
