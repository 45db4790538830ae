"""keras.io's "multi-input and multi-output models" (https://keras.io/guides/functional_api/),
its model and compile as written: ranking customer tickets by priority and routing them to a
department, from three inputs (a title and a body, as word ids, and tags, 0/1 each). The
.npz gives each input its arrays by name (x_train_title, x_train_body, x_train_tags), and each
output its targets (y_train_priority: a probability, y_train_department: one-hot rows)."""

import keras
from keras import layers

num_tags = 12  # Number of unique issue tags
num_words = 10000  # Size of vocabulary obtained when preprocessing text data
num_departments = 4  # Number of departments for predictions


def tickets():
    title_input = keras.Input(shape=(None,), name="title")  # Variable-length sequence of ints
    body_input = keras.Input(shape=(None,), name="body")  # Variable-length sequence of ints
    tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`

    # Embed each word in the title into a 64-dimensional vector
    title_features = layers.Embedding(num_words, 64)(title_input)
    # Embed each word in the text into a 64-dimensional vector
    body_features = layers.Embedding(num_words, 64)(body_input)

    # Reduce sequence of embedded words in the title into a single 128-dimensional vector
    title_features = layers.LSTM(128)(title_features)
    # Reduce sequence of embedded words in the body into a single 32-dimensional vector
    body_features = layers.LSTM(32)(body_features)

    # Merge all available features into a single large vector via concatenation
    x = layers.concatenate([title_features, body_features, tags_input])

    # Stick a logistic regression for priority prediction on top of the features
    priority_pred = layers.Dense(1, name="priority")(x)
    # Stick a department classifier on top of the features
    department_pred = layers.Dense(num_departments, name="department")(x)

    # Instantiate an end-to-end model predicting both priority and department
    model = keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={
            "priority": keras.losses.BinaryCrossentropy(from_logits=True),
            "department": keras.losses.CategoricalCrossentropy(from_logits=True),
        },
        loss_weights={"priority": 1.0, "department": 0.2},
    )
    return model
