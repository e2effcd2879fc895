"""The Perfetto / Chrome trace against the Trace Event Format (the JSON Object Format of
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
known phases, integer pids/tids, non-negative times, complete events with a duration,
instant events with a scope, metadata events naming processes and threads, and slices
that nest on each track. Then what the picture must show: each rank's final phase
reaching the log end (or the snapshot), all-rank findings on every rank."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import jsonschema

from diag.analyze import analyze
from diag.report.combined import combine
from diag.report.perfetto import perfetto_trace, render_perfetto
from diag.report.snapshot_read import snapshot_from_dict

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "fixtures" / "gpu" / "h200x2" / "cpu-w8"
EXAMPLE = ROOT / "diag" / "data" / "example.log"

_NUM = {"type": "number", "minimum": 0}
_INT = {"type": "integer", "minimum": 0}
TRACE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["ph", "pid", "tid", "name"],
                "properties": {
                    "ph": {"enum": ["X", "i", "I", "M", "B", "E", "C"]},
                    "pid": _INT,
                    "tid": _INT,
                    "name": {"type": "string", "minLength": 1},
                    "cat": {"type": "string"},
                    "ts": _NUM,
                    "dur": _NUM,
                    "args": {"type": "object"},
                },
                "allOf": [
                    {
                        "if": {"properties": {"ph": {"const": "X"}}},
                        "then": {"required": ["ts", "dur"]},
                    },
                    {
                        "if": {"properties": {"ph": {"const": "i"}}},
                        "then": {
                            "required": ["ts", "s"],
                            "properties": {"s": {"enum": ["g", "p", "t"]}},
                        },
                    },
                    {
                        "if": {"properties": {"ph": {"const": "M"}}},
                        "then": {
                            "required": ["args"],
                            "properties": {
                                "name": {
                                    "enum": [
                                        "process_name",
                                        "process_sort_index",
                                        "thread_name",
                                        "thread_sort_index",
                                    ]
                                }
                            },
                        },
                    },
                ],
            },
        },
    },
}


def _check_format(trace: dict[str, Any]) -> None:
    jsonschema.validate(trace, TRACE_EVENT_SCHEMA)
    # every track's complete events nest (a child ends before its parent)
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, slices in tracks.items():
        stack: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"slices overlap on track {key}"
            stack.append(end)
    named = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {e["pid"] for e in trace["traceEvents"]} <= named  # every process track named


def _by_rank(trace: dict[str, Any]) -> dict[str, int]:
    return {
        e["args"]["name"]: e["pid"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def test_combined_trace_reaches_the_snapshot_and_puts_all_rank_findings_on_every_rank() -> None:
    snap = snapshot_from_dict(json.loads((CAPTURE / "snapshot-json.json").read_text()))
    view = combine(analyze([CAPTURE / "server.log"]), snap)
    trace = json.loads(render_perfetto(view))
    _check_format(trace)
    pids = _by_rank(trace)
    assert view.taken_at is not None
    first = dt.datetime.fromisoformat(trace["otherData"]["t0"])
    horizon = (view.taken_at - first).total_seconds() * 1e6
    for i in range(8):
        pid = pids[f"TP{i}"]
        ends = [
            e["ts"] + e["dur"] for e in trace["traceEvents"] if e["pid"] == pid and e["ph"] == "X"
        ]
        assert abs(max(ends) - horizon) < 1000, f"TP{i} does not reach the snapshot"
        stalled = [
            e
            for e in trace["traceEvents"]
            if e["pid"] == pid and e["ph"] == "i" and e["name"] == "error: startup.stalled"
        ]
        assert stalled, f"the all-rank stall is not on TP{i}'s track"


def test_an_open_final_phase_has_an_extent_to_the_log_end() -> None:
    a = analyze([EXAMPLE])
    # the ranks still in weights_load when the log ends (no end line seen), silent after
    ranks = tuple(
        dataclasses.replace(
            r,
            phases=(*r.phases[:-1], dataclasses.replace(r.phases[-1], end=None, ended=False)),
            silent_s=120.0,
        )
        for r in a.ranks
    )
    trace = perfetto_trace(dataclasses.replace(a, ranks=ranks))
    _check_format(trace)
    pids = _by_rank(trace)
    for r in ranks:
        mine = [
            e for e in trace["traceEvents"] if e["pid"] == pids[r.rank.label] and e["ph"] == "X"
        ]
        final = next(e for e in mine if e["name"] == r.phases[-1].phase)
        silent = next(e for e in mine if e["name"] == "silent")
        assert final["dur"] > 0
        assert final["ts"] + final["dur"] == silent["ts"] + silent["dur"]  # to the end
    assert min(e.get("ts", 0) for e in trace["traceEvents"]) >= 0


def test_example_trace_is_valid() -> None:
    _check_format(perfetto_trace(analyze([EXAMPLE])))
