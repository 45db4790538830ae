"""The kinds of data (`data.dataset`) and of model (`model.kind`) an experiment can name,
each with only the keys that mean something for it."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from mptrain.config.names import POLICIES, Activation, Positive, _Strict

# --- data ---------------------------------------------------------------------------------


class _DataBase(_Strict):
    validation_split: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Fraction of the training examples held out for validation: arrays (npz, mnist, "
        "synthetic) the last ones, as Keras' fit does; csv the same share of each class, chosen "
        "by a hash of the row number (a hash alone for targets); folders a hash of each file's "
        "path; timeseries the part of the timeline before the test part."))
    max_train_examples: int | None = Field(None, ge=1, description=(
        "Train on only the first N training examples (a quick trial on a large set)."))
    max_test_examples: int | None = Field(None, ge=1, description=(
        "Evaluate on only the first N test examples."))
    labels: bool = Field(True, description=(
        "false: the examples' inputs alone, batches of x rather than (x, y), for a model whose "
        "own train_step needs no labels (a GAN on MNIST's digits, an autoencoder of its own). "
        "An .npz without y arrays, and a folder of files without class sub-folders, have none "
        "anyway."))


class MnistData(_DataBase):
    dataset: Literal["mnist", "fashion_mnist"] = Field(description=(
        "The guide's MNIST digits, or Fashion-MNIST: 28x28 grey images, 10 classes."))
    path: Path | None = Field(None, description=(
        "mnist: the mnist.npz file (or its folder); fashion_mnist: the folder of its four IDX "
        ".gz files. Default: looked for in $MPTRAIN_DATA_DIR, Keras' cache (and Debian's "
        "dataset-fashion-mnist), then downloaded."))


class NpzData(_DataBase):
    dataset: Literal["npz"] = Field(description="Arrays from a NumPy archive.")
    path: Path = Field(description=(
        "A NumPy .npz with x_train, y_train, x_test, y_test (uint8: pixels, given to the "
        "model as model.pixel_range says; integer (N, length) arrays are token ids)."))
    normalize: bool = Field(False, description=(
        "(N, features) float arrays: each feature standardised with the training split's mean "
        "and deviation, as a CSV's are (data.normalize there); off by default, since arrays "
        "are usually saved as the model takes them (`mptrain lint` names features on scales "
        "orders of magnitude apart)."))


class SyntheticData(_DataBase):
    """A deterministic, learnable classification set (no I/O): class means plus noise."""

    dataset: Literal["synthetic"] = Field("synthetic", description=(
        "Generated from the seed: class centres plus noise (vectors or image textures)."))
    train_size: int = Field(2048, ge=1, description="Training examples generated.")
    test_size: int = Field(512, ge=1, description="Test examples generated.")
    input_shape: list[Positive] = Field(default_factory=lambda: [784], min_length=1, description=(
        "One example's shape: [features] for vectors, [height, width, channels] for images."))
    num_classes: int = Field(10, ge=1, description="Classes generated.")
    noise: float = Field(1.0, ge=0, description=(
        "Standard deviation of the noise around each class's centre: higher is harder."))


class SyntheticTextData(_DataBase):
    """Token sequences whose class is which of `num_classes` marker tokens they contain most
    often among random filler: learnable by attention, no I/O."""

    dataset: Literal["synthetic_text"] = Field(description=(
        "Generated token sequences, for the token transformer."))
    train_size: int = Field(2048, ge=1, description="Training sequences generated.")
    test_size: int = Field(512, ge=1, description="Test sequences generated.")
    sequence_length: int = Field(64, ge=2, description="Tokens per sequence.")
    vocab_size: int = Field(1000, ge=8, description="Token ids (0 is padding).")
    num_classes: int = Field(4, ge=2, description="Classes: one marker token each.")


class _FileData(_DataBase):
    """Data on disk, streamed through tf.data: decoded in parallel as it is needed, so a
    data set larger than memory trains."""

    path: Path = Field(description=(
        "image_folder, text_folder: a folder with one sub-folder of files per class; csv: the "
        "table."))
    test_path: Path | None = Field(None, description="A separate test set; default: test_split.")
    test_split: float = Field(0.2, gt=0.0, lt=1.0, description=(
        "Without test_path: the fraction of the examples kept for testing, chosen by a hash "
        "of each file's path (or row number), the same on every machine."))
    cache: Literal["none", "memory"] | Path = Field("none", description=(
        "none: decode every epoch (a set larger than memory trains); memory: decode once and "
        "keep it; a path: keep the decoded examples in memory-mapped files there, reused by "
        "the next run with the same data settings."))


class ImageFolderData(_FileData):
    dataset: Literal["image_folder"] = Field(description=(
        "Images (PNG, JPEG, GIF, BMP) in one sub-folder per class."))
    image_size: tuple[Positive, Positive] | None = Field(None, description=(
        "[height, width] every image is resized to; default: the images' own size when they "
        "share one (else the most common size; the run's notes say when images are resized)."))
    color_mode: Literal["rgb", "grayscale"] = Field("rgb", description="3 channels, or 1.")
    random_flip: Literal["none", "horizontal", "vertical", "horizontal_and_vertical"] = Field(
        "none", description="Augmentation in the model, while training only.")
    random_crop: int = Field(0, ge=0, description="Pad by this many pixels, crop back at random.")
    skip_bad_files: bool = Field(False, description=(
        "Leave out images that do not decode (listed in the run folder) instead of stopping."))


class ImageMasksData(_FileData):
    """Images and their masks (a class id per pixel), paired by file name: segmentation
    (keras.io's pets with their trimaps)."""

    dataset: Literal["image_masks"] = Field(description=(
        "Images in one folder (PNG, JPEG, GIF, BMP) and a mask for each in another, paired by "
        "file name: a class id per pixel (segmentation)."))
    masks_path: Path = Field(description=(
        "The masks' folder: for each image a PNG (or any image) of the same name (the same "
        "sub-folders), whose pixel values are the class ids."))
    image_size: tuple[Positive, Positive] | None = Field(None, description=(
        "[height, width] every image and mask is resized to (masks to the nearest pixel); "
        "default: the first image's size."))
    color_mode: Literal["rgb", "grayscale"] = Field("rgb", description="3 channels, or 1.")


class TextFolderData(_FileData):
    dataset: Literal["text_folder"] = Field(description=(
        ".txt files in one sub-folder per class, tokenised by a TextVectorization."))
    max_tokens: int = Field(20000, ge=8, description="Vocabulary size, padding and OOV included.")
    sequence_length: int = Field(128, ge=2, description="Tokens per text: padded or cut to it.")
    encoding: str = Field("utf-8", description=(
        "The texts' encoding (utf-8, latin-1, cp1252, utf-16...); bytes invalid in it become "
        "U+FFFD."))

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, encoding: str) -> str:
        try:
            return codecs.lookup(encoding).name
        except LookupError:
            raise ValueError(f"{encoding!r} is not an encoding Python knows; e.g. utf-8, "
                             "latin-1, cp1252, utf-16") from None


class CsvData(_FileData):
    dataset: Literal["csv"] = Field(description="A table: numeric feature columns and a label column.")
    label_column: str | list[str] = Field(description=(
        "The header of the labels' column: numbers are class ids, 0/1 labels or targets, as "
        "train.loss takes them; other labels are class names (numbered in sorted order). "
        "Several headers: several 0/1 labels (binary_crossentropy) or targets (a regression) "
        "per row."))
    feature_columns: list[str] | None = Field(None, description=(
        "The headers of the inputs' columns; default: every other column."))
    delimiter: str = Field(",", min_length=1, max_length=1, description="The cells' separator.")
    inputs: Literal["vector", "columns"] = Field("vector", description=(
        "vector: the feature columns as one input of numbers; columns: one named input per "
        "column, shape (1,), numbers as float32 and text as strings, for a model of your own "
        "with one keras.Input per column (keras.io's structured data models)."))
    normalize: bool = Field(True, description=(
        "inputs: vector: each feature standardised with the training split's mean and "
        "deviation, as keras.io's structured data examples adapt a Normalization layer on "
        "the training split (a model saved from the run takes features standardised so: the "
        "summary's notes give both); false: the features as stored (a size in the thousands "
        "beside an age in tens kept a regression from learning)."))

    @model_validator(mode="after")
    def _columns_are_streamed(self) -> CsvData:
        if self.inputs == "columns" and self.cache != "none":
            raise ValueError("data.cache keeps arrays of numbers; with data.inputs: columns leave "
                             "it out (the table is read as it streams)")
        return self


class TimeseriesData(_DataBase):
    """A time series in a CSV table, cut into windows as
    `keras.utils.timeseries_dataset_from_array` cuts them: each example is `sequence_length`
    rows taken every `sampling_rate` rows, its target the target columns `target_offset` rows
    after the window's last. The timeline is split by time (training, then validation, then
    test), and no window or target crosses from one part into another."""

    dataset: Literal["timeseries"] = Field(description=(
        "Windows of a time series from a CSV table, for forecasters (keras.io's weather "
        "forecasting)."))
    path: Path = Field(description="The table, one row per time step, oldest first, with a header.")
    target_columns: str | list[str] = Field(description=(
        "The column(s) to forecast (a regression: train.loss mean_squared_error, ...)."))
    feature_columns: list[str] | None = Field(None, description=(
        "The columns a window holds; default: every column but time_column."))
    time_column: str | None = Field(None, description=(
        "A column of timestamps (text), left out of the features."))
    sequence_length: int = Field(ge=1, description="Rows a window holds (after sampling).")
    sampling_rate: int = Field(1, ge=1, description="One row in this many goes into a window.")
    target_offset: int = Field(1, ge=0, description=(
        "How many rows after a window's last one its target is (0: that row's own)."))
    test_split: float = Field(0.2, gt=0.0, lt=1.0, description="The last fraction of the timeline.")
    normalize: bool = Field(False, description=(
        "Standardise each feature with the training part's mean and deviation (keras.io's "
        "weather example does; the targets have train.target_scaling)."))
    delimiter: str = Field(",", min_length=1, max_length=1, description="The cells' separator.")


class TfdsData(_DataBase):
    dataset: Literal["tfds"] = Field(description="A TensorFlow Datasets set (mptrain[tfds]).")
    name: str = Field(pattern=r"^[a-z0-9_]+(/[a-z0-9_]+)?(:[0-9.]+)?$", description=(
        "A TensorFlow Datasets name, e.g. mnist or imdb_reviews:1.0.0, already prepared "
        "(mptrain never downloads)."))
    data_dir: Path | None = Field(None, description=(
        "Where it is prepared; default: TensorFlow Datasets' own ($TFDS_DATA_DIR, "
        "~/tensorflow_datasets)."))
    train_split: str = Field("train", description='A TFDS split, e.g. "train[:90%]".')
    test_split: str = Field("test", description="A TFDS split.")
    cache: Literal["none", "memory"] = Field("none", description=(
        "none: read every epoch; memory: read once and keep it."))
    shuffle_buffer: int = Field(10_000, ge=1, description=(
        "Examples shuffled together, a block at a time in an order fixed by seed and epoch."))


DataConfig = Annotated[
    MnistData | NpzData | SyntheticData | SyntheticTextData | ImageFolderData | ImageMasksData
    | TextFolderData | CsvData | TimeseriesData | TfdsData,
    Field(discriminator="dataset"),
]


# --- model --------------------------------------------------------------------------------


LayerPolicy = Literal[tuple(p for p in POLICIES if p != "auto")]  # type: ignore[valid-type]


class _ModelBase(_Strict):
    num_classes: int | None = Field(None, ge=1, description=(
        "Outputs of the head: the classes, the 0/1 labels or the targets; default: what the "
        "data has (1 with binary_crossentropy on one label per example)."))
    output_activation: Literal["softmax", "linear", "sigmoid"] | None = Field(None, description=(
        "mptrain's models: the head's activation (default: softmax for classes, sigmoid with "
        "binary_crossentropy, linear for a regression). Your own model (python, saved): what its "
        "output is (softmax or sigmoid: probabilities; linear: logits, or a regression's "
        "values); default: read from its last layer."))
    float32_layers: list[str] = Field(default_factory=list, description=(
        "Layer names or globs kept in float32 whatever the policy (e.g. what diagnose advises)."))
    layer_policies: dict[str, LayerPolicy] = Field(default_factory=dict, description=(
        "Layer name or glob → policy, for any other per-layer choice."))
    fused_layers: bool = Field(False, description=(
        "Train BatchNormalization as one fused op (16-bit activations, float32 statistics) and "
        "Conv2D's weight gradients in float32, where a CPU's bfloat16 loses (`mptrain plan` "
        "measures it: its +fused candidates)."))
    pixel_range: Literal["auto", "0-255", "0-1"] = Field("auto", description=(
        "Pixel data (uint8 images): the range the model takes. auto: read from its first "
        "layers (a Rescaling or Normalization there: 0-255, as stored, as Keras' "
        "image_dataset_from_directory gives them; none: 0-1, divided by 255)."))

    @property
    def layer_rules(self) -> dict[str, str]:
        return {**{name: "float32" for name in self.float32_layers}, **self.layer_policies}


class MLPConfig(_ModelBase):
    kind: Literal["mlp"] = Field("mlp", description="Dense layers (the guide's model).")
    hidden_units: list[Positive] = Field(default_factory=lambda: [4096, 4096], description=(
        "Units of each hidden Dense layer, in order (the guide's MLP: [4096, 4096])."))
    activation: Activation = Field("relu", description="The hidden layers' activation.")


class CNNConfig(_ModelBase):
    kind: Literal["cnn"] = Field(description=(
        "Convolution blocks (each optionally pooled), then Dense layers."))
    filters: list[Positive] = Field(default_factory=lambda: [32, 64], min_length=1, description=(
        "Filters of each convolution block, in order."))
    kernel_size: int = Field(3, ge=1, description="The convolutions' square kernel side.")
    pooling: Literal["max", "average", "none"] = Field("max", description=(
        "2x2 pooling after each convolution block."))
    dense_units: list[Positive] = Field(default_factory=lambda: [128], description=(
        "Units of each Dense layer after the convolutions."))
    activation: Activation = Field("relu", description="The hidden layers' activation.")


class _HeadConfig(_ModelBase):
    """mptrain's classification head on a backbone: pooling, dropout, Dense, float32 output."""

    pooling: Literal["avg", "max"] = Field("avg", description=(
        "Global pooling of the backbone's features (or sequence)."))
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout before the head's Dense.")
    trainable_backbone: bool = Field(True, description="false: train the head only (fine-tuning).")


# The architectures in `keras.applications`, written down so that `mptrain validate` checks
# `model.name`, input sizes and channels without importing Keras; a test compares this table
# with the installed `keras.applications` (names, modules, minimum sizes). `preprocessing` is
# what the application expects of its input pixels, and how mptrain's float32 [0, 1] images
# are turned into it (`model/layers.py: ImagePreprocessing`):
#   caffe  - 0..255, RGB→BGR, ImageNet mean subtracted (ResNet, VGG)
#   tf     - scaled to [-1, 1] (Inception, Xception, MobileNet v1/v2, NASNet, ResNetV2)
#   torch  - [0, 1] normalised by ImageNet mean and std (DenseNet)
#   raw255 - 0..255; the model normalises itself (EfficientNet, ConvNeXt, MobileNetV3)
@dataclass(frozen=True)
class Application:
    module: str  # keras.applications.<module>
    preprocessing: str
    min_size: int  # smallest height/width the architecture accepts


def _family(module: str, preprocessing: str, names: str, min_size: int = 32) -> dict[str, Application]:
    return {name: Application(module, preprocessing, min_size) for name in names.split()}


APPLICATIONS: dict[str, Application] = {
    **_family("convnext", "raw255", "ConvNeXtTiny ConvNeXtSmall ConvNeXtBase ConvNeXtLarge ConvNeXtXLarge"),
    **_family("densenet", "torch", "DenseNet121 DenseNet169 DenseNet201"),
    **_family("efficientnet", "raw255", " ".join(f"EfficientNetB{i}" for i in range(8))),
    **_family("efficientnet_v2", "raw255", " ".join(f"EfficientNetV2{size}" for size in
                                                    ("B0", "B1", "B2", "B3", "S", "M", "L"))),
    **_family("inception_resnet_v2", "tf", "InceptionResNetV2", min_size=75),
    **_family("inception_v3", "tf", "InceptionV3", min_size=75),
    **_family("mobilenet", "tf", "MobileNet"),
    **_family("mobilenet_v2", "tf", "MobileNetV2"),
    **_family("mobilenet_v3", "raw255", "MobileNetV3Small MobileNetV3Large"),
    **_family("nasnet", "tf", "NASNetMobile NASNetLarge"),
    **_family("resnet", "caffe", "ResNet50 ResNet101 ResNet152"),
    **_family("resnet_v2", "tf", "ResNet50V2 ResNet101V2 ResNet152V2"),
    **_family("vgg16", "caffe", "VGG16"),
    **_family("vgg19", "caffe", "VGG19"),
    **_family("xception", "tf", "Xception", min_size=71),
}


class ApplicationConfig(_HeadConfig):
    kind: Literal["application"] = Field(description=(
        "A keras.applications architecture with mptrain's head."))
    name: Literal[tuple(APPLICATIONS)] = Field(  # type: ignore[valid-type]  # the table's names
        description="A keras.applications model, e.g. ResNet50 or MobileNetV2.")
    weights: str | None = Field(None, description="null, imagenet, or a .weights.h5 file.")
    image_size: tuple[Positive, Positive] | None = Field(
        None, description="Resize inputs to this size inside the model; default: the data's.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="e.g. {alpha: 0.5}")

    @field_validator("weights")
    @classmethod
    def _weights(cls, weights: str | None) -> str | None:
        if weights not in (None, "imagenet") and not weights.endswith(".h5"):
            raise ValueError(f"{weights!r}: use null (random), imagenet (downloads once), or the "
                             "path of a .weights.h5 file")
        return weights


class TransformerConfig(_ModelBase):
    """A pre-LayerNorm Transformer encoder: patches of an image (as ViT) or token embeddings,
    `num_layers` blocks of attention and MLP, mean pooling, mptrain's head."""

    kind: Literal["transformer"] = Field(description=(
        "mptrain's Transformer encoder: a ViT on images, or a text encoder on tokens."))
    num_layers: int = Field(2, ge=1, description="Encoder blocks.")
    num_heads: int = Field(4, ge=1, description="Attention heads per block.")
    embed_dim: int = Field(64, ge=1, description="Width of the tokens (a multiple of num_heads).")
    mlp_dim: int = Field(128, ge=1, description="Hidden units of each block's MLP.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Dropout of the embeddings, the attention and each MLP."))
    patch_size: int | None = Field(None, ge=1, description="Images: square patch side (default 4).")
    vocab_size: int | None = Field(None, ge=2, description="Tokens: default from the data.")
    sequence_length: int | None = Field(None, ge=1, description="Tokens: default from the data.")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> TransformerConfig:
        if self.embed_dim % self.num_heads:
            raise ValueError(f"model.embed_dim {self.embed_dim} must be a multiple of "
                             f"model.num_heads {self.num_heads} (each head gets embed_dim / num_heads)")
        return self


class KerasHubConfig(_HeadConfig):
    kind: Literal["keras_hub"] = Field(description=(
        "A KerasHub backbone with mptrain's head (mptrain[hub])."))
    backbone: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]*Backbone$",
                          description="A keras_hub.models class, e.g. BertBackbone.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "The backbone's constructor arguments (built from scratch, offline)."))
    preset: str | None = Field(None, description="Pretrained weights (downloads once).")

    @model_validator(mode="after")
    def _kwargs_or_preset(self) -> KerasHubConfig:
        if self.preset is None and not self.kwargs:
            raise ValueError("model.keras_hub needs kwargs (build from scratch) or a preset "
                             "(pretrained, needs a download once)")
        return self


class PythonConfig(_ModelBase):
    kind: Literal["python"] = Field(description=(
        "Your own Keras model, returned by a builder function."))
    builder: str = Field(pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_]*$", description=(
        '"package.module:function" or "path/to/file.py:function"'))
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments passed to the builder function."))


class SavedConfig(_ModelBase):
    kind: Literal["saved"] = Field(description="A saved .keras model, trained further.")
    path: Path = Field(description="A .keras file (model.save), e.g. an earlier run's model.keras.")
    unfreeze: bool = Field(False, description="Train every layer (fine-tuning's second stage).")


ModelConfig = Annotated[
    MLPConfig | CNNConfig | ApplicationConfig | TransformerConfig | KerasHubConfig | PythonConfig
    | SavedConfig,
    Field(discriminator="kind"),
]
# Models mptrain did not write: what their output is (probabilities or logits) is read from
# the model, not decided by a head of mptrain's.
OWN_MODELS = ("python", "saved")


