"""Small facts about frames and process titles, shared by the stack parsers.

- :func:`split_pyspy_frame` splits one py-spy text frame line, ``name (where)``, where both
  parts may contain parentheses (C++ symbols, ``codegen(...)`` pseudo files);
- :func:`make_frame` builds a :class:`StackFrame` and decides whether it is native;
- :func:`rank_from_title` reads rank coordinates from a process title or log prefix, as
  SGLang (``sglang::scheduler_DP0_TP3_EP3``) and vLLM (``VLLM::Worker_TP1``,
  ``VllmWorker rank=3``) set them.
"""

from __future__ import annotations

import re

from diag.model import RankId, StackFrame
from diag.parse import coords

__all__ = [
    "is_address",
    "make_frame",
    "normalise_path",
    "rank_from_title",
    "short_path",
    "split_pyspy_frame",
]

_ADDRESS = re.compile(r"^(?:0x)?[0-9a-fA-F]{6,}$")
# Source files of compiled code: a frame located in one of these is native.
_NATIVE_SOURCE = re.compile(r"\.(?:c|cc|cpp|cxx|h|hh|hpp|cu|cuh|rs|S|s)$")
# Shared objects and executables as py-spy names them: libc.so.6, libtorch_cpu.so,
# libpython3.11.so.1.0, python3.12, libcuda.so.580.159.04.
_SHARED_OBJECT = re.compile(r"(?:\.so(?:\.[\w.]+)?|\.dylib|\.dll|\.pyd|^python[\d.]*|^ld-linux.*)$")
# site-packages and friends: what precedes the package path in a full filename.
_SITE_DIRS = re.compile(r"^.*?/(?:site-packages|dist-packages|lib/python[\d.]+)/")


def is_address(name: str) -> bool:
    """A native frame py-spy could not symbolise (``0x7f259f401d71``)."""
    return bool(_ADDRESS.match(name))


def normalise_path(filename: str) -> str:
    """Forward slashes (Windows paths), no trailing whitespace."""
    return filename.replace("\\", "/").strip()


def short_path(filename: str) -> str:
    """The package-relative path of a source file (``torch/distributed/x.py``), as py-spy's
    ``short_filename`` would give it; unchanged when no site directory is recognised."""
    path = normalise_path(filename)
    return _SITE_DIRS.sub("", path)


def split_pyspy_frame(line: str) -> tuple[str, str] | None:
    """Split ``name (where)`` at the parenthesis that balances the final ``)``.

    ``where`` is ``file:line`` or a shared object; either part may contain parentheses,
    so the split walks back from the end. Returns None for a line of another shape."""
    text = line.strip()
    if len(text) < 4 or not text.endswith(")"):
        return None
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                if i < 2 or text[i - 1] != " ":
                    return None
                name = text[: i - 1].strip()
                where = text[i + 1 : -1]
                if not name or not where:
                    return None
                return name, where
    return None


def _split_where(where: str) -> tuple[str, int | None]:
    """``file:line`` -> (file, line); a bare library name -> (name, None)."""
    m = re.match(r"^(.*):(\d+)$", where)
    if m:
        line = m.group(2)
        return m.group(1), (int(line) if len(line) <= 18 else None)
    return where, None


def make_frame(name: str, where: str, *, module: str | None = None) -> StackFrame:
    """A frame from a py-spy ``name (where)`` pair; ``module`` is py-spy JSON's module
    field (set for native frames only)."""
    filename, line = _split_where(normalise_path(where))
    if line == 0:
        line = None
    base = filename.rsplit("/", 1)[-1]
    native = (
        module is not None
        or is_address(name)
        or bool(_NATIVE_SOURCE.search(base))
        or (line is None and bool(_SHARED_OBJECT.search(base)))
    )
    return StackFrame(name=name, filename=filename, line=line, module=module, native=native)


def rank_from_title(title: str | None) -> RankId | None:
    """Rank coordinates named by a process title or a log prefix; None when it names none.

    ``sglang::scheduler_DP0_PP1_TP3_EP3`` -> DP0 PP1 TP3 EP3; ``VLLM::Worker_TP1`` -> TP1;
    ``VllmWorker rank=3`` and ``[rank3]`` (a global rank) -> TP3, which holds where the job
    is tensor-parallel only; ``NP1`` (SGLang's node rank) -> node "1". The one parser:
    :func:`diag.parse.coords.rank_from_title`."""
    return coords.rank_from_title(title)
