"""`tfds`: a TensorFlow Datasets data set that is already prepared in a data folder.

mptrain never downloads: a data set TFDS has not prepared (`download_and_prepare`) in
`data.data_dir` is an error that says how to prepare it on a connected machine. Prepared data
is read by TFDS' own reader, in its stored order, and shuffled per epoch by the pipeline.
Needs the optional extra: `pip install mptrain[tfds]`.
"""

from __future__ import annotations

import os
from pathlib import Path

from mptrain.config.kinds import TfdsData
from mptrain.data.dataset import Dataset, InputSpec, Split, split_sizes
from mptrain.data.source import Source
from mptrain.errors import DataError
from mptrain.objective import LabelStats


def import_tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError("data.dataset tfds needs TensorFlow Datasets: "
                        "pip install 'mptrain[tfds]'") from None
    return tfds


def find_prepared(tfds, name: str, data_dir: Path):
    """The builder of a prepared data set: by registered name, or straight from its folder
    (data sets defined outside TFDS, prepared elsewhere, work too). None when not prepared."""
    base, _, version = name.partition(":")
    versions = sorted((info.parent for info in (data_dir / base).glob("*/dataset_info.json")),
                      key=lambda p: [int(part) for part in p.name.split(".") if part.isdigit()])
    if version:
        versions = [p for p in versions if p.name == version]
    return tfds.builder_from_directory(str(versions[-1])) if versions else None


class Tfds(Source, dataset="tfds"):
    files = {"data_dir": "folder"}

    def load(self, cfg: TfdsData, seed: int = 0, status=None) -> Dataset:
        tfds = import_tfds()
        data_dir = Path(cfg.data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")).expanduser()
        builder = find_prepared(tfds, cfg.name, data_dir)
        if builder is None:
            raise DataError(
                f"TFDS data set {cfg.name!r} is not prepared in {data_dir} (data.data_dir), and "
                "mptrain does not download. Prepare it on a connected machine with "
                f"`python -c \"import tensorflow_datasets as tfds; tfds.builder('{cfg.name}', "
                f"data_dir='{data_dir}').download_and_prepare()\"` and copy the folder here.")
        info = builder.info
        if info.supervised_keys is None:
            raise DataError(f"TFDS data set {cfg.name!r} has no (input, label) pair "
                            "(supervised_keys); mptrain trains on supervised data sets")
        x_key, y_key = info.supervised_keys[:2]
        shape = tuple(info.features[x_key].shape)
        if any(d is None for d in shape):
            raise DataError(f"TFDS data set {cfg.name!r}: its {x_key!r} has shape {shape} with "
                            "variable sizes; use a data set with fixed-size inputs, or export it "
                            "to an image_folder (which resizes)")
        for named in (cfg.train_split, cfg.test_split):
            if named not in info.splits:
                raise DataError(f"TFDS data set {cfg.name!r} has no split {named!r} (splits: "
                                f"{', '.join(info.splits)}); set data.train_split / data.test_split")
        label = info.features[y_key]
        num_classes = getattr(label, "num_classes", None)  # a ClassLabel; else the label's values

        def split(name: str, skip: int, take: int) -> Split:
            return Split(take, stream=lambda: builder.as_dataset(split=name, shuffle_files=False,
                                                                 as_supervised=True).skip(skip).take(take))

        n_train, cut, n_test = split_sizes(cfg, info.splits[cfg.train_split].num_examples,
                                           info.splits[cfg.test_split].num_examples)
        return Dataset(
            train=split(cfg.train_split, 0, cut),
            val=split(cfg.train_split, cut, n_train - cut) if cut < n_train else None,
            test=split(cfg.test_split, 0, n_test),
            spec=InputSpec.of(shape, info.features[x_key].dtype.as_numpy_dtype),
            labels=LabelStats(source=f"tfds:{cfg.name}", shape=tuple(label.shape or ()),
                              whole=num_classes is not None or label.dtype.is_integer,
                              low=0.0, high=float(num_classes - 1) if num_classes else 1.0,
                              one_hot=False, training_distinct=num_classes or 2,
                              names=tuple(label.names) if num_classes else None),
            source=f"tfds:{cfg.name} ({data_dir})",
        )
