"""The terminal view of an analysis, drawn with rich.

``render_terminal(analysis)`` returns one renderable: a header (framework, model,
parallel layout, log span), a per-rank Gantt chart on a shared time axis (phases as
coloured segments, end-of-log silence marked), stragglers and missing ranks, findings by
severity with their evidence, stack groups, and the rules that were checked and did not
fire. Nothing here prints: the command hands the renderable to a Console.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Iterable, Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from diag.model import (
    PHASES,
    Analysis,
    Combined,
    Finding,
    LiveRank,
    PhaseInterval,
    RankTimeline,
    StackFrame,
    StackGroup,
    StackProcess,
    phase_index,
)
from diag.report.combined import as_combined
from diag.report.common import (
    collapse_ranks,
    fmt_duration,
    fmt_time,
    frame_label,
    layout,
    log_span,
    member_label,
    model_name,
    not_fired,
    phase_order,
    phase_stats,
    silence_alert,
    sorted_findings,
    time_span,
    weights_summary,
)
from diag.report.sanitize import Sanitized

__all__ = [
    "MAX_EVIDENCE",
    "MAX_GANTT_ROWS",
    "OTHER_PHASE_STYLE",
    "PHASE_LETTERS",
    "PHASE_STYLES",
    "SEVERITY_STYLES",
    "short_names",
    "GanttChart",
    "LiveTable",
    "render_terminal",
]

# Phase colours read on a dark and on a light background alike: fixed 256-colour entries
# (not the 16 the terminal's theme redefines) of middle luminance, each with a contrast
# of 3:1 or more against both black and white (WCAG's floor for graphics; a test checks
# it). No white, black or pale grey: "serving" in bright white vanished on a light theme.
PHASE_STYLES: dict[str, str] = {
    "launch": "grey50",
    "platform": "light_slate_grey",
    "dist_init": "dodger_blue2",
    "model_config": "steel_blue3",
    "weights_load": "dark_goldenrod",
    "kv_cache": "magenta3",
    "compile": "dark_orange3",
    "cuda_graph": "green4",
    "warmup": "chartreuse4",
    "listening": "slate_blue3",
    "serving": "turquoise4",
}
OTHER_PHASE_STYLE = "grey50"  # a phase the table does not name
# without colour each phase is drawn with its letter (a pipe, `less`, NO_COLOR)
PHASE_LETTERS: dict[str, str] = {
    "launch": "L",
    "platform": "P",
    "dist_init": "D",
    "model_config": "M",
    "weights_load": "W",
    "kv_cache": "K",
    "compile": "C",
    "cuda_graph": "G",
    "warmup": "U",
    "listening": "H",
    "serving": "S",
}
SEVERITY_STYLES: dict[str, str] = {
    "error": "bold white on red",
    "warning": "bold black on yellow",
    "info": "bold white on blue",
}
PHASE_CHAR = "█"
GAP_CHAR = "·"
SILENT_CHAR = "░"
MAX_GANTT_ROWS = 64
MAX_EVIDENCE = 3
MAX_MESSAGE_LINES = 3
SHORT_EVIDENCE = 2  # evidence lines per finding in the short (default) view
# (source, line) of an evidence line -> the log lines around it, as (number, text)
ContextLines = dict[tuple[str, int], list[tuple[int, str]]]


def _style(phase: str) -> str:
    return PHASE_STYLES.get(phase, OTHER_PHASE_STYLE)


def _plain(console: Console) -> bool:
    """No colour on this console: phases are told apart by letters."""
    return console.no_color or console.color_system is None


def _char(phase: str, plain: bool) -> str:
    if not plain:
        return PHASE_CHAR
    return PHASE_LETTERS.get(phase, (phase[:1] or "?").lower())


def _listening_reached(phase: str | None) -> bool:
    return phase_index(phase) >= phase_index("listening")


# ---------------------------------------------------------------------------
# header


def _header(a: Analysis, verbose: bool = True) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    fw = Text(a.framework or "unknown", style="bold cyan")
    if a.version:
        fw.append(f" {a.version}", style="cyan")
    grid.add_row("framework", fw)
    name = model_name(a.config)
    if name:
        model = Text(name)
        quant = a.config.get("quantization")
        if quant:
            model.append(f"   quantization {quant}", style="dim")
        grid.add_row("model", model)
    parts = layout(a.config)
    layout_text = Text(" · ".join(f"{k} {v}" for k, v in parts) if parts else "not in the log")
    seen = len(a.ranks)
    counts = f"   {seen} rank{'s' if seen != 1 else ''} seen"
    if a.expected_ranks:
        counts += f", {len(a.expected_ranks)} expected"
    layout_text.append(counts, style="dim")
    grid.add_row("layout", layout_text)
    start, end, what = log_span(a)
    if start is not None and end is not None:
        same_day = start.date() == end.date()
        span = Text(f"{fmt_time(start, date=True)} → {fmt_time(end, date=not same_day)}")
        span.append(f"  ({fmt_duration((end - start).total_seconds())}, {what})", style="dim")
    else:
        span = Text("no time stamps", style="dim")
    span.append(f"   {a.records} records", style="dim")
    if a.undecodable_bytes:
        span.append(f", {a.undecodable_bytes} undecodable bytes replaced", style="yellow")
    if a.sources and not verbose and len(a.sources) <= 2:  # the short view: one row
        span.append("   " + ", ".join(_short_source(x) for x in a.sources), style="dim")
    grid.add_row("log", span)
    if a.sources and (verbose or len(a.sources) > 2):
        shown = ", ".join(a.sources[:3])
        if len(a.sources) > 3:
            shown += f" (+{len(a.sources) - 3} more)"
        grid.add_row("sources", Text(shown, style="dim"))
    last = a.last_phase
    verdict = Text(last or "no startup phase recognised", style=_style(last or "") + " bold")
    if last is not None and not _listening_reached(last):
        verdict.append("  (the log never shows `listening`)", style="dim")
    grid.add_row("reached", verdict)
    return Group(Text("diag analyze", style="bold underline"), grid)


# ---------------------------------------------------------------------------
# Gantt


def _col(ts: dt.datetime, t0: dt.datetime, span_s: float, width: int) -> int:
    offset = (ts - t0).total_seconds()
    col = int(offset / span_s * width) if span_s > 0 else 0
    return min(max(col, 0), width - 1)


class GanttChart:
    """One row per rank on a shared time axis; fits itself to the console width."""

    def __init__(self, analysis: Analysis, *, max_rows: int = MAX_GANTT_ROWS) -> None:
        self.analysis = analysis
        self.max_rows = max_rows

    def _rows(self) -> list[tuple[str, RankTimeline | None, tuple[PhaseInterval, ...]]]:
        a = self.analysis
        rows: list[tuple[str, RankTimeline | None, tuple[PhaseInterval, ...]]] = [
            (r.rank.label, r, r.phases) for r in sorted(a.ranks, key=lambda r: r.rank.sort_key)
        ]
        if a.global_phases:
            rows.insert(0, ("(no rank)", None, a.global_phases))
        return rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        a = self.analysis
        plain = _plain(console)
        rows = self._rows()
        if not rows:
            yield Text("No rank logged a recognised startup phase.", style="dim")
            return
        stragglers = {r.label for r in a.stragglers}
        shown = rows[: self.max_rows]
        label_w = max(4, *(len(label) for label, _, _ in shown))
        if a.missing_ranks:
            label_w = max(label_w, *(len(r.label) for r in a.missing_ranks))
        label_w = min(label_w, 24)
        tail_w = 13 + 7 + 19  # " last_phase  " + " behind" + " silent 12 h 30 min"
        width = max(12, options.max_width - label_w - 1 - tail_w)
        t0, t1 = time_span(a)
        span_s = (t1 - t0).total_seconds() if t0 is not None and t1 is not None else 0.0
        timed = span_s >= 1.0  # a log within one second has no useful time axis
        # silence past the last line (measured against a later "now"): a broken axis
        beyond = _silence_beyond(a, t1)
        zone_w = min(14, max(4, width // 6)) if beyond > 0 else 0
        axis_w = width - zone_w - (1 if zone_w else 0)

        title = Text("Timeline", style="bold")
        title.append(
            "  one row per rank; "
            + (
                "shared time axis"
                if timed
                else "phases in order, "
                + ("all within one second" if t0 is not None else "no times")
            ),
            style="dim",
        )
        yield title
        for label, rank, phases in shown:
            style = "bold yellow" if label in stragglers else "bold"
            line = Text()
            line.append(f"{label[:label_w]:<{label_w}} ", style=style)
            if timed and t0 is not None and t1 is not None:
                line.append_text(self._bar(rank, phases, t0, span_s, axis_w, plain))
                if zone_w:
                    line.append_text(self._zone(rank, t1, zone_w, a))
            else:
                line.append_text(self._chain(rank, phases, width))
            last = rank.last_phase if rank is not None else _last(phases)
            line.append(f" {(last or '-'):<12}", style=_style(last or ""))
            if label in stragglers:
                line.append(" behind", style="bold yellow")
            if rank is not None and rank.silent_s is not None and rank.silent_s >= 1:
                line.append(
                    f" silent {fmt_duration(rank.silent_s)}",
                    style="bold red" if silence_alert(rank, a) else "dim",
                )
            line.no_wrap = True
            line.overflow = "ellipsis"
            yield line
        if len(rows) > len(shown):
            yield Text(f"… {len(rows) - len(shown)} more ranks (see --json)", style="dim")
        for missing in a.missing_ranks:
            line = Text()
            line.append(f"{missing.label[:label_w]:<{label_w}} ", style="bold red")
            line.append("missing: never logged", style="red")
            yield line
        if timed and t0 is not None and t1 is not None:
            axis = Text(" " * (label_w + 1))
            left, right = fmt_time(t0), fmt_time(t1)
            gap = max(1, axis_w - len(left) - len(right))
            axis.append(f"{left}{'─' * gap}{right}", style="dim")
            if zone_w:
                axis.append(" " + f"+{fmt_duration(beyond)}"[:zone_w], style="red")
            yield axis
        yield self._legend(plain)

    def _bar(
        self,
        rank: RankTimeline | None,
        phases: Iterable[PhaseInterval],
        t0: dt.datetime,
        span_s: float,
        width: int,
        plain: bool = False,
    ) -> Text:
        cells: list[str | None] = [None] * width
        covered = [False] * width
        first: int | None = None
        last_ts = rank.last_ts if rank is not None else None
        ordered = sorted(
            (p for p in phases if p.start is not None),
            key=lambda p: (p.start, phase_index(p.phase)),
        )
        for p in ordered:
            assert p.start is not None
            end = p.end or last_ts or p.start
            s = _col(p.start, t0, span_s, width)
            e = max(s + 1, _col(end, t0, span_s, width) + (1 if end > p.start else 0))
            for i in range(s, min(e, width)):
                cells[i] = p.phase
            first = s if first is None else min(first, s)
        end_col = _col(last_ts, t0, span_s, width) if last_ts is not None else None
        if first is not None:
            stop = (
                end_col
                if end_col is not None
                else max((i for i, c in enumerate(cells) if c is not None), default=first)
            )
            for i in range(first, min(stop + 1, width)):
                covered[i] = True
        silent_from = (end_col + 1) if end_col is not None else width
        alert = rank is not None and silence_alert(rank, self.analysis)
        runs: list[tuple[str, str]] = []  # (char, style), merged into runs below
        for i, phase in enumerate(cells):
            if phase is not None:
                runs.append((_char(phase, plain), _style(phase)))
            elif covered[i]:
                runs.append((GAP_CHAR, "dim"))
            elif rank is not None and first is not None and i >= silent_from:
                runs.append((SILENT_CHAR, "red" if alert else "dim"))
            else:
                runs.append((" ", ""))
        text = Text()
        start = 0
        for i in range(1, len(runs) + 1):
            if i == len(runs) or runs[i] != runs[start]:
                char, style = runs[start]
                text.append(char * (i - start), style=style)
                start = i
        return text

    @staticmethod
    def _zone(
        rank: RankTimeline | None, t1: dt.datetime, zone_w: int, a: Analysis
    ) -> Text:
        """The broken-axis zone: silence that runs past the last line of the log."""
        text = Text()
        text.append("┊", style="dim")
        if rank is None or rank.last_ts is None or rank.silent_s is None:
            return text.append(" " * zone_w)
        reaches = rank.last_ts + dt.timedelta(seconds=rank.silent_s) > t1
        if reaches:
            text.append(SILENT_CHAR * zone_w, style="red" if silence_alert(rank, a) else "dim")
        else:
            text.append(" " * zone_w)
        return text

    @staticmethod
    def _chain(rank: RankTimeline | None, phases: Iterable[PhaseInterval], width: int) -> Text:
        ids = phase_order(rank) if rank is not None else _ordered_ids(phases)
        text = Text()
        for i, phase in enumerate(ids):
            if i:
                text.append(" → ", style="dim")
            text.append(phase, style=_style(phase))
        text.truncate(width, overflow="ellipsis", pad=True)
        return text

    def _legend(self, plain: bool = False) -> Text:
        seen: set[str] = set()
        for r in self.analysis.ranks:
            seen.update(p.phase for p in r.phases)
        seen.update(p.phase for p in self.analysis.global_phases)
        legend = Text()
        for phase in [p for p in PHASES if p in seen] + sorted(seen - set(PHASES)):
            legend.append(_char(phase, plain), style=_style(phase))
            legend.append(f" {phase}  ")
        legend.append(GAP_CHAR, style="dim")
        legend.append(" no phase  ")
        legend.append(SILENT_CHAR, style="red")
        legend.append(" silent")
        return legend


def _silence_beyond(a: Analysis, t1: dt.datetime | None) -> float:
    """Seconds of silence that reach past the last time stamp of the log (0 if none)."""
    if t1 is None:
        return 0.0
    ends = [
        r.last_ts + dt.timedelta(seconds=r.silent_s)
        for r in a.ranks
        if r.last_ts is not None and r.silent_s is not None
    ]
    try:
        beyond = max(ends, default=t1) - t1
    except TypeError:
        return 0.0
    return beyond.total_seconds() if beyond.total_seconds() >= 1 else 0.0


def _ordered_ids(phases: Iterable[PhaseInterval]) -> list[str]:
    seen = {p.phase for p in phases}
    return [p for p in PHASES if p in seen] + sorted(seen - set(PHASES))


def _last(phases: Iterable[PhaseInterval]) -> str | None:
    best = max(phases, key=lambda p: phase_index(p.phase), default=None)
    return best.phase if best else None


# ---------------------------------------------------------------------------
# stragglers, findings, stacks, rules


def _ranks_summary(a: Analysis) -> RenderableType | None:
    lines: list[Text] = []
    if a.stragglers:
        by_label = {r.rank.label: r for r in a.ranks}
        others = [r for r in a.ranks if r.rank not in set(a.stragglers)]
        furthest = max((r.last_phase for r in others), key=phase_index, default=None)
        latest = max((r.last_ts for r in others if r.last_ts is not None), default=None)
        details = []
        for s in a.stragglers:
            rt = by_label.get(s.label)
            text = s.label
            if rt is not None and rt.last_phase:
                text += f" at {rt.last_phase}"
                if rt.last_phase == furthest and rt.last_ts is not None and latest is not None:
                    gap = (latest - rt.last_ts).total_seconds()
                    if gap >= 1:
                        text += f", last line {fmt_duration(gap)} before the others"
            details.append(text)
        line = Text("Behind the others: ", style="bold yellow")
        line.append("; ".join(details))
        if furthest:
            line.append(f"  (the others reached {furthest})", style="dim")
        lines.append(line)
    if a.missing_ranks:
        line = Text("Missing ranks: ", style="bold red")
        line.append(collapse_ranks([r.label for r in a.missing_ranks], []))
        if a.expected_ranks:
            line.append(
                f"  ({len(a.expected_ranks)} expected from the config, "
                f"{len(a.missing_ranks)} never logged)",
                style="dim",
            )
        lines.append(line)
    return Group(*lines) if lines else None


def _finding_view(
    f: Finding,
    all_ranks: list[str],
    *,
    verbose: bool = True,
    max_evidence: int = MAX_EVIDENCE,
    context: ContextLines | None = None,
) -> RenderableType:
    head = Text()
    head.append(f" {f.severity.upper()} ", style=SEVERITY_STYLES.get(f.severity, "bold"))
    head.append(f" {f.id}", style="bold")
    if f.title:
        head.append(f"  {f.title}")
    ranks = collapse_ranks(f.ranks, all_ranks)
    if ranks:
        head.append(f"  [{ranks}]", style="cyan")
    head.no_wrap = True  # one line per finding; a long rank list ends in an ellipsis
    head.overflow = "ellipsis"
    body: list[RenderableType] = []
    if f.role == "cascade":
        body.append(
            Text(
                f"cascade of {f.cascade_of or 'another finding'}: "
                "likely a consequence, not the cause",
                style="dim italic",
            )
        )
    message = _clip(f.message or f.summary, MAX_MESSAGE_LINES if verbose else 2)
    if message:
        body.append(Text(message))
    for ev in f.evidence[:max_evidence]:
        around = (context.get((ev.source, ev.line)) if context is not None else None) or []
        body.extend(_near(ev.source, n, text) for n, text in around if n < ev.line)
        line = Text()
        line.append(f"{_short_source(ev.source)}:{ev.line}", style="dim")
        if ev.rank:
            line.append(f"  {ev.rank}", style="cyan")
        if ev.ts is not None:
            line.append(f"  {fmt_time(ev.ts)}", style="dim")
        line.append("  " + (ev.text.splitlines()[0] if ev.text else ""))
        line.no_wrap = True
        line.overflow = "ellipsis"
        body.append(line)
        body.extend(_near(ev.source, n, text) for n, text in around if n > ev.line)
    total = max(f.evidence_total, len(f.evidence))
    hidden = total - min(len(f.evidence), max_evidence)
    if hidden > 0:
        body.append(Text(f"… {hidden} more", style="dim"))
    if not verbose:
        return Group(head, Padding(Group(*body), (0, 0, 0, 4), expand=False))
    for label, value in (("why", f.why), ("remedy", f.remedy), ("caveat", f.caveat)):
        if value:
            t = Text()
            t.append(f"{label}: ", style="bold")
            t.append(" ".join(value.split()))
            body.append(t)
    links = []
    for ref in f.references:  # one per line, never folded or cut: a URL stays clickable
        link = Text("    see " + ref, style="dim")  # (outside the padding, which crops)
        link.no_wrap = True
        link.overflow = "ignore"
        links.append(link)
    return Group(head, Padding(Group(*body), (0, 0, 0, 4), expand=False), *links)


def _near(source: str, number: int, text: str) -> Text:
    """A log line around an evidence line (``--context N``), dim and indented."""
    near = Text(f"  {_short_source(source)}:{number}  {text}", style="dim")
    near.no_wrap = True
    near.overflow = "ellipsis"
    return near


def _clip(message: str, limit: int = MAX_MESSAGE_LINES) -> str:
    """The first lines of a finding's message (tracebacks belong in the evidence)."""
    lines = [x.rstrip() for x in message.strip().splitlines() if x.strip()]
    if len(lines) <= limit:
        return "\n".join(lines)
    return "\n".join([*lines[:limit], f"… ({len(lines) - limit} more lines)"])


_SHORT_NAMES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "diag_short_names", default=None
)


def short_names(sources: Sequence[str]) -> dict[str, str]:
    """Each source by its shortest trailing path that no other source shares:
    ``node0/server.log`` and ``node1/server.log``, not ``server.log`` twice."""
    parts = {s: [p for p in s.split("/") if p] or [s] for s in dict.fromkeys(sources)}
    out: dict[str, str] = {}
    for s, ps in parts.items():
        k = 1
        while k < len(ps) and any(
            o != s and parts[o][-k:] == ps[-k:] for o in parts
        ):
            k += 1
        out[s] = "/".join(ps[-k:])
    return out


def _short_source(source: str) -> str:
    if not source:
        return "?"
    table = _SHORT_NAMES.get()
    if table is not None and source in table:
        return table[source]
    return source.rsplit("/", 1)[-1]


def _frames_text(frames: tuple[StackFrame, ...], indent: str, limit: int = 5) -> list[Text]:
    out = []
    for fr in frames[:limit]:
        t = Text(indent)
        t.append(frame_label(fr), style="dim" if fr.native else "")
        t.no_wrap = True
        t.overflow = "ellipsis"
        out.append(t)
    if len(frames) > limit:
        out.append(Text(f"{indent}… {len(frames) - limit} outer frames", style="dim"))
    return out


def _stacks_view(groups: tuple[StackGroup, ...], procs: tuple[StackProcess, ...]) -> RenderableType:
    title = Text("Stacks", style="bold")
    if procs and all(p.mode == "traceback" for p in procs):
        title.append("  from tracebacks: where each error surfaced, not a dump", style="dim")
    parts: list[RenderableType] = [title]
    titles_by_pid = {p.pid: p.title for p in procs if p.pid is not None and p.title}
    if groups:
        for g in groups:
            head = Text("  ")
            head.append(g.wait_site or "unclassified", style="bold magenta")
            head.append(f"  {len(g.members)} member{'s' if len(g.members) != 1 else ''}: ")
            head.append(collapse_ranks([member_label(m) for m in g.members], []), style="cyan")
            titles = list(dict.fromkeys(t for pid in g.pids if (t := titles_by_pid.get(pid))))
            if titles:
                more = f" +{len(titles) - 2}" if len(titles) > 2 else ""
                head.append(f"  ({', '.join(titles[:2])}{more})", style="dim")
            parts.append(head)
            parts.extend(_frames_text(g.frames, "      "))
        for p in procs:
            if p.outcome != "ok":
                line = Text(f"  pid {p.pid if p.pid is not None else '?'} {p.title or ''}".rstrip())
                line.append(f": no stack ({p.outcome}", style="yellow")
                line.append(f": {p.error})" if p.error else ")", style="yellow")
                parts.append(line)
    else:
        for p in procs:
            head = Text("  ")
            head.append(p.wait_site or "unclassified", style="bold magenta")
            who = p.rank.label if p.rank is not None else (p.title or "")
            head.append(f"  pid {p.pid if p.pid is not None else '?'} {who}".rstrip())
            if p.outcome != "ok":
                head.append(f"  ({p.outcome}{': ' + p.error if p.error else ''})", style="yellow")
            parts.append(head)
            thread = next(
                (
                    t
                    for t in p.threads
                    if p.wait_thread is not None and t.thread_id == p.wait_thread
                ),
                p.threads[0] if p.threads else None,
            )
            if thread is not None:
                parts.extend(_frames_text(thread.frames, "      "))
    return Group(*parts)


def _phase_table(a: Analysis) -> RenderableType | None:
    """Per phase: ranks, first start, last end, duration (median and range), slowest."""
    stats = [s for s in phase_stats(a) if s.start is not None or s.median_s is not None]
    if not stats:
        return None
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    for name in ("phase", "ranks", "start", "end", "duration", "slowest"):
        table.add_column(name, no_wrap=True)
    for s in stats:
        if s.median_s is None:
            duration = Text("-", style="dim")
        elif s.min_s is not None and s.max_s is not None and s.max_s - s.min_s >= 1:
            duration = Text(fmt_duration(s.median_s))
            duration.append(f" ({fmt_duration(s.min_s)}–{fmt_duration(s.max_s)})", style="dim")
        else:
            duration = Text(fmt_duration(s.median_s))
        end = Text(fmt_time(s.end)) if s.end is not None else Text("-", style="dim")
        if s.open_ranks:
            end.append(f"  {s.open_ranks} still in it", style="yellow")
        table.add_row(
            Text(s.phase, style=_style(s.phase)),
            str(s.ranks) if s.ranks else Text("no rank", style="dim"),
            fmt_time(s.start),
            end,
            duration,
            Text(s.slowest or "", style="yellow"),
        )
    return table


def _fmt_bytes(n: int | None) -> str:
    from diag.report.snapshot_view import fmt_bytes

    return fmt_bytes(n) if n else "-"


# live-table columns in the order they are dropped when the console is narrow (last
# first): the table stays a table at 80 columns, cells are never wrapped
_LIVE_COLUMNS: tuple[tuple[str, int], ...] = (
    ("rank", 0),
    ("state", 0),
    ("wait site", 0),
    ("last phase", 1),
    ("silent", 1),
    ("RSS", 2),
    ("CPU", 3),
    ("GPU", 4),
    ("pid", 5),
    ("top frames", 6),
)


class LiveTable:
    """Each rank of the log beside its process in the snapshot: last phase, silence,
    state, RSS, CPU, GPU (index, memory, utilization), wait site, top frames. Columns
    are dropped from the right (top frames first) to fit the console."""

    def __init__(self, view: Combined) -> None:
        self.view = view

    def _cells(self, row: LiveRank | None, rt: RankTimeline | None, label: str) -> dict[str, Text]:
        odd = row is not None and row.outlier
        cells = {"rank": Text(label + (" *" if odd else ""), style="bold magenta" if odd else "")}
        cells["last phase"] = Text(
            (rt.last_phase or "-") if rt else "-", style=_style(rt.last_phase or "") if rt else ""
        )
        silent = rt.silent_s if rt is not None else None
        cells["silent"] = Text(
            fmt_duration(silent) if silent else "-",
            style="bold red" if rt is not None and silence_alert(rt, self.view.analysis) else "",
        )
        if row is None:
            cells["state"] = Text("no process", style="bold red")
            for key in ("RSS", "CPU", "GPU", "pid", "wait site", "top frames"):
                cells[key] = Text("")
            return cells
        state = row.state or "?"
        if row.moving is False:
            state += " stuck"
        elif row.moving:
            state += " moving"
        cells["state"] = Text(state, style="bold red" if row.state in ("T", "D", "Z") else "")
        cells["RSS"] = Text(_fmt_bytes(row.rss_bytes))
        cells["CPU"] = Text(f"{row.cpu_percent:.0f}%" if row.cpu_percent is not None else "?")
        gpu = "-"
        if row.gpu_index is not None:
            gpu = f"{row.gpu_index}"
            if row.gpu_memory_bytes:
                gpu += f" {_fmt_bytes(row.gpu_memory_bytes)}"
            if row.gpu_util_percent is not None:
                gpu += f" {row.gpu_util_percent:.0f}%"
        cells["GPU"] = Text(gpu)
        cells["pid"] = Text(str(row.pid))
        cells["wait site"] = Text(row.wait_site or "-", style="magenta" if row.wait_site else "")
        cells["top frames"] = Text(row.top_frames, style="dim")
        return cells

    def rows(self) -> list[dict[str, Text]]:
        v = self.view
        timelines = {r.rank.label: r for r in v.analysis.ranks}
        live = {r.label: r for r in v.live}
        out = []
        seen: set[str] = set()
        for r in v.live:
            if r.label in seen:
                continue
            seen.add(r.label)
            out.append(self._cells(r, timelines.get(r.label), r.label))
        if v.snapshot is not None:
            for label, rt in timelines.items():
                if label not in live:
                    out.append(self._cells(None, rt, label))
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = self.rows()
        if not rows:
            return
        width = options.max_width

        def natural(name: str) -> int:
            return max(len(name), *(len(r[name].plain) for r in rows))

        def need(names: list[str]) -> int:  # top frames may be cut down to 16 cells
            return sum(
                (min(natural(n), 16) if n == "top frames" else natural(n)) + 2 for n in names
            )

        names = [name for name, _ in _LIVE_COLUMNS]
        for level in range(6, -1, -1):
            names = [name for name, drop in _LIVE_COLUMNS if drop <= level]
            if need(names) <= width or level == 0:
                break
        v = self.view
        title = Text("Live", style="bold")
        snap = v.snapshot
        if snap is not None:
            when = fmt_time(v.taken_at or snap.taken_at)
            title.append(f"  snapshot at {when} on {snap.host}", style="dim")
            if v.stall_s is not None and v.stall_s >= 1:
                title.append(f", {fmt_duration(v.stall_s)} after the log's last line", style="dim")
        yield title
        table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
        fixed = sum(natural(n) + 2 for n in names if n != "top frames")
        for name in names:
            if name == "top frames":  # what is left of the width, cut with an ellipsis
                table.add_column(
                    name, no_wrap=True, overflow="ellipsis", max_width=max(16, width - fixed - 2)
                )
            else:
                table.add_column(name, no_wrap=True, min_width=natural(name))
        for r in rows:
            table.add_row(*(r[name] for name in names))
        yield table
        if "top frames" not in names:
            yield Text(
                f"(narrow console: {len(_LIVE_COLUMNS) - len(names)} columns left out; "
                "--width 160 shows them)",
                style="dim",
            )


def _verdict_view(v: Combined) -> RenderableType:
    text = Text(v.verdict)
    return Panel(text, title="verdict (live snapshot)", title_align="left", expand=True)


def render_terminal(
    analysis: Analysis | Combined,
    *,
    verbose: bool = True,
    context: ContextLines | None = None,
) -> RenderableType:
    """The whole terminal report of one analysis (or of a log and its snapshot), as one
    rich renderable. ``verbose=False`` is the short view: no why/remedy/caveat, two
    evidence lines per finding, the quiet rules counted, not listed."""
    view = as_combined(analysis)
    a = view.analysis
    token = _SHORT_NAMES.set(short_names([*a.sources, *_evidence_sources(a)]))
    try:
        return _render(view, a, verbose=verbose, context=context)
    finally:
        _SHORT_NAMES.reset(token)


def _evidence_sources(a: Analysis) -> list[str]:
    return [ev.source for f in a.findings for ev in f.evidence if ev.source]


def _render(
    view: Combined, a: Analysis, *, verbose: bool, context: ContextLines | None
) -> RenderableType:
    parts: list[RenderableType] = [_header(a, verbose)]
    if view.verdict:
        parts += [_verdict_view(view)]
    if a.ranks or a.global_phases or view.snapshot is None:
        parts += [Text(""), GanttChart(a)]
    table = _phase_table(a) if verbose or view.snapshot is None else None
    if table is not None:
        parts += [Text(""), table]
    weights = weights_summary(a)
    if weights:
        line = Text("Weights: ", style="bold")
        line.append(weights)
        parts.append(line)
    if view.live or view.snapshot is not None:
        parts += [Text(""), LiveTable(view)]
    summary = _ranks_summary(a)
    if summary is not None:
        parts += [Text(""), summary]
    findings = sorted_findings(a.findings)
    all_ranks = [r.rank.label for r in a.ranks]
    parts.append(Text(""))
    if findings:
        counts = {
            s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")
        }
        head = Text(f"Findings ({len(findings)})", style="bold")
        head.append("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n), style="dim")
        parts.append(head)
        for f in findings:
            parts.append(
                _finding_view(
                    f,
                    all_ranks,
                    verbose=verbose,
                    max_evidence=MAX_EVIDENCE if verbose else SHORT_EVIDENCE,
                    context=context,
                )
            )
    else:
        parts.append(Text("No findings.", style="bold green" if a.rules_checked else "dim"))
    if a.stack_groups or a.stack_processes:
        if verbose or not view.live:
            parts += [Text(""), _stacks_view(a.stack_groups, a.stack_processes)]
        else:
            parts += [Text(""), _groups_line(a.stack_groups)]
    quiet = not_fired(a)
    if quiet and verbose:
        t = Text("\nChecked and did not fire: ", style="bold")
        t.append(", ".join(quiet), style="dim")
        parts.append(t)
    elif quiet:
        parts.append(
            Text(
                f"{len(quiet)} more rules checked and did not fire; -v lists them, with "
                "why, remedy and caveat of each finding",
                style="dim",
            )
        )
    for note in a.notes if verbose else a.notes[:2]:
        parts.append(Text(f"note: {note}", style="dim"))
    if not verbose and len(a.notes) > 2:
        parts.append(Text(f"({len(a.notes) - 2} more notes with -v)", style="dim"))
    return Sanitized(Group(*parts))  # escape sequences from the log are shown, not run


def _groups_line(groups: tuple[StackGroup, ...]) -> RenderableType:
    """The stack groups in one line each (the short view; -v shows their frames)."""
    lines: list[RenderableType] = [Text("Stack groups", style="bold")]
    for g in groups:
        t = Text("  ")
        t.append(g.wait_site or "unclassified", style="bold magenta")
        t.append(f"  {len(g.members)}: ")
        t.append(collapse_ranks([member_label(m) for m in g.members], []), style="cyan")
        top = next((f for f in g.frames if not f.native), g.frames[0] if g.frames else None)
        if top is not None:
            t.append(f"  at {frame_label(top)}", style="dim")
        t.no_wrap = True
        t.overflow = "ellipsis"
        lines.append(t)
    return Group(*lines)
