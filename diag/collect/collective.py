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
import json
import math
import os
import pickle
import re
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from diag.limits import ascii_int
from diag.model import Unavailable

__all__ = [
    "RAS_PORT",
    "FlightRecorderDump",
    "flight_recorder_evidence",
    "load_fr_dump",
    "describe_entry",
    "match_fr",
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
    (or ``7 ranks have launched up to operation 64`` for a group). The one parser of RAS
    text: the collector keeps its result beside the text, the rules read it from here."""
    out: list[dict[str, object]] = []
    block: dict[str, object] | None = None
    ranks: list[dict[str, object]] = []
    groups: list[dict[str, int]] = []
    top = -1

    def close() -> None:
        if block is not None and ranks:
            counts = [int(str(r["count"])) for r in ranks]
            best = max([top, *counts])
            low = min([*counts, *(g["count"] for g in groups)])
            block["max_count"] = best
            block["min_count"] = low
            block["behind"] = [r for r in ranks if int(str(r["count"])) < best]
            block["ranks"] = list(ranks)
            block["groups"] = list(groups)  # "7 ranks have launched up to operation 64"
            out.append(block)

    for line in text.splitlines():
        m = _RAS_BLOCK.match(line)
        if m is not None:
            close()
            block = {"communicator": f"#{m.group(1)} ({m.group(2)})", "status": m.group(3)}
            ranks, groups, top = [], [], -1
            continue
        if block is None:
            continue
        if (m := _RAS_OP.search(line)) is not None:
            block["operation"] = m.group(1)
        elif (m := _RAS_GROUP.match(line)) is not None:
            top = max(top, int(m.group(2)))
            groups.append({"ranks": int(m.group(1)), "count": int(m.group(2))})
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
        if raw.lstrip()[:1] == b"{":  # the JSON form (fr_trace_json, _dump_fr_trace_json)
            data = json.loads(raw.decode("utf-8", "replace"))
        else:
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
                # an int in the pickle, a string in the JSON form ("last_enqueued_collective":
                # "1" from torch 2.13's fr_trace_json)
                last = st.get("last_enqueued_collective") if isinstance(st, dict) else None
                seq = ascii_int(last)
                if seq is not None:
                    per_pg.setdefault(str(pg), {})[rank] = seq
        ranks.append(row)
    # behind / ahead of the sequence number most ranks have enqueued (the highest one
    # would blame every rank when one rank, rank 0 say, issued a collective the rest never
    # did); with no majority, behind the highest
    behind: dict[str, list[int]] = {}
    ahead: dict[str, list[int]] = {}
    for pg, seqs in per_pg.items():
        counts = sorted(
            ((sum(1 for s in seqs.values() if s == v), v) for v in set(seqs.values())),
            reverse=True,
        )
        common = counts[0][1] if len(counts) == 1 or counts[0][0] > counts[1][0] else max(
            seqs.values()
        )
        late = sorted(r for r, s in seqs.items() if s < common)
        early = sorted(r for r, s in seqs.items() if s > common)
        if late:
            behind[pg] = late
        if early:
            ahead[pg] = early
    out: dict[str, object] = {"ranks": ranks, "behind": behind}
    if ahead:
        out["ahead"] = ahead
    mismatches = match_fr(dumps)
    if mismatches:
        out["mismatches"] = mismatches
    return out


# ----------------------------------------------------------------- collective matching
#
# torch's own analyser (torch/distributed/flight_recorder, fr_trace: components/types.py
# ``Op.match`` and builder.py ``build_collectives``) pairs each collective of one rank with
# the entries of the same process group on the other ranks and checks type, sizes, dtypes
# and state *against the first rank's entry*, so a culprit at rank 0 makes every other
# rank look wrong. Here the same checks run against the signature most ranks share, and
# the minority is named with what it issued instead.

_P2P = ("send", "recv")
_DTYPE = {
    "Float": "fp32",
    "BFloat16": "bf16",
    "Half": "fp16",
    "Double": "fp64",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "Float8_e4m3fn": "fp8e4m3",
    "Float8_e5m2": "fp8e5m2",
}
_MAX_ENTRIES = 100_000  # per rank; a dump holds its ring buffer (TORCH_FR_BUFFER_SIZE)


def _op_type(entry: Mapping[str, object]) -> str:
    """``nccl:all_reduce`` -> ``all_reduce``; ``gloo:send 0->1`` -> ``send``."""
    name = str(entry.get("profiling_name") or "?")
    return name.split(":", 1)[-1].split(" ", 1)[0]


def _sizes(value: object) -> list[list[int]]:
    if not isinstance(value, list):
        return []
    return [[int(d) for d in s if isinstance(d, int)] for s in value if isinstance(s, list)]


def _dtypes(value: object) -> list[str]:
    return [str(d) for d in value] if isinstance(value, list) else []


def _numel(sizes: list[list[int]]) -> int:
    return sum(math.prod(s) for s in sizes)


def _check(ref: Mapping[str, object], other: Mapping[str, object], pg_size: int,
           *, state: bool = True) -> tuple[str, str] | None:
    """fr_trace's ``Op.match`` checks for collectives, in its order: (kind, why) of the
    first that fails, or None. One deviation: the all_gather / reduce_scatter numel check
    counts every tensor of the list (fr_trace reads only the first, so the list form of
    all_gather, one output tensor per rank, always looked mismatched)."""
    t, o = _op_type(ref), _op_type(other)
    if t != o:
        return "type", f"expected collective type {t!r}, found {o!r}"
    ri, ro = _sizes(ref.get("input_sizes")), _sizes(ref.get("output_sizes"))
    oi, oo = _sizes(other.get("input_sizes")), _sizes(other.get("output_sizes"))
    if t not in ("all_to_all", "scatter") and ri != oi:
        return "size", f"expected input sizes {ri}, found {oi}"
    if t not in ("all_to_all", "gather") and ro != oo:
        return "size", f"expected output sizes {ro}, found {oo}"
    if t in ("all_reduce", "allreduce_coalesced") and ri != oo:
        return "size", f"expected input sizes {ri}, found output sizes {oo}"
    if t in ("all_gather", "all_gather_base", "all_gather_into_tensor_coalesced") and ri and (
        _numel(oo) != _numel(ri) * pg_size
    ):
        return "size", (f"input numel {_numel(ri)} x pg size {pg_size} does not match "
                        f"output numel {_numel(oo)}")
    if t in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced") and (
        ro and _numel(oi) != _numel(ro) * pg_size
    ):
        return "size", (f"input numel {_numel(oi)} does not match output numel "
                        f"{_numel(ro)} x pg size {pg_size}")
    rdi, rdo = set(_dtypes(ref.get("input_dtypes"))), set(_dtypes(ref.get("output_dtypes")))
    odi, odo = set(_dtypes(other.get("input_dtypes"))), set(_dtypes(other.get("output_dtypes")))
    if (
        (t not in ("scatter", "gather", "broadcast") and rdi != rdo and ri and ro)
        or (t not in ("scatter", "broadcast") and rdi != odi and ri and oi)
        or (t != "gather" and rdo != odo and ro and oo)
    ):
        return "dtype", f"expected dtypes {sorted(rdi)}, found {sorted(odi)}/{sorted(odo)}"
    if state and ref.get("state") != other.get("state"):
        return "state", f"expected state {ref.get('state')!r}, found {other.get('state')!r}"
    return None


def _fmt_sizes(sizes: list[list[int]]) -> str:
    if not sizes:
        return "[]"
    shown = [f"[{', '.join(map(str, s))}]" for s in sizes]
    if len(set(shown)) == 1 and len(shown) > 1:
        return f"{shown[0]}x{len(shown)}"
    return ", ".join(shown[:4]) + (f" (+{len(shown) - 4})" if len(shown) > 4 else "")


def describe_entry(entry: Mapping[str, object]) -> str:
    """``all_gather [4096] bf16``: the op, its input sizes and dtypes."""
    dtypes = sorted({_DTYPE.get(d, d) for d in _dtypes(entry.get("input_dtypes"))})
    sizes = _fmt_sizes(_sizes(entry.get("input_sizes")))
    return f"{_op_type(entry)} {sizes}" + (f" {'/'.join(dtypes)}" if dtypes else "")


def _members(dump: Mapping[str, object], pg: str) -> list[int] | None:
    config = dump.get("pg_config")
    if not isinstance(config, dict):
        return None
    got = config.get(pg)
    if not isinstance(got, dict) and len(config) == 1:
        got = next(iter(config.values()))  # gloo's default group is keyed '' in pg_config
    ranks = got.get("ranks") if isinstance(got, dict) else None
    if isinstance(ranks, str):
        try:
            parsed = [int(x) for x in ranks.strip("[] ").split(",") if x.strip()]
        except ValueError:
            return None
        return parsed
    if isinstance(ranks, list) and all(isinstance(x, int) for x in ranks):
        return list(ranks)
    return None


_PerRank = dict[int, dict[int, list[dict[str, object]]]]


def _by_pg(dumps: Mapping[int, FlightRecorderDump], tail: int = _MAX_ENTRIES
           ) -> dict[str, _PerRank]:
    """pg name -> rank -> collective seq -> that rank's entries (collectives only), from
    the last ``tail`` entries of each rank."""
    out: dict[str, _PerRank] = {}
    for rank, dump in dumps.items():
        entries = dump.get("entries")
        if not isinstance(entries, list):
            continue
        for e in entries[-min(tail, _MAX_ENTRIES):]:
            if not isinstance(e, dict) or e.get("is_p2p"):
                continue
            name = e.get("profiling_name")
            if isinstance(name, str) and (":send" in name or ":recv" in name):
                continue
            pg = e.get("process_group")
            seq = e.get("collective_seq_id")
            if not isinstance(seq, int) or not isinstance(pg, (list, tuple)) or not pg:
                continue
            out.setdefault(str(pg[0]), {}).setdefault(rank, {}).setdefault(seq, []).append(e)
    return out


def _frames(entry: Mapping[str, object], n: int = 6) -> list[str]:
    frames = entry.get("frames")
    if not isinstance(frames, list):
        return []
    return [
        f"{f.get('name')} ({_base(f.get('filename'))}:{f.get('line')})"
        for f in frames[:n]
        if isinstance(f, dict)
    ]


def _pg_desc(entry: Mapping[str, object]) -> str:
    pg = entry.get("process_group")
    return str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""


def _raw(e: Mapping[str, object]) -> str:
    """The fields the checks read, as one text: equal texts pass every check."""
    g = e.get
    return repr((g("profiling_name"), g("input_sizes"), g("output_sizes"), g("input_dtypes"),
                 g("output_dtypes")))


def _groups(entries: Mapping[int, dict[str, object]], pg_size: int) -> list[list[int]]:
    """Ranks whose entries pass fr_trace's checks against each other (state aside: dumps
    are taken at different moments), largest group first."""
    groups: list[list[int]] = []
    for rank in sorted(entries):
        for g in groups:
            if _check(entries[g[0]], entries[rank], pg_size, state=False) is None:
                g.append(rank)
                break
        else:
            groups.append([rank])
    return sorted(groups, key=lambda g: (-len(g), g[0]))


def match_fr(
    dumps: Mapping[int, FlightRecorderDump], *, max_seqs: int = 1000
) -> list[dict[str, object]]:
    """Per process group, the first collective (by sequence id) where the ranks disagree:
    the signature most ranks issued, and each other rank with what it issued instead (or
    that it issued nothing there, or issued one the majority never did). Ranks are the
    dumps' ranks (each dump file is one global rank). A tie has no majority: every side is
    listed and ``majority`` is None. Only the last ``max_seqs`` sequence ids of each group
    are compared (a live snapshot has a time budget; a hang's divergence is near the end),
    and ``checked_seqs`` says which."""
    out: list[dict[str, object]] = []
    # the tail of each rank's buffer that can hold the last max_seqs of a few groups
    for pg, per_rank in sorted(_by_pg(dumps, tail=max_seqs * 8).items()):
        ranks = sorted(per_rank)
        members = next((m for r in ranks if (m := _members(dumps[r], pg))), None)
        pg_size = len(members) if members else len(ranks)
        if members:
            ranks = [r for r in ranks if r in set(members)] or ranks
        expected = [r for r in (members or ranks) if r in dumps]
        if len(expected) < 2:
            continue
        lows = {r: min(per_rank[r]) for r in ranks}
        highs = {r: max(per_rank[r]) for r in ranks}
        for r in expected:  # a rank of the group whose dump has no entry of it
            if r not in per_rank:
                lows[r], highs[r] = 0, 0
        start = max(lows.values())
        seqs = sorted({s for r in ranks for s in per_rank[r] if s >= start})[-max_seqs:]
        found: dict[str, object] | None = None
        later: list[int] = []
        for seq in seqs:
            here = {r: per_rank[r][seq][-1] for r in ranks if seq in per_rank[r]}
            absent = [r for r in expected if r not in here and highs[r] < seq]
            if not absent and len({_raw(e) for e in here.values()}) == 1:
                continue  # every rank issued the very same entry: nothing to check
            groups = _groups(here, pg_size)
            if len(groups) <= 1 and not absent:
                continue
            if found is not None:
                later.append(seq)
                continue
            found = _disagreement(pg, seq, here, absent, groups, expected, highs, per_rank,
                                  pg_size)
        if found is not None:
            found["later_seqs"] = later[:20]
            found["checked_seqs"] = [seqs[0], seqs[-1]]
            out.append(found)
    return out


def _disagreement(
    pg: str,
    seq: int,
    here: Mapping[int, dict[str, object]],
    absent: Sequence[int],
    groups: Sequence[list[int]],
    expected: Sequence[int],
    highs: Mapping[int, int],
    per_rank: Mapping[int, Mapping[int, list[dict[str, object]]]],
    pg_size: int,
) -> dict[str, object]:
    total = len(expected)
    # the sides: each signature group, and the ranks that issued nothing at this seq
    sides: list[tuple[str, list[int]]] = [("op", g) for g in groups]
    if absent:
        sides.append(("absent", sorted(absent)))
    sides.sort(key=lambda s: -len(s[1]))
    top = sides[0]
    tie = len(sides) > 1 and len(sides[1][1]) == len(top[1])
    any_entry = next(iter(here.values()))
    desc = _pg_desc(any_entry)
    where = f"process group {pg}" + (f" ({desc})" if desc and desc != "undefined" else "")
    majority: dict[str, object] | None = None
    if not tie:
        if top[0] == "op":
            ref = here[top[1][0]]
            majority = {"ranks": top[1], "issued": describe_entry(ref), "state": ref.get("state"),
                        "frames": _frames(ref)}
        else:
            majority = {"ranks": top[1], "issued": None}
    minority: list[dict[str, object]] = []
    for kind, members in sides[0 if tie else 1:]:
        for r in members:
            row: dict[str, object] = {"rank": r}
            if kind == "absent":
                last = per_rank.get(r, {}).get(highs.get(r, -1))
                row.update({
                    "kind": "missing",
                    "issued": None,
                    "last_seq": highs.get(r) if last else None,
                    "last_issued": describe_entry(last[-1]) if last else None,
                })
            else:
                e = here[r]
                row.update({"issued": describe_entry(e), "state": e.get("state"),
                            "frames": _frames(e)})
                if majority is not None and majority.get("issued") is not None:
                    got = _check(here[top[1][0]], e, pg_size)
                    row["kind"], row["why"] = got if got else ("state", "")
                elif majority is not None:
                    row["kind"], row["why"] = "extra", "the majority issued nothing at this seq"
                else:
                    row["kind"] = "split"
            minority.append(row)
    if majority is None:
        text = (f"{where} seq {seq}: no majority among {total} ranks: "
                + "; ".join(_side_text(k, m, here) for k, m in sides))
    else:
        n = len(majority["ranks"])  # type: ignore[arg-type]
        did = (f"issued {majority['issued']}" if majority.get("issued") is not None
               else "issued nothing there")
        parts = [f"{_minority_text(row)} at seq {seq}" for row in minority]
        text = f"{'; '.join(parts)} while {n}/{total} {did} ({where})"
    return {
        "pg": pg,
        "pg_desc": desc,
        "seq": seq,
        "ranks": total,
        "majority": majority,
        "minority": minority,
        "text": text,
    }


def _minority_text(row: Mapping[str, object]) -> str:
    r = row.get("rank")
    if row.get("kind") == "missing":
        last = row.get("last_issued")
        return f"rank {r}: nothing" + (
            f" (its last: {last} at seq {row.get('last_seq')})" if last else ""
        )
    return f"rank {r}: {row.get('issued')}"


def _side_text(kind: str, members: Sequence[int], here: Mapping[int, Mapping[str, object]]) -> str:
    who = ", ".join(f"rank {r}" for r in members)
    return f"{who}: nothing" if kind == "absent" else f"{who}: {describe_entry(here[members[0]])}"


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
