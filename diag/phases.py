"""The phase catalogue: log message patterns -> startup phase events.

The catalogue is data: ``diag/data/phases.yaml``, written by hand, and
``diag/data/phases_generated.yaml``, written by ``tools/gen_catalogue.py`` from the
messages the releases' sources log (``fixtures/messages/messages.tsv``) and the phase their
source function marks (``fixtures/messages/phase_map.yaml``). This module loads them,
checks them, and matches records against them. Each entry names the sglang/vllm source
file and version its message comes from.

An entry is a *position marker* (``position: true``, the default of the hand-written
file) when its message is printed by every rank as it passes the step, so a rank's
furthest marker is where that rank stands (stragglers, stuck ranks). A generated entry is
a *notice* (``position: false``, the default of the generated file): a message printed
once, by one rank or by none, on the way through a phase (a warning about a flag, an
info line of the front end). A notice proves that the phase was reached, so it counts for
the phase the log reached, but a rank that printed one says nothing about where the rank
stopped: a TP3 whose only line is an early warning is not a rank at ``launch``.

Loading is cheap after the first run: the checked entries (with their required literals)
are cached by the file's content hash (:mod:`diag.cache`), so a run reads no YAML, and
each regex is compiled the first time a line gets past its literals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from diag import cache
from diag.errors import DiagError
from diag.model import PHASES, Event, EventKind, Record
from diag.parse.literals import LITERALS_VERSION, LiteralSet, required_literals
from diag.regex_codes import CodeTable

__all__ = [
    "KINDS",
    "Catalogue",
    "PhaseEntry",
    "load_catalogue",
    "notice_patterns",
    "match_record",
    "parse_catalogue",
]

KINDS: tuple[EventKind, ...] = ("begin", "progress", "end", "mark")
_FRAMEWORKS = ("sglang", "vllm", "any")
_KEYS = {
    "id", "phase", "kind", "regex", "framework", "source", "version", "where", "position",
    "logger_files",
}
# the catalogue files, in match order (the first entry that matches a message wins, so a
# hand-written entry is always preferred), and whether their entries mark positions
FILES: tuple[tuple[str, bool], ...] = (
    ("phases.yaml", True),
    ("phases_generated.yaml", False),
)


_COMPILED: dict[str, re.Pattern[str]] = {}
# (speed) the built-in catalogue's patterns, compiled from codes kept in the cache (set by
# load_catalogue)
_CODES: list[CodeTable] = []
_MEMO_MAX = 1 << 16  # messages remembered per catalogue (then all forgotten at once)
_UNSEEN = object()


class _Memo:
    """A catalogue's literal set (built on first use) and what it found per message. A log
    repeats its messages (the same warning at every step, one line per rank): each message
    is scanned and its message-scoped entries searched once, by the framework vote and
    the phase match alike."""

    __slots__ = ("fields", "gated", "literals", "message", "text", "vote")

    def __init__(self) -> None:
        self.literals: LiteralSet | None = None
        # message -> its gated message-scoped entries
        self.gated: dict[str, list[PhaseEntry]] = {}
        # (message, logger file) -> the first message-scoped entry that matches, its match
        self.message: dict[tuple[str, str | None], tuple[PhaseEntry, re.Match[str]] | None] = {}
        # message -> the framework of the first framework-specific entry that matches
        self.vote: dict[str, str | None] = {}
        # (text, raw line) -> the first text-scoped entry that matches, its match (a
        # record's text and raw line recur where a log was pasted twice, or concatenated)
        self.text: dict[tuple[str, str], tuple[PhaseEntry, re.Match[str]] | None] = {}
        # a remembered match -> its event fields (each event gets a copy)
        self.fields: dict[re.Match[str], dict[str, str | float]] = {}

    def literal_set(self, cat: Catalogue) -> LiteralSet:
        if self.literals is None:
            self.literals = LiteralSet([lit for lit, _ in cat.literal_index], "phases-hs")
        return self.literals



def _literal_set(cat: Catalogue) -> LiteralSet:
    return cat.memo.literal_set(cat)


def _compiled(pattern: str) -> re.Pattern[str]:
    rx = _COMPILED.get(pattern)
    if rx is None:
        rx = _COMPILED[pattern] = _CODES[0].compile(pattern) if _CODES else re.compile(pattern)
    return rx


@dataclass(frozen=True, slots=True)
class PhaseEntry:
    id: str
    phase: str
    kind: EventKind
    pattern: str
    framework: str
    source: str
    version: str
    where: str = "message"  # message | text (plus continuation lines) | raw (the whole line)
    # one of these is in every match (a cheap test before the regex); () when unknown
    literals: tuple[str, ...] = ()
    # a position marker (every rank prints it at this step) or a notice (module docstring)
    position: bool = True
    # a notice's source files (base names): where a line names its logger's file (vLLM's
    # "[file.py:12]"), the notice applies only to lines of those files (the same words
    # logged by another module may be another step)
    files: tuple[str, ...] = ()
    # a hand-written entry for one logger file (the same words logged by another module
    # mark another step): it does not apply to a line that names another file
    logger_files: tuple[str, ...] = ()

    @property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern (compiled on first use)."""
        return _compiled(self.pattern)

    def could_match(self, haystack: str) -> bool:
        return not self.literals or any(lit in haystack for lit in self.literals)


@dataclass(frozen=True, slots=True)
class Catalogue:
    entries: tuple[PhaseEntry, ...]
    # one alternation of every message-scoped pattern (and of the others): a quick "can
    # anything match?", compiled on first use
    any_message_pattern: str
    any_text_pattern: str | None
    # literal -> indices of the entries it gates; entries gated by no literal
    literal_index: tuple[tuple[str, tuple[int, ...]], ...] = ()
    unguarded: tuple[int, ...] = ()
    # ids of the entries that are notices, not position markers
    notices: frozenset[str] = frozenset()
    # what the catalogue found per message in this process (speed only: no part of a value)
    memo: _Memo = field(default_factory=_Memo, init=False, repr=False, compare=False)

    def gated(self, haystack: str, *, message: bool) -> list[PhaseEntry]:
        """The message-scoped (or the other) entries whose literals occur in
        ``haystack``, in catalogue order: the only ones whose regex can match (a list
        the catalogue may hand out again: not to be changed)."""
        memo = self.memo
        if message:  # (a message recurs; a line's text and raw line seldom do)
            got = memo.gated.get(haystack)
            if got is not None:
                return got
        hit = set(self.unguarded)
        index = self.literal_index
        for k in memo.literal_set(self).present(haystack):
            hit.update(index[k][1])
        entries = self.entries
        got = [entries[i] for i in sorted(hit) if (entries[i].where == "message") is message]
        if message:
            table = memo.gated
            if len(table) >= _MEMO_MAX:
                table.clear()
            table[haystack] = got
        return got

    def framework_of(self, msg: str) -> str | None:
        """The framework (sglang, vllm) of the first framework-specific message-scoped
        entry that matches ``msg``, or None."""
        table = self.memo.vote
        found = table.get(msg, _UNSEEN)
        if found is not _UNSEEN:
            return found  # type: ignore[return-value]
        found = None
        for e in self.gated(msg, message=True):
            if e.framework != "any" and e.regex.search(msg):
                found = e.framework
                break
        if len(table) >= _MEMO_MAX:
            table.clear()
        table[msg] = found
        return found

    @property
    def any_message(self) -> re.Pattern[str]:
        return _compiled(self.any_message_pattern)

    @property
    def any_text(self) -> re.Pattern[str] | None:
        return _compiled(self.any_text_pattern) if self.any_text_pattern else None

    def match(self, record: Record) -> Event | None:
        return match_record(self, record)

    def prepare(self, msg: str, logger_file: str | None) -> None:
        """(speed) Work out ahead what :meth:`framework_of` and :meth:`match` will ask
        about a message logged from ``logger_file`` (kept in the memo: no result
        changes)."""
        self.framework_of(msg)
        _message_match(self, msg, logger_file)

    def matches_message(self, msg: str) -> bool:
        """Does a message-scoped entry match ``msg``?"""
        return any(e.regex.search(msg) is not None for e in self.gated(msg, message=True))


# a file a catalogue entry's source cites (its base name)
_CITED = re.compile(r"(?<![\w.])(?:[\w.-]+/)*([\w-]+\.py)\b")


def _check_entry(
    raw: dict[str, Any], where_from: str, position: bool = True
) -> dict[str, Any]:
    """The entry checked, as plain data (with its required literals)."""
    unknown = set(raw) - _KEYS
    missing = {"id", "phase", "kind", "regex", "framework", "source", "version"} - set(raw)
    ident = raw.get("id", "?")
    if unknown or missing:
        raise DiagError(
            f"{where_from}: phase entry {ident}: unknown keys {sorted(unknown)}, "
            f"missing keys {sorted(missing)}"
        )
    if raw["phase"] not in PHASES:
        raise DiagError(f"{where_from}: phase entry {ident}: unknown phase {raw['phase']!r}")
    if raw["kind"] not in KINDS:
        raise DiagError(f"{where_from}: phase entry {ident}: unknown kind {raw['kind']!r}")
    if raw["framework"] not in _FRAMEWORKS:
        raise DiagError(f"{where_from}: phase entry {ident}: bad framework {raw['framework']!r}")
    where = raw.get("where", "message")
    if where not in ("message", "text", "raw"):
        raise DiagError(f"{where_from}: phase entry {ident}: bad where {where!r}")
    pos = raw.get("position", position)
    if not isinstance(pos, bool):
        raise DiagError(f"{where_from}: phase entry {ident}: position must be true or false")
    only = raw.get("logger_files", [])
    if not isinstance(only, list) or not all(
        isinstance(f, str) and f.endswith(".py") for f in only
    ):
        raise DiagError(f"{where_from}: phase entry {ident}: logger_files must list .py names")
    pattern = str(raw["regex"])
    try:
        re.compile(pattern)
    except re.error as exc:
        raise DiagError(f"{where_from}: phase entry {ident}: bad regex: {exc}") from exc
    return {
        "id": str(ident),
        "phase": str(raw["phase"]),
        "kind": str(raw["kind"]),
        "pattern": pattern,
        "framework": str(raw["framework"]),
        "source": str(raw["source"]),
        "version": str(raw["version"]),
        "where": where,
        "literals": sorted(required_literals(pattern) or ()),
        "position": pos,
        "files": [] if pos else sorted(set(_CITED.findall(str(raw["source"])))),
        "logger_files": sorted(only),
    }


def _build(checked: list[dict[str, Any]]) -> Catalogue:
    entries = tuple(
        PhaseEntry(
            id=c["id"],
            phase=c["phase"],
            kind=c["kind"],
            pattern=c["pattern"],
            framework=c["framework"],
            source=c["source"],
            version=c["version"],
            where=c["where"],
            literals=tuple(c["literals"]),
            position=bool(c.get("position", True)),
            files=tuple(c.get("files", ())),
            logger_files=tuple(c.get("logger_files", ())),
        )
        for c in checked
    )
    msg = [_anon(e.pattern) for e in entries if e.where == "message"]
    txt = [_anon(e.pattern) for e in entries if e.where != "message"]
    index: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        for lit in e.literals:
            index.setdefault(lit, []).append(i)
    return Catalogue(
        entries=entries,
        any_message_pattern="|".join(f"(?:{p})" for p in msg),
        any_text_pattern="|".join(f"(?:{p})" for p in txt) if txt else None,
        literal_index=tuple((lit, tuple(idx)) for lit, idx in index.items()),
        unguarded=tuple(i for i, e in enumerate(entries) if not e.literals),
        notices=frozenset(e.id for e in entries if not e.position),
    )


def _check_catalogue(
    text: str, where_from: str, position: bool = True
) -> list[dict[str, Any]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text, Loader=loader)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise DiagError(f"{where_from}: expected a mapping with an 'entries' list")
    checked = [_check_entry(e, where_from, position) for e in data["entries"]]
    _no_duplicates(checked, where_from)
    return checked


def _no_duplicates(checked: list[dict[str, Any]], where_from: str) -> None:
    ids = [c["id"] for c in checked]
    if len(set(ids)) != len(ids):
        raise DiagError(f"{where_from}: duplicate entry ids")


def parse_catalogue(
    text: str, where_from: str = "phases.yaml", *, position: bool = True
) -> Catalogue:
    """A catalogue from one file's text (``position``: what its entries are by default)."""
    return _build(_check_catalogue(text, where_from, position))


def _anon(pattern: str) -> str:
    """The pattern with named groups made anonymous (so that several can be joined)."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


@lru_cache(maxsize=1)
def load_catalogue() -> Catalogue:
    """The built-in catalogue: the hand-written entries, then the generated ones (kept for
    the process; its checked form, and its patterns' compiled codes, are cached on disk)."""
    data = resources.files("diag.data")
    texts = [data.joinpath(name).read_text(encoding="utf-8") for name, _ in FILES]
    key = cache.content_key(texts, f"literals-{LITERALS_VERSION}", "position-2", "logger-files-1")
    cat = _load_built_in(texts, key)
    _CODES[:] = [CodeTable("phases-rx", key, lambda: [e.pattern for e in cat.entries])]
    return cat


def _load_built_in(texts: list[str], key: str) -> Catalogue:
    hit = cache.load("phases", key)
    if isinstance(hit, list):
        try:
            return _build(hit)
        except (KeyError, TypeError, ValueError):
            pass  # an entry of another shape: parse the files again
    checked = [
        c
        for text, (name, position) in zip(texts, FILES, strict=True)
        for c in _check_catalogue(text, name, position)
    ]
    _no_duplicates(checked, " + ".join(name for name, _ in FILES))
    cache.store("phases", key, checked)
    return _build(checked)


def notice_patterns() -> frozenset[str]:
    """Ids of the built-in entries that are notices, not position markers."""
    return load_catalogue().notices


def _fields(m: re.Match[str]) -> dict[str, str | float]:
    out: dict[str, str | float] = {}
    for key, value in m.groupdict().items():
        if value is None:
            continue
        try:
            out[key] = float(value.replace(",", "")) if key != "version" else value
        except ValueError:
            out[key] = value
    return out


def match_record(cat: Catalogue, record: Record) -> Event | None:
    """The event a record marks, or None. Message-scoped entries win over text-scoped ones."""
    msg = record.message
    found = _message_match(cat, msg, record.logger_file)
    if found is not None:
        return _event(record, *found, cat.memo)
    if cat.any_text_pattern is not None:
        text, raw = record.text, record.raw or msg
        table = cat.memo.text
        key = (text, raw)
        found = table.get(key, _UNSEEN)  # type: ignore[arg-type]
        if found is _UNSEEN:
            found = _match_text(cat, text, raw)
            if len(table) >= _MEMO_MAX:
                table.clear()
            table[key] = found
        if found is not None:
            return _event(record, *found, cat.memo)
    return None


def _match_text(cat: Catalogue, text: str, raw: str) -> tuple[PhaseEntry, re.Match[str]] | None:
    """The first text-scoped entry that matches a record's text (or, for an entry about
    the raw line, its raw line), and its match."""
    hay_all = text if raw in text else text + "\n" + raw
    for e in cat.gated(hay_all, message=False):
        hay = text if e.where == "text" else raw
        if not e.could_match(hay):
            continue
        m = e.regex.search(hay)
        if m:
            return e, m
    return None


def _message_match(
    cat: Catalogue, msg: str, logger_file: str | None
) -> tuple[PhaseEntry, re.Match[str]] | None:
    """:func:`_match_message` for a message logged from ``logger_file`` (a path or None),
    remembered per message and file."""
    where = logger_file.rsplit("/", 1)[-1] if logger_file else None
    table = cat.memo.message
    key = (msg, where)
    found = table.get(key, _UNSEEN)
    if found is _UNSEEN:
        found = _match_message(cat, msg, where)
        if len(table) >= _MEMO_MAX:
            table.clear()
        table[key] = found
    return found  # type: ignore[return-value]


def _match_message(
    cat: Catalogue, msg: str, where: str | None
) -> tuple[PhaseEntry, re.Match[str]] | None:
    """The first message-scoped entry that matches ``msg`` (logged from file ``where``),
    and its match."""
    # each entry's literals gate its regex (cheaper than one alternation of them all,
    # which would have to be compiled in every run)
    for e in cat.gated(msg, message=True):
        if e.files and where is not None and where.endswith(".py") and where not in e.files:
            continue
        if e.logger_files and where is not None and where.endswith(".py") and (
            where not in e.logger_files
        ):
            continue
        m = e.regex.search(msg)
        if m:
            return e, m
    return None


def _event(record: Record, e: PhaseEntry, m: re.Match[str], memo: _Memo | None = None) -> Event:
    """The event of ``record`` matched by ``e`` (``m``); ``memo``: where the match is
    remembered (its fields are then worked out once, each event getting a copy)."""
    if memo is not None:
        table = memo.fields
        fields = table.get(m)
        if fields is None:
            fields = _fields(m)
            if len(table) >= _MEMO_MAX:
                table.clear()
            table[m] = fields
        fields = dict(fields)
    else:
        fields = _fields(m)
    return Event(
        source=record.source,
        line=record.line,
        ts=record.ts,
        rank=record.rank,
        phase=e.phase,
        kind=e.kind,
        pattern=e.id,
        message=record.message[:500],
        fields=fields,
    )

