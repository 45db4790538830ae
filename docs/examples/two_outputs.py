"""Two outputs, each with its own loss, as keras.io's "multi-input and multi-output models"
(https://keras.io/guides/functional_api/) compiles them: a priority (a value, mean squared
error) and a department (one of 4 classes, cross-entropy), the losses weighted, by output
name. mptrain trains it on that compile; the data gives each output its labels by name."""

import keras
from keras import layers


def two_outputs(input_shape, num_departments=4):
    features = keras.Input(shape=input_shape, name="features")
    x = layers.Dense(32, activation="relu")(features)
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(num_departments, name="department")(x)
    model = keras.Model(inputs=features, outputs={"priority": priority_pred,
                                                  "department": department_pred})
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={"priority": keras.losses.MeanSquaredError(),
              "department": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        loss_weights={"priority": 1.0, "department": 0.2},
        metrics={"priority": ["mae"], "department": ["accuracy"]},
    )
    return model
