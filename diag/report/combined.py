"""One view of a case: the log analysis joined with the live snapshot of its server.

``combine(analysis, snapshot)`` picks the snapshot's server the log belongs to (by the
port on the log's args line, then the framework, then the only server), keeps only that
server's processes, groups, outliers and findings (the snapshot rules and the verdict
are run again on that part, so another server on the host never leaks in), puts the
snapshot's time on the log's clock, and merges:

- the snapshot's findings join the log's (one finding per id: the log's evidence, the
  live message beside it);
- the silence of each rank is measured to the snapshot's time, and a log that ends
  "not proven stalled" (``startup.cut_excerpt``) becomes ``startup.stalled`` when the
  snapshot, taken later, finds the ranks alive and stuck and the port closed;
- the stack groups of the snapshot stand in when the log held no dump.

``load_case(paths)`` reads logs and bundles (a bundle's ``snapshot.json`` comes back
with it; a bundle of a snapshot alone opens too).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from diag.errors import DiagError
from diag.model import (
    Analysis,
    Combined,
    Evidence,
    Finding,
    LiveRank,
    ProcessInfo,
    RankTimeline,
    Snapshot,
    StackProcess,
    Unavailable,
    phase_index,
)
from diag.report.common import fmt_duration, fmt_time, stall_min_s, time_span

__all__ = [
    "RANK_ROLES",
    "as_combined",
    "combine",
    "context_lines",
    "empty_analysis",
    "focus",
    "load_case",
    "log_server",
    "server_part",
]

RANK_ROLES = ("scheduler", "worker", "engine_core")
_QUARTER_H = 900.0


def as_combined(view: Analysis | Combined) -> Combined:
    """A plain analysis is a case with no snapshot."""
    if isinstance(view, Combined):
        return view
    return Combined(analysis=view, log_finding_ids=tuple(f.id for f in view.findings))


def empty_analysis(source: str, snapshot: Snapshot | None) -> Analysis:
    """The analysis of a bundle that holds no log (``diag snapshot --out``)."""
    framework = "unknown"
    if snapshot is not None:
        fws = [str(s.get("framework")) for s in snapshot.servers if s.get("framework")]
        fws += [p.framework for p in snapshot.processes if p.framework]
        framework = fws[0] if fws else "unknown"
    return Analysis(
        sources=(source,),
        framework=framework,
        version=None,
        config={},
        ranks=(),
        expected_ranks=(),
        missing_ranks=(),
        stragglers=(),
        log_end=None,
        records=0,
        notes=("the bundle holds no log: the view is the live snapshot's alone",),
    )


# ---------------------------------------------------------------------------
# which server of the snapshot the log belongs to


def log_server(a: Analysis, snap: Snapshot) -> tuple[int | None, str]:
    """The index of the snapshot's server the log belongs to, and how it was chosen."""
    return _server_index(a, snap)


def _server_index(a: Analysis, snap: Snapshot) -> tuple[int | None, str]:
    servers = list(snap.servers)
    if not servers:
        return None, ""
    if len(servers) == 1:
        return 0, ""
    port = a.config.get("port")
    if isinstance(port, int):
        hits = [i for i, s in enumerate(servers) if s.get("port") == port]
        if len(hits) == 1:
            return hits[0], f"the log's server is the one on port {port}"
    fw = [i for i, s in enumerate(servers) if s.get("framework") == a.framework]
    if len(fw) == 1:
        return fw[0], f"the log's server is the only {a.framework} server"
    labels = {r.rank.label for r in a.ranks}
    best = max(
        range(len(servers)),
        key=lambda i: sum(
            1 for p in snap.processes if p.server == i and p.rank and p.rank.label in labels
        ),
    )
    return best, "no port or framework told the servers apart: the one with most of the log's ranks"


def server_part(snap: Snapshot, index: int | None) -> Snapshot:
    """The snapshot restricted to one server: its processes, groups, outliers, findings
    and verdict (rules and verdict computed again on that part alone)."""
    if index is None or len(snap.servers) <= 1:
        return snap
    procs = tuple(p for p in snap.processes if p.server == index)
    pids = {p.pid for p in procs}
    server = dict(snap.servers[index])
    odd = server.get("outlier_tp_ranks")
    part = replace(
        snap,
        processes=tuple(replace(p, server=0) for p in procs),
        servers=(server,),
        groups=tuple(g for g in snap.groups if set(g.pids) & pids),
        outlier_tp_ranks=tuple(r for r in odd if isinstance(r, int))
        if isinstance(odd, (list, tuple))
        else (),
        collective_evidence=(),
        findings=(),
    )
    try:
        from diag.rules import apply_snapshot_rules

        findings = apply_snapshot_rules(part)
    except DiagError:
        findings = ()
    part = replace(part, findings=findings)
    from diag.report.snapshot_view import verdict_text

    others = len(snap.servers) - 1
    notes = (*snap.notes, f"{others} other server(s) on the host left out of this view")
    return replace(part, verdict=verdict_text(part), notes=notes)


# ---------------------------------------------------------------------------
# the two clocks


def _naive_utc(ts: dt.datetime) -> dt.datetime:
    return ts.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _snapshot_on_log_clock(a: Analysis, snap: Snapshot) -> tuple[dt.datetime | None, str]:
    """The snapshot's time as the log's clock reads it, and how the two were aligned.

    Log stamps mostly carry no zone. The server's first line is written within seconds
    of its launcher's start (``create_time``, an epoch), so the zone offset is the
    difference of the two, to the nearest quarter hour."""
    t0, t1 = time_span(a)
    if t0 is None or t1 is None:
        return None, ""
    if t1.tzinfo is not None:
        return snap.taken_at.astimezone(t1.tzinfo), ""
    taken = _naive_utc(snap.taken_at)
    starts = [p.create_time for p in snap.processes if p.create_time]
    if not starts:
        return taken, "log times read as UTC (no process start time to align the clocks)"
    start = _naive_utc(dt.datetime.fromtimestamp(min(starts), dt.timezone.utc))
    offset = round((t0 - start).total_seconds() / _QUARTER_H) * _QUARTER_H
    if abs(offset) > 14 * 3600:
        return taken, "log times read as UTC (the log starts far from the processes' start)"
    if offset == 0:
        return taken, ""
    sign = "+" if offset > 0 else "-"
    hours, rest = divmod(int(abs(offset)), 3600)
    return (
        taken + dt.timedelta(seconds=offset),
        f"log clock read as UTC{sign}{hours:02d}:{rest // 60:02d} (from the launcher's start time)",
    )


# ---------------------------------------------------------------------------
# live table


def _gpu_util(p: ProcessInfo, snap: Snapshot) -> float | None:
    if p.gpu_index is None or isinstance(snap.gpus, Unavailable):
        return None
    g = next((g for g in snap.gpus if g.index == p.gpu_index), None)
    if g is None or isinstance(g.util_percent_mean, Unavailable):
        return None
    return g.util_percent_mean


def _live(snap: Snapshot, labels: set[str]) -> tuple[LiveRank, ...]:
    from diag.report.snapshot_view import top_frames

    order = {"launcher": 0, "api_server": 1, "tokenizer": 2, "engine_core": 3}
    outliers = set(snap.outlier_tp_ranks)
    rows = []
    for p in sorted(
        snap.processes,
        key=lambda p: (
            p.rank is None,
            p.rank.sort_key if p.rank is not None else ("", 0, 0, 0, 0),
            order.get(p.role, 9),
            p.pid,
        ),
    ):
        label = p.rank.label if p.rank is not None else p.role
        site = p.stack.wait_site if p.stack is not None else None
        if site is None and p.stack is not None and p.stack.outcome != "ok":
            site = f"({p.stack.outcome})"
        rows.append(
            LiveRank(
                label=label,
                pid=p.pid,
                role=p.role,
                state=None if isinstance(p.state, Unavailable) else p.state,
                rss_bytes=None if isinstance(p.rss_bytes, Unavailable) else p.rss_bytes,
                cpu_percent=None if isinstance(p.cpu_percent, Unavailable) else p.cpu_percent,
                gpu_index=p.gpu_index,
                gpu_memory_bytes=p.gpu_memory_bytes,
                gpu_util_percent=_gpu_util(p, snap),
                wait_site=site,
                top_frames=top_frames(p),
                moving=p.stack.moving if p.stack is not None else None,
                outlier=(
                    p.rank is not None
                    and p.rank.tp in outliers
                    and p.role in ("scheduler", "worker")
                ),
                in_log=label in labels,
            )
        )
    return tuple(rows)


# ---------------------------------------------------------------------------
# findings


def _rule_meta(rule_id: str) -> Mapping[str, Any]:
    try:
        from diag.rules.loader import builtin_rules

        rule = next((r for r in builtin_rules() if r.id == rule_id), None)
    except DiagError:
        rule = None
    if rule is None:
        return {"title": rule_id, "severity": "error"}
    return {
        "title": rule.title,
        "severity": rule.severity,
        "summary": rule.summary,
        "why": " ".join(rule.why.split()),
        "remedy": " ".join(rule.remedy.split()),
        "caveat": " ".join(rule.caveat.split()),
        "references": tuple(rule.references),
    }


def _merge(log: Finding, live: Finding) -> Finding:
    ranks = tuple(dict.fromkeys((*log.ranks, *live.ranks)))
    message = log.message or log.summary
    extra = live.message or live.summary
    if extra and extra not in message:
        message = f"{message} Live snapshot: {extra}" if message else extra
    order = {"error": 0, "warning": 1, "info": 2}
    sev = min(log.severity, live.severity, key=lambda s: order.get(s, 3))
    return replace(log, message=message, ranks=ranks, severity=sev)


def _stall_finding(
    a: Analysis, base: Finding | None, message: str, evidence: tuple[Evidence, ...]
) -> Finding:
    meta = _rule_meta("startup.stalled")
    ranks = tuple(r.rank.label for r in a.ranks)
    if base is not None:
        return replace(base, message=f"{base.message}; {message}", ranks=base.ranks or ranks)
    return Finding(
        id="startup.stalled",
        severity=meta.get("severity", "error"),
        title=str(meta.get("title", "startup.stalled")),
        message=message,
        ranks=ranks,
        evidence=evidence,
        evidence_total=len(evidence),
        summary=str(meta.get("summary", "")),
        why=str(meta.get("why", "")),
        remedy=str(meta.get("remedy", "")),
        caveat=(
            "The snapshot shows the ranks at one moment (and a second sample ~1 s later); "
            "a step that takes longer than the silence so far would look the same."
        ),
        references=tuple(meta.get("references", ())),
    )


def _ranks_stuck(snap: Snapshot) -> bool | None:
    moving = [
        p.stack.moving for p in snap.processes if p.role in RANK_ROLES and p.stack is not None
    ]
    known = [m for m in moving if m is not None]
    if not known:
        return None
    return not any(known)


def _prove_stall(
    a: Analysis, snap: Snapshot, findings: list[Finding], taken: dt.datetime | None
) -> tuple[list[Finding], float | None, bool]:
    _, t1 = time_span(a)
    if taken is None or t1 is None:
        return findings, None, False
    try:
        stall = (taken - t1).total_seconds()
    except TypeError:
        return findings, None, False
    server = snap.servers[0] if snap.servers else {}
    alive = [p for p in snap.processes if p.role in RANK_ROLES]
    listening = bool(server.get("port_listening"))
    reached = a.last_phase
    if (
        stall < 0
        or not alive
        or listening
        or (reached is not None and phase_index(reached) >= phase_index("listening"))
    ):
        return findings, stall, False
    stuck = _ranks_stuck(snap)
    if stall < stall_min_s() and not (stuck and stall >= 1):
        return findings, stall, False
    port = server.get("port")
    how = "stuck (same frames in every sample)" if stuck else "alive"
    message = (
        f"the live snapshot at {fmt_time(taken)}, {fmt_duration(stall)} after the log's last "
        f"line ({fmt_time(t1)}), found {len(alive)} rank process(es) {how}"
        + (f" and port {port} not listening" if port is not None else " and no port open")
        + ": the stall is proven, not a cut log"
    )
    cut = next((f for f in findings if f.id == "startup.cut_excerpt"), None)
    stalled = next((f for f in findings if f.id == "startup.stalled"), None)
    evidence = cut.evidence if cut is not None else ()
    new = _stall_finding(a, stalled, message, evidence)
    out = [f for f in findings if f.id not in ("startup.cut_excerpt", "startup.stalled")]
    return [new, *out], stall, True


def _merged_findings(a: Analysis, snap: Snapshot) -> list[Finding]:
    out = list(a.findings)
    by_id = {f.id: i for i, f in enumerate(out)}
    for live in snap.findings:
        if live.id in by_id:
            out[by_id[live.id]] = _merge(out[by_id[live.id]], live)
        else:
            by_id[live.id] = len(out)
            out.append(live)
    return out


# ---------------------------------------------------------------------------


def _extend_silence(r: RankTimeline, taken: dt.datetime | None) -> RankTimeline:
    if taken is None or r.last_ts is None:
        return r
    try:
        silent = (taken - r.last_ts).total_seconds()
    except TypeError:
        return r
    if silent <= (r.silent_s or 0.0):
        return r
    return replace(r, silent_s=round(silent, 3))


def _stack_processes(snap: Snapshot) -> tuple[StackProcess, ...]:
    out = []
    for p in snap.processes:
        if p.stack is None:
            continue
        out.append(replace(p.stack, rank=p.rank, pid=p.pid, title=p.title or p.stack.title))
    return tuple(out)


def combine(analysis: Analysis, snapshot: Snapshot | None) -> Combined:
    """The log analysis and the snapshot of the log's server, as one view."""
    if snapshot is None:
        return as_combined(analysis)
    a = analysis
    notes: list[str] = []
    index, why = _server_index(a, snapshot)
    if why:
        notes.append(why)
    snap = server_part(snapshot, index)
    taken, clock_note = _snapshot_on_log_clock(a, snap)
    if clock_note:
        notes.append(clock_note)
    findings = _merged_findings(a, snap)
    findings, stall, proven = _prove_stall(a, snap, findings, taken)
    ranks = tuple(_extend_silence(r, taken) for r in a.ranks) if stall and stall > 0 else a.ranks
    fired_live = tuple(f.id for f in snap.findings)
    merged = replace(
        a,
        ranks=ranks,
        findings=tuple(findings),
        rules_checked=tuple(dict.fromkeys((*a.rules_checked, *fired_live))),
        stack_processes=a.stack_processes or _stack_processes(snap),
        stack_groups=a.stack_groups or snap.groups,
        notes=(*a.notes, *(f"snapshot: {n}" for n in snap.notes), *notes),
    )
    verdict = snap.verdict
    if proven and stall is not None:
        verdict = (
            f"Stalled: the log's last line is {fmt_duration(stall)} older than the snapshot. "
            + verdict
        )
    return Combined(
        analysis=merged,
        snapshot=snap,
        live=_live(snap, {r.rank.label for r in a.ranks}),
        verdict=verdict,
        taken_at=taken,
        stall_s=stall,
        stall_proven=proven,
        log_finding_ids=tuple(f.id for f in a.findings),
        notes=tuple(notes),
    )


def load_case(
    paths: Sequence[str | Path],
    *,
    year: int | None = None,
    rules_dirs: Sequence[Path] = (),
    progress: Any = None,
) -> Combined:
    """Analyse logs and bundles; the first bundle's snapshot joins the analysis."""
    from diag.analyze import analyze
    from diag.bundle.job import JOB_MEMBER, job_from_bundles, measured_clocks, merge_env
    from diag.bundle.read import bundle_logs, is_bundle, read_bundle
    from diag.errors import InputError
    from diag.report.snapshot_read import snapshot_from_dict

    snapshot: Snapshot | None = None
    env: Mapping[str, object] = {}
    logs: list[str | Path] = []
    first_bundle: str | None = None
    unread: list[str] = []
    read = [read_bundle(Path(i)) for i in paths
            if str(i) != "-" and Path(i).is_file() and is_bundle(Path(i))]
    if len(read) > 1 or any(JOB_MEMBER in b.members for b in read):
        # bundles of several hosts (or one job bundle): one snapshot of the whole job
        snapshot, joined = job_from_bundles(read)
        unread += joined
        envs = {b.path.name: b.json("env.json") for b in read if "env.json" in b.members}
        if len(envs) == 1:
            env = next(iter(envs.values()))
        elif envs:
            env = merge_env({k: v for k, v in envs.items() if isinstance(v, dict)})
    for item in paths:
        path = Path(item)
        if str(item) != "-" and path.is_file() and is_bundle(path):
            bundle = next(b for b in read if b.path == path)
            if snapshot is None and "snapshot.json" in bundle.members:
                try:
                    snapshot = snapshot_from_dict(bundle.json("snapshot.json"))
                except InputError as exc:  # the logs still tell their part
                    if not bundle_logs(bundle):
                        raise InputError(
                            f"{path.name}: its snapshot.json is unreadable ({exc.message})",
                            help_text=f"Check the bundle: diag bundle verify {path}",
                        ) from None
                    unread.append(f"{path.name}: snapshot.json left out ({exc.message})")
            if not env and "env.json" in bundle.members:
                value = bundle.json("env.json")
                env = value if isinstance(value, dict) else {}
            first_bundle = first_bundle or str(path)
            if not bundle_logs(bundle):
                continue  # a bundle of a snapshot alone: nothing for the log reader
        logs.append(item)
    if logs:
        analysis = analyze(logs, year=year, rules_dirs=rules_dirs, progress=progress,
                           clocks=measured_clocks(read) or None)
    else:
        analysis = empty_analysis(first_bundle or "bundle", snapshot)
    if unread:
        analysis = replace(analysis, notes=(*analysis.notes, *unread))
    return replace(combine(analysis, snapshot), environment=env)


# ---------------------------------------------------------------------------
# looking closer: one rank, lines around the evidence


def _norm(label: str) -> str:
    return " ".join(label.upper().split())


def focus(view: Analysis | Combined, rank: str) -> Combined:
    """The view of one rank (``--rank TP3``): its timeline, its live row, the findings
    that name it (or no rank) with its evidence, the stack groups it is in."""
    from diag.errors import InputError

    v = as_combined(view)
    a = v.analysis
    want = _norm(rank)
    known = [r.rank.label for r in a.ranks] + [r.label for r in v.live]
    match = next((k for k in known if _norm(k) == want), None)
    if match is None:
        shown = ", ".join(dict.fromkeys(known)) or "none"
        raise InputError(
            f"--rank {rank}: no such rank in this input (ranks: {shown[:300]})",
            help_text="Pass a rank label as the report shows it, e.g. --rank TP3.",
        )
    findings = []
    for f in a.findings:
        if f.ranks and match not in f.ranks:
            continue
        mine = tuple(e for e in f.evidence if e.rank == match)
        findings.append(
            replace(f, evidence=mine or f.evidence, evidence_total=len(mine or f.evidence))
            if mine
            else f
        )
    focused = replace(
        a,
        ranks=tuple(r for r in a.ranks if r.rank.label == match),
        findings=tuple(findings),
        stack_groups=tuple(g for g in a.stack_groups if match in g.members),
        stack_processes=tuple(
            p for p in a.stack_processes if p.rank is not None and p.rank.label == match
        ),
        global_phases=(),
        notes=(*a.notes, f"showing {match} only (--rank)"),
    )
    return replace(v, analysis=focused, live=tuple(r for r in v.live if r.label == match))


def _source_lines(source: str, wanted: set[int]) -> dict[int, str]:
    """The wanted lines (1-based) of a log named as the analysis names it: a plain file,
    or ``BUNDLE:NAME`` for a log inside a bundle (at its original line numbers)."""
    from diag.bundle.read import is_bundle, log_members

    data: bytes | None = None
    path = Path(source)
    try:
        if path.is_file() and not is_bundle(path):
            if path.suffix in (".gz", ".bz2", ".xz", ".zst", ".zip"):
                return {}
            data = path.read_bytes()
        else:
            head, sep, name = source.rpartition(":")
            while sep and head:
                if Path(head).is_file() and is_bundle(Path(head)):
                    data = dict(log_members(Path(head))).get(name)
                    break
                head, sep, rest = head.rpartition(":")
                name = f"{rest}:{name}"
    except (OSError, DiagError):
        return {}
    if data is None:
        return {}
    out: dict[int, str] = {}
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # (the newline that ends the last line starts no line)
    for number, raw in enumerate(lines, start=1):
        if number in wanted:
            out[number] = raw.decode("utf-8", "replace").rstrip("\r")
    return out


def context_lines(
    view: Analysis | Combined, n: int
) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """``--context N``: for each evidence line, the N lines before and after it."""
    a = as_combined(view).analysis
    by_source: dict[str, set[int]] = {}
    for f in a.findings:
        for e in f.evidence:
            by_source.setdefault(e.source, set()).update(range(e.line - n, e.line + n + 1))
    out: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for source, wanted in by_source.items():
        lines = _source_lines(source, wanted)
        if not lines:
            continue
        for f in a.findings:
            for e in f.evidence:
                if e.source == source:
                    out[(source, e.line)] = [
                        (i, lines[i]) for i in range(e.line - n, e.line + n + 1) if i in lines
                    ]
    return out
