"""Is each rank still making progress? Budgets per phase, and what counts as progress.

A rank progresses while its phase changes, its shard or capture count grows, it logs a
kind of line it has not logged before, or (on the host) its process reads from disk or a
JIT cache grows. A line of a kind it already logged (a heartbeat such as ``Waiting for
...``, the same NCCL chatter) is not progress; a progress bar is, only while its count
grows. A rank stalls when it made no progress for longer than the budget of the phase it
is in. Pure logic: the caller passes the clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from diag.errors import InputError
from diag.model import PHASES

__all__ = [
    "DEFAULT_BUDGETS_S",
    "SERVER",
    "RankProgress",
    "Stall",
    "Tracker",
    "format_duration",
    "parse_budgets",
    "parse_duration",
]

# Generous by default: weight loading of a 1T model from network storage and a cold
# torch.compile / DeepGEMM JIT take tens of minutes; nothing else should.
DEFAULT_BUDGETS_S: Mapping[str, float] = {
    "launch": 600.0,
    "platform": 600.0,
    "dist_init": 900.0,
    "model_config": 600.0,
    "weights_load": 3600.0,
    "kv_cache": 900.0,
    "compile": 2700.0,
    "cuda_graph": 1800.0,
    "warmup": 900.0,
    "listening": 600.0,
}

SERVER = "server"  # the key of lines that belong to no rank (launcher, API server)

_DURATION = re.compile(
    r"^\s*(?:(\d{1,6})h)?\s*(?:(\d{1,6})m)?\s*(?:(\d{1,9}(?:\.\d{1,3})?)s?)?\s*$"
)
_DIGITS = re.compile(r"[0-9]+")
_BAR = re.compile(r"(?<![\d.])(\d{1,9})/(\d{1,9})(?![\d/])|(\d{1,3})%\|")
_HEARTBEAT = re.compile(r"\b(?:waiting for|still waiting|wait for|heartbeat)\b", re.I)


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``40m``, ``1h30m``, ``2.5s`` -> seconds; InputError otherwise."""
    m = _DURATION.match(text)
    if not text.strip() or m is None or not any(m.groups()):
        raise InputError(
            f"{text!r}: not a duration", help_text="Write durations as 90s, 40m or 1h30m."
        )
    h, mi, s = m.groups()
    return int(h or 0) * 3600.0 + int(mi or 0) * 60.0 + float(s or 0)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def parse_budgets(specs: Iterable[str], stall_after: float | None = None) -> dict[str, float]:
    """``--budget weights_load=40m,cuda_graph=20m`` (repeatable) over the defaults;
    ``--stall-after S`` replaces every default (explicit budgets still win)."""
    budgets = dict(DEFAULT_BUDGETS_S)
    if stall_after is not None:
        budgets = dict.fromkeys(budgets, stall_after)
    for spec in specs:
        for part in spec.split(","):
            if not part.strip():
                continue
            phase, sep, value = part.partition("=")
            phase = phase.strip()
            if not sep or phase not in PHASES or phase == "serving":
                known = ", ".join(p for p in PHASES if p != "serving")
                raise InputError(
                    f"--budget {part.strip()!r}: want PHASE=DURATION",
                    help_text=f"Phases: {known}. Example: --budget weights_load=40m",
                )
            budgets[phase] = parse_duration(value)
    return budgets


@dataclass(slots=True)
class RankProgress:
    """What the watcher knows of one rank (or of the rank-less server lines)."""

    key: str
    phase: str | None = None
    ended: bool = False  # the phase's own end marker was seen (between two phases)
    phase_since: float = 0.0
    last_progress: float = 0.0
    last_line: float | None = None
    why: str = "started"  # what the last progress was
    shards: tuple[int, int] | None = None
    shard_rate: float | None = None  # shards per second, from the watcher's own clock
    shard_first: tuple[float, int] | None = None
    lines: int = 0
    heartbeats: int = 0
    shapes: set[str] = field(default_factory=set)
    bars: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Stall:
    key: str
    phase: str | None
    silent_s: float
    budget_s: float
    why: str  # the last progress seen
    ended: bool = False

    @property
    def where(self) -> str:
        """``in weights_load`` or, once its end marker was seen, ``after weights_load``."""
        return f"{'after' if self.ended else 'in'} {self.phase or 'launch'}"


class Tracker:
    """Per-rank progress, fed with lines, analysis snapshots and host signals."""

    def __init__(self, budgets: Mapping[str, float], start: float) -> None:
        self.budgets = dict(budgets)
        self.start = start
        self.ranks: dict[str, RankProgress] = {}

    def _get(self, key: str, now: float) -> RankProgress:
        rp = self.ranks.get(key)
        if rp is None:
            rp = self.ranks[key] = RankProgress(
                key=key, phase_since=now, last_progress=now, why="first line"
            )
        return rp

    def line(self, key: str, message: str, now: float) -> bool:
        """One new log line of ``key``; True when it is progress."""
        rp = self._get(key, now)
        rp.lines += 1
        rp.last_line = now
        head = message[:200]
        bar = _BAR.search(head)
        shape = _DIGITS.sub("#", head).strip()
        if bar is not None:
            count = int(bar.group(1) or bar.group(3) or 0)
            prev = rp.bars.get(shape)
            rp.bars[shape] = count if prev is None else max(prev, count)
            if prev is None or count > prev:
                what = f"bar {bar.group(0).rstrip('|')}"
                shards = None
                if bar.group(2) and "shard" in head.lower():
                    shards = (int(bar.group(1)), int(bar.group(2)))
                    self._shards(rp, shards, now)
                if key == SERVER:
                    # a bar with no rank prefix (SGLang's shard and capture bars): whose it
                    # is cannot be told, so it counts for every rank
                    for other in self.ranks.values():
                        if other is not rp:
                            self._progress(other, now, what + " (no rank prefix)")
                            if shards is not None:
                                self._shards(other, shards, now)
                return self._progress(rp, now, what)
            rp.heartbeats += 1
            return False
        if _HEARTBEAT.search(head) or shape in rp.shapes:
            rp.heartbeats += 1
            return False
        if len(rp.shapes) < 10_000:
            rp.shapes.add(shape)
        return self._progress(rp, now, "new line")

    def phase(self, key: str, phase: str | None, shards: tuple[int, int] | None,
              now: float, *, ended: bool = False) -> bool:
        """The analysis says where ``key`` is; True when that moved."""
        rp = self._get(key, now)
        # the change came with a line that arrived at rp.last_line, not at this refresh
        now = min(now, rp.last_line) if rp.last_line is not None else now
        moved = False
        if phase is not None and phase != rp.phase:
            rp.phase, rp.phase_since, rp.ended = phase, now, ended
            moved = self._progress(rp, now, f"entered {phase}")
        elif phase is not None and ended and not rp.ended:
            rp.ended = True
            moved = self._progress(rp, now, f"{phase} ended")
        if shards is not None and shards != rp.shards:
            grew = rp.shards is None or shards[0] > rp.shards[0]
            self._shards(rp, shards, now)
            if grew:
                moved = self._progress(rp, now, f"shards {shards[0]}/{shards[1]}") or moved
        return moved

    def _shards(self, rp: RankProgress, shards: tuple[int, int], now: float) -> None:
        if rp.shard_first is None or shards[0] < rp.shard_first[1]:
            rp.shard_first = (now, shards[0])
        elif now > rp.shard_first[0] and shards[0] > rp.shard_first[1]:
            rp.shard_rate = (shards[0] - rp.shard_first[1]) / (now - rp.shard_first[0])
        rp.shards = shards

    def host(self, key: str | None, what: str, now: float) -> None:
        """Progress seen on the host (disk reads, JIT cache writes): for one rank, or for
        every rank (``key`` None) when it cannot be told whose it is."""
        targets = [self._get(key, now)] if key is not None else list(self.ranks.values())
        for rp in targets:
            self._progress(rp, now, what)

    def _progress(self, rp: RankProgress, now: float, why: str) -> bool:
        rp.last_progress = now
        rp.why = why
        server = self.ranks.get(SERVER)
        if server is not None and rp is not server:
            # the server as a whole progresses while any of its ranks does
            server.last_progress = max(server.last_progress, now)
        return True

    def budget(self, phase: str | None) -> float | None:
        if phase == "serving":
            return None
        return self.budgets.get(phase or "launch", self.budgets.get("launch"))

    def stalled(self, now: float) -> list[Stall]:
        """Ranks past their phase's budget; once one is, also those that went quiet at
        about the same moment (within a quarter of the budget, 1-30 s), so the first
        report of a hang names all of its ranks rather than the first to cross."""
        ranked = any(k != SERVER for k in self.ranks)
        quiet: list[tuple[RankProgress, float, float]] = []
        for rp in self.ranks.values():
            if ranked and rp.key == SERVER:
                continue  # with ranks, the rank-less lines stall only with them
            budget = self.budget(rp.phase)
            if budget is not None:
                quiet.append((rp, now - rp.last_progress, budget))
        if not any(silent > budget for _, silent, budget in quiet):
            return []
        return [
            Stall(rp.key, rp.phase, silent, budget, rp.why, rp.ended)
            for rp, silent, budget in quiet
            if silent > budget - max(1.0, min(30.0, budget / 4))
        ]

    def eta_s(self, key: str) -> float | None:
        rp = self.ranks.get(key)
        if rp is None or rp.shards is None or not rp.shard_rate:
            return None
        done, total = rp.shards
        return max(0.0, (total - done) / rp.shard_rate)
