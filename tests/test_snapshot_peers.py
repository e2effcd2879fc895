"""Who a waiting rank waits for, from /proc: the holder of a file lock and the ranks that
never connected to the rendezvous store. Unit tests of the parsers, then real mini servers
(real gloo ranks, a real FileLock held by another process, a real TCPStore)."""

from __future__ import annotations

import os
import time

import pytest
from live.harness import mini_server, require_live, snapshot_of

from diag.collect.peers import lock_waits, parse_locks
from diag.collect.snapshot import SnapshotOptions, take_snapshot
from diag.model import Unavailable

LOCKS = """\
1: FLOCK  ADVISORY  WRITE 4242 fd:01:131090 0 EOF
1: -> FLOCK  ADVISORY  WRITE 4243 fd:01:131090 0 EOF
2: POSIX  ADVISORY  READ 99 00:1a:55 0 EOF
3: OFDLCK ADVISORY  WRITE -1 08:02:77 0 EOF
garbage line
4: FLOCK  ADVISORY  WRITE 1 fd:01:99999999999999999999999999 0 EOF
"""


def test_parse_locks() -> None:
    entries = parse_locks(LOCKS)
    assert [(e.ident, e.pid, e.blocked, e.inode) for e in entries] == [
        ("1", 4242, False, 131090),
        ("1", 4243, True, 131090),
        ("2", 99, False, 55),
        ("3", None, False, 77),  # an OFD lock has no owning pid (-1)
    ]
    assert entries[0].dev == "fd:01" and entries[1].kind == "FLOCK"


def test_lock_waits_on_a_fake_proc_root(tmp_path: object) -> None:
    from pathlib import Path

    from diag.model import ProcessInfo, RankId

    root = Path(str(tmp_path))
    (root / "locks").write_text(LOCKS)
    (root / "4242").mkdir()
    (root / "4242" / "cmdline").write_text("python\0-m\0compile_worker\0")
    waiter = ProcessInfo(pid=4243, ppid=1, role="scheduler", title="sglang::scheduler_TP2",
                         cmdline=(), framework="sglang", rank=RankId(tp=2), rank_source="title",
                         state="S", rss_bytes=0, cpu_percent=0.0, threads=1,
                         listening_ports=())
    (found,) = lock_waits([waiter], root)
    assert found["holders"] == [4242] and found["waiter_rank"] == "TP2"
    assert "TP2 waits for a FLOCK lock" in str(found["text"])
    assert "compile_worker" in str(found["text"])


@pytest.mark.live
def test_lock_holder_is_named() -> None:
    require_live()
    with mini_server(framework="sglang", tp=2, mode="compile") as srv:
        srv.wait_ready(["rank0", "rank1", "launcher"])
        deadline = time.monotonic() + 30
        while True:
            snap = snapshot_of(srv, samples=1)
            locks = [e for e in snap.collective_evidence if e.get("kind") == "file_lock"]
            if locks or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert locks, snap.collective_evidence
        (lock,) = locks
        assert lock["waiter_rank"] == "TP1"
        assert lock["holders"] == [srv.pid]  # the launcher holds the compile-cache lock
        assert str(lock["path"]).endswith("compile_cache.lock")
        finding = next(f for f in snap.findings if f.id == "lock.held_by_other")
        assert finding.ranks == ("TP1",) and "launcher" in finding.message


@pytest.mark.live
def test_rank_that_never_joined_the_store_is_named() -> None:
    require_live()
    with mini_server(framework="sglang", tp=3, mode="store_missing") as srv:
        srv.wait_ready(["rank0", "rank1", "rank2", "launcher"])
        deadline = time.monotonic() + 40
        while True:
            snap = snapshot_of(srv, samples=1)
            stores = [e for e in snap.collective_evidence
                      if e.get("kind") == "store_connections" and e.get("not_connected")]
            if stores or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert stores, snap.collective_evidence
        assert [s["not_connected"] for s in stores] == [["TP2"]]
        assert set(stores[0]["connected"]) == {"TP0", "TP1"}  # type: ignore[arg-type]
        # /proc thread names: every rank has its gloo group, TP0 hosts both stores (the
        # rendezvous and the framework's), no rank has an NCCL thread
        threads = stores[0]["threads"]
        assert all(t["gloo"] > 0 and t["pt_nccl"] == t["nccl"] == 0  # type: ignore[union-attr]
                   for t in threads.values())  # type: ignore[union-attr]
        assert stores[0]["store_servers"] == {"TP0": 2}
        text = str(stores[0]["text"])
        assert "not connected: TP2 (TP2: a gloo process group, no NCCL thread)" in text
        assert "no rank runs an NCCL thread yet" in text
        finding = next(f for f in snap.findings if f.id == "dist.init_hang")
        assert finding.ranks == ("TP2",)
        # the rank's log phase, from the log file the server writes (the harness's)
        assert finding.message.endswith("last log phase: TP2 weights_load"), finding.message


@pytest.mark.live
def test_store_key_census_is_read_only_on_real_gloo_ranks() -> None:
    """Opt-in census of the store the ranks wait on: the keys come back, and reading them
    adds none (the count is the same in a second census, and the ranks still wait)."""
    require_live()
    from diag.collect.peers import store_key_census

    with mini_server(framework="sglang", tp=3, mode="store_missing") as srv:
        srv.wait_ready(["rank0", "rank1", "rank2", "launcher"])
        deadline = time.monotonic() + 40
        while True:
            snap = take_snapshot(SnapshotOptions(pid=srv.pid, timeout_s=30.0, samples=1,
                                                 store_keys=True))
            keys = [e for e in snap.collective_evidence if e.get("kind") == "store_keys"]
            if keys or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert keys, (snap.collective_evidence, snap.notes)
        (census,) = keys
        (store,) = [e for e in snap.collective_evidence if e.get("kind") == "store_connections"]
        assert census["port"] == store["port"]
        assert census["num_keys"] == census["num_keys_after"]
        again = store_key_census(int(str(census["port"])))
        assert not isinstance(again, Unavailable)
        assert again["num_keys"] == census["num_keys"] and again["keys"] == census["keys"]
        # the ranks still wait where they waited (nothing set the key they wait for)
        after = snapshot_of(srv, samples=1)
        stores = [e for e in after.collective_evidence if e.get("kind") == "store_connections"]
        assert [s["not_connected"] for s in stores] == [["TP2"]]


@pytest.mark.live
def test_the_other_end_of_a_socket_a_rank_reads_is_named() -> None:
    """vLLM-like IPC: each worker blocks in read() on a unix socket to the engine core
    (sock_diag gives the peer socket, its holder is the engine core), and the engine core
    in read() on its connection to one of the workers."""
    require_live()
    with mini_server(framework="vllm", tp=2, mode="ipc") as srv:
        srv.wait_ready(["rank0", "rank1", "engine", "launcher"])
        deadline = time.monotonic() + 30
        while True:
            snap = snapshot_of(srv, samples=1)
            found = [e for e in snap.collective_evidence if e.get("kind") == "socket_peer"]
            if len(found) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        engine = next(p for p in snap.processes if p.role == "engine_core")
        workers = {p.rank.label: p.pid for p in snap.processes
                   if p.role == "worker" and p.rank is not None}
        by_waiter = {e["waiter"]: e for e in found}
        for label, pid in workers.items():
            e = by_waiter[pid]
            assert (e["waiter_rank"], e["what"], e["holders"]) == (label, "a unix socket",
                                                                   [engine.pid])
            assert f"{label} waits in read() on a unix socket" in str(e["text"])
            assert "VLLM::EngineCore" in str(e["text"])
        assert by_waiter[engine.pid]["holders"][0] in workers.values()  # type: ignore[index]


def test_the_writer_of_a_pipe_a_process_reads_is_named() -> None:
    """A real child blocked in read() on its stdin pipe; this test holds the write end."""
    import subprocess
    import sys

    from diag.collect.peers import socket_peers
    from diag.model import ProcessInfo, RankId

    child = subprocess.Popen([sys.executable, "-c", "import os; os.read(0, 1)"],
                             stdin=subprocess.PIPE)
    try:
        proc = ProcessInfo(pid=child.pid, ppid=os.getpid(), role="worker", title="w",
                           cmdline=(), framework="vllm", rank=RankId(tp=3),
                           rank_source="title", state="S", rss_bytes=0, cpu_percent=0.0,
                           threads=1, listening_ports=())
        deadline = time.monotonic() + 20
        found: list[dict[str, object]] = []
        while not found and time.monotonic() < deadline:
            found = socket_peers([proc])
            time.sleep(0.1)
        (e,) = found
        assert (e["waiter_rank"], e["call"], e["fd"], e["what"]) == ("TP3", "read", 0, "a pipe")
        assert os.getpid() in e["holders"]  # type: ignore[operator]
        assert e["holder_in_server"] == []
    finally:
        child.kill()
        child.wait()
        assert child.stdin is not None
        child.stdin.close()


def test_thread_census_names_the_rank_with_no_process_group() -> None:
    import dataclasses

    from test_snapshot_report import story_snapshot

    from diag.collect.peers import thread_census
    from diag.model import ProcessInfo, RankId
    from diag.rules import apply_snapshot_rules

    def rank(tp: int, names: dict[str, int]) -> ProcessInfo:
        return ProcessInfo(pid=900 + tp, ppid=10, role="scheduler", title=f"TP{tp}",
                           cmdline=(), framework="sglang", rank=RankId(tp=tp),
                           rank_source="title", state="S", rss_bytes=0, cpu_percent=0.0,
                           threads=1, listening_ports=(), thread_names=names, server=0)

    gloo = {"sglang::schedul": 2, "gloo_tcp_loop": 1, "pt_gloo_runloop": 2}
    ranks = [rank(0, {**gloo, "pt_tcpstore_uv": 1}), rank(1, gloo), rank(2, {"python": 3})]
    (ev,) = thread_census(ranks)
    assert ev["behind"] == ["TP2"] and ev["ahead"] == ["TP0", "TP1"]
    assert ev["text"] == ("TP2 runs no process-group thread (gloo or NCCL) while 2 of 3 "
                          "ranks do (thread names in /proc)")
    assert thread_census(ranks[:2]) == []  # agreeing ranks: nothing
    nccl = {**gloo, "pt_nccl_watchdg": 1, "pt_nccl_heartbt": 1}
    (ev2,) = thread_census([rank(0, nccl), rank(1, nccl), rank(2, gloo)])
    assert ev2["behind"] == ["TP2"] and str(ev2["text"]).startswith("TP2 runs no NCCL thread")
    # no store on this host to read: dist.init_hang from the thread names alone
    snap = dataclasses.replace(story_snapshot(), collective_evidence=(ev,))
    found = {f.id: f for f in apply_snapshot_rules(snap)}
    assert found["dist.init_hang"].ranks == ("TP2",)
