"""Bundles of real hanging servers open as one view, per server.

Three mini servers run side by side on this host (tests/live/mini_server.py: real
torch.distributed ranks on gloo): an SGLang server hung in a collective TP1 never joins, a
vLLM server hung in a TCPStore wait, and a healthy SGLang server. `diag bundle --log` of
the first server's log and `diag snapshot --pid ... --out` are run as real commands; the
bundles open with `diag analyze` and name the stuck ranks and their wait sites, and a
bundle holds no process, command line or environment of the other servers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from live.harness import MiniServer, gate_reason, mini_server

from diag.analyze import analyze
from diag.collect.snapshot import SnapshotOptions, take_snapshot
from diag.report.combined import combine

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[MiniServer, MiniServer, MiniServer]]:
    reason = gate_reason()
    if reason is not None:
        if os.environ.get("DIAG_REQUIRE_LIVE"):
            pytest.fail(f"live tests cannot run: {reason}")
        pytest.skip(f"live tests cannot run: {reason}")
    with ExitStack() as stack:
        hung = stack.enter_context(mini_server(framework="sglang", tp=2, mode="collective"))
        store = stack.enter_context(mini_server(framework="vllm", tp=2, mode="store"))
        healthy = stack.enter_context(mini_server(framework="sglang", tp=2, mode="healthy"))
        hung.wait_ready(["rank0", "rank1", "launcher", "detokenizer"])
        store.wait_ready(["rank0", "rank1", "launcher", "engine"])
        healthy.wait_ready(["rank0", "rank1", "launcher"])
        time.sleep(0.5)  # let the ranks enter their waits
        yield hung, store, healthy


def _diag(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diag", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _members(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {
            m.name: tar.extractfile(m).read().decode("utf-8", "replace")  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_each_server_view_is_its_own(servers: tuple[MiniServer, MiniServer, MiniServer]) -> None:
    hung, store, healthy = servers
    snap = take_snapshot(SnapshotOptions(timeout_s=60.0))  # the whole host: three servers
    assert len(snap.servers) >= 3
    # `diag snapshot`'s own findings are per server too: no finding names TP0 twice
    assert all(len(f.ranks) == len(set(f.ranks)) for f in snap.findings)
    hung_view = combine(analyze([hung.log]), snap)
    assert {p.pid for p in hung_view.snapshot.processes} == {  # type: ignore[union-attr]
        p.pid for p in hung.tree()
    }
    assert [r.label for r in hung_view.live if r.outlier] == ["TP1"]
    assert f"launcher pid {hung.pid}" in hung_view.verdict
    assert str(store.pid) not in hung_view.verdict and str(healthy.pid) not in hung_view.verdict
    assert {r.wait_site for r in hung_view.live if r.label == "TP0"} == {"stack.nccl_collective"}
    store_view = combine(analyze([store.log]), snap)
    assert not any(r.outlier for r in store_view.live)  # all in one store wait: nobody odd
    assert {r.wait_site for r in store_view.live if r.role == "worker"} == {"stack.dist_init"}
    healthy_view = combine(analyze([healthy.log]), snap)
    assert not healthy_view.stall_proven and not any(r.outlier for r in healthy_view.live)
    for view in (hung_view, store_view):  # no finding names a rank twice (two servers' TP0)
        assert all(len(f.ranks) == len(set(f.ranks)) for f in view.analysis.findings)


def test_bundle_of_one_log_holds_only_its_server_and_opens(
    servers: tuple[MiniServer, MiniServer, MiniServer], tmp_path: Path
) -> None:
    hung, store, healthy = servers
    out = tmp_path / "hung.tar.gz"
    r = _diag("bundle", "--log", str(hung.log), "--out", str(out))
    assert r.returncode in (0, 3), r.stderr
    assert "other server(s) seen on this host and left out of the bundle" in r.stdout
    members = _members(out)
    assert any(name.startswith("stacks/") and name.endswith("-TP1.json") for name in members)
    snapshot = json.loads(members["snapshot.json"])
    env = members["env.json"]
    pids = {p["pid"] for p in snapshot["processes"]}
    assert pids == {p.pid for p in hung.tree()}
    for other in (store, healthy):
        assert not pids & {p.pid for p in other.tree()}
        assert str(other.ready_dir) not in env + members["snapshot.json"]
        assert f"--port {other.port}" not in env
    assert f"--port {hung.port}" in env  # its own command line is there
    r = _diag("analyze", str(out))
    assert r.returncode == 0, r.stderr
    tp1 = next(x for x in r.stdout.splitlines() if x.startswith("TP1 *"))
    assert "stuck" in tp1
    tp0 = next(x for x in r.stdout.splitlines() if x.startswith("TP0 ") and "stack." in x)
    assert "stack.nccl_collective" in tp0
    assert "ERROR  startup.stalled" in r.stdout or "startup.no_listen_port" in r.stdout
    report = members["report.md"]
    assert "| **TP1** ⚠ odd one out |" in report and "`stack.nccl_collective`" in report


def test_snapshot_out_bundle_opens_with_the_stuck_ranks(
    servers: tuple[MiniServer, MiniServer, MiniServer], tmp_path: Path
) -> None:
    _, store, _ = servers
    out = tmp_path / "snap.tar.gz"
    r = _diag("snapshot", "--pid", str(store.pid), "--out", str(out))
    assert r.returncode in (0, 3), r.stderr
    r = _diag("analyze", str(out))
    assert r.returncode == 0, r.stderr  # was: "not a log (binary data)"
    rows = [x for x in r.stdout.splitlines() if x.startswith("TP") and "stack.dist_init" in x]
    assert len(rows) == 2
    r = _diag("report", str(out))
    assert r.returncode == 0 and "### Ranks, live" in r.stdout
