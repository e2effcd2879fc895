"""The versioned JSON contract of ``diag analyze --json`` (schema_version 1).

``analysis_to_dict`` turns an :class:`~diag.model.Analysis` into plain JSON values;
``analysis_from_dict`` reads such a dict back (bundles store ``analysis.json`` and read it
again). Keys are only ever added within a schema version, never renamed or removed.
Events and raw records are not part of the contract (they can be millions of rows).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import regex

from diag import __version__
from diag.errors import InputError
from diag.model import (
    SEVERITIES,
    Analysis,
    Evidence,
    Finding,
    PhaseInterval,
    RankId,
    RankTimeline,
    Severity,
    ShardProgress,
    StackFrame,
    StackGroup,
    StackProcess,
    StackThread,
)

__all__ = [
    "frame_to_dict",
    "thread_to_dict",
    "SCHEMA_VERSION",
    "analysis_from_dict",
    "analysis_to_dict",
    "finding_to_dict",
    "jsonable",
    "parse_rank_label",
    "rank_to_dict",
    "render_json",
    "stack_group_to_dict",
    "stack_process_to_dict",
]

SCHEMA_VERSION = 1

_LABEL_PART = regex.compile(r"^(DP|PP|TP|EP)(\d+)$")


# ---------------------------------------------------------------------------
# helpers


def _iso(ts: dt.datetime | None) -> str | None:
    return ts.isoformat() if ts is not None else None


def _from_iso(value: object) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"analysis JSON: expected an ISO 8601 time, got {value!r}")
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise InputError(f"analysis JSON: bad ISO 8601 time {value!r}") from exc


def _num(value: float | None) -> float | None:
    """A float JSON can hold (NaN and infinities become null), rounded to ms."""
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return round(value, 3)


def jsonable(value: object, _depth: int = 0) -> Any:
    """A JSON-safe copy of a config value read from a log (tuples, sets, odd types)."""
    if _depth > 32:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, _depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, _depth + 1) for v in value]
        return sorted(items, key=repr)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return repr(value)


def parse_rank_label(label: str) -> RankId:
    """Inverse of :attr:`RankId.label` ("DP0 TP3", "node1 TP3", "host-a PP1 TP0")."""
    node: str | None = None
    coords: dict[str, int] = {}
    for part in label.split():
        m = _LABEL_PART.match(part)
        if m:
            coords[m.group(1).lower()] = int(m.group(2))
        elif part == "?":
            continue
        elif part.startswith("node") and part[4:].isdigit():
            node = part[4:]
        else:
            node = part if node is None else f"{node} {part}"
    return RankId(
        node=node,
        dp=coords.get("dp"),
        pp=coords.get("pp"),
        tp=coords.get("tp"),
        ep=coords.get("ep"),
    )


def rank_to_dict(rank: RankId) -> dict[str, Any]:
    return {
        "id": rank.label,
        "node": rank.node,
        "dp": rank.dp,
        "pp": rank.pp,
        "tp": rank.tp,
        "ep": rank.ep,
    }


def _rank_from_dict(d: Mapping[str, Any]) -> RankId:
    node = d.get("node")
    return RankId(
        node=None if node is None else str(node),
        dp=d.get("dp"),
        pp=d.get("pp"),
        tp=d.get("tp"),
        ep=d.get("ep"),
    )


def _phase_to_dict(p: PhaseInterval) -> dict[str, Any]:
    return {
        "phase": p.phase,
        "start": _iso(p.start),
        "end": _iso(p.end),
        "duration_s": _num(p.duration_s),
        "ended": p.ended,
        "source": p.source,
        "first_line": p.first_line,
        "last_line": p.last_line,
        "scope": p.scope,
    }


def _phase_from_dict(d: Mapping[str, Any]) -> PhaseInterval:
    return PhaseInterval(
        phase=str(d["phase"]),
        start=_from_iso(d.get("start")),
        end=_from_iso(d.get("end")),
        first_line=int(d.get("first_line", 0)),
        last_line=int(d.get("last_line", 0)),
        source=str(d.get("source", "")),
        ended=bool(d.get("ended", False)),
        scope=str(d.get("scope", "rank")),
    )


def _shards_to_dict(s: ShardProgress | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "done": s.done,
        "total": s.total,
        "complete": s.complete,
        "rate_s_per_it": _num(s.rate_s_per_it),
        "elapsed_s": _num(s.elapsed_s),
    }


def _shards_from_dict(d: Mapping[str, Any] | None) -> ShardProgress | None:
    if d is None:
        return None
    return ShardProgress(
        done=int(d["done"]),
        total=int(d["total"]),
        rate_s_per_it=d.get("rate_s_per_it"),
        elapsed_s=d.get("elapsed_s"),
    )


def _timeline_to_dict(r: RankTimeline) -> dict[str, Any]:
    out = rank_to_dict(r.rank)
    out.update(
        {
            "last_phase": r.last_phase,
            "phases": [_phase_to_dict(p) for p in r.phases],
            "last_ts": _iso(r.last_ts),
            "silent_s": _num(r.silent_s),
            "shards": _shards_to_dict(r.shards),
            "line_count": r.line_count,
            "inferred": r.inferred,
        }
    )
    return out


def _timeline_from_dict(d: Mapping[str, Any]) -> RankTimeline:
    out = RankTimeline(
        rank=_rank_from_dict(d),
        phases=tuple(_phase_from_dict(p) for p in d.get("phases", ())),
        last_ts=_from_iso(d.get("last_ts")),
        silent_s=d.get("silent_s"),
        shards=_shards_from_dict(d.get("shards")),
        line_count=int(d.get("line_count", 0)),
        inferred=bool(d.get("inferred", False)),
    )
    return _with_reached(out, d.get("last_phase"))


_T = TypeVar("_T", RankTimeline, Analysis)


def _with_reached(obj: _T, last_phase: object) -> _T:
    """The object with the phase reached that was written (it follows the order of events,
    which the stored phases alone may not give back)."""
    if isinstance(last_phase, str) and obj.last_phase != last_phase:
        return dataclasses.replace(obj, reached=last_phase)
    return obj


def _evidence_to_dict(e: Evidence) -> dict[str, Any]:
    return {"source": e.source, "line": e.line, "rank": e.rank, "ts": _iso(e.ts), "text": e.text}


def _evidence_from_dict(d: Mapping[str, Any]) -> Evidence:
    return Evidence(
        source=str(d.get("source", "")),
        line=int(d.get("line", 0)),
        text=str(d.get("text", "")),
        rank=d.get("rank"),
        ts=_from_iso(d.get("ts")),
    )


def finding_to_dict(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity,
        "title": f.title,
        "message": f.message,
        "role": f.role,
        "cascade_of": f.cascade_of,
        "ranks": list(f.ranks),
        "evidence": [_evidence_to_dict(e) for e in f.evidence],
        "evidence_total": max(f.evidence_total, len(f.evidence)),
        "summary": f.summary,
        "why": f.why,
        "remedy": f.remedy,
        "caveat": f.caveat,
        "references": list(f.references),
    }


def _finding_from_dict(d: Mapping[str, Any]) -> Finding:
    severity = d.get("severity")
    if severity not in SEVERITIES:
        raise InputError(f"analysis JSON: finding {d.get('id')!r} has severity {severity!r}")
    role = d.get("role", "root")
    if role not in ("root", "cascade"):
        raise InputError(f"analysis JSON: finding {d.get('id')!r} has role {role!r}")
    return Finding(
        id=str(d["id"]),
        severity=cast(Severity, severity),
        title=str(d.get("title", "")),
        message=str(d.get("message", "")),
        role=role,
        cascade_of=d.get("cascade_of"),
        ranks=tuple(d.get("ranks", ())),
        evidence=tuple(_evidence_from_dict(e) for e in d.get("evidence", ())),
        evidence_total=int(d.get("evidence_total", 0)),
        summary=str(d.get("summary", "")),
        why=str(d.get("why", "")),
        remedy=str(d.get("remedy", "")),
        caveat=str(d.get("caveat", "")),
        references=tuple(d.get("references", ())),
    )


def frame_to_dict(f: StackFrame) -> dict[str, Any]:
    out = {
        "name": f.name,
        "filename": f.filename,
        "line": f.line,
        "module": f.module,
        "native": f.native,
    }
    if f.call is not None:
        out["call"] = f.call
    return out


def _frame_from_dict(d: Mapping[str, Any]) -> StackFrame:
    return StackFrame(
        name=str(d["name"]),
        filename=str(d.get("filename", "")),
        line=d.get("line"),
        module=d.get("module"),
        native=bool(d.get("native", False)),
        call=d["call"] if isinstance(d.get("call"), str) else None,
    )


def thread_to_dict(t: StackThread) -> dict[str, Any]:
    return {
        "thread_id": t.thread_id,
        "name": t.name,
        "idle": t.idle,
        "owns_gil": t.owns_gil,
        "os_state": t.os_state,
        "wchan": t.wchan,
        "frames": [frame_to_dict(f) for f in t.frames],
    }


def _thread_from_dict(d: Mapping[str, Any]) -> StackThread:
    return StackThread(
        thread_id=d.get("thread_id"),
        name=d.get("name"),
        frames=tuple(_frame_from_dict(f) for f in d.get("frames", ())),
        idle=d.get("idle"),
        owns_gil=d.get("owns_gil"),
        os_state=d.get("os_state"),
        wchan=d.get("wchan"),
    )


def stack_process_to_dict(p: StackProcess) -> dict[str, Any]:
    return {
        "pid": p.pid,
        "title": p.title,
        "wait_site": p.wait_site,
        "wait_thread": p.wait_thread,
        "rank": p.rank.label if p.rank is not None else None,
        "rank_coords": rank_to_dict(p.rank) if p.rank is not None else None,
        "outcome": p.outcome,
        "mode": p.mode,
        "error": p.error,
        "source": p.source,
        "line": p.line,
        "samples": p.samples,
        "moving": p.moving,
        "threads": [thread_to_dict(t) for t in p.threads],
    }


def _stack_process_from_dict(d: Mapping[str, Any]) -> StackProcess:
    coords = d.get("rank_coords")
    rank: RankId | None
    if coords is not None:
        rank = _rank_from_dict(coords)
    elif d.get("rank") is not None:
        rank = parse_rank_label(str(d["rank"]))
    else:
        rank = None
    return StackProcess(
        pid=d.get("pid"),
        title=d.get("title"),
        threads=tuple(_thread_from_dict(t) for t in d.get("threads", ())),
        wait_site=d.get("wait_site"),
        wait_thread=d.get("wait_thread"),
        rank=rank,
        outcome=str(d.get("outcome", "ok")),
        mode=d.get("mode"),
        error=d.get("error"),
        source=d.get("source"),
        line=d.get("line"),
        samples=int(d.get("samples", 1)),
        moving=d.get("moving"),
    )


def stack_group_to_dict(g: StackGroup) -> dict[str, Any]:
    return {
        "wait_site": g.wait_site,
        "members": list(g.members),
        "pids": list(g.pids),
        "frames": [frame_to_dict(f) for f in g.frames],
    }


def _stack_group_from_dict(d: Mapping[str, Any]) -> StackGroup:
    return StackGroup(
        wait_site=d.get("wait_site"),
        members=tuple(d.get("members", ())),
        frames=tuple(_frame_from_dict(f) for f in d.get("frames", ())),
        pids=tuple(d.get("pids", ())),
    )


# ---------------------------------------------------------------------------
# the contract


def analysis_to_dict(a: Analysis) -> dict[str, Any]:
    """The JSON contract (schema_version 1) of one analysis, as plain JSON values."""
    return {
        "schema_version": SCHEMA_VERSION,
        "diag_version": __version__,
        "sources": list(a.sources),
        "framework": a.framework,
        "version": a.version,
        "config": jsonable(dict(a.config)),
        "last_phase": a.last_phase,
        "expected_ranks": [r.label for r in a.expected_ranks],
        "missing_ranks": [r.label for r in a.missing_ranks],
        "stragglers": [r.label for r in a.stragglers],
        "log_start": _iso(a.log_start),
        "log_end": _iso(a.log_end),
        "records": a.records,
        "undecodable_bytes": a.undecodable_bytes,
        "ranks": [_timeline_to_dict(r) for r in a.ranks],
        "global_phases": [_phase_to_dict(p) for p in a.global_phases],
        "findings": [finding_to_dict(f) for f in a.findings],
        "rules_checked": list(a.rules_checked),
        "stack_processes": [stack_process_to_dict(p) for p in a.stack_processes],
        "stack_groups": [stack_group_to_dict(g) for g in a.stack_groups],
        "notes": list(a.notes),
    }


def analysis_from_dict(d: Mapping[str, Any]) -> Analysis:
    """Read back what :func:`analysis_to_dict` wrote (events are not stored)."""
    if not isinstance(d, Mapping):
        raise InputError("analysis JSON: the top level is not an object")
    version = d.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            f"analysis JSON: schema_version {version!r} is not supported "
            f"(this diag reads {SCHEMA_VERSION})",
            help_text="Read it with the diag version that wrote it (see its diag_version key).",
        )
    try:
        out = Analysis(
            sources=tuple(d.get("sources", ())),
            framework=str(d.get("framework", "unknown")),
            version=d.get("version"),
            config=dict(d.get("config") or {}),
            ranks=tuple(_timeline_from_dict(r) for r in d.get("ranks", ())),
            expected_ranks=tuple(parse_rank_label(x) for x in d.get("expected_ranks", ())),
            missing_ranks=tuple(parse_rank_label(x) for x in d.get("missing_ranks", ())),
            stragglers=tuple(parse_rank_label(x) for x in d.get("stragglers", ())),
            log_end=_from_iso(d.get("log_end")),
            log_start=_from_iso(d.get("log_start")),
            records=int(d.get("records", 0)),
            global_phases=tuple(_phase_from_dict(p) for p in d.get("global_phases", ())),
            stack_processes=tuple(
                _stack_process_from_dict(p) for p in d.get("stack_processes", ())
            ),
            stack_groups=tuple(_stack_group_from_dict(g) for g in d.get("stack_groups", ())),
            findings=tuple(_finding_from_dict(f) for f in d.get("findings", ())),
            rules_checked=tuple(d.get("rules_checked", ())),
            notes=tuple(d.get("notes", ())),
            undecodable_bytes=int(d.get("undecodable_bytes", 0)),
        )
        return _with_reached(out, d.get("last_phase"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"analysis JSON: malformed ({type(exc).__name__}: {exc})") from exc


def render_json(a: Analysis, *, indent: int | None = 2) -> str:
    """The JSON text of an analysis (what ``--json`` prints)."""
    return json.dumps(analysis_to_dict(a), indent=indent, ensure_ascii=False)
