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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from diag.model import RankId, Record
from diag.parse.serving import SPEC_MARKERS, ServingFigures, SpecLine, scan_chunk

__all__ = [
    "DEFAULT_DRAFT_COST",
    "RecordList",
    "SpecReport",
    "SpecSummary",
    "figures_of",
    "parse_spec_line",
    "speedup",
    "summarize",
]

DEFAULT_DRAFT_COST = 0.4


class RecordList(list[Record]):
    """The analysis's records, with the serving figures of the whole input (the columns
    :mod:`diag.parse.serving` read from every line, whichever lines became records)."""

    __slots__ = ("serving",)

    def __init__(self, records: Iterable[Record], serving: ServingFigures | None) -> None:
        super().__init__(records)
        self.serving = serving


@dataclass(frozen=True, slots=True)
class SpecReport:
    """One line of acceptance figures (any of the forms above), kept as evidence."""

    source: str
    line: int
    text: str
    ts: dt.datetime | None
    rank: RankId | None


@dataclass(frozen=True, slots=True)
class SpecSummary:
    reports: tuple[SpecReport, ...]  # evidence: the first two reports and the last
    count: int  # report lines in the whole input
    mean_len: float | None
    rate: float | None
    steps: int | None
    steps_source: str  # where the draft-step count came from
    speedup: float | None
    break_even_len: float | None

    @property
    def below_break_even(self) -> bool:
        return self.speedup is not None and self.speedup < 1.0


@dataclass(frozen=True, slots=True)
class LineFigures:
    """The acceptance figures of one line."""

    rate: float | None  # accepted / drafted, 0..1
    mean_len: float | None  # tokens per step, bonus token included
    positions: int | None  # draft steps, where the line lists per-position rates


def parse_spec_line(rec: Record) -> LineFigures | None:
    """The figures of one spec-decoding report line (None for any other line); the same
    reading as the whole-input columns."""
    text = rec.message[:4096]
    if not any(m in text for m in SPEC_MARKERS):
        return None
    fig = ServingFigures()
    scan_chunk(fig, text, rec.source, rec.line - 1)
    if fig.accept_rate.n == 0 and fig.accept_len.n == 0:
        return None
    return LineFigures(fig.accept_rate.mean, fig.accept_len.mean, fig.positions)


def figures_of(records: Sequence[Record]) -> ServingFigures:
    """The serving figures: the whole input's when the records carry them (the analyser's
    :class:`RecordList`), else read from the records themselves."""
    fig = getattr(records, "serving", None)
    if isinstance(fig, ServingFigures) and fig.spec_reports:
        return fig
    own = ServingFigures()
    for rec in records:
        text = rec.message[:4096]  # a metrics line is short; a huge one is something else
        if any(m in text for m in SPEC_MARKERS):
            scan_chunk(own, text, rec.source, rec.line - 1)
    return own


def _report(line: SpecLine, records: Sequence[Record]) -> SpecReport:
    """The evidence line with its time and rank (from its record, else parsed here)."""
    for rec in records:
        if rec.line == line.line and rec.source == line.source:
            return SpecReport(rec.source, rec.line, rec.message.strip(), rec.ts, rec.rank)
    from diag.parse.grammars import parse_line
    from diag.parse.text import strip_ansi

    p = parse_line(strip_ansi(line.text))
    return SpecReport(line.source, line.line, p.message.strip(), p.ts, p.rank)


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
    records: Sequence[Record],
    config: Mapping[str, object],
    *,
    draft_cost: float = DEFAULT_DRAFT_COST,
) -> SpecSummary | None:
    """Mean acceptance over every report in the log, and the estimated speed-up."""
    fig = figures_of(records)
    if not fig.spec_reports or (fig.accept_len.n == 0 and fig.accept_rate.n == 0):
        return None
    if fig.drafted > 0:
        rate: float | None = fig.accepted / fig.drafted
    else:
        rate = fig.accept_rate.mean
    steps = _config_steps(config)
    steps_source = "config"
    if steps is None and fig.positions:
        steps = fig.positions
        steps_source = "per-position rates"
    mean_len = fig.accept_len.mean
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
    lines = list(fig.first)
    if fig.last is not None and all(fig.last.line != x.line or fig.last.source != x.source
                                    for x in lines):
        lines.append(fig.last)
    # the records that are evidence, looked up once
    wanted = {(x.source, x.line) for x in lines}
    found = [r for r in records if (r.source, r.line) in wanted]
    return SpecSummary(
        reports=tuple(_report(x, found) for x in lines),
        count=fig.spec_reports,
        mean_len=mean_len,
        rate=rate,
        steps=steps,
        steps_source=steps_source if steps is not None else "unknown",
        speedup=ratio,
        break_even_len=(1.0 + steps * draft_cost) if steps else None,
    )
