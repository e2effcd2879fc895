"""Renderings of ``diag watch``: the live table (rich), one plain line per event (a pipe),
one JSON object per event (``--json``), and the phase-duration summary once ready."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from diag.model import Finding
from diag.watch.engine import RankRow, WatchEvent, WatchView
from diag.watch.progress import format_duration

__all__ = ["event_json", "event_line", "live_renderable", "summary_lines"]

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _clean(text: str) -> str:
    """No control characters from a log reach the terminal (OSC, clear screen...)."""
    return "".join(c if c.isprintable() or c == " " else "\N{SYMBOL FOR ESCAPE}"
                   if c == "\x1b" else "?" for c in text)


def event_line(e: WatchEvent) -> str:
    return f"{e.at:%H:%M:%S} {e.kind:9} {_clean(e.text)}"


def event_json(e: WatchEvent) -> str:
    return json.dumps(
        {"event": e.kind, "at": e.at.isoformat(), "text": e.text, **e.data},
        default=str, sort_keys=False,
    )


def _progress(r: RankRow) -> str:
    if r.shards is None:
        return ""
    done, total = r.shards
    out = f"{done}/{total}"
    if r.rate:
        out += f" {r.rate * 60:.1f}/min"
    if r.eta_s is not None and done < total:
        out += f" ETA {format_duration(r.eta_s)}"
    return out


def _row_style(r: RankRow) -> str:
    if r.stalled:
        return "bold red"
    if r.budget_s and r.quiet_s > r.budget_s / 2:
        return "yellow"
    return ""


def live_renderable(v: WatchView, findings_shown: int = 8) -> Group:
    head = Text.assemble(
        ("diag watch ", "bold"),
        (_clean(v.source), ""),
        f"  {v.framework}",
        f"  {_clean(v.config)}" if v.config else "",
        f"  elapsed {format_duration(v.elapsed_s)}  {v.lines} lines  ",
        (v.state, "bold red" if v.state == "stalled" else "bold green"
         if v.state == "ready" else "bold"),
    )
    table = Table(box=None, pad_edge=False, expand=False, header_style="bold")
    for col in ("rank", "phase", "progress", "in phase", "last line", "no progress", "budget",
                "last progress"):
        table.add_column(col, no_wrap=True)
    for r in v.rows:
        table.add_row(
            r.key, r.phase or "-", _progress(r), format_duration(r.in_phase_s),
            format_duration(r.last_line_s), format_duration(r.quiet_s),
            format_duration(r.budget_s) if r.budget_s is not None else "-", _clean(r.why)[:40],
            style=_row_style(r),
        )
    parts: list[Text | Table] = [head, table]
    shown: Sequence[Finding] = sorted(
        v.findings, key=lambda f: ("error", "warning", "info").index(f.severity)
    )[:findings_shown]
    parts.extend(
        Text.assemble((f"{f.severity:7} ", _STYLE.get(f.severity, "")), f"{f.id}: ",
                      _clean(f.message)[:160])
        for f in shown
    )
    return Group(*parts)


def summary_lines(rows: Sequence[tuple[str, Sequence[tuple[str, float | None]]]]) -> list[str]:
    """Phase durations per rank: ``TP0  dist_init 3s  weights_load 34s ...``."""
    out = []
    for key, phases in rows:
        cells = "  ".join(f"{ph} {format_duration(d)}" for ph, d in phases)
        out.append(f"{key:8} {cells}")
    return out
