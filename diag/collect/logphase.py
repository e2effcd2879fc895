"""Each rank's log phase, from the log file the server writes (``nohup ... > server.log``).

A rank's stdout and stderr are file descriptors 1 and 2 in ``/proc/PID/fd``; when they
point at a regular file (not a terminal, pipe or socket), the tail of that file is the
server's log. It is read (the last ``max_bytes``, from a line start) and analysed like any
log (``diag.analyze.analyze_text``), and each rank's last phase and last line time is
kept, so a rank the snapshot names (a collective it issued alone, a store it never
reached) is shown with where its log says it got. Nothing is written; a file that is not
readable is said, not guessed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from diag.model import ProcessInfo

__all__ = ["log_files", "rank_log_phases"]

_ROLES = ("launcher", "api_server", "engine_core", "scheduler", "worker")


def _target(pid: int, fd: int, proc_root: Path) -> str | None:
    link = proc_root / str(pid) / "fd" / str(fd)
    try:
        target = os.readlink(link)
        st = os.stat(link)
    except OSError:
        return None
    if not target.startswith("/") or target.endswith(" (deleted)"):
        return None
    return target if stat.S_ISREG(st.st_mode) else None


def log_files(processes: Sequence[ProcessInfo], proc_root: Path = Path("/proc")) -> list[str]:
    """The regular files the server's processes write their stdout / stderr to."""
    out: dict[str, None] = {}
    for p in processes:
        if p.role not in _ROLES:
            continue
        for fd in (1, 2):
            target = _target(p.pid, fd, proc_root)
            if target is not None:
                out.setdefault(target, None)
    return list(out)


def _tail(path: Path, max_bytes: int) -> str:
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read(max_bytes)
    if start:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data.decode("utf-8", "replace")


def rank_log_phases(
    processes: Sequence[ProcessInfo],
    proc_root: Path = Path("/proc"),
    *,
    max_bytes: int = 1 << 20,
    max_files: int = 4,
) -> list[dict[str, object]]:
    """One ``log_phase`` evidence entry per log file the server writes: per rank label its
    last phase, last line time and silence, as the log analysis reads them."""
    from diag.analyze import analyze_text
    from diag.errors import DiagError

    out: list[dict[str, object]] = []
    for name in log_files(processes, proc_root)[:max_files]:
        path = Path(name)
        try:
            text = _tail(path, max_bytes)
        except OSError as exc:
            out.append({"kind": "log_phase", "file": name, "ranks": {},
                        "text": f"log {name}: not readable ({exc.strerror or exc})"})
            continue
        try:
            analysis = analyze_text(text, name)
        except DiagError as exc:
            out.append({"kind": "log_phase", "file": name, "ranks": {},
                        "text": f"log {name}: {exc.message}"})
            continue
        ranks: dict[str, dict[str, object]] = {}
        for r in analysis.ranks:
            ranks[r.rank.label] = {
                "last_phase": r.last_phase,
                "last_ts": r.last_ts.isoformat() if r.last_ts is not None else None,
                "silent_s": r.silent_s,
            }
        shown = ", ".join(f"{k} {v['last_phase'] or '?'}" for k, v in list(ranks.items())[:8])
        out.append({
            "kind": "log_phase",
            "file": name,
            "ranks": ranks,
            "last_phase": analysis.last_phase,
            "text": f"log {name}: " + (shown or "no rank lines"),
        })
    return out
