"""The data model of diag: every noun the engine passes around.

Each class is a frozen, slotted dataclass; derived facts are properties. Parsers,
the timeline builder, the rules engine and the live collector all speak in these
types, and every reporter renders them. ``event_schema()`` gives the polars schema of
the event table, kept in step with :class:`Event` by a test.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "PHASES",
    "SEVERITIES",
    "STACK_SITES",
    "Analysis",
    "Combined",
    "Evidence",
    "Event",
    "EventKind",
    "Finding",
    "GpuSample",
    "LiveRank",
    "PhaseInterval",
    "ProcessInfo",
    "RankId",
    "RankTimeline",
    "Record",
    "Severity",
    "ShardProgress",
    "Snapshot",
    "StackFrame",
    "StackGroup",
    "StackProcess",
    "StackThread",
    "Unavailable",
    "event_schema",
    "phase_index",
]

# Startup phases in order (ids of shared/corpus/LABELS.md).
PHASES: tuple[str, ...] = (
    "launch",
    "platform",
    "dist_init",
    "model_config",
    "weights_load",
    "kv_cache",
    "compile",
    "cuda_graph",
    "warmup",
    "listening",
    "serving",
)

STACK_SITES: tuple[str, ...] = (
    "stack.nccl_collective",
    "stack.dist_init",
    "stack.cuda_sync",
    "stack.cuda_graph_capture",
    "stack.jit_compile",
    "stack.weights_io",
    "stack.ipc_wait",
    "stack.idle_loop",
    "stack.gil_or_lock",
)

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
EventKind = Literal["begin", "progress", "end", "mark"]


def phase_index(phase: str | None) -> int:
    """Position of a phase in startup order; -1 for None or an unknown id."""
    try:
        return PHASES.index(phase) if phase is not None else -1
    except ValueError:
        return -1


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A fact that could not be read, and why (never a silent None)."""

    reason: str

    def __bool__(self) -> bool:
        return False


# ---------------------------------------------------------------------------
# Logs: records, events, timeline


@dataclass(frozen=True, slots=True, order=True)
class RankId:
    """Coordinates of one rank. Any subset may be known; ``node`` is the node rank or
    host (multi-node), ``None`` where the log does not say."""

    node: str | None = None
    dp: int | None = None
    pp: int | None = None
    tp: int | None = None
    ep: int | None = None

    @property
    def label(self) -> str:
        parts = []
        if self.node is not None:
            parts.append(f"node{self.node}" if self.node.isdigit() else self.node)
        for name in ("dp", "pp", "tp", "ep"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name.upper()}{value}")
        return " ".join(parts) or "?"

    @property
    def sort_key(self) -> tuple[str, int, int, int, int]:
        return (
            self.node or "",
            -1 if self.dp is None else self.dp,
            -1 if self.pp is None else self.pp,
            -1 if self.tp is None else self.tp,
            -1 if self.ep is None else self.ep,
        )

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, slots=True)
class Record:
    """One logical log line (plus the continuation lines attached to it).

    ``rank`` is ``None`` for lines of no rank (launcher, API server, progress bars
    with no prefix); ``rank_reason`` says how a rank was attributed ("tag" when the
    line names it, otherwise the inference used)."""

    source: str
    line: int
    message: str
    raw: str = ""
    ts: dt.datetime | None = None
    rank: RankId | None = None
    rank_reason: str | None = None
    process: str | None = None
    pid: int | None = None
    host: str | None = None
    level: str | None = None
    logger_file: str | None = None
    grammar: str = "plain"
    continuation: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The message with its continuation lines, as one string."""
        if not self.continuation:
            return self.message
        return "\n".join((self.message, *self.continuation))


@dataclass(frozen=True, slots=True)
class Event:
    """A record recognised by the phase catalogue."""

    source: str
    line: int
    ts: dt.datetime | None
    rank: RankId | None
    phase: str
    kind: EventKind
    pattern: str
    message: str
    fields: Mapping[str, str | float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShardProgress:
    done: int
    total: int
    rate_s_per_it: float | None = None
    elapsed_s: float | None = None

    @property
    def complete(self) -> bool:
        return self.total > 0 and self.done >= self.total


@dataclass(frozen=True, slots=True)
class PhaseInterval:
    phase: str
    start: dt.datetime | None
    end: dt.datetime | None
    first_line: int
    last_line: int
    source: str = ""
    ended: bool = False  # an explicit end marker was seen (not just the next phase)
    # "rank": the rank logged it; "server": a server-wide phase (the API server listened,
    # the engine served) that the rank completed by being part of a server that got there
    scope: str = "rank"

    @property
    def duration_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, (self.end - self.start).total_seconds())


@dataclass(frozen=True, slots=True)
class RankTimeline:
    rank: RankId
    phases: tuple[PhaseInterval, ...]
    last_ts: dt.datetime | None
    silent_s: float | None
    shards: ShardProgress | None = None
    line_count: int = 0
    inferred: bool = False  # the rank was never tagged in the log, only inferred
    # the phase reached in the order the events happened (diag.timeline.reached_phase);
    # None: the furthest phase in vocabulary order
    reached: str | None = None

    @property
    def last_phase(self) -> str | None:
        if self.reached is not None:
            return self.reached
        best = max(self.phases, key=lambda p: phase_index(p.phase), default=None)
        return best.phase if best else None


@dataclass(frozen=True, slots=True)
class Evidence:
    source: str
    line: int
    text: str
    rank: str | None = None
    ts: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    severity: Severity
    title: str
    message: str
    role: Literal["root", "cascade"] = "root"
    cascade_of: str | None = None
    ranks: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    evidence_total: int = 0
    summary: str = ""
    why: str = ""
    remedy: str = ""
    caveat: str = ""
    references: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# Stacks (py-spy JSON, py-spy text, faulthandler) and the live snapshot


@dataclass(frozen=True, slots=True)
class StackFrame:
    name: str
    filename: str = ""
    line: int | None = None
    module: str | None = None
    native: bool = False
    # a traceback's innermost frame: the source line printed under it, the call that raised
    call: str | None = None

    @property
    def label(self) -> str:
        where = self.filename.rsplit("/", 1)[-1] if self.filename else ""
        return f"{self.name} ({where}:{self.line})" if where else self.name


@dataclass(frozen=True, slots=True)
class StackThread:
    """One thread; ``frames`` innermost first, as py-spy prints them."""

    thread_id: int | None
    name: str | None
    frames: tuple[StackFrame, ...]
    idle: bool | None = None
    owns_gil: bool | None = None
    os_state: str | None = None  # from /proc/<pid>/task/<tid>/stat when known
    wchan: str | None = None
    # the thread a faulthandler dump names `Current thread` (or its one `Stack`): where a
    # fatal signal was delivered
    current: bool = False
    # the dump left out frames outside those shown (faulthandler's `  ...` after 100 frames,
    # a reporter's `...`): what the thread runs, main thread or helper, is not in sight
    elided: bool = False


@dataclass(frozen=True, slots=True)
class StackProcess:
    """Stacks of one process: from a live py-spy dump or a dump found in a log."""

    pid: int | None
    title: str | None
    threads: tuple[StackThread, ...]
    wait_site: str | None = None
    wait_thread: int | None = None  # thread_id the wait site was read from
    rank: RankId | None = None
    outcome: str = "ok"  # ok | timeout | permission_denied | not_found | partial | no_pyspy
    mode: str | None = None  # native | python | nonblocking | text | faulthandler
    error: str | None = None
    source: str | None = None
    line: int | None = None
    samples: int = 1
    moving: bool | None = None  # stack changed between samples (slow, not stuck)


@dataclass(frozen=True, slots=True)
class StackGroup:
    """Ranks whose (main-thread) stacks are identical: one equivalence class."""

    wait_site: str | None
    members: tuple[str, ...]  # rank labels, or "pid N" where no rank is known
    frames: tuple[StackFrame, ...]
    pids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    name: str | Unavailable
    uuid: str | Unavailable
    util_percent_mean: float | Unavailable
    util_percent_max: float | Unavailable
    memory_used_bytes: int | Unavailable
    memory_total_bytes: int | Unavailable
    samples: int = 0
    # pid -> GPU memory bytes
    processes: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    ppid: int | None
    # launcher | api_server | tokenizer | scheduler | worker | detokenizer | engine_core | other
    role: str
    title: str
    cmdline: tuple[str, ...]
    framework: str | None
    rank: RankId | None
    rank_source: str | None  # "title" | "env" | None (unknown)
    state: str | Unavailable
    rss_bytes: int | Unavailable
    cpu_percent: float | Unavailable
    threads: int | Unavailable
    listening_ports: tuple[int, ...] | Unavailable
    create_time: float | None = None
    children: tuple[int, ...] = ()
    gpu_index: int | None = None
    gpu_memory_bytes: int | None = None
    wchan: str | Unavailable | None = None
    stack: StackProcess | None = None
    # live collector extras (diag snapshot)
    uptime_s: float | None = None
    syscall: str | Unavailable | None = None
    thread_states: Mapping[str, int] = field(default_factory=dict)  # "S" -> count
    thread_names: Mapping[str, int] = field(default_factory=dict)  # comm -> count
    env: Mapping[str, str] = field(default_factory=dict)  # RANK, CUDA_VISIBLE_DEVICES, ...
    stopped_before: bool = False  # state T before diag came (left as it was)
    resumed: bool = False  # a dump left it stopped and diag sent SIGCONT
    dump_attempts: tuple[Mapping[str, object], ...] = ()
    native_peer: int | None = None  # pid whose --native dump stands for this one
    server: int | None = None  # index into Snapshot.servers


@dataclass(frozen=True, slots=True)
class Snapshot:
    host: str
    taken_at: dt.datetime
    processes: tuple[ProcessInfo, ...]
    gpus: tuple[GpuSample, ...] | Unavailable
    servers: tuple[Mapping[str, object], ...] = ()
    groups: tuple[StackGroup, ...] = ()
    outlier_tp_ranks: tuple[int, ...] = ()
    verdict: str = ""
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    elapsed_s: float | None = None
    # who-is-missing evidence (NCCL RAS, Flight Recorder), side by side with the stacks
    collective_evidence: tuple[Mapping[str, object], ...] = ()
    partial: tuple[str, ...] = ()  # why collection was partial (exit code 3), with the fix
    timings: Mapping[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# The result of `diag analyze`


@dataclass(frozen=True, slots=True)
class Analysis:
    sources: tuple[str, ...]
    framework: str  # sglang | vllm | unknown
    version: str | None
    config: Mapping[str, object]
    ranks: tuple[RankTimeline, ...]
    expected_ranks: tuple[RankId, ...]
    missing_ranks: tuple[RankId, ...]
    stragglers: tuple[RankId, ...]
    log_end: dt.datetime | None
    records: int
    events: tuple[Event, ...] = ()
    global_phases: tuple[PhaseInterval, ...] = ()  # phases seen on lines of no rank
    stack_processes: tuple[StackProcess, ...] = ()
    stack_groups: tuple[StackGroup, ...] = ()
    findings: tuple[Finding, ...] = ()
    rules_checked: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    undecodable_bytes: int = 0
    reached: str | None = None  # the phase reached in event order (diag.timeline)
    log_start: dt.datetime | None = None  # the log's first time stamp (log_end: its last)

    @property
    def last_phase(self) -> str | None:
        """The furthest phase any rank (or any rank-less line) reached."""
        if self.reached is not None:
            return self.reached
        candidates = [r.last_phase for r in self.ranks]
        candidates += [p.phase for p in self.global_phases]
        known = [p for p in candidates if p is not None]
        return max(known, key=phase_index, default=None)


# ---------------------------------------------------------------------------
# One view of a case: the log's analysis joined with a live snapshot of its server


@dataclass(frozen=True, slots=True)
class LiveRank:
    """A rank (or process) of the server as the snapshot saw it, beside its log timeline."""

    label: str  # rank label ("TP3") or the role for rank-less processes ("launcher")
    pid: int
    role: str
    state: str | None
    rss_bytes: int | None
    cpu_percent: float | None
    gpu_index: int | None
    gpu_memory_bytes: int | None
    gpu_util_percent: float | None
    wait_site: str | None
    top_frames: str
    moving: bool | None  # stack changed between samples (slow, not stuck); None: unknown
    outlier: bool  # an odd one out within its own server
    in_log: bool  # the log has a timeline for this rank


@dataclass(frozen=True, slots=True)
class Combined:
    """``diag analyze BUNDLE``: the log analysis and the snapshot of the same server.

    ``analysis`` is already merged (snapshot findings joined, the silence measured to the
    snapshot's time, stack groups from the snapshot when the log had none); the rest is
    what only the snapshot knows. ``snapshot`` holds only the log's server."""

    analysis: Analysis
    snapshot: Snapshot | None = None
    live: tuple[LiveRank, ...] = ()
    verdict: str = ""
    taken_at: dt.datetime | None = None  # the snapshot's time, on the log's clock
    stall_s: float | None = None  # taken_at minus the log's last line
    stall_proven: bool = False
    log_finding_ids: tuple[str, ...] = ()  # findings the log alone gave
    notes: tuple[str, ...] = ()  # how the two were joined (clock, server choice)
    environment: Mapping[str, object] = field(default_factory=dict)  # a bundle's env.json


def event_schema() -> dict[str, object]:
    """The polars schema of the event table (one row per :class:`Event`, fields aside).

    Built on call so that importing the model does not import polars."""
    import polars as pl

    return {
        "source": pl.Utf8,
        "line": pl.Int64,
        "ts": pl.Datetime("us"),
        "rank": pl.Utf8,
        "phase": pl.Utf8,
        "kind": pl.Utf8,
        "pattern": pl.Utf8,
        "message": pl.Utf8,
    }
