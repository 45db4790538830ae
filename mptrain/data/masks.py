"""`image_masks`: images and their masks (a class id per pixel), paired by file name.

keras.io's segmentation example reads the pets' photos and their trimaps from two folders,
sorted alike; here each image's mask is found by its name (the same relative path, any image
extension), so a missing or extra file is said, not silently shifted onto the next. Every
mask is read before training (its size and the class ids it holds: what the head must
output); images and masks are then decoded and resized in parallel as batches need them,
masks to the nearest pixel (a class id must not be blended). Test and validation files are
chosen by a hash of their names, as the other folders' are.
"""

from __future__ import annotations

from mptrain.config.kinds import ImageMasksData
from mptrain.data.dataset import Dataset, InputSpec, Split, split_keys
from mptrain.data.source import Source
from mptrain.errors import DataError
from mptrain.objective import LabelStats

IMAGES = {".png", ".jpg", ".jpeg", ".gif", ".bmp"}


def mask_pairs(cfg: ImageMasksData) -> list[tuple[str, str, str]]:
    """(key, image, mask) of every image under `path`, its mask the file of the same
    relative name under `masks_path`."""
    for key, folder in (("data.path", cfg.path), ("data.masks_path", cfg.masks_path)):
        if not folder.is_dir():
            raise DataError(f"{key} {folder}: no such folder")
    masks = {p.relative_to(cfg.masks_path).with_suffix("").as_posix(): p
             for p in cfg.masks_path.rglob("*") if p.suffix.lower() in IMAGES}
    found = []
    for image in sorted(p for p in cfg.path.rglob("*") if p.suffix.lower() in IMAGES):
        key = image.relative_to(cfg.path).with_suffix("").as_posix()
        if key not in masks:
            raise DataError(f"data.masks_path {cfg.masks_path}: no mask for {image.name} (looked "
                            f"for {key}.png or another image of that name)")
        found.append((key, str(image), str(masks[key])))
    if not found:
        raise DataError(f"data.path {cfg.path}: no images ({', '.join(sorted(IMAGES))})")
    return found


def read_masks(masks: list[str], source: str) -> tuple[tuple[int, int], int, set[int]]:
    """The first mask's (height, width), the largest class id of all, and the ids the given
    masks hold (read with Pillow, one at a time)."""
    import numpy as np
    from PIL import Image

    size, high, seen = None, 0, set()
    for path in masks:
        try:
            with Image.open(path) as mask:
                values = np.asarray(mask)
        except OSError as exc:
            raise DataError(f"{path}: not a readable mask ({exc})") from None
        if values.ndim == 3:
            values = values[..., 0]
        size = size or values.shape[:2]
        high = max(high, int(values.max()))
        seen |= set(np.unique(values).tolist())
    return size, high, seen


def split_pairs(cfg: ImageMasksData):
    """The pairs of the training, validation and test splits, by a hash of each name."""
    every = mask_pairs(cfg)
    keys = [k for k, _, _ in every]
    kept, test = split_keys(keys, cfg.test_split, "test")
    train_keys = [keys[i] for i in kept]
    fit, val = split_keys(train_keys, cfg.validation_split, "validation")
    train = [every[kept[i]] for i in fit]
    if not train or not test:
        raise DataError(f"data.path {cfg.path}: {len(every)} images are too few for the test and "
                        "validation splits")
    return train, [every[kept[i]] for i in val], [every[i] for i in test]


def mask_stats(cfg: ImageMasksData, train, rest) -> tuple[LabelStats, tuple[int, int]]:
    source = f"data.masks_path {cfg.masks_path}"
    size, high, seen = read_masks([m for _, _, m in train], source)
    _, high_rest, _ = read_masks([m for _, _, m in rest], source)
    size = tuple(cfg.image_size) if cfg.image_size is not None else size
    return LabelStats(source=source, shape=size, whole=True, low=0.0, high=float(max(high, high_rest)),
                      one_hot=False, training_distinct=len(seen)), size


class ImageMasks(Source, dataset="image_masks"):
    """Images and their masks, paired by file name."""

    def check_files(self, cfg: ImageMasksData) -> list[str]:
        mask_pairs(cfg)
        return []

    def training_examples(self, cfg: ImageMasksData):
        train, val, test = split_pairs(cfg)
        return len(train), mask_stats(cfg, train, val + test)[0]

    def load(self, cfg: ImageMasksData, seed: int = 0, status=None) -> Dataset:
        import tensorflow as tf

        train, val, test = split_pairs(cfg)
        stats, (height, width) = mask_stats(cfg, train, val + test)
        channels = 3 if cfg.color_mode == "rgb" else 1

        def split(part) -> Split:
            images = tf.constant([i for _, i, _ in part])
            masks = tf.constant([m for _, _, m in part])

            def load(index):
                image = tf.io.decode_image(tf.io.read_file(images[index]), channels=channels,
                                           expand_animations=False)
                image = tf.image.resize(image, (height, width), antialias=True)
                mask = tf.io.decode_image(tf.io.read_file(masks[index]), channels=1,
                                          expand_animations=False)
                mask = tf.image.resize(mask, (height, width), method="nearest")
                return (tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8),
                        tf.cast(mask, tf.uint8))

            return Split(len(part), load=load)

        return Dataset(train=split(train), val=split(val) if val else None, test=split(test),
                       spec=InputSpec((height, width, channels), "image", pixels=True),
                       labels=stats, source=str(cfg.path))
