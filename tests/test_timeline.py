"""Timeline: phase intervals, shard progress, stragglers, missing ranks, silence."""

from __future__ import annotations

import datetime as dt

from diag.model import Event, EventKind, RankId, RankTimeline
from diag.timeline import (
    RankStats,
    build_intervals,
    build_timelines,
    expected_ranks,
    missing_ranks,
    shard_progress,
    stragglers,
)

T0 = dt.datetime(2026, 2, 22, 22, 35, 0)
TP0 = RankId(tp=0)


def ev(
    sec: float | None,
    phase: str,
    kind: EventKind = "mark",
    rank: RankId | None = TP0,
    line: int = 1,
    **fields: str | float,
) -> Event:
    ts = None if sec is None else T0 + dt.timedelta(seconds=sec)
    return Event("x.log", line, ts, rank, phase, kind, "test", "m", fields)


def test_intervals_explicit_end_and_next_phase_start() -> None:
    ivs = build_intervals(
        [
            ev(0, "dist_init", "begin", line=1),
            ev(4, "dist_init", "end", line=2),
            ev(5, "weights_load", "begin", line=3),
            ev(20, "weights_load", "progress", line=4),
            ev(39, "kv_cache", "mark", line=5),
        ]
    )
    assert [i.phase for i in ivs] == ["dist_init", "weights_load", "kv_cache"]
    d, w, k = ivs
    assert d.ended and d.duration_s == 4.0
    assert not w.ended and w.end == T0 + dt.timedelta(seconds=39) and w.duration_s == 34.0
    assert (w.first_line, w.last_line) == (3, 4)
    assert k.end is None and k.duration_s is None  # the furthest phase stays open


def test_intervals_in_phase_order_even_when_lines_interleave() -> None:
    ivs = build_intervals([ev(10, "kv_cache"), ev(1, "launch"), ev(5, "weights_load")])
    assert [i.phase for i in ivs] == ["launch", "weights_load", "kv_cache"]


def test_intervals_without_timestamps() -> None:
    ivs = build_intervals([ev(None, "weights_load", "progress"), ev(None, "cuda_graph")])
    assert ivs[0].start is None and ivs[0].duration_s is None


def test_shard_progress_latest_and_rate() -> None:
    sp = shard_progress(
        [
            ev(1, "weights_load", "progress", done=1.0, total=64.0, rate=1.9, unit="it/s"),
            ev(34, "weights_load", "progress", done=64.0, total=64.0, rate=0.53, unit="s/it",
               elapsed="00:34"),
        ]
    )
    assert sp is not None
    assert (sp.done, sp.total, sp.complete) == (64, 64, True)
    assert sp.rate_s_per_it == 0.53 and sp.elapsed_s == 34.0
    first = shard_progress([ev(1, "weights_load", done=2.0, total=4.0, rate=2.0, unit="it/s")])
    assert first is not None and first.rate_s_per_it == 0.5 and not first.complete


def tl(tp: int, phase: str | None, silent: float | None) -> RankTimeline:
    phases = build_intervals([ev(0, phase, rank=RankId(tp=tp))]) if phase else ()
    return RankTimeline(RankId(tp=tp), phases, None, silent)


def test_straggler_behind_the_majority_and_quiet() -> None:
    ranks = [tl(i, "cuda_graph", 0.0) for i in range(7)] + [tl(7, "weights_load", 900.0)]
    assert stragglers(ranks) == (RankId(tp=7),)


def test_behind_but_only_for_a_moment_is_not_a_straggler() -> None:
    ranks = [tl(i, "kv_cache", 0.0) for i in range(7)] + [tl(7, "weights_load", 4.0)]
    assert stragglers(ranks) == ()


def test_same_phase_but_silent_long_before_the_others() -> None:
    # vLLM tp=2: the driver (TP0) went quiet 30 minutes before TP1 timed out
    ranks = [tl(0, "dist_init", 1800.0), tl(1, "dist_init", 0.0)]
    assert stragglers(ranks) == (RankId(tp=0),)


def test_quiet_ranks_that_finished_startup_are_not_behind_a_serving_tp0() -> None:
    done = [
        RankTimeline(
            RankId(tp=i),
            build_intervals([ev(0, "cuda_graph", "begin", RankId(tp=i)),
                             ev(20, "cuda_graph", "end", RankId(tp=i))]),
            None,
            3600.0,
        )
        for i in (1, 2, 3)
    ]
    serving = tl(0, "serving", 0.0)
    assert stragglers([serving, *done], server_up=True) == ()
    # the same quiet ranks while the server never came up are behind
    assert stragglers([serving, *done], server_up=False) == tuple(t.rank for t in done)
    # an open phase (no end marker) is still a straggler even when the server is up
    stuck = tl(4, "cuda_graph", 3600.0)
    assert stragglers([serving, *done, stuck], server_up=True) == (RankId(tp=4),)


def test_no_stragglers_when_all_agree_or_only_one_rank() -> None:
    assert stragglers([tl(i, "serving", 0.0) for i in range(8)]) == ()
    assert stragglers([tl(0, "weights_load", 100.0)]) == ()


def test_no_majority_only_long_silence_counts() -> None:
    spread = [tl(0, "dist_init", 50.0), tl(1, "weights_load", 30.0), tl(2, "kv_cache", 0.0),
              tl(3, "cuda_graph", 0.0)]
    assert stragglers(spread) == ()  # ranks spread out, all still logging recently
    spread[0] = tl(0, "dist_init", 900.0)
    assert stragglers(spread) == (RankId(tp=0),)


def test_expected_and_missing_ranks() -> None:
    exp = expected_ranks({"tp": 4})
    assert [r.label for r in exp] == ["TP0", "TP1", "TP2", "TP3"]
    seen = [RankId(tp=0), RankId(tp=1), RankId(dp=0, tp=3)]
    assert missing_ranks(exp, seen) == (RankId(tp=2),)
    assert missing_ranks(exp, []) == ()  # nothing tagged at all: cannot tell
    pp = expected_ranks({"tp": 2, "pp": 2})
    assert [r.label for r in pp] == ["PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"]


def test_expected_ranks_of_one_node_in_a_multi_node_layout() -> None:
    exp = expected_ranks({"tp": 16, "nnodes": 2, "node_rank": 1})
    assert [r.tp for r in exp] == list(range(8, 16))
    # the log shows ranks of both nodes: expect them all
    both = expected_ranks({"tp": 16, "nnodes": 2, "node_rank": 1}, [RankId(tp=0)])
    assert len(both) == 16
    assert expected_ranks({}) == ()


def test_vllm_data_parallel_ranks_are_per_replica() -> None:
    exp = expected_ranks({"tp": 2, "dp": 2}, framework="vllm")
    assert [r.label for r in exp] == ["DP0 TP0", "DP0 TP1", "DP1 TP0", "DP1 TP1"]
    seen = [RankId(dp=0, tp=0), RankId(dp=0, tp=1), RankId(dp=1, tp=0)]
    assert missing_ranks(exp, seen) == (RankId(dp=1, tp=1),)
    # SGLang with DP attention: TP ranks are global, DP tags ride along
    sg = expected_ranks({"tp": 4, "dp": 4}, framework="sglang")
    assert missing_ranks(sg, [RankId(dp=i, tp=i) for i in range(3)]) == (RankId(tp=3),)


def test_build_timelines_silence_and_global_phases() -> None:
    events = [
        ev(0, "launch", rank=None),
        ev(10, "weights_load", "begin", rank=RankId(tp=0)),
        ev(60, "kv_cache", rank=RankId(tp=0)),
        ev(10, "weights_load", "begin", rank=RankId(tp=1)),
    ]
    stats = {
        RankId(tp=0): RankStats(T0, T0 + dt.timedelta(seconds=100), 5),
        RankId(tp=1): RankStats(T0, T0 + dt.timedelta(seconds=20), 3),
    }
    ranks, glob = build_timelines(events, stats, T0 + dt.timedelta(seconds=100))
    assert [g.phase for g in glob] == ["launch"]
    r0, r1 = ranks
    assert (r0.last_phase, r0.silent_s, r0.line_count) == ("kv_cache", 0.0, 5)
    assert (r1.last_phase, r1.silent_s) == ("weights_load", 80.0)


def _in_phase(tp: int, *, last_s: float, ended: bool) -> RankTimeline:
    from diag.model import PhaseInterval

    end = T0 + dt.timedelta(seconds=last_s)
    return RankTimeline(
        rank=RankId(tp=tp),
        phases=(
            PhaseInterval("cuda_graph", T0, end if ended else None, 1, 2, "log", ended=ended),
        ),
        last_ts=end,
        silent_s=None,
        line_count=10,
    )


def test_a_rank_that_never_ended_the_phase_its_peers_ended_is_a_straggler() -> None:
    """Seven ranks logged the end of CUDA-graph capture; TP3 never did and went quiet
    50 s before the last of their end lines."""
    ranks = [_in_phase(tp, last_s=60, ended=True) for tp in range(8) if tp != 3]
    ranks.insert(3, _in_phase(3, last_s=10, ended=False))
    assert stragglers(ranks) == (RankId(tp=3),)
    # within seconds of the others (an excerpt cut between their end lines): no claim
    ranks[3] = _in_phase(3, last_s=55, ended=False)
    assert stragglers(ranks) == ()


def test_a_notice_marks_the_log_phase_not_the_rank_position() -> None:
    """A generated catalogue entry (a notice: one rank's warning on the way through a
    phase) is no part of its rank's timeline: TP1's early notice does not make it a rank
    at launch beside TP0's markers, and a notice-only rank has no position."""
    tp1 = RankId(tp=1)
    notice = Event("x.log", 2, T0, tp1, "launch", "progress", "src.note", "m", {})
    events = [
        ev(0, "launch", rank=TP0, line=1),
        notice,
        ev(400, "kv_cache", rank=TP0, line=3),
    ]
    stats = {r: RankStats(T0, T0 + dt.timedelta(seconds=400), 5) for r in (TP0, tp1)}
    ranks, _ = build_timelines(events, stats, T0 + dt.timedelta(seconds=400), {"src.note"})
    by = {t.rank: t for t in ranks}
    assert by[tp1].last_phase is None and by[tp1].phases == ()
    assert by[TP0].last_phase == "kv_cache"
    assert stragglers(ranks) == ()
    # the same line as a position marker does make TP1 a rank at launch, behind TP0
    ranks, _ = build_timelines(events, stats, T0 + dt.timedelta(seconds=400), ())
    assert {t.rank: t.last_phase for t in ranks}[tp1] == "launch"


def test_a_serving_notice_of_a_rank_is_server_wide() -> None:
    notice = Event("x.log", 9, T0, TP0, "serving", "progress", "src.note", "m", {})
    ranks, glob = build_timelines([ev(0, "warmup", line=1), notice], {}, T0, {"src.note"})
    assert [p.phase for p in glob] == ["serving"]
    assert ranks[0].last_phase == "serving"  # the server-wide phase every rank completed


def test_the_generated_catalogue_is_loaded_as_notices() -> None:
    from diag.phases import load_catalogue, notice_patterns

    cat = load_catalogue()
    generated = [e for e in cat.entries if e.id.startswith("src.")]
    assert len(generated) > 100
    # hand-written notices, each with its reason: SGLang's multimodal processor import
    # warning is printed by the tokenizer manager (and the scheduler's copy) once per
    # module, not by a rank passing a step
    hand_notices = {"sglang.mm_processor_import"}
    assert {e.id for e in generated} | hand_notices == set(notice_patterns())
    assert all(e.position for e in cat.entries
               if not e.id.startswith("src.") and e.id not in hand_notices)
    # the hand-written entries come first (the first entry that matches wins)
    first_generated = next(i for i, e in enumerate(cat.entries) if e.id.startswith("src."))
    assert all(e.id.startswith("src.") for e in cat.entries[first_generated:])
