"""Facts every rendering of an analysis needs: ranks collapsed, durations, ordering.

Pure functions over the model; the terminal, Markdown and Perfetto reporters share them
so that the three views say the same thing in the same words.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from diag.model import (
    PHASES,
    SEVERITIES,
    Analysis,
    Finding,
    PhaseInterval,
    RankTimeline,
    ShardProgress,
    StackFrame,
    phase_index,
)

__all__ = [
    "LAYOUT_KEYS",
    "collapse_ranks",
    "fmt_duration",
    "frame_label",
    "fmt_time",
    "layout",
    "log_span",
    "member_label",
    "model_name",
    "not_fired",
    "PhaseStats",
    "phase_order",
    "phase_stats",
    "shown_source",
    "silence_alert",
    "sorted_findings",
    "stall_min_s",
    "time_span",
    "weights_progress",
    "weights_summary",
]

# config keys that name the parallel layout, as (label, keys tried in order)
LAYOUT_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tp", ("tp_size", "tensor_parallel_size", "tp")),
    ("pp", ("pp_size", "pipeline_parallel_size", "pp")),
    ("dp", ("dp_size", "data_parallel_size", "dp")),
    ("ep", ("ep_size", "expert_parallel_size", "ep")),
    ("nodes", ("nnodes", "num_nodes", "nodes")),
)


def fmt_duration(seconds: float | None) -> str:
    """A short human duration: 0.4 s, 34 s, 3 min 05 s, 3 h 12 min, 2 d 4 h."""
    if seconds is None:
        return "?"
    if seconds < 0:
        seconds = 0.0
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    total = round(seconds)
    if total < 3600:
        return f"{total // 60} min {total % 60:02d} s"
    if total < 86400:
        return f"{total // 3600} h {total % 3600 // 60:02d} min"
    return f"{total // 86400} d {total % 86400 // 3600} h"


def fmt_time(ts: dt.datetime | None, *, date: bool = False) -> str:
    if ts is None:
        return "-"
    return ts.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def collapse_ranks(ranks: Sequence[str], all_ranks: Sequence[str], *, limit: int = 8) -> str:
    """ "all 8 ranks" when the list covers every rank seen, else "TP3, TP6" (capped)."""
    wanted = list(dict.fromkeys(ranks))
    if not wanted:
        return ""
    universe = set(all_ranks)
    if len(universe) > 1 and universe <= set(wanted):
        extra = [r for r in wanted if r not in universe]
        head = f"all {len(universe)} ranks"
        return head if not extra else f"{head}, {', '.join(extra)}"
    if len(wanted) <= limit:
        return ", ".join(wanted)
    return f"{', '.join(wanted[:limit])} (+{len(wanted) - limit} more)"


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; root causes before their cascades."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    indexed = list(enumerate(findings))
    indexed.sort(key=lambda t: (order.get(t[1].severity, len(order)), t[1].role != "root", t[0]))
    return [f for _, f in indexed]


def not_fired(analysis: Analysis) -> list[str]:
    """Rules that were checked and did not fire, in the order they were checked."""
    fired = {f.id for f in analysis.findings}
    return [r for r in dict.fromkeys(analysis.rules_checked) if r not in fired]


def time_span(analysis: Analysis) -> tuple[dt.datetime | None, dt.datetime | None]:
    """First and last time stamp of the timeline (phase starts, last lines, log end)."""
    stamps: list[dt.datetime] = []
    for r in analysis.ranks:
        for p in r.phases:
            stamps.extend(t for t in (p.start, p.end) if t is not None)
        if r.last_ts is not None:
            stamps.append(r.last_ts)
    for p in analysis.global_phases:
        stamps.extend(t for t in (p.start, p.end) if t is not None)
    if analysis.log_end is not None:
        stamps.append(analysis.log_end)
    if not stamps:
        return None, None
    try:
        return min(stamps), max(stamps)
    except TypeError:  # naive and aware stamps mixed: compare as naive
        naive = [s.replace(tzinfo=None) for s in stamps]
        return min(naive), max(naive)


def log_span(analysis: Analysis) -> tuple[dt.datetime | None, dt.datetime | None, str]:
    """The log's first and last time stamp, and what they are: ``"first to last time
    stamp"`` (any line's), or, for an analysis that does not carry its first time stamp
    (read back from an older ``analysis.json``), the timeline's span, ``"first to last
    phase event"``."""
    start, end = analysis.log_start, analysis.log_end
    if start is not None and end is not None:
        return start, end, "first to last time stamp"
    t0, t1 = time_span(analysis)
    return t0, t1, "first to last phase event"


def shown_source(name: str, cwd: str | None = None) -> str:
    """A source's name as a public report shows it: an absolute path relative to the
    current directory (``cwd``) when under it, else its file name (an archive's member
    keeps its path in the archive: ``hang.tar.gz:logs/rank0.log``); a relative name or
    ``<stdin>`` as given. The reporter's home and host layout stay out of the report."""
    if not os.path.isabs(name):
        return name
    prefix = os.path.join(cwd if cwd is not None else os.getcwd(), "")
    if name.startswith(prefix) and len(name) > len(prefix):
        return name[len(prefix):]
    head, sep, member = name.partition(":")
    return os.path.basename(head) + sep + member


def stall_min_s() -> float:
    """Seconds of silence that prove a stall by themselves: the built-in
    ``startup.stalled`` rule's ``min_gap_s``, read from the rule, so that the views colour
    red exactly the silence the rule would report (one threshold, in the rule file)."""
    from diag.errors import RuleError
    from diag.rules.loader import builtin_rules

    for rule in builtin_rules():
        if rule.id == "startup.stalled" and "min_gap_s" in rule.params:
            return float(rule.params["min_gap_s"])  # type: ignore[arg-type]
    raise RuleError("the built-in rule startup.stalled has no min_gap_s")


def silence_alert(rank: RankTimeline, analysis: Analysis | None = None) -> bool:
    """A rank that never reached ``listening`` and whose silence is a finding: long enough
    by itself (:func:`stall_min_s`), or any length once ``startup.stalled`` fired on other
    grounds (a live snapshot found the ranks stuck). Red in the terminal, ``crit`` in the
    Markdown gantt."""
    if rank.silent_s is None or phase_index(rank.last_phase) >= phase_index("listening"):
        return False
    if rank.silent_s >= stall_min_s():
        return True
    stalled = analysis is not None and any(f.id == "startup.stalled" for f in analysis.findings)
    return stalled and rank.silent_s >= 1


def layout(config: Mapping[str, object]) -> list[tuple[str, object]]:
    """The parallel layout named in the config: [("tp", 8), ("pp", 1), ...]."""
    out: list[tuple[str, object]] = []
    for label, keys in LAYOUT_KEYS:
        for key in keys:
            value = config.get(key)
            if value is not None:
                out.append((label, value))
                break
    return out


def model_name(config: Mapping[str, object]) -> str | None:
    for key in ("model_path", "model", "served_model_name"):
        value = config.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def phase_order(rank: RankTimeline) -> list[str]:
    """Phase ids of one rank in startup order (for logs without time stamps)."""
    seen = {p.phase for p in rank.phases}
    known = [p for p in PHASES if p in seen]
    unknown = sorted(p for p in seen if phase_index(p) < 0)
    return known + unknown


def frame_label(frame: StackFrame) -> str:
    """``name (file.py:123)``; the line left out when unknown, the folder always."""
    where = frame.filename.rsplit("/", 1)[-1] if frame.filename else ""
    if not where:
        return frame.name
    return (
        f"{frame.name} ({where}:{frame.line})"
        if frame.line is not None
        else (f"{frame.name} ({where})")
    )


def member_label(member: str) -> str:
    """A stack-group member as shown: a rank label, ``pid N``, or a short source."""
    if "/" in member:
        return member.rsplit("/", 1)[-1]
    return member


def weights_progress(analysis: Analysis) -> list[tuple[str, ShardProgress]]:
    """Shard progress per rank, or of the rank-less progress bar when no rank has one."""
    per_rank = [(r.rank.label, r.shards) for r in analysis.ranks if r.shards is not None]
    if per_rank:
        return [(label, s) for label, s in per_rank if s is not None]
    from diag.timeline import shard_progress

    bar = shard_progress(e for e in analysis.events if e.phase == "weights_load" and e.rank is None)
    return [("no rank", bar)] if bar is not None else []


def _shards_text(s: ShardProgress) -> str:
    text = f"{s.done}/{s.total} shards"
    if s.elapsed_s is not None:
        text += f" in {fmt_duration(s.elapsed_s)}"
    if s.rate_s_per_it is not None:
        rate = s.rate_s_per_it
        text += f" ({rate:.2f} s/shard)" if rate >= 0.1 else f" ({1 / rate:.1f} shards/s)"
    if not s.complete:
        text += ", not finished"
    return text


def weights_summary(analysis: Analysis) -> str | None:
    """One line on weight loading: "64/64 shards in 34 s (0.53 s/shard)" and whose."""
    progress = weights_progress(analysis)
    if not progress:
        return None
    texts = {label: _shards_text(s) for label, s in progress}
    distinct = set(texts.values())
    if len(distinct) == 1:
        (only,) = distinct
        labels = list(texts)
        if labels == ["no rank"]:
            return f"{only} (progress bar with no rank prefix)"
        return f"{only} ({collapse_ranks(labels, [r.rank.label for r in analysis.ranks])})"
    return "; ".join(f"{label}: {text}" for label, text in list(texts.items())[:8])


@dataclass(frozen=True, slots=True)
class PhaseStats:
    """One phase across the ranks: when it began and ended, how long it took."""

    phase: str
    ranks: int  # ranks that went through it (0: only lines of no rank)
    start: dt.datetime | None  # earliest start
    end: dt.datetime | None  # latest end
    open_ranks: int  # ranks still in it when their log ends (no end seen)
    median_s: float | None
    min_s: float | None
    max_s: float | None
    slowest: str | None  # the rank well above the median, if one is


def phase_stats(analysis: Analysis) -> list[PhaseStats]:
    """Per phase, in startup order: span over the ranks and duration spread."""
    by_phase: dict[str, list[tuple[str, PhaseInterval]]] = {}
    for r in analysis.ranks:
        for p in r.phases:
            by_phase.setdefault(p.phase, []).append((r.rank.label, p))
    for p in analysis.global_phases:
        by_phase.setdefault(p.phase, [])
    out = []
    for phase in sorted(by_phase, key=lambda ph: (phase_index(ph) < 0, phase_index(ph), ph)):
        items = by_phase[phase]
        intervals = [p for _, p in items] or [p for p in analysis.global_phases if p.phase == phase]
        starts = [p.start for p in intervals if p.start is not None]
        ends = [p.end for p in intervals if p.end is not None]
        durations = [(label, p.duration_s) for label, p in items if p.duration_s is not None]
        values = [d for _, d in durations if d is not None]
        median = statistics.median(values) if values else None
        slowest = None
        if len(values) > 1 and median is not None:
            label, worst = max(durations, key=lambda t: t[1] or 0.0)
            if worst is not None and worst > max(1.5 * median, median + 5.0):
                slowest = label
        out.append(
            PhaseStats(
                phase=phase,
                ranks=len({label for label, _ in items}),
                start=min(starts) if starts else None,
                end=max(ends) if ends else None,
                open_ranks=sum(1 for _, p in items if p.end is None),
                median_s=median,
                min_s=min(values) if values else None,
                max_s=max(values) if values else None,
                slowest=slowest,
            )
        )
    return out
