"""The versioned JSON contract of ``diag snapshot --json`` (schema_version 1).

``snapshot_to_dict`` turns a :class:`~diag.model.Snapshot` into plain JSON values: host,
servers, processes (pid, role, title, tp/dp/pp/ep rank, state, rss_bytes, cpu_percent,
listening_ports, gpu_index, gpu_memory_bytes, wait_site, stack), gpus, groups,
outlier_tp_ranks, verdict and findings, plus the collection details (how each dump went,
/proc facts, who-is-missing evidence, what was partial). An unreadable fact is ``null``
with its reason under ``unavailable``. Keys are only added within a version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diag.model import (
    Finding,
    GpuSample,
    ProcessInfo,
    Snapshot,
    StackGroup,
    StackProcess,
    Unavailable,
)
from diag.report.json_out import finding_to_dict, frame_to_dict, thread_to_dict

__all__ = ["SCHEMA_VERSION", "SNAPSHOT_SCHEMA", "snapshot_to_dict"]

SCHEMA_VERSION = 1

_INT_OR_NULL = {"type": ["integer", "null"]}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_SITE = {"type": ["string", "null"], "pattern": "^stack\\."}
_FRAME = {
    "type": "object",
    "required": ["name", "filename", "line", "native"],
    "properties": {
        "name": {"type": "string"},
        "filename": {"type": "string"},
        "line": _INT_OR_NULL,
        "module": _STR_OR_NULL,
        "native": {"type": "boolean"},
    },
}

# The contract of ``diag snapshot --json`` (JSON Schema, draft 2020-12): the keys the
# issue names are required; more keys may be added within schema_version 1.
SNAPSHOT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": [
        "schema_version",
        "host",
        "servers",
        "processes",
        "gpus",
        "groups",
        "outlier_tp_ranks",
        "verdict",
        "findings",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "host": {"type": "string"},
        "servers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["framework", "launcher_pid", "port", "port_listening"],
                "properties": {
                    "framework": {"type": "string"},
                    "launcher_pid": _INT_OR_NULL,
                    "port": _INT_OR_NULL,
                    "port_listening": {"type": "boolean"},
                    "listening_pid": _INT_OR_NULL,
                    "outlier_tp_ranks": {"type": "array", "items": {"type": "integer"}},
                },
            },
        },
        "processes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "pid",
                    "role",
                    "title",
                    "tp_rank",
                    "dp_rank",
                    "pp_rank",
                    "ep_rank",
                    "state",
                    "rss_bytes",
                    "cpu_percent",
                    "listening_ports",
                    "gpu_index",
                    "gpu_memory_bytes",
                    "wait_site",
                    "stack",
                ],
                "properties": {
                    "pid": {"type": "integer"},
                    "role": {
                        "enum": [
                            "launcher",
                            "api_server",
                            "tokenizer",
                            "scheduler",
                            "worker",
                            "detokenizer",
                            "engine_core",
                            "other",
                        ]
                    },
                    "title": {"type": "string"},
                    "tp_rank": _INT_OR_NULL,
                    "dp_rank": _INT_OR_NULL,
                    "pp_rank": _INT_OR_NULL,
                    "ep_rank": _INT_OR_NULL,
                    "state": _STR_OR_NULL,
                    "rss_bytes": _INT_OR_NULL,
                    "cpu_percent": _NUM_OR_NULL,
                    "listening_ports": {"type": "array", "items": {"type": "integer"}},
                    "gpu_index": _INT_OR_NULL,
                    "gpu_memory_bytes": _INT_OR_NULL,
                    "wait_site": _SITE,
                    "stack": {
                        "type": ["object", "null"],
                        "required": ["outcome", "threads"],
                        "properties": {
                            "outcome": {
                                "enum": [
                                    "ok",
                                    "timeout",
                                    "permission_denied",
                                    "not_found",
                                    "partial",
                                    "no_pyspy",
                                    "not_python",
                                ]
                            },
                            "wait_site": _SITE,
                            "threads": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["frames"],
                                    "properties": {"frames": {"type": "array", "items": _FRAME}},
                                },
                            },
                        },
                    },
                    "unavailable": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
        "gpus": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "util_percent_mean", "memory_used_bytes", "processes"],
                "properties": {
                    "index": {"type": "integer"},
                    "util_percent_mean": _NUM_OR_NULL,
                    "memory_used_bytes": _INT_OR_NULL,
                    "processes": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["pid", "memory_bytes"],
                            "properties": {
                                "pid": {"type": "integer"},
                                "memory_bytes": {"type": "integer"},
                            },
                        },
                    },
                },
            },
        },
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["wait_site", "ranks", "frames"],
                "properties": {
                    "wait_site": _SITE,
                    "ranks": {"type": "array", "items": {"type": "string"}},
                    "frames": {"type": "array", "items": _FRAME},
                },
            },
        },
        "outlier_tp_ranks": {"type": "array", "items": {"type": "integer"}},
        "verdict": {"type": "string"},
        "findings": {
            "type": "array",
            "items": {"type": "object", "required": ["id", "severity", "title"]},
        },
    },
}


def _val(value: object, key: str, unavailable: dict[str, str]) -> Any:
    if isinstance(value, Unavailable):
        unavailable[key] = value.reason
        return None
    if isinstance(value, tuple):
        return list(value)
    return value




def _stack(s: StackProcess | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "outcome": s.outcome,
        "mode": s.mode,
        "error": s.error,
        "wait_site": s.wait_site,
        "wait_thread": s.wait_thread,
        "samples": s.samples,
        "moving": s.moving,
        "threads": [thread_to_dict(t) for t in s.threads],
    }


def _finding(f: Finding) -> dict[str, Any]:
    return finding_to_dict(f)


def _process(p: ProcessInfo) -> dict[str, Any]:
    unavailable: dict[str, str] = {}
    rank = p.rank
    out: dict[str, Any] = {
        "pid": p.pid,
        "ppid": p.ppid,
        "role": p.role,
        "title": p.title,
        "framework": p.framework,
        "server": p.server,
        "rank": rank.label if rank is not None else None,
        "rank_source": p.rank_source,
        "tp_rank": rank.tp if rank is not None else None,
        "dp_rank": rank.dp if rank is not None else None,
        "pp_rank": rank.pp if rank is not None else None,
        "ep_rank": rank.ep if rank is not None else None,
        "state": _val(p.state, "state", unavailable),
        "rss_bytes": _val(p.rss_bytes, "rss_bytes", unavailable),
        "cpu_percent": _val(p.cpu_percent, "cpu_percent", unavailable),
        "threads": _val(p.threads, "threads", unavailable),
        "listening_ports": _val(p.listening_ports, "listening_ports", unavailable),
        "uptime_s": p.uptime_s,
        "create_time": p.create_time,
        "children": list(p.children),
        "gpu_index": p.gpu_index,
        "gpu_memory_bytes": p.gpu_memory_bytes,
        "wchan": _val(p.wchan, "wchan", unavailable),
        "syscall": _val(p.syscall, "syscall", unavailable),
        "thread_states": dict(p.thread_states),
        "thread_names": dict(p.thread_names),
        "env": dict(p.env),
        "wait_site": p.stack.wait_site if p.stack is not None else None,
        "dump": {
            "outcome": p.stack.outcome if p.stack is not None else None,
            "attempts": [dict(a) for a in p.dump_attempts],
            "native_peer": p.native_peer,
            "stopped_before": p.stopped_before,
            "resumed": p.resumed,
        },
        "stack": _stack(p.stack),
        "unavailable": unavailable,
    }
    if out["listening_ports"] is None:
        out["listening_ports"] = []
    return out


def _gpu(g: GpuSample) -> dict[str, Any]:
    unavailable: dict[str, str] = {}
    return {
        "index": g.index,
        "name": _val(g.name, "name", unavailable),
        "uuid": _val(g.uuid, "uuid", unavailable),
        "util_percent_mean": _val(g.util_percent_mean, "util_percent_mean", unavailable),
        "util_percent_max": _val(g.util_percent_max, "util_percent_max", unavailable),
        "memory_used_bytes": _val(g.memory_used_bytes, "memory_used_bytes", unavailable),
        "memory_total_bytes": _val(g.memory_total_bytes, "memory_total_bytes", unavailable),
        "samples": g.samples,
        "processes": [
            {"pid": pid, "memory_bytes": mem} for pid, mem in sorted(g.processes.items())
        ],
        "unavailable": unavailable,
    }


def _group(g: StackGroup, snap: Snapshot) -> dict[str, Any]:
    by_pid = {p.pid: p for p in snap.processes}
    tp = sorted(
        {
            r.tp
            for pid in g.pids
            if (p := by_pid.get(pid)) is not None and (r := p.rank) is not None and r.tp is not None
        }
    )
    return {
        "wait_site": g.wait_site,
        "ranks": list(g.members),
        "tp_ranks": tp,
        "pids": list(g.pids),
        "frames": [frame_to_dict(f) for f in g.frames],
    }


def _plain(value: object) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, Unavailable):
        return {"unavailable": value.reason}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def snapshot_to_dict(s: Snapshot) -> dict[str, Any]:
    """The JSON value of a snapshot (schema_version 1)."""
    gpus: Any
    if isinstance(s.gpus, Unavailable):
        gpus = []
        gpu_unavailable: str | None = s.gpus.reason
    else:
        gpus = [_gpu(g) for g in s.gpus]
        gpu_unavailable = None
    return {
        "schema_version": SCHEMA_VERSION,
        "host": s.host,
        "taken_at": s.taken_at.isoformat(),
        "elapsed_s": s.elapsed_s,
        "servers": [_plain(dict(srv)) for srv in s.servers],
        "processes": [_process(p) for p in s.processes],
        "gpus": gpus,
        "gpus_unavailable": gpu_unavailable,
        "groups": [_group(g, s) for g in s.groups],
        "outlier_tp_ranks": list(s.outlier_tp_ranks),
        "verdict": s.verdict,
        "findings": [_finding(f) for f in s.findings],
        "collective_evidence": [_plain(dict(e)) for e in s.collective_evidence],
        "partial": list(s.partial),
        "notes": list(s.notes),
        "timings": dict(s.timings),
    }
