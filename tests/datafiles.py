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


def regression_table(path: Path, rows=240, seed=0, scale=1000.0, sort=False,
                     raw: bool = False) -> Path:
    """A regression: two targets linear in four features, plus noise; `scale` their size
    (house prices in the thousands); `sort`: rows sorted by the first target; `raw`: the
    features on their own scales (an age in tens, a size in the thousands, a distance in
    tenths), as a house table stores them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (rows, 4))
    stored = x * [12.0, 700.0, 0.3, 1.0] + [35.0, 2400.0, 1.5, 0.0] if raw else x
    price = scale * (3 + x @ np.array([1.0, -0.5, 0.25, 0.0]) + 0.05 * rng.normal(0, 1, rows))
    rooms = 2 + x[:, 3] + 0.05 * rng.normal(0, 1, rows)
    order = np.argsort(price) if sort else np.arange(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["age", "size", "price", "distance", "rooms", "floor"])
        for i in order:
            writer.writerow([f"{stored[i, 0]:.4f}", f"{stored[i, 1]:.4f}", f"{price[i]:.2f}",
                             f"{stored[i, 2]:.4f}", f"{rooms[i]:.3f}", f"{stored[i, 3]:.4f}"])
    return path


def weather_table(path: Path, rows=600, seed=0) -> Path:
    """A time series as keras.io's weather example reads one: a timestamp column, then
    numbers; the temperature follows a daily cycle that the pressure leads by a few rows."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows + 6)
    pressure = 1000 + 8 * np.sin(2 * np.pi * t / 48) + rng.normal(0, 0.3, len(t))
    temperature = 12 + 6 * np.sin(2 * np.pi * (t - 6) / 48) + rng.normal(0, 0.3, len(t))
    humidity = 60 + 10 * np.cos(2 * np.pi * t / 48) + rng.normal(0, 1, len(t))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["Date Time", "p (mbar)", "T (degC)", "rh (%)"])
        for i in range(rows):
            writer.writerow([f"01.01.2009 {i // 6:02d}:{i % 6}0:00", f"{pressure[i]:.2f}",
                             f"{temperature[i]:.2f}", f"{humidity[i]:.2f}"])
    return path


def tagged_npz(path: Path, train=256, test=64, labels=4, seed=0) -> Path:
    """Several 0/1 labels per example (tags): label j is on when feature j is positive."""
    rng = np.random.default_rng(seed)

    def draw(n):
        x = rng.normal(0, 1, (n, 8)).astype(np.float32)
        return x, (x[:, :labels] + 0.2 * rng.normal(0, 1, (n, labels)) > 0).astype(np.int64)

    (x_train, y_train), (x_test, y_test) = draw(train), draw(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def masks_npz(path: Path, train=96, test=32, size=16, seed=0, rgb=False) -> Path:
    """Images with a bright square on a dark background, and their masks (N, H, W, 1):
    0 background, 1 the square's inside, 2 its border (keras.io's pets, as trimaps 0-2);
    `rgb`: three channels (the pets are colour photos)."""
    rng = np.random.default_rng(seed)

    def draw(n):
        x = rng.integers(0, 60, (n, size, size, 3 if rgb else 1)).astype(np.uint8)
        y = np.zeros((n, size, size, 1), np.uint8)
        for k in range(n):
            top, left = rng.integers(1, size // 2, 2)
            side = int(rng.integers(4, size // 2))
            y[k, top:top + side, left:left + side] = 2
            y[k, top + 1:top + side - 1, left + 1:left + side - 1] = 1
            x[k][y[k, ..., 0] > 0] += 150
        return x, y

    (x_train, y_train), (x_test, y_test) = draw(train), draw(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def masks_folders(root: Path, count=64, size=16, seed=0) -> tuple[Path, Path]:
    """masks_npz's squares as PNG files: images/NAME.jpg and masks/NAME.png (the pets'
    layout: photos and trimaps of the same name)."""
    from PIL import Image

    arrays = np.load(masks_npz(root / "squares.npz", train=count, test=1, size=size, seed=seed, rgb=True))
    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    for i, (x, y) in enumerate(zip(arrays["x_train"], arrays["y_train"], strict=True)):
        Image.fromarray(x).save(images / f"pet_{i:03d}.png")
        Image.fromarray(y[..., 0]).save(masks / f"pet_{i:03d}.png")
    return images, masks


def two_outputs_npz(path: Path, train=256, test=64, seed=0) -> Path:
    """keras.io's "multi-input and multi-output" shape of problem, small: from one input, a
    priority (a value) and a department (one of 4 classes), labels per output by name."""
    rng = np.random.default_rng(seed)

    def draw(n):
        x = rng.normal(0, 1, (n, 8)).astype(np.float32)
        return x, x[:, :2].sum(axis=1).astype(np.float32), np.argmax(x[:, 2:6], axis=1)

    (x_train, p_train, d_train), (x_test, p_test, d_test) = draw(train), draw(test)
    np.savez(path, x_train=x_train, y_train_priority=p_train, y_train_department=d_train,
             x_test=x_test, y_test_priority=p_test, y_test_department=d_test)
    return path


def tickets_npz(path: Path, train=256, test=64, seed=0) -> Path:
    """keras.io's tickets (docs/examples/tickets.py), learnable: titles and bodies of word ids
    (variable-length in keras.io: 8 and 20 here), 12 tags; the department is the first of
    tags 0-3 that is set (one-hot rows), the priority the share of tags 4-7 set (a probability,
    as keras.io's random priorities are)."""
    rng = np.random.default_rng(seed)

    def draw(n):
        tags = (rng.random((n, 12)) < 0.4).astype(np.float32)
        tags[np.arange(n), rng.integers(0, 4, n)] = 1.0  # every ticket names a department
        department = np.eye(4, dtype=np.float32)[np.argmax(tags[:, :4], axis=1)]
        return {"title": rng.integers(1, 10000, (n, 8)), "body": rng.integers(1, 10000, (n, 20)),
                "tags": tags}, {"priority": tags[:, 4:8].mean(axis=1, keepdims=True),
                                "department": department}

    parts = dict(zip(("train", "test"), (draw(train), draw(test)), strict=True))
    np.savez(path, **{f"{letter}_{split}_{name}": array for split, (x, y) in parts.items()
                      for letter, arrays in (("x", x), ("y", y)) for name, array in arrays.items()})
    return path


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
