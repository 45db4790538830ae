"""Folders of files, one sub-folder per class: `image_folder` and `text_folder`.

Files are listed once (cheap), then decoded in the tf.data pipeline as batches need them, in
parallel, so a folder larger than memory trains. The order of the files, and which go to the
test and validation splits, come from a hash of each file's path relative to the folder: the
same on every machine and every run, and independent of how the file system lists them.

Not `keras.utils.image_dataset_from_directory`: its shuffle order depends on how many
iterators were made before, so fit and the custom loop (and a resumed run) would see
different batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mptrain.config.schema import ImageFolderData, TextFolderData
from mptrain.data.dataset import Dataset, InputSpec, Split, hash_fraction, split_keys
from mptrain.errors import DataError

IMAGE_SIGNATURES = {  # magic bytes → format; anything else is not an image TensorFlow decodes
    b"\x89PNG": "png", b"\xff\xd8\xff": "jpeg", b"GIF8": "gif", b"BM": "bmp",
}
IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".gif", ".bmp"}
TEXT_EXTENSIONS = {".txt"}


@dataclass(frozen=True)
class Listing:
    files: list[str]  # absolute paths, in the canonical (hashed) order
    labels: list[int]
    classes: list[str]
    root: Path


def list_classes(root: Path, extensions: set[str], what: str, classes: list[str] | None = None) -> Listing:
    """Every file with one of `extensions` under root/<class>/ (recursively). `classes` fixes
    the class list (a test folder must use the training folder's classes)."""
    if not root.is_dir():
        raise DataError(f"{root}: no such folder (data.path or data.test_path)")
    found = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not found:
        raise DataError(f"{root}: no class sub-folders; put each class's {what} in its own "
                        f"sub-folder ({root}/cats/..., {root}/dogs/...)")
    if classes is not None and not set(found) <= set(classes):
        extra = ", ".join(sorted(set(found) - set(classes)))
        raise DataError(f"{root}: classes {extra} are not in the training folder's classes "
                        f"({', '.join(classes)})")
    classes = classes or found
    entries = []
    for name in found:
        files = [p for p in (root / name).rglob("*")
                 if p.is_file() and p.suffix.lower() in extensions and not p.name.startswith(".")]
        if not files:
            raise DataError(f"{root / name}: no {what} files ({', '.join(sorted(extensions))})")
        entries += [(str(p.relative_to(root)), str(p), classes.index(name)) for p in files]
    entries.sort(key=lambda e: (hash_fraction(e[0], "order"), e[0]))
    return Listing([e[1] for e in entries], [e[2] for e in entries], classes, root)


def _splits(cfg: ImageFolderData | TextFolderData, extensions: set[str], what: str):
    """(train, validation, test) listings, as index lists into the listings they come from."""
    listing = list_classes(cfg.path, extensions, what)
    keys = [str(Path(f).relative_to(listing.root)) for f in listing.files]
    if cfg.test_path is not None:
        test_listing = list_classes(cfg.test_path, extensions, what, listing.classes)
        train_idx, test_idx = list(range(len(keys))), list(range(len(test_listing.files)))
    else:
        train_idx, test_idx = split_keys(keys, cfg.test_split, "test")
        test_listing = listing
        if not test_idx:
            raise DataError(f"{cfg.path}: {len(keys)} files are too few for a test split of "
                            f"{cfg.test_split:g}; add files or set data.test_path")
    train_idx = train_idx[: cfg.max_train_examples] if cfg.max_train_examples else train_idx
    test_idx = test_idx[: cfg.max_test_examples] if cfg.max_test_examples else test_idx
    cut = len(train_idx) - int(len(train_idx) * cfg.validation_split)
    if cut == 0:
        raise DataError(f"{cfg.path}: no training files left after the test and validation splits")
    pick = lambda lst, idx: ([lst.files[i] for i in idx], [lst.labels[i] for i in idx])  # noqa: E731
    return (pick(listing, train_idx[:cut]), pick(listing, train_idx[cut:]),
            pick(test_listing, test_idx), listing.classes)


def load_image_folder(cfg: ImageFolderData) -> Dataset:
    train, val, test, classes = _splits(cfg, IMAGE_EXTENSIONS, "image")
    for path in train[0] + val[0] + test[0]:
        _check_image_signature(path)
    channels = 3 if cfg.color_mode == "rgb" else 1
    height, width = cfg.image_size

    def decoder(files, labels):
        import tensorflow as tf

        paths, ys = tf.constant(files), tf.constant(labels, tf.int32)

        def load(index):
            image = tf.io.decode_image(tf.io.read_file(paths[index]), channels=channels,
                                       expand_animations=False)
            image = tf.image.resize(image, (height, width), antialias=True)
            # uint8, as stored in a cache file: the same pixels whether cached or not
            return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8), ys[index]

        return load

    return Dataset(
        train=Split(len(train[0]), load=decoder(*train)),
        val=Split(len(val[0]), load=decoder(*val)) if val[0] else None,
        test=Split(len(test[0]), load=decoder(*test)),
        spec=InputSpec((height, width, channels), "image"),
        num_classes_seen=len(classes),
        source=str(cfg.path),
        files={"classes.txt": "\n".join(classes) + "\n"},
    )


def load_text_folder(cfg: TextFolderData) -> Dataset:
    """Texts tokenised in the pipeline by a `TextVectorization` adapted on the training split
    (its vocabulary is kept in the run folder as vocabulary.txt)."""
    import keras
    import tensorflow as tf

    train, val, test, classes = _splits(cfg, TEXT_EXTENSIONS, "text")
    vectorize = keras.layers.TextVectorization(max_tokens=cfg.max_tokens,
                                               output_sequence_length=cfg.sequence_length)
    texts = tf.data.Dataset.from_tensor_slices(train[0]).map(
        tf.io.read_file, num_parallel_calls=tf.data.AUTOTUNE).batch(256)
    try:
        vectorize.adapt(texts)
    except tf.errors.OpError as exc:
        raise DataError(f"{cfg.path}: cannot read the training texts ({exc.message})") from None
    vocabulary = vectorize.get_vocabulary()

    def decoder(files, labels):
        paths, ys = tf.constant(files), tf.constant(labels, tf.int32)

        def load(index):
            return vectorize(tf.io.read_file(paths[index])), ys[index]

        return load

    return Dataset(
        train=Split(len(train[0]), load=decoder(*train)),
        val=Split(len(val[0]), load=decoder(*val)) if val[0] else None,
        test=Split(len(test[0]), load=decoder(*test)),
        spec=InputSpec((cfg.sequence_length,), "tokens", len(vocabulary)),
        num_classes_seen=len(classes),
        source=str(cfg.path),
        files={"classes.txt": "\n".join(classes) + "\n",
               "vocabulary.txt": "\n".join(vocabulary) + "\n"},
    )


def _check_image_signature(path: str) -> None:
    """An empty, truncated-to-nothing or non-image file is found now, not mid-training."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    if not any(head.startswith(magic) for magic in IMAGE_SIGNATURES):
        raise DataError(f"{path}: not a PNG, JPEG, GIF or BMP image "
                        f"({'empty file' if not head else 'unknown format'}); remove or replace it")
