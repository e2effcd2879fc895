"""psutil facts for a set of processes: state, RSS, CPU% over one shared window, threads,
listening TCP ports, uptime and children.

CPU% is sampled for all processes at once (one window, not one per process), so the
cost is the window, whatever the number of ranks. The window may have started before
psutil is imported (``since``: each process's CPU time as /proc showed it, and when):
the snapshot starts it with its /proc tier, so psutil's import is not spent inside it.
psutil's exceptions are translated here into :class:`Unavailable` values.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from diag.model import Unavailable

__all__ = ["ProcessFacts", "collect_facts", "listening_ports_by_pid", "port_open"]


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    pid: int
    state: str | Unavailable
    rss_bytes: int | Unavailable
    cpu_percent: float | Unavailable
    threads: int | Unavailable
    listening_ports: tuple[int, ...] | Unavailable
    create_time: float | None
    uptime_s: float | None
    children: tuple[int, ...]


# psutil status names -> the /proc one-letter states diag reports.
_STATE = {
    psutil.STATUS_RUNNING: "R",
    psutil.STATUS_SLEEPING: "S",
    psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_STOPPED: "T",
    psutil.STATUS_TRACING_STOP: "t",
    psutil.STATUS_ZOMBIE: "Z",
    psutil.STATUS_DEAD: "X",
    psutil.STATUS_IDLE: "I",
}


def _why(exc: Exception) -> Unavailable:
    if isinstance(exc, psutil.NoSuchProcess):
        return Unavailable("process exited")
    if isinstance(exc, psutil.AccessDenied):
        return Unavailable("access denied (another user's process; run as root)")
    return Unavailable(f"{type(exc).__name__}: {exc}")


def listening_ports_by_pid() -> dict[int, tuple[int, ...]] | Unavailable:
    """pid -> listening TCP ports, from one system-wide table."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        return Unavailable("the socket table needs root to map ports to processes")
    out: dict[int, set[int]] = {}
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.pid is not None and c.laddr:
            out.setdefault(c.pid, set()).add(c.laddr.port)
    return {pid: tuple(sorted(ports)) for pid, ports in out.items()}


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.3) -> bool:
    """Whether something accepts a TCP connection on ``host:port`` (the one connect probe:
    the snapshot's check of a server port no process of the snapshot owns, and ``diag
    watch``'s wait for the port)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _start(pid: int) -> psutil.Process | Unavailable:
    """A handle whose CPU counter starts now (the window's first reading)."""
    try:
        p = psutil.Process(pid)
        p.cpu_percent(None)
    except psutil.Error as exc:
        return _why(exc)
    return p


def _get(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except (psutil.Error, OSError) as exc:
        return _why(exc)


def _handle(pid: int) -> psutil.Process | Unavailable:
    try:
        return psutil.Process(pid)
    except psutil.Error as exc:
        return _why(exc)


def _cpu_since(h: psutil.Process, start: tuple[float, float]) -> object:
    """CPU% since ``start`` (monotonic time, CPU seconds then), as psutil's cpu_percent
    computes it (user + system time over wall time, 100 = one CPU)."""
    try:
        times = h.cpu_times()
    except (psutil.Error, OSError) as exc:
        return _why(exc)
    elapsed = time.monotonic() - start[0]
    if elapsed <= 0:
        return 0.0
    return max(0.0, (times.user + times.system - start[1]) / elapsed * 100.0)


def collect_facts(
    pids: Sequence[int],
    *,
    window_s: float = 0.3,
    now: float | None = None,
    since: Mapping[int, tuple[float, float]] | None = None,
) -> dict[int, ProcessFacts]:
    """Facts for every pid; CPU% is measured over one ``window_s`` window shared by all.
    ``since``: pid -> (time.monotonic(), CPU seconds) of a first reading already taken;
    the window of those pids runs from then (the others' starts now)."""
    since = since or {}
    handles = {pid: _handle(pid) if pid in since else _start(pid) for pid in pids}
    ends = [t0 + window_s for pid, (t0, _) in since.items() if pid in handles]
    if any(pid not in since for pid in pids):
        ends.append(time.monotonic() + window_s)
    wait = max(ends, default=0.0) - time.monotonic()
    if window_s > 0 and wait > 0:
        time.sleep(wait)
    ports = listening_ports_by_pid()
    stamp = time.time() if now is None else now
    out: dict[int, ProcessFacts] = {}
    for pid, h in handles.items():
        if isinstance(h, Unavailable):
            out[pid] = ProcessFacts(pid, h, h, h, h, h, None, None, ())
            continue
        cpu = _cpu_since(h, since[pid]) if pid in since else _get(h.cpu_percent)
        with h.oneshot():
            status = _get(h.status)
            mem = _get(h.memory_info)
            nthreads = _get(h.num_threads)
            created = _get(h.create_time)
            kids = _get(h.children)
        listening: tuple[int, ...] | Unavailable
        if isinstance(ports, Unavailable):
            conns = _get(h.net_connections)
            if isinstance(conns, Unavailable):
                listening = conns
            else:
                assert isinstance(conns, list)
                listening = tuple(
                    sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN})
                )
        else:
            listening = ports.get(pid, ())
        ctime = created if isinstance(created, float) else None
        out[pid] = ProcessFacts(
            pid=pid,
            state=_STATE.get(status, str(status))
            if isinstance(status, str)
            else _as_unavail(status),
            rss_bytes=mem.rss if hasattr(mem, "rss") else _as_unavail(mem),
            cpu_percent=round(cpu, 1) if isinstance(cpu, float) else _as_unavail(cpu),
            threads=nthreads if isinstance(nthreads, int) else _as_unavail(nthreads),
            listening_ports=listening,
            create_time=ctime,
            uptime_s=round(stamp - ctime, 1) if ctime is not None else None,
            children=tuple(sorted(k.pid for k in kids)) if isinstance(kids, list) else (),
        )
    return out


def _as_unavail(value: object) -> Unavailable:
    return value if isinstance(value, Unavailable) else Unavailable(f"unexpected value {value!r}")
