"""A real SGLang 0.5.23 server (CPU engine, TP=2) hung in start-up: one rank stopped after
its weights loaded, before the KV cache and the HTTP port — the story's hang.

``sglang::scheduler_TP1`` is SIGSTOPped by pid the moment its "Load weight end" line is in
the log. TP0 goes on to the barrier SGLang runs after loading (``dist_barrier_after_load``,
a gloo collective on CPU) and waits there for its stopped peer; the launcher never gets
the schedulers' ready message, so the port never opens, and the log goes silent. Needs
``DIAG_SGLANG_PYTHON`` (``.ci/run`` builds the venv; without it these tests skip).
"""

from __future__ import annotations

import json
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

NAME = "sglang-0.5.23-cpu-tp2-hang-tp1-stopped-after-load"
TP1_LOADED = r"\[[0-9-]+ [0-9:]+ TP1\] Load weight end\."


@pytest.fixture(scope="module")
def stopped_after_load(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    python = find_server_python(SGLANG_PYTHON_ENV, "sglang", SGLANG_SKIP_HELP)
    model = tmp_path_factory.mktemp("tiny-llama-sglang-hang")
    build_tiny_model(python, model, {"PYTHONPATH": str(SGL_KERNEL_STUB)})
    for starter in starter_for(python, model, tmp_path_factory, "sglang-hang", kind=SglangStarter):
        server = starter.start(NAME)
        tp1 = server.wait_for_title("sglang::scheduler_TP1", timeout=600)
        server.wait_for_log(TP1_LOADED, timeout=600, poll_s=0.01)
        server.sigstop(tp1)
        server.wait_log_quiet(quiet_s=8, timeout=240)  # TP0 settled in its wait
        record(server.log_path, f"{NAME}.log")
        record_stacks(server, f"{NAME}.pyspy")
        yield server


def snapshot(server: VllmServer) -> dict[str, Any]:
    done = run_diag("snapshot", "--json", "--pid", str(server.pid), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def frame_names(proc: dict[str, Any]) -> list[str]:
    return [f["name"] for t in proc["stack"]["threads"] for f in t["frames"]]


def assert_only_test_stops(server: VllmServer) -> None:
    states = {pid: proc_state(pid) for pid in server.pids()}
    assert all((s == "T") == (pid in server.stopped_by_test) for pid, s in states.items()), (
        states
    )


def test_snapshot_names_the_rank_stopped_after_loading(stopped_after_load: VllmServer) -> None:
    server = stopped_after_load
    snap = snapshot(server)
    assert_only_test_stops(server)
    titles = server.titles()
    procs = {titles[p["pid"]]: p for p in snap["processes"] if p["pid"] in titles}
    tp0, tp1 = procs["sglang::scheduler_TP0"], procs["sglang::scheduler_TP1"]
    assert (tp1["tp_rank"], tp1["state"]) == (1, "T")
    assert tp1["dump"]["outcome"] == "ok", tp1["dump"]  # --nonblocking reads a stopped rank
    # TP0 is through its own weight loading and waits for TP1 in a gloo collective.
    assert tp0["wait_site"] == "stack.nccl_collective", (tp0["wait_site"], frame_names(tp0))
    # (SGLang's barrier after loading: ModelRunner.load_model -> dist_barrier_after_load,
    # gloo's monitoredBarrier). On a loaded box the SIGSTOP can land after TP1 has passed
    # that barrier too (it polls the log): TP0 then waits in the scheduler's next start-up
    # collective, Python's Work.wait (pybind11) into c10d::Work::wait (CI runs of stops 19
    # and 20 and of session 6): still the Python frames of the scheduler process over it.
    names = [n.rsplit(".", 1)[-1] for n in frame_names(tp0)]
    if "dist_barrier_after_load" not in names:
        assert "c10d::Work::wait" in names, names
        assert "run_scheduler_process" in names, names
    assert tp0["stack"]["moving"] is False  # stuck, not slow
    (srv,) = [s for s in snap["servers"] if s["launcher_pid"] == server.pid]
    # No process of the server listens on its port. (port_listening also asks the port
    # itself: on a machine shared with other jobs, one of theirs once listened on the
    # free port this server was given.)
    listeners = {p["title"]: p["listening_ports"] for p in snap["processes"]}
    assert srv["listening_pid"] is None, (srv, listeners)
    assert all(server.port not in (ports or []) for ports in listeners.values()), listeners
    assert snap["outlier_tp_ranks"] == [1]
    findings = {f["id"]: f for f in snap["findings"]}
    assert "TP1" in findings["process.stopped"]["ranks"]
    if srv["port_listening"] is False:
        assert "startup.no_listen_port" in findings
    assert "TP1" in str(snap["verdict"])


def test_analyze_sees_where_the_log_stopped(stopped_after_load: VllmServer) -> None:
    done = run_diag("analyze", "--json", str(stopped_after_load.log_path))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["framework"] == "sglang"
    assert result["config"]["tp"] == 2
    ranks = {r["id"]: r for r in result["ranks"]}
    assert set(ranks) == {"TP0", "TP1"}
    for rank in ranks.values():
        assert "weights_load" in [p["phase"] for p in rank["phases"]], rank
        assert rank["last_phase"] not in ("listening", "serving"), rank
    ids = {f["id"] for f in result["findings"]}
    assert ids & {"startup.stalled", "startup.cut_excerpt"}, ids
    assert_only_test_stops(stopped_after_load)
