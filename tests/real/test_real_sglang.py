"""A real SGLang 0.5.23 server (CPU engine, TP=2) starts, then hangs; diag sees both.

In CI: ``.ci/run`` builds a slim SGLang venv (``--no-deps`` from .ci/sglang-cpu-0.5.23.txt,
the CPU torch; SGLang's own pins would make it 11 GB) and sets ``DIAG_SGLANG_PYTHON``;
without it these tests skip, saying how to get one. SGLang's CUDA-only ``sgl_kernel`` is
replaced by a test stub (tests/real/sgl_kernel_stub). By hand::

    DIAG_SGLANG_PYTHON=.../bin/python .venv/bin/pytest -m real_server_sglang tests/real

Processes: the launcher (``python -m sglang.launch_server``, HTTP port),
``sglang::scheduler_TP0``/``TP1`` and ``sglang::detokenizer``. Idle schedulers busy-poll
(state R even when nothing happens). The hang is the lab's: scheduler_TP1 SIGSTOPped after
start-up, then one request; TP0 waits in a gloo broadcast of the request
(``broadcast_pyobj``) for its stopped peer, and the log stays silent.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from realserver import (
    SGL_KERNEL_STUB,
    SGLANG_PYTHON_ENV,
    SGLANG_SKIP_HELP,
    SglangStarter,
    VllmServer,
    build_tiny_model,
    find_server_python,
    proc_state,
    record,
    record_stacks,
    run_diag,
    starter_for,
)

pytestmark = [pytest.mark.real_server, pytest.mark.real_server_sglang]

NAME = "sglang-0.5.23-cpu-tp2"
READY_LINE = r"The server is fired up and ready to roll!"


@pytest.fixture(scope="module")
def sglang_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    python = find_server_python(SGLANG_PYTHON_ENV, "sglang", SGLANG_SKIP_HELP)
    model = tmp_path_factory.mktemp("tiny-llama-sglang")
    build_tiny_model(python, model, {"PYTHONPATH": str(SGL_KERNEL_STUB)})
    for starter in starter_for(python, model, tmp_path_factory, "sglang", kind=SglangStarter):
        server = starter.start(NAME)
        server.wait_for_log(READY_LINE, timeout=600)
        yield server


def snapshot(server: VllmServer) -> dict[str, Any]:
    done = run_diag("snapshot", "--json", "--pid", str(server.pid), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def by_title(snap: dict[str, Any], server: VllmServer) -> dict[str, dict[str, Any]]:
    titles = server.titles()
    return {titles[p["pid"]]: p for p in snap["processes"] if p["pid"] in titles}


def frame_names(proc: dict[str, Any]) -> list[str]:
    return [f["name"] for t in proc["stack"]["threads"] for f in t["frames"]]


def test_healthy_start(sglang_server: VllmServer) -> None:
    server = sglang_server
    models = server.get_json("/v1/models")
    assert isinstance(models, dict)
    assert [m["id"] for m in models["data"]] == ["tiny"]

    done = run_diag("analyze", "--json", str(server.log_path))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["framework"] == "sglang"
    assert result["config"]["tp"] == 2
    assert sorted(r["id"] for r in result["ranks"]) == ["TP0", "TP1"]
    assert result["last_phase"] in ("warmup", "listening", "serving")
    errors = [f["id"] for f in result["findings"] if f["severity"] in ("error", "critical")]
    assert errors == []

    snap = snapshot(server)
    (srv,) = [s for s in snap["servers"] if s["launcher_pid"] == server.pid]
    assert (srv["framework"], srv["port"], srv["port_listening"]) == ("sglang", server.port, True)
    procs = by_title(snap, server)
    assert procs["sglang::scheduler_TP0"]["tp_rank"] == 0
    assert procs["sglang::scheduler_TP1"]["tp_rank"] == 1
    assert procs["sglang::detokenizer"]["role"] == "detokenizer"
    launcher = next(p for p in snap["processes"] if p["pid"] == server.pid)
    assert launcher["role"] == "launcher"
    assert server.port in launcher["listening_ports"]
    assert snap["outlier_tp_ranks"] == []
    record(server.log_path, f"{NAME}-healthy.log")
    record_stacks(server, f"{NAME}-healthy.pyspy")


def _one_request(port: int) -> None:
    body = json.dumps({"model": "tiny", "prompt": "def main(", "max_tokens": 4}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=20):
            pass
    except (OSError, urllib.error.URLError):
        pass  # expected: the stopped rank never answers


def test_hang_after_one_request(sglang_server: VllmServer) -> None:
    server = sglang_server
    tp1 = server.wait_for_title("sglang::scheduler_TP1", timeout=10)
    server.sigstop(tp1)
    prefills = server.log_text().count("Prefill batch")
    client = threading.Thread(target=_one_request, args=(server.port,), daemon=True)
    client.start()
    client.join(timeout=8)  # the request reached TP0, which now waits for TP1

    snap = snapshot(server)
    # (the log stays silent: it is the healthy log, unchanged, so only stacks are kept)
    record_stacks(server, f"{NAME}-hang-tp1-stopped.pyspy")
    client.join(timeout=30)
    assert server.log_text().count("Prefill batch") == prefills  # nothing was computed

    procs = by_title(snap, server)
    tp0, stopped = procs["sglang::scheduler_TP0"], procs["sglang::scheduler_TP1"]
    assert (stopped["tp_rank"], stopped["state"]) == (1, "T")
    assert tp0["wait_site"] == "stack.nccl_collective"
    assert "broadcast_pyobj" in frame_names(tp0)
    (srv,) = [s for s in snap["servers"] if s["launcher_pid"] == server.pid]
    assert srv["port_listening"] is True  # it started; the hang is in serving
    assert "process.stopped" in {f["id"] for f in snap["findings"]}

    states = {pid: proc_state(pid) for pid in server.pids()}
    assert all((s == "T") == (pid in server.stopped_by_test) for pid, s in states.items())
    # The stopped rank is the odd one out, though its frozen stack is TP0's own broadcast.
    assert snap["outlier_tp_ranks"] == [1]
