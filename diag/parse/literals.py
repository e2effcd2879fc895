"""Literals a regex needs: every match of the pattern contains one of them.

Used to prefilter lines cheaply (``in`` tests, a multi-literal scan) before running
regexes: the phase catalogue and the streaming prefilter both rely on it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

if sys.version_info >= (3, 11):
    import re._parser as _sre_parse
else:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse

__all__ = ["LITERALS_VERSION", "LiteralSet", "hyperscan_db", "required_literals"]

# Bumped whenever required_literals() reads patterns differently: part of the cache keys
# of everything computed with it (the phase catalogue's literals, the rules' gates).
LITERALS_VERSION = 2


_MAX_COMBOS = 16  # literal prefixes times alternatives kept as one set


def _pure_alternatives(sub: Any) -> set[str] | None:
    """The strings a group matches when it is an alternation of plain literals
    (``(?:memory|size)``), else None."""
    items = list(sub)
    if len(items) != 1 or str(items[0][0]) != "BRANCH":
        return None
    return _branch_alternatives(items[0][1])


def _branch_alternatives(av: Any) -> set[str] | None:
    out: set[str] = set()
    for branch in av[1]:
        parts = list(branch)
        if not parts or any(str(op) != "LITERAL" for op, _ in parts):
            return None
        out.add("".join(chr(av) for _, av in parts))
    return out


def _literal_sets(items: Any) -> list[set[str]]:
    """Alternative literal sets of a parsed sequence: each set is one way to say "every
    match contains one of these". A literal run followed by an alternation of literals
    becomes their combinations (``KV cache (?:memory|size)`` -> ``KV cache memory``,
    ``KV cache size``)."""
    out: list[set[str]] = []
    run: list[str] = []
    combos: set[str] | None = None  # the run so far, when an alternation split it

    def close() -> None:
        nonlocal combos
        if combos is not None:
            out.append({c + "".join(run) for c in combos})
            combos = None
            run.clear()
        elif run:
            out.append({"".join(run)})
            run.clear()

    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av))
            continue
        if name == "AT":
            continue
        if name in ("SUBPATTERN", "BRANCH") and (run or combos is not None):
            alts = _pure_alternatives(av[-1]) if name == "SUBPATTERN" else (
                _branch_alternatives(av))
            heads = combos if combos is not None else {"".join(run)}
            if alts and len(heads) * len(alts) <= _MAX_COMBOS:
                combos = {h + "".join(run) if combos is not None else h for h in heads}
                combos = {h + a for h in combos for a in alts}
                run.clear()
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


class LiteralSet:
    """Which of a fixed set of literals occur in a text: one Hyperscan pass when the
    ``hyperscan`` package is there (its database cached on disk by :mod:`diag.cache`),
    else one ``in`` test per literal. About 4 us per log line against 85 us for the
    loop, on the phase catalogue's ~240 literals."""

    def __init__(self, literals: Sequence[str], name: str) -> None:
        self.literals = tuple(literals)
        self._db: Any = None
        self._hits: list[int] = []
        try:
            import hyperscan
        except ImportError:  # pragma: no cover - wheels exist for x86-64 and arm64
            return
        self._db = hyperscan_db(hyperscan, [_hs_escape(x) for x in self.literals],
                                [0] * len(self.literals), name)
        hits = self._hits

        def on_match(ident: int, _frm: int, _to: int, _flags: int, _ctx: object) -> None:
            hits.append(ident)

        self._on_match = on_match

    def present(self, text: str) -> set[int]:
        """Indices of the literals that occur in ``text``."""
        if self._db is None:
            return {i for i, lit in enumerate(self.literals) if lit in text}
        hits = self._hits
        hits.clear()
        self._db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=self._on_match)
        return set(hits)


# each byte as Hyperscan reads it literally: ASCII letters and digits as they are, any
# other byte as \\xNN
_HS_BYTE = [
    bytes([b]) if chr(b).isalnum() and b < 128 else f"\\x{b:02x}".encode() for b in range(256)
]


def _hs_escape(lit: str) -> bytes:
    table = _HS_BYTE
    return b"".join([table[b] for b in lit.encode("utf-8", "surrogatepass")])


def hyperscan_db(
    hyperscan: Any, exprs: Sequence[bytes], flags: Sequence[int], name: str,
    ids: Sequence[int] | None = None,
) -> Any:
    """A Hyperscan block-mode database of ``exprs`` (``ids``: their ids, by default their
    positions), compiled once and kept in diag's cache under ``name`` (keyed by the
    expressions, ids and flags)."""
    import contextlib

    from diag import cache

    ids = list(range(len(exprs))) if ids is None else list(ids)
    key = cache.content_key(
        [b"\0".join(exprs), ",".join(map(str, flags)), ",".join(map(str, ids))], "hyperscan",
        str(hyperscan.__version__),
    )
    blob = cache.load(name, key)
    if isinstance(blob, bytes):
        try:
            db = hyperscan.loadb(blob, mode=hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)
            return db
        except Exception:  # noqa: BLE001 - a damaged or foreign entry: compile again
            pass
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=list(exprs), ids=ids, elements=len(exprs), flags=list(flags))
    with contextlib.suppress(Exception):  # no serialisation: the database still works
        cache.store(name, key, hyperscan.dumpb(db))
    return db
