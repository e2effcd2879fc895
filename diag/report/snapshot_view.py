"""The terminal view of a snapshot: the verdict first, then a table per server (one row
per process: role, rank, pid, state, RSS, CPU, GPU, util, wait site, top frames), then
the stack groups, the who-is-missing evidence, findings and notes.

``render_snapshot`` returns rich renderables; only ``diag/commands`` prints them.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from diag.model import GpuSample, ProcessInfo, Snapshot, StackFrame, Unavailable
from diag.report.sanitize import Sanitized

__all__ = ["fmt_bytes", "frame_text", "render_snapshot", "top_frames"]

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
        Panel(Text(snap.verdict or "(no verdict)"), title="verdict", title_align="left")
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
            if ev.get("hint"):
                lines.append(str(ev.get("hint")))
            out.append(
                Panel(
                    Text("\n".join(lines) or "no dumps yet"),
                    title="Flight Recorder",
                    title_align="left",
                )
            )
        elif kind in ("file_lock", "store_connections"):
            title = "file lock" if kind == "file_lock" else "store connections"
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
