"""``diag analyze --format markdown``: a report ready to paste into a GitHub issue.

A summary line, a per-rank table, a mermaid ``gantt`` block of the timeline (GitHub
draws it as a picture), findings with their evidence in collapsible ``<details>``
blocks, stack groups, and the rules that were checked and did not fire.
"""

from __future__ import annotations

import datetime as dt
import html
import re

from diag.model import Analysis, Finding, PhaseInterval, RankTimeline
from diag.report.common import (
    collapse_ranks,
    fmt_duration,
    fmt_time,
    frame_label,
    layout,
    member_label,
    model_name,
    not_fired,
    phase_stats,
    sorted_findings,
    time_span,
    weights_summary,
)
from diag.report.sanitize import visible

__all__ = ["MERMAID_DATE_FORMAT", "mermaid_gantt", "render_markdown"]

MERMAID_DATE_FORMAT = "YYYY-MM-DD HH:mm:ss"
_PY_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_SEVERITY_MARK = {"error": "🔴 error", "warning": "🟠 warning", "info": "🔵 info"}
MAX_MERMAID_SECTIONS = 32
MAX_EVIDENCE = 10


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def _md_text(text: str) -> str:
    """Prose from a log or a rule, safe in Markdown: HTML escaped outside `code spans`
    (a log line holding `</details>` must not close the block), one paragraph."""
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(html.escape(text[pos : m.start()], quote=False))
        out.append(m.group(0).replace("\n", " "))
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return " ".join("".join(out).split("\n")).strip()


def _code(text: str) -> str:
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(body: str, lang: str = "text") -> str:
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{lang}\n{body}\n{fence}"


def _task_name(phase: str) -> str:
    # mermaid splits a task line on ':' and its data on ','; '#' starts an entity
    return phase.replace(":", " ").replace(",", " ").replace("#", " ").replace(";", " ")


def _section_name(label: str) -> str:
    return label.replace(":", " ").replace("#", " ").replace(";", " ")


def _task(name: str, tag: str | None, start: dt.datetime, end: dt.datetime | None) -> str:
    seconds = max(1, round((end - start).total_seconds())) if end is not None else 1
    tags = f"{tag}, " if tag else ""
    return f"    {_task_name(name)} :{tags}{start.strftime(_PY_DATE_FORMAT)}, {seconds}s"


def _rank_tasks(phases: tuple[PhaseInterval, ...], last_ts: dt.datetime | None) -> list[str]:
    lines = []
    timed = [(p.start, p) for p in phases if p.start is not None]
    timed.sort(key=lambda t: t[0])
    for start, p in timed:
        end = p.end or last_ts
        lines.append(_task(p.phase, "done" if p.ended else "active", start, end))
    return lines


def mermaid_gantt(a: Analysis) -> str | None:
    """The mermaid ``gantt`` source of the timeline, or None when the log has no times."""
    t0, t1 = time_span(a)
    if t0 is None or t1 is None:
        return None
    out = [
        "gantt",
        "    title Startup timeline per rank",
        f"    dateFormat {MERMAID_DATE_FORMAT}",
        "    axisFormat %H:%M:%S",
    ]
    sections = 0
    if any(p.start is not None for p in a.global_phases):
        out.append("    section no rank")
        out.extend(_rank_tasks(a.global_phases, None))
        sections += 1
    ranks = sorted(a.ranks, key=lambda r: r.rank.sort_key)
    for r in ranks:
        if sections >= MAX_MERMAID_SECTIONS:
            out[1] = f"    title Startup timeline per rank (first {sections} of {len(ranks)})"
            break
        tasks = _rank_tasks(r.phases, r.last_ts)
        if not tasks:
            continue
        out.append(f"    section {_section_name(r.rank.label)}")
        out.extend(tasks)
        # the silence at the end, drawn to the end of the log (not to "now")
        if r.last_ts is not None and r.silent_s is not None and r.silent_s >= 1 and t1 > r.last_ts:
            out.append(_task("silent", "crit", r.last_ts, t1))
        sections += 1
    if sections == 0:
        return None
    return "\n".join(out)


def _summary(a: Analysis) -> str:
    fw = a.framework + (f" {a.version}" if a.version else "")
    bits = [f"**{fw}**"]
    name = model_name(a.config)
    if name:
        bits.append(_code(name))
    lay = layout(a.config)
    if lay:
        bits.append(" ".join(f"{k}={v}" for k, v in lay))
    bits.append(f"{len(a.ranks)} rank{'s' if len(a.ranks) != 1 else ''} seen")
    last = a.last_phase
    bits.append(f"reached {_code(last)}" if last else "no startup phase recognised")
    if a.findings:
        counts = [
            f"{n} {s}"
            for s in ("error", "warning", "info")
            if (n := sum(1 for f in a.findings if f.severity == s))
        ]
        bits.append(f"{len(a.findings)} findings ({', '.join(counts)})")
    else:
        bits.append("no findings")
    return " · ".join(bits)


def _rank_table(a: Analysis) -> list[str]:
    stragglers = {r.label for r in a.stragglers}
    lines = [
        "| rank | last phase | phases (duration) | silent at end |",
        "| --- | --- | --- | --- |",
    ]
    lines.extend(
        _rank_row(r, r.rank.label in stragglers)
        for r in sorted(a.ranks, key=lambda r: r.rank.sort_key)
    )
    lines.extend(f"| {_cell(m.label)} | **missing** (never logged) | | |" for m in a.missing_ranks)
    return lines


def _rank_row(r: RankTimeline, straggler: bool) -> str:
    phases = ", ".join(
        f"{p.phase} ({fmt_duration(p.duration_s)})" if p.duration_s is not None else p.phase
        for p in r.phases
    )
    last = _code(r.last_phase) if r.last_phase else "-"
    if straggler:
        last += " ⚠ behind"
    silent = fmt_duration(r.silent_s) if r.silent_s is not None else "-"
    label = r.rank.label + (" (inferred)" if r.inferred else "")
    return f"| {_cell(label)} | {last} | {_cell(phases)} | {silent} |"


def _finding(f: Finding, all_ranks: list[str]) -> list[str]:
    ranks = collapse_ranks(f.ranks, all_ranks)
    summary = (
        f"<b>{_SEVERITY_MARK.get(f.severity, f.severity)}</b> "
        f"<code>{html.escape(f.id)}</code> {html.escape(f.title)}"
    )
    if ranks:
        summary += f" — {html.escape(ranks)}"
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    if f.role == "cascade":
        lines += [f"_Cascade of `{f.cascade_of or 'another finding'}`: likely a consequence._", ""]
    if f.message or f.summary:
        lines += [_md_text(f.message or f.summary), ""]
    if f.evidence:
        total = max(f.evidence_total, len(f.evidence))
        shown = f.evidence[:MAX_EVIDENCE]
        lines.append(f"Evidence ({len(shown)} of {total}):")
        lines.append("")
        body = "\n".join(
            " ".join(
                x
                for x in (
                    f"{e.source.rsplit('/', 1)[-1]}:{e.line}",
                    e.rank or "",
                    fmt_time(e.ts) if e.ts is not None else "",
                    e.text.splitlines()[0] if e.text else "",
                )
                if x
            )
            for e in shown
        )
        lines += [_fence(body), ""]
    for label, value in (("Why", f.why), ("Remedy", f.remedy), ("Caveat", f.caveat)):
        if value:
            lines += [f"**{label}:** {_md_text(value.strip())}", ""]
    if f.references:
        lines += ["References: " + ", ".join(_md_text(r) for r in f.references), ""]
    lines.append("</details>")
    return lines


def render_markdown(analysis: Analysis) -> str:
    """The whole report as GitHub-flavoured Markdown."""
    a = analysis
    last = a.last_phase or "no phase"
    out = [f"## diag analyze: {a.framework} startup reached `{last}`", "", _summary(a), ""]
    t0, t1 = time_span(a)
    if t0 is not None and t1 is not None:
        out += [
            f"Log: {fmt_time(t0, date=True)} → {fmt_time(t1, date=True)} "
            f"({fmt_duration((t1 - t0).total_seconds())}), {a.records} records, "
            f"sources: {', '.join(_code(s) for s in a.sources) or '-'}",
            "",
        ]
    weights = weights_summary(a)
    if weights:
        out += [f"Weights: {weights}", ""]
    if a.stragglers:
        out += [f"**Behind the others:** {', '.join(r.label for r in a.stragglers)}", ""]
    if a.missing_ranks:
        out += [f"**Missing ranks:** {', '.join(r.label for r in a.missing_ranks)}", ""]
    gantt = mermaid_gantt(a)
    if gantt:
        out += ["### Timeline", "", "```mermaid", gantt, "```", ""]
    stats = [s for s in phase_stats(a) if s.start is not None or s.median_s is not None]
    if stats:
        out += ["| phase | ranks | start | end | duration (median, range) | slowest |"]
        out += ["| --- | --- | --- | --- | --- | --- |"]
        for st in stats:
            if st.median_s is None:
                duration = "-"
            elif st.min_s is not None and st.max_s is not None and st.max_s - st.min_s >= 1:
                duration = (
                    f"{fmt_duration(st.median_s)} ({fmt_duration(st.min_s)}–"
                    f"{fmt_duration(st.max_s)})"
                )
            else:
                duration = fmt_duration(st.median_s)
            end = fmt_time(st.end) + (f" ({st.open_ranks} still in it)" if st.open_ranks else "")
            out.append(
                f"| `{_cell(st.phase)}` | {st.ranks or 'no rank'} | {fmt_time(st.start)} | "
                f"{end} | {duration} | {_cell(st.slowest or '')} |"
            )
        out.append("")
    if a.ranks or a.missing_ranks:
        out += _rank_table(a) + [""]
    out.append("### Findings")
    out.append("")
    findings = sorted_findings(a.findings)
    all_ranks = [r.rank.label for r in a.ranks]
    if not findings:
        out += ["No findings.", ""]
    for f in findings:
        out += _finding(f, all_ranks) + [""]
    if a.stack_groups or a.stack_processes:
        out += ["### Stacks", ""]
        for g in a.stack_groups:
            out.append(
                f"- `{g.wait_site or 'unclassified'}`: {', '.join(map(member_label, g.members))} "
                f"({len(g.members)} member{'s' if len(g.members) != 1 else ''})"
            )
            if g.frames:
                out += ["", _fence("\n".join(frame_label(fr) for fr in g.frames[:12])), ""]
        if not a.stack_groups:
            for p in a.stack_processes:
                who = p.rank.label if p.rank is not None else (p.title or "")
                out.append(
                    f"- pid {p.pid if p.pid is not None else '?'} {who}: "
                    f"`{p.wait_site or 'unclassified'}` ({p.outcome})"
                )
        out.append("")
    quiet = not_fired(a)
    if quiet:
        out += [
            "<details>",
            f"<summary>Checked and did not fire ({len(quiet)} rules)</summary>",
            "",
            ", ".join(f"`{r}`" for r in quiet),
            "",
            "</details>",
            "",
        ]
    if a.notes:
        out += ["Notes:", ""] + [f"- {_md_text(n)}" for n in a.notes] + [""]
    out.append("_Generated by `diag analyze --format markdown`._")
    return visible("\n".join(out) + "\n")  # escape sequences from the log are shown, not run
