"""Who-is-missing evidence: NCCL's RAS service and PyTorch Flight Recorder dumps.

Stacks say *where* each rank waits; these say *who* the collective is waiting for.

- NCCL RAS (NCCL >= 2.24) listens on 127.0.0.1:28028 by default (``NCCL_RAS_ADDR``) and
  answers the line protocol its ``ncclras`` client speaks: ``CLIENT PROTOCOL 2`` ->
  ``SERVER PROTOCOL n``, ``TIMEOUT t`` -> ``OK``, ``VERBOSE STATUS`` -> text until EOF.
  It is queried only when something on this host listens on that port, with a short timeout.
- Flight Recorder (``TORCH_NCCL_TRACE_BUFFER_SIZE`` / ``TORCH_FR_BUFFER_SIZE`` set):
  torch writes one pickle per rank to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (or
  ``TORCH_FR_DUMP_TEMP_FILE``; default ``/tmp/nccl_trace_rank_``) + rank, on a timeout or
  when its debug pipe is poked. Only dumps of this host's own live processes are read,
  with an unpickler that refuses every class (a dump is plain dicts, lists, strings and
  numbers), so reading one cannot run code.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from diag.model import Unavailable

__all__ = [
    "RAS_PORT",
    "FlightRecorderDump",
    "flight_recorder_evidence",
    "load_fr_dump",
    "parse_ras_status",
    "ras_query",
    "request_fr_dumps",
    "summarise_fr",
]

RAS_PORT = 28028
FlightRecorderDump = dict[str, object]


def ras_query(
    host: str = "127.0.0.1", port: int = RAS_PORT, *, timeout_s: float = 2.0
) -> dict[str, object] | Unavailable:
    """The RAS service's verbose status text, or why it could not be read."""
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(b"CLIENT PROTOCOL 2\n")
            hello = _read_line(sock)
            if not hello.upper().startswith("SERVER PROTOCOL"):
                return Unavailable(f"RAS at {host}:{port}: unexpected greeting {hello!r}")
            sock.sendall(f"TIMEOUT {max(1, int(timeout_s))}\n".encode())
            ok = _read_line(sock)
            if ok.strip().upper() != "OK":
                return Unavailable(f"RAS at {host}:{port}: TIMEOUT answered {ok!r}")
            sock.sendall(b"VERBOSE STATUS\n")
            chunks: list[bytes] = []
            while time.monotonic() - start < timeout_s * 2:
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    break
                if not data:
                    break
                chunks.append(data)
    except OSError as exc:
        return Unavailable(f"RAS at {host}:{port}: {exc}")
    text = b"".join(chunks).decode("utf-8", "replace")
    return {
        "kind": "nccl_ras",
        "address": f"{host}:{port}",
        "protocol": hello.strip(),
        "mismatches": parse_ras_status(text),
        "text": text[:20000],
        "elapsed_s": round(time.monotonic() - start, 3),
    }


_RAS_BLOCK = re.compile(r"^#(\S+) \((\w+)\) (\w+)")
_RAS_OP = re.compile(r"different (\w+) operation counts")
_RAS_RANK = re.compile(
    r"^\s*Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations)(.*)$"
)
_RAS_GROUP = re.compile(r"^\s*(\d+) ranks have launched up to operation (\d+)")
_RAS_PID = re.compile(r"process (\d+)")
_RAS_GPU = re.compile(r"GPU ([^ ,]+)")


def parse_ras_status(text: str) -> list[dict[str, object]]:
    """The MISMATCH blocks of a RAS status text: per communicator, the operation whose
    counts differ, the highest count, and the ranks behind it (rank, count, pid, GPU).

    NCCL (``src/ras/client_support.cc``) prints, under Warnings, ``#0-0 (hash) MISMATCH``,
    ``Communicator ranks have different AllReduce operation counts``, then ``Rank 1 has
    launched up to operation 60 -- GPU 3 managed by process 1650386 on node n1`` per rank
    (or ``7 ranks have launched up to operation 64`` for a group)."""
    out: list[dict[str, object]] = []
    block: dict[str, object] | None = None
    ranks: list[dict[str, object]] = []
    top = -1

    def close() -> None:
        if block is not None and ranks:
            best = max([top, *[int(str(r["count"])) for r in ranks]])
            block["max_count"] = best
            block["behind"] = [r for r in ranks if int(str(r["count"])) < best]
            out.append(block)

    for line in text.splitlines():
        m = _RAS_BLOCK.match(line)
        if m is not None:
            close()
            block = {"communicator": f"#{m.group(1)} ({m.group(2)})", "status": m.group(3)}
            ranks, top = [], -1
            continue
        if block is None:
            continue
        if (m := _RAS_OP.search(line)) is not None:
            block["operation"] = m.group(1)
        elif (m := _RAS_GROUP.match(line)) is not None:
            top = max(top, int(m.group(2)))
        elif (m := _RAS_RANK.match(line)) is not None:
            rest = m.group(3)
            pid = _RAS_PID.search(rest)
            gpu = _RAS_GPU.search(rest)
            ranks.append(
                {
                    "rank": int(m.group(1)),
                    "count": int(m.group(2) or 0),
                    "pid": int(pid.group(1)) if pid else None,
                    "gpu": gpu.group(1) if gpu else None,
                }
            )
    close()
    return [b for b in out if b.get("status") == "MISMATCH" or b.get("behind")]


def _read_line(sock: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < 4096:
        data = sock.recv(1024)
        if not data:
            break
        buf += data
    return buf.decode("utf-8", "replace")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(
            f"refusing {module}.{name}: a Flight Recorder dump is plain data"
        )


def load_fr_dump(path: Path, *, max_bytes: int = 64 << 20) -> FlightRecorderDump | Unavailable:
    """One Flight Recorder dump (a pickle of plain containers), read without running code."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return Unavailable(f"{path}: {size} bytes, larger than {max_bytes}")
        raw = path.read_bytes()
    except OSError as exc:
        return Unavailable(f"{path}: {exc.strerror or exc}")
    try:
        data = _PlainUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:
        return Unavailable(f"{path}: not a Flight Recorder dump ({exc})")
    if not isinstance(data, dict) or "entries" not in data:
        return Unavailable(f"{path}: no 'entries' key; not a Flight Recorder dump")
    return data


def _base(filename: object) -> str:
    return str(filename or "").rsplit("/", 1)[-1]


def _last_entry(dump: FlightRecorderDump) -> dict[str, object] | None:
    entries = dump.get("entries")
    if not isinstance(entries, list) or not entries:
        return None
    last = entries[-1]
    return last if isinstance(last, dict) else None


def summarise_fr(dumps: Mapping[int, FlightRecorderDump]) -> dict[str, object]:
    """Per rank the last collective it enqueued/started/completed, and which ranks are
    behind the others in each process group (the ones the collective waits for)."""
    ranks: list[dict[str, object]] = []
    per_pg: dict[str, dict[int, int]] = {}
    for rank, dump in sorted(dumps.items()):
        last = _last_entry(dump)
        status = dump.get("pg_status")
        row: dict[str, object] = {"rank": rank}
        if last is not None:
            row.update(
                {
                    "last_collective": last.get("profiling_name"),
                    "last_seq": last.get("collective_seq_id"),
                    "last_state": last.get("state"),
                    "timeout_ms": last.get("timeout_ms"),
                }
            )
            frames = last.get("frames")
            if isinstance(frames, list) and frames:
                row["last_stack"] = [
                    f"{f.get('name')} ({_base(f.get('filename'))}:{f.get('line')})"
                    for f in frames[:6]
                    if isinstance(f, dict)
                ]
        if isinstance(status, dict):
            row["pg_status"] = status
            for pg, st in status.items():
                if isinstance(st, dict) and isinstance(st.get("last_enqueued_collective"), int):
                    per_pg.setdefault(str(pg), {})[rank] = int(st["last_enqueued_collective"])
        ranks.append(row)
    behind: dict[str, list[int]] = {}
    for pg, seqs in per_pg.items():
        top = max(seqs.values())
        late = sorted(r for r, s in seqs.items() if s < top)
        if late:
            behind[pg] = late
    return {"ranks": ranks, "behind": behind}


def _fr_paths(rank: int, env: Mapping[str, str]) -> tuple[Path, Path | None]:
    """(the dump file, the debug pipe) of one rank, from its environment."""
    prefix = (
        env.get("TORCH_FR_DUMP_TEMP_FILE")
        or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
        or "/tmp/nccl_trace_rank_"
    )
    pipe = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    return Path(f"{prefix}{rank}"), (Path(f"{pipe}{rank}.pipe") if pipe else None)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def request_fr_dumps(
    envs: Sequence[tuple[int, int | None, Mapping[str, str]]], *, wait_s: float = 5.0
) -> dict[str, object]:
    """Ask each rank's Flight Recorder for a fresh dump through its debug pipe
    (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` + rank + ``.pipe``: torch dumps when anything is
    written there) and wait up to ``wait_s`` for the dump files to change. A rank that
    does not answer is evidence too (a rank spinning with the GIL held cannot dump)."""
    asked: dict[int, tuple[Path, float | None]] = {}
    problems: dict[str, str] = {}
    for _pid, rank, env in envs:
        if rank is None:
            continue
        dump, pipe = _fr_paths(rank, env)
        if pipe is None:
            continue
        before = _mtime(dump)
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENOENT: no pipe; ENXIO: nobody reads it
            problems[str(rank)] = f"{pipe}: {exc.strerror or exc}"
            continue
        try:
            os.write(fd, b"1\n")
        except OSError as exc:
            problems[str(rank)] = f"{pipe}: {exc.strerror or exc}"
            continue
        finally:
            os.close(fd)
        asked[rank] = (dump, before)
    deadline = time.monotonic() + wait_s
    answered: set[int] = set()
    while asked and time.monotonic() < deadline:
        for rank, (dump, before) in asked.items():
            now = _mtime(dump)
            if now is not None and (before is None or now > before):
                answered.add(rank)
        if len(answered) == len(asked):
            break
        time.sleep(0.1)
    return {
        "asked": sorted(asked),
        "answered": sorted(answered),
        "silent": sorted(set(asked) - answered),
        "problems": problems,
    }


def flight_recorder_evidence(
    envs: Sequence[tuple[int, int | None, Mapping[str, str]]],
    *,
    request: bool = False,
    wait_s: float = 5.0,
) -> dict[str, object] | None:
    """FR evidence for processes given as (pid, rank, environ subset); None when no
    process has the Flight Recorder on."""
    enabled = [
        (pid, rank, env)
        for pid, rank, env in envs
        if env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0") not in ("", "0")
        or env.get("TORCH_FR_BUFFER_SIZE", "0") not in ("", "0")
    ]
    if not enabled:
        return None
    dumps: dict[int, FlightRecorderDump] = {}
    files: dict[str, str] = {}
    pipes: list[str] = []
    requested = request_fr_dumps(enabled, wait_s=wait_s) if request else None
    for _pid, rank, env in enabled:
        if rank is None:
            continue
        path, pipe_path = _fr_paths(rank, env)
        if pipe_path is not None:
            pipes.append(str(pipe_path))
        if not path.exists():
            files[str(rank)] = f"{path}: no dump yet"
            continue
        loaded = load_fr_dump(path)
        if isinstance(loaded, Unavailable):
            files[str(rank)] = loaded.reason
        else:
            dumps[rank] = loaded
            files[str(rank)] = str(path)
    out: dict[str, object] = {
        "kind": "flight_recorder",
        "enabled_pids": [pid for pid, _, _ in enabled],
        "files": files,
    }
    if requested is not None:
        out["requested"] = requested
    if dumps:
        out.update(summarise_fr(dumps))
        missing = sorted(r for _, r, _ in enabled if r is not None and r not in dumps)
        if missing:
            out["no_dump_from_ranks"] = missing
    if pipes and requested is None:
        out["hint"] = (
            "for a fresh dump: diag snapshot --fr-dump (or write to each rank's debug pipe: "
            + " ".join(f"echo 1 > {p}" for p in pipes[:8])
            + ")"
        )
    return out
