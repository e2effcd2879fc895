"""``tools/corpus_split.py`` for the tests that need the corpus split (tools/ is no
package): loaded once, here, and imported as ``from corpus_split_loader import SPLIT``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["SPLIT"]


def _load() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "tools" / "corpus_split.py"
    spec = importlib.util.spec_from_file_location("corpus_split", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPLIT = _load()
