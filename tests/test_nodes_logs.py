"""`diag analyze node0/server.log node1/server.log`: which log is which node's, the ranks
of each node (global and local), and expected nodes (--nnodes) with no log named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diag.analyze import analyze


def _sglang_node_log(folder: Path, node: int, *, nnodes: int = 2, tp: int = 4) -> Path:
    """Lines in SGLang's shapes (server_args repr of python/sglang/srt/server_args.py,
    model_runner.py's init/load messages), global TP ranks as SGLang numbers them."""
    per = tp // nnodes
    lines = [f"[2026-01-05 10:00:00] server_args=ServerArgs(model_path='m', tp_size={tp}, "
             f"nnodes={nnodes}, node_rank={node}, dist_init_addr='10.0.0.1:5000', port=30000)"]
    mine = range(node * per, (node + 1) * per)
    lines += [f"[2026-01-05 10:00:05 TP{t}] Init torch distributed begin." for t in mine]
    lines += [f"[2026-01-05 10:00:20 TP{t}] Init torch distributed ends. mem usage=0.50 GB"
              for t in mine]
    lines += [f"[2026-01-05 10:00:21 TP{t}] Load weight begin. avail mem=70.00 GB" for t in mine]
    path = folder / f"node{node}" / "server.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_two_node_logs_name_their_nodes(tmp_path: Path) -> None:
    paths = [_sglang_node_log(tmp_path, n) for n in (0, 1)]
    a = analyze(paths)
    text = "\n".join(a.notes)
    assert "2 nodes: node0" in text, a.notes
    assert "node0 TP0 (local 0), node0 TP1 (local 1)" in text, a.notes
    assert "node1 TP2 (local 0), node1 TP3 (local 1)" in text
    assert "have no log" not in text
    assert [r.rank.label for r in a.ranks] == ["node0 TP0", "node0 TP1", "node1 TP2", "node1 TP3"]


def test_same_local_ranks_on_two_nodes_stay_apart(tmp_path: Path) -> None:
    """vLLM-style local numbering: both nodes log a TP0 and a TP1; the folders keep them
    four ranks."""
    for node in (0, 1):
        path = tmp_path / f"host-{'ab'[node]}" / "server.log"
        path.parent.mkdir()
        path.write_text("".join(
            f"[2026-01-05 10:00:0{node} TP{t}] Init torch distributed begin.\n" for t in (0, 1)))
    a = analyze(sorted(tmp_path.glob("*/server.log")))
    assert sorted(r.rank.label for r in a.ranks) == [
        "host-a TP0", "host-a TP1", "host-b TP0", "host-b TP1"]


def test_missing_node_named_from_nnodes(tmp_path: Path) -> None:
    a = analyze([_sglang_node_log(tmp_path, 0, nnodes=4, tp=8)])
    assert a.notes[0].startswith("3 of 4 nodes (--nnodes 4) have no log here: "
                                 "node1 (TP2-TP3), node2 (TP4-TP5), node3 (TP6-TP7)"), a.notes


def test_one_node_log_alone_has_no_node_note(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-01-05 10:00:05 TP0] Init torch distributed begin.\n")
    assert not [n for n in analyze([log]).notes if "node" in n]


@pytest.mark.parametrize("fmt", ["--json"])
def test_cli_shows_the_missing_node(tmp_path: Path, fmt: str) -> None:
    path = _sglang_node_log(tmp_path, 1)
    r = subprocess.run([sys.executable, "-m", "diag", "analyze", str(path), fmt],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert any("node0 (TP0-TP1)" in n for n in notes), notes


def test_ray_executor_log_binds_each_worker_to_its_host_and_place(tmp_path: Path) -> None:
    """vLLM V0 with Ray: worker lines come prefixed '(RayWorkerWrapper pid=N, ip=X)'; each
    worker's 'rank R in world size W is assigned as DP rank d, PP rank p, TP rank t'
    (vllm/distributed/parallel_state.py) binds its pid on that host to its rank; the
    driver's own line (no prefix) places the driver."""
    log = tmp_path / "ray.log"
    log.write_text(
        "INFO 01-05 10:00:00 [api_server.py:1] vLLM API server version 0.8.5\n"
        "INFO 01-05 10:00:01 [api_server.py:2] args: Namespace(model='m', "
        "tensor_parallel_size=2, pipeline_parallel_size=2, distributed_executor_backend='ray')\n"
        "(RayWorkerWrapper pid=1201, ip=10.0.0.1) INFO 01-05 10:00:10 [parallel_state.py:1] "
        "rank 1 in world size 4 is assigned as DP rank 0, PP rank 0, TP rank 1\n"
        "(RayWorkerWrapper pid=2301, ip=10.0.0.2) INFO 01-05 10:00:10 [parallel_state.py:1] "
        "rank 2 in world size 4 is assigned as DP rank 0, PP rank 1, TP rank 0\n"
        "(RayWorkerWrapper pid=2302, ip=10.0.0.2) INFO 01-05 10:00:10 [parallel_state.py:1] "
        "rank 3 in world size 4 is assigned as DP rank 0, PP rank 1, TP rank 1\n"
        "INFO 01-05 10:00:10 [parallel_state.py:1] rank 0 in world size 4 is assigned as "
        "DP rank 0, PP rank 0, TP rank 0\n"
        "(RayWorkerWrapper pid=2301, ip=10.0.0.2) INFO 01-05 10:00:20 [model_runner.py:1] "
        "Starting to load model m...\n"
    )
    a = analyze([log], year=2026)
    assert sorted(r.rank.label for r in a.ranks) == [
        "10.0.0.1 PP0 TP1", "10.0.0.2 PP1 TP0", "10.0.0.2 PP1 TP1", "PP0 TP0"]
    assert a.missing_ranks == ()
    assert any("2 nodes: 10.0.0.1" in n for n in a.notes), a.notes
