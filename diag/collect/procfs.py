"""The tier that needs no ptrace: what /proc says about a process and its threads.

Every read takes a ``proc_root`` (``/proc`` on a live host, a copied tree in tests), so a
non-root user still gets states, wait channels, syscalls, thread names and listening
sockets when py-spy cannot attach. Unreadable fields become :class:`Unavailable`.
"""

from __future__ import annotations

import os
import platform
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from diag.model import Unavailable

__all__ = [
    "ENV_KEYS",
    "ProcStat",
    "ProcTier",
    "ProcWait",
    "ThreadState",
    "boot_time",
    "list_pids",
    "listening_ports_by_inode",
    "read_cmdline",
    "read_environ",
    "read_proc_tier",
    "read_stat",
    "read_state",
    "read_wait",
    "socket_inodes",
]

# Environment keys worth reading (rank coordinates, GPU mapping, Flight Recorder).
ENV_KEYS: tuple[str, ...] = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE",
    "NCCL_RAS_ENABLE",
    "NCCL_RAS_ADDR",
)

# x86_64 syscall numbers of the usual waits (read from /proc/<pid>/syscall).
_SYSCALLS_X86_64: Mapping[int, str] = {
    0: "read",
    1: "write",
    7: "poll",
    23: "select",
    35: "nanosleep",
    43: "accept",
    45: "recvfrom",
    47: "recvmsg",
    61: "wait4",
    72: "fcntl",
    73: "flock",
    202: "futex",
    230: "clock_nanosleep",
    232: "epoll_wait",
    247: "waitid",
    270: "pselect6",
    271: "ppoll",
    281: "epoll_pwait",
    288: "accept4",
    441: "epoll_pwait2",
}


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of /proc/<pid>/stat that diag uses."""

    pid: int
    comm: str
    state: str
    ppid: int
    num_threads: int
    starttime_ticks: int
    utime_ticks: int
    stime_ticks: int


@dataclass(frozen=True, slots=True)
class ThreadState:
    tid: int
    comm: str
    state: str
    wchan: str | None


@dataclass(frozen=True, slots=True)
class ProcTier:
    """One process as /proc shows it without ptrace."""

    pid: int
    state: str | Unavailable
    wchan: str | Unavailable
    syscall: str | Unavailable
    threads: tuple[ThreadState, ...]
    listening_ports: tuple[int, ...] | Unavailable
    sockets: int | Unavailable
    environ: Mapping[str, str] | Unavailable = field(default_factory=dict)
    cpu_ticks: int | None = None  # utime + stime (clock ticks) when the tier was read

    @property
    def thread_states(self) -> dict[str, int]:
        return dict(Counter(t.state for t in self.threads))

    @property
    def thread_names(self) -> dict[str, int]:
        return dict(Counter(t.comm for t in self.threads))

    @property
    def thread_wchans(self) -> dict[str, int]:
        return dict(Counter(t.wchan or "?" for t in self.threads))


@dataclass(frozen=True, slots=True)
class ProcWait:
    """Where a process waits, the first facts of its tier (state, main thread's wchan and
    syscall): three small reads, enough to choose which rank to dump first."""

    pid: int
    state: str
    wchan: str | Unavailable
    syscall: str | Unavailable


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def list_pids(proc_root: Path) -> list[int]:
    """Every numeric entry of ``proc_root``."""
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())


def _parse_stat(text: str) -> ProcStat | None:
    # comm is in parentheses and may hold spaces and ')': split at the last ')'.
    try:
        head, tail = text.rsplit(")", 1)
        pid_s, comm = head.split(" (", 1)
        fields = tail.split()
        return ProcStat(
            pid=int(pid_s),
            comm=comm,
            state=fields[0],
            ppid=int(fields[1]),
            utime_ticks=int(fields[11]),
            stime_ticks=int(fields[12]),
            num_threads=int(fields[17]),
            starttime_ticks=int(fields[19]),
        )
    except (ValueError, IndexError):
        return None


def read_stat(pid: int, proc_root: Path, tid: int | None = None) -> ProcStat | None:
    """/proc/<pid>/stat (or a thread's), or None if the process is gone."""
    base = proc_root / str(pid)
    if tid is not None:
        base = base / "task" / str(tid)
    text = _read_text(base / "stat")
    return _parse_stat(text) if text else None


def read_state(pid: int, proc_root: Path) -> str | None:
    """The one-letter state (R, S, D, T, t, Z), or None if the process is gone."""
    st = read_stat(pid, proc_root)
    return st.state if st else None


def read_cmdline(pid: int, proc_root: Path) -> tuple[str, ...]:
    """The argv; a title set by setproctitle (one space-padded string) is split on spaces."""
    try:
        raw = (proc_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ()
    parts = [p.decode("utf-8", "replace") for p in raw.split(b"\0")]
    while parts and not parts[-1]:
        parts.pop()
    if len(parts) == 1 and " " in parts[0]:
        parts = parts[0].split()
    return tuple(parts)


def read_environ(
    pid: int, proc_root: Path, keys: Iterable[str] = ENV_KEYS
) -> dict[str, str] | Unavailable:
    """The named variables of /proc/<pid>/environ (needs the same user or root)."""
    try:
        raw = (proc_root / str(pid) / "environ").read_bytes()
    except PermissionError:
        return Unavailable("environ not readable (another user's process; run as root)")
    except OSError as exc:
        return Unavailable(f"environ: {exc.strerror or exc}")
    wanted = set(keys)
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            k = key.decode("utf-8", "replace")
            if k in wanted:
                out[k] = value.decode("utf-8", "replace")
    return out


def boot_time(proc_root: Path) -> float | None:
    text = _read_text(proc_root / "stat")
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def _wchan(path: Path) -> str | Unavailable:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except PermissionError:
        return Unavailable("wchan not readable")
    except OSError as exc:
        return Unavailable(f"wchan: {exc.strerror or exc}")
    return text or "0"


def _syscall(path: Path) -> str | Unavailable:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except PermissionError:
        return Unavailable("syscall not readable (needs ptrace permission)")
    except OSError as exc:
        return Unavailable(f"syscall: {exc.strerror or exc}")
    first = text.split(" ", 1)[0] if text else ""
    if first in ("running", "-1"):
        return "running" if first == "running" else "blocked"
    try:
        nr = int(first)
    except ValueError:
        return first or "?"
    if platform.machine() == "x86_64" and nr in _SYSCALLS_X86_64:
        return _SYSCALLS_X86_64[nr]
    return f"syscall {nr}"


def listening_ports_by_inode(proc_root: Path) -> dict[int, int]:
    """Socket inode -> port of every listening TCP socket (tcp and tcp6)."""
    out: dict[int, int] = {}
    for name in ("tcp", "tcp6"):
        text = _read_text(proc_root / "net" / name)
        if not text:
            continue
        for line in text.splitlines()[1:]:
            cols = line.split()
            if len(cols) < 10 or cols[3] != "0A":  # 0A = LISTEN
                continue
            try:
                port = int(cols[1].rsplit(":", 1)[1], 16)
                out[int(cols[9])] = port
            except (ValueError, IndexError):
                continue
    return out


def socket_inodes(pid: int, proc_root: Path) -> list[int] | Unavailable:
    """Inodes of the sockets a process holds open (from its fd links)."""
    fd_dir = proc_root / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except PermissionError:
        return Unavailable("fd table not readable (another user's process; run as root)")
    except OSError as exc:
        return Unavailable(f"fd: {exc.strerror or exc}")
    inodes: list[int] = []
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.append(int(target[8:-1]))
    return inodes


def _threads(pid: int, proc_root: Path) -> tuple[ThreadState, ...]:
    task = proc_root / str(pid) / "task"
    try:
        tids = sorted(int(n) for n in os.listdir(task) if n.isdigit())
    except OSError:
        return ()
    out: list[ThreadState] = []
    for tid in tids:
        st = read_stat(pid, proc_root, tid)
        if st is None:
            continue
        w = _wchan(task / str(tid) / "wchan")
        out.append(ThreadState(tid, st.comm, st.state, w if isinstance(w, str) else None))
    return tuple(out)


def read_wait(pid: int, proc_root: Path = Path("/proc")) -> ProcWait | None:
    """The process's :class:`ProcWait`; None when it is gone."""
    st = read_stat(pid, proc_root)
    if st is None:
        return None
    base = proc_root / str(pid)
    return ProcWait(pid, st.state, _wchan(base / "wchan"), _syscall(base / "syscall"))


def read_proc_tier(
    pid: int,
    proc_root: Path = Path("/proc"),
    *,
    listening: Mapping[int, int] | None = None,
) -> ProcTier | Unavailable:
    """Everything the no-ptrace tier knows about one process.

    ``listening`` is :func:`listening_ports_by_inode`, read once per snapshot."""
    st = read_stat(pid, proc_root)
    if st is None:
        return Unavailable(f"process {pid} not found")
    base = proc_root / str(pid)
    inodes = socket_inodes(pid, proc_root)
    if listening is None:
        listening = listening_ports_by_inode(proc_root)
    ports: tuple[int, ...] | Unavailable
    sockets: int | Unavailable
    if isinstance(inodes, Unavailable):
        ports, sockets = inodes, inodes
    else:
        ports = tuple(sorted({listening[i] for i in inodes if i in listening}))
        sockets = len(inodes)
    return ProcTier(
        pid=pid,
        state=st.state,
        wchan=_wchan(base / "wchan"),
        syscall=_syscall(base / "syscall"),
        threads=_threads(pid, proc_root),
        listening_ports=ports,
        sockets=sockets,
        environ=read_environ(pid, proc_root),
        cpu_ticks=st.utime_ticks + st.stime_ticks,
    )
