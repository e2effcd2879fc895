"""Named aggregate checks: what a rule cannot say from one line.

A YAML rule names one of these with ``check: <name>``; it gets a :class:`CheckContext`
(the analysis, the records, the rule's own pattern hits if it has a ``match``, the
findings fired so far and the rule's ``params``) and returns a :class:`CheckOutcome` or
None. Checks run in the order of :data:`CHECKS`, so a later check can see an earlier one
(``no_listen_port`` sees ``startup.stalled``; ``stalled`` sees every error).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from diag.frames import FRAME, frame_phase
from diag.limits import ascii_int
from diag.model import (
    Analysis,
    Event,
    Evidence,
    Finding,
    RankId,
    RankTimeline,
    Record,
    Severity,
    phase_index,
)
from diag.parse.grammars import is_exception_line
from diag.rules import specdec
from diag.timeline import behind_in_phase

__all__ = [
    "CHECKS",
    "NOT_AN_EXPLANATION",
    "CheckContext",
    "CheckOutcome",
    "Hit",
    "StallFacts",
    "Progress",
    "fmt_duration",
    "parse_progress",
    "stall_facts",
]


@dataclass(frozen=True, slots=True)
class Hit:
    """One line a rule pattern matched (or a check chose as evidence)."""

    source: str
    line: int
    text: str
    rank: RankId | None = None
    ts: dt.datetime | None = None
    groups: Mapping[str, str] = field(default_factory=dict)
    level: str | None = None

    def evidence(self) -> Evidence:
        return Evidence(
            source=self.source,
            line=self.line,
            text=self.text[:400],
            rank=self.rank.label if self.rank is not None else None,
            ts=self.ts,
        )

    @classmethod
    def of(cls, rec: Record) -> Hit:
        return cls(rec.source, rec.line, rec.message.strip(), rec.rank, rec.ts, {}, rec.level)

    @classmethod
    def at(cls, rec: Record, i: int, text: str) -> Hit:
        """Line ``i`` of ``rec`` (0: its message, then its continuation lines), ``text``."""
        return cls(rec.source, rec.line + i, text.strip(), rec.rank, rec.ts, {}, rec.level)


@dataclass(frozen=True, slots=True)
class CheckContext:
    analysis: Analysis
    records: Sequence[Record]
    hits: tuple[Hit, ...]
    fired: Mapping[str, Finding]
    params: Mapping[str, object]

    def param(self, name: str, default: float) -> float:
        value = self.params.get(name, default)
        return float(value) if isinstance(value, (int, float)) else default


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    message: str
    hits: tuple[Hit, ...] = ()
    ranks: tuple[str, ...] = ()
    severity: Severity | None = None  # overrides the rule's severity when set


# Findings that do not explain a stop: they describe it or are side facts.
NOT_AN_EXPLANATION = frozenset(
    {
        "startup.stalled",
        "startup.no_listen_port",
        "rank.missing",
        "rank.straggler",
        "dist.init_hang",
        "weights.slow_load",
        "specdec.low_acceptance",
    }
)


def fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, sec = divmod(s, 60)
        return f"{m} min {sec} s" if sec and m < 10 else f"{m} min"
    h, rem = divmod(s, 3600)
    return f"{h} h {rem // 60} min"


def _hms(ts: dt.datetime | None) -> str:
    return ts.strftime("%H:%M:%S") if ts is not None else "?"


# ---------------------------------------------------------------------------
# progress bars (tqdm) and the end of the log

_BAR = regex.compile(
    r"(?P<label>[A-Za-z][^|:\n]{0,80}?)?:?\s*(?:\d{1,3}%\s*(?:Completed\s*)?\|[^|\n]*?\|?\s*)?"
    r"(?P<done>\d+)/(?P<total>\d+)\s*\[(?P<elapsed>[\d:]+)<(?P<left>[^,\]]*),\s*"
    r"(?P<rate>[\d.]+|\?)\s*(?P<unit>s/it|it/s)"
)
# (speed, and the same answer whatever the machine's load) _BAR read in two steps: its
# counts ("3/8 [00:12<00:20, 2.50s/it]"), found left to right, then, in the text between
# the count before and this one, the label and bar right before it, read backwards from
# the count (the label as long as it can be, up to 81 characters starting with a letter:
# where _BAR's leftmost match starts). _BAR itself tried its lazy 81-character label at
# every position of a line: about 50 ms on a line of 2,000 characters, which its 50 ms
# timeout cut or not depending on the load. _BAR stays as the reference of the tests.
_BAR_COUNT = regex.compile(
    r"(?P<done>\d+)/(?P<total>\d+)\s*\[(?P<elapsed>[\d:]+)<(?P<left>[^,\]]*),\s*"
    r"(?P<rate>[\d.]+|\?)\s*(?P<unit>s/it|it/s)"
)
_BAR_HEAD = regex.compile(
    r"(?r)(?P<label>[A-Za-z][^|:\n]{0,80})?:?\s*(?:\d{1,3}%\s*(?:Completed\s*)?\|[^|\n]*?\|?\s*)?\Z"
)
_BAR_HEAD_CHARS = 4096  # of the text before a count, read for its label


class _BarUpdate:
    """One bar update: _BAR's groups (``group(name)``, as a match's)."""

    __slots__ = ("_count", "_label")

    def __init__(self, label: str | None, count: regex.Match[str]) -> None:
        self._label = label
        self._count = count

    def group(self, name: str) -> Any:  # (as regex.Match.group: str, or None when unset)
        return self._label if name == "label" else self._count.group(name)


def bar_updates(text: str) -> tuple[_BarUpdate, ...]:
    """The bar updates of ``text``, as ``_BAR.finditer`` finds them (in linear time).
    Raises TimeoutError past 50 ms (hostile input only)."""
    out = []
    prev = 0
    for m in _BAR_COUNT.finditer(text, timeout=0.05):
        head = _BAR_HEAD.search(text, max(prev, m.start() - _BAR_HEAD_CHARS), m.start(),
                                timeout=0.05)
        out.append(_BarUpdate(head.group("label") if head else None, m))
        prev = m.end()
    return tuple(out)


_SCAN_CAP = 1 << 16  # checks read at most this much of one message


@dataclass(frozen=True, slots=True)
class Progress:
    source: str
    line: int
    label: str
    done: int
    total: int
    elapsed_s: float | None
    s_per_it: float | None
    rec: Record

    @property
    def is_shards(self) -> bool:
        low = self.label.lower()
        return "shard" in low or "checkpoint" in low


def _clock(text: str) -> float | None:
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        return None
    total = 0
    for p in parts:
        total = total * 60 + p
    return float(total)


_BAR_MEMO_CHARS = 1000  # messages up to this long have their bars remembered


@functools.lru_cache(maxsize=1 << 12)
def _bar_matches(text: str) -> tuple[_BarUpdate, ...]:
    """The bar updates of a message, () when the search timed out; remembered for a
    message that recurs (the same bar line from each rank, from each check)."""
    try:
        return bar_updates(text)
    except TimeoutError:
        return ()


def parse_progress(rec: Record) -> list[Progress]:
    """Every tqdm update in a record (bars glued together are separate updates)."""
    text = rec.message[:_SCAN_CAP]
    if "it]" not in text and "/it" not in text and "it/s" not in text:
        return []
    out: list[Progress] = []
    if len(text) <= _BAR_MEMO_CHARS:
        matches: Sequence[_BarUpdate] = _bar_matches(text)
    else:
        try:
            matches = bar_updates(text)
        except TimeoutError:
            return []
    for m in matches:
        progress = _progress(m, rec)
        if progress is not None:
            out.append(progress)
    return out


def _progress(m: _BarUpdate, rec: Record) -> Progress | None:
    """One bar's update; None for a garbled one ("..14it/s" where two ranks wrote at
    once, a count of 5000 digits): hardening, not a crash."""
    rate = m.group("rate")
    s_per_it: float | None = None
    if rate != "?":
        try:
            value = float(rate)
        except ValueError:
            return None
        if m.group("unit") == "s/it":
            s_per_it = value
        elif value > 0:
            s_per_it = 1.0 / value
    done, total = m.group("done"), m.group("total")
    if len(done) > 18 or len(total) > 18:
        return None
    return Progress(
        source=rec.source,
        line=rec.line,
        label=(m.group("label") or "").strip(),
        done=int(done),
        total=int(total),
        elapsed_s=_clock(m.group("elapsed")),
        s_per_it=s_per_it,
        rec=rec,
    )


def _last_line(analysis: Analysis, records: Sequence[Record], source: str) -> int:
    lines = [r.line for r in records if r.source == source]
    lines += [e.line for e in analysis.events if e.source == source]
    return max(lines, default=0)


def _error_explains(fired: Mapping[str, Finding]) -> list[Finding]:
    return [f for f in fired.values() if f.severity == "error" and f.id not in NOT_AN_EXPLANATION]


# ---------------------------------------------------------------------------
# startup stalls: a claim needs a reason (shared/corpus/LABELS.md, "startup.stalled needs
# a reason to believe the startup stopped")

# Wait and heartbeat messages: a process saying it still waits. Repeated with nothing else
# between, they are evidence of a stop; they are not progress, so silence is measured
# from the last line that is not one of them.
_WAITS = regex.compile(
    r"No available shared memory broadcast block found in \d+ seconds?"  # vllm shm_broadcast.py
    # vllm/v1/engine/core_client.py (0.8), vllm/v1/engine/utils.py (0.10+)
    r"|Waiting for \d+ (?:local, \d+ remote )?core engine proc\(s\) to start"
    r"|Waiting for (?:creating a )?placement group"  # vllm/executor/ray_utils.py
    r"|Waiting in store based barrier to initialize process group"  # torch distributed_c10d.py
    r"|Waiting for output from MQLLMEngine"  # vllm/engine/multiprocessing/client.py (0.6)
    r"|Please wait for (?:sglang|vllm) server to become ready"  # clients polling the port
    r"|[Ww]aiting for (?:the )?(?:server|engine|workers?|model|all (?:ranks|workers))"
    r"\b[^.]{0,80}(?:to (?:start|be ready|become ready|come up)|ready)"
    r"|^(?:Still )?[Ww]aiting (?:for|on) .{0,120}(?:\.\.\.|seconds?|elapsed|\(\d+/\d+\))\s*$"
    r"|Connection refused.{0,40}[Rr]etry"
)
# A line that starts a step that ends with another line (the step never ended when the
# log stops on it). Catalogue events of kind "begin" count too.
_STEP_START = regex.compile(
    r"^(?:Connecting to |Trying to connect to )"
    r"|(?:flashinfer\.jit: )?Loading JIT ops: |JIT[- ]compil(?:ing|e)\b"
    r"|\b[Cc]ompiling (?!a graph for \w+ shape takes)"
    r"|Start compiling function|Building (?:CUDA )?extension|ninja: "
    r"|- Init START\b"  # NCCL ncclCommInitRank... Init START
    r"|generating GPU P2P access cache in"  # vllm custom_all_reduce_utils.py
    # vllm parallel_state.py (init_distributed_environment)
    r"|world_size=\d+ rank=\d+ local_rank=\d+ (?:distributed_init_method=|backend=)"
    r"|Loading nccl from library|(?:vLLM|sglang) is using nccl=="  # pynccl.py, before comm init
    r"|(?:Capture (?:cuda|npu) graph|Load weight|Init torch distributed|Init parallel) begin"
    r"|Starting to load model |Memory profiling(?! takes| results)"
    r"|Capturing (?:CUDA graphs|batches|the model for CUDA graphs|cudagraphs for decoding)"
    r"|Entering DeepGEMM JIT Pre-Compile|Running FlashInfer autotune|DeepGEMM warmup"
    # vllm (v1/)executor/ray_utils.py initialize_ray_cluster (0.8.5-0.34.0): the group is
    # created, then _wait_until_pg_ready blocks until Ray grants its GPUs
    r"|No current placement group found\. Creating a new placement group"
)
_INTERRUPT = regex.compile(r"^\s*(?:\S+\s+)?KeyboardInterrupt\b|^\s*\^C\s*$")
# Wait messages that state how long they have waited so far (a measured wait, as a later
# timestamp would measure a silence): vllm/executor/ray_utils.py _wait_until_pg_ready
# (0.5.5-0.11.0, and v1/executor/ray_utils.py) logs "Waiting for creating a placement group
# of specs for %d seconds" with int(time.time() - s), the time since the group was asked
# for, backing off 10, 30, 70, 150 ... s while Ray cannot place it
_WAITED = regex.compile(r"Waiting for creating a placement group of specs for (?P<s>\d+) seconds")


def _is_wait(rec: Record) -> bool:
    text = rec.message[:2000]
    try:
        return _WAITS.search(text, timeout=0.05) is not None
    except TimeoutError:
        return False


def _is_trace(rec: Record) -> bool:
    """Traceback material: a traceback record, a frame line, a traceback header."""
    if rec.grammar == "traceback":
        return True
    msg = rec.message.lstrip()
    return msg.startswith(("Traceback (most recent", 'File "')) or FRAME.search(msg) is not None


def _completed(last: Record, tail: Sequence[Record]) -> Record:
    """The log's last line, completed when the excerpt cut it mid-text and another rank
    printed the same message whole just before (``Compiling a graph for dynamic shape ta``
    is TP0's ``... takes 3.38 s``, a step that ended, not one that began)."""
    text = last.message.strip()
    if len(text) < 16:
        return last
    for r in reversed(tail[-64:-1]):
        m = r.message.strip()
        if len(m) > len(text) and m.startswith(text) and r.rank != last.rank:
            return r
    return last


def _cut_mid_word(last: Record, tail: Sequence[Record]) -> bool:
    """The log's last line stops inside a word that an earlier line of the same text
    carries whole (``...dtype_o_bf`` after ``...dtype_o_bf16_...``): the excerpt was cut
    there, so the file's end is the paste's edge, not where the log stopped."""
    text = last.message.strip()
    if len(text) < 16 or not text[-1].isalnum():
        return False
    for r in reversed(tail[-64:-1]):
        m = r.message.strip()
        if len(m) > len(text) and m.startswith(text) and m[len(text)].isalnum():
            return True
    return False



def _advanced_before(begin: Event, events: Sequence[Event], bars: Sequence[Progress]) -> bool:
    """The step the last line begins had already advanced earlier in the file: a progress
    bar of its phase part-way (past 0, short of the end) above it, and no end of the phase
    anywhere. The file is not in time order there (Ray's deduplicator prints the workers'
    repeated lines late, after the bars the driver already showed), so the begin line is
    not where the log stopped."""
    mine = [e for e in events if e.source == begin.source and e.phase == begin.phase]
    if any(e.kind == "end" for e in mine):
        return False
    above = {e.line for e in mine if e.kind == "progress" and e.line < begin.line}
    return any(p.line in above and 0 < p.done < p.total for p in bars)


def _burst_cut(begin: Event, tail: Sequence[Record], events: Sequence[Event]) -> bool:
    """The last line begins a step on one rank while another rank, logging in the same
    second, has not begun it as often yet: the ranks were printing the step's lines
    together and the excerpt stopped part-way through that burst (SGLang's TP ranks log
    ``Capture cuda graph begin`` within a second of each other), so the file's end is the
    paste's edge. A rank that had begun the step too leaves the begin line as the stall's
    reason."""
    if begin.rank is None or begin.ts is None:
        return False
    behind: list[RankId] = []
    seen: set[RankId] = set()
    for r in reversed(tail):
        if r.rank is None or r.rank in seen or r.rank == begin.rank or r.ts is None:
            continue
        seen.add(r.rank)
        if 0 <= (begin.ts - r.ts).total_seconds() <= 1:
            behind.append(r.rank)
    if not behind:
        return False
    count: dict[RankId | None, int] = {}
    for e in events:
        if e.source == begin.source and e.pattern == begin.pattern:
            count[e.rank] = count.get(e.rank, 0) + 1
    mine = count.get(begin.rank, 0)
    return any(count.get(rank, 0) < mine for rank in behind)


def _is_step_start(rec: Record) -> bool:
    text = rec.message[:2000]
    try:
        return _STEP_START.search(text, timeout=0.05) is not None
    except TimeoutError:
        return False


@dataclass(frozen=True, slots=True)
class StallFacts:
    phase: str | None  # furthest phase any rank reached
    by_phase: Mapping[str, tuple[RankTimeline, ...]]
    last_ts: dt.datetime | None  # last timestamp of any line that is not a wait
    gap_s: float | None  # log end minus last_ts (silence while the log went on)
    hits: tuple[Hit, ...]
    # why the startup is believed stopped; None: nothing shows it (a cut excerpt)
    reason: str | None = None
    reason_hits: tuple[Hit, ...] = ()
    ends_after: str = ""  # what the log's last line is (for the cut-excerpt note)
    ends_hit: Hit | None = None  # that line


def _rank_hit(analysis: Analysis, rank: RankTimeline, records: Sequence[Record]) -> Hit | None:
    """The last line of a rank: from its records, else from its last phase interval."""
    mine = [r for r in records if r.rank == rank.rank]
    if mine:
        return Hit.of(max(mine, key=lambda r: (r.source, r.line)))
    ivs = [iv for iv in rank.phases if iv.phase == rank.last_phase]
    if ivs:
        iv = ivs[-1]
        evs = [
            e
            for e in analysis.events
            if e.rank == rank.rank and e.source == iv.source and e.line == iv.last_line
        ]
        text = evs[0].message if evs else f"(last line of {iv.phase})"
        return Hit(iv.source, iv.last_line, text, rank.rank, iv.end or iv.start)
    return None


def _engine_ready(ranks: Sequence[RankTimeline]) -> bool:
    """Every rank finished CUDA-graph capture (an explicit end marker): the engine's own
    startup is complete, and a missing HTTP server is someone else's (an embedding such as
    TorchServe, or a log of the engine alone)."""
    if not ranks:
        return False
    for r in ranks:
        ivs = [iv for iv in r.phases if iv.phase == "cuda_graph"]
        if r.last_phase != "cuda_graph" or not ivs or not ivs[-1].ended:
            return False
    return True


def _meaningful(rec: Record) -> bool:
    """A record with text: not blank, not only a rule or a caret marker, unless lines are
    attached to it (a window that starts on a traceback's caret line under a vLLM prefix
    holds the frames below it as continuation lines)."""
    msg = rec.message.strip()
    if bool(msg) and bool(msg.strip("^~-=|*#. ")):
        return True
    return any(c.strip().strip("^~-=|*#. ") for c in rec.continuation)


def _tail_of(records: Sequence[Record]) -> list[Record]:
    """The records of the source that ends the input, in file order, blank lines left out."""
    if not records:
        return []
    last_source = records[-1].source
    return [r for r in records if r.source == last_source and _meaningful(r)]


def _bar_state(bars: Sequence[Progress]) -> str:
    """'advancing', 'zero' (the last update is at 0), 'frozen' (the last updates repeat one
    count while the clock runs) or 'done' (100%)."""
    last = bars[-1]
    if last.total > 0 and last.done >= last.total:
        return "done"
    if last.done == 0:
        return "zero"
    same = [p for p in bars if p.label == last.label and p.total == last.total]
    if len(same) >= 2:
        prev = same[-2]
        if (
            prev.done == last.done
            and prev.elapsed_s is not None
            and last.elapsed_s is not None
            and last.elapsed_s - prev.elapsed_s >= 30
        ):
            return "frozen"
    return "advancing"


# a reporter's note under a pasted log that the process stopped making progress
_HANG_NOTE = regex.compile(
    r"\b(?:no (?:more )?(?:response|output|progress|logs?)\b|not responding|nothing (?:happens|"
    r"else|more)\b|(?:hangs?|hanging|hung|stuck|freez(?:e|es|ing)|frozen)\b(?! (?:check|detect|"
    r"monitor|timeout))|waits? forever|waiting forever)",
    regex.I,
)


def _hang_note(tail: Sequence[Record]) -> Record | None:
    """The last line when it is a reporter's short prose note that the run hung: no log
    format, no time, no level, not a frame or an exception, not indented."""
    last = next((r for r in reversed(tail) if r.message.strip()), None)
    if last is None or last.continuation or last.grammar != "plain":
        return None  # (a time may be a wrapper's stamp on the reporter's line)
    text = last.message
    if last.level is not None:
        return None  # (a pid or a process may be a wrapper's: journald, compose)
    if text[:1].isspace() or len(text.strip()) > 160 or _is_trace(last):
        return None
    if is_exception_line(text.strip()) or ":" in text.strip()[:40]:
        return None  # `Error: ...`, `RuntimeError: ...`, a `key: value` line
    return last if _HANG_NOTE.search(text) else None


# At most this many lines after a 0% bar still leave it the log's last step: notices the
# step's first iteration triggered before tqdm redrew the bar (an import's warning)
_AFTER_ZERO_BAR = 8
_ERROR_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL", "EXCEPTION"})
# a line saying a step finished ("Finished loading JIT ops", "... takes 1.18 s", "done"):
# the log then ends after a finished step, a cut excerpt by the convention
_STEP_DONE = regex.compile(
    r"\b(?:[Ff]inished|[Dd]one|[Cc]ompleted|[Ss]ucceeded)\b"
    r"|\b(?:took|takes|elapsed)\b:? ?=?[\d.]+ ?(?:s|ms|sec|seconds?|min)\b"
)


def _quiet_after_bar(
    bar: Progress,
    tail: Sequence[Record],
    event_of: Callable[[Record], Event | None],
) -> list[Record]:
    """The lines after a progress bar at 0% when they are only notices: no other bar, no
    phase event, no step begun or finished, no error or traceback, no line the excerpt
    cut (the start of a line printed whole before: a bar's redraw, a repeated message).
    A few such lines (a warning of an import the step's first iteration triggered) do not
    end the bar's step, which then is the log's last. Empty when anything after the bar
    may be progress (or nothing follows it)."""
    idx = next((i for i, r in enumerate(tail) if r is bar.rec), None)
    if idx is None:
        return []
    after = tail[idx + 1:]
    if not after or len(after) > _AFTER_ZERO_BAR:
        return []
    earlier = [r.message.strip() for r in tail[max(0, idx - 64):idx + 1]]
    for r in after:
        text = r.message.strip()
        if parse_progress(r) or _is_trace(r) or r.continuation or event_of(r) is not None:
            return []
        if (r.level or "").upper() in _ERROR_LEVELS or is_exception_line(text):
            return []
        if _is_step_start(r) or _is_wait(r) or _STEP_DONE.search(text[:2000]) is not None:
            return []
        if any(len(m) > len(text) and m.startswith(text) for m in earlier):
            return []  # cut by the excerpt: what it would have said is unknown
        earlier.append(text)
    return list(after)


def _cut_wait(last: Record, tail: Sequence[Record]) -> bool:
    """The excerpt's last line is a wait line it cut (``Waiting for 1 loca``): the start of
    a wait message the log printed before, at least 16 characters of it."""
    text = last.message.strip()
    if len(text) < 16 or last.continuation:
        return False
    return any(
        r is not last and _is_wait(r) and r.message.strip().startswith(text)
        for r in tail[-40:]
    )


_GAVE_UP_S = 5.0  # the run's end lines follow the last wait within this (the wait's reaction)


def _wait_then_end(
    tail: Sequence[Record], event_of: Callable[[Record], Event | None], min_gap: float
) -> tuple[Record, Record, float] | None:
    """The last run of two or more wait messages with nothing but each other between, that
    lasted ``min_gap`` or longer (first to last time stamp), after which the source holds
    only lines within :data:`_GAVE_UP_S` of the last wait and no step marker: (its first
    wait, its last, its span in seconds), or None."""
    waits = [i for i, r in enumerate(tail) if _is_wait(r)]
    if len(waits) < 2:
        return None
    end = waits[-1]
    start = end
    while start - 1 >= 0 and _is_wait(tail[start - 1]):
        start -= 1
    first, last = tail[start], tail[end]
    if end - start < 1 or first.ts is None or last.ts is None:
        return None
    span = (last.ts - first.ts).total_seconds()
    if span < min_gap:
        return None
    after = tail[end + 1:]
    if not after:
        return None  # the log ends on the wait: reasons 3 and 3b
    for r in after:
        if event_of(r) is not None or parse_progress(r):
            return None  # the start-up went on after the wait
        if r.ts is not None and abs((r.ts - last.ts).total_seconds()) > _GAVE_UP_S:
            return None
    return first, last, span


def _stall_reason(
    analysis: Analysis, records: Sequence[Record], min_gap: float
) -> tuple[str | None, tuple[Hit, ...], str, dt.datetime | None, float | None]:
    """(reason, its lines, what the log ends after, last activity time, silence)."""
    tail = _tail_of(records)
    by_line = {(e.source, e.line): e for e in analysis.events}

    def event_of(rec: Record) -> Event | None:
        # the event of that record: several records share a physical line where a paste
        # lost its newlines (an event is keyed by its line, so its message must agree)
        ev = by_line.get((rec.source, rec.line))
        return ev if ev is not None and ev.message == rec.message[:500] else None
    # 1. silence, from the last line with a timestamp that is not a wait, to the log end
    active = [r for r in records if r.ts is not None and not _is_wait(r)]
    last_active = max(active, key=lambda r: r.ts or dt.datetime.min, default=None)
    last_ts = last_active.ts if last_active is not None else None
    if last_ts is None and not any(r.ts is not None for r in records):
        # no line of the input has a time (a timeline given without its lines)
        last_ts = max((r.last_ts for r in analysis.ranks if r.last_ts is not None), default=None)
    gap: float | None = None
    if last_ts is not None and analysis.log_end is not None:
        gap = max(0.0, (analysis.log_end - last_ts).total_seconds())
    if last_ts is not None and gap is not None and gap >= min_gap:
        later = [r for r in records if r.ts is not None and r.ts == analysis.log_end]
        return (
            f"then 0 lines from any rank or process for {fmt_duration(gap)} while the log went "
            f"on to {_hms(analysis.log_end)}",
            tuple(Hit.of(r) for r in (last_active, *later[-1:]) if r is not None),
            "",
            last_ts,
            gap,
        )
    if not tail:
        return None, (), "", last_ts, gap
    # 2. interrupted by hand while it waited
    for r in tail[-12:]:
        if any(_INTERRUPT.match(x) for x in (r.message, *r.continuation[-3:])) and (
            phase_index(analysis.last_phase) < phase_index("listening")
        ):
            return (
                "then the run was interrupted by hand (KeyboardInterrupt) with no progress "
                "logged since",
                (Hit.of(r),),
                "",
                last_ts,
                gap,
            )
    # 2b. the paste ends on its reporter's own words that it hung ("....and no response
    #     anymore", "(stuck here)"): the thread's account, written into the text
    note = _hang_note(tail)
    if note is not None and phase_index(analysis.last_phase) < phase_index("listening"):
        before = [r for r in tail if r is not note and r.message.strip()]
        return (
            f"then the reporter's own note that it stopped ({note.message.strip()[:120]})",
            tuple(Hit.of(r) for r in (*before[-1:], note)),
            "",
            last_ts,
            gap,
        )
    # 3. a wait message repeating at the end with nothing else between
    waits: list[Record] = []
    for r in reversed(tail):
        if _is_wait(r) or (r is tail[-1] and _cut_wait(r, tail)):
            waits.append(r)
        elif parse_progress(r) or r.message.strip():
            break
    if len(waits) >= 2:
        waits.reverse()
        return (
            f"then only a wait message, {len(waits)} times with no progress between "
            f"({waits[-1].message.strip()[:120]})",
            tuple(Hit.of(r) for r in (waits[0], waits[-1])),
            "",
            last_ts,
            gap,
        )
    # 3b. the log ends on a wait message that says it has waited min_gap or longer
    waited = _WAITED.search(waits[0].message[:2000]) if waits else None
    if waited is not None and int(waited.group("s")) >= min_gap:
        return (
            f"then a wait message that had waited {fmt_duration(int(waited.group('s')))} "
            f"with no progress logged since ({waits[0].message.strip()[:120]})",
            (Hit.of(waits[0]),),
            "",
            last_ts,
            gap,
        )
    # 3c. a wait message repeating with no progress between for min_gap or longer, and then
    #     only the run's end in that same second: the wait gave up (vLLM's Ray placement
    #     group wait, executor/ray_utils.py _wait_until_pg_ready 0.5-0.11: "Waiting for
    #     creating a placement group of specs for N seconds" until "Cannot provide a
    #     placement group ... within 1800 seconds" and the executor's shutdown)
    gave_up = _wait_then_end(tail, event_of, min_gap)
    if gave_up is not None:
        first, last_wait, span = gave_up
        at = tail.index(first)
        prior_ts = [r.ts for r in tail[:at] if r.ts is not None]
        return (
            f"then only a wait message for {fmt_duration(span)} with no progress between "
            f"({last_wait.message.strip()[:120]}), and the run ended right after the last",
            (Hit.of(first), Hit.of(last_wait)),
            "",
            prior_ts[-1] if prior_ts else first.ts,  # the last activity: before the waits
            gap,
        )
    # 4. the last line starts a step that never ends (or a bar that does not move); a
    #    traceback that names no exception (cut, or a dump on Ctrl-C) is not that line
    last = next((r for r in reversed(tail) if not _is_wait(r) and not _is_trace(r)), tail[-1])
    bars = [p for r in tail for p in parse_progress(r)]
    if bars and bars[-1].line != last.line and _bar_state(bars) == "zero":
        after = _quiet_after_bar(bars[-1], tail, event_of)
        if after:
            bar = bars[-1]
            what = f"{bar.label or 'a progress bar'} at {bar.done}/{bar.total}"
            return (
                f"the log ends on {what} (0%: the step started and never advanced; only "
                f"{len(after)} notice{'s' if len(after) != 1 else ''} follow it, the last: "
                f"{after[-1].message.strip()[:100]})",
                (Hit.of(bar.rec),),
                what,
                last_ts,
                gap,
            )
    if bars and bars[-1].line == last.line:
        state = _bar_state(bars)
        bar = bars[-1]
        what = f"{bar.label or 'a progress bar'} at {bar.done}/{bar.total}"
        if state == "zero":
            return (f"the log ends on {what} (0%: the step started and never advanced)",
                    (Hit.of(last),), what, last_ts, gap)
        if state == "frozen":
            return (f"the log ends on {what}, frozen (the count stopped while its clock ran)",
                    (Hit.of(last),), what, last_ts, gap)
        return None, (), f"a progress bar that was still advancing ({what})", last_ts, gap
    ev = event_of(last)
    text = last.message.strip()[:160]
    whole = _completed(last, tail)
    newest = max((r.ts for r in tail if r.ts is not None), default=None)
    late = (
        last.ts is not None and newest is not None and (newest - last.ts).total_seconds() > 1
    )  # delivered late (Ray forwards workers' lines with their own, earlier, times)
    short = text if len(text) <= 80 else text[:77] + "..."
    if _cut_mid_word(last, tail):
        return None, (), f"a line the excerpt cut mid-word ({short})", last_ts, gap
    if ev is not None and ev.kind == "begin" and _advanced_before(ev, analysis.events, bars):
        return None, (), f"a step whose progress was printed before it ({short})", last_ts, gap
    if ev is not None and ev.kind == "begin" and _burst_cut(ev, tail, analysis.events):
        return None, (), f"a step another rank had not yet begun in that second ({short})", \
            last_ts, gap
    if not late and ((ev is not None and ev.kind == "begin") or _is_step_start(whole)):
        return (
            f"the log ends on a line that starts a step which never ends ({text})",
            (Hit.of(last),),
            text,
            last_ts,
            gap,
        )
    ends_step = ev is not None and (ev.kind == "end" or ev.phase == "warmup")
    # every rank's last line starts a step (the last line of the file is another's)
    rank_last: dict[RankId, Record] = {}
    for r in tail:
        if r.rank is not None:
            rank_last[r.rank] = r
    if not ends_step and len(rank_last) >= 2 and all(
        _is_step_start(r)
        or ((e := event_of(r)) is not None and e.kind == "begin")
        for r in rank_last.values()
    ):
        first = next(iter(rank_last.values()))
        return (
            f"each rank's last line starts a step which never ends ({first.message.strip()[:120]})",
            tuple(Hit.of(r) for r in rank_last.values()),
            text,
            last_ts,
            gap,
        )
    if ev is not None and ev.kind == "end":
        ends = f"the end of a step ({short})"
    elif ev is not None and ev.phase == "warmup":
        ends = f"the engine's ready summary ({short})"
    elif ev is not None:
        ends = f"a {ev.phase} line ({short})"
    else:
        ends = f"a line no step marker covers ({short})"
    return None, (), ends, last_ts, gap


# The names vLLM gives its own processes in its lines' prefix (vllm/v1/engine/utils.py,
# core.py, executor/multiproc_executor.py, executor/ray_utils.py, entrypoints/cli/serve.py:
# "(APIServer pid=1)", "(EngineCore_DP0 pid=..)", "(VllmWorker rank=0 pid=..)",
# "(Worker_TP1 pid=..)", "(RayWorkerWrapper pid=.., ip=..)").
_VLLM_PROCESS = regex.compile(
    r"(?:APIServer|ApiServer|EngineCore|EngineCoreProc|DPEngineCoreProc|VllmWorker"
    r"|VllmWorkerProcess|Worker|RayWorkerWrapper|DPCoordinator|VLLM::\w+)(?:[_-]\w+)?"
)


def _embedded_engine(analysis: Analysis, records: Sequence[Record]) -> bool:
    """vLLM's engine said it is ready ("init engine (profile, create kv cache, warmup
    model) took", vllm/v1/engine/core.py) from a process that is none of vLLM's own (a
    Ray actor of the program that runs it: OpenRLHF's LLMRayActor, an RL trainer's
    worker), or from vLLM's engine core under an offline ``LLM`` (:func:`_offline_front`),
    and no line of the log is vLLM's API server: an ``LLM`` instance inside another
    program, which opens no HTTP port. Its startup ended at warmup."""
    if analysis.framework != "vllm" or analysis.last_phase != "warmup":
        return False
    ready = {(e.source, e.line) for e in analysis.events if e.pattern == "vllm.init_engine_took"}
    if not ready:
        return False
    procs = {r.process for r in records if (r.source, r.line) in ready}
    if not procs or None in procs:
        return False
    if any(r.process is not None and r.process.lower().startswith("apiserver") for r in records):
        return False
    if any(_VLLM_PROCESS.fullmatch(p or "") for p in procs):
        return _offline_front(records, procs)
    return True


def _offline_front(records: Sequence[Record], procs: set[str | None]) -> bool:
    """vLLM's own engine-core process said it is ready, started by an offline ``LLM(...)``
    in the user's program: the front process's own vLLM lines (``Resolved architecture``,
    ``Using max model len``) come before the engine core's and carry no process prefix,
    and no line is the API server's (``vllm serve`` prefixes its lines "(APIServer pid=N)"
    since 0.10, and logs from api_server.py, "vLLM API server version ...", before)."""
    engine = [r.line for r in records if r.process in procs]
    if not engine:
        return False
    first = min(engine)
    front = False
    for r in records:
        if r.logger_file == "api_server.py":
            return False
        if r.process is None and r.grammar == "vllm" and r.line < first:
            front = True
    return front


def stall_facts(
    analysis: Analysis,
    records: Sequence[Record],
    fired: Mapping[str, Finding],
    min_gap: float = 60.0,
) -> StallFacts | None:
    """The log stops before `listening` with no error to explain it; None otherwise. The
    facts say whether anything shows the startup stopped (``reason``) or the excerpt may
    just have been cut there."""
    last = analysis.last_phase
    if last is not None and phase_index(last) >= phase_index("listening"):
        return None
    if _error_explains(fired):
        return None
    if not any(
        not e.pattern.startswith(("fallback.", "frames.", "raises.")) for e in analysis.events
    ) and not any(_is_wait(r) for r in records[-200:]):
        return None  # no startup line at all (a bare stack dump, a traceback): no claim
    if _embedded_engine(analysis, records):
        return None  # an engine inside another program: ready, and no port to open
    ranks = tuple(r for r in analysis.ranks if r.line_count > 0 or r.phases)
    by_phase: dict[str, list[RankTimeline]] = {}
    for r in ranks:
        by_phase.setdefault(r.last_phase or "launch", []).append(r)
    reason, reason_hits, ends_after, last_ts, gap = _stall_reason(analysis, records, min_gap)
    tail = _tail_of(records)
    ends_hit = None
    if tail:
        body = [r for r in tail if not _is_trace(r)] or tail
        ends_hit = Hit.of(body[-1])
    if _engine_ready(ranks) and reason is not None and gap is None:
        reason = None
    if _engine_ready(ranks) and not ends_after:
        ends_after = "every rank finished CUDA-graph capture"
    if last_ts is None:
        times = [r.last_ts for r in ranks if r.last_ts is not None]
        times = times or [e.ts for e in analysis.events if e.ts is not None]
        last_ts = max(times, default=None)
    hits: list[Hit] = []
    for r in sorted(ranks, key=lambda r: r.rank.sort_key):
        h = _rank_hit(analysis, r, records)
        if h is not None:
            hits.append(h)
    if not hits:
        evs = sorted(analysis.events, key=lambda e: (e.source, e.line))
        if evs:
            e = evs[-1]
            hits.append(Hit(e.source, e.line, e.message, e.rank, e.ts))
    return StallFacts(
        phase=last,
        by_phase={k: tuple(v) for k, v in by_phase.items()},
        last_ts=last_ts,
        gap_s=gap,
        hits=tuple(hits),
        reason=reason,
        reason_hits=reason_hits,
        ends_after=ends_after,
        ends_hit=ends_hit,
    )


def _all_ended(members: Sequence[RankTimeline], phase: str) -> bool:
    for r in members:
        ivs = [iv for iv in r.phases if iv.phase == phase]
        if not ivs or not ivs[-1].ended:
            return False
    return True


def _ranks_phrase(facts: StallFacts) -> str:
    total = sum(len(v) for v in facts.by_phase.values())
    if total == 0:
        return f"the log reached {facts.phase or 'no known phase'}"
    if len(facts.by_phase) == 1:
        phase, members = next(iter(facts.by_phase.items()))
        who = "the only rank" if total == 1 else f"every rank ({total})"
        return f"{who} {'finished' if _all_ended(members, phase) else 'reached'} {phase}"
    parts = []
    for phase in sorted(facts.by_phase, key=phase_index, reverse=True):
        members = facts.by_phase[phase]
        labels = ", ".join(r.rank.label for r in members[:4])
        if len(members) > 4:
            labels = f"{len(members)} ranks"
        parts.append(f"{phase} ({labels})")
    return "ranks stopped at " + "; ".join(parts)


def _check_stalled(ctx: CheckContext) -> CheckOutcome | None:
    facts = stall_facts(ctx.analysis, ctx.records, ctx.fired, ctx.param("min_gap_s", 60.0))
    if facts is None or facts.reason is None:
        return None
    head = _ranks_phrase(facts)
    when = f" at {_hms(facts.last_ts)}" if facts.last_ts else ""
    message = (
        f"{head}{when}; {facts.reason}; no rank reached listening, no port was opened, "
        "and no error explains the stop"
    )
    return CheckOutcome(message=message, hits=facts.reason_hits + facts.hits)


# CPython's multiprocessing resource tracker (Lib/multiprocessing/resource_tracker.py, 3.8+)
# warns at shutdown, once the processes that registered resources with it have exited,
# "resource_tracker: There appear to be %d leaked %s objects to clean up at shutdown"
_EXIT_NOTICE = regex.compile(
    r"resource_tracker: There appear to be \d+ leaked \w+ objects to clean up at shutdown"
)


def _exit_notice(records: Sequence[Record]) -> Record | None:
    """The interpreter's exit-time notice that ends the input (the first of the notices
    its last records are), or None: the run ended there, the excerpt was not cut."""
    tail = _tail_of(records)
    found: Record | None = None
    for r in reversed(tail[-8:]):
        if not _EXIT_NOTICE.search(r.message[:_SCAN_CAP]):
            break
        found = r
    return found


def _check_exited(ctx: CheckContext) -> CheckOutcome | None:
    """The log ends before `listening` with the interpreter's exit notice and no error:
    the process shut down, stopped from outside."""
    notice = _exit_notice(ctx.records)
    if notice is None:
        return None
    facts = stall_facts(ctx.analysis, ctx.records, ctx.fired, ctx.param("min_gap_s", 60.0))
    if facts is None:
        return None
    when = f" (last time stamp {_hms(facts.last_ts)})" if facts.last_ts else ""
    return CheckOutcome(
        message=(
            f"the log ends with Python's exit-time notice ('{notice.message[:160]}') after "
            f"{_ranks_phrase(facts)}{when}: the process shut down before the server "
            "listened, and the log shows no error that stopped it"
        ),
        hits=(Hit.of(notice),),
        ranks=tuple(t.rank.label for t in ctx.analysis.ranks),
    )


def _check_cut_excerpt(ctx: CheckContext) -> CheckOutcome | None:
    """The log ends before `listening` but nothing shows a stop: say where it ends (not
    where the interpreter's exit notice ends it: startup.exited)."""
    facts = stall_facts(ctx.analysis, ctx.records, ctx.fired, ctx.param("min_gap_s", 60.0))
    if facts is None or facts.reason is not None:
        return None
    if _exit_notice(ctx.records) is not None:
        return None
    when = f" at {_hms(facts.last_ts)}" if facts.last_ts else ""
    after = facts.ends_after or "its last line"
    message = (
        f"the log ends after {after}{when} ({_ranks_phrase(facts)}); not proven stalled: "
        "a later timestamp from any process, a wait message repeating with no progress, "
        "or a live `diag snapshot` would show whether startup went on"
    )
    return CheckOutcome(
        message=message,
        hits=(facts.ends_hit,) if facts.ends_hit is not None else facts.hits[-1:],
        ranks=tuple(t.rank.label for t in ctx.analysis.ranks),
    )


def _check_dist_init_hang(ctx: CheckContext) -> CheckOutcome | None:
    if ctx.hits:
        first = ctx.hits[0]
        return CheckOutcome(
            message=f"distributed init timed out: {first.text[:300]}", hits=ctx.hits
        )
    facts = stall_facts(ctx.analysis, ctx.records, ctx.fired)
    if facts is None or facts.phase != "dist_init" or facts.reason is None:
        return None
    nccl = [
        Hit.of(r) for r in ctx.records if "nccl" in r.message.lower() or "world_size=" in r.message
    ][-3:]
    return CheckOutcome(
        message=(
            f"{_ranks_phrase(facts)} (distributed init) and got no further"
            f"{' by ' + _hms(facts.last_ts) if facts.last_ts else ''} ({facts.reason}): the "
            "process group or NCCL communicator setup never completed"
        ),
        hits=_step_starts(facts, "dist_init", ctx.records)
        + facts.reason_hits
        + facts.hits
        + tuple(nccl),
    )


def _step_starts(facts: StallFacts, phase: str, records: Sequence[Record]) -> tuple[Hit, ...]:
    """The line where each rank stopped in ``phase`` began it (the step that never
    ended), for the ranks whose furthest phase it is."""
    wanted = {
        (iv.source, iv.first_line)
        for r in facts.by_phase.get(phase, ())
        for iv in r.phases[-1:]
        if iv.phase == phase and not iv.ended
    }
    if not wanted:
        return ()
    return tuple(Hit.of(r) for r in records if (r.source, r.line) in wanted)


def _check_no_listen_port(ctx: CheckContext) -> CheckOutcome | None:
    bind = [h for h in ctx.hits if "bind" in h.text.lower() or "in use" in h.text.lower()]
    if bind:
        return CheckOutcome(
            message=f"the HTTP server could not bind its port: {bind[0].text[:200]}",
            hits=tuple(bind),
            severity="error",
        )
    died = [h for h in ctx.hits if "readiness probe" in h.text]
    if died:
        return CheckOutcome(
            message=(
                "the engine process died before the API server was ready, so the HTTP "
                f"port was never opened: {died[0].text[:200]}"
            ),
            hits=tuple(died[:1]),
            severity="error",
        )
    if ctx.hits and ctx.analysis.last_phase not in ("listening", "serving"):
        # (a client polling, a kubelet's probe refused while the model loads: the port
        # opened later where the log reaches listening)
        first, last = ctx.hits[0], ctx.hits[-1]
        span = ""
        if first.ts and last.ts and last.ts > first.ts:
            span = f" over {fmt_duration((last.ts - first.ts).total_seconds())}"
        return CheckOutcome(
            message=(
                f"a client waited for the server {len(ctx.hits)} times{span} and it never "
                f"answered; the log never reaches listening (last phase "
                f"{ctx.analysis.last_phase or 'unknown'})"
            ),
            hits=ctx.hits,
        )
    died_hit = _http_process_died(ctx)
    if died_hit is not None:
        return CheckOutcome(
            message=(
                "the API server process, which opens the HTTP port, ended the log with its "
                f"own traceback ({died_hit.text[:200]}) before any listening line (last "
                f"phase {ctx.analysis.last_phase or 'unknown'}): the port was never opened"
            ),
            hits=(died_hit,),
            ranks=tuple(t.rank.label for t in ctx.analysis.ranks),
        )
    quit_hit = _launch_sigquit(ctx)
    if quit_hit is not None:
        return CheckOutcome(
            message=(
                "SGLang's launcher received SIGQUIT from a child process before the server "
                f"listened (last phase {ctx.analysis.last_phase or 'unknown'}): its handler "
                "kills the whole process tree, the HTTP server's process with it, so the port "
                f"was never opened ({quit_hit.text[:160]})"
            ),
            hits=(quit_hit, *_end_hit(ctx, quit_hit)),
            ranks=tuple(t.rank.label for t in ctx.analysis.ranks),
        )
    if "startup.stalled" not in ctx.fired:
        return None
    facts = stall_facts(ctx.analysis, ctx.records, {})
    return CheckOutcome(
        message=(
            f"the log never reaches listening (last phase {ctx.analysis.last_phase or 'unknown'})"
            ": no HTTP port was opened while it was written"
        ),
        hits=facts.hits[-1:] if facts is not None else (),
        # the port is the whole server's: every rank, not the one whose line is evidence
        ranks=tuple(t.rank.label for t in ctx.analysis.ranks),
    )


def _check_shm_broadcast_wait(ctx: CheckContext) -> CheckOutcome | None:
    """vLLM's broadcast queue waited 60 s for a worker: a warning, unless the start-up went
    on to listen afterwards in the same source (the worker was only busy: a long compile,
    a slow first step), then an info line of what happened."""
    if not ctx.hits:
        return None
    last = max(ctx.hits, key=lambda h: (h.source, h.line))
    later = [
        p.first_line
        for p in (*ctx.analysis.global_phases, *(x for t in ctx.analysis.ranks for x in t.phases))
        if p.phase in ("listening", "serving") and p.source == last.source
        and p.first_line > last.line
    ]
    secs = ctx.hits[0].groups.get("s")
    n = len(ctx.hits)
    what = (
        f"no free shared-memory broadcast block for {secs or '?'} s "
        f"({'once' if n == 1 else f'{n} times'})"
    )
    if later:
        return CheckOutcome(
            message=f"{what}, then the server listened (line {min(later)}): a worker was "
            "busy, not stuck",
            hits=ctx.hits,
            severity="info",
        )
    return CheckOutcome(message=what, hits=ctx.hits)


# SGLang's main process handing a child's failure on: srt/entrypoints/engine.py
# sigquit_handler (0.4.1.post7, "a child proces") and launch_phase_sigquit_handler
# (0.4.3.post4-0.5.23) log this and kill the process tree (kill_process_tree of its own pid):
# the launcher, which runs the HTTP server, is gone. Installed for the launch; 0.4.9.post6-
# 0.5.2's tokenizer manager logs the same words once running (running_phase_sigquit_handler),
# so only a log that never reached warm-up or listening proves the port never opened.
_SGLANG_SIGQUIT = "Received sigquit from a child proces"
_PORT_MAY_BE_OPEN = frozenset({"warmup", "listening", "serving"})


def _launch_sigquit(ctx: CheckContext) -> Hit | None:
    if ctx.analysis.framework == "vllm":
        return None
    if ctx.analysis.last_phase in _PORT_MAY_BE_OPEN:
        return None
    for rec in reversed(ctx.records):
        if _SGLANG_SIGQUIT in rec.message:
            return Hit(rec.source, rec.line, rec.message, rec.rank, rec.ts, {}, rec.level)
    return None


def _end_hit(ctx: CheckContext, after: Hit) -> tuple[Hit, ...]:
    """The input's last line after ``after`` (the log's end, where the port was still
    closed), or nothing."""
    tail = _tail_of(ctx.records)
    if not tail:
        return ()
    last = tail[-1]
    line = last.line + len(last.continuation)
    if last.source != after.source or line <= after.line:
        return ()
    text = last.continuation[-1] if last.continuation else last.message
    return (Hit(last.source, line, text, last.rank, last.ts, {}, last.level),)


# vLLM's API server process: the "(APIServer pid=N)" prefix vLLM puts on its lines
# (vllm/utils decorate_logs("APIServer"), entrypoints/openai/api_server.py and cli/serve.py,
# 0.10-0.34); it is the process that binds and serves the HTTP port
_HTTP_PROCESSES = frozenset({"APIServer"})


# The entry modules of the process that opens the HTTP port: vLLM's OpenAI API server
# (entrypoints/openai/api_server.py run_server/<module> 0.2-0.34; `vllm serve` through
# entrypoints/cli/serve.py 0.7-0.34 and scripts.py serve 0.5-0.6) and SGLang's launcher
# (launch_server.py <module>, srt/entrypoints/http_server.py launch_server 0.4-0.5.23,
# srt/server.py launch_server 0.1-0.3). A main thread's traceback starts at the process's
# entry point, so one whose frames go through these and none of a child process's
# bootstrap is that process's own.
_HTTP_ENTRY = regex.compile(
    r"/vllm/entrypoints/openai/api_server\.py$|/vllm/entrypoints/cli/serve\.py$"
    r"|/vllm/scripts\.py$|/sglang/launch_server\.py$"
    r"|/sglang/srt/(?:entrypoints/http_server|server)\.py$"
)
_HTTP_ENTRY_FUNCS = frozenset(
    {"<module>", "run_server", "run_server_worker", "main", "cmd", "serve", "launch_server"}
)
# frames that start a child process or a thread: its traceback is not the server's main
_CHILD_ENTRY = regex.compile(
    r"/multiprocessing/(?:process|spawn|popen_\w+)\.py$|/threading\.py$|/ray/_private/"
)


def _http_entry_traceback(frames: Sequence[tuple[Record, int, str, Any]]) -> bool:
    """The frames of a traceback printed by the HTTP server's own main thread: one of its
    entry functions is among them and no child process's or thread's bootstrap is."""
    paths = [(f[3].group("path").replace("\\", "/"), f[3].group("func")) for f in frames]
    if any(_CHILD_ENTRY.search(p) for p, _ in paths):
        return False
    return any(_HTTP_ENTRY.search(p) and fn in _HTTP_ENTRY_FUNCS for p, fn in paths)


def _http_process_died(ctx: CheckContext) -> Hit | None:
    """The input ends with a traceback of the HTTP server's own process, its exception line
    last, before any phase reached listening: that process is gone, so the port never
    opened (not a cut excerpt of a worker's failure: the server itself ended the log)."""
    if ctx.analysis.last_phase in ("listening", "serving"):
        return None
    tail = _tail_of(ctx.records)
    if not tail:
        return None
    last = tail[-1]
    ends = [e for e in _traceback_ends(tail[-1:]) if e[1] is last]
    if not ends:
        return None
    _, rec, i, text, frames = ends[-1]
    if i != len(rec.continuation) or not is_exception_line(text):
        return None
    if last.process not in _HTTP_PROCESSES and not _http_entry_traceback(frames):
        return None
    return Hit(rec.source, rec.line + i, text, rec.rank, rec.ts, {}, rec.level)


# the innermost frame of a process that was waiting, not failing (a dump on Ctrl-C)
_WAIT_FRAME = regex.compile(
    r"in (?:run_until_complete|run_forever|_run_once|select|poll|wait|wait_for|"
    r"_wait_for_tstate_lock|"
    r"acquire|sleep|recv|recv_multipart|get|join|accept|serve_forever|_bootstrap_inner)\s*$"
    r"|uvloop/loop\.pyx"
)


_TB_FRAME = regex.compile(r'^\s*File "[^"]+", line \d+, in \S')


# a vLLM line cut inside its own prefix: the level and part of the time stamp
_CUT_PREFIX = regex.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: [0-9][0-9:\- .]*)?$")


def _is_fragment(rec: Record) -> bool:
    """A last line cut by the excerpt to one word or a prefix that never closed
    (``(EngineCore_DP0 pid=221135``, ``[2025-01-02 10:``), with no continuation."""
    msg = rec.message.strip()
    if rec.continuation or len(msg) >= 48:
        return False
    if not any(c.isspace() for c in msg) or _CUT_PREFIX.match(msg):
        return True
    return (msg[:1] == "(" and ")" not in msg) or (msg[:1] == "[" and "]" not in msg)


def _cut_head(last: Record, before: Record) -> bool:
    """A last line that is only the start of the line before it (``Aug 19 1`` under
    ``Aug 19 18:34:30 host unit[8707]: ...``): the excerpt cut the next line inside the
    head every line of it begins with (a journald or container stamp, a prefix)."""
    if last.continuation:
        return False
    raw, prev = (last.raw or last.message), (before.raw or before.message)
    text = raw.strip()
    if not text or len(text) >= 48 + len(raw) - len(last.message.lstrip()):
        return False
    if prev.startswith(text):
        return True
    # under a per-line wrapper of one width (a container stamp): compare after it
    msg = last.message.strip()
    at = raw.find(msg) if msg else -1
    return at > 0 and len(msg) < 48 and prev[at:].startswith(msg)


_TB_HEADER_ONLY = regex.compile(r"^\s*Traceback \(most recent call last\):?\s*$")


def _cut_traceback(tail: Sequence[Record]) -> tuple[Record, Record] | None:
    """The traceback the log ends inside, with no exception line: (its first record, its
    last record); None when the log does not end in a traceback or it shows a wait."""
    if tail and len(tail) > 1 and (
        _is_fragment(tail[-1]) or _cut_head(tail[-1], tail[-2])
    ):
        tail = tail[:-1]  # the excerpt's cut last line: a bare prefix, a word
    if not tail:
        return None

    def end(r: Record) -> int:
        return r.line + len(r.continuation)

    inside = [r for r in tail[-8:-1] if r.line < tail[-1].line and end(r) > end(tail[-1])]
    if inside:
        # the last record is a line written inside an earlier record's traceback (a chained
        # traceback's header printed raw to stderr between a logger's lines, with only the
        # process prefix: its own record), and that record's lines go on below it: the file
        # ends in the earlier record, whose traceback the header belongs to
        span = inside[-1]
        tail = [r for r in tail if r is not span] + [span]
    last = tail[-1]
    # a frame's source line right under it, its indentation lost by the paste
    # (``File "x.py", line 3, in f`` then ``g(a, b)`` at the margin)
    framed = {(r.source, r.line + 1) for r in tail[-401:] if FRAME.search(r.message)}

    def material(r: Record) -> bool:
        return (
            _is_trace(r) or r.message.startswith((" ", "\t")) or not r.message.strip("^~ ")
            or (r.source, r.line) in framed
            # the line that announces it with the header glued on (SGLang's
            # f"Scheduler hit an exception: {get_exception_traceback()}")
            or r.message.rstrip().endswith("Traceback (most recent call last):")
            or wrap_rest(r)
            or heads(r)
        )

    def heads(r: Record) -> bool:
        # a logger's line with the traceback it logged as its continuation lines
        # (logger.exception, KServe's "Failed to start model server: ...")
        return any("Traceback (most recent call last)" in c for c in r.continuation[:3])

    def wrap_rest(r: Record) -> bool:
        # the rest of a frame line a hard wrap cut (``in R`` / ``untime``): one short
        # word, the traceback's own lines under it
        msg = r.message.strip()
        return (
            0 < len(msg) < 48 and not any(c.isspace() for c in msg)
            and bool(r.continuation) and not is_exception_line(msg)
            and all(x[:1] in (" ", "\t") or FRAME.search(x) for x in r.continuation)
        )

    if not material(last):
        return None
    start: Record | None = None
    for r in reversed(tail[-400:]):
        if "Traceback (most recent call last)" in r.message or heads(r):
            start = r
            break
        if not material(r):
            return None
    if start is None:
        # the excerpt starts inside the traceback too (its header above the window): a
        # text of traceback frames only (`File "f", line N, in g`: the comma form, which
        # only a raised exception prints) is still a traceback cut off
        first = tail[0]
        if len(tail) > 400 or not (
            _TB_FRAME.search(first.message) or first.message.startswith((" ", "\t"))
        ):
            return None
        shown = [x for r in tail for x in (r.message, *r.continuation) if _TB_FRAME.search(x)]
        if len(shown) < 2:
            return None
        start = first
    shown = [
        x
        for r in tail
        if r.line <= last.line and end(r) >= start.line
        for x in (r.message, *r.continuation)
    ]
    at = [i for i, x in enumerate(shown) if FRAME.search(x)]
    if not at:
        if start is last and not last.continuation and _TB_HEADER_ONLY.match(last.message):
            return start, last  # the file ends on the header itself: cut before its frames
        return None
    if _WAIT_FRAME.search(shown[at[-1]].rstrip()):
        # a waiting frame is where a Ctrl-C dump stops, unless its source line is the
        # result of a finished future being read (asyncio's run_until_complete `return
        # future.result()`, concurrent.futures' `return fut.result()`): that re-raises
        code = shown[at[-1] + 1] if at[-1] + 1 < len(shown) else ""
        if ".result()" not in code:
            return None
    if last.continuation:
        body = [x for x in (last.message, *last.continuation) if x.strip("^~ \t")]
        code_line = len(body) >= 2 and FRAME.search(body[-2]) is not None  # its indent lost
        if body and not (
            FRAME.search(body[-1]) or body[-1].startswith((" ", "\t")) or code_line
        ):
            return None  # the traceback ends on its exception line (not cut)
    return start, last


# multiprocessing/process.py BaseProcess._bootstrap: a child process that raises writes
# "Process <name>:" and then its traceback (vLLM's "Process VLLM_DP_Coordinator:",
# "Process EngineCore_0:", SGLang's scheduler processes)
_PROCESS_HEADER = regex.compile(r"^Process [\w.\-]{1,80}:\s*$")


def _announcer(tail: Sequence[Record], start: Record) -> Record | None:
    """The line right before the traceback that starts at ``start`` and announces it, if
    any: the child process's name, or an ERROR line a logger wrote with the traceback
    (logging's exception(), a wrapper's "Failed to start model server: ...")."""
    before = [r for r in tail if r.source == start.source and r.line < start.line]
    if not before or before[-1].line != start.line - 1:
        return None
    prev = before[-1]
    if _PROCESS_HEADER.match(prev.message.strip()):
        return prev
    if "Traceback (most recent call last)" in start.message and _error_level(prev):
        return prev
    return None


def _error_level(r: Record) -> bool:
    """An ERROR (CRITICAL, FATAL) line: by its parsed level, or by the word near its start
    (a logger's format no grammar knew)."""
    if (r.level or "").upper() in ("ERROR", "CRITICAL", "FATAL"):
        return True
    raw = r.raw or r.message
    return regex.search(r"(?:^|\s)(?:ERROR|CRITICAL|FATAL)\s", raw[:80]) is not None


def _check_error_ends_log(ctx: CheckContext) -> CheckOutcome | None:
    """The log's last line is an ERROR line, or it ends inside a traceback before the
    exception line, and nothing else explains it: the run ended in an error whose
    traceback (or exception) the excerpt cut off."""
    explained = bool(_error_explains(ctx.fired))
    if not ctx.records:
        return None
    tail = _tail_of(ctx.records)
    cut = _cut_traceback(tail)
    if cut is None and (explained or "python.exception" in ctx.fired):
        return None
    if cut is not None and explained and "python.exception" in ctx.fired:
        # an earlier exception line fired python.exception, and the run ends in another
        # traceback the excerpt cut (a wrapper's or the launcher's, raised after it): its
        # start joins python.exception's evidence, the message stays the exception's
        start, _ = cut
        return CheckOutcome(
            message="the log ends inside a later traceback (cut off)",
            hits=tuple(Hit.of(r) for r in (_announcer(tail, start), start) if r),
        )
    if cut is not None:
        # a traceback the excerpt cut is a traceback all the same, whatever other error
        # came before it (a rank killed by a signal, then the launcher's own traceback)
        start, last = cut
        frames = [x.strip() for x in (last.message, *last.continuation) if FRAME.search(x)]
        where = frames[-1] if frames else last.message.strip()
        return CheckOutcome(
            message=(
                "the log ends inside a traceback before its exception line (cut off); "
                + (f"the innermost frame shown: {where[:200]}" if frames else "no frame shown")
            ),
            hits=tuple(Hit.of(r) for r in (_announcer(tail, start), start) if r),
        )
    if phase_index(ctx.analysis.last_phase) >= phase_index("serving"):
        return None  # a serving log's last ERROR (an aborted request) is not a crash
    if not tail:
        return None
    last = tail[-1]
    if last.grammar in ("tsl", "glog"):
        # a C++ library's logger (TensorFlow/XLA's; glog's: Mooncake's transfer engine,
        # Ray's core, gRPC): its E lines are no Python exception announcing itself
        return None
    if not _error_level(last):
        return None
    return CheckOutcome(
        message=f"the log ends on an ERROR line with its traceback cut off: {last.message[:200]}",
        hits=(Hit.of(last),),
    )


# faulthandler (CPython Modules/faulthandler.c): a fatal signal prints "Fatal Python error:
# <signal>" and then each thread as "Thread 0x... (most recent call first):" / "Current
# thread 0x..." with frames `File "f", line N in func` (no comma, unlike a traceback);
# dump_traceback_later prints "Timeout (h:mm:ss)!" first instead.
_FH_THREAD = regex.compile(r"(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")
_FH_FRAME = regex.compile(r'File "[^"]+", line \d+ in \S+')
_FH_TIMEOUT = regex.compile(r"Timeout \(\d+:\d\d:\d\d\)!")


def _check_faulthandler_dump(ctx: CheckContext) -> CheckOutcome | None:
    """A faulthandler dump ends the log with no `Timeout (h:mm:ss)!` header: a fatal
    signal's dump (LABELS.md: process.killed), also when its "Fatal Python error" line was
    lost to the paste."""
    tail = _tail_of(ctx.records)
    if not tail:
        return None
    first: tuple[Record, int] | None = None
    current: tuple[Record, int] | None = None  # the thread the signal hit
    count = 0
    timeout = False
    # walk back over the end of the log while it is dump material
    for r in reversed(tail[-3000:]):
        lines = (r.message, *r.continuation)
        dumpish = [
            i for i, x in enumerate(lines) if _FH_THREAD.search(x) or _FH_FRAME.search(x)
        ]
        for i in dumpish:
            if current is None and "Current thread" in lines[i]:
                current = (r, i)
        if any(_FH_TIMEOUT.search(x) for x in lines):
            timeout = True
            break
        if not dumpish:
            if r.ts is not None or count >= 2:
                break  # a log line after (or before) the dump: the dump is behind us
            continue
        count += len(dumpish)
        first = (r, dumpish[0])
    if first is None or timeout or count < 2:
        return None
    spots = [first] if current in (None, first) else [first, current]
    hits = []
    for rec, i in spots:
        text = (rec.message, *rec.continuation)[i].strip()
        hits.append(Hit(rec.source, rec.line + i, text, rec.rank, rec.ts))
    return CheckOutcome(
        message=(
            f"a faulthandler dump of the threads' stacks ends the log ({count} frame or "
            "thread lines, no 'Timeout' header): the process died of a fatal signal"
            + (" (its current thread: the one the signal hit)" if current is not None else "")
        ),
        hits=tuple(hits),
    )


# ---------------------------------------------------------------------------
# weights, spec decode, ranks

_LOAD_TOOK = regex.compile(
    r"(?:Loading weights took|Model loading took [\d.]+ ?GiB and|Load weight end\..*?elapsed=)"
    r"\s*(?P<s>[\d.]+) ?(?:s\b|seconds|sec)",
    regex.IGNORECASE,
)


def _may_report_load(text: str) -> bool:
    """Whether :data:`_LOAD_TOOK` may match ``text``: every match holds "took" or "ght
    end" in some case, and ``lower()`` folds their letters as the pattern's IGNORECASE
    does ("weight" is left out: IGNORECASE reads U+0130 as its i, lower() does not)."""
    low = text.lower()
    return "took" in low or "ght end" in low


def _bar_key(p: Progress) -> tuple[object, ...]:
    """Which bar a progress line is of: its source, rank, label and total."""
    return (p.source, p.rec.rank, p.label, p.total)


def _bar_ends(bars: Sequence[Progress]) -> list[Progress]:
    """Each bar's furthest line (see :func:`_bar_key`)."""
    ends: dict[tuple[object, ...], Progress] = {}
    for p in bars:
        key = _bar_key(p)
        cur = ends.get(key)
        if cur is None or (p.done, p.line) >= (cur.done, cur.line):
            ends[key] = p
    return sorted(ends.values(), key=lambda p: (p.source, p.line))


def _pace(p: Progress) -> float | None:
    """Seconds per item over the whole bar so far: its elapsed time over its count. tqdm's
    own s/it is a moving average of the last few items (smoothing 0.3), which a loader of
    many threads makes jump (a wave of shards finishing together after a long read: 37 s/it
    at 5/64, the bar at 51/64 three seconds later), so it is used only when the bar shows
    no elapsed time."""
    if p.elapsed_s is not None and p.done > 0:
        return p.elapsed_s / p.done
    return p.s_per_it


def _slow_stretch(
    shards: Sequence[Progress], max_rate: float, min_run: int
) -> tuple[Progress, Progress] | None:
    """The longest run of at least ``min_run`` shards that each took ``max_rate`` seconds
    or more, read from one bar's consecutive updates (the step from one update to the next:
    its elapsed time over the shards it added), as (the update it starts from, the update
    it ends on); None when no bar has one.

    A bar can be slow over a long stretch and still end at a pace under the limit (reads
    that sped up later, a page cache warmed by an earlier attempt). A loader of many threads
    whose first wave of shards finishes together after one long read shows one slow step
    and then a burst: a run of one, which this never counts; consecutive slow steps are the
    loader's throughput staying low."""
    best: tuple[int, Progress, Progress] | None = None
    bars: dict[tuple[object, ...], list[Progress]] = {}
    for p in shards:
        if p.elapsed_s is not None:
            bars.setdefault(_bar_key(p), []).append(p)
    for updates in bars.values():
        start: Progress | None = None
        prev: Progress | None = None
        for p in updates:
            if prev is None or p.done < prev.done or (p.elapsed_s or 0.0) < (prev.elapsed_s or 0.0):
                start, prev = None, p  # the first update, or the bar drawn again from the start
                continue
            if p.done == prev.done:
                continue  # a redraw: the step goes on from the first update at this count
            rate = ((p.elapsed_s or 0.0) - (prev.elapsed_s or 0.0)) / (p.done - prev.done)
            if rate >= max_rate:
                start = start or prev
                run = p.done - start.done
                if run >= min_run and (best is None or run > best[0]):
                    best = (run, start, p)
            else:
                start = None
            prev = p
    return None if best is None else (best[1], best[2])


def _check_slow_load(ctx: CheckContext) -> CheckOutcome | None:
    max_rate = ctx.param("max_s_per_shard", 15.0)
    max_total = ctx.param("max_load_s", 600.0)
    shards = [p for rec in ctx.records for p in parse_progress(rec) if p.is_shards]
    slow = [p for p in _bar_ends(shards) if (pace := _pace(p)) is not None and pace >= max_rate]
    took: list[tuple[float, Record]] = []
    for rec in ctx.records:
        text = rec.message[:_SCAN_CAP]
        if not _may_report_load(text):
            continue
        try:
            m = _LOAD_TOOK.search(text, timeout=0.05)
        except TimeoutError:
            continue
        if m:
            took.append((float(m.group("s")), rec))
    long_loads = [(s, rec) for s, rec in took if s >= max_total]
    if slow:
        worst = max(slow, key=lambda p: _pace(p) or 0.0)
        pace = _pace(worst) or 0.0
        total = worst.total
        how = (
            f"{worst.done} of {total} in {fmt_duration(worst.elapsed_s)}"
            if worst.elapsed_s is not None and worst.done > 0
            else "tqdm's rate"
        )
        message = (
            f"checkpoint shards load at {pace:.1f} s per shard (limit {max_rate:g} s; {how}); "
            f"{total} shards take ~{fmt_duration(pace * total)} at that pace"
        )
        # each slow bar: where its pace first showed over the limit, and where it ends
        hits: list[Hit] = []
        for end in slow[:3]:
            first = next(
                p for p in shards
                if _bar_key(p) == _bar_key(end)
                and (pace_p := _pace(p)) is not None and pace_p >= max_rate
            )
            hits += [Hit.of(first.rec)] + ([Hit.of(end.rec)] if first is not end else [])
        if took:
            # the load's own total ("Loading weights took N seconds"), where it was logged
            secs = max(s for s, _ in took)
            message += f"; the load took {fmt_duration(secs)} in all"
            hits += [Hit.of(r) for _, r in took[:2]]
        return CheckOutcome(message=message, hits=tuple(hits))
    if long_loads:
        secs, rec = max(long_loads, key=lambda t: t[0])
        return CheckOutcome(
            message=f"weight loading took {fmt_duration(secs)} (limit {fmt_duration(max_total)})",
            hits=tuple(Hit.of(r) for _, r in long_loads),
        )
    stretch = _slow_stretch(shards, max_rate, int(ctx.param("min_slow_run", 4)))
    if stretch is not None:
        a, b = stretch
        secs = (b.elapsed_s or 0.0) - (a.elapsed_s or 0.0)
        overall = _pace(max(
            (p for p in shards if _bar_key(p) == _bar_key(b)), key=lambda p: (p.done, p.line)
        )) or 0.0
        return CheckOutcome(
            message=(
                f"checkpoint shards {a.done + 1} to {b.done} of {b.total} loaded at "
                f"{secs / (b.done - a.done):.1f} s per shard, each {max_rate:g} s or more "
                f"({fmt_duration(secs)} for {b.done - a.done} shards); the bar's pace over "
                f"its whole length is {overall:.1f} s per shard"
            ),
            hits=(Hit.of(a.rec),) + ((Hit.of(b.rec),) if b.line != a.line else ()),
        )
    return None


def _spec_text(summary: specdec.SpecSummary) -> str:
    parts = []
    if summary.mean_len is not None:
        parts.append(f"mean acceptance length {summary.mean_len:.2f} tokens/step")
    if summary.rate is not None:
        parts.append(f"draft acceptance rate {summary.rate * 100:.1f}%")
    n = summary.count
    text = ", ".join(parts) + f" over {n} report{'s' if n != 1 else ''}"
    times = [r.ts for r in summary.reports if r.ts is not None]
    if len(times) > 1 and max(times) > min(times):
        text += f" ({_hms(min(times))} to {_hms(max(times))})"
    return text


def _spec_hits(summary: specdec.SpecSummary) -> tuple[Hit, ...]:
    reports = summary.reports
    chosen = list(reports[:2]) + ([reports[-1]] if len(reports) > 2 else [])
    return tuple(Hit(r.source, r.line, r.text, r.rank, r.ts) for r in chosen)


def _check_specdec_summary(ctx: CheckContext) -> CheckOutcome | None:
    """Acceptance figures that pay off: reported (info) so the numbers are on record."""
    if "specdec.low_acceptance" in ctx.fired:
        return None
    cost = ctx.param("draft_cost", specdec.DEFAULT_DRAFT_COST)
    summary = specdec.summarize(ctx.records, ctx.analysis.config, draft_cost=cost)
    if summary is None:
        return None
    text = _spec_text(summary)
    if summary.steps is not None and summary.speedup is not None:
        text += (
            f"; with {summary.steps} draft steps ({summary.steps_source}) that is about "
            f"{summary.speedup:.2f}x the speed of no speculation (draft cost {cost:g}; "
            f"break-even {summary.break_even_len:.2f} tokens/step)"
        )
    return CheckOutcome(message=text, hits=_spec_hits(summary))


def _check_specdec(ctx: CheckContext) -> CheckOutcome | None:
    cost = ctx.param("draft_cost", specdec.DEFAULT_DRAFT_COST)
    summary = specdec.summarize(ctx.records, ctx.analysis.config, draft_cost=cost)
    if summary is None:
        return None
    min_rate = ctx.param("min_rate_unknown_steps", 0.2)
    low = summary.below_break_even
    if summary.speedup is None:
        low = (summary.rate is not None and summary.rate < min_rate) or (
            summary.mean_len is not None and summary.mean_len < 1.0 + min_rate
        )
    if not low:
        return None
    text = _spec_text(summary)
    if summary.steps is not None and summary.speedup is not None:
        text += (
            f"; with {summary.steps} draft steps ({summary.steps_source}) break-even is "
            f"{summary.break_even_len:.2f} tokens/step, so decoding runs at about "
            f"{summary.speedup:.2f}x the speed of no speculation (draft cost {cost:g})"
        )
    else:
        text += "; draft steps unknown, but acceptance this low cannot pay for drafting"
    return CheckOutcome(message=text, hits=_spec_hits(summary))


def _present(analysis: Analysis) -> list[RankTimeline]:
    return [r for r in analysis.ranks if not r.inferred and r.line_count > 0]


# An input of this many lines is no pasted excerpt: a rank absent from all of them is missing
# whatever the others logged (and the prefilter, which reads inputs of 1 MiB and more, counts
# only a rank's record lines, so a per-rank floor would depend on the path the lines took)
_WHOLE_LOG_LINES = 2000


def _check_missing(ctx: CheckContext) -> CheckOutcome | None:
    missing = ctx.analysis.missing_ranks
    present = _present(ctx.analysis)
    if not missing or not present:
        return None
    min_lines = ctx.param("min_lines_per_rank", 5.0)
    if ctx.analysis.records < _WHOLE_LOG_LINES and min(r.line_count for r in present) < min_lines:
        return None  # too little per rank to tell absence from an excerpt's cut
    labels = ", ".join(r.label for r in missing[:8])
    if len(missing) > 8:
        labels += f" and {len(missing) - 8} more"
    expected = len(ctx.analysis.expected_ranks)
    message = (
        f"{labels} never logged a line; {len(present)} of {expected} expected ranks did "
        f"(each at least {min(r.line_count for r in present)} lines)"
    )
    hits = tuple(
        h for r in present[:2] if (h := _rank_hit(ctx.analysis, r, ctx.records)) is not None
    )
    return CheckOutcome(message=message, hits=hits, ranks=tuple(r.label for r in missing))


def _check_straggler(ctx: CheckContext) -> CheckOutcome | None:
    slow = set(ctx.analysis.stragglers)
    if not slow:
        return None
    ranks = {r.rank: r for r in ctx.analysis.ranks}
    behind = [ranks[r] for r in sorted(slow, key=lambda r: r.sort_key) if r in ranks]
    ahead = [r for r in ctx.analysis.ranks if r.rank not in slow]
    if not behind or not ahead:
        return None
    ahead_phase = Counter(r.last_phase for r in ahead).most_common(1)[0][0]
    others_quiet = [r.silent_s for r in ahead if r.silent_s is not None]
    parts = []
    for r in behind:
        if r.last_phase == ahead_phase and behind_in_phase(r, ctx.analysis.ranks):
            done = sum(
                1 for o in ahead
                if o.last_phase == ahead_phase
                and any(p.phase == ahead_phase and p.ended for p in o.phases)
            )
            part = (
                f"{r.rank.label} never logged the end of {r.last_phase}, which "
                f"{done} other rank{'s' if done != 1 else ''} ended"
            )
        else:
            part = f"{r.rank.label} last reached {r.last_phase}"
        if r.silent_s is not None and others_quiet:
            lead = r.silent_s - min(others_quiet)
            if lead >= 1:
                part += f" and went quiet {fmt_duration(lead)} before the others"
        parts.append(part)
    n = len(ahead)
    message = (
        "; ".join(parts[:6])
        + (f" (and {len(parts) - 6} more)" if len(parts) > 6 else "")
        + f", while {n} other rank{'s' if n != 1 else ''} reached {ahead_phase}"
    )
    hits = tuple(h for r in behind if (h := _rank_hit(ctx.analysis, r, ctx.records)))
    return CheckOutcome(message=message, hits=hits, ranks=tuple(r.rank.label for r in behind))


def _check_stack_collective(ctx: CheckContext) -> CheckOutcome | None:
    """Stack dumps in the input: some processes wait inside an NCCL collective while
    others are elsewhere; the others are who the collective waits for."""
    # A traceback is where its thread was when an error surfaced, each at its own moment,
    # not a dump taken while the ranks wait: it takes no part in the comparison.
    dumped = [p for p in ctx.analysis.stack_processes if p.mode != "traceback"]
    if len(dumped) < 2:  # one waiting and one elsewhere at least (speed: no import)
        return None
    from diag.stacks.merge import group_stacks

    groups = group_stacks(dumped)
    waiting = [g for g in groups if g.wait_site == "stack.nccl_collective"]
    others = [g for g in groups if g.wait_site and g.wait_site != "stack.nccl_collective"]
    if not waiting or not others:
        return None
    n_wait = sum(len(g.members) for g in waiting)
    odd = [m for g in others for m in g.members]
    sites = sorted({g.wait_site or "unknown" for g in others})
    hits = []
    for proc in dumped:
        if proc.source and proc.line and proc.wait_site:
            label = proc.rank.label if proc.rank else f"pid {proc.pid}"
            hits.append(
                Hit(
                    proc.source,
                    proc.line,
                    f"{label}: {proc.title or ''} waits at {proc.wait_site}",
                    proc.rank,
                )
            )
    return CheckOutcome(
        message=(
            f"{n_wait} dumped process{'es wait' if n_wait != 1 else ' waits'} inside an NCCL "
            f"collective while {', '.join(odd[:6])} {'is' if len(odd) == 1 else 'are'} "
            f"elsewhere ({', '.join(sites)}): the collective waits for "
            f"{'it' if len(odd) == 1 else 'them'}"
        ),
        hits=tuple(hits),
        ranks=tuple(odd),
    )


# the compiler proper, not the compiled code running (torch/_dynamo/eval_frame.py wraps
# every call of a compiled model, in serving too)
_COMPILER_PATH = regex.compile(
    r"/torch/_inductor/|/torch/_dynamo/(?!eval_frame\.py)|/vllm/compilation/"
    r"|/sglang/srt/compilation/|/triton/compiler/|/triton/backends/"
)


def _check_compile_crash(ctx: CheckContext) -> CheckOutcome | None:
    """The run ended in a traceback of torch.compile's compiler (its frames, or Dynamo's
    error footer): compile.error."""
    return _compiler_frame_crash(ctx) or _dynamo_footer_crash(ctx)


def _compiler_frame_crash(ctx: CheckContext) -> CheckOutcome | None:
    """The traceback that ends the run (python.exception) has, as its innermost frame of a
    start-up step, torch.compile's compiler (Dynamo, Inductor, Triton's compiler) or the
    frameworks' compilation backend (vllm/compilation/, sglang/srt/compilation/), the log
    reached compile and no error but that traceback's explains it: the compile step itself
    failed (LABELS.md compile.error), also when the exception line was cut off."""
    exc = ctx.fired.get("python.exception")
    if exc is None or not exc.evidence or ctx.analysis.last_phase != "compile":
        return None
    if any(f.id != "python.exception" for f in _error_explains(ctx.fired)):
        return None
    ev = exc.evidence[0]
    mine = [r for r in ctx.records if r.source == ev.source]
    after = [r for r in mine if r.line >= ev.line][:400]
    # the traceback the evidence line ends (or starts): back to its header, or to the
    # first line that is no traceback material (a cut window of ERROR-prefixed frames)
    before: list[Record] = []
    for r in reversed([r for r in mine if r.line < ev.line][-400:]):
        if not (
            _is_trace(r) or r.message.startswith((" ", "\t"))
            or (r.level or "").upper() in ("ERROR", "CRITICAL")
        ):
            break
        before.append(r)
        if "Traceback (most recent call last)" in r.message:
            break
    tail = [*reversed(before), *after]
    innermost: tuple[str, str] | None = None
    for r in tail:
        for text in (r.message, *r.continuation):
            m = FRAME.search(text)
            if m and frame_phase(m.group("path"), m.group("func")) is not None:
                innermost = (m.group("path"), m.group("func"))
    if innermost is None or frame_phase(*innermost) != "compile":
        return None
    if not _COMPILER_PATH.search(innermost[0].replace("\\", "/")):
        return None
    where = innermost[0].replace("\\", "/").rsplit("site-packages/", 1)[-1]
    # the exception's line, also where it is a continuation of the traceback's record
    at = next((r for r in mine if r.line <= ev.line <= r.line + len(r.continuation)), None)
    return CheckOutcome(
        message=(
            f"the run ended in a traceback inside the compiler ({innermost[1]} in {where}): "
            f"{exc.message[:200]}"
        ),
        hits=(
            Hit(ev.source, ev.line, ev.text, at.rank, at.ts, {}, at.level),
        ) if at is not None else ((Hit.of(after[0]),) if after else ()),
    )


# torch/_dynamo/exc.py augment_exc_message (torch 2.1-2.9): the footer Dynamo appends to an
# exception that carries the traced user code's stack (``real_stack``: raised while Dynamo
# traced a frame or its backend compiled the graph), after the "from user code:" frames,
# unless TORCHDYNAMO_VERBOSE is set
_DYNAMO_FOOTER = "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"
# a kill or exit notice after the traceback is its consequence (SGLang's launcher: "Received
# sigquit from a child process"), not another explanation
_COMPILE_CASCADES = frozenset({"python.exception", "process.killed", "compile.error"})


def _dynamo_footer_crash(ctx: CheckContext) -> CheckOutcome | None:
    """The run ended in an exception torch.compile raised while it compiled the model:
    Dynamo's footer (``Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace``) closes the
    last traceback, nothing of a later phase follows it, and no error but the traceback's
    own cascades explains the stop; also when the paste kept only the "from user code"
    frames and lost the exception's line (no python.exception)."""
    if "compile.error" in ctx.fired:
        return None
    if any(f.id not in _COMPILE_CASCADES for f in _error_explains(ctx.fired)):
        return None
    found: tuple[Record, int, str] | None = None
    for rec in ctx.records:
        if _DYNAMO_FOOTER in rec.message:
            found = (rec, 0, rec.message)
        for i, text in enumerate(rec.continuation, start=1):
            if _DYNAMO_FOOTER in text:
                found = (rec, i, text)
    if found is None:
        return None
    rec, i, text = found
    at = rec.line + i
    later = [
        e for e in ctx.analysis.events
        if e.source == rec.source and e.line > at and phase_index(e.phase) > phase_index("compile")
    ]
    if later:
        return None  # Dynamo suppressed the error (suppress_errors) and the start went on
    # the innermost frame of the traced code above the footer, for the message
    inner = ""
    for r in ctx.records:
        if r.source != rec.source or r.line > at:
            continue
        for t in (r.message, *r.continuation):
            m = FRAME.search(t)
            if m is not None:
                inner = f"{m.group('func')} in " + m.group("path").replace("\\", "/").rsplit(
                    "site-packages/", 1
                )[-1].rsplit("dist-packages/", 1)[-1]
    where = f" (innermost traced frame: {inner})" if inner else ""
    return _outcome_at(
        rec, i, text,
        f"the run ended in an exception torch.compile raised while it traced or compiled "
        f"the model: Dynamo's error footer{where}",
    )


# transformers models/auto/configuration_auto.py (4.x): _LazyConfigMapping.__getitem__
# raises KeyError(model_type) for a model type the installed transformers does not know;
# AutoConfig.from_pretrained then raises "... has model type `x` but Transformers does not
# recognize this architecture" while handling it (model.unsupported's pattern), the part
# an excerpt cut at "During handling of the above exception" loses
_CONFIG_MAPPING_FILE = "/transformers/models/auto/configuration_auto.py"
_KEY_ERROR = regex.compile(r"(?:^|\s)KeyError: '(?P<key>[^'\s]{1,100})'\s*$")


def _check_unknown_model_type(ctx: CheckContext) -> CheckOutcome | None:
    """A traceback through transformers' config mapping (configuration_auto.py) ends in
    ``KeyError: '<model_type>'``: the checkpoint's model type is unknown to this
    transformers (model.unsupported), also when the chained ValueError was cut off."""
    if "model.unsupported" in ctx.fired:
        return None
    through: dict[tuple[str, RankId | None, int | None], bool] = {}
    for rec in ctx.records:
        key = (rec.source, rec.rank, rec.pid)
        for i, text in enumerate((rec.message, *rec.continuation)):
            if "Traceback (most recent call last)" in text:
                through[key] = False
                continue
            m = FRAME.search(text)
            if m is not None:
                if m.group("path").replace("\\", "/").endswith(_CONFIG_MAPPING_FILE):
                    through[key] = True
                continue
            if not through.get(key) or "KeyError" not in text:
                continue
            k = _KEY_ERROR.search(text)
            if k is None:
                continue
            return _outcome_at(
                rec, i, text,
                f"transformers does not know the model type '{k.group('key')}' "
                "(KeyError in its config mapping, configuration_auto.py)",
            )
    return None


# the model registries' raise for an architecture they cannot serve: vLLM's
# vllm/model_executor/models/registry.py _ModelRegistry._raise_for_unsupported (0.6.6-0.34:
# "Model architectures {} failed to be inspected", "... are not supported for now", "... was
# supported in vLLM until v{}", "... is not supported in-tree anymore") and SGLang's
# sglang/srt/models/registry.py (0.4.1-0.5.23: the first two); every raise of the function
# is one of these ValueErrors (fixtures/messages/messages.tsv). The first is no unsupported
# model: the architecture is registered, importing or inspecting its class failed.
_REGISTRY_FILE = regex.compile(r"/(?:vllm/model_executor|sglang/srt)/models/registry\.py$")
_UNSUPPORTED_RAISER = "_raise_for_unsupported"
_INSPECT_FAILED = "failed to be inspected"


def _check_unsupported_arch_raise(ctx: CheckContext) -> CheckOutcome | None:
    """A traceback whose innermost frame is the model registry's ``_raise_for_unsupported``
    (no deeper frame follows it): the registry refused the checkpoint's architecture
    (model.unsupported), also when the paste cut the ValueError's own line."""
    if "model.unsupported" in ctx.fired:
        return None
    # (source, rank, pid) -> the registry frame still innermost in its traceback
    pending: dict[tuple[str, RankId | None, int | None], tuple[Record, int, str]] = {}
    found: tuple[Record, int, str] | None = None
    for rec in ctx.records:
        key = (rec.source, rec.rank, rec.pid)
        for i, text in enumerate((rec.message, *rec.continuation)):
            m = FRAME.search(text)
            if m is not None:
                path = m.group("path").replace("\\", "/")
                if m.group("func") == _UNSUPPORTED_RAISER and _REGISTRY_FILE.search(path):
                    pending[key] = (rec, i, text)
                else:
                    pending.pop(key, None)  # raised deeper, below the registry's frame
                continue
            if key in pending and text[:1] not in (" ", "\t") and text.strip():
                # the frame's block ended (the exception line, a new header): it was innermost
                found = found or pending.pop(key)
    found = found or next(iter(pending.values()), None)
    if found is None:
        return None
    # the function's "failed to be inspected" raise, shown anywhere: not an unsupported model
    if any(
        _INSPECT_FAILED in text for r in ctx.records for text in (r.message, *r.continuation)
    ):
        return None
    rec, i, text = found
    return _outcome_at(
        rec, i, text,
        "the traceback ends in the model registry's _raise_for_unsupported: this version "
        "does not support the checkpoint's architecture (the exception line is not in the "
        "log: the same function raises 'failed to be inspected' when a registered model's "
        "class cannot be imported, which the full traceback would show)",
    )


def _outcome_at(rec: Record, i: int, text: str, message: str) -> CheckOutcome:
    """A check's outcome with one hit: line ``i`` of ``rec`` (0: its first line)."""
    return CheckOutcome(
        message=message,
        hits=(Hit.at(rec, i, text),),
    )


# multiprocessing/connection.py (CPython 3.x): Connection.recv raises EOFError when every
# writer's end of the pipe is closed, which for a launcher's pipe from a child it started
# means the child exited
_PIPE_FILE = "/multiprocessing/connection.py"
_FRAMEWORK_FILE = regex.compile(r"/(?:sglang|vllm)/")
_EOF_LINE = regex.compile(r"^\s*(?:builtins\.)?EOFError\s*$")


# torch/csrc/distributed/c10d/socket.cpp SocketConnectOp (torch 2.0+): a connect attempt
# to one of the store's addresses that fails ("The client socket has failed to connect to
# ...", "The IPv6 network addresses of ... cannot be retrieved") is logged as a warning and
# the next address (or a retry) is tried; only when none connects before the timeout does
# it raise DistNetworkError. A start-up that reached loading the model afterwards joined
# its process group, so the store was reached
_JOINED_PHASE = "weights_load"


def _check_store_connect(ctx: CheckContext) -> CheckOutcome | None:
    """The rule's pattern hits, less the warnings the same log's later progress (a line of
    weights_load or a later phase after it) shows to have been retried with success."""
    if not ctx.hits:
        return None
    joined = phase_index(_JOINED_PHASE)
    last_progress: dict[str, int] = {}
    for e in ctx.analysis.events:
        if phase_index(e.phase) >= joined and e.line > last_progress.get(e.source, 0):
            last_progress[e.source] = e.line
    kept = [
        h for h in ctx.hits
        if (h.level or "").upper() not in ("WARNING", "WARN")
        or last_progress.get(h.source, 0) <= h.line
    ]
    if not kept:
        return None
    message = kept[0].text[:400]
    if len(kept) > 1:
        message += f" ({len(kept)} lines)"
    return CheckOutcome(message=message, hits=tuple(kept))


def _check_child_pipe_eof(ctx: CheckContext) -> CheckOutcome | None:
    """A traceback in which a framework frame reads a multiprocessing pipe (the next frame
    is multiprocessing/connection.py) and ``EOFError`` ends it: the process at the pipe's
    other end exited before it wrote. SGLang's launcher reads each scheduler's ready
    message so (sglang/srt/entrypoints/engine.py ``_wait_for_scheduler_ready``, 0.4.3-0.5.23:
    ``scheduler_pipe_readers[i].recv()``; 0.5.23 raises "Rank N scheduler died during
    initialization" from it, earlier releases logged "Rank N scheduler is dead"), vLLM's
    executors their workers' (vllm/v1/executor/multiproc_executor.py ``wait_for_ready``)."""
    if "process.killed" in ctx.fired:
        return None
    # per stream: the framework frame whose call reads the pipe, once the pipe frame follows
    caller: dict[tuple[str, RankId | None, int | None], str | None] = {}
    last_fw: dict[tuple[str, RankId | None, int | None], str | None] = {}
    for rec in ctx.records:
        key = (rec.source, rec.rank, rec.pid)
        for i, text in enumerate((rec.message, *rec.continuation)):
            if "Traceback (most recent call last)" in text:
                caller[key] = last_fw[key] = None
                continue
            m = FRAME.search(text)
            if m is not None:
                path = m.group("path").replace("\\", "/")
                if path.endswith(_PIPE_FILE):
                    if last_fw.get(key) and not caller.get(key):
                        caller[key] = last_fw[key]
                elif _FRAMEWORK_FILE.search(path):
                    last_fw[key] = m.group("func")
                    caller[key] = None
                else:
                    last_fw[key] = None
                continue
            who = caller.get(key)
            if who is None or "EOFError" not in text or not _EOF_LINE.match(text):
                continue
            return _outcome_at(
                rec, i, text,
                f"{who} read a pipe from a child process and got EOFError: the child "
                "exited before it reported (look above for its own error)",
            )
    return None


# The frameworks' parameter weight loaders check each checkpoint tensor against the
# parameter it fills with a bare `assert` on `loaded_weight`: vLLM model_executor/layers/
# vocab_parallel_embedding.py VocabParallelEmbedding.weight_loader ("assert loaded_weight.
# shape[output_dim] == self.org_vocab_size", 0.4-0.34), linear.py's weight_loader /
# weight_loader_v2 ("assert param_data.shape == loaded_weight.shape", 0.2-0.34),
# model_loader/weight_utils.py default_weight_loader ("assert param.size() ==
# loaded_weight.size()"), and SGLang's copies (srt/layers/linear.py, vocab_parallel_
# embedding.py, model_loader/weight_utils.py, 0.3-0.5.23); most of those asserts carry no
# message, so the AssertionError line alone does not say that a shape did not fit
_WEIGHT_LOADER_PATH = regex.compile(r"/(?:sglang|vllm)(?:_[a-z0-9]+)?/")
_WEIGHT_ASSERT = regex.compile(r"^\s*assert\b.*\bloaded_weight\b")
_ASSERTION_LINE = regex.compile(r"^\s*(?:builtins\.)?AssertionError\b")


def _check_weight_loader_assert(ctx: CheckContext) -> CheckOutcome | None:
    """A traceback whose innermost frame is a framework's weight loader (``weight_loader``,
    ``weight_loader_v2``, ``default_weight_loader`` ...), stopped at an ``assert`` on the
    ``loaded_weight`` it was given, and ended by ``AssertionError``: a checkpoint tensor
    does not fit the parameter it is loaded into (weights.load_error), whatever the
    assertion's message (most have none)."""
    if "weights.load_error" in ctx.fired:
        return None
    # per stream: the innermost frame is a weight loader's, and its assert line once seen
    loader: dict[tuple[str, RankId | None, int | None], bool] = {}
    asserted: dict[tuple[str, RankId | None, int | None], tuple[Record, int, str] | None] = {}
    for rec in ctx.records:
        key = (rec.source, rec.rank, rec.pid)
        for i, text in enumerate((rec.message, *rec.continuation)):
            if "Traceback (most recent call last)" in text:
                loader[key], asserted[key] = False, None
                continue
            m = FRAME.search(text)
            if m is not None:
                func = m.group("func").rsplit(".", 1)[-1]
                path = m.group("path").replace("\\", "/")
                loader[key] = "weight_loader" in func and bool(_WEIGHT_LOADER_PATH.search(path))
                asserted[key] = None
                continue
            if not loader.get(key):
                continue
            if _WEIGHT_ASSERT.match(text):
                asserted[key] = (rec, i, text)
                continue
            at = asserted.get(key)
            if at is None or not _ASSERTION_LINE.match(text):
                continue
            src, si, stext = at
            return CheckOutcome(
                message=(
                    "a weight loader's check of a checkpoint tensor failed: "
                    f"{stext.strip()[:200]} ({text.strip()[:120]})"
                ),
                hits=(Hit.at(src, si, stext), Hit.at(rec, i, text)),
            )
    return None


# a shutdown someone asked for, which vLLM's own lines announce before its processes exit:
# the engine core's signal handler (v1/engine/core.py "[shutdown] EngineCore: trigger
# received signal=N", 0.25-0.34), the API server's (entrypoints/launcher.py "[shutdown] API
# server: shutdown triggered", 0.25-0.34) and uvicorn's own "Shutting down" (server.py)
_SHUTDOWN_ASKED = regex.compile(
    r"\[shutdown\] (?:EngineCore: trigger received signal|API server: shutdown triggered)|"
    r"^(?:INFO:\s+)?Shutting down\s*$"
)


def _check_engine_core_exited(ctx: CheckContext) -> CheckOutcome | None:
    """vLLM's API server saw its engine-core process exit (the rule's lines: v1/engine/
    core_client.py MPClient's liveness monitor, "[shutdown] MPClient: engine core exited
    unexpectedly; starting cleanup", 0.25-0.34) with no shutdown asked for before it in
    that log: the engine core died. After a signal the engine core or the API server
    logged receiving, the same line is the teardown of a deliberate stop."""
    if not ctx.hits:
        return None
    asked: dict[str, int] = {}  # source -> line of the first shutdown request
    for rec in ctx.records:
        msg = rec.message
        if rec.source not in asked and ("[shutdown] " in msg or "Shutting down" in msg) and (
            _SHUTDOWN_ASKED.search(msg)
        ):
            asked[rec.source] = rec.line
    hits = tuple(h for h in ctx.hits if h.line < asked.get(h.source, h.line + 1))
    if not hits:
        return None
    return CheckOutcome(
        message=(
            "the API server saw its engine-core process exit with no shutdown asked for: "
            f"{hits[0].text.strip()[:200]}"
        ),
        hits=hits[:3],
    )


# SGLang's warm-up (sglang/srt/entrypoints/http_server.py _wait_and_warmup, 0.3.0-0.5.23;
# srt/server.py before 0.4): once uvicorn listens, a thread asks GET /get_model_info (or
# /model_info) and sends one short request (/generate, /v1/chat/completions for a VLM,
# /encode for an embedding model, 8 new tokens at most); only when it returns does the
# server print "The server is fired up and ready to roll!". Uvicorn logs a request's
# access line when it is answered, so a POST line is a request that returned: the
# warm-up's or a client's, past the warm-up either way. A process that dies after the
# port opened, with no fired-up line and no answered request before it, died in the warm-up.
# (the launcher's polls and liveness checks answer without a forward pass; /health_generate
# runs a one-token generation through the scheduler, so its 2xx is an answered request)
_WARMUP_PROBE = regex.compile(
    r'"GET /(?:(?:get_)?(?:model_info|server_info)|health)[ ?]|"GET /health_generate[ ?][^"]*" [^2]'
)
_ACCESS = regex.compile(r'"(?:GET|POST|PUT|DELETE|PATCH|HEAD) /\S* HTTP/')
_FIRED_UP = regex.compile(r"The server is fired up and ready to roll")
_WARMUP_FIRST = regex.compile(r'"GET /(?:get_)?model_info[ ?]')
# the warm-up asks 8 new tokens at most; the scheduler logs its decode batches every 40
# steps (--decode-log-interval): a decode line is another request's
_DECODE_LOG = regex.compile(r"Decode batch[.,]")


def _check_warmup_died(ctx: CheckContext) -> CheckOutcome | None:
    """SGLang's process died after its HTTP server came up and before the warm-up request
    returned (no "fired up" line, no request but the warm-up's): warmup.failed."""
    if ctx.analysis.framework != "sglang" or "warmup.failed" in ctx.fired:
        return None
    # the port's opening (uvicorn's own lines) or the warm-up's own first call (GET
    # /get_model_info, /model_info): another access line (a client's or an orchestrator's
    # GET /health) proves the server listened, not when, and the warm-up may have returned
    # before the excerpt began
    listen = next(
        (
            e for e in ctx.analysis.events
            if e.phase == "listening"
            and (not _ACCESS.search(e.message) or _WARMUP_FIRST.search(e.message))
        ),
        None,
    )
    if listen is None:
        return None
    fatal = {
        (ev.source, ev.line)
        for f in _error_explains(ctx.fired)
        for ev in f.evidence
        if ev.source == listen.source and ev.line > listen.line
    }
    if not fatal:
        return None
    for rec in ctx.records:
        if rec.source != listen.source or rec.line < listen.line:
            continue
        if _FIRED_UP.search(rec.message) or _DECODE_LOG.match(rec.message):
            return None
        if _ACCESS.search(rec.message) and not _WARMUP_PROBE.search(rec.message):
            return None  # an answered request: the warm-up's or a client's
        if (rec.source, rec.line) in fatal:
            return CheckOutcome(
                message=(
                    "the server listened, then failed before its warm-up request returned "
                    f"(no 'fired up' line, no client request before it): {rec.message[:200]}"
                ),
                hits=(Hit.of(rec),),
            )
    return None


# SGLang's warm-up thread (sglang/srt/server.py 0.1-0.3, srt/entrypoints/http_server.py
# 0.4-0.5.23: ``threading.Thread(target=_wait_and_warmup, ...)``) raises out of the
# thread when its own request fails (a timeout, a reply that is no JSON, an HTTP error
# raised by ``res.raise_for_status()``); Python prints that thread's traceback, its frames
# through ``_wait_and_warmup``. A dump's thread name "(_wait_and_warmup)" is no frame.
_WARMUP_FRAME = regex.compile(r"/sglang/srt/(?:entrypoints/http_server|server)\.py$")


def _check_warmup_thread_raised(ctx: CheckContext) -> CheckOutcome | None:
    """A traceback through SGLang's ``_wait_and_warmup`` that ends in an exception line:
    the warm-up request itself failed. The hits are that frame and the exception."""
    from diag.rules.engine import handled_traceback

    for at, rec, i, text, frames in _traceback_ends(ctx.records):
        warm = [
            f for f in frames
            if f[3].group("func") == "_wait_and_warmup"
            and _WARMUP_FRAME.search(f[3].group("path").replace("\\", "/"))
        ]
        if not warm or not (is_exception_line(text) or _QUALIFIED_EXC.match(text)):
            continue
        if text.startswith("KeyboardInterrupt") or handled_traceback(ctx.records, at):
            continue
        first, fi, ftext, _ = warm[-1]
        return CheckOutcome(
            message=f"SGLang's warm-up thread raised {text[:200]}",
            hits=(
                Hit.at(first, fi, ftext),
                Hit(rec.source, rec.line + i, text, rec.rank, rec.ts, {}, rec.level),
            ),
        )
    return None


# CPython prints an exception by its class's module-qualified name (traceback.py
# format_exception_only): "zmq.error.Again: Resource temporarily unavailable",
# "triton.runtime.autotuner.OutOfResources: out of resource: shared memory",
# "jax._src.source_info_util.JaxStackTraceBeforeTransformation: TypeError: ...": class
# names the python.exception patterns (...Error, ...Exception, ...Exit) do not cover
_QUALIFIED_EXC = regex.compile(
    r"^(?P<exc>(?:[a-z_][a-z0-9_]*\.)+[A-Z][A-Za-z0-9_]{2,80})(?::\s+(?P<msg>.*)|\s*)$"
)


def _traceback_ends(
    records: Sequence[Record],
) -> Iterator[tuple[int, Record, int, str, list[tuple[Record, int, str, Any]]]]:
    """Each run of traceback frames and the line that ends it: (index of its record, the
    record, the line's place in it, the line stripped, the frames: (record, place, text,
    FRAME match)). The ending line is the first one after the frames (and their source
    lines) that is not indented and not a caret marker; a source's end ends the run."""
    frames: list[tuple[Record, int, str, Any]] = []
    source = None
    for at, rec in enumerate(records):
        if rec.source != source:
            source, frames = rec.source, []
        for i, text in enumerate((rec.message, *rec.continuation)):
            m = FRAME.search(text)
            if m is not None:
                frames.append((rec, i, text, m))
                continue
            if not frames or text[:1] in (" ", "\t") or not text.strip("^~ "):
                continue
            yield at, rec, i, text.strip(), frames
            frames = []


def _check_traceback_exception(ctx: CheckContext) -> CheckOutcome | None:
    """A traceback that ends in an exception line of any class: the line right after its
    frames (and their source lines) that names a module-qualified class, not handled
    (a request handler's, or one CPython ignored)."""
    if "python.exception" in ctx.fired:
        return None
    from diag.rules.engine import handled_traceback

    for at, rec, i, text, _ in _traceback_ends(ctx.records):
        m = _QUALIFIED_EXC.match(text)
        if m is None or handled_traceback(ctx.records, at):
            continue
        return _outcome_at(
            rec, i, text,
            f"a traceback ends in {m.group('exc')}: {(m.group('msg') or '')[:200]}",
        )
    return None


# what names a CUDA failure on the lines above torch's advisory: the error itself, or one
# that another finding reads (out of memory, no kernel image for the architecture)
_CUDA_HEAD = regex.compile(
    r"(?:CUDA|HIP) error|CUDA driver error|out of memory|no kernel image|cudaError|"
    r"CUDA_ERROR_|illegal memory access|device-side assert(?:ion)? triggered",
    regex.I,
)
# findings that already say which CUDA failure the advisory followed
_CUDA_FINDINGS = ("cuda.error", "cuda.oom", "cuda.arch_unsupported", "cuda.no_device")


def _check_cuda_error_advisory(ctx: CheckContext) -> CheckOutcome | None:
    """torch's advisory lines after a CUDA error's message (c10/cuda/CUDAException.cpp)
    with no line in the log that names the failure: a CUDA call failed, its own line was
    lost (the paste began after it, or the retrieval cut it)."""
    if not ctx.hits or any(f in ctx.fired for f in _CUDA_FINDINGS):
        return None
    for rec in ctx.records:
        for text in (rec.message, *rec.continuation):
            if _CUDA_HEAD.search(text[:2000]) is not None:
                return None
    first = ctx.hits[0]
    return CheckOutcome(
        message=(
            "torch's advisory that follows a CUDA error's message is in the log "
            f"({first.text.strip()[:120]}), the error's own line is not: a CUDA call failed"
        ),
        hits=ctx.hits[:3],
    )


# vLLM V0's KV-capacity check right after the profile run logged the block counts
# (vllm/engine/llm_engine.py _init_cache 0.1-0.3; vllm/worker/worker.py
# raise_if_cache_size_invalid 0.4.3-0.10.2, per fixtures/messages/messages.tsv): no block
# raises "No available memory for the cache blocks", and fewer than one sequence of the
# model's max length, block_size x num_gpu_blocks < max_model_len, raises "The model's max
# seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)"
# (the error line itself is often below a pasted window). The count line: "# GPU blocks: {},
# # CPU blocks: {}" (llm_engine.py 0.1-0.3, gpu_executor.py / distributed_gpu_executor.py
# 0.4-0.6), "# {device_name} blocks: ..." (executor_base.py 0.7-0.10: cuda, rocm); other
# devices (HPU, TPU, Neuron) have other default block sizes and are left out
_V0_BLOCKS = regex.compile(r"# (?:GPU|cuda|rocm) blocks: (?P<blocks>-?\d+), # CPU blocks: \d+")
_V0_BLOCK_SIZE = 16  # EngineArgs.block_size 0.1-0.5; the CUDA/ROCm platform default 0.6-0.10


def _block_size(config: Mapping[str, object]) -> int | None:
    """The args' block size where they give one, else vLLM V0's default; None where the
    args give one that cannot be read."""
    raw = config.get("raw")
    given = raw.get("block_size") if isinstance(raw, Mapping) else None
    if given is None or given == "None":
        return _V0_BLOCK_SIZE
    size = ascii_int(given)
    return size if size is not None and size > 0 else None


def _check_kv_blocks_short(ctx: CheckContext) -> CheckOutcome | None:
    """V0's '# GPU blocks: N, # CPU blocks: M' with N blocks of ``block_size`` tokens
    holding fewer tokens than the config's max model length (or N <= 0): the engine raises
    its KV-capacity ValueError next (cuda.oom), whether or not the log still shows it."""
    if "cuda.oom" in ctx.fired:
        return None
    max_len = ctx.analysis.config.get("max_model_len")
    block = _block_size(ctx.analysis.config)
    for rec in ctx.records:
        if "blocks: " not in rec.message:
            continue
        m = _V0_BLOCKS.search(rec.message)
        if m is None:
            continue
        blocks = int(m.group("blocks"))
        if blocks <= 0:
            return _outcome_at(
                rec, 0, rec.message,
                f"the profile left no KV-cache block ({m.group(0)}): vLLM raises 'No "
                "available memory for the cache blocks' next",
            )
        if block is None or not isinstance(max_len, int) or max_len <= 0:
            continue
        tokens = blocks * block
        if tokens < max_len:
            return _outcome_at(
                rec, 0, rec.message,
                f"{blocks} GPU blocks x {block} tokens = {tokens} tokens of KV cache, fewer "
                f"than one sequence of the max model length {max_len}: vLLM raises 'The "
                f"model's max seq len ({max_len}) is larger than the maximum number of "
                f"tokens that can be stored in KV cache ({tokens})' next",
            )
    return None


CHECKS: dict[str, Callable[[CheckContext], CheckOutcome | None]] = {
    "store_connect": _check_store_connect,
    "child_pipe_eof": _check_child_pipe_eof,
    "stack_collective_wait": _check_stack_collective,
    "specdec_acceptance": _check_specdec,
    "specdec_summary": _check_specdec_summary,
    "slow_weight_load": _check_slow_load,
    "rank_missing": _check_missing,
    "rank_straggler": _check_straggler,
    "unknown_model_type": _check_unknown_model_type,
    "unsupported_arch_raise": _check_unsupported_arch_raise,
    "weight_loader_assert": _check_weight_loader_assert,
    "engine_core_exited": _check_engine_core_exited,
    "traceback_exception": _check_traceback_exception,
    "error_ends_log": _check_error_ends_log,
    "faulthandler_dump": _check_faulthandler_dump,
    "warmup_died": _check_warmup_died,
    "warmup_thread_raised": _check_warmup_thread_raised,
    "compile_crash": _check_compile_crash,
    "cuda_error_advisory": _check_cuda_error_advisory,
    "kv_blocks_short": _check_kv_blocks_short,
    "dist_init_hang": _check_dist_init_hang,
    "stalled": _check_stalled,
    "cut_excerpt": _check_cut_excerpt,
    "exited": _check_exited,
    "no_listen_port": _check_no_listen_port,
    "shm_broadcast_wait": _check_shm_broadcast_wait,
}
