"""Property tests: every renderer takes any well-typed analysis without raising, and the
JSON contract reads back what it wrote."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from diag.model import (
    PHASES,
    Analysis,
    Evidence,
    Finding,
    PhaseInterval,
    RankId,
    RankTimeline,
    ShardProgress,
    StackFrame,
    StackGroup,
    StackProcess,
    StackThread,
)
from diag.report.json_out import analysis_from_dict, analysis_to_dict, jsonable
from diag.report.markdown import render_markdown
from diag.report.perfetto import render_perfetto
from diag.report.terminal import render_terminal

BASE = dt.datetime(2026, 2, 22, 22, 0, 0)
# any text, and text holding what the renderers must defuse: the tags of the report's
# collapsible blocks, code-span ticks, table pipes, line breaks
_TRICKY = st.sampled_from(["<details>", "</details>", "<summary>", "`", "``", "|", "\n", "<"])
texts = st.one_of(
    st.text(max_size=40),
    st.builds(lambda a, t, b: a + t + b, st.text(max_size=8), _TRICKY, st.text(max_size=8)),
)
times = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=3 * 86400).map(lambda s: BASE + dt.timedelta(seconds=s)),
)
small = st.integers(min_value=0, max_value=63)
ranks = st.builds(
    RankId,
    node=st.one_of(st.none(), st.sampled_from(["0", "1", "gpu-a"])),
    dp=st.one_of(st.none(), small),
    pp=st.one_of(st.none(), small),
    tp=st.one_of(st.none(), small),
    ep=st.one_of(st.none(), small),
)
phases = st.builds(
    PhaseInterval,
    phase=st.one_of(st.sampled_from(PHASES), texts),
    start=times,
    end=times,
    first_line=st.integers(min_value=0, max_value=10**6),
    last_line=st.integers(min_value=0, max_value=10**6),
    source=texts,
    ended=st.booleans(),
)
timelines = st.builds(
    RankTimeline,
    rank=ranks,
    phases=st.lists(phases, max_size=5).map(tuple),
    last_ts=times,
    silent_s=st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
    shards=st.one_of(
        st.none(),
        st.builds(
            ShardProgress,
            done=small,
            total=small,
            rate_s_per_it=st.one_of(st.none(), st.floats(min_value=0.001, max_value=1e4)),
            elapsed_s=st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
        ),
    ),
    line_count=small,
    inferred=st.booleans(),
)
evidence = st.builds(
    Evidence,
    source=texts,
    line=st.integers(min_value=0, max_value=10**6),
    text=st.text(max_size=200),
    rank=st.one_of(st.none(), st.sampled_from(["TP0", "TP3", "DP1 TP2"])),
    ts=times,
)
findings = st.builds(
    Finding,
    id=st.sampled_from(["startup.stalled", "cuda.oom", "x.y"]),
    severity=st.sampled_from(["error", "warning", "info"]),
    title=texts,
    message=st.text(max_size=300),
    role=st.sampled_from(["root", "cascade"]),
    cascade_of=st.one_of(st.none(), texts),
    ranks=st.lists(st.sampled_from(["TP0", "TP3", "DP1 TP2"]), max_size=4).map(tuple),
    evidence=st.lists(evidence, max_size=4).map(tuple),
    evidence_total=small,
    why=texts,
    remedy=texts,
    caveat=texts,
    references=st.lists(texts, max_size=2).map(tuple),
)
frames = st.builds(
    StackFrame,
    name=texts,
    filename=texts,
    line=st.one_of(st.none(), small),
    native=st.booleans(),
)
procs = st.builds(
    StackProcess,
    pid=st.one_of(st.none(), small),
    title=st.one_of(st.none(), texts),
    threads=st.lists(
        st.builds(
            StackThread,
            thread_id=st.one_of(st.none(), small),
            name=st.none(),
            frames=st.lists(frames, max_size=4).map(tuple),
        ),
        max_size=2,
    ).map(tuple),
    wait_site=st.one_of(st.none(), st.sampled_from(["stack.nccl_collective", "stack.ipc_wait"])),
    rank=st.one_of(st.none(), ranks),
)
groups = st.builds(
    StackGroup,
    wait_site=st.one_of(st.none(), texts),
    members=st.lists(texts, max_size=3).map(tuple),
    frames=st.lists(frames, max_size=3).map(tuple),
)
analyses = st.builds(
    Analysis,
    sources=st.lists(texts, max_size=3).map(tuple),
    framework=st.sampled_from(["sglang", "vllm", "unknown"]),
    version=st.one_of(st.none(), texts),
    config=st.dictionaries(
        st.sampled_from(["tp", "pp_size", "model", "quantization", "x"]),
        st.one_of(st.none(), small, texts, st.lists(small, max_size=3).map(tuple)),
        max_size=5,
    ),
    ranks=st.lists(timelines, max_size=6).map(tuple),
    expected_ranks=st.lists(ranks, max_size=4).map(tuple),
    missing_ranks=st.lists(ranks, max_size=2).map(tuple),
    stragglers=st.lists(ranks, max_size=2).map(tuple),
    log_end=times,
    records=small,
    global_phases=st.lists(phases, max_size=3).map(tuple),
    stack_processes=st.lists(procs, max_size=2).map(tuple),
    stack_groups=st.lists(groups, max_size=2).map(tuple),
    findings=st.lists(findings, max_size=4).map(tuple),
    rules_checked=st.lists(
        st.sampled_from(["startup.stalled", "cuda.oom", "nccl.timeout"]), max_size=3
    ).map(tuple),
    notes=st.lists(texts, max_size=2).map(tuple),
)

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(analyses, st.integers(min_value=40, max_value=160))
def test_terminal_never_raises_and_fits(a: Analysis, width: int) -> None:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    try:
        console.print(render_terminal(a))
    finally:
        console.file.close()
    assert console.export_text().startswith("diag analyze")


@SETTINGS
@given(analyses)
def test_markdown_and_perfetto_never_raise(a: Analysis) -> None:
    md = render_markdown(a)
    assert md.startswith("## diag analyze:")
    assert md.count("<details>") == md.count("</details>")
    trace = json.loads(render_perfetto(a))
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            assert e["dur"] >= 0


@SETTINGS
@given(analyses)
def test_json_round_trip(a: Analysis) -> None:
    d = json.loads(json.dumps(analysis_to_dict(a)))
    back = analysis_from_dict(d)
    assert analysis_to_dict(back) == d
    # evidence_total never says fewer lines than the evidence it carries
    assert back.findings == tuple(
        dataclasses.replace(f, evidence_total=max(f.evidence_total, len(f.evidence)))
        for f in a.findings
    )
    assert back.ranks == tuple(
        RankTimeline(
            r.rank,
            r.phases,
            r.last_ts,
            None if r.silent_s is None else round(r.silent_s, 3),
            None
            if r.shards is None
            else ShardProgress(
                r.shards.done,
                r.shards.total,
                None if r.shards.rate_s_per_it is None else round(r.shards.rate_s_per_it, 3),
                None if r.shards.elapsed_s is None else round(r.shards.elapsed_s, 3),
            ),
            r.line_count,
            r.inferred,
        )
        for r in a.ranks
    )
    assert dict(back.config) == jsonable(dict(a.config))
