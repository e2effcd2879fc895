"""Checks over a live snapshot: processes, listening ports, GPU use, merged stacks.

The rule text (title, why, remedy, references) lives in YAML like every other rule, with
``check: <name>`` naming one of :data:`SNAPSHOT_CHECKS`. What the GPU lab showed drives
the verdicts: a rank waiting inside an NCCL collective spins its GPU near 100%; the rank
that never joined shows 0%; all GPUs idle with high RSS and no port means the ranks are
blocked on the CPU side (store wait, lock, IPC, compile), not in a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from diag.model import Finding, GpuSample, ProcessInfo, Snapshot, Unavailable
from diag.rules.checks import CheckOutcome, Hit

__all__ = [
    "DEFAULT_PORTS",
    "SNAPSHOT_CHECKS",
    "SnapshotContext",
    "server_port",
    "snapshot_findings",
]

DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}
_RANK_ROLES = ("scheduler", "worker")
_GIB = 1024**3


class SnapshotContext:
    def __init__(self, snapshot: Snapshot, params: Mapping[str, object]) -> None:
        self.snapshot = snapshot
        self.params = params

    def param(self, name: str, default: float) -> float:
        value = self.params.get(name, default)
        return float(value) if isinstance(value, (int, float)) else default

    def hit(self, proc: ProcessInfo | None, text: str) -> Hit:
        return Hit(
            source=f"snapshot:{self.snapshot.host}",
            line=proc.pid if proc is not None else 0,
            text=text,
            rank=proc.rank if proc is not None else None,
            ts=self.snapshot.taken_at,
        )


def server_port(cmdline: Sequence[str], framework: str | None) -> int | None:
    """The HTTP port a launcher command line asks for (its framework's default if none)."""
    args = list(cmdline)
    for i, arg in enumerate(args):
        value: str | None = None
        if arg == "--port" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return DEFAULT_PORTS.get(framework or "")


def _launchers(snap: Snapshot) -> list[ProcessInfo]:
    return [p for p in snap.processes if p.role in ("launcher", "api_server")]


def _all_ports(snap: Snapshot) -> set[int] | None:
    ports: set[int] = set()
    known = False
    for p in snap.processes:
        if isinstance(p.listening_ports, Unavailable):
            continue
        known = True
        ports.update(p.listening_ports)
    return ports if known else None


def _workers(snap: Snapshot) -> list[ProcessInfo]:
    return [p for p in snap.processes if p.role in ("worker", "scheduler", "engine_core")]


def _no_port(ctx: SnapshotContext) -> CheckOutcome | None:
    snap = ctx.snapshot
    # the collector's own reading of each server (port from the command line, listening?)
    for server in snap.servers:
        if server.get("port_listening") is False and isinstance(server.get("port"), int):
            pid = server.get("launcher_pid")
            proc = next((p for p in snap.processes if p.pid == pid), None)
            return CheckOutcome(
                message=(
                    f"port {server['port']} of the {server.get('framework') or 'server'} "
                    f"launcher (pid {pid}) is not listening"
                ),
                hits=(ctx.hit(proc, " ".join(proc.cmdline)[:300] if proc else f"pid {pid}"),),
            )
    if snap.servers:
        return None
    ports = _all_ports(snap)
    if ports is None:
        return None
    for proc in _launchers(snap):
        want = server_port(proc.cmdline, proc.framework)
        if want is None or want in ports:
            continue
        return CheckOutcome(
            message=(
                f"port {want} (from the {proc.framework or 'server'} command line of pid "
                f"{proc.pid}) is not listening; open ports: "
                f"{', '.join(map(str, sorted(ports))) or 'none'}"
            ),
            hits=(ctx.hit(proc, " ".join(proc.cmdline)[:300]),),
        )
    return None


def _gpu_util(gpus: Sequence[GpuSample]) -> list[float]:
    return [g.util_percent_mean for g in gpus if isinstance(g.util_percent_mean, float)]


def _cpu_side_hang(ctx: SnapshotContext) -> CheckOutcome | None:
    snap = ctx.snapshot
    if isinstance(snap.gpus, Unavailable) or not snap.gpus:
        return None
    if _no_port(ctx) is None:
        return None
    utils = _gpu_util(snap.gpus)
    idle_max = ctx.param("idle_util_percent", 5.0)
    if not utils or max(utils) > idle_max:
        return None
    workers = _workers(snap)
    rss = [p.rss_bytes for p in workers if isinstance(p.rss_bytes, int)]
    gpu_mem = [p.gpu_memory_bytes for p in workers if p.gpu_memory_bytes]
    min_rss = ctx.param("min_rss_gib", 4.0) * _GIB
    min_gpu = ctx.param("min_gpu_mem_gib", 1.0) * _GIB
    # "got somewhere": weights in host memory or on the GPU
    loaded = (rss and max(rss) >= min_rss) or (gpu_mem and max(gpu_mem) >= min_gpu)
    if not workers or not loaded:
        return None
    held = []
    if rss:
        held.append(f"up to {max(rss) / _GIB:.0f} GiB RSS")
    if gpu_mem:
        held.append(f"{max(gpu_mem) / _GIB:.1f} GiB of GPU memory")
    message = (
        f"{len(workers)} workers alive with {' and '.join(held)}, every GPU idle (max "
        f"{max(utils):.0f}% utilization) and no HTTP port open: the ranks are blocked on the "
        "CPU side (store wait, lock, IPC, compile), not in a collective"
    )
    hits = tuple(
        ctx.hit(p, f"pid {p.pid} {p.title}: RSS {p.rss_bytes / _GIB:.1f} GiB, state {p.state}")
        for p in workers  # every rank: the finding names them all, the report shows a few
        if isinstance(p.rss_bytes, int)
    )
    return CheckOutcome(message=message, hits=hits)


def _outlier(ctx: SnapshotContext) -> CheckOutcome | None:
    odd = ctx.snapshot.outlier_tp_ranks
    if not odd:
        return None
    procs = [p for p in ctx.snapshot.processes if p.rank is not None and p.rank.tp in odd]
    labels = ", ".join(f"TP{r}" for r in odd)
    sites = {p.stack.wait_site for p in procs if p.stack is not None and p.stack.wait_site}
    where = f" (waiting at {', '.join(sorted(sites))})" if sites else ""
    return CheckOutcome(
        message=f"{labels} differ from the other ranks{where}: look there first",
        hits=tuple(ctx.hit(p, f"pid {p.pid} {p.title}") for p in procs[:4]),
        ranks=tuple(f"TP{r}" for r in odd),
    )


def _ras_behind(text: str) -> tuple[str, list[str], list[str], dict[str, int]] | None:
    """From an NCCL RAS report (parsed by :func:`diag.collect.collective.parse_ras_status`,
    the one RAS parser): what differs, the ranks behind (at the lowest count), the ranks
    ahead (named ranks, or "N ranks" where RAS summarises a group)."""
    from diag.collect.collective import parse_ras_status

    for block in parse_ras_status(text):
        ranks = [r for r in block.get("ranks") or () if isinstance(r, Mapping)]  # type: ignore[attr-defined]
        groups = [g for g in block.get("groups") or () if isinstance(g, Mapping)]  # type: ignore[attr-defined]
        ops = {int(str(r["count"])) for r in ranks} | {int(str(g["count"])) for g in groups}
        if len(ops) < 2:
            continue
        low = min(ops)
        behind = [str(r["rank"]) for r in ranks if int(str(r["count"])) == low]
        behind += [f"{g['ranks']} ranks" for g in groups if int(str(g["count"])) == low]
        ahead = [str(r["rank"]) for r in ranks if int(str(r["count"])) != low]
        ahead += [f"{g['ranks']} ranks" for g in groups if int(str(g["count"])) != low]
        op = block.get("operation")
        pids = {str(r["rank"]): int(str(r["pid"])) for r in ranks
                if isinstance(r.get("pid"), int)}
        return (f"{op} operation counts" if op else "operation counts", behind, ahead, pids)
    return None


def _ras_named(items: list[str], pids: Mapping[str, int], labels: Mapping[int, str]) -> str:
    """RAS ranks with the pid RAS gives and the rank label of that process."""
    out = []
    for i in items:
        if i.endswith("ranks"):
            out.append(i)
            continue
        pid = pids.get(i)
        extra = "" if pid is None else f" (pid {pid}" + (
            f", {labels[pid]})" if pid in labels else ")")
        out.append(f"rank {i}{extra}")
    return ", ".join(out)


def _collective_wait(ctx: SnapshotContext) -> CheckOutcome | None:
    snap = ctx.snapshot
    split = _gpu_split(ctx)
    gpu_text = ""
    if split is not None:
        hot, cold = split
        gpu_text = (
            f"the GPUs of {_collapse([_label(p) for p in hot])} spin at ~100% (a collective "
            f"kernel waiting for its peers) while those of {_collapse([_label(p) for p in cold])}"
            f" are idle: {_collapse([_label(p) for p in cold])} never joined"
        )
    tail = f"; {gpu_text}" if gpu_text else ""
    for ev in snap.collective_evidence:
        text = ev.get("text")
        found = _ras_behind(text) if isinstance(text, str) else None
        if found is not None:
            what, behind, ahead, pids = found
            labels = {p.pid: _label(p) for p in snap.processes if p.rank is not None}

            def who(items: list[str]) -> str:
                return ", ".join(i if i.endswith("ranks") else f"rank {i}" for i in items)

            lines = [ln.strip() for ln in str(text).splitlines() if "launched up to" in ln]
            return CheckOutcome(
                message=(
                    f"NCCL RAS: communicator ranks have different {what}: "
                    f"{_ras_named(behind, pids, labels)} "
                    f"launched fewer operations than {who(ahead).replace(' ranks', ' other ranks')}"
                    ", so the others wait for "
                    f"{who(behind)}{tail}"
                ),
                hits=tuple(ctx.hit(None, ln) for ln in lines[:5]),
                ranks=tuple(who([b]) for b in behind),
            )
        fr_behind = ev.get("behind")
        if isinstance(fr_behind, Mapping) and fr_behind:
            groups = "; ".join(
                f"process group {pg} waits for rank(s) {r}" for pg, r in fr_behind.items()
            )
            source = "Flight Recorder" if ev.get("kind") == "flight_recorder" else str(
                ev.get("kind", "collective evidence"))
            late: list[str] = []
            for ranks in fr_behind.values():
                for r in ranks if isinstance(ranks, list) else ():
                    p = _rank_proc(snap, r)
                    late.append(_label(p) if p is not None else f"rank {r}")
            return CheckOutcome(
                message=f"{source}: {groups}{tail}",
                hits=(ctx.hit(None, groups[:300]),),
                ranks=tuple(dict.fromkeys(late)),
            )
    waiting = [g for g in snap.groups if g.wait_site == "stack.nccl_collective"]
    others = [g for g in snap.groups if g.wait_site != "stack.nccl_collective"]
    if not waiting or not others:
        if split is None:
            return None
        hot, cold = split
        return CheckOutcome(
            message=gpu_text[:1].upper() + gpu_text[1:],
            hits=tuple(ctx.hit(p, f"pid {p.pid} {_label(p)}: GPU {p.gpu_index}")
                       for p in (*cold, *hot)[:5]),
            ranks=tuple(_label(p) for p in cold),
        )
    n_wait = sum(len(g.members) for g in waiting)
    odd = [m for g in others for m in g.members]
    sites = sorted({g.wait_site or "unknown" for g in others})
    return CheckOutcome(
        message=(
            f"{n_wait} ranks wait inside an NCCL collective for {', '.join(odd[:6])}, which "
            f"{'is' if len(odd) == 1 else 'are'} elsewhere ({', '.join(sites)})"
            + (f"; {gpu_text}" if gpu_text else "")
        ),
        hits=tuple(
            ctx.hit(None, f"{', '.join(g.members)}: {g.wait_site or 'unknown'}")
            for g in (*others, *waiting)[:5]
        ),
        ranks=tuple(odd),
    )


def _label(p: ProcessInfo) -> str:
    return p.rank.label if p.rank is not None else f"pid {p.pid}"


def _collapse(labels: Sequence[str]) -> str:
    return ", ".join(labels) if len(labels) <= 6 else (
        f"{', '.join(labels[:5])} and {len(labels) - 5} more")


def _gpu_split(ctx: SnapshotContext) -> tuple[list[ProcessInfo], list[ProcessInfo]] | None:
    """(ranks on spinning GPUs, ranks on idle GPUs) when the ranks have GPUs of their own
    and both kinds exist: in an NCCL hang the rank whose GPU is idle is the one missing
    (the GPU lab: a rank waiting in a collective spins its GPU at 100%, one that never
    joined shows 0%)."""
    snap = ctx.snapshot
    if isinstance(snap.gpus, Unavailable):
        return None
    busy, idle = ctx.param("busy_util_percent", 90.0), ctx.param("idle_util_percent", 10.0)
    util = {g.index: g.util_percent_mean for g in snap.gpus}
    ranked = [p for p in snap.processes if p.role in _RANK_ROLES and p.gpu_index is not None]
    indexes = [p.gpu_index for p in ranked]
    if len(ranked) < 2 or len(set(indexes)) != len(indexes):
        return None  # ranks sharing a GPU cannot be told apart by its utilization
    hot, cold = [], []
    for p in ranked:
        u = util.get(p.gpu_index) if p.gpu_index is not None else None
        if isinstance(u, float) and u >= busy:
            hot.append(p)
        elif isinstance(u, float) and u <= idle:
            cold.append(p)
    return (hot, cold) if hot and cold else None




def _rank_proc(snap: Snapshot, rank: object) -> ProcessInfo | None:
    """The rank process a Flight Recorder rank (its dump's index: the TP rank the dump
    was read for) belongs to."""
    if not isinstance(rank, int):
        return None
    return next(
        (p for p in snap.processes
         if p.role in _RANK_ROLES and p.rank is not None and p.rank.tp == rank),
        None,
    )


def _live_where(p: ProcessInfo | None) -> str:
    """Where a rank is now: its wait site and innermost Python frames, and its log phase
    when the snapshot read its log."""
    if p is None or p.stack is None or not p.stack.threads:
        return ""
    thread = next((t for t in p.stack.threads if t.thread_id == p.stack.wait_thread), None)
    thread = thread or next((t for t in p.stack.threads if t.thread_id == p.pid),
                            p.stack.threads[0])
    py = [f for f in thread.frames if not f.native][:2]
    frames = " <- ".join(f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.line})" for f in py)
    site = p.stack.wait_site
    return ", ".join(b for b in (f"waits at {site}" if site else "", f"in {frames}" if frames
                                 else "") if b)


def _log_phases(snap: Snapshot) -> dict[str, Mapping[str, object]]:
    out: dict[str, Mapping[str, object]] = {}
    for ev in snap.collective_evidence:
        ranks = ev.get("ranks")
        if ev.get("kind") == "log_phase" and isinstance(ranks, Mapping):
            for label, row in ranks.items():
                if isinstance(row, Mapping):
                    out.setdefault(str(label), row)
    return out


def _collective_mismatch(ctx: SnapshotContext) -> CheckOutcome | None:
    """Flight Recorder entries matched across ranks by (process group, sequence id) with
    fr_trace's checks, against the majority's signature: the minority ranks and what they
    issued instead, each with its live stack and log phase."""
    snap = ctx.snapshot
    phases = _log_phases(snap)
    parts: list[str] = []
    hits: list[Hit] = []
    named: list[str] = []
    for ev in _evidence(ctx, "flight_recorder"):
        mismatches = ev.get("mismatches")
        if not isinstance(mismatches, list):
            continue
        for mm in mismatches:
            if not isinstance(mm, Mapping):
                continue
            majority = mm.get("majority")
            minority = mm.get("minority")
            rows = [r for r in minority if isinstance(r, Mapping)] if isinstance(
                minority, list) else []
            if not rows:
                continue
            total = mm.get("ranks")
            where = f"process group {mm.get('pg')}" + (
                f" ({mm.get('pg_desc')})" if mm.get("pg_desc") else "")
            said: list[str] = []
            for row in rows:
                p = _rank_proc(snap, row.get("rank"))
                label = p.rank.label if p is not None and p.rank is not None else (
                    f"rank {row.get('rank')}")
                if isinstance(majority, Mapping) and row.get("kind") in (
                    "type", "size", "dtype", "missing", "extra"
                ):
                    named.append(label)  # a tie names nobody
                if row.get("kind") == "missing":
                    last = row.get("last_issued")
                    what = "nothing" + (f" (its last: {last} at seq {row.get('last_seq')})"
                                        if last else "")
                else:
                    what = str(row.get("issued"))
                live = _live_where(p)
                phase = phases.get(label, {}).get("last_phase")
                extra = "; ".join(b for b in (live, f"log phase {phase}" if phase else "") if b)
                said.append(f"{label}: {what} at seq {mm.get('seq')}"
                            + (f" [{extra}]" if extra else ""))
                hits.append(ctx.hit(p if isinstance(majority, Mapping) else None,
                                    f"{label} {row.get('kind')}: {row.get('why') or what}"))
            if isinstance(majority, Mapping):
                members = majority.get("ranks")
                n = len(members) if isinstance(members, list) else 0
                did = (f"issued {majority.get('issued')}" if majority.get("issued") is not None
                       else "issued nothing there")
                parts.append(f"{'; '.join(said)} while {n}/{total} {did} ({where})")
            else:
                parts.append(f"no majority at seq {mm.get('seq')} of {where}: {'; '.join(said)}")
    if not parts:
        return None
    return CheckOutcome(
        message="Flight Recorder: " + " | ".join(parts[:3]),
        hits=tuple(hits[:8]),
        ranks=tuple(dict.fromkeys(named)),
    )


def _state(ctx: SnapshotContext, code: str, what: str) -> CheckOutcome | None:
    procs = [
        p
        for p in ctx.snapshot.processes
        if isinstance(p.state, str) and p.state.upper().startswith(code)
    ]
    if not procs:
        return None
    return CheckOutcome(
        message=(
            f"{len(procs)} process{'es' if len(procs) != 1 else ''} {what}: "
            + ", ".join(f"pid {p.pid} ({p.title})" for p in procs[:5])
        ),
        hits=tuple(
            ctx.hit(p, f"pid {p.pid} {p.title}: state {p.state}, wchan {p.wchan or '?'}")
            for p in procs[:5]
        ),
    )


def _stopped(ctx: SnapshotContext) -> CheckOutcome | None:
    return _state(ctx, "T", "stopped (state T: a debugger, Ctrl-Z or SIGSTOP holds them)")


def _disk_wait(ctx: SnapshotContext) -> CheckOutcome | None:
    return _state(ctx, "D", "in uninterruptible I/O (state D: storage or driver wait)")


def _evidence(ctx: SnapshotContext, kind: str) -> list[Mapping[str, object]]:
    return [ev for ev in ctx.snapshot.collective_evidence if ev.get("kind") == kind]


def _lock_holder(ctx: SnapshotContext) -> CheckOutcome | None:
    """Ranks blocked on a file lock, with who holds it (``/proc/locks``)."""
    waits = _evidence(ctx, "file_lock")
    if not waits:
        return None
    by_pid = {p.pid: p for p in ctx.snapshot.processes}
    ranks = tuple(str(w["waiter_rank"]) for w in waits if w.get("waiter_rank"))
    texts = [str(w.get("text", "")) for w in waits]
    hits = []
    for w in waits[:5]:
        pid = w.get("waiter")
        hits.append(ctx.hit(by_pid.get(pid) if isinstance(pid, int) else None,
                            str(w.get("text", ""))))
    more = f" (and {len(texts) - 3} more)" if len(texts) > 3 else ""
    return CheckOutcome(message="; ".join(texts[:3]) + more, hits=tuple(hits), ranks=ranks)


def _store_missing(ctx: SnapshotContext) -> CheckOutcome | None:
    """Ranks that never connected to the store the others rendezvous on."""
    found = [ev for ev in _evidence(ctx, "store_connections") if ev.get("not_connected")
             or (isinstance(ev.get("expected"), int) and isinstance(ev.get("connected"), list)
                 and len(ev["connected"]) < ev["expected"])]  # type: ignore[arg-type,operator]
    if not found:
        # no store to read on this host (multi-node: it is on another), but the thread
        # names say which ranks never got a process group while the others did
        lag = [ev for ev in _evidence(ctx, "dist_threads")
               if "process-group" in str(ev.get("text"))]
        if not lag:
            return None
        behind = [str(r) for ev in lag for r in ev.get("behind") or ()]  # type: ignore[attr-defined]
        return CheckOutcome(
            message="; ".join(str(ev.get("text", "")) for ev in lag[:3]),
            hits=tuple(ctx.hit(None, str(ev.get("text", ""))) for ev in lag[:5]),
            ranks=tuple(dict.fromkeys(behind)),
        )
    missing = [str(r) for ev in found for r in ev.get("not_connected") or ()]  # type: ignore[attr-defined]
    phases = _log_phases(ctx.snapshot)
    logged = [f"{r} {phases[r]['last_phase']}" for r in dict.fromkeys(missing)
              if phases.get(r, {}).get("last_phase")]
    return CheckOutcome(
        message="; ".join(str(ev.get("text", "")) for ev in found[:3])
        + (f"; last log phase: {', '.join(logged)}" if logged else ""),
        hits=tuple(ctx.hit(None, str(ev.get("text", ""))) for ev in found[:5]),
        ranks=tuple(dict.fromkeys(missing)),
    )


SNAPSHOT_CHECKS: dict[str, Callable[[SnapshotContext], CheckOutcome | None]] = {
    "snapshot_lock_holder": _lock_holder,
    "snapshot_store_missing": _store_missing,
    "snapshot_no_listen_port": _no_port,
    "snapshot_cpu_side_hang": _cpu_side_hang,
    "snapshot_rank_outlier": _outlier,
    "snapshot_collective_wait": _collective_wait,
    "snapshot_collective_mismatch": _collective_mismatch,
    "snapshot_process_stopped": _stopped,
    "snapshot_disk_wait": _disk_wait,
}


def snapshot_findings(snapshot: Snapshot) -> tuple[Finding, ...]:
    from diag.rules.engine import outcome_finding, sort_findings
    from diag.rules.loader import builtin_rules

    findings: list[Finding] = []
    for rule in builtin_rules():
        fn = SNAPSHOT_CHECKS.get(rule.check or "")
        if fn is None:
            continue
        outcome = fn(SnapshotContext(snapshot, rule.params))
        if outcome is not None:
            findings.append(outcome_finding(rule, outcome))
    return sort_findings(findings)
