"""Small, learnable data sets on disk, written by the tests themselves (nothing downloaded)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def image_folder(root: Path, classes=("circle", "square", "stripes"), per_class=16, size=12,
                 seed=0) -> Path:
    """PNG images, one sub-folder per class; each class has its own bright pattern."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    patterns = {
        0: ((yy - size / 2) ** 2 + (xx - size / 2) ** 2 < (size / 3) ** 2),
        1: (abs(yy - size / 2) < size / 4) & (abs(xx - size / 2) < size / 4),
        2: (xx // 2) % 2 == 0,
    }
    for index, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            base = patterns[index % 3] * 180 + rng.integers(0, 60, (size, size))
            pixels = np.stack([base, np.roll(base, 1, axis=1), base // 2], axis=-1).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{name}_{i:03d}.png")
    return root


def text_folder(root: Path, per_class=24, seed=0) -> Path:
    """Short texts whose class is the topic word they repeat."""
    rng = np.random.default_rng(seed)
    filler = ["the", "a", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on",
              "are", "with", "as", "his", "they", "be", "at", "one", "have"]
    topics = {"sports": "goal match team score", "weather": "rain cloud storm sunny",
              "cooking": "oven recipe flour bake"}
    for name, words in topics.items():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            tokens = list(rng.choice(filler, 12)) + list(rng.choice(words.split(), 4))
            rng.shuffle(tokens)
            (folder / f"{i:03d}.txt").write_text(" ".join(tokens) + ".\n")
    return root


def csv_table(path: Path, rows=240, seed=0, label_column="species") -> Path:
    """A tabular classification set: class names in a text column, numeric features."""
    rng = np.random.default_rng(seed)
    names = ["setosa", "versicolor", "virginica"]
    centres = rng.normal(0, 3, (3, 4))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sepal_length", "sepal_width", label_column, "petal_length", "petal_width"])
        for _ in range(rows):
            label = int(rng.integers(0, 3))
            f = centres[label] + rng.normal(0, 0.7, 4)
            writer.writerow([f"{f[0]:.3f}", f"{f[1]:.3f}", names[label], f"{f[2]:.3f}", f"{f[3]:.3f}"])
    return path


TFDS_BUILDER = '''
import numpy as np
import tensorflow_datasets as tfds


class TinyShapes(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 1)),
            "label": tfds.features.ClassLabel(num_classes=3)}), supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(96, 0), "test": self._generate_examples(24, 1)}

    def _generate_examples(self, n, seed):
        rng = np.random.default_rng(seed)
        for i in range(n):
            label = i % 3
            image = rng.integers(0, 40, (8, 8, 1)).astype(np.uint8)
            image[label * 2:label * 2 + 3] += 200
            yield f"{seed}_{i}", {"image": image, "label": label}


TinyShapes(data_dir=DATA_DIR).download_and_prepare(
    download_config=tfds.download.DownloadConfig(try_download_gcs=False))
'''


def tfds_dataset(data_dir: Path) -> Path:
    """Prepare `tiny_shapes` in data_dir, offline, in a child process (TFDS registers the
    builder class globally; the test process should not)."""
    import subprocess
    import sys

    script = data_dir / "build_tiny_shapes.py"
    data_dir.mkdir(parents=True, exist_ok=True)
    script.write_text(f"DATA_DIR = {str(data_dir)!r}\n" + TFDS_BUILDER)
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, timeout=300)
    return data_dir


USER_MODELS = '''
import keras
import numpy as np


def functional_logits(input_shape, num_classes):
    """Ends in Dense(num_classes) with no softmax: logits."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(16, activation="relu")(x)
    small = keras.initializers.RandomNormal(stddev=0.01)  # logits near 0: a first loss near ln(n)
    return keras.Model(inputs, keras.layers.Dense(num_classes, kernel_initializer=small, name="out")(x))


def sequential(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(num_classes, activation="softmax")])


class Doubler(keras.layers.Layer):
    """A custom layer, registered nowhere."""

    def call(self, x):
        return 2.0 * x


def custom_layer(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    x = Doubler()(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))


class Classifier(keras.Model):
    """How most people write a model: subclassed, no get_config, returns logits."""

    def __init__(self, num_classes):
        super().__init__()
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(num_classes,
                                      kernel_initializer=keras.initializers.RandomNormal(stddev=0.01))

    def call(self, x):
        return self.out(self.hidden(self.flatten(x)))


def subclassed(input_shape, num_classes):
    return Classifier(num_classes)


class SoftmaxClassifier(keras.Model):
    """Subclassed and ending in a softmax Dense: under a 16-bit policy its rows sum to 1 only
    within the compute dtype's precision."""

    def __init__(self, num_classes):
        super().__init__()
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(num_classes, activation="softmax")

    def call(self, x):
        return self.out(self.hidden(self.flatten(x)))


def subclassed_softmax(input_shape, num_classes):
    return SoftmaxClassifier(num_classes)


class Squash(keras.layers.Layer):
    def call(self, x):
        return keras.ops.sigmoid(x) * 0.5 + 0.25


def ambiguous(input_shape, num_classes):
    """Outputs in (0, 1) that do not sum to 1: neither clearly logits nor probabilities."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, Squash()(x))


def unseeded(input_shape, num_classes):
    """Initial weights from an unseeded generator: different in every process."""
    model = functional_logits(input_shape, num_classes)
    rng = np.random.default_rng()
    model.set_weights([rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model
'''


def user_models(folder: Path) -> Path:
    """A builder module with the kinds of model users bring."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "user_models.py"
    path.write_text(USER_MODELS)
    return path
