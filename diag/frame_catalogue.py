"""The source-derived frame -> phase catalogue (diag/data/frame_phases.tsv).

tools/frame_catalogue.py reads vLLM's and SGLang's release sources (``ast`` only), walks an
approximate call graph from each start-up step's roots and writes the step that alone
reaches each function. :func:`diag.frames.frame_phase` asks here only after all its
hand-written rules said nothing: a frame through any start-up function gets its step, not
only the names the rules list. Loaded once, on the first frame that asks.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["catalogue_phase"]

_MARKERS = ("/vllm/", "/sglang/")
_PATH = Path(__file__).with_name("data") / "frame_phases.tsv"


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, str | None]]:
    """package-relative path -> function name -> its phase (None where two functions of
    that name in the file have different phases: a frame shows the name only)."""
    try:
        text = _PATH.read_text(encoding="utf-8")
    except OSError:
        return {}
    out: dict[str, dict[str, str | None]] = {}
    for row in text.splitlines():
        if not row or row[0] == "#" or row.startswith("framework\t"):
            continue
        parts = row.split("\t")
        if len(parts) != 5:
            continue
        names = out.setdefault(parts[1], {})
        name = parts[2].rsplit(".", 1)[-1]
        if names.setdefault(name, parts[3]) != parts[3]:
            names[name] = None
    return out


def catalogue_phase(path: str, func: str) -> str | None:
    """The catalogue's phase of a frame, or None. ``path``: as printed, ``/`` separated
    (site-packages, a checkout's ``python/sglang/``, a relative path with a leading ``/``)."""
    if "/vllm/" not in path and "/sglang/" not in path:
        return None
    table = _table()
    name = func.rsplit(".", 1)[-1]
    for marker in _MARKERS:
        i = path.rfind(marker)
        while i >= 0:
            names = table.get(path[i + 1 :])
            if names is not None:
                return names.get(name)
            i = path.rfind(marker, 0, i)
    return None
