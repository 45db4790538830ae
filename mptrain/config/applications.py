"""The architectures in `keras.applications`, described without importing Keras.

`mptrain validate` checks `model.name`, input sizes and channels in well under a second, so
what each application needs is written down here; a test compares this table with the
installed `keras.applications` (names, modules, minimum sizes).

`preprocessing` is what the application expects of its input pixels, and how mptrain's
float32 [0, 1] images are turned into it (see `model/applications.py`):
  caffe  - 0..255, RGB→BGR, ImageNet mean subtracted (ResNet, VGG)
  tf     - scaled to [-1, 1] (Inception, Xception, MobileNet v1/v2, NASNet, ResNetV2)
  torch  - [0, 1] normalised by ImageNet mean and std (DenseNet)
  raw255 - 0..255; the model normalises itself (EfficientNet, ConvNeXt, MobileNetV3)
"""

from __future__ import annotations

from dataclasses import dataclass


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
