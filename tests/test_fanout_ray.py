"""`diag snapshot --ray`: one snapshot task per alive Ray node (node-affinity scheduling).

The live test runs a real two-node Ray cluster whose nodes are the namespace hosts of
tests/test_fanout_ssh.py (each its own network, pid and UTS namespace: node0 runs the Ray
head and TP0, TP1; node1 a Ray worker node and TP2 of the hung mini server), and the
driver on node0, as a user logged into the head node would. Its recorded output
(fixtures/multinode/ray-2nodes-namespaces.json, written by `--ray-record` in such a run)
is replayed by the other tests, which need no Ray."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from test_fanout_ssh import Cluster, cluster  # noqa: F401  (the namespace hosts fixture)

from diag.collect.fanout import JobView, merge, odd_diffs
from diag.collect.ray_fanout import alive_nodes, node_names, results_from_replies

REPO = Path(__file__).resolve().parent.parent
RECORD = REPO / "fixtures" / "multinode" / "ray-2nodes-namespaces.json"


def _replay(record: dict[str, Any]) -> JobView:
    nodes = alive_nodes(record["nodes"])
    clocks = {k: (v[0], v[1]) for k, v in record["clocks"].items()}
    return merge(results_from_replies(node_names(nodes), record["replies"],
                                      clocks, record["elapsed"]))


def test_replay_of_a_real_two_node_run() -> None:
    view = _replay(json.loads(RECORD.read_text()))
    assert [h.host for h in view.hosts] == ["node0", "node1"]
    assert all(h.ok for h in view.hosts)
    assert view.outliers == ("TP2@node1",)
    sites = dict(view.groups)
    assert sorted(sites["stack.nccl_collective"]) == ["TP0@node0", "TP1@node0"]
    for h in view.hosts:
        assert h.offset_err_s is not None and abs(h.offset_s) <= h.offset_err_s + 0.05
    # the odd group against the majority: where their Python stacks part
    (diff,) = odd_diffs(view)
    assert diff["ranks"] == "TP2@node1" and diff["shared"].startswith("rank_main ")
    assert diff["majority"][-1].startswith("all_reduce (distributed_c10d.py")
    assert diff["odd"] == ["handle_first_request (mini_server.py:84)"]


def test_replay_names_a_node_without_diag_and_a_lost_task() -> None:
    record = json.loads(RECORD.read_text())
    first, second = sorted(record["replies"])
    record["replies"][first] = {"hostname": "x", "missing": True}
    record["replies"][second] = "no answer within 70 s"
    view = _replay(record)
    errors = {h.host: h.error for h in view.hosts}
    assert view.partial and all(errors.values())
    assert any("not installed" in str(e) for e in errors.values())
    assert any("no answer" in str(e) for e in errors.values())


def test_node_names_on_shared_hosts() -> None:
    nodes = [
        {"NodeID": "a" * 56, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": "h",
         "Alive": True},
        {"NodeID": "b" * 56, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "h",
         "Alive": True},
        {"NodeID": "c" * 56, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "h",
         "Alive": True},
        {"NodeID": "d" * 56, "NodeManagerAddress": "10.0.0.9", "NodeManagerHostname": "g",
         "Alive": False},
    ]
    alive = alive_nodes(nodes)
    assert len(alive) == 3
    assert node_names(alive) == {"a" * 56: "10.0.0.1", "b" * 56: "10.0.0.2/bbbbbbbb",
                                 "c" * 56: "10.0.0.2/cccccccc"}


@pytest.mark.live
def test_ray_cluster_of_two_namespace_hosts(cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray not installed: pip install 'diag[ray]'")
    head, worker = cluster.addr[:2]
    common = ("RAY_USAGE_STATS_ENABLED=0 ray start --num-cpus 1 --object-store-memory "
              "100000000 --disable-usage-stats")
    r = cluster.ssh(head, f"{common} --head --node-ip-address 10.232.0.1 --port 6379 "
                    "--include-dashboard=false")
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    r = cluster.ssh(worker, f"{common} --address 10.232.0.1:6379 --node-ip-address 10.232.0.2")
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    record = tmp_path / "record.json"
    t0 = time.monotonic()
    r = cluster.ssh(head, f"cd /tmp && diag snapshot --ray --ray-address 10.232.0.1:6379 "
                    f"--samples 1 --json --ray-record {record}")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    view = json.loads(r.stdout)
    assert [h["host"] for h in view["hosts"]] == ["node0", "node1"], view["hosts"]
    assert view["outliers"] == ["TP2@node1"], view["groups"]
    ranks = {h["host"]: sorted(p["tp_rank"] for p in h["snapshot"]["processes"]
                               if p["role"] == "scheduler") for h in view["hosts"]}
    assert ranks == {"node0": [0, 1], "node1": [2]}  # each task ran on its own node
    assert view["elapsed_s"] < took
    # the recording replays to the same view
    replay = _replay(json.loads(record.read_text()))
    assert replay.outliers == ("TP2@node1",)


def test_refused_ray_address_is_one_line() -> None:
    import sys

    r = subprocess.run([sys.executable, "-m", "diag", "snapshot", "--ray", "--ray-address",
                        "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    if "not installed" in r.stderr:
        pytest.skip("ray not installed")
    assert r.returncode == 2 and "no Ray cluster there" in r.stderr, r.stderr[-500:]
    assert "Traceback" not in r.stderr
