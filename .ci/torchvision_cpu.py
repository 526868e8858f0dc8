"""torchvision's Python half on CPU-only torch, for CI's LeRobot venv (.ci/run installs it with a .pth line).

PyPI's torchvision wheels carry C ops linked against CUDA torch (libtorch_cuda.so), which CPU torch lacks:
torchvision then runs without them (``extension._has_ops()`` is False; its models and transforms, all that
LeRobot's datasets and policies use, are Python), except that importing it registers fake kernels for
``torchvision::nms`` and ``torchvision::qnms`` without checking that the ops exist, and fails. This defines
those two schemas, with no kernel, just before torchvision is first imported; calling them still raises.
Nothing is imported until then (no torch import at interpreter start).
"""

import importlib.abc
import sys

_defined = []      # the Library must outlive the import: its schemas go with it


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        lib = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _defined.append(lib)
        return None          # the real torchvision is found by the finders after this one


sys.meta_path.insert(0, _BeforeTorchvision())
