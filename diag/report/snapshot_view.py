"""The terminal view of a snapshot: the verdict first, then a table per server (one row
per process: role, rank, pid, state, RSS, CPU, GPU, util, wait site, top frames), then
the stack groups, the who-is-missing evidence, findings and notes.

``render_snapshot`` returns rich renderables; only ``diag/commands`` prints them.
``verdict_text`` is the verdict: a rendering of the snapshot's findings (every judgment,
with its threshold, is a rule's), framed by what was measured (the server and its port,
where the ranks wait, stuck or moving, GPU readings) and by what could not be collected.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from diag.model import GpuSample, ProcessInfo, Snapshot, StackFrame, Unavailable
from diag.report.sanitize import Sanitized

__all__ = ["fmt_bytes", "frame_text", "render_snapshot", "top_frames", "verdict_text"]

RANK_ROLES = ("scheduler", "worker")

_ROLE_ORDER = {
    "launcher": 0,
    "api_server": 1,
    "tokenizer": 2,
    "engine_core": 3,
    "scheduler": 4,
    "worker": 5,
    "detokenizer": 6,
    "other": 7,
}


def fmt_bytes(n: int | Unavailable | None) -> str:
    if n is None or isinstance(n, Unavailable):
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _frames_for(p: ProcessInfo) -> tuple[StackFrame, ...]:
    s = p.stack
    if s is None or not s.threads:
        return ()
    thread = None
    if s.wait_thread is not None:
        thread = next((t for t in s.threads if t.thread_id == s.wait_thread), None)
    if thread is None:
        thread = next((t for t in s.threads if t.thread_id == p.pid), s.threads[0])
    return thread.frames


_GLUE = ("pybind11::", "_Py", "Py", "cfunction_", "method_vectorcall", "torch::autograd::dispatch")


def _entry_frame(frames: Sequence[StackFrame]) -> StackFrame | None:
    """The outermost native frame below the Python caller that is not binding glue:
    where the library was entered (``c10d::TCPStore::get``, ``c10d::ProcessGroupGloo``)."""
    entry: StackFrame | None = None
    for f in frames:
        if not f.native:
            break
        if f.name.startswith("0x") or f.name.startswith(_GLUE) or "libpython" in f.filename:
            continue
        entry = f
    return entry


def top_frames(p: ProcessInfo, n: int = 3) -> str:
    """The wait thread in a few frames: the native leaf, where the library was entered,
    then the innermost Python frames."""
    frames = _frames_for(p)
    if not frames:
        return ""
    named = [f for f in frames if not (f.native and f.name.startswith("0x"))]
    py = [f for f in named if not f.native]
    picked: list[StackFrame] = []
    if named and named[0].native:
        picked.append(named[0])
        entry = _entry_frame(frames)
        if entry is not None and entry is not named[0] and n > 2:
            picked.append(entry)
    picked += py[: max(1, n - len(picked))]
    text = " <- ".join(frame_text(f) for f in picked[:n])
    if p.native_peer is not None:
        text += f" [C++ frames: pid {p.native_peer}]"
    return text


def frame_text(f: StackFrame, width: int = 80) -> str:
    """``name (file.py:12)`` for Python, ``name [lib.so]`` for native, cut to ``width``."""
    if f.native:
        name = f.name if len(f.name) <= width else f.name[: width - 3] + "..."
        lib = f.filename.rsplit("/", 1)[-1] if f.filename else ""
        return f"{name} [{lib}]" if lib else name
    where = f.filename.rsplit("/", 1)[-1] if f.filename else ""
    return f"{f.name} ({where}:{f.line})" if where else f.name


def _gpu_util(p: ProcessInfo, gpus: Sequence[GpuSample] | Unavailable) -> str:
    if p.gpu_index is None or isinstance(gpus, Unavailable):
        return "-"
    g = next((g for g in gpus if g.index == p.gpu_index), None)
    if g is None or isinstance(g.util_percent_mean, Unavailable):
        return "?"
    return f"{g.util_percent_mean:.0f}%"


def _state(p: ProcessInfo) -> Text:
    if isinstance(p.state, Unavailable):
        return Text("?", style="dim")
    style = {"T": "bold red", "D": "bold yellow", "Z": "red", "R": "green"}.get(p.state, "")
    label = p.state
    if p.stopped_before:
        label += " (was)"
    elif p.resumed:
        label += " (cont)"
    return Text(label, style=style)


# columns in the order a narrow console gives them up (top frames first): at 80 columns
# the table stays a table, its cells are never wrapped
_DROP_ORDER = ("top frames", "util", "GPU", "CPU", "RSS", "role")


class _FitTable:
    """A process table that drops columns, not wraps cells, to fit the console."""

    def __init__(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Text]]) -> None:
        self.title, self.columns, self.rows = title, list(columns), [list(r) for r in rows]

    def _natural(self, c: str) -> int:
        cells = [len(r[self.columns.index(c)].plain) for r in self.rows]
        return max(len(c), *cells) if cells else len(c)

    def _table(self, keep: Sequence[str], width: int) -> Table:
        table = Table(title=self.title, title_justify="left", expand=False, show_lines=False)
        fixed = 1 + sum(self._natural(c) + 3 for c in keep if c != "top frames")
        for col in keep:
            if col == "top frames":  # what is left, cut with an ellipsis
                table.add_column(
                    col, no_wrap=True, overflow="ellipsis", max_width=max(10, width - fixed - 3)
                )
            else:
                table.add_column(col, no_wrap=True, min_width=self._natural(col))
        index = [self.columns.index(c) for c in keep]
        for row in self.rows:
            table.add_row(*(row[i] for i in index))
        return table

    def _need(self, keep: Sequence[str]) -> int:
        width = 1
        for c in keep:
            cells = [len(r[self.columns.index(c)].plain) for r in self.rows]
            natural = max(len(c), *cells) if cells else len(c)
            width += (min(natural, 24) if c == "top frames" else natural) + 3
        return width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        keep = list(self.columns)
        for drop in _DROP_ORDER:  # (top frames may be cut to 24 cells, the rest is whole)
            if self._need(keep) <= options.max_width:
                break
            keep.remove(drop)
        yield self._table(keep, options.max_width)


def _process_table(snap: Snapshot, server: int | None, procs: Sequence[ProcessInfo]) -> _FitTable:
    title = "processes"
    if server is not None and server < len(snap.servers):
        s = snap.servers[server]
        listening = "listening" if s.get("port_listening") else "NOT listening"
        if s.get("launcher") is False:
            title = f"{s.get('framework')} processes with no launcher"
        elif s.get("port") is None:
            title = f"{s.get('framework')} · pid {s.get('launcher_pid')} and its children"
        else:
            title = (
                f"{s.get('framework')} server · launcher {s.get('launcher_pid')} · "
                f"port {s.get('port')} {listening}"
            )
    columns = (
        "role",
        "rank",
        "pid",
        "state",
        "RSS",
        "CPU",
        "GPU",
        "util",
        "wait site",
        "top frames",
    )
    rows: list[list[Text]] = []
    # the odd ones out of this server (each server's ranks are compared with each other
    # only), not of the host
    own = (
        snap.servers[server].get("outlier_tp_ranks")
        if server is not None and server < len(snap.servers)
        else None
    )
    outliers = set(own) if isinstance(own, (list, tuple)) else set(snap.outlier_tp_ranks)
    for p in sorted(
        procs,
        key=lambda p: (
            _ROLE_ORDER.get(p.role, 9),
            p.rank.sort_key if p.rank else ("", 0, 0, 0, 0),
            p.pid,
        ),
    ):
        rank = p.rank.label if p.rank is not None else "-"
        if p.rank is not None and p.rank_source and p.rank_source != "title":
            rank += f" ({p.rank_source})"
        odd = p.rank is not None and p.rank.tp in outliers and p.role in ("scheduler", "worker")
        site = p.stack.wait_site if p.stack is not None and p.stack.wait_site else None
        if site is None and p.stack is not None and p.stack.outcome != "ok" and not p.stack.threads:
            site = f"({p.stack.outcome})"
        cpu = "?" if isinstance(p.cpu_percent, Unavailable) else f"{p.cpu_percent:.0f}%"
        gpu = "-"
        if p.gpu_index is not None:
            gpu = f"{p.gpu_index}"
            if p.gpu_memory_bytes:
                gpu += f" {fmt_bytes(p.gpu_memory_bytes)}"
        rows.append(
            [  # Text, not str: frame names hold brackets rich would read as markup
                Text(p.role),
                Text(rank + (" *" if odd else ""), style="bold magenta" if odd else ""),
                Text(str(p.pid)),
                _state(p),
                Text(fmt_bytes(p.rss_bytes)),
                Text(cpu),
                Text(gpu),
                Text(_gpu_util(p, snap.gpus)),
                Text(site or "-"),
                Text(top_frames(p)),
            ]
        )
    return _FitTable(title, columns, rows)


def render_snapshot(snap: Snapshot, *, max_group_frames: int = 8) -> list[RenderableType]:
    """The verdict, a table per server, stack groups, evidence, findings, notes."""
    out: list[RenderableType] = [
        Panel(Text(verdict_text(snap)), title="verdict", title_align="left")
    ]
    by_server: dict[int | None, list[ProcessInfo]] = {}
    for p in snap.processes:
        by_server.setdefault(p.server, []).append(p)
    for server, procs in by_server.items():
        out.append(_process_table(snap, server, procs))
    if snap.groups:
        out.append(Text("stack groups (ranks with identical main-thread stacks)", style="bold"))
        for g in snap.groups:
            members = ", ".join(g.members)
            body = Text()
            shown = [f for f in g.frames if not (f.native and f.name.startswith("0x"))]
            for f in shown[:max_group_frames]:
                body.append("  " + frame_text(f, width=120) + "\n")
            if len(shown) > max_group_frames:
                body.append(f"  ... {len(shown) - max_group_frames} more frames\n", style="dim")
            out.append(
                Panel(
                    body, title=f"{g.wait_site or 'unclassified'} · {members}", title_align="left"
                )
            )
    for ev in snap.collective_evidence:
        kind = str(ev.get("kind"))
        if kind == "nccl_ras":
            out.append(
                Panel(
                    Text(str(ev.get("text", ""))[:4000]),
                    title=f"NCCL RAS {ev.get('address')}",
                    title_align="left",
                )
            )
        elif kind == "flight_recorder":
            rows = ev.get("ranks")
            lines = [
                f"rank {row.get('rank')}: last {row.get('last_collective')} "
                f"seq {row.get('last_seq')} ({row.get('last_state')})"
                for row in (rows if isinstance(rows, list) else [])
                if isinstance(row, dict)
            ]
            behind = ev.get("behind")
            if behind:
                lines.append(f"behind the others: {behind}")
            if ev.get("ahead"):
                lines.append(f"ahead of the others: {ev.get('ahead')}")
            mismatches = ev.get("mismatches")
            lines += [f"mismatch: {mm.get('text')}"
                      for mm in (mismatches if isinstance(mismatches, list) else [])
                      if isinstance(mm, dict)]
            if ev.get("hint"):
                lines.append(str(ev.get("hint")))
            out.append(
                Panel(
                    Text("\n".join(lines) or "no dumps yet"),
                    title="Flight Recorder",
                    title_align="left",
                )
            )
        elif kind in ("file_lock", "store_connections", "store_keys", "log_phase",
                      "socket_peer"):
            title = {"file_lock": "file lock", "store_connections": "store connections",
                     "store_keys": "store keys", "log_phase": "log phase",
                     "socket_peer": "waits on"}[kind]
            out.append(Panel(Text(str(ev.get("text", ""))[:2000]), title=title, title_align="left"))
    if snap.findings:
        table = Table(title="findings", title_justify="left")
        for col in ("severity", "id", "ranks", "title"):
            table.add_column(col, overflow="fold")
        for fd in snap.findings:
            style = {"error": "bold red", "warning": "yellow"}.get(fd.severity, "")
            table.add_row(
                Text(fd.severity, style=style),
                Text(fd.id),
                Text(", ".join(fd.ranks) or "-"),
                Text(fd.title),
            )
        out.append(table)
    out.extend(Text(f"partial: {reason}", style="yellow") for reason in snap.partial)
    out.extend(Text(f"note: {note}", style="dim") for note in snap.notes)
    if snap.elapsed_s is not None:
        out.append(Text(f"taken in {snap.elapsed_s:.2f} s on {snap.host}", style="dim"))
    return [Sanitized(part) for part in out]  # titles and frames are shown, not run


# ------------------------------------------------------------------------------ verdict


def _label(p: ProcessInfo) -> str:
    return p.rank.label if p.rank is not None else f"pid {p.pid}"


def _collapse(labels: Sequence[str]) -> str:
    return (
        ", ".join(labels)
        if len(labels) <= 6
        else f"{', '.join(labels[:5])} and {len(labels) - 5} more"
    )


def _short(p: ProcessInfo, n: int = 3) -> str:
    named = [f for f in _frames_for(p) if not (f.native and f.name.startswith("0x"))]
    return " <- ".join(f.name for f in named[:n])


def _proc_hint(p: ProcessInfo) -> str:
    """What the no-ptrace tier says about a process: state, wait channel, syscall and
    the native threads it runs (gloo, NCCL watchdog), for when py-spy could not attach."""
    bits = [f"state {p.state if isinstance(p.state, str) else '?'}"]
    if isinstance(p.wchan, str) and p.wchan not in ("", "0"):
        bits.append(f"wchan {p.wchan}")
    if isinstance(p.syscall, str) and p.syscall not in ("running", "blocked"):
        bits.append(f"in {p.syscall}()")
    named = sorted(n for n in p.thread_names if n.startswith(("gloo", "pt_", "cuda")))
    if named:
        bits.append("threads " + ", ".join(named[:4]))
    return ", ".join(bits)


def _where_ranks_wait(ranked: Sequence[ProcessInfo]) -> list[str]:
    """Measured, not judged: the wait sites of the ranks, the ranks with no stack (and
    what /proc says of them), and which ranks were the same in every sample."""
    if not ranked:
        return []
    parts: list[str] = []
    by_site: dict[str, list[ProcessInfo]] = {}
    for p in ranked:
        site = p.stack.wait_site if p.stack is not None else None
        by_site.setdefault(site or "an unclassified site", []).append(p)
    if len(by_site) == 1:
        site, procs = next(iter(by_site.items()))
        parts.append(f"All {len(procs)} ranks wait at {site}.")
    else:
        top = max(by_site.items(), key=lambda kv: len(kv[1]))
        parts.append(f"{len(top[1])} of {len(ranked)} ranks wait at {top[0]}.")
        for site, procs in by_site.items():
            if site == top[0]:
                continue
            where = _short(procs[0])
            parts.append(f"{_collapse([_label(p) for p in procs])}: {site}"
                         + (f" in {where}." if where else "."))
    blind = [p for p in ranked if p.stack is None or not p.stack.threads]
    if blind:
        hints = "; ".join(f"{_label(p)} {_proc_hint(p)}" for p in blind[:8])
        parts.append(f"No stack for {len(blind)} rank(s); /proc says: {hints}.")
    stuck = [_label(p) for p in ranked if p.stack is not None and p.stack.moving is False]
    moving = [_label(p) for p in ranked if p.stack is not None and p.stack.moving is True]
    bits = []
    if stuck:
        bits.append(f"stuck (same frames in every sample): {_collapse(stuck)}")
    if moving:
        bits.append(f"moving (slow, not stuck): {_collapse(moving)}")
    if bits:
        text = "; ".join(bits)
        parts.append(text[:1].upper() + text[1:] + ".")
    return parts


def _server_line(s: dict[str, object] | object) -> list[str]:
    if not isinstance(s, dict):
        return []
    port = s.get("port")
    if port is None:
        state = "no HTTP port on its command line"
    elif s.get("port_listening"):
        state = f"port {port} is listening (pid {s.get('listening_pid')})"
    else:
        state = f"port {port} is not listening"
    if s.get("launcher") is False:
        out = [f"{s.get('framework')} processes with no launcher above them "
               f"({s.get('processes')} of them; Ray workers, or a launcher that exited)."]
    else:
        out = [f"{s.get('framework')} server, launcher pid {s.get('launcher_pid')}: {state}."]
    missing = s.get("missing_tp_ranks")
    if isinstance(missing, list) and missing:
        gone = ", ".join(f"TP{r}" for r in missing)
        out.append(f"No process for {gone} of tp_size {s.get('tp_size')} "
                   "(crashed or never started).")
    return out


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def verdict_text(snap: Snapshot) -> str:
    """One paragraph: each server and its port, the findings (errors first, as the rules
    worded them), where the ranks wait, the GPU readings, and what was not collected."""
    if not snap.processes:
        return "No SGLang or vLLM server process was found on this host."
    parts: list[str] = []
    single = len(snap.servers) <= 1
    said: set[int] = set()
    for index, s in enumerate(snap.servers):
        procs = [p for p in snap.processes
                 if p.server == index or (single and p.server is None)]
        pids = {p.pid for p in procs}
        parts += _server_line(s)
        for n, f in enumerate(snap.findings):  # the findings whose evidence is this server's
            if n not in said and (single or any(e.line in pids for e in f.evidence)):
                said.add(n)
                parts.append(_sentence(f.message))
        parts += _where_ranks_wait([p for p in procs if p.role in RANK_ROLES])
    parts += [_sentence(f.message) for n, f in enumerate(snap.findings) if n not in said]
    if not snap.servers:
        parts += _where_ranks_wait([p for p in snap.processes if p.role in RANK_ROLES])
    if isinstance(snap.gpus, Unavailable):
        parts.append(f"GPUs: {snap.gpus.reason}.")
    elif snap.gpus:
        shown = ", ".join(
            f"GPU{g.index} {g.util_percent_mean:.0f}%"
            if isinstance(g.util_percent_mean, float) else f"GPU{g.index} ?"
            for g in snap.gpus
        )
        parts.append(f"GPU utilization: {shown}.")
    for ev in snap.collective_evidence:
        requested = ev.get("requested")
        silent = requested.get("silent") if isinstance(requested, dict) else None
        if ev.get("kind") == "flight_recorder" and isinstance(silent, list) and silent:
            parts.append(
                f"Flight Recorder: rank(s) {silent} did not answer a dump request "
                "(a rank spinning with the GIL held, or stuck in native code, cannot)."
            )
    if snap.partial:
        parts.append(
            "Collection was partial: " + "; ".join(r.rstrip(".") for r in snap.partial) + "."
        )
    return " ".join(p for p in parts if p)
