"""Test-only: let PyPI's CUDA-linked ``torchvision`` import next to the CPU torch.

SGLang 0.5.23 imports ``torchvision.transforms`` at start-up (its model-config package
imports every multimodal config), even for a text-only Llama. PyPI's torchvision is built
against CUDA torch: next to ``torch==2.13.0+cpu`` its C++ extension does not load, which
torchvision itself tolerates (every op then raises when called), except for two fake-tensor
registrations it makes unconditionally, ``torchvision::nms`` and ``torchvision::qnms``:
"operator torchvision::nms does not exist". Where the extension did not load, this defines
those two schemas (no kernel: a call still fails loudly) just before torchvision registers
them, so the Python half (transforms, PIL conversions) imports. It does nothing until
torchvision is imported, and nothing where its extension loads. Put this folder on
PYTHONPATH of the server only.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


class _DefineTorchvisionOps(importlib.abc.MetaPathFinder):
    """Acts once, when torchvision imports its fake-tensor registrations.

    torchvision loads its extension first (``torchvision.extension``); only where that
    failed are the two schemas defined, so a torchvision that works is left alone.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != "torchvision._meta_registrations":
            return None
        sys.meta_path.remove(self)
        extension = sys.modules.get("torchvision.extension")
        if extension is not None and not extension._has_ops():
            import torch

            lib = torch.library.Library("torchvision", "FRAGMENT")
            for schema in SCHEMAS:
                lib.define(schema)
            _KEEP.append(lib)  # the definitions live as long as the library object
        return None  # the real module is found by the normal finders


_KEEP: list[object] = []
sys.meta_path.insert(0, _DefineTorchvisionOps())
