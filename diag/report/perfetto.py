"""``diag analyze --format perfetto``: the timeline as a Chrome / Perfetto trace.

The JSON trace event format (``{"traceEvents": [...]}``) that ui.perfetto.dev and
chrome://tracing open: one process track per rank (named by "M" metadata events, sorted
by rank), one complete ("X") slice per phase, the silence at the end of each rank as a
slice of its own, and each finding's evidence as an instant ("i") event on its rank's
track. Times are microseconds from the first time stamp of the log (never negative).

Each rank's final phase, when the log never saw it end, reaches to the rank's last line,
and the silence after it to the log's end or to the live snapshot's time; a finding that
names every rank (or none) is an instant on every rank's track.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from diag.model import Analysis, Combined, Evidence, Finding, PhaseInterval, RankTimeline
from diag.report.combined import as_combined
from diag.report.common import sorted_findings, time_span

__all__ = ["perfetto_trace", "render_perfetto"]

_TID_PHASES = 1
_TID_FINDINGS = 2


def _us(ts: dt.datetime, t0: dt.datetime) -> int:
    try:
        return max(0, round((ts - t0).total_seconds() * 1_000_000))
    except TypeError:  # naive and aware stamps mixed
        return max(
            0, round((ts.replace(tzinfo=None) - t0.replace(tzinfo=None)).total_seconds() * 1e6)
        )


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


MIN_DUR_US = 1000  # a slice of one line still shows (1 ms)


def _slices(
    pid: int,
    phases: tuple[PhaseInterval, ...],
    last_ts: dt.datetime | None,
    t0: dt.datetime,
    horizon: dt.datetime | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    timed = [p for p in phases if p.start is not None]
    final = max(timed, key=lambda p: (p.start, p.first_line), default=None)
    for p in timed:
        assert p.start is not None
        end = p.end or last_ts or p.start
        if p is final and not p.ended and horizon is not None:
            end = horizon  # the phase a rank is still in reaches the log end / snapshot
        out.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": _TID_PHASES,
                "name": p.phase,
                "cat": "phase",
                "ts": _us(p.start, t0),
                "dur": max(MIN_DUR_US, _us(end, t0) - _us(p.start, t0)),
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
    name = "silent"
    return [
        {
            "ph": "X",
            "pid": pid,
            "tid": _TID_PHASES,
            "name": name,
            "cat": "silence",
            "ts": _us(r.last_ts, t0),
            "dur": round(r.silent_s * 1_000_000),
            "args": {"last_line_at": r.last_ts.isoformat(), "silent_s": r.silent_s},
        }
    ]


def perfetto_trace(analysis: Analysis | Combined) -> dict[str, Any]:
    """The trace as a dict (``traceEvents`` plus metadata)."""
    view = as_combined(analysis)
    a = view.analysis
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
            horizon = (
                r.last_ts + dt.timedelta(seconds=r.silent_s)
                if r.last_ts is not None and r.silent_s
                else r.last_ts
            )
            events += _slices(pid, r.phases, r.last_ts, t0, horizon)
            events += _silence(pid, r, t0)
    all_ranks = [r.rank.label for r in a.ranks]
    if t0 is not None:
        for f in sorted_findings(a.findings):
            everyone = len(all_ranks) > 1 and set(all_ranks) <= set(f.ranks)
            for e in f.evidence:
                if e.ts is None:
                    continue
                if everyone:  # a finding about the whole server: on every rank's track
                    for label in all_ranks:
                        events.append(_instant(f, e, pids[label], _us(e.ts, t0)))
                    continue
                pid = pids.get(e.rank or "", pids.get("(no rank)", 0))
                if pid == 0:
                    pid = 1
                    if "(no rank)" not in pids:
                        pids["(no rank)"] = 1
                        events += _meta(1, "no rank (launcher, progress bars)", 0)
                events.append(_instant(f, e, pid, _us(e.ts, t0)))
            if everyone and not any(e.ts is not None for e in f.evidence) and view.taken_at:
                for label in all_ranks:  # a live finding: at the snapshot's time
                    events.append(_instant(f, None, pids[label], _us(view.taken_at, t0)))
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


def _instant(f: Finding, e: Evidence | None, pid: int, ts: int) -> dict[str, Any]:
    return {
        "ph": "i",
        "s": "t",
        "pid": pid,
        "tid": _TID_FINDINGS,
        "name": f"{f.severity}: {f.id}",
        "cat": "finding",
        "ts": ts,
        "args": {
            "title": f.title,
            "source": f"{e.source}:{e.line}" if e is not None else "live snapshot",
            "text": e.text if e is not None else f.message,
        },
    }


def render_perfetto(analysis: Analysis | Combined) -> str:
    """The trace JSON text (open it in https://ui.perfetto.dev)."""
    return json.dumps(perfetto_trace(analysis), ensure_ascii=False)
