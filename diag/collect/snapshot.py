"""``take_snapshot``: one live look at every SGLang / vLLM server on this host.

Discovery -> the no-ptrace /proc tier of every process -> then, concurrently, psutil
facts over one CPU window, NVML utilization over one sampling window and py-spy dumps
of every process under one deadline -> stacks classified, merged and the odd ranks
named (``diag.stacks``) -> who-is-missing evidence (NCCL RAS, Flight Recorder) -> the
rules engine's snapshot findings -> the verdict, a rendering of those findings
(``diag.report.snapshot_view.verdict_text``: every judgment and threshold is a rule's).
Every probe degrades alone: a missing py-spy, NVML or permission is recorded in
``Snapshot.partial`` (with its fix) and the rest is still taken.
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diag.collect import stackapi
from diag.collect.discover import (
    TP_OPTIONS,
    Discovery,
    FoundProcess,
    FoundServer,
    discover,
    int_option,
)
from diag.collect.gpu import GpuQuery, query_gpus
from diag.collect.procfs import (
    ProcTier,
    ProcWait,
    boot_time,
    listening_ports_by_inode,
    read_proc_tier,
    read_wait,
)
from diag.collect.pyspy import (
    DumpResult,
    DumpTarget,
    EarlyNative,
    dump_all,
    find_pyspy,
    main_thread,
    no_pyspy,
    start_lead,
)
from diag.errors import DiagError, PermissionProblem, ToolMissing
from diag.model import (
    Finding,
    GpuSample,
    ProcessInfo,
    Snapshot,
    StackGroup,
    StackProcess,
    Unavailable,
)
from diag.runner import Runner, SubprocessRunner

if TYPE_CHECKING:
    from diag.collect.facts import ProcessFacts

__all__ = ["SnapshotOptions", "take_snapshot"]

RANK_ROLES = ("scheduler", "worker")
# Processes whose C++ frames matter (collectives, stores, CUDA); the launcher, tokenizer
# and detokenizer wait in Python-level IPC, which the Python-only dump shows.
NATIVE_ROLES = ("scheduler", "worker", "engine_core")


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    pid: int | None = None
    samples: int = 2
    interval_s: float = 1.0
    timeout_s: float = 10.0
    native: bool = True
    cpu_window_s: float = 0.5
    gpu_samples: int = 5
    gpu_interval_s: float = 0.1
    ras: bool = True
    native_all: bool = False  # --native for every rank, not one per group of same stacks
    fr_dump: bool = False  # ask each rank's Flight Recorder for a fresh dump (debug pipe)
    fr_wait_s: float = 5.0
    nvml: Any = None  # an NVML module stand-in (tests); None imports pynvml
    log_phase: bool | None = None  # read the server's log file: None = when ranks are named
    store_keys: bool = False  # read-only census of each store's keys (torch's client)


def _ticks_per_s() -> int:
    import os

    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def _gpu_for(
    pid: int, gpus: Sequence[GpuSample], env: Mapping[str, str]
) -> tuple[int | None, int | None]:
    for g in gpus:
        if pid in g.processes:
            return g.index, g.processes[pid]
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    items = [v for v in visible.split(",") if v.strip()]
    if len(items) == 1 and items[0].strip().isdigit():
        return int(items[0]), None
    return None, None


def _halted_ranks(server_procs: Sequence[ProcessInfo]) -> tuple[int, ...]:
    """TP ranks that cannot make progress while their peers can: stopped (state T) or
    traced (t) while at least one other rank of the server is not. Whatever the stacks
    say (a stopped rank's stack may tie with its peers'), such a rank is an odd one out."""
    ranks = [p for p in server_procs if p.role in RANK_ROLES and p.rank is not None]
    halted = {
        p.rank.tp
        for p in ranks
        if p.state in ("T", "t") and p.rank is not None and p.rank.tp is not None
    }
    running = [p for p in ranks if p.state not in ("T", "t")]
    return tuple(sorted(halted)) if halted and running else ()


def _prewarm() -> None:
    """While the dumps run (py-spy works in its own processes), import what the analysis
    after them needs and load (and cache) the rule library: none of it is on the critical
    path then. (The collector starts the dumps with only discovery, /proc and py-spy's
    runner imported.)"""
    import diag.collect.collective
    import diag.collect.logphase
    import diag.report.snapshot_json
    import diag.report.snapshot_view
    import diag.stacks.classify
    import diag.stacks.merge  # noqa: F401 - imported to be warm
    from diag.rules import apply_snapshot_rules  # noqa: F401 - imported to be warm
    from diag.rules.loader import builtin_rules

    try:
        builtin_rules()
    except DiagError:
        return  # a broken rule file is reported when the rules are applied


def collect_facts(
    pids: Sequence[int], *, window_s: float, since: Mapping[int, tuple[float, float]]
) -> dict[int, ProcessFacts]:
    """``diag.collect.facts.collect_facts``, imported (with psutil) in the pool's thread
    that calls it, not before the dumps start; ``since``: the CPU window's first reading
    of each pid, from the /proc tier. (A seam: the GPU replay tests put saved facts
    here.)"""
    from diag.collect import facts

    return facts.collect_facts(pids, window_s=window_s, since=since)


def port_open(port: int, timeout: float) -> bool:
    """``diag.collect.facts.port_open`` (the same seam: the replay judges saved ports)."""
    from diag.collect import facts

    return facts.port_open(port, timeout=timeout)


def _apply_rules(snap: Snapshot) -> tuple[Finding, ...]:
    """The snapshot rules, run on each server's processes alone when the host has several
    (two servers both have a TP0: one finding must not name the ranks of both)."""
    from diag.rules import apply_snapshot_rules

    if len(snap.servers) <= 1:
        return tuple(apply_snapshot_rules(snap))
    out: list[Finding] = []
    for index, server in enumerate(snap.servers):
        procs = tuple(replace(p, server=0) for p in snap.processes if p.server == index)
        pids = {p.pid for p in procs}
        odd = server.get("outlier_tp_ranks")
        part = replace(
            snap,
            processes=procs,
            servers=(server,),
            groups=tuple(g for g in snap.groups if set(g.pids) & pids),
            outlier_tp_ranks=tuple(odd) if isinstance(odd, (list, tuple)) else (),
        )
        out += apply_snapshot_rules(part) if procs else ()
    lone = tuple(p for p in snap.processes if p.server is None)
    if lone:  # processes of no server: on their own
        out += apply_snapshot_rules(replace(snap, processes=lone, servers=(), groups=()))
    return tuple(out)


def _port_owner(
    port: int | None, facts: Mapping[int, ProcessFacts], tiers: Mapping[int, ProcTier]
) -> int | None:
    if port is None:
        return None
    for pid, f in facts.items():
        if not isinstance(f.listening_ports, Unavailable) and port in f.listening_ports:
            return pid
    for pid, t in tiers.items():
        if not isinstance(t.listening_ports, Unavailable) and port in t.listening_ports:
            return pid
    return None


def _expected_ranks(
    server: FoundServer,
    processes: Sequence[ProcessInfo],
    index: int,
    found: Sequence[FoundProcess],
) -> dict[str, object]:
    """The TP size the launcher was given and the TP ranks with no process (a rank that
    crashed or never started); empty when the command line does not say."""
    launcher = next((p for p in processes if p.pid == server.launcher_pid), None)
    if launcher is None:
        return {}
    tp = int_option(launcher.cmdline, TP_OPTIONS)
    if tp is None:
        return {}
    pids = {f.pid for f in found if f.server == index}
    seen = {
        p.rank.tp
        for p in processes
        if p.pid in pids and p.role in RANK_ROLES and p.rank is not None and p.rank.tp is not None
    }
    out: dict[str, object] = {"tp_size": tp}
    if seen:
        out["missing_tp_ranks"] = sorted(set(range(tp)) - seen)
    return out


def _python_view(sp: StackProcess) -> StackProcess:
    """The process with its native frames left out (for grouping across ranks)."""
    return replace(
        sp,
        threads=tuple(
            replace(t, frames=tuple(f for f in t.frames if not f.native)) for t in sp.threads
        ),
    )


def _with_native_frames(g: StackGroup, full: Mapping[int, StackProcess]) -> StackGroup:
    """The group with the frames of a member that was dumped with --native, if any."""
    for pid in g.pids:
        sp = full.get(pid)
        if sp is None or sp.mode != "native":
            continue
        thread = next((t for t in sp.threads if t.thread_id == sp.wait_thread), None)
        thread = thread or main_thread(sp)
        if thread is not None and thread.frames:
            return replace(g, frames=thread.frames)
    return g


def _targets(
    found: Sequence[FoundProcess], native: bool, native_all: bool = False
) -> list[DumpTarget]:
    """What to dump, and which may get --native (ranks and the engine core; every
    process with ``native_all``)."""
    out: list[DumpTarget] = []
    for p in found:
        if p.state == "Z":
            continue
        out.append(
            DumpTarget(
                pid=p.pid,
                starttime_ticks=p.starttime_ticks,
                title=p.title,
                native=native and (native_all or p.role in NATIVE_ROLES),
            )
        )
    return out


def _lead(
    found: Sequence[FoundProcess],
    tiers: Mapping[int, ProcTier | ProcWait],
    targets: Sequence[DumpTarget],
) -> int | None:
    """The rank whose ``--native`` dump starts before every other dump: one of the
    largest set of ranks that /proc shows waiting alike (the main thread's wchan and
    syscall number; no ptrace needed), the lowest TP rank of it. It stands for whatever
    group its Python stack falls in; a guess that picks the odd rank costs nothing but
    the head start."""
    native = {t.pid for t in targets if t.native}
    alike: dict[tuple[str, str], list[FoundProcess]] = {}
    for p in found:
        tier = tiers.get(p.pid)
        if p.role not in RANK_ROLES or p.pid not in native or tier is None:
            continue
        if tier.state not in ("S", "R"):  # (stopped, traced, in D: no pausing dump first)
            continue
        wchan = tier.wchan if isinstance(tier.wchan, str) else "?"
        call = tier.syscall.split(" ", 1)[0] if isinstance(tier.syscall, str) else "?"
        alike.setdefault((wchan, call), []).append(p)
    if not alike:
        return None

    def order(p: FoundProcess) -> tuple[int, int]:
        tp = p.rank.tp if p.rank is not None and p.rank.tp is not None else 1 << 30
        return tp, p.pid

    biggest = min(alike.values(), key=lambda ps: (-len(ps), min(map(order, ps))))
    return min(biggest, key=order).pid


def _partial_reasons(dumps: Mapping[int, DumpResult]) -> list[str]:
    reasons: list[str] = []
    outcomes = {d.outcome for d in dumps.values()}
    if "no_pyspy" in outcomes:
        reasons.append(f"py-spy not found: {ToolMissing.help_text}")
    if "permission_denied" in outcomes:
        reasons.append(f"py-spy was refused ptrace: {PermissionProblem.help_text}")
    timeouts = sorted(pid for pid, d in dumps.items() if d.outcome == "timeout")
    if timeouts:
        reasons.append(f"py-spy timed out on pid {', '.join(map(str, timeouts))} (raise --timeout)")
    late = sorted(
        pid
        for pid, d in dumps.items()
        if d.outcome != "timeout" and any(a.outcome == "timeout" for a in d.attempts)
    )
    if late:
        reasons.append(
            f"the deadline cut dumps of pid {', '.join(map(str, late))} short (their "
            "native frames or later samples are missing; raise --timeout)"
        )
    gone = sorted(pid for pid, d in dumps.items() if d.outcome == "not_found")
    if gone:
        reasons.append(f"pid {', '.join(map(str, gone))} exited during the snapshot (no stack)")
    odd = sorted(pid for pid, d in dumps.items() if d.outcome == "partial")
    if odd:
        reasons.append(
            f"py-spy gave no usable stack for pid {', '.join(map(str, odd))} (see its error)"
        )
    return reasons


def take_snapshot(
    options: SnapshotOptions,
    *,
    runner: Runner | None = None,
    proc_root: Path = Path("/proc"),
) -> Snapshot:
    """Everything diag can see about the servers on this host, right now."""
    start = time.monotonic()
    runner = runner if runner is not None else SubprocessRunner()
    taken_at = dt.datetime.now(dt.timezone.utc)
    timings: dict[str, float] = {}

    disc: Discovery = discover(proc_root, pid=options.pid)
    timings["discover_s"] = round(time.monotonic() - start, 3)
    found = disc.processes
    pids = [p.pid for p in found]

    # The lead's --native dump is the critical path: it is chosen from three small /proc
    # reads per rank and started before the rest of the /proc tier is read (py-spy reads
    # the binaries for 0.1-0.3 s before it suspends the lead; the lead's own tier is read
    # first), and before any other dump.
    t = time.monotonic()
    targets = _targets(found, options.native, options.native_all)
    pyspy_path = find_pyspy(runner)
    launched, psutil_in = threading.Event(), threading.Event()
    waits = {
        p.pid: w
        for p in found
        if p.role in RANK_ROLES and (w := read_wait(p.pid, proc_root)) is not None
    }
    lead = _lead(found, waits, targets) if pyspy_path is not None else None
    listening = listening_ports_by_inode(proc_root)
    tiers: dict[int, ProcTier] = {}
    tick = _ticks_per_s()
    cpu_since: dict[int, tuple[float, float]] = {}  # the CPU window's first reading
    early: EarlyNative | None = None
    for p in sorted(found, key=lambda p: p.pid != lead):  # the lead's tier first
        t_read = time.monotonic()
        read = read_proc_tier(p.pid, proc_root, listening=listening)
        if isinstance(read, ProcTier):
            tiers[p.pid] = read
            if read.cpu_ticks is not None:
                cpu_since[p.pid] = (t_read, read.cpu_ticks / tick)
        if p.pid == lead and pyspy_path is not None:
            early = start_lead(
                next(x for x in targets if x.pid == lead), runner=runner, pyspy=pyspy_path,
                proc_root=proc_root, timeout_s=options.timeout_s, launched=launched,
            )  # fmt: skip
    timings["procfs_s"] = round(time.monotonic() - t, 3)

    from diag.collect import peers  # (light: /proc and the model, already imported)

    def _timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            timings[name] = round(time.monotonic() - t0, 3)

    def _facts() -> dict[int, ProcessFacts]:
        try:  # (the CPU window started with the /proc tier: psutil's import is inside it)
            import diag.collect.facts  # noqa: F401 - psutil (~60 ms)
        finally:
            psutil_in.set()
        return collect_facts(pids, window_s=options.cpu_window_s, since=cpu_since)

    # The --native dumps are the critical path, then psutil's CPU window and NVML's: the
    # dumps are started first, psutil imported next, and the imports of the analysis (the
    # rules, ~0.2 s of CPU) last, so that none of them waits for the interpreter behind
    # the others' imports. Everything runs beside the --native dumps.
    with ThreadPoolExecutor(max_workers=5, thread_name_prefix="snapshot") as pool:
        f_dumps = pool.submit(
            _timed,
            "pyspy_s",
            lambda: (
                no_pyspy(targets)
                if pyspy_path is None
                else dump_all(
                    targets,
                    runner=runner,
                    proc_root=proc_root,
                    timeout_s=options.timeout_s,
                    samples=options.samples,
                    interval_s=options.interval_s,
                    pyspy=pyspy_path,
                    native_all=options.native_all,
                    lead=lead,
                    launched=launched,
                    early=early,
                )
            ),
        )
        if pyspy_path is not None:
            launched.wait(0.25)
        f_locks = pool.submit(peers.read_locks, proc_root)  # (a first read can wait ~15 ms)
        f_facts = pool.submit(_timed, "facts_s", _facts)
        f_gpu = pool.submit(
            _timed,
            "gpu_s",
            lambda: query_gpus(
                samples=options.gpu_samples, interval_s=options.gpu_interval_s, nvml=options.nvml
            ),
        )
        psutil_in.wait(0.25)
        f_rules = pool.submit(_timed, "rules_load_s", _prewarm)
        dumps: dict[int, DumpResult] = f_dumps.result()
        facts: dict[int, ProcessFacts] = f_facts.result()
        gpu_result: GpuQuery | Unavailable = f_gpu.result()
        f_rules.result()

    gpus: tuple[GpuSample, ...] | Unavailable = (
        gpu_result.gpus if isinstance(gpu_result, GpuQuery) else gpu_result
    )
    btime = boot_time(proc_root)
    now = time.time()

    # Stacks: classify each process.
    stacks: dict[int, StackProcess] = {}
    for p in found:
        d = dumps.get(p.pid)
        if d is None:
            continue
        sp = d.stack
        if sp is None:
            sp = StackProcess(
                pid=p.pid, title=p.title, threads=(), outcome=d.outcome, error=d.error
            )
        sp = replace(sp, rank=p.rank, title=p.title)
        if sp.threads:
            sp = stackapi.classify(sp)
        # /proc thread states beside the stack's threads.
        tier = tiers.get(p.pid)
        if tier is not None and sp.threads:
            by_tid = {th.tid: th for th in tier.threads}
            sp = replace(
                sp,
                threads=tuple(
                    replace(
                        th, os_state=by_tid[th.thread_id].state, wchan=by_tid[th.thread_id].wchan
                    )
                    if th.thread_id in by_tid
                    else th
                    for th in sp.threads
                ),
            )
        stacks[p.pid] = sp

    # A rank whose Python stack is the same as a peer's natively dumped one waits in the
    # same C++ call: it takes the peer's wait site (and says whose dump that was).
    for p in found:
        d = dumps.get(p.pid)
        if d is None or d.native_peer is None:
            continue
        peer, mine = stacks.get(d.native_peer), stacks.get(p.pid)
        if peer is not None and mine is not None and peer.wait_site is not None:
            stacks[p.pid] = replace(mine, wait_site=peer.wait_site)

    if not isinstance(gpus, Unavailable) and stacks:
        util_by_pid: dict[int, float] = {}
        for p in found:
            tier = tiers.get(p.pid)
            penv = tier.environ if tier is not None and isinstance(tier.environ, dict) else {}
            index, _ = _gpu_for(p.pid, gpus, penv)
            g = next((g for g in gpus if g.index == index), None)
            if g is not None and isinstance(g.util_percent_mean, float):
                util_by_pid[p.pid] = g.util_percent_mean
        if util_by_pid:
            adjusted = stackapi.gpu_facts(list(stacks.values()), util_by_pid)
            stacks = {sp.pid: sp for sp in adjusted if sp.pid is not None}

    processes: list[ProcessInfo] = []
    for p in found:
        fa = facts.get(p.pid)
        tier = tiers.get(p.pid)
        env: Mapping[str, str] = (
            tier.environ if tier is not None and isinstance(tier.environ, dict) else {}
        )
        gpu_index, gpu_mem = (None, None)
        if not isinstance(gpus, Unavailable):
            gpu_index, gpu_mem = _gpu_for(p.pid, gpus, env)
        state: str | Unavailable = (
            tier.state
            if tier is not None
            else (fa.state if fa is not None else Unavailable("gone"))
        )
        ctime = (
            fa.create_time
            if fa is not None and fa.create_time is not None
            else (btime + p.starttime_ticks / tick if btime is not None else None)
        )
        d = dumps.get(p.pid)
        ports: tuple[int, ...] | Unavailable = Unavailable("process gone")
        if fa is not None:
            ports = fa.listening_ports
        if isinstance(ports, Unavailable) and tier is not None:
            ports = tier.listening_ports
        processes.append(
            ProcessInfo(
                pid=p.pid,
                ppid=p.ppid,
                role=p.role,
                title=p.title,
                cmdline=p.cmdline,
                framework=p.framework,
                rank=p.rank,
                rank_source=p.rank_source,
                state=state,
                rss_bytes=fa.rss_bytes if fa is not None else Unavailable("process gone"),
                cpu_percent=fa.cpu_percent if fa is not None else Unavailable("process gone"),
                threads=fa.threads if fa is not None else Unavailable("process gone"),
                listening_ports=ports,
                create_time=ctime,
                children=fa.children if fa is not None and fa.children else p.children,
                gpu_index=gpu_index,
                gpu_memory_bytes=gpu_mem,
                wchan=tier.wchan if tier is not None else None,
                stack=stacks.get(p.pid),
                uptime_s=round(now - ctime, 1) if ctime is not None else None,
                syscall=tier.syscall if tier is not None else None,
                thread_states=tier.thread_states if tier is not None else {},
                thread_names=tier.thread_names if tier is not None else {},
                env=dict(env),
                stopped_before=d.was_stopped if d is not None else False,
                resumed=d.resumed if d is not None else False,
                native_peer=d.native_peer if d is not None else None,
                server=p.server,
                dump_attempts=tuple(
                    {
                        "mode": a.mode,
                        "outcome": a.outcome,
                        "elapsed_s": a.elapsed_s,
                        "error": a.error,
                    }
                    for a in (d.attempts if d is not None else ())
                ),
            )
        )

    # Ranks are grouped on their Python frames (every rank has those; native frames are
    # read from one rank per group); each group then shows a natively dumped member's path.
    # Each server's ranks are compared with each other only (two servers on one host
    # both have a TP0).
    t = time.monotonic()
    full = {p.pid: p.stack for p in processes if p.stack is not None}
    groups_list: list[StackGroup] = []
    outliers_by_server: dict[int, tuple[int, ...]] = {}
    for index in range(len(disc.servers)):
        ranked = [
            _python_view(p.stack)
            for p in processes
            if p.server == index and p.role in RANK_ROLES and p.stack is not None
        ]
        if not ranked:
            continue
        server_groups = stackapi.group(ranked)
        serving = _port_owner(disc.servers[index].port, facts, tiers) is not None
        outliers_by_server[index] = tuple(
            sorted(
                set(stackapi.outliers(ranked, server_groups, serving))
                | set(_halted_ranks([p for p in processes if p.server == index]))
            )
        )
        groups_list += [_with_native_frames(g, full) for g in server_groups]
    groups = tuple(groups_list)
    outliers = tuple(sorted({r for odd in outliers_by_server.values() for r in odd}))
    timings["analysis_s"] = round(time.monotonic() - t, 3)

    from diag.collect import collective, logphase  # (warm: _prewarm imported them)

    servers: list[dict[str, object]] = []
    for s in disc.servers:
        owner = _port_owner(s.port, facts, tiers)
        listening_now = owner is not None or (
            s.port_source == "cmdline" and s.port is not None and port_open(s.port, timeout=0.2)
        )
        servers.append(
            {
                "framework": s.framework,
                "launcher_pid": s.launcher_pid if s.launcher else None,
                "launcher": s.launcher,
                "port": s.port,
                "port_source": s.port_source,
                "port_listening": listening_now,
                "listening_pid": owner,
                "processes": sum(1 for p in found if p.server == disc.servers.index(s)),
                "outlier_tp_ranks": list(outliers_by_server.get(disc.servers.index(s), ())),
                **_expected_ranks(s, processes, disc.servers.index(s), found),
            }
        )

    evidence: list[dict[str, object]] = []
    notes = list(disc.notes)
    # who a waiting rank waits for, from /proc: lock holders, ranks missing from a store
    evidence += peers.lock_waits(processes, proc_root, locks=f_locks.result())
    evidence += peers.socket_peers(processes, proc_root)  # the other end of a pipe/socket
    for index, srv in enumerate(servers):
        tp = srv.get("tp_size")
        evidence += peers.thread_census(
            [p for p in processes if p.server == index and p.role in RANK_ROLES]
        )
        evidence += peers.store_connections(
            [p for p in processes if p.server == index and p.role in RANK_ROLES],
            proc_root,
            expected=tp if isinstance(tp, int) and 0 < tp <= 4096 else None,
        )
    if options.store_keys:
        for port in sorted({int(str(ev["port"])) for ev in evidence
                            if ev.get("kind") == "store_connections"}):
            census = peers.store_key_census(port)
            if isinstance(census, Unavailable):
                notes.append(census.reason)
            else:
                evidence.append(census)
    if options.ras and found:
        ras_listening = collective.RAS_PORT in listening.values() or any(
            not isinstance(f.listening_ports, Unavailable)
            and collective.RAS_PORT in f.listening_ports
            for f in facts.values()
        )
        if ras_listening:
            ras = collective.ras_query(timeout_s=2.0)
            if isinstance(ras, Unavailable):
                notes.append(ras.reason)
            else:
                evidence.append(ras)
    # setproctitle can overwrite a process's environ area (SGLang's schedulers show a
    # zeroed /proc/<pid>/environ): a rank then inherits what its launcher's says.
    launcher_env: dict[int | None, Mapping[str, str]] = {
        p.server: p.env for p in processes if p.role == "launcher"
    }
    fr = collective.flight_recorder_evidence(
        [
            (
                p.pid,
                p.rank.tp if p.rank is not None else None,
                p.env
                if any(k.startswith("TORCH_") for k in p.env)
                else launcher_env.get(p.server, p.env),
            )
            for p in processes
            if p.role in RANK_ROLES
        ],
        request=options.fr_dump,
        wait_s=options.fr_wait_s,
    )
    if fr is not None:
        evidence.append(fr)
    # the log phase of the ranks, from the log file the server writes: always, never, or
    # (None) when the evidence names ranks (a collective one rank issued alone, a store a
    # rank never reached), since the log analysis costs more than the rest of the tier
    named = any(
        ev.get("mismatches") or ev.get("not_connected") for ev in evidence
    )
    if options.log_phase or (options.log_phase is None and named):
        t = time.monotonic()
        evidence += logphase.rank_log_phases(
            [p for p in processes if p.server is not None or p.role in RANK_ROLES], proc_root
        )
        timings["log_phase_s"] = round(time.monotonic() - t, 3)

    partial = _partial_reasons(dumps)
    stopped_before = [p.pid for p in processes if p.stopped_before]
    if stopped_before:
        notes.append(
            "already stopped before diag came (state T; dumped with --nonblocking and left "
            f"stopped): pid {', '.join(map(str, stopped_before))}"
        )
    resumed = [p.pid for p in processes if p.resumed]
    if resumed:
        notes.append(
            f"a dump left pid {', '.join(map(str, resumed))} stopped: continued with SIGCONT"
        )
    if isinstance(gpus, Unavailable):
        notes.append(f"no GPU facts: {gpus.reason}")
    else:
        gpu_pids = {pid for g in gpus for pid in g.processes}
        if gpu_pids and not gpu_pids & {p.pid for p in processes}:
            notes.append(
                f"NVML lists GPU processes (pid {', '.join(map(str, sorted(gpu_pids)[:8]))}) "
                "but none of them is in this snapshot: another server, or a container with "
                "its own pid namespace (NVML reports host pids); per-process GPU memory "
                "is not mapped to ranks"
            )

    snap = Snapshot(
        host=socket.gethostname(),
        taken_at=taken_at,
        processes=tuple(processes),
        gpus=gpus,
        servers=tuple(servers),
        groups=groups,
        outlier_tp_ranks=outliers,
        notes=tuple(notes),
        collective_evidence=tuple(evidence),
        partial=tuple(partial),
    )
    t = time.monotonic()
    try:
        findings = _apply_rules(snap)
    except DiagError as exc:  # a broken rule file must not cost the snapshot
        findings = ()
        snap = replace(snap, notes=(*snap.notes, f"rules not applied: {exc.message}"))
    timings["rules_s"] = round(time.monotonic() - t, 3)
    snap = replace(snap, findings=findings)
    timings["total_s"] = round(time.monotonic() - start, 3)
    from diag.report.snapshot_view import verdict_text  # the verdict renders the findings

    return replace(snap, verdict=verdict_text(snap), timings=timings, elapsed_s=timings["total_s"])
