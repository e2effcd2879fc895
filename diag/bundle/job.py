"""One bundle for a job that spans several hosts, and one snapshot of the whole job.

``job_snapshot`` merges the snapshots of every host into one :class:`~diag.model.Snapshot`
whose ranks carry their host (``RankId.node``): stack groups and odd ranks are computed
across all hosts (as LLNL's STAT does across a job), the servers of one framework become
one server (TP ranks expected by the launcher are counted as present on whichever host
runs them), each host's notes and partial reasons are kept with the host's name, and the
time of the job's snapshot is the earliest host's, on the collecting machine's clock.

``write_job_bundle`` packs every host's own bundle (its manifest, env.json, snapshot.json,
stacks, report.md: redacted on that host before it left) under ``hosts/<host>/``, the
logs of each host under ``logs/<host>/`` (so ``diag analyze JOB.tar.gz`` reads every
node's log, named by its node), and on top the merged view: ``snapshot.json`` (the job's
snapshot), ``job.json`` (hosts, clock offsets and error bounds, groups, odd ranks),
``env.json`` (what every host agrees on, and per host what differs) and ``report.md``.
``diag analyze`` / ``diag report`` of that bundle show the job view; ``job_from_bundles``
merges bundles written on single hosts (``diag analyze hang-node0.tar.gz hang-node1.tar.gz``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from diag import __version__
from diag.bundle.read import FORMAT, MANIFEST, SCHEMA_VERSION, Bundle
from diag.model import (
    ProcessInfo,
    Snapshot,
    StackFrame,
    StackGroup,
    StackProcess,
    Unavailable,
)

__all__ = [
    "HostPart",
    "JOB_MEMBER",
    "cross_host_groups",
    "job_from_bundles",
    "at_host",
    "frame_diff",
    "job_snapshot",
    "job_view",
    "measured_clocks",
    "merge_env",
    "write_job_bundle",
]

JOB_MEMBER = "job.json"
RANK_ROLES = ("scheduler", "worker", "engine_core")
_ENV_KEYS = ("python", "os", "gpus", "driver", "cuda", "packages", "server_packages")


@dataclass(frozen=True, slots=True)
class HostPart:
    """One host's part of a job: its snapshot and the offset of its clock from ours."""

    host: str
    snapshot: Snapshot
    offset_s: float | None = None  # the host's clock minus the collector's
    offset_err_s: float | None = None


# ---------------------------------------------------------------------------
# ranks across hosts


def _tag(p: ProcessInfo, host: str) -> ProcessInfo:
    """The process with its rank (and its stack's rank) on ``host`` where none was set."""
    rank = p.rank
    if rank is not None and rank.node is None:
        rank = replace(rank, node=host)
    stack = replace(p.stack, rank=rank) if p.stack is not None else None
    return replace(p, rank=rank, stack=stack)


def _python_view(sp: StackProcess) -> StackProcess:
    return replace(
        sp,
        threads=tuple(
            replace(t, frames=tuple(f for f in t.frames if not f.native)) for t in sp.threads
        ),
    )


def at_host(label: str) -> str:
    """A host-tagged rank label (``node1 TP3``, ``10.0.0.2 DP0 TP3``) as ``TP3@node1``,
    ``DP0 TP3@10.0.0.2``; a label with no host stays as it is."""
    if label.startswith("pid "):
        return label
    node, sep, rest = label.partition(" ")
    if not sep or not rest or node[:2] in ("DP", "PP", "TP", "EP") and node[2:].isdigit():
        return label
    return f"{rest}@{node}"


def cross_host_groups(
    tagged: Sequence[ProcessInfo],
) -> tuple[tuple[StackGroup, ...], tuple[str, ...]]:
    """Stack groups of the ranks of every host (grouped on their Python frames, each group
    showing a natively dumped member's frames where one exists) and the labels of the odd
    ranks out (``RankId.label`` form)."""
    from diag.collect import stackapi
    from diag.stacks.merge import outliers

    ranked = [p for p in tagged if p.role in RANK_ROLES and p.stack is not None]
    if not ranked:
        return (), ()
    views = [_python_view(p.stack) for p in ranked if p.stack is not None]
    groups = stackapi.group(views)
    full = {p.rank.label: p.stack for p in ranked if p.rank is not None and p.stack is not None}
    shown: list[StackGroup] = []
    for g in groups:
        for label in g.members:
            sp = full.get(label)
            if sp is None or sp.mode != "native":
                continue
            thread = next((t for t in sp.threads if t.thread_id == sp.wait_thread), None)
            if thread is None:
                thread = next((t for t in sp.threads if t.frames), None)
            if thread is not None and thread.frames:
                g = replace(g, frames=thread.frames)
                break
        shown.append(g)
    ranks_only = [
        StackGroup(g.wait_site, tuple(m for m in g.members if not m.startswith("pid ")),
                   g.frames, g.pids)
        for g in shown
    ]
    odd = tuple(outliers([g for g in ranks_only if g.members]))
    return tuple(shown), odd


def frame_diff(
    majority: StackGroup, odd: StackGroup, *, shown: int = 3
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Where an odd group's stack leaves the majority's: the last Python frame both share
    (from the outermost inwards, line numbers aside) and the next ``shown`` frames of each."""

    def key(f: StackFrame) -> tuple[str, str]:
        return (f.name, f.filename.rsplit("/", 1)[-1])

    # Python frames (native ones differ per process: addresses, the interpreter's own)
    a = [f for f in reversed(majority.frames) if not f.native]
    b = [f for f in reversed(odd.frames) if not f.native]
    n = 0
    while n < min(len(a), len(b)) and key(a[n]) == key(b[n]):
        n += 1
    shared = a[n - 1].label if n else "(no frame in common)"
    return (shared, tuple(f.label for f in a[n:n + shown]),
            tuple(f.label for f in b[n:n + shown]))


def _merged_servers(
    parts: Sequence[HostPart], tagged: Mapping[str, Sequence[ProcessInfo]], odd_tp: Sequence[int]
) -> tuple[list[dict[str, object]], dict[tuple[str, int], int]]:
    """One server per framework across the hosts (a multi-node server is one server with
    a launcher on one host, or on each), and the map (host, old index) -> new index."""
    by_fw: dict[str, dict[str, object]] = {}
    index_of: dict[tuple[str, int], int] = {}
    order: list[str] = []
    for part in parts:
        for i, s in enumerate(part.snapshot.servers):
            fw = str(s.get("framework") or "unknown")
            if fw not in by_fw:
                order.append(fw)
                by_fw[fw] = {"framework": fw, "launcher": False, "launcher_pid": None,
                             "port": None, "port_listening": False, "listening_pid": None,
                             "processes": 0, "hosts": []}
            m = by_fw[fw]
            index_of[(part.host, i)] = order.index(fw)
            hosts = m["hosts"]
            assert isinstance(hosts, list)
            hosts.append(part.host)
            procs = s.get("processes")
            before = m["processes"]
            m["processes"] = (before if isinstance(before, int) else 0) + (
                procs if isinstance(procs, int) else 0
            )
            if s.get("launcher") and not m["launcher"]:
                m["launcher"], m["launcher_pid"] = True, s.get("launcher_pid")
                m["launcher_host"] = part.host
            if m["port"] is None and s.get("port") is not None:
                m["port"], m["port_source"] = s.get("port"), s.get("port_source")
            if s.get("port_listening") and not m["port_listening"]:
                m["port_listening"], m["listening_pid"] = True, s.get("listening_pid")
                m["listening_host"] = part.host
            tp = s.get("tp_size")
            if isinstance(tp, int) and "tp_size" not in m:
                m["tp_size"] = tp
    servers: list[dict[str, object]] = []
    for fw in order:
        m = by_fw[fw]
        index = order.index(fw)
        present = {
            p.rank.tp
            for part in parts
            for i, s in enumerate(part.snapshot.servers)
            if index_of[(part.host, i)] == index
            for p in tagged[part.host]
            if p.server == i and p.role in RANK_ROLES and p.rank is not None
            and p.rank.tp is not None
        }
        tp = m.get("tp_size")
        if isinstance(tp, int) and present:
            m["missing_tp_ranks"] = sorted(set(range(tp)) - present)
        m["outlier_tp_ranks"] = list(odd_tp)
        servers.append(m)
    return servers, index_of


def job_snapshot(
    parts: Sequence[HostPart], *, failed: Sequence[tuple[str, str]] = ()
) -> Snapshot:
    """The snapshots of every host as one snapshot of the job (see the module's text)."""
    return job_view(parts, failed=failed)[0]


def job_view(
    parts: Sequence[HostPart], *, failed: Sequence[tuple[str, str]] = ()
) -> tuple[Snapshot, tuple[str, ...]]:
    """The job's snapshot and the labels of its odd ranks out (``RankId.label`` form)."""
    from diag.report.snapshot_view import verdict_text

    tagged: dict[str, list[ProcessInfo]] = {
        part.host: [_tag(p, part.host) for p in part.snapshot.processes] for part in parts
    }
    every = [p for part in parts for p in tagged[part.host]]
    groups, odd = cross_host_groups(every)
    tp_of = {p.rank.label: p.rank.tp for p in every if p.rank is not None}
    odd_tp = sorted({t for label in odd if (t := tp_of.get(label)) is not None})
    servers, index_of = _merged_servers(parts, tagged, odd_tp)
    processes = tuple(
        replace(p, server=index_of.get((part.host, p.server)) if p.server is not None else None)
        for part in parts
        for p in tagged[part.host]
    )
    gpus: list[Any] = []
    gpu_reasons: list[str] = []
    for part in parts:
        if isinstance(part.snapshot.gpus, Unavailable):
            gpu_reasons.append(f"{part.host}: {part.snapshot.gpus.reason}")
        else:
            gpus += list(part.snapshot.gpus)
    notes: list[str] = []
    partial: list[str] = []
    taken: list[dt.datetime] = []
    for part in parts:
        s = part.snapshot
        at = s.taken_at
        if part.offset_s is not None:
            at = at - dt.timedelta(seconds=part.offset_s)
        taken.append(at)
        clock = (
            f", clock {part.offset_s:+.3f} s ± {part.offset_err_s:.3f} s"
            if part.offset_s is not None and part.offset_err_s is not None
            else ", clock offset not measured"
        )
        n = sum(1 for p in s.processes if p.role in RANK_ROLES)
        notes.append(f"host {part.host}: {n} rank processes, taken {s.taken_at.isoformat()}{clock}")
        notes += [f"{part.host}: {note}" for note in s.notes]
        partial += [f"{part.host}: {why}" for why in s.partial]
    partial += [f"{host}: {why}" for host, why in failed]
    snap = Snapshot(
        host=", ".join(part.host for part in parts),
        taken_at=min(taken) if taken else dt.datetime.now(dt.timezone.utc),
        processes=processes,
        gpus=tuple(gpus) if gpus or not gpu_reasons else Unavailable("; ".join(gpu_reasons)),
        servers=tuple(servers),
        groups=groups,
        outlier_tp_ranks=tuple(odd_tp),
        notes=tuple(notes),
        collective_evidence=tuple(
            {**dict(e), "host": part.host} for part in parts
            for e in part.snapshot.collective_evidence
        ),
        partial=tuple(partial),
        elapsed_s=max((p.snapshot.elapsed_s or 0.0 for p in parts), default=None),
    )
    try:
        from diag.rules import apply_snapshot_rules

        snap = replace(snap, findings=apply_snapshot_rules(snap))
    except Exception:  # noqa: BLE001  (a broken rule file must not cost the job's view)
        pass
    head = f"Job of {len(parts)} host{'s' if len(parts) != 1 else ''} ({snap.host})"
    if failed:
        head += f"; not collected: {', '.join(h for h, _ in failed)}"
    if odd:
        from diag.collect.fanout import fold_ranks

        head += f"; odd ranks out: {fold_ranks([at_host(m) for m in odd])}"
    return replace(snap, verdict=f"{head}. {verdict_text(snap)}"), odd


# ---------------------------------------------------------------------------
# environment


def merge_env(envs: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """What every host agrees on as is; where hosts differ, ``{host: value}``."""
    out: dict[str, object] = {"hosts": sorted(envs)}
    differ: list[str] = []
    for key in _ENV_KEYS:
        values = {h: e[key] for h, e in envs.items() if key in e}
        if not values:
            continue
        texts = {json.dumps(v, sort_keys=True, default=str) for v in values.values()}
        if len(texts) == 1 and len(values) == len(envs):
            out[key] = next(iter(values.values()))
        else:
            out[key] = {"per_host": values}
            differ.append(key)
    if differ:
        out["differs_between_hosts"] = differ
    return out


# ---------------------------------------------------------------------------
# writing


_SAFE = re.compile(r"[^A-Za-z0-9._@+-]")


def _host_dir(host: str, used: set[str]) -> str:
    name = _SAFE.sub("_", host).strip("._") or "host"
    base, n = name, 2
    while name in used:
        name, n = f"{base}-{n}", n + 1
    used.add(name)
    return name


@dataclass(frozen=True, slots=True)
class JobBundleInfo:
    path: Path
    size: int
    members: tuple[str, ...]
    hosts: tuple[str, ...]


def _dumps(value: Any) -> bytes:
    return (json.dumps(value, indent=1, ensure_ascii=False, default=str) + "\n").encode()


def write_job_bundle(
    out: Path,
    *,
    hosts: Sequence[Mapping[str, Any]],
    parts: Mapping[str, Bundle],
    job: Mapping[str, Any],
    command_line: Sequence[str] = (),
) -> JobBundleInfo:
    """One bundle for the job. ``hosts``: one entry per host asked (``host``, ``ok``,
    ``error``, clock offset and error, elapsed time); ``parts``: each collected host's
    own bundle, already read and checked; ``job``: the merged view (groups, odd ranks)."""
    from diag.bundle.write import _write_atomically
    from diag.report.snapshot_json import snapshot_to_dict
    from diag.report.snapshot_read import snapshot_from_dict

    members: dict[str, bytes] = {}
    logs: list[dict[str, Any]] = []
    host_entries: list[dict[str, Any]] = []
    snapshots: list[HostPart] = []
    envs: dict[str, Mapping[str, object]] = {}
    redactions: dict[str, int] = {}
    used: set[str] = set()
    notes: list[str] = []
    for entry in hosts:
        host = str(entry["host"])
        item = {k: v for k, v in entry.items() if k != "snapshot"}
        bundle = parts.get(host)
        if bundle is None and entry.get("ok") and isinstance(entry.get("snapshot"), dict):
            # a host whose diag sent its snapshot alone (too old for --out -)
            data = _dumps(entry["snapshot"])
            bundle = Bundle(path=Path(f"{host}.tar.gz"), manifest={"logs": []}, members={
                "snapshot.json": data,
                MANIFEST: _dumps({"format": FORMAT, "schema": SCHEMA_VERSION, "host": host,
                                  "notes": ["snapshot only: the host's diag cannot send a "
                                            "bundle (--out -)"]}),
            })
        if bundle is None:
            host_entries.append({**item, "part": None})
            continue
        folder = _host_dir(host, used)
        prefix = f"hosts/{folder}/"
        for name, data in bundle.members.items():
            if name.startswith("logs/"):
                members[f"logs/{folder}/{name[5:]}"] = data
            else:
                members[prefix + name] = data
        for log in bundle.manifest.get("logs") or ():
            if not isinstance(log, dict) or not isinstance(log.get("member"), str):
                continue
            moved = dict(log)
            moved["member"] = f"logs/{folder}/{log['member'][5:]}"
            if isinstance(log.get("index"), str):
                moved["index"] = f"logs/{folder}/{log['index'][5:]}"
            moved["source"] = f"{folder}/{log.get('source') or log['member'][5:]}"
            moved["host"] = host
            logs.append(moved)
        for kind, count in (bundle.manifest.get("redactions") or {}).items():
            if isinstance(count, int):
                redactions[kind] = redactions.get(kind, 0) + count
        if "env.json" in bundle.members:
            value = bundle.json("env.json")
            if isinstance(value, dict):
                envs[host] = value
        if "snapshot.json" in bundle.members:
            snapshots.append(HostPart(
                host, snapshot_from_dict(bundle.json("snapshot.json")),
                entry.get("clock_offset_s"), entry.get("clock_error_s"),
            ))
        host_entries.append({**item, "part": prefix})
    failed = [(str(e["host"]), str(e.get("error") or "not collected"))
              for e in hosts if not e.get("ok")]
    snap = job_snapshot(snapshots, failed=failed) if snapshots else None
    env = merge_env(envs)
    members["env.json"] = _dumps(env)
    job_value = {**dict(job), "hosts": host_entries}
    members[JOB_MEMBER] = _dumps(job_value)
    from diag.report.markdown import render_markdown

    if snap is not None:
        members["snapshot.json"] = _dumps(snapshot_to_dict(snap))
        from diag.report.combined import combine, empty_analysis

        view = replace(combine(empty_analysis("job bundle", snap), snap), environment=env)
        members["report.md"] = render_markdown(view).encode("utf-8", "surrogateescape")
    notes += [f"{h}: not collected ({why})" for h, why in failed]
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    try:
        local = socket.gethostname()
    except OSError:  # pragma: no cover
        local = "unknown"

    def archive_of(members: Mapping[str, bytes]) -> dict[str, bytes]:
        manifest = {
            "format": FORMAT,
            "schema": SCHEMA_VERSION,
            "diag_version": __version__,
            "created": now.isoformat(),
            "host": local,
            "command_line": list(command_line),
            "snapshot": snap is not None,
            "job": {"hosts": host_entries, "members": JOB_MEMBER},
            "logs": logs,
            "summary": None,
            "notes": notes,
            "redactions": redactions,
            "members": {
                name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for name, data in members.items()
            },
        }
        return {MANIFEST: _dumps(manifest), **members}

    archive = archive_of(members)
    size = _write_atomically(out, archive, int(now.timestamp()))
    if logs and snap is not None:
        # report.md as `diag report` of this bundle gives it: the hosts' logs with the
        # job's snapshot (the bundle is read back, so both views are one)
        from diag.errors import DiagError
        from diag.report.combined import load_case

        try:
            case = load_case([out])
        except DiagError:
            case = None
        if case is not None:
            members["report.md"] = render_markdown(case).encode("utf-8", "surrogateescape")
            archive = archive_of(members)
            size = _write_atomically(out, archive, int(now.timestamp()))
    return JobBundleInfo(out, size, tuple(archive), tuple(str(e["host"]) for e in hosts))


# ---------------------------------------------------------------------------
# reading: several bundles (or one job bundle) as one job


def _host_of(bundle: Bundle, snap: Snapshot) -> str:
    host = snap.host or bundle.manifest.get("host")
    return str(host) if host else bundle.path.name.split(".")[0]


def job_from_bundles(bundles: Sequence[Bundle]) -> tuple[Snapshot | None, list[str]]:
    """The job's snapshot of bundles written on different hosts (each one's
    ``snapshot.json``; a job bundle stands for its hosts), with notes on how they were
    joined. One bundle alone gives its own snapshot back, unchanged."""
    from diag.errors import InputError
    from diag.report.snapshot_read import snapshot_from_dict

    parts: list[HostPart] = []
    notes: list[str] = []
    seen: set[str] = set()
    alone: Snapshot | None = None
    for bundle in bundles:
        if "snapshot.json" not in bundle.members:
            continue
        if JOB_MEMBER in bundle.members:
            for entry in (bundle.manifest.get("job") or {}).get("hosts") or ():
                prefix = entry.get("part") if isinstance(entry, dict) else None
                name = f"{prefix}snapshot.json" if isinstance(prefix, str) else ""
                if name in bundle.members:
                    parts.append(HostPart(str(entry.get("host")),
                                          snapshot_from_dict(bundle.json(name)),
                                          _num(entry.get("clock_offset_s")),
                                          _num(entry.get("clock_error_s"))))
            alone = alone or snapshot_from_dict(bundle.json("snapshot.json"))
            continue
        try:
            snap = snapshot_from_dict(bundle.json("snapshot.json"))
        except InputError:
            raise
        alone = alone or snap
        host = _host_of(bundle, snap)
        if host in seen:  # two bundles of one host name: told apart by their file names
            host = bundle.path.name.removesuffix(".gz").removesuffix(".tar")
        seen.add(host)
        parts.append(HostPart(host, snap))
    hosts = {p.host for p in parts}
    if len(parts) <= 1 or len(hosts) <= 1:
        return alone, notes
    notes.append(
        f"{len(parts)} hosts' snapshots joined as one job ({', '.join(p.host for p in parts)}); "
        + ("clock offsets from the job bundle"
           if any(p.offset_s is not None for p in parts)
           else "their clocks were not compared (separate bundles): times are each host's own")
    )
    return job_snapshot(parts), notes


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def measured_clocks(bundles: Sequence[Bundle]) -> dict[str, tuple[float, float]]:
    """node (its folder under ``logs/``) -> (clock offset, error bound) that the fan-out
    measured for each host of the job bundles among ``bundles``."""
    from diag.nodes import folder_node

    out: dict[str, tuple[float, float]] = {}
    for bundle in bundles:
        if JOB_MEMBER not in bundle.members:
            continue
        for entry in (bundle.manifest.get("job") or {}).get("hosts") or ():
            if not isinstance(entry, dict) or not isinstance(entry.get("part"), str):
                continue
            off, err = _num(entry.get("clock_offset_s")), _num(entry.get("clock_error_s"))
            node = folder_node(f"{entry['part'].rstrip('/')}/x")
            if off is not None and err is not None and node:
                out[node] = (off, err)
    return out
