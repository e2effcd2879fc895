"""``diag analyze --format perfetto``: the timeline as a Chrome / Perfetto trace.

The JSON trace event format (``{"traceEvents": [...]}``) that ui.perfetto.dev and
chrome://tracing open: one process track per rank (named by "M" metadata events, sorted
by rank), one complete ("X") slice per phase, the silence at the end of each rank as a
slice of its own, and each finding's evidence as an instant ("i") event on its rank's
track. Times are microseconds from the first time stamp of the log.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from diag.model import Analysis, PhaseInterval, RankTimeline
from diag.report.common import sorted_findings, time_span

__all__ = ["perfetto_trace", "render_perfetto"]

_TID_PHASES = 1
_TID_FINDINGS = 2


def _us(ts: dt.datetime, t0: dt.datetime) -> int:
    return round((ts - t0).total_seconds() * 1_000_000)


def _meta(pid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}},
        {
            "ph": "M",
            "pid": pid,
            "tid": 0,
            "name": "process_sort_index",
            "args": {"sort_index": sort_index},
        },
        {
            "ph": "M",
            "pid": pid,
            "tid": _TID_PHASES,
            "name": "thread_name",
            "args": {"name": "phases"},
        },
        {
            "ph": "M",
            "pid": pid,
            "tid": _TID_FINDINGS,
            "name": "thread_name",
            "args": {"name": "findings"},
        },
    ]


def _slices(
    pid: int, phases: tuple[PhaseInterval, ...], last_ts: dt.datetime | None, t0: dt.datetime
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in phases:
        if p.start is None:
            continue
        end = p.end or last_ts or p.start
        out.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": _TID_PHASES,
                "name": p.phase,
                "cat": "phase",
                "ts": _us(p.start, t0),
                "dur": max(0, _us(end, t0) - _us(p.start, t0)),
                "args": {
                    "start": p.start.isoformat(),
                    "end": p.end.isoformat() if p.end is not None else None,
                    "ended": p.ended,
                    "source": p.source,
                    "first_line": p.first_line,
                    "last_line": p.last_line,
                },
            }
        )
    return out


def _silence(pid: int, r: RankTimeline, t0: dt.datetime) -> list[dict[str, Any]]:
    if r.last_ts is None or r.silent_s is None or r.silent_s <= 0:
        return []
    return [
        {
            "ph": "X",
            "pid": pid,
            "tid": _TID_PHASES,
            "name": "silent",
            "cat": "silence",
            "ts": _us(r.last_ts, t0),
            "dur": round(r.silent_s * 1_000_000),
            "args": {"last_line_at": r.last_ts.isoformat(), "silent_s": r.silent_s},
        }
    ]


def perfetto_trace(analysis: Analysis) -> dict[str, Any]:
    """The trace as a dict (``traceEvents`` plus metadata)."""
    a = analysis
    t0, _ = time_span(a)
    events: list[dict[str, Any]] = []
    pids: dict[str, int] = {}
    if a.global_phases:
        pids["(no rank)"] = 1
        events += _meta(1, "no rank (launcher, progress bars)", 0)
        if t0 is not None:
            events += _slices(1, a.global_phases, None, t0)
    for i, r in enumerate(sorted(a.ranks, key=lambda r: r.rank.sort_key)):
        pid = i + 2
        pids[r.rank.label] = pid
        events += _meta(pid, r.rank.label, i + 1)
        if t0 is not None:
            events += _slices(pid, r.phases, r.last_ts, t0)
            events += _silence(pid, r, t0)
    if t0 is not None:
        for f in sorted_findings(a.findings):
            for e in f.evidence:
                if e.ts is None:
                    continue
                pid = pids.get(e.rank or "", pids.get("(no rank)", 0))
                if pid == 0:
                    pid = 1
                    if "(no rank)" not in pids:
                        pids["(no rank)"] = 1
                        events += _meta(1, "no rank (launcher, progress bars)", 0)
                events.append(
                    {
                        "ph": "i",
                        "s": "t",
                        "pid": pid,
                        "tid": _TID_FINDINGS,
                        "name": f"{f.severity}: {f.id}",
                        "cat": "finding",
                        "ts": _us(e.ts, t0),
                        "args": {
                            "title": f.title,
                            "source": f"{e.source}:{e.line}",
                            "text": e.text,
                        },
                    }
                )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "diag analyze --format perfetto",
            "framework": a.framework,
            "version": a.version,
            "t0": t0.isoformat() if t0 is not None else None,
            "sources": list(a.sources),
            "last_phase": a.last_phase,
        },
    }


def render_perfetto(analysis: Analysis) -> str:
    """The trace JSON text (open it in https://ui.perfetto.dev)."""
    return json.dumps(perfetto_trace(analysis), ensure_ascii=False)
