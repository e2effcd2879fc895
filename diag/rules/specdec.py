"""Speculative-decoding acceptance: read the figures both frameworks print, judge break-even.

Line forms (vLLM, three generations, and SGLang's decode line):

- ``Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, ...``
- ``SpecDecoding metrics: Draft acceptance rate: 88.8%, Mean acceptance length: 5.44, ...``
- ``SpecDecoding metrics: Mean acceptance length: 1.03, ... Per-position acceptance rate:
  0.027, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.7%``
- ``Decode batch, #running-req: 3, ..., accept len: 2.17, accept rate: 0.54, ...``

The cost model is deliberately simple and stated in the finding: one decoding step that
drafts ``k`` tokens costs ``1 + k * draft_cost`` plain steps and yields ``L`` tokens (the
mean acceptance length, bonus token included), so the speed-up is ``L / (1 + k * c)`` and
break-even is ``L = 1 + k * c``. ``c = 0.4`` reproduces the 0.66x the story measured
(15% acceptance with 3 EAGLE-3 draft steps: L = 1.45, 1.45 / 2.2 = 0.66).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import regex

from diag.model import RankId, Record

__all__ = [
    "DEFAULT_DRAFT_COST",
    "SpecReport",
    "SpecSummary",
    "parse_spec_line",
    "speedup",
    "summarize",
]

DEFAULT_DRAFT_COST = 0.4

_NUM = r"(\d+(?:\.\d+)?)"
_RATE = regex.compile(r"(?:Avg )?Draft acceptance rate: " + _NUM + r"(%?)")
_MEAN_LEN = regex.compile(r"Mean acceptance length: " + _NUM)
_PER_POS = regex.compile(r"Per-position acceptance rate: ((?:\d+(?:\.\d+)?(?:, )?)+)")
_SG_LEN = regex.compile(r"accept len: " + _NUM)
_SG_RATE = regex.compile(r"accept rate: " + _NUM)
_ACCEPTED = regex.compile(r"Accepted: (\d+) tokens, Drafted: (\d+) tokens")
_V0_STEPS = regex.compile(r"Number of speculative tokens: (\d+)")
_V0_COUNTS = regex.compile(r"Number of accepted tokens: (\d+), Number of draft tokens: (\d+)")
_MARKERS = ("speculative metrics", "specdecoding metrics", "accept len:")


@dataclass(frozen=True, slots=True)
class SpecReport:
    """One line of acceptance figures (any of the forms above)."""

    source: str
    line: int
    text: str
    ts: dt.datetime | None
    rank: RankId | None
    rate: float | None  # accepted / drafted, 0..1
    mean_len: float | None  # tokens per step, bonus token included
    positions: int | None  # draft steps, where the line lists per-position rates
    accepted: int | None = None
    drafted: int | None = None


@dataclass(frozen=True, slots=True)
class SpecSummary:
    reports: tuple[SpecReport, ...]
    mean_len: float | None
    rate: float | None
    steps: int | None
    steps_source: str  # where the draft-step count came from
    speedup: float | None
    break_even_len: float | None

    @property
    def below_break_even(self) -> bool:
        return self.speedup is not None and self.speedup < 1.0


def parse_spec_line(rec: Record) -> SpecReport | None:
    text = rec.message[:4096]  # a metrics line is short; a huge one is something else
    low = text.lower()
    if not any(m in low for m in _MARKERS):
        return None
    rate: float | None = None
    mean_len: float | None = None
    positions: int | None = None
    accepted = drafted = None
    if "accept len:" in low:
        m = _SG_LEN.search(text)
        mean_len = float(m.group(1)) if m else None
        r = _SG_RATE.search(text)
        rate = float(r.group(1)) if r else None
    else:
        r = _RATE.search(text)
        if r:
            value = float(r.group(1))
            rate = value / 100.0 if r.group(2) == "%" else value
        m = _MEAN_LEN.search(text)
        mean_len = float(m.group(1)) if m else None
        p = _PER_POS.search(text)
        if p:
            positions = len([v for v in p.group(1).split(",") if v.strip()])
        s = _V0_STEPS.search(text)
        if s:
            positions = int(s.group(1))
        a = _ACCEPTED.search(text) or _V0_COUNTS.search(text)
        if a:
            accepted, drafted = int(a.group(1)), int(a.group(2))
    if rate is None and mean_len is None:
        return None
    return SpecReport(
        source=rec.source,
        line=rec.line,
        text=text.strip(),
        ts=rec.ts,
        rank=rec.rank,
        rate=rate,
        mean_len=mean_len,
        positions=positions,
        accepted=accepted,
        drafted=drafted,
    )


def speedup(mean_len: float, steps: int, draft_cost: float = DEFAULT_DRAFT_COST) -> float:
    """Estimated decode speed relative to no speculation (see the module docstring)."""
    return mean_len / (1.0 + steps * draft_cost)


def _config_steps(config: Mapping[str, object]) -> int | None:
    spec = config.get("speculative")
    candidates: list[object] = []
    if isinstance(spec, Mapping):
        candidates += [spec.get(k) for k in ("num_steps", "num_speculative_tokens", "steps")]
    candidates += [
        config.get(k)
        for k in ("speculative_num_steps", "num_speculative_tokens", "speculative_num_draft_tokens")
    ]
    for value in candidates:
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value > 0:
            return value
        if isinstance(value, str) and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def summarize(
    records: Iterable[Record],
    config: Mapping[str, object],
    *,
    draft_cost: float = DEFAULT_DRAFT_COST,
) -> SpecSummary | None:
    """Mean acceptance over every report in the log, and the estimated speed-up."""
    reports = [r for r in (parse_spec_line(rec) for rec in records) if r is not None]
    if not reports:
        return None
    accepted = sum(r.accepted for r in reports if r.accepted is not None)
    drafted = sum(r.drafted for r in reports if r.drafted is not None)
    rates = [r.rate for r in reports if r.rate is not None]
    if drafted > 0:
        rate: float | None = accepted / drafted
    else:
        rate = sum(rates) / len(rates) if rates else None
    lens = [r.mean_len for r in reports if r.mean_len is not None]
    steps = _config_steps(config)
    steps_source = "config"
    if steps is None:
        positions = [r.positions for r in reports if r.positions]
        if positions:
            steps = max(positions)
            steps_source = "per-position rates"
    mean_len = sum(lens) / len(lens) if lens else None
    if mean_len is None and rate is not None and steps is not None:
        mean_len = 1.0 + steps * rate
        steps_source += "; length from rate"
    if steps is None and mean_len is not None and rate is not None and rate > 0:
        # L = 1 + k * rate  ->  k
        est = round((mean_len - 1.0) / rate)
        if est >= 1:
            steps = est
            steps_source = "length/rate"
    ratio = speedup(mean_len, steps, draft_cost) if mean_len and steps else None
    return SpecSummary(
        reports=tuple(reports),
        mean_len=mean_len,
        rate=rate,
        steps=steps,
        steps_source=steps_source if steps is not None else "unknown",
        speedup=ratio,
        break_even_len=(1.0 + steps * draft_cost) if steps else None,
    )
