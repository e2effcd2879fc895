"""Events -> per-rank timelines: phase intervals, last phase, silence, stragglers, missing.

Pure functions over model objects; no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from diag.limits import MAX_EXPECTED_RANKS
from diag.model import (
    Event,
    PhaseInterval,
    RankId,
    RankTimeline,
    ShardProgress,
    phase_index,
)

__all__ = [
    "SWAPS",
    "RankStats",
    "advance",
    "behind_in_phase",
    "build_intervals",
    "build_timelines",
    "expected_ranks",
    "missing_ranks",
    "ordered",
    "reached_phase",
    "reaching_event",
    "shard_progress",
    "stragglers",
    "with_server_phases",
]


@dataclass(frozen=True, slots=True)
class RankStats:
    """What the timeline needs from all of a rank's lines (not only its events)."""

    first_ts: dt.datetime | None
    last_ts: dt.datetime | None
    lines: int
    inferred: bool = False


def _order_key(e: Event) -> tuple[int, dt.datetime, str, int]:
    return (0 if e.ts is not None else 1, e.ts or dt.datetime.min, e.source, e.line)


# Phases the frameworks run out of vocabulary order (LABELS.md lists phases in the order
# most versions run them): vLLM's API server resolves the model config before its workers
# initialise torch.distributed (vllm/entrypoints/openai/api_server.py, then
# vllm/v1/executor/multiproc_executor.py), so the workers' dist init is where a V1 start
# that stops there got to. (vLLM V1 also runs torch.compile inside the memory profile
# that sizes the KV cache, but the corpus labels, by LABELS.md's order, take compile as
# the further phase when both are shown: that pair is not swapped.)
SWAPS: frozenset[tuple[str, str]] = frozenset({("model_config", "dist_init")})


def advance(current: str | None, phase: str, seen: Iterable[str] = ()) -> str | None:
    """The phase reached after an event of ``phase`` when ``current`` was reached before.

    Forward in vocabulary order always; backward only for a known reordering of
    :data:`SWAPS` while nothing beyond ``current`` has been seen (``seen``: the phases of
    the events so far)."""
    if current is None or phase_index(phase) > phase_index(current):
        return phase
    if (current, phase) in SWAPS:
        top = max((phase_index(p) for p in seen), default=-1)
        if top <= phase_index(current):
            return phase
    return current


def ordered(events: Iterable[Event]) -> list[Event]:
    """Events in the order they happened: file order within a source; sources merged by
    time (an event with no timestamp takes the time of the event before it in its file)."""
    per: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        per[e.source].append(e)
    if len(per) <= 1:
        return sorted((e for evs in per.values() for e in evs), key=lambda e: e.line)
    keyed: list[tuple[dt.datetime, int, int, Event]] = []
    for si, (_src, evs) in enumerate(per.items()):
        last = dt.datetime.min
        for e in sorted(evs, key=lambda e: e.line):
            if e.ts is not None:
                last = e.ts.replace(tzinfo=None)
            keyed.append((last, si, e.line, e))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


# Catalogue entries whose phase is the one LABELS.md gives the message, logged by some
# versions before steps of earlier phases: vLLM V0's attention-backend choice
# (attention/selector.py, 0.4-0.6) is logged when the worker's model runner is constructed,
# before the executor's init_device (dist init) and load_model. While such an event is the
# one that set the phase reached, a later event of an earlier phase (but past the phase
# before it) is where the run got to.
# (vllm.attention_backend too: V0 0.7-0.8 logs the choice from the platform module, cuda.py
# or rocm.py, when the worker's ModelRunner is built, before init_device's dist init; V1
# while the model is built, after it). A failed first CUDA initialisation after such an event
# (torch.cuda_init_failed, a launch mark) is such a later event: the worker never got its
# device, so it never built its model.
PROVISIONAL: frozenset[str] = frozenset(
    {"vllm.attention_backend_v0_worker", "vllm.attention_backend"}
)
# custom all-reduce's "Registering N cuda graph addresses" closes any graph_capture()
# context: right after vLLM 0.20+'s graph-memory profiling (KV sizing), it is that
# profiling's, not a capture (vllm/v1/worker/gpu_model_runner.py profile_cudagraph_memory)
_GRAPH_MEMORY_PROFILE = re.compile(r"^(?:Profiling|Estimated) CUDA graph memory")


def reached_phase(events: Iterable[Event]) -> str | None:
    """The phase reached, following the order of events (:func:`advance`, and
    :data:`PROVISIONAL`)."""
    return reaching_event(events)[0]


def reaching_event(events: Iterable[Event]) -> tuple[str | None, Event | None]:
    """:func:`reached_phase` and the event that set it (the last one that changed the
    phase reached: the line that proves it; None when no event did)."""
    current: str | None = None
    setter: Event | None = None
    seen: set[str] = set()
    before: str | None = None  # the phase before a provisional event set ``current``
    provisional = False
    profiled = False  # the last event was the graph-memory profiling of KV sizing
    for e in ordered(events):
        if e.pattern == "vllm.graph_buffers_registered" and profiled:
            continue
        profiled = e.pattern == "vllm.kv_profiling" and bool(
            _GRAPH_MEMORY_PROFILE.match(e.message.strip())
        )
        if (
            provisional
            and current is not None
            and phase_index(e.phase) < phase_index(current)
            and (before is None or phase_index(e.phase) > phase_index(before))
        ):
            current, provisional, setter = e.phase, False, e
        else:
            nxt = advance(current, e.phase, seen)
            if nxt != current:
                provisional = e.pattern in PROVISIONAL
                if provisional:
                    before = current
                current, setter = nxt, e
            elif e.phase == current and e.pattern not in PROVISIONAL:
                if provisional:
                    setter = e
                provisional = False  # another line proves the phase itself
        seen.add(e.phase)
    return current, setter


def build_intervals(events: Sequence[Event]) -> tuple[PhaseInterval, ...]:
    """Phase intervals of one rank (or of the rank-less lines), in phase order.

    A phase starts at its first event. It ends at its explicit end marker when one was
    seen (``ended``), else where the next phase begins; the furthest phase without an end
    marker stays open (``end`` None)."""
    if not events:
        return ()
    firsts: dict[str, Event] = {}
    lasts: dict[str, Event] = {}
    ends: dict[str, Event] = {}
    for e in sorted(events, key=_order_key):
        firsts.setdefault(e.phase, e)
        lasts[e.phase] = e
        if e.kind == "end":
            ends[e.phase] = e
    order = sorted(firsts, key=phase_index)
    out: list[PhaseInterval] = []
    for i, phase in enumerate(order):
        first = firsts[phase]
        end_ev = ends.get(phase)
        end: dt.datetime | None
        if end_ev is not None:
            end = end_ev.ts
        else:
            later = [t for p in order[i + 1 :] if (t := firsts[p].ts) is not None]
            end = min(later) if later else None
            if end is not None and first.ts is not None and end < first.ts:
                end = first.ts
        out.append(
            PhaseInterval(
                phase=phase,
                start=first.ts,
                end=end,
                first_line=first.line,
                last_line=lasts[phase].line,
                source=first.source,
                ended=end_ev is not None,
            )
        )
    return tuple(out)


def shard_progress(events: Iterable[Event]) -> ShardProgress | None:
    """The latest shard progress (k/n, s/it) among weight-loading bar events."""
    best: ShardProgress | None = None
    for e in events:
        f = e.fields
        if "done" not in f or "total" not in f:
            continue
        done, total = f["done"], f["total"]
        if not isinstance(done, float) or not isinstance(total, float):
            continue
        rate: float | None = None
        r = f.get("rate")
        if isinstance(r, float) and r > 0:
            rate = r if f.get("unit") == "s/it" else 1.0 / r
        elapsed: float | None = None
        el = f.get("elapsed")
        if isinstance(el, str):
            parts = [int(x) for x in el.split(":") if x.isdigit()]
            secs = 0
            for x in parts:
                secs = secs * 60 + x
            elapsed = float(secs)
        best = ShardProgress(
            done=int(done), total=int(total), rate_s_per_it=rate, elapsed_s=elapsed
        )
    return best


def build_timelines(
    events: Sequence[Event],
    stats: Mapping[RankId, RankStats],
    log_end: dt.datetime | None,
    notices: Collection[str] | None = None,
) -> tuple[tuple[RankTimeline, ...], tuple[PhaseInterval, ...]]:
    """(per-rank timelines sorted by rank, phases of rank-less lines).

    ``notices``: ids of catalogue entries that are notices, not position markers (by
    default the built-in catalogue's, :func:`diag.phases.notice_patterns`). A notice a
    rank printed is no part of that rank's timeline: SGLang and vLLM print most of them
    from one rank or from the front end, so a rank's one early warning would make it a
    rank that stopped at ``launch`` beside peers whose markers went on. A notice counts
    for the phase the log reached (the caller's :func:`reached_phase` over all events),
    and a rank-less one, or one of a server-wide phase, for the rank-less phases."""
    if notices is None:
        from diag.phases import notice_patterns

        notices = notice_patterns()
    by_rank: dict[RankId, list[Event]] = defaultdict(list)
    glob: list[Event] = []
    for e in events:
        if e.rank is None or (e.pattern in notices and e.phase in SERVER_WIDE):
            glob.append(e)
        elif e.pattern not in notices:
            by_rank[e.rank].append(e)
    ranks = set(by_rank) | set(stats)
    glob_intervals = build_intervals(glob)
    out: list[RankTimeline] = []
    for rank in sorted(ranks, key=lambda r: r.sort_key):
        evs = by_rank.get(rank, [])
        st = stats.get(rank)
        last_ts = st.last_ts if st else None
        ev_ts = [e.ts for e in evs if e.ts is not None]
        if ev_ts and (last_ts is None or max(ev_ts) > last_ts):
            last_ts = max(ev_ts)
        silent = None
        if log_end is not None and last_ts is not None:
            silent = max(0.0, (log_end - last_ts).total_seconds())
        phases = with_server_phases(build_intervals(evs), glob_intervals)
        reached = reached_phase(evs)
        for p in phases:
            if p.scope == "server" and phase_index(p.phase) > phase_index(reached):
                reached = p.phase
        out.append(
            RankTimeline(
                rank=rank,
                phases=phases,
                reached=reached,
                last_ts=last_ts,
                silent_s=silent,
                shards=shard_progress(e for e in evs if e.phase == "weights_load"),
                line_count=st.lines if st else len(evs),
                inferred=st.inferred if st else False,
            )
        )
    return tuple(out), glob_intervals


SERVER_WIDE = ("listening", "serving")


def with_server_phases(
    own: tuple[PhaseInterval, ...], server: Sequence[PhaseInterval]
) -> tuple[PhaseInterval, ...]:
    """A rank's own phases, plus the server-wide ``listening``/``serving`` phases it has
    not logged itself (``scope="server"``).

    Both frameworks open the HTTP port only after every rank reported ready (vLLM's
    engine core waits for all workers' handshakes, SGLang's launcher for every
    scheduler), so a port the rank-less API server opened is a phase each rank completed,
    though only the API server logs it."""
    have = {p.phase for p in own}
    extra = tuple(
        replace(p, scope="server")
        for p in server
        if p.phase in SERVER_WIDE and p.phase not in have
    )
    if not extra:
        return own
    return tuple(sorted(own + extra, key=lambda p: phase_index(p.phase)))


BEHIND_MIN_S = 120.0  # a rank behind in phase must also have been quiet this long
QUIET_MIN_S = 300.0  # a rank in the same phase counts as stuck when quiet this much longer
# a rank that never logged the end of the phase its peers ended: its last line came at
# least this long before the last of their end lines
IN_PHASE_MIN_S = 20.0


def stragglers(
    timelines: Sequence[RankTimeline], server_up: bool = False
) -> tuple[RankId, ...]:
    """Ranks that fell behind the others.

    Either its last phase is earlier than the one most ranks reached (the plurality; on a
    tie the furthest of the tied phases) while the others
    kept logging for at least :data:`BEHIND_MIN_S` after it went quiet, or it is in the
    same phase but went quiet :data:`QUIET_MIN_S` before another rank's last line. Where
    timestamps are missing the phase alone decides.

    With ``server_up`` (the server listened or served) a rank whose last phase ended with
    its own end marker finished its startup: SGLang logs serving lines from TP0 only, so
    the other ranks going quiet then is normal."""
    known = [t for t in timelines if t.last_phase is not None]
    if len(known) < 2:
        return ()
    counts = Counter(phase_index(t.last_phase) for t in known)
    top = max(counts.values())
    # the majority phase; on a tie the furthest of the tied phases
    majority = max(i for i, c in counts.items() if c == top)
    spread = top == 1 and len(known) > 2  # every rank elsewhere: no "the others"
    silences = [t.silent_s for t in known if t.silent_s is not None]
    floor = min(silences) if silences else None
    out: list[RankId] = []
    for t in known:
        if server_up and _finished(t):
            continue
        idx = phase_index(t.last_phase)
        quiet = None if (t.silent_s is None or floor is None) else t.silent_s - floor
        if idx < majority and not spread:
            if quiet is None or quiet >= BEHIND_MIN_S:
                out.append(t.rank)
        elif (quiet is not None and quiet >= QUIET_MIN_S and idx <= majority) or (
            idx == majority and behind_in_phase(t, known)
        ):
            out.append(t.rank)
    return tuple(out)


def _interval(t: RankTimeline, phase: str | None) -> PhaseInterval | None:
    ivs = [p for p in t.phases if p.phase == phase and p.scope == "rank"]
    return ivs[-1] if ivs else None


def behind_in_phase(t: RankTimeline, timelines: Sequence[RankTimeline]) -> bool:
    """The rank is inside its last phase, which most of the ranks in that phase ended with
    an end marker (seven ranks logged "Capture cuda graph end", this one did not), and its
    last line came at least :data:`IN_PHASE_MIN_S` before the last of their end lines.
    Without timestamps nothing is claimed (an excerpt cut between the ranks' end lines
    looks the same)."""
    own = _interval(t, t.last_phase)
    if own is None or own.ended or t.last_ts is None:
        return False
    peers = [o for o in timelines if o.rank != t.rank and o.last_phase == t.last_phase]
    ended = [iv for o in peers if (iv := _interval(o, t.last_phase)) is not None and iv.ended]
    if not ended or len(ended) * 2 < len(peers) + 1:
        return False
    ends = [iv.end for iv in ended if iv.end is not None]
    if not ends:
        return False
    return (max(ends) - t.last_ts).total_seconds() >= IN_PHASE_MIN_S


def _finished(t: RankTimeline) -> bool:
    last = max(t.phases, key=lambda p: phase_index(p.phase), default=None)
    return last is not None and (last.ended or phase_index(last.phase) >= phase_index("warmup"))


def expected_ranks(
    config: Mapping[str, object], seen: Sequence[RankId] = (), framework: str = "sglang"
) -> tuple[RankId, ...]:
    """Ranks the layout implies: tp x pp, restricted to one node's slice when the config
    names the node (multi-node logs hold one node each). SGLang's TP ranks are global (with
    DP attention each DP replica is a slice of them); vLLM's are per DP replica, so there
    the layout is dp x pp x tp."""
    tp = config.get("tp")
    pp = config.get("pp")
    dp = config.get("dp")
    tp_n = tp if isinstance(tp, int) and tp > 0 else None
    pp_n = pp if isinstance(pp, int) and pp > 0 else 1
    dp_n = dp if isinstance(dp, int) and dp > 0 else 1
    if tp_n is None:
        return ()
    if tp_n * pp_n * dp_n > MAX_EXPECTED_RANKS:  # (hardening: a size from the log)
        return ()
    if framework == "vllm" and dp_n > 1:
        return tuple(
            RankId(dp=d, pp=p if pp_n > 1 else None, tp=t)
            for d in range(dp_n)
            for p in range(pp_n)
            for t in range(tp_n)
        )
    tps = list(range(tp_n))
    nnodes = config.get("nnodes")
    node_rank = config.get("node_rank")
    if isinstance(nnodes, int) and nnodes > 1 and isinstance(node_rank, int) and tp_n % nnodes == 0:
        per = tp_n // nnodes
        mine = set(range(node_rank * per, (node_rank + 1) * per))
        if not any(r.tp is not None and r.tp not in mine for r in seen):
            tps = sorted(mine)
    out = [
        RankId(pp=p if pp_n > 1 else None, tp=t) for p in range(pp_n) for t in tps
    ]
    return tuple(out)


def missing_ranks(expected: Sequence[RankId], seen: Sequence[RankId]) -> tuple[RankId, ...]:
    """Expected ranks no line was attributed to (matched on tp, and on dp and pp where the
    expected rank has them)."""
    if not seen:
        return ()
    keys: set[tuple[int | None, int | None, int | None]] = set()
    for r in seen:
        for d in {r.dp, None}:
            for p in {r.pp, None}:
                keys.add((d, p, r.tp))
    return tuple(r for r in expected if (r.dp, r.pp, r.tp) not in keys)
