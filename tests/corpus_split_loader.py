"""``tools/corpus_split.py`` for the tests that need the corpus split (tools/ is no
package): loaded once, here, and imported as ``from corpus_split_loader import SPLIT``;
``load_tool`` loads any other script of tools/ the same way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["SPLIT", "load_tool"]


def load_tool(name: str) -> ModuleType:
    """The script ``tools/NAME.py`` as module ``NAME`` (registered in sys.modules, as an
    import would: its dataclasses look their module up there)."""
    path = Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SPLIT = load_tool("corpus_split")
