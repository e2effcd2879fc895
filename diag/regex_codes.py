"""(speed) Regular expressions compiled from codes kept in diag's cache (:mod:`diag.cache`).

``re.compile`` parses a pattern and generates its matcher's code in Python: about 0.5 ms
a pattern, 0.1-0.3 s a run for the phase catalogue's several hundred. The code it hands
the regex engine (``_sre.compile``) depends on the pattern and the interpreter only, so a
:class:`CodeTable` keeps each pattern's code on disk, keyed by the patterns' source, the
Python version and the engine's version (``_sre.MAGIC``), and builds the pattern object
from it directly (a few microseconds). It is the same object ``re.compile`` makes (equal
to it: same pattern, flags and code; a test compares every one). Anything unexpected (no
cache, another interpreter, a code the engine refuses) falls back to ``re.compile``.
"""

from __future__ import annotations

import importlib
import re
import sys
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from diag import cache

__all__ = ["CodeTable", "pattern_code"]

# one pattern's compiled form: flags, code (machine-order array bytes), groups, group index
_Code = tuple[int, bytes, int, dict[str, int], tuple[str | None, ...]]


def _engine() -> tuple[Any, Any, Any] | None:
    """CPython's regex engine and its parser and code generator, or None elsewhere."""
    if sys.implementation.name != "cpython":
        return None
    try:
        sre = importlib.import_module("_sre")
        if sys.version_info >= (3, 11):
            parser = importlib.import_module("re._parser")
            compiler = importlib.import_module("re._compiler")
        else:  # pragma: no cover - Python 3.10
            parser = importlib.import_module("sre_parse")
            compiler = importlib.import_module("sre_compile")
    except ImportError:  # pragma: no cover
        return None
    if not (hasattr(sre, "compile") and hasattr(compiler, "_code")):  # pragma: no cover
        return None
    return sre, parser, compiler


def pattern_code(pattern: str) -> _Code | None:
    """What ``re.compile(pattern)`` hands the engine (as ``re._compiler.compile`` builds
    it), or None where that cannot be worked out."""
    eng = _engine()
    if eng is None:
        return None
    sre, parser, compiler = eng
    try:
        p = parser.parse(pattern, 0)
        code = compiler._code(p, 0)
        state = p.state
        indexgroup: list[str | None] = [None] * state.groups
        for k, i in state.groupdict.items():
            indexgroup[i] = k
        codes = array("I" if sre.CODESIZE == 4 else "H", [int(c) for c in code])
        return (int(state.flags), codes.tobytes(), state.groups - 1,
                {str(k): int(v) for k, v in state.groupdict.items()}, tuple(indexgroup))
    except Exception:  # noqa: BLE001 - re.compile will say what is wrong with it
        return None


class CodeTable:
    """Compiled patterns for a known set of patterns (``patterns()``, asked on a cache
    miss), their codes stored in the cache under ``name`` and ``key``; a pattern not in
    the set is compiled by ``re.compile``."""

    def __init__(self, name: str, key: str, patterns: Callable[[], Iterable[str]]) -> None:
        self._name = name
        self._key = key
        self._patterns = patterns
        self._codes: dict[str, _Code] | None = None
        self._sre: Any = None

    def _load(self) -> dict[str, _Code]:
        eng = _engine()
        if eng is None or cache.cache_dir() is None:
            return {}
        sre = self._sre = eng[0]
        key = cache.content_key([self._key], "regex-codes-1", str(sre.MAGIC), str(sre.CODESIZE))
        hit = cache.load(self._name, key)
        if isinstance(hit, dict):
            return hit
        codes: dict[str, _Code] = {}
        for pattern in dict.fromkeys(self._patterns()):
            code = pattern_code(pattern)
            if code is not None:
                codes[pattern] = code
        cache.store(self._name, key, codes)
        return codes

    def compile(self, pattern: str) -> re.Pattern[str]:
        """``re.compile(pattern)``, from the stored code where there is one."""
        codes = self._codes
        if codes is None:
            codes = self._codes = self._load()
        code = codes.get(pattern)
        if code is not None:
            try:
                flags, raw, groups, groupindex, indexgroup = code
                sre = self._sre
                words = array("I" if sre.CODESIZE == 4 else "H")
                words.frombytes(raw)
                rx: re.Pattern[str] = sre.compile(
                    pattern, flags, words.tolist(), groups, groupindex, indexgroup
                )
                return rx
            except Exception:  # noqa: BLE001, S110 - compiled the ordinary way below
                pass
        return re.compile(pattern)
