"""Per-sample random image transforms, applied inside the frame gather (GPU or C CPU kernels).

``Window(..., augment=Augment([...]))`` crops, resizes, warps, flips, colour-adjusts and normalizes
every sample's frames with its own parameters, drawn on the device from (seed, epoch, sample,
camera), with the semantics of ``torchvision.transforms.v2.functional``. See docs/loader.md#augmentation.
"""

from .draw import epoch_key
from .pipeline import Augment
from .presets import groot_n15, groot_n16, lerobot
from .transforms import (CenterCrop, ColorJitter, FractionCrop, Normalize, RandomAdjustSharpness, RandomAffine,
                         RandomCrop, RandomGrayscale, RandomHorizontalFlip, RandomResizedCrop, RandomRotation,
                         RandomSubset, Resize, SharpnessJitter, Transform)

__all__ = ["Augment", "CenterCrop", "ColorJitter", "FractionCrop", "Normalize", "RandomAdjustSharpness",
           "RandomAffine", "RandomCrop", "RandomGrayscale", "RandomHorizontalFlip", "RandomResizedCrop",
           "RandomRotation", "RandomSubset", "Resize", "SharpnessJitter", "Transform", "epoch_key", "groot_n15",
           "groot_n16", "lerobot"]
