"""The phase catalogue: log message patterns -> startup phase events.

The catalogue is data (``diag/data/phases.yaml``); this module loads it, checks it, and
matches records against it. Each entry names the sglang/vllm source file and version its
message comes from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from diag.errors import DiagError
from diag.model import PHASES, Event, EventKind, Record
from diag.parse.literals import required_literals

__all__ = [
    "KINDS",
    "Catalogue",
    "PhaseEntry",
    "load_catalogue",
    "match_record",
    "parse_catalogue",
]

KINDS: tuple[EventKind, ...] = ("begin", "progress", "end", "mark")
_FRAMEWORKS = ("sglang", "vllm", "any")
_KEYS = {"id", "phase", "kind", "regex", "framework", "source", "version", "where"}


@dataclass(frozen=True, slots=True)
class PhaseEntry:
    id: str
    phase: str
    kind: EventKind
    regex: re.Pattern[str]
    framework: str
    source: str
    version: str
    where: str = "message"  # message | text (plus continuation lines) | raw (the whole line)
    # one of these is in every match (a cheap test before the regex); () when unknown
    literals: tuple[str, ...] = ()

    def could_match(self, haystack: str) -> bool:
        return not self.literals or any(lit in haystack for lit in self.literals)


@dataclass(frozen=True, slots=True)
class Catalogue:
    entries: tuple[PhaseEntry, ...]
    # one alternation of every message-scoped pattern: a quick "can anything match?"
    any_message: re.Pattern[str]
    any_text: re.Pattern[str] | None

    def match(self, record: Record) -> Event | None:
        return match_record(self, record)


def _entry(raw: dict[str, Any], where_from: str) -> PhaseEntry:
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
    try:
        rx = re.compile(str(raw["regex"]))
    except re.error as exc:
        raise DiagError(f"{where_from}: phase entry {ident}: bad regex: {exc}") from exc
    return PhaseEntry(
        literals=tuple(sorted(required_literals(rx.pattern) or ())),
        id=str(ident),
        phase=str(raw["phase"]),
        kind=raw["kind"],
        regex=rx,
        framework=str(raw["framework"]),
        source=str(raw["source"]),
        version=str(raw["version"]),
        where=where,
    )


def parse_catalogue(text: str, where_from: str = "phases.yaml") -> Catalogue:
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise DiagError(f"{where_from}: expected a mapping with an 'entries' list")
    entries = tuple(_entry(e, where_from) for e in data["entries"])
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        raise DiagError(f"{where_from}: duplicate entry ids")
    msg = [_anon(e.regex.pattern) for e in entries if e.where == "message"]
    txt = [_anon(e.regex.pattern) for e in entries if e.where != "message"]
    return Catalogue(
        entries=entries,
        any_message=re.compile("|".join(f"(?:{p})" for p in msg)),
        any_text=re.compile("|".join(f"(?:{p})" for p in txt)) if txt else None,
    )


def _anon(pattern: str) -> str:
    """The pattern with named groups made anonymous (so that several can be joined)."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


@lru_cache(maxsize=1)
def load_catalogue() -> Catalogue:
    """The built-in catalogue (cached)."""
    text = resources.files("diag.data").joinpath("phases.yaml").read_text(encoding="utf-8")
    return parse_catalogue(text)


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
    if cat.any_message.search(msg):
        for e in cat.entries:
            if e.where != "message" or not e.could_match(msg):
                continue
            m = e.regex.search(msg)
            if m:
                return _event(record, e, m)
    if cat.any_text is not None:
        text = record.text
        raw = record.raw or msg
        if cat.any_text.search(text) or cat.any_text.search(raw):
            for e in cat.entries:
                if e.where == "message":
                    continue
                hay = text if e.where == "text" else raw
                if not e.could_match(hay):
                    continue
                m = e.regex.search(hay)
                if m:
                    return _event(record, e, m)
    return None


def _event(record: Record, e: PhaseEntry, m: re.Match[str]) -> Event:
    return Event(
        source=record.source,
        line=record.line,
        ts=record.ts,
        rank=record.rank,
        phase=e.phase,
        kind=e.kind,
        pattern=e.id,
        message=record.message[:500],
        fields=_fields(m),
    )

