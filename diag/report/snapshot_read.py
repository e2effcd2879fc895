"""Reading a snapshot back from its JSON (``snapshot.json`` in a bundle).

The inverse of :func:`diag.report.snapshot_json.snapshot_to_dict`, as far as the JSON
holds it: command lines are not stored, an unreadable fact comes back as
``Unavailable(reason)`` from the process's ``unavailable`` map. A malformed value is an
:class:`InputError` naming the field, never a traceback.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from diag.errors import InputError
from diag.model import (
    GpuSample,
    ProcessInfo,
    Snapshot,
    StackGroup,
    StackProcess,
    Unavailable,
)
from diag.report.json_out import (
    _finding_from_dict,
    _frame_from_dict,
    _thread_from_dict,
    parse_rank_label,
)

__all__ = ["snapshot_from_dict"]


def _fact(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = d.get(key)
    if value is None:
        reason = (d.get("unavailable") or {}).get(key)
        return Unavailable(str(reason) if reason else "not recorded")
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InputError(f"snapshot JSON: {key} of pid {d.get('pid')!r} is {value!r}")
    return value


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stack(d: Mapping[str, Any] | None, p: Mapping[str, Any]) -> StackProcess | None:
    if not isinstance(d, Mapping):
        return None
    rank = p.get("rank")
    return StackProcess(
        pid=_opt_int(p.get("pid")),
        title=p.get("title"),
        threads=tuple(_thread_from_dict(t) for t in d.get("threads") or ()),
        wait_site=d.get("wait_site"),
        wait_thread=_opt_int(d.get("wait_thread")),
        rank=parse_rank_label(rank) if isinstance(rank, str) else None,
        outcome=str(d.get("outcome") or "ok"),
        mode=d.get("mode"),
        error=d.get("error"),
        samples=_opt_int(d.get("samples")) or 1,
        moving=d.get("moving") if isinstance(d.get("moving"), bool) else None,
    )


def _process(d: Mapping[str, Any]) -> ProcessInfo:
    pid = _opt_int(d.get("pid"))
    if pid is None:
        raise InputError(f"snapshot JSON: a process has pid {d.get('pid')!r}")
    rank = d.get("rank")
    ports = _fact(d, "listening_ports", list)
    dump = d.get("dump") if isinstance(d.get("dump"), Mapping) else {}
    assert isinstance(dump, Mapping)
    ctime = d.get("create_time")
    return ProcessInfo(
        pid=pid,
        ppid=_opt_int(d.get("ppid")),
        role=str(d.get("role") or "other"),
        title=str(d.get("title") or ""),
        cmdline=(),
        framework=d.get("framework"),
        rank=parse_rank_label(rank) if isinstance(rank, str) else None,
        rank_source=d.get("rank_source"),
        state=_fact(d, "state", str),
        rss_bytes=_fact(d, "rss_bytes", int),
        cpu_percent=float(v)
        if not isinstance(v := _fact(d, "cpu_percent", (int, float)), Unavailable)
        else v,
        threads=_fact(d, "threads", int),
        listening_ports=tuple(ports) if isinstance(ports, list) else ports,
        create_time=float(ctime) if isinstance(ctime, (int, float)) else None,
        children=tuple(c for c in d.get("children") or () if isinstance(c, int)),
        gpu_index=_opt_int(d.get("gpu_index")),
        gpu_memory_bytes=_opt_int(d.get("gpu_memory_bytes")),
        wchan=d.get("wchan") if isinstance(d.get("wchan"), str) else None,
        stack=_stack(d.get("stack"), d),
        uptime_s=d.get("uptime_s") if isinstance(d.get("uptime_s"), (int, float)) else None,
        syscall=d.get("syscall") if isinstance(d.get("syscall"), str) else None,
        thread_states=dict(d.get("thread_states") or {}),
        thread_names=dict(d.get("thread_names") or {}),
        env={str(k): str(v) for k, v in (d.get("env") or {}).items()},
        stopped_before=bool(dump.get("stopped_before")),
        resumed=bool(dump.get("resumed")),
        native_peer=_opt_int(dump.get("native_peer")),
        server=_opt_int(d.get("server")),
        dump_attempts=tuple(a for a in dump.get("attempts") or () if isinstance(a, Mapping)),
    )


def _gpu(d: Mapping[str, Any]) -> GpuSample:
    def num(key: str) -> Any:
        value = d.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) if key.startswith("util") else int(value)
        reason = (d.get("unavailable") or {}).get(key)
        return Unavailable(str(reason) if reason else "not recorded")

    name, uuid = d.get("name"), d.get("uuid")
    return GpuSample(
        index=int(d.get("index", 0)),
        name=name if isinstance(name, str) else Unavailable("not recorded"),
        uuid=uuid if isinstance(uuid, str) else Unavailable("not recorded"),
        util_percent_mean=num("util_percent_mean"),
        util_percent_max=num("util_percent_max"),
        memory_used_bytes=num("memory_used_bytes"),
        memory_total_bytes=num("memory_total_bytes"),
        samples=int(d.get("samples") or 0),
        processes={
            int(e["pid"]): int(e.get("memory_bytes") or 0)
            for e in d.get("processes") or ()
            if isinstance(e, Mapping) and isinstance(e.get("pid"), int)
        },
    )


def _group(d: Mapping[str, Any]) -> StackGroup:
    return StackGroup(
        wait_site=d.get("wait_site"),
        members=tuple(str(m) for m in d.get("ranks") or d.get("members") or ()),
        frames=tuple(_frame_from_dict(f) for f in d.get("frames") or ()),
        pids=tuple(p for p in d.get("pids") or () if isinstance(p, int)),
    )


def snapshot_from_dict(d: Mapping[str, Any]) -> Snapshot:
    """A :class:`Snapshot` from the JSON ``diag snapshot --json`` writes (schema 1)."""
    if not isinstance(d, Mapping):
        raise InputError("snapshot JSON: the top level is not an object")
    if d.get("schema_version") != 1:
        raise InputError(
            f"snapshot JSON: schema_version {d.get('schema_version')!r} is not supported",
            help_text="Read it with the diag version that wrote it.",
        )
    try:
        taken = dt.datetime.fromisoformat(str(d["taken_at"]))
        if taken.tzinfo is None:
            taken = taken.replace(tzinfo=dt.timezone.utc)
        gpus: tuple[GpuSample, ...] | Unavailable
        if d.get("gpus_unavailable"):
            gpus = Unavailable(str(d["gpus_unavailable"]))
        else:
            gpus = tuple(_gpu(g) for g in d.get("gpus") or ())
        elapsed = d.get("elapsed_s")
        return Snapshot(
            host=str(d.get("host") or ""),
            taken_at=taken,
            processes=tuple(_process(p) for p in d.get("processes") or ()),
            gpus=gpus,
            servers=tuple(dict(s) for s in d.get("servers") or () if isinstance(s, Mapping)),
            groups=tuple(_group(g) for g in d.get("groups") or ()),
            outlier_tp_ranks=tuple(
                r for r in d.get("outlier_tp_ranks") or () if isinstance(r, int)
            ),
            verdict=str(d.get("verdict") or ""),
            findings=tuple(_finding_from_dict(f) for f in d.get("findings") or ()),
            notes=tuple(str(n) for n in d.get("notes") or ()),
            elapsed_s=float(elapsed) if isinstance(elapsed, (int, float)) else None,
            collective_evidence=tuple(
                e for e in d.get("collective_evidence") or () if isinstance(e, Mapping)
            ),
            partial=tuple(str(r) for r in d.get("partial") or ()),
            timings={
                str(k): float(v)
                for k, v in (d.get("timings") or {}).items()
                if isinstance(v, (int, float))
            },
        )
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"snapshot JSON: malformed ({type(exc).__name__}: {exc})") from exc
