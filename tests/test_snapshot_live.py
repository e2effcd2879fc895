"""`diag snapshot` against real multi-process mini servers that really hang.

Each test starts a mini server (tests/live/mini_server.py: real torch.distributed ranks
on gloo, SGLang- or vLLM-style titles and logs), waits for its ready handshake, takes a
snapshot through the real collector (real /proc, psutil, py-spy) and checks roles, ranks,
wait sites, outliers, findings — and that no process is left stopped. Servers are always
SIGKILLed with their whole tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

import jsonschema
import pytest
from live.harness import mini_server, require_live, snapshot_of, stopped_pids
from rich.console import Console

from diag.collect.snapshot import SnapshotOptions, take_snapshot
from diag.model import ProcessInfo, Snapshot
from diag.report.snapshot_json import SNAPSHOT_SCHEMA, snapshot_to_dict
from diag.report.snapshot_view import render_snapshot

pytestmark = pytest.mark.live


@pytest.fixture(scope="module", autouse=True)
def _live_gate() -> None:
    require_live()


def _ranks(snap: Snapshot, role: str = "scheduler") -> dict[int, ProcessInfo]:
    out = {}
    for p in snap.processes:
        if p.role == role and p.rank is not None and p.rank.tp is not None:
            out[p.rank.tp] = p
    return out


def _site(p: ProcessInfo) -> str | None:
    return p.stack.wait_site if p.stack is not None else None


def _expected_ids(checks: Iterable[str]) -> set[str]:
    """Ids of the built-in rules that implement these snapshot checks (the rules engine
    owns the ids; a rule that exists for a check must fire)."""
    try:
        from diag.rules.loader import builtin_rules
    except ImportError:
        return set()
    wanted = set(checks)
    return {
        getattr(r, "finding_id", None) or r.id
        for r in builtin_rules()
        if getattr(r, "check", None) in wanted
    }


def _finding_ids(snap: Snapshot) -> set[str]:
    return {f.id for f in snap.findings}


def test_collective_one_rank_never_joins() -> None:
    with mini_server(framework="sglang", tp=3, mode="collective") as srv:
        srv.wait_ready(["rank0", "rank1", "rank2", "launcher", "detokenizer"])
        time.sleep(0.5)  # let the ranks enter the collective
        snap = snapshot_of(srv)
        roles = sorted(p.role for p in snap.processes)
        assert roles == ["detokenizer", "launcher", "scheduler", "scheduler", "scheduler"]
        ranks = _ranks(snap)
        assert sorted(ranks) == [0, 1, 2]
        assert {p.rank_source for p in ranks.values()} == {"title"}
        assert {p.pid for p in ranks.values()} == set(srv.rank_pids().values())
        assert _site(ranks[0]) == "stack.nccl_collective"
        assert _site(ranks[1]) == "stack.nccl_collective"
        assert _site(ranks[2]) != "stack.nccl_collective"
        assert snap.outlier_tp_ranks == (2,)
        # the rank that never joined is in handle_first_request; the others in all_reduce
        frames2 = [f.name for t in ranks[2].stack.threads for f in t.frames]  # type: ignore[union-attr]
        assert "handle_first_request" in frames2
        # one of TP0/TP1 was dumped with --native (the C++ wait of the collective) and
        # stands for the other, whose Python stack is the same
        modes = {ranks[r].stack.mode for r in (0, 1)}  # type: ignore[union-attr]
        assert modes == {"native", "python"}, [ranks[r].dump_attempts for r in (0, 1)]
        rep = next(r for r in (0, 1) if ranks[r].stack.mode == "native")  # type: ignore[union-attr]
        other = 1 - rep
        assert ranks[other].native_peer == ranks[rep].pid
        native = [f.name for t in ranks[rep].stack.threads for f in t.frames if f.native]  # type: ignore[union-attr]
        assert native, "expected native frames from --native"
        assert ranks[2].stack.mode == "native"  # the odd one out is its own group
        # /proc's view of each dumped thread sits beside its frames
        main0 = next(t for t in ranks[0].stack.threads if t.thread_id == ranks[0].pid)  # type: ignore[union-attr]
        assert main0.os_state in ("S", "R") and main0.wchan is not None
        assert any(n.startswith("gloo") or n.startswith("pt_") for n in ranks[0].thread_names)
        # one server, sglang, its port from the command line, not listening
        (server,) = snap.servers
        assert server["framework"] == "sglang"
        assert server["launcher_pid"] == srv.pid
        assert server["port"] == srv.port
        assert server["port_listening"] is False
        assert (server["tp_size"], server["missing_tp_ranks"]) == (3, [])
        assert all(p.stack is not None and p.stack.outcome == "ok" for p in snap.processes)
        assert all(p.stack is not None and p.stack.moving is False for p in ranks.values())
        assert _expected_ids(
            ["snapshot_no_listen_port", "snapshot_rank_outlier", "snapshot_collective_wait"]
        ) <= _finding_ids(snap)
        assert "TP2" in snap.verdict and "not listening" in snap.verdict
        doc = snapshot_to_dict(snap)
        json.dumps(doc)
        jsonschema.validate(doc, SNAPSHOT_SCHEMA)
        assert doc["outlier_tp_ranks"] == [2]
        by_pid = {p["pid"]: p for p in doc["processes"]}
        assert by_pid[ranks[0].pid]["tp_rank"] == 0
        assert by_pid[ranks[0].pid]["wait_site"] == "stack.nccl_collective"
        assert {g["wait_site"] for g in doc["groups"]} >= {"stack.nccl_collective"}


def test_store_wait_all_ranks_vllm() -> None:
    with mini_server(framework="vllm", tp=2, mode="store") as srv:
        srv.wait_ready(["rank0", "rank1", "launcher", "engine"])
        time.sleep(0.5)
        snap = snapshot_of(srv, samples=1)
        roles = sorted(p.role for p in snap.processes)
        assert roles == ["engine_core", "launcher", "worker", "worker"]
        (engine,) = [p for p in snap.processes if p.role == "engine_core"]
        assert engine.title == "VLLM::EngineCore"
        ranks = _ranks(snap, "worker")
        assert sorted(ranks) == [0, 1]
        assert all(_site(p) == "stack.dist_init" for p in ranks.values())
        natives = {
            f.name for p in ranks.values() for t in p.stack.threads for f in t.frames if f.native
        }  # type: ignore[union-attr]
        assert any("TCPStore" in n or "Store" in n for n in natives), natives
        assert snap.outlier_tp_ranks == ()
        assert snap.servers[0]["framework"] == "vllm"
        assert snap.servers[0]["port_listening"] is False
        assert _expected_ids(["snapshot_no_listen_port"]) <= _finding_ids(snap)
        assert not _expected_ids(["snapshot_rank_outlier"]) & _finding_ids(snap)
        # a deadline too short for --native of a torch process (0.2 s and more even on
        # fast CPUs): py-spy is killed, never the target, nothing is left stopped
        # (checked by snapshot_of), and the snapshot says it is partial
        short = snapshot_of(srv, samples=1, timeout_s=0.15, native_all=True)
        assert short.partial, [p.dump_attempts for p in short.processes]
        assert any(a["outcome"] == "timeout" for p in short.processes for a in p.dump_attempts)


def test_compile_lock_one_rank_others_in_collective() -> None:
    with mini_server(framework="sglang", tp=3, mode="compile") as srv:
        srv.wait_ready(["rank0", "rank1", "rank2", "launcher"])
        time.sleep(0.8)
        snap = snapshot_of(srv)
        ranks = _ranks(snap)
        assert _site(ranks[0]) == "stack.nccl_collective"
        assert _site(ranks[1]) == "stack.nccl_collective"
        assert _site(ranks[2]) == "stack.jit_compile"
        assert snap.outlier_tp_ranks == (2,)
        names = {f.name for t in ranks[2].stack.threads for f in t.frames}  # type: ignore[union-attr]
        assert "compile_kernels" in names
        assert "stack.jit_compile" in snap.verdict
        assert _expected_ids(
            ["snapshot_no_listen_port", "snapshot_rank_outlier", "snapshot_collective_wait"]
        ) <= _finding_ids(snap)
        # the terminal view of the same snapshot: verdict first, the odd rank starred
        console = Console(width=200, record=True, color_system=None)
        for part in render_snapshot(snap):
            console.print(part)
        text = console.export_text()
        assert text.index("verdict") < text.index("scheduler")
        row = next(line for line in text.splitlines() if f" {ranks[2].pid} " in line)
        assert "TP2 *" in row and "stack.jit_compile" in row


def test_ipc_wait_between_processes_vllm() -> None:
    with mini_server(framework="vllm", tp=2, mode="ipc") as srv:
        srv.wait_ready(["rank0", "rank1", "launcher", "engine"])
        time.sleep(0.5)
        snap = snapshot_of(srv, samples=1)
        ranks = _ranks(snap, "worker")
        assert sorted(ranks) == [0, 1]
        assert all(_site(p) == "stack.ipc_wait" for p in ranks.values())
        (engine,) = [p for p in snap.processes if p.role == "engine_core"]
        assert _site(engine) == "stack.ipc_wait"
        assert snap.outlier_tp_ranks == ()
        assert _expected_ids(["snapshot_no_listen_port"]) <= _finding_ids(snap)
        assert not _expected_ids(["snapshot_collective_wait"]) & _finding_ids(snap)


def test_healthy_server_listens() -> None:
    with mini_server(framework="sglang", tp=2, mode="healthy") as srv:
        srv.wait_ready(["rank0", "rank1", "launcher"])
        time.sleep(0.3)
        snap = snapshot_of(srv, samples=2)
        (server,) = snap.servers
        assert server["port_listening"] is True
        assert server["listening_pid"] == srv.pid
        (launcher,) = [p for p in snap.processes if p.role == "launcher"]
        assert srv.port in launcher.listening_ports  # type: ignore[operator]
        ranks = _ranks(snap)
        assert all(_site(p) == "stack.idle_loop" for p in ranks.values())
        assert not _expected_ids(["snapshot_no_listen_port"]) & _finding_ids(snap)
        assert snap.outlier_tp_ranks == ()


def test_cli_json_then_a_stopped_rank_left_stopped() -> None:
    with mini_server(framework="sglang", tp=2, mode="collective") as srv:
        srv.wait_ready(["rank0", "rank1", "launcher"])
        time.sleep(0.5)
        # first the command line, end to end, on the hung server
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "diag",
                "snapshot",
                "--pid",
                str(srv.pid),
                "--json",
                "--samples",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["schema_version"] == 1
        tp = sorted(p["tp_rank"] for p in doc["processes"] if p["role"] == "scheduler")
        assert tp == [0, 1]
        assert doc["outlier_tp_ranks"] == [1]  # 2 ranks: the one not at the rendezvous
        for key in (
            "host",
            "servers",
            "processes",
            "gpus",
            "groups",
            "outlier_tp_ranks",
            "verdict",
            "findings",
        ):
            assert key in doc
        assert stopped_pids(srv.seen) == []
        # then a rank stopped by someone else (a debugger, Ctrl-Z)
        victim = srv.rank_pids()[1]
        os.kill(victim, signal.SIGSTOP)
        try:
            for _ in range(50):
                if stopped_pids({victim}):
                    break
                time.sleep(0.02)
            snap = take_snapshot(SnapshotOptions(pid=srv.pid, timeout_s=30.0, samples=1))
            ranks = _ranks(snap)
            p1 = ranks[1]
            assert p1.stopped_before is True
            assert p1.state == "T"
            assert p1.stack is not None and p1.stack.outcome == "ok"
            assert p1.stack.mode == "nonblocking"
            assert stopped_pids({victim}) == [victim], "diag must not continue a stopped rank"
            others = (srv.seen | {p.pid for p in snap.processes}) - {victim}
            assert stopped_pids(others) == []
            assert ranks[0].stack is not None and ranks[0].stack.mode == "native"
            assert _expected_ids(["snapshot_process_stopped"]) <= _finding_ids(snap)
        finally:
            os.kill(victim, signal.SIGCONT)
