"""`--format perfetto`: the timeline as Chrome / Perfetto trace JSON."""

from __future__ import annotations

import json

from report_samples import T, story_analysis, untimed_analysis

from diag.report.perfetto import perfetto_trace, render_perfetto


def test_perfetto_one_track_per_rank_one_slice_per_phase() -> None:
    trace = json.loads(render_perfetto(story_analysis()))
    events = trace["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert sorted(names.values()) == sorted(
        ["no rank (launcher, progress bars)"] + [f"TP{i}" for i in range(8)]
    )
    pid = {v: k for k, v in names.items()}
    tp3 = [e for e in events if e["ph"] == "X" and e["pid"] == pid["TP3"]]
    phases = [(e["name"], e["ts"], e["dur"]) for e in tp3 if e["cat"] == "phase"]
    # microseconds from the first stamp of the log (22:34:47)
    assert phases == [
        ("dist_init", 14_000_000, 19_000_000),
        ("weights_load", 34_000_000, 34_000_000),
    ]
    silent = next(e for e in tp3 if e["cat"] == "silence")
    assert (silent["ts"], silent["dur"]) == (68_000_000, 11_520_000_000)
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert sort[pid["TP0"]] < sort[pid["TP3"]] < sort[pid["TP7"]]


def test_perfetto_findings_are_instants_on_their_rank() -> None:
    trace = perfetto_trace(story_analysis())
    events = trace["traceEvents"]
    pid = {
        e["args"]["name"]: e["pid"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    quant = [
        e for e in events if e["ph"] == "i" and e["name"] == "warning: quant.fallback_unquantized"
    ]
    assert sorted(e["pid"] for e in quant) == sorted([pid["TP3"], pid["TP6"]])
    assert quant[0]["ts"] == (T("22:35:22") - T("22:34:47")).total_seconds() * 1_000_000
    attn = next(e for e in events if e["name"] == "info: attention.backend_fallback")
    assert attn["pid"] == pid["no rank (launcher, progress bars)"]
    assert trace["otherData"]["last_phase"] == "weights_load"


def test_perfetto_without_times_has_tracks_only() -> None:
    trace = perfetto_trace(untimed_analysis())
    assert [e["ph"] for e in trace["traceEvents"]] == ["M"] * 4
