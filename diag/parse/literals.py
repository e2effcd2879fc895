"""Literals a regex needs: every match of the pattern contains one of them.

Used to prefilter lines cheaply (``in`` tests, a multi-literal scan) before running
regexes: the phase catalogue and the streaming prefilter both rely on it.
"""

from __future__ import annotations

import sys
from typing import Any

if sys.version_info >= (3, 11):
    import re._parser as _sre_parse
else:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse

__all__ = ["required_literals"]


def _literal_sets(items: Any) -> list[set[str]]:
    """Alternative literal sets of a parsed sequence: each set is one way to say "every
    match contains one of these"."""
    out: list[set[str]] = []
    run: list[str] = []

    def close() -> None:
        if run:
            out.append({"".join(run)})
            run.clear()

    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av))
            continue
        if name == "AT":
            continue
        close()
        if name == "SUBPATTERN":
            sub = av[-1]
            best = _best(_literal_sets(sub))
            if best:
                out.append(best)
        elif name == "BRANCH":
            branches = av[1]
            sets = [_best(_literal_sets(b)) for b in branches]
            if all(sets):
                union: set[str] = set()
                for s in sets:
                    assert s is not None
                    union |= s
                out.append(union)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, _hi, sub = av
            if lo >= 1:
                best = _best(_literal_sets(sub))
                if best:
                    out.append(best)
        elif name == "IN" and len(av) == 1 and str(av[0][0]) == "LITERAL":
            run.append(chr(av[0][1]))
    close()
    return out


def _best(sets: list[set[str]]) -> set[str] | None:
    good = [s for s in sets if s and min(len(x) for x in s) >= 3]
    if not good:
        good = [s for s in sets if s and min(len(x) for x in s) >= 1]
    if not good:
        return None
    return max(good, key=lambda s: (min(len(x) for x in s), -len(s)))


def required_literals(pattern: str) -> set[str] | None:
    """Literals one of which every match of ``pattern`` contains; None when the pattern
    has no literal of at least three characters on every path."""
    if "(?i" in pattern or "(?x" in pattern:
        return None  # case-insensitive or verbose: the literals are not literal
    tree = _sre_parse.parse(pattern)
    best = _best(_literal_sets(tree.data))
    if best is None or min(len(x) for x in best) < 3:
        return None
    return best
