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
from mptrain.data.dataset import Dataset, InputSpec, Split, split_keys, train_and_test
from mptrain.data.folders import IMAGE_FILES, read_pixels
from mptrain.data.source import Source
from mptrain.errors import DataError
from mptrain.objective import LabelStats


def mask_pairs(cfg: ImageMasksData) -> list[tuple[str, str, str]]:
    """(key, image, mask) of every image under `path`, its mask the file of the same
    relative name under `masks_path`."""
    for key, folder in (("data.path", cfg.path), ("data.masks_path", cfg.masks_path)):
        if not folder.is_dir():
            raise DataError(f"{key} {folder}: no such folder")
    masks = {p.relative_to(cfg.masks_path).with_suffix("").as_posix(): p
             for p in cfg.masks_path.rglob("*") if p.suffix.lower() in IMAGE_FILES}
    found = []
    for image in sorted(p for p in cfg.path.rglob("*") if p.suffix.lower() in IMAGE_FILES):
        key = image.relative_to(cfg.path).with_suffix("").as_posix()
        if key not in masks:
            raise DataError(f"data.masks_path {cfg.masks_path}: no mask for {image.name} (looked "
                            f"for {key}.png or another image of that name)")
        found.append((key, str(image), str(masks[key])))
    if not found:
        raise DataError(f"data.path {cfg.path}: no images ({', '.join(sorted(IMAGE_FILES))})")
    return found


def read_mask(path: str) -> tuple[tuple[int, int], set[int]]:
    """A mask's (height, width) and the class ids it holds (read with Pillow)."""
    import numpy as np
    from PIL import Image

    try:
        with Image.open(path) as mask:
            values = np.asarray(mask)
    except OSError as exc:
        raise DataError(f"{path}: not a readable mask ({exc})") from None
    return values.shape[:2], set(np.unique(values[..., 0] if values.ndim == 3 else values).tolist())


def split_pairs(cfg: ImageMasksData):
    """The pairs of the training, validation and test splits, by a hash of each name; the
    training and validation ones among the first `data.max_train_examples`, the test ones
    the first `data.max_test_examples`."""
    every = mask_pairs(cfg)
    kept, _, test = train_and_test(cfg, [key for key, _, _ in every], None)
    fit, val = split_keys([every[i][0] for i in kept], cfg.validation_split, "validation")
    if not fit or not test:
        raise DataError(f"data.path {cfg.path}: {len(every)} images are too few for the test and "
                        "validation splits")
    return [every[kept[i]] for i in fit], [every[kept[i]] for i in val], [every[i] for i in test]


def mask_stats(cfg: ImageMasksData, train, rest) -> tuple[LabelStats, tuple[int, int]]:
    """What the masks hold (every one read, one at a time): the largest class id of all, how
    many ids the training masks hold; and the size images and masks are given at
    (`data.image_size`, else the first training mask's)."""
    masks = [read_mask(m) for _, _, m in train + rest]
    size = tuple(cfg.image_size) if cfg.image_size is not None else masks[0][0]
    return LabelStats(source=f"data.masks_path {cfg.masks_path}", shape=size, whole=True, low=0.0,
                      high=float(max(max(ids) for _, ids in masks)), one_hot=False,
                      training_distinct=len(set().union(*(ids for _, ids in masks[:len(train)])))), size


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

            def load(index):  # a mask to the nearest pixel: class ids must not be blended
                mask = tf.io.decode_image(tf.io.read_file(masks[index]), channels=1, expand_animations=False)
                return (read_pixels(tf, images[index], channels, (height, width)),
                        tf.cast(tf.image.resize(mask, (height, width), method="nearest"), tf.uint8))

            return Split(len(part), load=load)

        return Dataset(train=split(train), val=split(val) if val else None, test=split(test),
                       spec=InputSpec((height, width, channels), "image", pixels=True),
                       labels=stats, source=str(cfg.path))
