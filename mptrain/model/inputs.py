"""What a model expects at its input when the data is pixels: values in 0-255, or in 0-1.

Keras' own loaders (`image_dataset_from_directory`, `keras.datasets`) give pixels as they are
stored, 0-255, and a Keras model that wants them smaller says so itself: keras.io's examples
start with `Rescaling(1.0 / 255)` (or an adapted `Normalization`), and a script whose model
has no such layer divides by 255 before `fit`. Either way round, feeding the other range
trains silently wrong: a model that rescales 0-1 pixels sees 0-0.004 and learns nothing.

So mptrain feeds each model what its own script would have fed it, read from the layers
between the model's input and its first layer that computes (`pixel_range`): a Rescaling or
Normalization there gets pixels as stored; no such layer gets them divided by 255 (as every
model of mptrain's own is built to take). What it cannot read (a Normalization with no
statistics yet, a Rescaling by an unusual factor) is an error naming the layer and
`model.pixel_range`, which declares it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from mptrain.errors import ConfigError
from mptrain.model.walk import leaf_layers

PixelRange = Literal["0-255", "0-1"]

# Layers that move or pick pixels without changing their scale: the reading looks past them.
SCALE_KEEPING = {
    "Reshape", "Flatten", "Permute", "Resizing", "CenterCrop", "Cropping2D",
    "ZeroPadding2D", "Identity", "RandomFlip", "RandomCrop", "RandomRotation", "RandomZoom",
    "RandomTranslation", "RandomContrast", "RandomBrightness", "GaussianNoise", "Dropout",
}
SMALL = 5.0  # a Rescaling that maps 255 to at most this expects pixels as stored


class Reading(NamedTuple):
    range: PixelRange | None  # None: the layer does not say
    evidence: str


def read_pixel_range(model) -> Reading:
    """The range the model's first layer that computes expects (nested models looked into)."""
    layer = next((layer for layer in leaf_layers(model) if type(layer).__name__ not in SCALE_KEEPING),
                 None)
    if layer is None:
        return Reading("0-1", "no layer reads the input")
    kind = type(layer).__name__
    name = f"{layer.name!r} ({kind})"
    if kind == "Rescaling":
        return _rescaling(layer, name)
    if kind == "Normalization":
        return _normalization(layer, name)
    return Reading("0-1", f"it has no Rescaling or Normalization before {name}")


def _rescaling(layer, name: str) -> Reading:
    import numpy as np

    top = float(np.max(np.abs(np.asarray(layer.scale, dtype="float64")))) * 255
    if top <= SMALL:
        return Reading("0-255", f"its {name} scales them down to at most {top:.3g}")
    if top >= 255 * 20:
        return Reading("0-1", f"its {name} scales them up by {top / 255:g}")
    return Reading(None, f"{name} scales by {top / 255:g}, which says neither 0-255 nor 0-1")


def _normalization(layer, name: str) -> Reading:
    import numpy as np

    mean = getattr(layer, "mean", None)
    variance = getattr(layer, "variance", None)
    if mean is None or variance is None:
        return Reading(None, f"{name} has no statistics yet (adapt it, or give mean and variance)")
    mean = np.asarray(mean, dtype="float64")
    variance = np.asarray(variance, dtype="float64")
    if not mean.any() and np.all(variance == 1):
        return Reading(None, f"{name} was never adapted (mean 0, variance 1)")
    top = float(np.max(np.abs(mean)))
    return Reading("0-255" if top > 2 else "0-1",
                   f"its {name} was adapted to data whose mean reaches {top:.3g}")


def pixel_range(model, declared: str, own_model: bool) -> tuple[PixelRange, list[str]]:
    """What to feed the model: `declared` (`model.pixel_range`) unless it is `auto`, else
    what the model's first layers say; and a note for the user (for a user's model, always:
    it is the one decision about their model mptrain makes silently otherwise)."""
    if declared != "auto":
        return declared, [f"pixels fed in {declared} (model.pixel_range)"]
    found = read_pixel_range(model)
    if found.range is None:
        raise ConfigError(
            f"model: cannot tell whether the model expects pixels in 0-255 or 0-1: "
            f"{found.evidence}; set model.pixel_range: 0-255 (pixels as stored, as Keras' "
            "image_dataset_from_directory gives them) or 0-1 (divided by 255)")
    if found.range == "0-255":
        return "0-255", [f"pixels given as stored, 0-255, as Keras' image_dataset_from_directory "
                         f"gives them: {found.evidence} (model.pixel_range: 0-1 divides them first)"]
    return "0-1", [f"pixels given divided by 255, 0-1: {found.evidence} (model.pixel_range: "
                   "0-255 gives them as stored)"] if own_model else []
