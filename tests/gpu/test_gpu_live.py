"""Live GPU test: a real NCCL hang on this host's GPUs, read by ``diag snapshot --json``.

Needs an NVIDIA GPU with NVML, torch with CUDA, py-spy and ptrace; skips with the reason
otherwise. One rank per GPU (at least 2 ranks: with one GPU both share it, each posing
as its own NCCL host); rank 1 never joins the collective (mode A), or every rank blocks
CPU-side after weight loading (mode B).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gpu_run
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.live]

OUTLIER = 1


def _skip_reason() -> str | None:
    n = gpu_run.gpu_count()
    if n < 1:
        return "needs an NVIDIA GPU visible through NVML"
    if gpu_run.pyspy_path() is None:
        return "py-spy not found"
    try:
        import torch
    except ImportError:
        return "torch not importable"
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    return None


_REASON = _skip_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)


WEIGHTS_GB = 4.0


def _world() -> int:
    return max(2, min(gpu_run.gpu_count(), int(os.environ.get("DIAG_GPU_WORLD", "8"))))


def _hang(tmp_path: Path, mode: str) -> Iterator[tuple[gpu_run.Server, dict[str, Any]]]:
    server = gpu_run.start_server(
        tmp_path,
        mode=mode,
        world=_world(),
        backend="nccl",
        wait="barrier",
        outlier_rank=OUTLIER,
        weights_gb=WEIGHTS_GB,
    )
    try:
        gpu_run.wait_for_hang(server, deadline_s=180)
        nvml = gpu_run.nvml_sample(window_s=3.0)
        yield server, nvml
    finally:
        result = gpu_run.kill_server(server)
        assert not result["still_alive"], result


@pytest.fixture
def collective_hang(tmp_path: Path) -> Iterator[tuple[gpu_run.Server, dict[str, Any]]]:
    yield from _hang(tmp_path, "collective")


@pytest.fixture
def cpu_hang(tmp_path: Path) -> Iterator[tuple[gpu_run.Server, dict[str, Any]]]:
    yield from _hang(tmp_path, "cpu")


def _snapshot(server: gpu_run.Server) -> dict[str, Any]:
    res = gpu_run.diag_snapshot(["--json", "--pid", str(server.pids["launcher"])])
    assert res["rc"] in (0, 1, 3), res["stderr"][-2000:]
    data = json.loads(res["stdout"])
    assert isinstance(data, dict)
    return data


def _workers(snap: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["tp_rank"]: p for p in snap["processes"] if p.get("tp_rank") is not None}


def _util_by_pid(server: gpu_run.Server, nvml: dict[str, Any]) -> dict[int, float]:
    """Each rank's GPU utilization over the window: its GPU's, or, where ranks share a
    GPU, its own SM share from NVML's per-process samples (no sample: it ran nothing)."""
    out: dict[int, float] = {}
    for g in nvml["gpus"]:
        mine = [int(pid) for pid in g.get("processes", {}) if int(pid) in server.rank_pids]
        per_proc = g.get("process_sm_util")
        for pid in mine:
            if len(mine) > 1 and isinstance(per_proc, dict):
                samples = per_proc.get(str(pid), [0])
                out[pid] = sum(samples) / len(samples)
            else:
                out[pid] = g["util_mean"]
    return out


def _gpu_index(nvml: dict[str, Any], pid: int) -> int:
    (index,) = [g["index"] for g in nvml["gpus"] if str(pid) in g.get("processes", {})]
    return int(index)


def test_collective_hang_names_the_rank_that_never_joined(
    collective_hang: tuple[gpu_run.Server, dict[str, Any]],
) -> None:
    server, nvml = collective_hang
    util = _util_by_pid(server, nvml)
    ranks = server.rank_pids
    # The physics first (NVML, not diag): waiting ranks spin, the outlier's GPU idles.
    for r, pid in enumerate(ranks):
        if r == OUTLIER:
            assert util[pid] <= 10, (r, util)
        else:
            assert util[pid] >= 80, (r, util)

    snap = _snapshot(server)
    workers = _workers(snap)
    assert sorted(workers) == list(range(len(ranks)))
    for r, proc in workers.items():
        assert proc["pid"] == ranks[r]
        assert proc["gpu_index"] == _gpu_index(nvml, proc["pid"]) == r % gpu_run.gpu_count()
        assert proc["gpu_memory_bytes"] >= WEIGHTS_GB * 2**30
    assert snap["outlier_tp_ranks"] == [OUTLIER]
    for r, proc in workers.items():
        if r == OUTLIER:
            assert proc["wait_site"] != "stack.nccl_collective"
        else:
            assert proc["wait_site"] == "stack.nccl_collective"
    assert all(s != "stopped" for s in gpu_run.states(server.all_pids).values())


def test_cpu_side_hang_all_gpus_idle_no_port(
    cpu_hang: tuple[gpu_run.Server, dict[str, Any]],
) -> None:
    server, nvml = cpu_hang
    util = _util_by_pid(server, nvml)
    assert all(util[pid] <= 10 for pid in server.rank_pids), util

    snap = _snapshot(server)
    workers = _workers(snap)
    assert sorted(workers) == list(range(len(server.rank_pids)))
    assert snap["outlier_tp_ranks"] == []
    sites = {p["wait_site"] for p in workers.values()}
    assert sites == {"stack.dist_init"}, sites
    assert [s["port_listening"] for s in snap["servers"]] == [False]
    ids = {f["id"] for f in snap["findings"]}
    assert "startup.no_listen_port" in ids, ids
    assert all(s != "stopped" for s in gpu_run.states(server.all_pids).values())
