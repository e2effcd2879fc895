"""``diag analyze --format markdown``: a report ready to paste into a GitHub issue.

A summary line, a per-rank table, a mermaid ``gantt`` block of the timeline (GitHub
draws it as a picture), findings with their evidence in collapsible ``<details>``
blocks, stack groups, and the rules that were checked and did not fire.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import html
import json
import os
import re
from dataclasses import replace

from diag.model import Analysis, Combined, Finding, LiveRank, PhaseInterval, RankTimeline
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
    phase_stats,
    shown_source,
    silence_alert,
    sorted_findings,
    time_span,
    weights_summary,
)
from diag.report.sanitize import visible

__all__ = ["GITHUB_LIMIT", "MERMAID_DATE_FORMAT", "mermaid_gantt", "render_markdown"]

MERMAID_DATE_FORMAT = "YYYY-MM-DD HH:mm:ss"
_PY_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_SEVERITY_MARK = {"error": "🔴 error", "warning": "🟠 warning", "info": "🔵 info"}
MAX_MERMAID_SECTIONS = 32
MAX_EVIDENCE = 10
GITHUB_LIMIT = 65_536  # characters in a GitHub issue or comment body


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


# emphasis and strike-through marks, escaped in prose (a log's `__init__` or `*args` is no
# bold or italic; an underscore inside a word, `dist_init`, is none in GitHub's Markdown); a
# URL is left whole (GitHub links it as written)
_EMPHASIS = re.compile(r"(https?://\S+)|([\\*~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def _plain(text: str) -> str:
    return _EMPHASIS.sub(lambda m: m.group(1) or "\\" + m.group(2), html.escape(text, quote=False))


def _md_text(text: str) -> str:
    """Prose from a log or a rule, safe in Markdown: HTML and emphasis escaped outside
    `code spans` (a log line holding `</details>` must not close the block, a
    ``__init__`` stays as written), one paragraph."""
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_plain(text[pos : m.start()]))
        out.append(_BLOCK_TAG.sub("<\u200b\\1\\2", m.group(0).replace("\n", " ")))
        pos = m.end()
    out.append(_plain(text[pos:]))
    return " ".join("".join(out).split("\n")).strip()


def _code(text: str) -> str:
    text = _BLOCK_TAG.sub("<\u200b\\1\\2", text)  # shown as written, never a tag
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


_BLOCK_TAG = re.compile(r"<(/?)(details|summary)", re.I)


def _fence(body: str, lang: str = "text") -> str:
    """A fenced block. The tags the report's collapsible blocks are made of get a
    zero-width space after ``<`` (they read the same; no renderer, lax or strict, can
    take a log line's ``</details>`` for the end of the block around it)."""
    body = _BLOCK_TAG.sub("<\u200b\\1\\2", body)
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{lang}\n{body}\n{fence}"


def _task_name(phase: str) -> str:
    # mermaid splits a task line on ':' and its data on ','; '#' starts an entity
    return phase.replace(":", " ").replace(",", " ").replace("#", " ").replace(";", " ")


def _section_name(label: str) -> str:
    return label.replace(":", " ").replace("#", " ").replace(";", " ")


def _task(
    name: str, tag: str | None, start: dt.datetime, end: dt.datetime | None
) -> tuple[str, dt.datetime]:
    """One task line, and where it ends as drawn (at least 1 s long: mermaid's unit)."""
    seconds = max(1, round((end - start).total_seconds())) if end is not None else 1
    tags = f"{tag}, " if tag else ""
    line = f"    {_task_name(name)} :{tags}{start.strftime(_PY_DATE_FORMAT)}, {seconds}s"
    return line, start + dt.timedelta(seconds=seconds)


def _rank_tasks(
    phases: tuple[PhaseInterval, ...], last_ts: dt.datetime | None
) -> tuple[list[str], dt.datetime | None]:
    """A rank's phases as tasks that never overlap as drawn (a phase shorter than its
    second is drawn 1 s long and the next one starts after it), so that compact mode
    keeps the rank on one row; and where the last one ends."""
    lines = []
    cursor: dt.datetime | None = None
    timed = [(p.start, p) for p in phases if p.start is not None]
    timed.sort(key=lambda t: t[0])
    for start, p in timed:
        start = start.replace(microsecond=0)
        if cursor is not None and start < cursor:
            start = cursor
        end = p.end or last_ts
        line, cursor = _task(p.phase, "done" if p.ended else "active", start, end)
        lines.append(line)
    return lines, cursor


def mermaid_gantt(view: Analysis | Combined) -> str | None:
    """The mermaid ``gantt`` source of the timeline, or None when the log has no times.

    One row per rank (``displayMode: compact`` puts a section's tasks on one row), each
    phase a task, and the silence after a rank's last line a ``crit`` task (red) to the
    log's end, or to the live snapshot's time when one was taken later."""
    v = as_combined(view)
    a = v.analysis
    t0, t1 = time_span(a)
    if t0 is None or t1 is None:
        return None
    end = t1
    if v.taken_at is not None:
        with contextlib.suppress(TypeError):
            end = max(t1, v.taken_at.replace(microsecond=0))
    out = [
        "---",
        "displayMode: compact",
        "config:",
        "  gantt:",
        "    displayMode: compact",
        "---",
        "gantt",
        "    title Startup timeline per rank" + (" (to the live snapshot)" if end > t1 else ""),
        f"    dateFormat {MERMAID_DATE_FORMAT}",
        "    axisFormat %H:%M:%S",
    ]
    title_at = 7
    sections = 0
    if any(p.start is not None for p in a.global_phases):
        out.append("    section no rank")
        out.extend(_rank_tasks(a.global_phases, None)[0])
        sections += 1
    ranks = sorted(a.ranks, key=lambda r: r.rank.sort_key)
    for r in ranks:
        if sections >= MAX_MERMAID_SECTIONS:
            out[title_at] = (
                f"    title Startup timeline per rank (first {sections} of {len(ranks)})"
            )
            break
        tasks, drawn_to = _rank_tasks(r.phases, r.last_ts)
        if not tasks:
            continue
        out.append(f"    section {_section_name(r.rank.label)}")
        out.extend(tasks)
        # the silence at the end, drawn to the end of the log or to the snapshot
        if r.last_ts is not None and r.silent_s is not None and r.silent_s >= 1:
            stop = min(end, r.last_ts + dt.timedelta(seconds=r.silent_s))
            begin = max(r.last_ts.replace(microsecond=0), drawn_to or r.last_ts)
            if stop > begin:  # red (crit) only where the silence is a finding's
                out.append(_task("silent", "crit" if silence_alert(r, a) else None, begin, stop)[0])
        sections += 1
    if sections == 0:
        return None
    return "\n".join(out)


def _summary(a: Analysis) -> str:
    fw = html.escape(a.framework + (f" {a.version}" if a.version else ""), quote=False)
    bits = [f"**{fw}**"]
    name = model_name(a.config)
    if name:
        bits.append(_code(name))
    lay = layout(a.config)
    if lay:
        bits.append(html.escape(" ".join(f"{k}={v}" for k, v in lay), quote=False))
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
    return f"| {_cell(_md_text(label))} | {last} | {_cell(_md_text(phases))} | {silent} |"


def _finding(f: Finding, all_ranks: list[str], max_evidence: int = MAX_EVIDENCE) -> list[str]:
    ranks = collapse_ranks(f.ranks, all_ranks)
    summary = (
        f"<b>{_SEVERITY_MARK.get(f.severity, f.severity)}</b> "
        f"<code>{html.escape(f.id)}</code> {html.escape(f.title)}"
    )
    if ranks:
        summary += f" — {html.escape(ranks)}"
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    if f.role == "cascade":
        cause = _code(f.cascade_of or "another finding")
        lines += [f"_Cascade of {cause}: likely a consequence._", ""]
    if f.message or f.summary:
        lines += [_md_text(f.message or f.summary), ""]
    if f.evidence:
        total = max(f.evidence_total, len(f.evidence))
        shown = f.evidence[:max_evidence]
        lines.append(f"Evidence ({len(shown)} of {total}):")
        lines.append("")
        body = "\n".join(
            " ".join(
                x
                for x in (
                    f"{e.source.rsplit('/', 1)[-1]}:{e.line}",
                    e.rank or "",
                    fmt_time(e.ts) if e.ts is not None else "",
                    e.text.splitlines()[0][:400] if e.text else "",
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


def _live_table(v: Combined) -> list[str]:
    from diag.report.snapshot_view import fmt_bytes

    timelines = {r.rank.label: r for r in v.analysis.ranks}
    lines = [
        "| rank | last phase | silent | state | RSS | CPU | GPU | wait site | top frames |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    live = {r.label for r in v.live}

    def row(r: LiveRank) -> str:
        rt = timelines.get(r.label)
        state = (r.state or "?") + (
            " stuck" if r.moving is False else " moving" if r.moving else ""
        )
        gpu = "-"
        if r.gpu_index is not None:
            gpu = str(r.gpu_index)
            if r.gpu_memory_bytes:
                gpu += f" {fmt_bytes(r.gpu_memory_bytes)}"
            if r.gpu_util_percent is not None:
                gpu += f" {r.gpu_util_percent:.0f}%"
        name = html.escape(r.label, quote=False)  # (a stranger's snapshot: no live HTML)
        label = f"**{name}** ⚠ odd one out" if r.outlier else name
        return (
            f"| {_cell(label)} | {_code(rt.last_phase) if rt and rt.last_phase else '-'} | "
            f"{fmt_duration(rt.silent_s) if rt and rt.silent_s else '-'} | {_cell(state)} | "
            f"{fmt_bytes(r.rss_bytes) if r.rss_bytes else '-'} | "
            f"{f'{r.cpu_percent:.0f}%' if r.cpu_percent is not None else '?'} | {_cell(gpu)} | "
            f"{_code(r.wait_site) if r.wait_site else '-'} | "
            f"{_cell(_code(r.top_frames)) if r.top_frames else ''} |"
        )

    lines.extend(row(r) for r in v.live)
    lines.extend(
        f"| {_cell(html.escape(label, quote=False))} | "
        f"{_code(rt.last_phase) if rt.last_phase else '-'} | "
        f"{fmt_duration(rt.silent_s) if rt.silent_s else '-'} | **no process** | | | | | |"
        for label, rt in timelines.items()
        if label not in live
    )
    return lines


def _stack_groups(a: Analysis, max_frames: int) -> list[str]:
    out: list[str] = []
    for g in a.stack_groups:
        members = ", ".join(map(member_label, g.members))
        n = len(g.members)
        out += [
            "<details>",
            f"<summary><code>{html.escape(g.wait_site or 'unclassified')}</code>: "
            f"{html.escape(members)} ({n} member{'s' if n != 1 else ''})</summary>",
            "",
        ]
        frames = [f for f in g.frames if not (f.native and f.name.startswith("0x"))]
        if frames:
            body = "\n".join(frame_label(fr)[:200] for fr in frames[:max_frames])
            if len(frames) > max_frames:
                body += f"\n... {len(frames) - max_frames} more frames"
            out += [_fence(body), ""]
        out += ["</details>", ""]
    if not a.stack_groups:
        for p in a.stack_processes:
            who = p.rank.label if p.rank is not None else (p.title or "")
            out.append(
                f"- pid {p.pid if p.pid is not None else '?'} {_md_text(who)}: "
                f"{_code(p.wait_site or 'unclassified')} ({p.outcome})"
            )
        out.append("")
    return out


def _environment(v: Combined) -> list[str]:
    """The args line and versions, collapsed (redacted before they got here)."""
    a = v.analysis
    body: dict[str, object] = {}
    if a.version:
        body["version"] = a.version
    if a.config:
        body["config"] = {k: a.config[k] for k in sorted(a.config)}
    env = v.environment
    if env:
        for key in ("python", "os", "gpus", "driver", "cuda", "packages", "server_packages"):
            if key in env:
                body[key] = env[key]
    if v.snapshot is not None:
        body["snapshot_host"] = v.snapshot.host
    if not body:
        return []
    text = json.dumps(body, indent=1, default=str, ensure_ascii=False)
    if len(text) > 12000:
        text = text[:12000] + "\n... (cut)"
    return [
        "<details>",
        "<summary>Environment (args line, versions)</summary>",
        "",
        _fence(text, "json"),
        "",
        "</details>",
        "",
    ]


def _headline(v: Combined) -> str:
    a = v.analysis
    last = a.last_phase or "no phase"
    fw = html.escape(a.framework, quote=False)
    if v.snapshot is not None and not a.ranks and not a.records:
        return f"## diag: {fw} server, live snapshot (no log)"
    if v.stall_proven:
        return f"## diag: {fw} startup stalled at {_code(last)} (proven by a live snapshot)"
    return f"## diag analyze: {fw} startup reached {_code(last)}"


def _summary_line(v: Combined) -> str:
    a = v.analysis
    if v.snapshot is not None and not a.ranks and not a.records:
        ranks = sum(1 for r in v.live if r.role in ("scheduler", "worker", "engine_core"))
        n = len(a.findings)
        return (
            f"**{html.escape(a.framework, quote=False)}** · {ranks} rank processes live · "
            f"{n} finding{'s' if n != 1 else ''} from the snapshot"
        )
    text = _summary(a)
    if v.stall_proven and v.stall_s is not None:
        text += f" · **silent {fmt_duration(v.stall_s)}** at the snapshot"
    elif v.snapshot is not None:
        text += " · live snapshot joined"
    return text


def _public_paths(text: str, sources: tuple[str, ...]) -> str:
    """A note as the report shows it: each absolute source path in it named as the
    sources line names it (:func:`shown_source`), the current folder's prefix dropped."""
    for name in sorted((s for s in sources if s.startswith("/")), key=len, reverse=True):
        text = text.replace(name, shown_source(name))
    here = os.path.join(os.getcwd(), "")
    return text.replace(here, "") if here != "/" else text


def _sections(
    v: Combined, *, evidence: int, frames: int, details: bool = True, max_findings: int = 1000
) -> list[tuple[str, list[str]]]:
    """The report as named sections, in order (the size cap drops some by name)."""
    a = v.analysis
    out: list[tuple[str, list[str]]] = []
    head = [_headline(v), "", _summary_line(v), ""]
    if v.verdict:
        head += [f"> **Verdict (live snapshot):** {_md_text(v.verdict)}", ""]
    t0, t1, what = log_span(a)
    if t0 is not None and t1 is not None:
        head += [
            f"Log: {fmt_time(t0, date=True)} → {fmt_time(t1, date=True)} "
            f"({fmt_duration((t1 - t0).total_seconds())}, {what}), {a.records} records, "
            f"sources: {', '.join(_code(shown_source(s)) for s in a.sources) or '-'}",
            "",
        ]
    if v.snapshot is not None:
        when = fmt_time(v.taken_at or v.snapshot.taken_at, date=True)
        head += [f"Snapshot: {when} on {_code(v.snapshot.host)}", ""]
    weights = weights_summary(a)
    if weights:
        head += [f"Weights: {weights}", ""]
    if a.stragglers:
        head += [f"**Behind the others:** {', '.join(r.label for r in a.stragglers)}", ""]
    if a.missing_ranks:
        head += [f"**Missing ranks:** {', '.join(r.label for r in a.missing_ranks)}", ""]
    out.append(("head", head))
    gantt = mermaid_gantt(v)
    if gantt:
        gantt = _BLOCK_TAG.sub("<\u200b\\1\\2", gantt)  # a phase named like a tag
        out.append(("timeline", ["### Timeline", "", "```mermaid", gantt, "```", ""]))
    stats = [s for s in phase_stats(a) if s.start is not None or s.median_s is not None]
    if stats:
        table = ["| phase | ranks | start | end | duration (median, range) | slowest |"]
        table += ["| --- | --- | --- | --- | --- | --- |"]
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
            table.append(
                f"| {_cell(_code(st.phase))} | {st.ranks or 'no rank'} | {fmt_time(st.start)} | "
                f"{end} | {duration} | {_cell(_md_text(st.slowest or ''))} |"
            )
        out.append(("phases", [*table, ""]))
    if v.live:
        out.append(("live", ["### Ranks, live", "", *_live_table(v), ""]))
    elif a.ranks or a.missing_ranks:
        out.append(("ranks", [*_rank_table(a), ""]))
    findings = sorted_findings(a.findings)
    all_ranks = [r.rank.label for r in a.ranks] or [r.label for r in v.live if r.role != "other"]
    body = ["### Findings", ""]
    if not findings:
        body += ["No findings.", ""]
    for f in findings[:max_findings]:
        shown = f if details else replace(f, why="", remedy="", caveat="", references=())
        body += _finding(shown, all_ranks, evidence) + [""]
    if len(findings) > max_findings:
        body += [f"… {len(findings) - max_findings} more findings (`analysis.json`)", ""]
    out.append(("findings", body))
    if a.stack_groups or a.stack_processes:
        head = ["### Stack groups", ""]
        if a.stack_processes and all(p.mode == "traceback" for p in a.stack_processes):
            head += ["From tracebacks: where each error surfaced, not a dump of waiting ranks.", ""]
        out.append(("stacks", [*head, *_stack_groups(a, frames)]))
    env = _environment(v)
    if env:
        out.append(("environment", env))
    quiet = not_fired(a)
    if quiet:
        out.append(
            (
                "quiet",
                [
                    "<details>",
                    f"<summary>Checked and did not fire ({len(quiet)} rules)</summary>",
                    "",
                    ", ".join(f"`{r}`" for r in quiet),
                    "",
                    "</details>",
                    "",
                ],
            )
        )
    notes = [_public_paths(n, a.sources) for n in a.notes]
    if notes:
        out.append(("notes", ["Notes:", "", *(f"- {_md_text(n)}" for n in notes[:40]), ""]))
    return out


# the order in which the size cap gives things up (each a smaller step than the last)
_SHRINK: tuple[tuple[str, int, int], ...] = (
    ("", 10, 40),  # (section dropped, evidence per finding, frames per group)
    ("", 5, 16),
    ("notes", 5, 16),
    ("quiet", 3, 8),
    ("environment", 3, 8),
    ("phases", 2, 6),
    ("stacks", 1, 0),
    ("details", 1, 0),  # why / remedy / caveat of each finding
    ("findings_tail", 1, 0),  # findings past the first 20
)


def render_markdown(analysis: Analysis | Combined, *, limit: int = GITHUB_LIMIT) -> str:
    """The whole report as GitHub-flavoured Markdown, under ``limit`` characters (an
    issue body holds 65,536): evidence and frames are cut first, then whole sections;
    what was left out is said at the end."""
    v = as_combined(analysis)
    dropped: list[str] = []
    text = ""
    for section, evidence, frames in _SHRINK:
        if section:
            dropped.append(section)
        sections = _sections(
            v,
            evidence=evidence,
            frames=frames,
            details="details" not in dropped,
            max_findings=20 if "findings_tail" in dropped else 1000,
        )
        parts = [lines for name, lines in sections if name not in dropped]
        cut = []
        if (evidence, frames) != _SHRINK[0][1:]:
            cut.append(f"evidence past {evidence} lines per finding")
            cut.append(f"frames past {frames} per stack group" if frames else "stack frames")
        cut += [_DROPPED_NAMES[d] for d in dropped]
        footer = ["_Generated by `diag`._"]
        if cut:
            footer = [
                f"_Left out to fit GitHub's {limit:,}-character limit: {', '.join(cut)}. "
                "The full report: `diag analyze BUNDLE -v`, or `analysis.json` in the bundle._",
                "",
                *footer,
            ]
        text = visible("\n".join([line for lines in parts for line in lines] + footer) + "\n")
        if len(text) <= limit:
            return text
    return text[: limit - 80] + "\n\n_(cut at GitHub's size limit)_\n"


_DROPPED_NAMES = {
    "notes": "the notes",
    "quiet": "the list of rules that did not fire",
    "environment": "the environment",
    "phases": "the phase table",
    "stacks": "the stack groups",
    "details": "why / remedy / caveat of each finding",
    "findings_tail": "findings past the first 20",
}
