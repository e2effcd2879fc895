"""The job bundle without a cluster: the two host snapshots recorded from the real
two-node run (fixtures/multinode/ray-2nodes-namespaces.json) packed as each host's own
bundle, joined into one job bundle, verified and read back as the job's view; bundles of
single hosts joined by `diag analyze a.tar.gz b.tar.gz`; the merged env; rank labels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from diag.bundle.job import at_host, merge_env, write_job_bundle
from diag.bundle.read import read_bundle
from diag.bundle.write import write_bundle
from diag.collect.fanout import HostResult, merge, view_to_dict
from diag.report.combined import load_case
from diag.report.snapshot_read import snapshot_from_dict

REPO = Path(__file__).resolve().parent.parent
RECORD = REPO / "fixtures" / "multinode" / "ray-2nodes-namespaces.json"


def _hosts(tmp: Path) -> list[tuple[str, Path, HostResult]]:
    record = json.loads(RECORD.read_text())
    out = []
    for nid, reply in sorted(record["replies"].items(), key=lambda kv: kv[1]["hostname"]):
        raw = json.loads(reply["stdout"])
        snap = snapshot_from_dict(raw)
        path = tmp / f"hang-{reply['hostname']}.tar.gz"
        write_bundle(path, snapshot=snap, command_line=("diag", "snapshot", "--out", "-"))
        off, err = record["clocks"][nid]
        out.append((reply["hostname"], path, HostResult(
            reply["hostname"], True, snapshot=snap, raw=raw, offset_s=off, offset_err_s=err,
            bundle=read_bundle(path))))
    return out


def test_job_bundle_from_two_hosts(tmp_path: Path) -> None:
    hosts = _hosts(tmp_path)
    view = merge([h for _, _, h in hosts])
    doc = view_to_dict(view)
    out = tmp_path / "job.tar.gz"
    write_job_bundle(out, hosts=doc["hosts"], parts={h.host: h.bundle for _, _, h in hosts
                                                     if h.bundle is not None},
                     job={k: v for k, v in doc.items() if k != "hosts"},
                     command_line=("diag", "snapshot", "--hosts", "node0,node1"))
    r = subprocess.run([sys.executable, "-m", "diag", "bundle", "verify", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    b = read_bundle(out)
    assert {"hosts/node0/env.json", "hosts/node1/env.json", "hosts/node0/manifest.json",
            "job.json", "snapshot.json", "report.md", "env.json"} <= set(b.members)
    job = json.loads(b.members["job.json"])
    assert job["outliers"] == ["TP2@node1"]
    assert job["odd_stack_diff"][0]["odd"] == ["handle_first_request (mini_server.py:84)"]
    case = load_case([out])
    assert case.snapshot is not None and case.snapshot.outlier_tp_ranks == (2,)
    labels = sorted(r.label for r in case.live if r.role == "scheduler")
    assert labels == ["node0 TP0", "node0 TP1", "node1 TP2"], labels
    assert case.verdict.startswith("Job of 2 hosts (node0, node1); odd ranks out: TP2@node1")
    assert "Job of 2 hosts" in b.members["report.md"].decode()


def test_single_host_bundles_joined_by_analyze(tmp_path: Path) -> None:
    hosts = _hosts(tmp_path)
    case = load_case([p for _, p, _ in hosts])
    assert case.snapshot is not None
    assert "odd ranks out: TP2@node1" in case.verdict
    assert any("snapshots joined as one job" in n for n in case.analysis.notes)
    # one bundle alone stays that host's own view
    alone = load_case([hosts[0][1]])
    assert alone.snapshot is not None and "Job of" not in alone.verdict


def test_merge_env_and_labels() -> None:
    env = merge_env({"a": {"python": "3.11", "driver": "550"},
                     "b": {"python": "3.11", "driver": "535"}})
    assert env["python"] == "3.11"
    assert env["driver"] == {"per_host": {"a": "550", "b": "535"}}
    assert env["differs_between_hosts"] == ["driver"]
    assert at_host("node1 TP3") == "TP3@node1"
    assert at_host("10.0.0.2 DP0 TP3") == "DP0 TP3@10.0.0.2"
    assert at_host("DP0 TP3") == "DP0 TP3" and at_host("pid 12") == "pid 12"


def test_a_host_that_sent_its_snapshot_alone(tmp_path: Path) -> None:
    """A host whose diag cannot send a bundle (older than `--out -`) answers with its JSON
    snapshot: its part of the job bundle is that snapshot, the job view still whole."""
    hosts = _hosts(tmp_path)
    first, second = hosts[0][2], hosts[1][2]
    view = merge([first, HostResult(second.host, True, snapshot=second.snapshot,
                                    raw=second.raw)])
    doc = view_to_dict(view)
    out = tmp_path / "job.tar.gz"
    assert first.bundle is not None
    write_job_bundle(out, hosts=doc["hosts"], parts={first.host: first.bundle},
                     job={k: v for k, v in doc.items() if k != "hosts"})
    b = read_bundle(out)
    assert "hosts/node1/snapshot.json" in b.members and "hosts/node1/env.json" not in b.members
    assert "hosts/node0/env.json" in b.members
    case = load_case([out])
    assert "odd ranks out: TP2@node1" in case.verdict and "not collected" not in case.verdict
