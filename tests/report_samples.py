"""Hand-built analyses for the report tests (the engine is tested elsewhere)."""

from __future__ import annotations

import datetime as dt

from diag.model import (
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

__all__ = ["T", "stacks_analysis", "story_analysis", "untimed_analysis"]


def T(hms: str, day: int = 22) -> dt.datetime:
    h, m, s = (int(x) for x in hms.split(":"))
    return dt.datetime(2026, 2, day, h, m, s)


def _rank(tp: int, *, stop_at_dist: bool = False) -> RankTimeline:
    dist = PhaseInterval(
        "dist_init", T("22:35:01"), T("22:35:20"), 10 + tp, 90 + tp, "server.log", True
    )
    if stop_at_dist:
        return RankTimeline(
            rank=RankId(tp=tp),
            phases=(dist,),
            last_ts=T("22:35:20"),
            silent_s=35.0 + 11520.0,
            line_count=12,
        )
    weights = PhaseInterval(
        "weights_load", T("22:35:21"), T("22:35:55"), 100 + tp, 170 + tp, "server.log", True
    )
    return RankTimeline(
        rank=RankId(tp=tp),
        phases=(dist, weights),
        last_ts=T("22:35:55"),
        silent_s=11520.0,
        shards=ShardProgress(64, 64, 0.53, 34.0),
        line_count=20,
    )


def _ev(line: int, tp: int | None, hms: str, text: str) -> Evidence:
    return Evidence("server.log", line, text, rank=None if tp is None else f"TP{tp}", ts=T(hms))


def story_findings() -> tuple[Finding, ...]:
    fallback = (
        "Acceleration for non-quantized schemes is not supported by Compressed Tensors. "
        "Falling back to UnquantizedLinearMethod"
    )
    return (
        Finding(
            id="attention.backend_fallback",
            severity="info",
            title="Attention backend chosen by default",
            message="No attention backend was given; SGLang picked triton.",
            ranks=(),
            evidence=(
                _ev(
                    1,
                    None,
                    "22:34:47",
                    "Attention backend not specified. Use triton backend by default.",
                ),
            ),
            evidence_total=1,
            why="The default may not be the fastest kernel on this GPU.",
            remedy="Pass --attention-backend explicitly.",
        ),
        Finding(
            id="quant.fallback_unquantized",
            severity="warning",
            title="Layers fall back to the unquantized path",
            message="Compressed Tensors has no kernel for some layers.",
            ranks=("TP3", "TP6"),
            evidence=(_ev(120, 3, "22:35:22", fallback), _ev(121, 6, "22:35:22", fallback)),
            evidence_total=2,
            why="INT4 weights run through the unquantized path: expect lower throughput.",
            remedy="Check the quantization config's ignore list.",
            references=("https://github.com/sgl-project/sglang/issues/0",),
        ),
        Finding(
            id="startup.stalled",
            severity="error",
            title="Startup stalled after weights_load",
            message="Every rank passed weights_load at 22:35:55, then 0 lines for 3 h 12 min.",
            ranks=tuple(f"TP{i}" for i in range(8)),
            evidence=tuple(
                _ev(
                    177 + i,
                    i,
                    "22:35:55",
                    "Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16",
                )
                for i in range(8)
            ),
            evidence_total=8,
            why="No port was opened; the ranks are blocked on the CPU side.",
            remedy="Run `diag snapshot` on the host to see where each rank waits.",
            caveat="A slow step can look like a hang.",
        ),
    )


def story_analysis(**changes: object) -> Analysis:
    """The DESIGN.md story: 8 TP ranks, weights loaded, then silence."""
    ranks = tuple(_rank(tp) for tp in range(8))
    base = Analysis(
        sources=("server.log",),
        framework="sglang",
        version="0.5.6",
        config={
            "model_path": "/models/moonshotai/Kimi-K2.5-INT4",
            "tp_size": 8,
            "pp_size": 1,
            "dp_size": 1,
            "ep_size": 1,
            "nnodes": 1,
            "quantization": "compressed-tensors",
            "cuda_graph_bs": (1, 2, 4),
        },
        ranks=ranks,
        expected_ranks=tuple(RankId(tp=i) for i in range(8)),
        missing_ranks=(),
        stragglers=(),
        log_end=T("22:35:55"),
        records=184,
        global_phases=(PhaseInterval("launch", T("22:34:47"), T("22:34:53"), 1, 3, "server.log"),),
        findings=story_findings(),
        rules_checked=(
            "startup.stalled",
            "quant.fallback_unquantized",
            "attention.backend_fallback",
            "cuda.oom",
            "nccl.timeout",
            "rank.straggler",
        ),
        notes=("progress bars have no rank prefix: attributed to no rank",),
    )
    if not changes:
        return base
    import dataclasses

    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def straggler_analysis() -> Analysis:
    """TP5 stopped in dist_init while the others loaded weights; TP7 never logged."""
    ranks = tuple(_rank(tp, stop_at_dist=(tp == 5)) for tp in range(7))
    return story_analysis(
        ranks=ranks,
        stragglers=(RankId(tp=5),),
        missing_ranks=(RankId(tp=7),),
        findings=(),
    )


def untimed_analysis() -> Analysis:
    """A 2024 log with no time stamps at all."""
    phases = (
        PhaseInterval("dist_init", None, None, 1, 4, "old.log"),
        PhaseInterval("weights_load", None, None, 5, 9, "old.log"),
        PhaseInterval("cuda_graph", None, None, 10, 12, "old.log"),
    )
    return Analysis(
        sources=("old.log",),
        framework="vllm",
        version=None,
        config={},
        ranks=(RankTimeline(RankId(tp=0), phases, None, None),),
        expected_ranks=(),
        missing_ranks=(),
        stragglers=(),
        log_end=None,
        records=12,
    )


def stacks_analysis() -> Analysis:
    recv = StackFrame("recv", "torch/distributed/distributed_c10d.py", 2070)
    wait = StackFrame("gloo::transport::tcp::UnboundBuffer::waitRecv", "", None, native=True)
    loop = StackFrame("event_loop_normal", "sglang/srt/managers/scheduler.py", 801)
    thread = StackThread(1, "MainThread", (wait, recv, loop), idle=False, owns_gil=False)
    procs = tuple(
        StackProcess(
            pid=88690 + i,
            title=f"sglang::scheduler_PP{i}_TP1",
            threads=(thread,),
            wait_site="stack.nccl_collective",
            wait_thread=1,
            rank=RankId(pp=i, tp=1),
            mode="text",
            source="dump.txt",
            line=3 + 40 * i,
        )
        for i in range(2)
    )
    group = StackGroup(
        "stack.nccl_collective", ("PP0 TP1", "PP1 TP1"), (wait, recv, loop), (88690, 88691)
    )
    return Analysis(
        sources=("dump.txt",),
        framework="sglang",
        version=None,
        config={},
        ranks=(),
        expected_ranks=(),
        missing_ranks=(),
        stragglers=(),
        log_end=None,
        records=80,
        stack_processes=procs,
        stack_groups=(group,),
    )
