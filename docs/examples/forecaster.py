"""keras.io's "Timeseries forecasting for weather prediction", its model code unchanged
(https://keras.io/examples/timeseries/timeseries_weather_forecasting/): an LSTM of 32 units
and a Dense(1), compiled with Adam and a mean squared error. mptrain trains it as compiled,
in any precision; `forecaster.yaml` cuts the windows the example cuts."""

import keras

learning_rate = 0.001


def forecaster(input_shape):
    inputs = keras.layers.Input(shape=input_shape)
    lstm_out = keras.layers.LSTM(32)(inputs)
    outputs = keras.layers.Dense(1)(lstm_out)

    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")
    return model
