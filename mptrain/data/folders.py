"""Folders of files, one sub-folder per class: `image_folder` and `text_folder`.

Files are listed once (cheap), then decoded in the tf.data pipeline as batches need them, in
parallel, so a folder larger than memory trains. Their order and splits hash each file's path
relative to the folder (`dataset.split_keys`).

A broken file must cost its owner one clear line, not a traceback an hour into training, so
every image is decoded once before the first step, and the verdict is cached by file size and
modification time, so the next run does not pay again (`check_images`). Text files are decoded
with `data.encoding`; a byte not valid in it becomes U+FFFD, so one stray byte never stops
training, and an empty file is a valid (empty) example.

Not `keras.utils.image_dataset_from_directory`: its shuffle order depends on how many
iterators were made before, so fit and the custom loop (and a resumed run) would see
different batches.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from mptrain.config.kinds import ImageFolderData, TextFolderData
from mptrain.data.dataset import Dataset, InputSpec, Split, hash_fraction, train_and_test
from mptrain.data.source import Source
from mptrain.errors import DataError
from mptrain.objective import label_stats
from mptrain.record import write_cache

IMAGE_FILES = {".png", ".jpg", ".jpeg", ".gif", ".bmp"}  # what TensorFlow's decode_image reads
FILES = {  # data.dataset → the files it reads (extensions) and what they are called
    "image_folder": (IMAGE_FILES, "image"),
    "text_folder": ({".txt"}, "text"),
}
PROGRESS_FROM = 500  # files: below this, checking is too quick to show


def list_classes(root: Path, dataset: str, classes: list[str] | None = None,
                 key: str = "data.path") -> tuple[list[tuple[str, str, int]], list[str]]:
    """Every file `dataset` reads under root/<class>/ (recursively), in the canonical (hashed)
    order, as (its path relative to root: what the order and the splits hash, its path, its
    label); and the classes. `classes` fixes the class list (a test folder must use the
    training folder's classes). A folder of files without class sub-folders has no classes
    (none: the data's inputs alone, `data.labels`)."""
    extensions, what = FILES[dataset]
    if not root.is_dir():
        raise DataError(f"{key} {root}: no such folder")
    found = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not found and classes is None:  # no classes: the files alone, for a model that needs no labels
        files = sorted(str(p) for p in root.iterdir()
                       if p.is_file() and p.suffix.lower() in extensions and not p.name.startswith("."))
        if files:
            return sorted([(Path(p).name, p, 0) for p in files],
                          key=lambda e: (hash_fraction(e[0], "order"), e[0])), []
    if not found:
        raise DataError(f"{key} {root}: no class sub-folders and no {what} files; put each class's "
                        f"{what} in its own sub-folder ({root}/cats/..., {root}/dogs/...), or, for "
                        "a model that needs no labels, the files themselves")
    if classes is not None and not set(found) <= set(classes):
        extra = ", ".join(sorted(set(found) - set(classes)))
        raise DataError(f"{key} {root}: classes {extra} are not in the training folder's classes "
                        f"({', '.join(classes)})")
    classes = classes or found  # a test folder may hold fewer classes
    entries = []
    for name in found:
        files = [p for p in (root / name).rglob("*")
                 if p.is_file() and p.suffix.lower() in extensions and not p.name.startswith(".")]
        if not files:
            raise DataError(f"{root / name}: no {what} files ({', '.join(sorted(extensions))})")
        entries += [(str(p.relative_to(root)), str(p), classes.index(name)) for p in files]
    return sorted(entries, key=lambda e: (hash_fraction(e[0], "order"), e[0])), classes


Files = tuple[list[str], list[int]]


@dataclass(frozen=True)
class FolderSplits:
    train: Files
    val: Files
    test: Files
    classes: list[str]
    skipped: list[str] = field(default_factory=list)  # broken files left out, with why
    sizes: Counter = field(default_factory=Counter)  # images: (height, width) → how many, from check_images


def split_files(cfg: ImageFolderData | TextFolderData) -> FolderSplits:
    """Training, validation and test files (and labels) of a folder data set; a test file
    never comes from the training folder's training part."""
    entries, classes = list_classes(cfg.path, cfg.dataset)
    tests = (entries if cfg.test_path is None
             else list_classes(cfg.test_path, cfg.dataset, classes, key="data.test_path")[0])
    train, cut, test = train_and_test(cfg, [key for key, _, _ in entries],
                                      None if cfg.test_path is None else len(tests))
    if not test:  # a test folder holds files: too few here is a test_split's
        raise DataError(f"data.path {cfg.path}: {len(entries)} files are too few for a test "
                        f"split of {cfg.test_split:g}; add files or set data.test_path")
    if cut == 0:
        raise DataError(f"data.path {cfg.path}: no training files left after the test and "
                        "validation splits")

    def pick(listed: list[tuple[str, str, int]], idx: list[int]) -> Files:
        return [listed[i][1] for i in idx], [listed[i][2] for i in idx]

    return FolderSplits(pick(entries, train[:cut]), pick(entries, train[cut:]), pick(tests, test), classes)


# --- images -------------------------------------------------------------------------------


def check_images(splits: FolderSplits, skip_bad: bool,
                 status: Callable[[str], object] | None = None) -> FolderSplits:
    """Every image decoded (in parallel, with progress for large folders) or its verdict
    read from the cache: an error naming the first broken one, or, with `skip_bad`, the
    splits without them and the list of what was left out; the sizes of the images kept."""
    from mptrain.hardware.kernels import cache_dir

    # each once: with test_path the same folder as path, a file is in two splits
    files = list(dict.fromkeys(splits.train[0] + splits.val[0] + splits.test[0]))
    # one verdict cache per data folder, in the user's cache folder: path → [size, mtime,
    # problem, height, width]
    roots = "\n".join(sorted({str(Path(f).parent.parent) for f in files}))
    cache_path = cache_dir() / f"images-{hashlib.sha256(roots.encode()).hexdigest()[:16]}.json"
    try:
        cached = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cached = {}
    stamps = {f: [(stat := os.stat(f)).st_size, stat.st_mtime_ns] for f in files}
    known = {f: (entry[2], (entry[3], entry[4])) for f, entry in cached.items()  # unless changed,
             if f in stamps and len(entry) == 5 and entry[:2] == stamps[f]}  # or kept with no size
    unknown = [f for f in files if f not in known]
    if unknown:
        shown = status is not None and len(unknown) >= PROGRESS_FROM
        with status(f"checking {len(unknown):,} images (once; cached)…") if shown else nullcontext():
            known.update(_decode_all(unknown))
        cached.update({f: [*stamps[f], known[f][0], *known[f][1]] for f in unknown})
        write_cache(cache_path, json.dumps(cached))
    bad = {f: known[f][0] for f in files if known[f][0]}
    if bad and not skip_bad:
        first, problem = next(iter(bad.items()))
        more = f" ({len(bad) - 1} more broken)" if len(bad) > 1 else ""
        raise DataError(f"{first}: {problem}{more}; remove or replace it, or set "
                        "data.skip_bad_files: true to train without broken files")

    def keep(part: Files) -> Files:
        kept = [(f, y) for f, y in zip(*part, strict=True) if f not in bad]
        return [f for f, _ in kept], [y for _, y in kept]

    train = keep(splits.train)
    if not train[0]:
        raise DataError("every training image is broken; nothing to train on")
    return FolderSplits(train, keep(splits.val), keep(splits.test), splits.classes,
                        [f"{path}: {problem}" for path, problem in bad.items()],
                        Counter(known[f][1] for f in files if f not in bad))


def image_size(cfg: ImageFolderData, sizes: Counter) -> tuple[tuple[int, int], list[str]]:
    """The size images are given to the model at: `data.image_size`, else the images' own
    when they share one, else the most common; and a note when any image is resized (it
    costs time and memory, and changes what the model sees)."""
    common = max(sizes, key=lambda size: (sizes[size], size)) if sizes else (64, 64)
    chosen = tuple(cfg.image_size) if cfg.image_size is not None else common
    resized = sum(n for size, n in sizes.items() if size != chosen)
    if not resized:
        return chosen, []
    why = ("data.image_size" if cfg.image_size is not None else
           "the most common size, as data.image_size is unset")
    found = ", ".join(f"{h}x{w} ({n})" for (h, w), n in sizes.most_common(3))
    more = f" and {len(sizes) - 3} more sizes" if len(sizes) > 3 else ""
    return chosen, [f"{resized} of {sum(sizes.values())} images resized to {chosen[0]}x{chosen[1]} "
                    f"({why}; the images are {found}{more})"]


def _decode_all(paths: list[str]) -> dict[str, tuple[str, tuple[int, int]]]:
    """path → ('', its (height, width)) when it decodes, else (what is wrong, (0, 0));
    decoded in parallel (TensorFlow's decoders release the interpreter)."""
    import tensorflow as tf

    def verdict(path: str) -> tuple[str, tuple[int, int]]:
        try:
            data = tf.io.read_file(path)
            if not int(tf.strings.length(data)):
                return "empty file", (0, 0)
            height, width = tf.io.decode_image(data, expand_animations=False).shape[:2]
            return "", (int(height), int(width))
        except tf.errors.OpError as exc:
            return f"not a readable image ({exc.message.splitlines()[0][:120]})", (0, 0)

    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
        return dict(zip(paths, pool.map(verdict, paths), strict=True))


def read_pixels(tf, path, channels: int, size: tuple[int, int]):
    """An image file decoded to `channels` and resized to `size`, as uint8: as a cache file
    stores it, so the pixels are the same whether cached or not."""
    image = tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)
    return tf.cast(tf.clip_by_value(tf.round(tf.image.resize(image, size, antialias=True)), 0, 255),
                   tf.uint8)


class Folder(Source):
    """A folder of class sub-folders; every file listed (not read) by the check."""

    def check_files(self, cfg: ImageFolderData | TextFolderData) -> list[str]:
        classes = list_classes(cfg.path, cfg.dataset)[1]
        if cfg.test_path is not None:
            list_classes(cfg.test_path, cfg.dataset, classes, key="data.test_path")
        return []

    def training_examples(self, cfg: ImageFolderData | TextFolderData):
        splits = split_files(cfg)
        return len(splits.train[0]), _label_stats(cfg, splits)


class ImageFolder(Folder, dataset="image_folder"):
    def input_spec(self, cfg: ImageFolderData) -> InputSpec | None:
        if cfg.image_size is None:  # the images' own size, known once they are read
            return None
        return InputSpec((*cfg.image_size, 3 if cfg.color_mode == "rgb" else 1), "image", pixels=True)

    def load(self, cfg: ImageFolderData, seed: int = 0,
             status: Callable[[str], object] | None = None) -> Dataset:
        import tensorflow as tf

        splits = check_images(split_files(cfg), cfg.skip_bad_files, status)
        channels = 3 if cfg.color_mode == "rgb" else 1
        (height, width), resized = image_size(cfg, splits.sizes)

        data = _dataset(cfg, splits, lambda path: read_pixels(tf, path, channels, (height, width)),
                        InputSpec((height, width, channels), "image", pixels=True), {})
        return replace(data, notes=data.notes + resized)


class TextFolder(Folder, dataset="text_folder"):
    def input_spec(self, cfg: TextFolderData) -> InputSpec:
        return InputSpec((cfg.sequence_length,), "tokens", cfg.max_tokens)

    def load(self, cfg: TextFolderData, seed: int = 0, status=None) -> Dataset:
        """Texts tokenised in the pipeline by a `TextVectorization` adapted on the training split
        (its vocabulary is kept in the run folder as vocabulary.txt)."""
        import keras
        import tensorflow as tf

        splits = split_files(cfg)

        def read(path):
            return tf.strings.unicode_transcode(tf.io.read_file(path), cfg.encoding, "UTF-8",
                                                errors="replace")

        vectorize = keras.layers.TextVectorization(max_tokens=cfg.max_tokens,
                                                   output_sequence_length=cfg.sequence_length)
        texts = tf.data.Dataset.from_tensor_slices(splits.train[0]).map(
            read, num_parallel_calls=tf.data.AUTOTUNE).batch(256)
        try:
            vectorize.adapt(texts)
        except tf.errors.OpError as exc:
            raise DataError(f"data.path {cfg.path}: cannot read the training texts ({exc.message})") from None
        vocabulary = vectorize.get_vocabulary()

        def decode(path):
            # as a batch of one: a lone empty text would give 0 tokens, not sequence_length
            return vectorize(read(path)[None])[0]

        spec = InputSpec((cfg.sequence_length,), "tokens", len(vocabulary))
        return _dataset(cfg, splits, decode, spec, {"vocabulary.txt": "\n".join(vocabulary) + "\n"})


def _dataset(cfg, splits: FolderSplits, decode, spec: InputSpec, files: dict[str, str]) -> Dataset:
    """The splits as `Split.load`s: example index → (decode(its path), its label)."""
    import tensorflow as tf

    def split(part: Files) -> Split:
        paths, labels = tf.constant(part[0]), tf.constant(part[1], tf.int32)
        return Split(len(part[0]), load=lambda index: (decode(paths[index]), labels[index]))

    kept = {**({"classes.txt": "\n".join(splits.classes) + "\n"} if splits.classes else {}), **files}
    if splits.skipped:
        kept["skipped_files.txt"] = "\n".join(splits.skipped) + "\n"
    return Dataset(
        train=split(splits.train),
        val=split(splits.val) if splits.val[0] else None,
        test=split(splits.test),
        spec=spec,
        labels=_label_stats(cfg, splits),
        source=str(cfg.path),
        files=kept,
        notes=[f"{len(splits.skipped)} broken file(s) left out (data.skip_bad_files): listed in "
               "skipped_files.txt"] if splits.skipped else [],
    )


def _label_stats(cfg, splits: FolderSplits):
    """What the labels are (`objective.label_stats`); None for files without classes."""
    labels = splits.train[1]
    if not splits.classes:
        return None
    return label_stats(labels, labels + splits.val[1] + splits.test[1], f"data.path {cfg.path}",
                       splits.classes)
