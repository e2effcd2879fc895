"""Who a waiting rank waits for, from /proc alone (no ptrace, nothing written anywhere).

- **File locks** (``/proc/locks``): a process blocked in ``flock``/``fcntl`` shows as a
  ``->`` entry after the lock it waits for; the holder is the entry of the same device and
  inode that is not blocked. The path comes from the waiter's open file descriptors.
- **Store connections** (``/proc/PID/net/tcp*`` and each process's socket inodes): a
  TCPStore (the rendezvous of ``init_process_group``, or a store of the framework's own)
  is a port some rank listens on and every rank opens a client connection to. Before the
  first NCCL communicator exists this is the one place that says which rank never came.
- **Thread names** (``/proc/PID/task/*/comm``, read by the /proc tier): how far each rank
  got in torch.distributed — ``pt_tcpstore_uv`` is a TCPStore server (libuv) it hosts,
  ``gloo_tcp_loop`` / ``pt_gloo_runloop`` a gloo process group, ``pt_nccl_*`` (watchdog,
  heartbeat monitor) a ProcessGroupNCCL, ``NCCL ...`` threads a live NCCL communicator.
  Joined with the store census: a rank with no process-group thread never got through
  ``init_process_group``; no rank with an NCCL thread means NCCL RAS and the Flight
  Recorder cannot say anything yet.

Both return plain dicts (``Snapshot.collective_evidence`` entries: ``kind``, what was
found, and a one-line ``text``), or nothing when there is nothing to say.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from diag.collect.procfs import socket_inodes
from diag.limits import ascii_int
from diag.model import ProcessInfo, Unavailable

__all__ = [
    "LockEntry",
    "dist_threads",
    "thread_census",
    "lock_waits",
    "parse_locks",
    "read_locks",
    "socket_peers",
    "store_connections",
    "store_key_census",
    "unix_socket_peers",
]

_MAX_LOCK_LINES = 100_000  # a host with more locks than this is not read further
_MAX_FDS = 65_536


@dataclass(frozen=True, slots=True)
class LockEntry:
    ident: str
    kind: str  # FLOCK | POSIX | OFDLCK | LEASE
    mode: str  # READ | WRITE
    pid: int | None
    dev: str  # "fd:01" (major:minor, hex as the kernel prints it)
    inode: int
    blocked: bool  # a "->" entry: waiting for the lock listed before it


def _int(text: str, limit: int = 12) -> int | None:
    """A non-negative decimal of at most ``limit`` digits (an OFD lock's pid is -1: none)."""
    value = ascii_int(text, max_digits=limit)
    return value if value is not None and value >= 0 else None


def parse_locks(text: str) -> list[LockEntry]:
    """``/proc/locks`` lines: ``1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`` and, for
    a waiter, ``1: -> FLOCK  ADVISORY  WRITE 4243 fd:01:1234 0 EOF``."""
    out: list[LockEntry] = []
    for line in text.splitlines()[:_MAX_LOCK_LINES]:
        cols = line.split()
        if len(cols) < 5 or not cols[0].endswith(":"):
            continue
        blocked = cols[1] == "->"
        rest = cols[2:] if blocked else cols[1:]
        if len(rest) < 5:
            continue
        kind, mode = rest[0], rest[2]
        pid = _int(rest[3])
        where = rest[4].split(":")
        if len(where) != 3:
            continue
        inode = _int(where[2], 20)
        if inode is None:
            continue
        out.append(LockEntry(cols[0].rstrip(":"), kind, mode, pid, f"{where[0]}:{where[1]}",
                             inode, blocked))
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _fd_path_for_inode(pid: int, inode: int, proc_root: Path) -> str | None:
    fd_dir = proc_root / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)[:_MAX_FDS]
    except OSError:
        return None
    for name in names:
        path = _link_if_inode(fd_dir / name, inode)
        if path is not None:
            return path
    return None


def _link_if_inode(fd: Path, inode: int) -> str | None:
    try:
        return os.readlink(fd) if os.stat(fd).st_ino == inode else None
    except OSError:
        return None


def _title(pid: int, proc_root: Path, known: Mapping[int, ProcessInfo]) -> str:
    if pid in known:
        p = known[pid]
        return p.rank.label if p.rank is not None else f"{p.role} {p.title}"[:80]
    cmd = _read(proc_root / str(pid) / "cmdline")
    if cmd:
        return cmd.replace("\0", " ").strip()[:80]
    return "?"


def _fd_inodes(pid: int, proc_root: Path) -> dict[tuple[str, int], str]:
    """(dev as /proc/locks prints it, inode) -> path of every regular file ``pid`` holds open."""
    fd_dir = proc_root / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)[:_MAX_FDS]
    except OSError:
        return {}
    out: dict[tuple[str, int], str] = {}
    for name in names:
        got = _fd_key(fd_dir / name)
        if got is not None:
            out[got[0]] = got[1]
    return out


def _fd_key(fd: Path) -> tuple[tuple[str, int], str] | None:
    try:
        st = os.stat(fd)
        target = os.readlink(fd)
    except OSError:
        return None
    if not target.startswith("/"):
        return None  # sockets, pipes, anon inodes
    return (f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino), target


def _waits_in_lock(p: ProcessInfo) -> bool:
    """The stack shows a lock acquisition (py-filelock polls flock with LOCK_NB and sleeps,
    so the kernel never lists it as blocked)."""
    if p.stack is None:
        return False
    for t in p.stack.threads:
        for f in t.frames[:12]:
            name, fn = f.name.lower(), f.filename.lower()
            if "filelock" in fn or "flock" in name or "lockf" in name or (
                "acquire" in name and "lock" in fn
            ):
                return True
    return False


def read_locks(proc_root: Path = Path("/proc")) -> str | None:
    """/proc/locks as text (None: unreadable). A process's first read of it can wait
    ~15 ms in the kernel: the snapshot reads it beside the dumps, not after them."""
    return _read(proc_root / "locks")


def lock_waits(
    processes: Sequence[ProcessInfo],
    proc_root: Path = Path("/proc"),
    locks: str | None = None,
) -> list[dict[str, object]]:
    """One entry per process of the snapshot that waits for a file lock another process
    holds: blocked in the kernel (a ``->`` entry of /proc/locks), or holding the locked
    file open while its stack is acquiring a lock (py-filelock's polling). The entry names
    the lock's path and its holder (pid, and what it is: a rank, the launcher, another
    program). ``locks``: /proc/locks as already read (``read_locks``), else it is read."""
    text = locks if locks is not None else read_locks(proc_root)
    if not text:
        return []
    entries = parse_locks(text)
    mine = {p.pid: p for p in processes}
    held: dict[tuple[str, int], set[int]] = {}
    for h in entries:
        if not h.blocked and h.pid is not None:
            held.setdefault((h.dev, h.inode), set()).add(h.pid)
    waits: dict[int, tuple[tuple[str, int], str, str | None]] = {}
    for e in entries:
        if e.blocked and e.pid in mine:
            waits[e.pid] = ((e.dev, e.inode), e.kind,
                            _fd_path_for_inode(e.pid, e.inode, proc_root))
    for p in processes:
        if p.pid in waits or not held or not _waits_in_lock(p):
            continue
        for key, fd_path in _fd_inodes(p.pid, proc_root).items():
            lockers = held.get(key, set())
            if lockers and p.pid not in lockers:
                waits[p.pid] = (key, "FLOCK", fd_path)
                break
    out: list[dict[str, object]] = []
    # py-filelock closes its fd after each failed try: a process whose stack is acquiring a
    # lock but holds no locked file open gets the lock files other processes hold, as
    # candidates (said as such: the kernel does not tell which one it polls for)
    for p in processes:
        if p.pid in waits or not _waits_in_lock(p):
            continue
        cands = []
        for key, pids in held.items():
            others = sorted(pids - {p.pid})
            if not others or p.pid in pids:
                continue
            path = _fd_path_for_inode(others[0], key[1], proc_root)
            if path and "lock" in path.rsplit("/", 1)[-1].lower():
                cands.append((path, others))
        if not cands:
            continue
        cands.sort()
        name = p.rank.label if p.rank is not None else f"pid {p.pid}"
        listed = "; ".join(
            f"{path} held by "
            + ", ".join(f"pid {h} ({_title(h, proc_root, mine)})" for h in hs)
            for path, hs in cands[:5]
        )
        one = len(cands) == 1
        out.append({
            "kind": "file_lock",
            "waiter": p.pid,
            "waiter_rank": p.rank.label if p.rank is not None else None,
            "lock": "FLOCK",
            "path": cands[0][0] if one else None,
            "holders": cands[0][1] if one else sorted({h for _, hs in cands for h in hs}),
            "holder_in_server": [h for _, hs in cands for h in hs if h in mine],
            "certain": False,
            "text": (
                f"{name} is acquiring a file lock (polling: the kernel does not say which "
                f"file); {'the one lock file' if one else 'lock files'} other processes "
                f"hold: {listed}"
            ),
        })
    for pid, (key, kind, path) in sorted(waits.items()):
        holders = sorted(held.get(key, set()) - {pid})
        waiter = mine[pid]
        who = [f"pid {h} ({_title(h, proc_root, mine)})" for h in holders]
        name = waiter.rank.label if waiter.rank is not None else f"pid {waiter.pid}"
        out.append({
            "kind": "file_lock",
            "waiter": pid,
            "waiter_rank": waiter.rank.label if waiter.rank is not None else None,
            "lock": kind,
            "path": path,
            "inode": key[1],
            "holders": holders,
            "holder_in_server": [h for h in holders if h in mine],
            "text": (
                f"{name} waits for a {kind} lock on {path or f'inode {key[1]}'} held by "
                + (", ".join(who) if who else "no process this host shows (another container?)")
            ),
        })
    return out


def dist_threads(p: ProcessInfo) -> dict[str, int]:
    """How many threads of each torch.distributed / NCCL kind the process runs (from its
    /proc thread names; comm names are cut to 15 characters by the kernel)."""
    out = {"store_server": 0, "gloo": 0, "pt_nccl": 0, "nccl": 0}
    for name, n in p.thread_names.items():
        if name.startswith("pt_tcpstore"):
            out["store_server"] += n
        elif name.startswith(("gloo", "pt_gloo")):
            out["gloo"] += n
        elif name.startswith("pt_nccl"):
            out["pt_nccl"] += n
        elif name.startswith("NCCL"):
            out["nccl"] += n
    return out


def thread_census(ranks: Sequence[ProcessInfo]) -> list[dict[str, object]]:
    """The ranks of one server that lag the others in torch.distributed by their thread
    names alone: no process-group thread while others have one (never got through
    ``init_process_group``), or no NCCL thread while others have one (no communicator
    yet). Works where the store's port is on another host (multi-node: the store census
    has nothing to read here). Nothing when the ranks agree."""
    if len(ranks) < 2:
        return []
    labels = {p.pid: p.rank.label if p.rank is not None else f"pid {p.pid}" for p in ranks}
    threads = {p.pid: dist_threads(p) for p in ranks if p.thread_names}
    if len(threads) < 2:
        return []
    out: list[dict[str, object]] = []
    stages: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("process-group thread (gloo or NCCL)", ("gloo", "pt_nccl", "nccl")),
        ("NCCL thread", ("pt_nccl", "nccl")),
    )
    for what, keys in stages:
        with_it = [pid for pid, t in threads.items() if any(t[k] for k in keys)]
        without = [pid for pid, t in threads.items() if not any(t[k] for k in keys)]
        if with_it and without and len(with_it) >= len(without):
            out.append({
                "kind": "dist_threads",
                "behind": [labels[p] for p in without],
                "ahead": [labels[p] for p in with_it],
                "text": (f"{', '.join(labels[p] for p in without)} "
                         f"{'runs' if len(without) == 1 else 'run'} no {what} while "
                         f"{len(with_it)} of {len(threads)} ranks do (thread names in /proc)"),
            })
            break  # the earlier stage is the one that matters
    return out


def _stage(t: Mapping[str, int]) -> str:
    if t["nccl"]:
        return "NCCL communicator threads"
    if t["pt_nccl"]:
        return "ProcessGroupNCCL threads, no NCCL communicator thread yet"
    if t["gloo"]:
        return "a gloo process group, no NCCL thread"
    return "no process-group thread (before init_process_group)"


def _tcp_table(pid: int, proc_root: Path) -> list[tuple[int, int, int, str]]:
    """(local port, remote port, inode, state hex) of the TCP sockets in the network
    namespace of ``pid``."""
    rows: list[tuple[int, int, int, str]] = []
    for name in ("tcp", "tcp6"):
        text = _read(proc_root / str(pid) / "net" / name)
        if not text:
            continue
        for line in text.splitlines()[1:]:
            cols = line.split()
            if len(cols) < 10:
                continue
            try:
                lport = int(cols[1].rsplit(":", 1)[1], 16)
                rport = int(cols[2].rsplit(":", 1)[1], 16)
                inode = int(cols[9]) if len(cols[9]) <= 20 else 0
            except (ValueError, IndexError):
                continue
            rows.append((lport, rport, inode, cols[3]))
    return rows


def _named_ports(procs: Sequence[ProcessInfo]) -> set[int]:
    """Ports the processes were told to rendezvous on."""
    out: set[int] = set()
    for p in procs:
        for key in ("MASTER_PORT", "SGLANG_DIST_PORT"):
            v = p.env.get(key, "")
            if v.isascii() and v.isdigit() and len(v) <= 5:
                out.add(int(v))
        args = list(p.cmdline)
        for i, a in enumerate(args[:-1]):
            if a in ("--master-port", "--master_port", "--nccl-port", "--dist-init-addr"):
                tail = args[i + 1].rsplit(":", 1)[-1]
                if tail.isascii() and tail.isdigit() and len(tail) <= 5:
                    out.add(int(tail))
    return out


def _inode_set(found: list[int] | Unavailable) -> set[int] | None:
    return None if isinstance(found, Unavailable) else set(found)


def store_connections(
    ranks: Sequence[ProcessInfo], proc_root: Path = Path("/proc"), *, expected: int | None = None
) -> list[dict[str, object]]:
    """For every port a rank of one server listens on: which ranks hold an established
    client connection to it and which do not. Only ports that most ranks connect to are
    stores (an HTTP port or a ZMQ socket of one rank is not); reported only when some rank
    is missing."""
    if len(ranks) < 2:
        return []
    inodes = {p.pid: _inode_set(socket_inodes(p.pid, proc_root)) for p in ranks}
    readable = [p for p in ranks if inodes[p.pid] is not None]
    if len(readable) < 2:
        return []
    table = _tcp_table(readable[0].pid, proc_root)
    listening = {(lport, inode) for lport, _, inode, st in table if st == "0A"}
    # The rendezvous store is hosted by the first rank (torch.distributed's TCPStore
    # master is global rank 0, and so are the frameworks' own stores). Ports other ranks
    # listen on are point-to-point (gloo's full mesh: each pair connects once, so a later
    # rank's port never sees every peer) and are not stores.
    first = min(readable, key=lambda p: p.rank.sort_key if p.rank is not None else ("~",))
    out: list[dict[str, object]] = []
    for port, linode in sorted(listening):
        owner = next((p for p in readable if linode in (inodes[p.pid] or ())), None)
        if owner is None or owner is not first:
            continue  # a port of no rank (the HTTP server, another program) or a p2p port
        clients = {inode for lport, rport, inode, st in table if rport == port and st == "01"}
        # A store's master is also its own client (torch's TCPStore connects to itself);
        # gloo's pair ports never see their owner connect. A port the ranks were told to
        # meet on (MASTER_PORT, --master-port, --dist-init-addr) is a store regardless.
        if not ((inodes[owner.pid] or set()) & clients) and port not in _named_ports(readable):
            continue
        connected = [p for p in readable
                     if p is owner or (inodes[p.pid] or set()) & clients]
        if len(connected) * 2 <= len(readable) and not (
            expected is not None and len(connected) >= 2
        ):
            continue  # not a port the ranks rendezvous on
        missing = [p for p in readable if p not in connected]
        want = max(expected or 0, len(readable))
        if not missing and len(connected) >= want:
            continue

        def label(p: ProcessInfo) -> str:
            return p.rank.label if p.rank is not None else f"pid {p.pid}"

        absent = want - len(readable)
        threads = {label(p): dist_threads(p) for p in readable}
        stages = [f"{label(p)}: {_stage(threads[label(p)])}" for p in missing]
        no_nccl = bool(readable) and not any(t["pt_nccl"] or t["nccl"] for t in threads.values())
        text = (
            f"store on port {port} ({label(owner)} listens): {len(connected)} of {want} ranks "
            f"connected; not connected: {', '.join(label(p) for p in missing) or 'none'}"
            + (f" ({'; '.join(stages)})" if stages else "")
            + (f"; {absent} expected rank(s) not running on this host" if absent > 0 else "")
            + ("; no rank runs an NCCL thread yet (NCCL RAS and the Flight Recorder have "
               "nothing to say)" if no_nccl else "")
        )
        out.append({
            "kind": "store_connections",
            "port": port,
            "owner": owner.pid,
            "connected": [label(p) for p in connected],
            "not_connected": [label(p) for p in missing],
            "not_connected_pids": [p.pid for p in missing],
            "expected": want,
            "threads": threads,
            "store_servers": {k: v["store_server"] for k, v in threads.items()
                              if v["store_server"]},
            "text": text,
        })
    return out


def store_key_census(
    port: int, host: str = "127.0.0.1", *, timeout_s: float = 2.0, max_keys: int = 200
) -> dict[str, object] | Unavailable:
    """Opt-in (``SnapshotOptions.store_keys``), read-only: the keys a TCPStore holds, read
    with torch's own client. The client is made with no world size and without waiting
    for workers, so it adds no key (a client given ``world_size`` bumps the store's
    hidden worker counter; tested on real gloo ranks: ``num_keys`` is the same before and
    after, and after a second census); it calls only ``num_keys``, ``list_keys`` (torch
    >= 2.9 servers) and nothing that sets, adds, compares or deletes. The count is read
    before and after and both are returned, so a store that changed meanwhile says so."""
    try:
        import datetime

        import torch.distributed as dist
    except Exception as exc:  # torch missing in diag's environment, or broken
        return Unavailable(f"store key census needs torch in diag's environment ({exc})")
    try:
        client = dist.TCPStore(  # type: ignore[attr-defined]
            host, port, is_master=False, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    except Exception as exc:
        return Unavailable(f"store {host}:{port}: {str(exc).splitlines()[0][:200]}")
    try:
        before = int(client.num_keys())
        keys: list[str] | Unavailable
        try:
            keys = sorted(str(k) for k in client.list_keys())
        except Exception as exc:  # an older server: counts only
            keys = Unavailable(f"list_keys: {str(exc).splitlines()[0][:200]}")
        after = int(client.num_keys())
    except Exception as exc:
        return Unavailable(f"store {host}:{port}: {str(exc).splitlines()[0][:200]}")
    finally:
        del client
    listed = keys if isinstance(keys, list) else []
    shown = ", ".join(listed[:12]) + (f" and {len(listed) - 12} more" if len(listed) > 12 else "")
    return {
        "kind": "store_keys",
        "port": port,
        "num_keys": before,
        "num_keys_after": after,
        "keys": listed[:max_keys],
        "keys_unavailable": keys.reason if isinstance(keys, Unavailable) else None,
        "text": (
            f"store on port {port}: {before} key(s)"
            + (f" (then {after}: it changed while read)" if after != before else "")
            + (f": {shown}" if listed else "")
            + (f"; {keys.reason}" if isinstance(keys, Unavailable) else "")
        ),
    }


# ------------------------------------------------------------ socket and pipe peers
#
# A rank blocked reading one file descriptor (read/recvfrom/recvmsg with the fd as the
# first argument of /proc/PID/syscall) waits for whoever holds the other end: for a pipe,
# the processes holding the same pipe inode open; for a unix socket, the holder of its
# peer socket (the kernel says which through sock_diag, as `ss -xp` asks it); for a TCP
# connection on this host, the holder of the socket whose local port is its remote port.

_READS = {"x86_64": {0: "read", 19: "readv", 45: "recvfrom", 47: "recvmsg"},
          "aarch64": {63: "read", 65: "readv", 207: "recvfrom", 212: "recvmsg"}}
_MAX_SCAN = 4096  # processes whose fds are searched for the other end


def _blocked_read(pid: int, proc_root: Path) -> tuple[str, int] | None:
    import platform

    text = _read(proc_root / str(pid) / "syscall")
    cols = (text or "").split()
    if len(cols) < 2:
        return None
    nr, arg0 = _int(cols[0], 4), cols[1]
    name = _READS.get(platform.machine(), {}).get(nr if nr is not None else -1)
    if name is None or not arg0.startswith("0x"):
        return None
    try:
        return name, int(arg0, 16)
    except ValueError:
        return None


def unix_socket_peers() -> dict[int, int] | Unavailable:
    """inode -> peer inode of every connected unix socket in diag's network namespace,
    from the kernel's sock_diag (NETLINK_SOCK_DIAG, UNIX_DIAG_PEER), read-only."""
    import socket
    import struct

    af_netlink = getattr(socket, "AF_NETLINK", None)
    if af_netlink is None:
        return Unavailable("no netlink on this platform")
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, 0x4, 0, 0)
    msg = struct.pack("=IHHII", 16 + len(req), 20, 0x1 | 0x300, 1, 0) + req
    out: dict[int, int] = {}
    try:
        with socket.socket(af_netlink, socket.SOCK_RAW, 4) as s:
            s.settimeout(2.0)
            s.sendto(msg, (0, 0))
            done = False
            while not done:
                data = s.recv(1 << 16)
                if not data:
                    break
                off = 0
                while off + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, off)
                    if length < 16 or kind in (2, 3):  # NLMSG_ERROR, NLMSG_DONE
                        done = True
                        break
                    body = data[off + 16 : off + length]
                    if len(body) >= 16:
                        ino = struct.unpack_from("=I", body, 4)[0]
                        a = 16
                        while a + 4 <= len(body):
                            alen, atype = struct.unpack_from("=HH", body, a)
                            if alen < 4:
                                break
                            if atype == 2 and alen >= 8:  # UNIX_DIAG_PEER
                                out[ino] = struct.unpack_from("=I", body, a + 4)[0]
                            a += (alen + 3) & ~3
                    off += (length + 3) & ~3
    except OSError as exc:
        return Unavailable(f"sock_diag: {exc.strerror or exc}")
    return out


def _holders(target: str, proc_root: Path, first: Sequence[int], skip: int) -> list[int]:
    """Pids (``first`` searched before the rest of /proc) holding an fd that links to
    ``target`` (``pipe:[123]``, ``socket:[456]``), ``skip`` left out."""
    found: list[int] = []
    try:
        rest = [int(n) for n in os.listdir(proc_root) if n.isdigit()]
    except OSError:
        rest = []
    order = list(dict.fromkeys([*first, *sorted(rest)]))[:_MAX_SCAN]
    inner = set(first)
    for pid in order:
        if pid == skip:
            continue
        if found and pid not in inner:
            break  # held inside the server: the rest of the host is not searched
        fd_dir = proc_root / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)[:_MAX_FDS]
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(fd_dir / name) == target:
                    found.append(pid)
                    break
            except OSError:
                continue
        if found and pid not in first:
            break  # found outside the server: one holder is enough
    return found


def _tcp_peer_inode(pid: int, inode: int, proc_root: Path) -> int | None:
    rows = _tcp_table(pid, proc_root)
    mine = next((r for r in rows if r[2] == inode), None)
    if mine is None:
        return None
    lport, rport = mine[0], mine[1]
    other = next((r for r in rows if r[0] == rport and r[1] == lport and r[2] != inode), None)
    return other[2] if other is not None and other[2] else None


def socket_peers(
    processes: Sequence[ProcessInfo], proc_root: Path = Path("/proc")
) -> list[dict[str, object]]:
    """One entry per rank (or engine core) blocked reading a pipe or a socket whose other
    end /proc shows: the fd, what it is, and the processes holding the other end."""
    mine = {p.pid: p for p in processes}
    waiting = [p for p in processes if p.role in ("scheduler", "worker", "engine_core")]
    unix: dict[int, int] | Unavailable | None = None
    out: list[dict[str, object]] = []
    for p in waiting:
        got = _blocked_read(p.pid, proc_root)
        if got is None:
            continue
        call, fd = got
        try:
            link = os.readlink(proc_root / str(p.pid) / "fd" / str(fd))
        except OSError:
            continue
        inode = _int(link.split("[", 1)[-1].rstrip("]"), 20) if "[" in link else None
        if inode is None:
            continue
        target: str | None = None
        what = link
        if link.startswith("pipe:"):
            target, what = link, "a pipe"
        elif link.startswith("socket:"):
            peer = _tcp_peer_inode(p.pid, inode, proc_root)
            if peer is not None:
                what = "a TCP connection on this host"
            else:
                if unix is None:
                    unix = unix_socket_peers()
                peer = unix.get(inode) if isinstance(unix, dict) else None
                what = "a unix socket"
            target = f"socket:[{peer}]" if peer else None
        if target is None:
            continue
        holders = _holders(target, proc_root, list(mine), p.pid)
        if not holders:
            continue
        name = p.rank.label if p.rank is not None else f"pid {p.pid}"
        who = ", ".join(f"pid {h} ({_title(h, proc_root, mine)})" for h in holders[:4])
        out.append({
            "kind": "socket_peer",
            "waiter": p.pid,
            "waiter_rank": p.rank.label if p.rank is not None else None,
            "call": call,
            "fd": fd,
            "what": what,
            "holders": holders,
            "holder_in_server": [h for h in holders if h in mine],
            "text": f"{name} waits in {call}() on {what} (fd {fd}) whose other end {who} "
                    f"hold{'s' if len(holders) == 1 else ''}",
        })
    return out
