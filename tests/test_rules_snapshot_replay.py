"""Snapshot rules on the facts a real GPU run recorded (fixtures/gpu: a mini SGLang-style
server hung on an H200, once inside an NCCL all-reduce, once on the CPU side)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from diag.model import GpuSample, ProcessInfo, RankId, Snapshot
from diag.rules import apply_snapshot_rules

GPU_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
SCENARIOS = sorted(p.parent for p in GPU_RUNS.glob("*/*/snapshot-json.json"))


def _proc(p: dict[str, Any]) -> ProcessInfo:
    tp = p.get("tp_rank")
    return ProcessInfo(
        pid=p["pid"],
        ppid=p.get("ppid"),
        role=p["role"],
        title=p.get("title") or "",
        cmdline=tuple(p.get("cmdline") or ()),
        framework=p.get("framework"),
        rank=RankId(tp=tp) if isinstance(tp, int) else None,
        rank_source=p.get("rank_source"),
        state=p.get("state") or "?",
        rss_bytes=p.get("rss_bytes") or 0,
        cpu_percent=float(p.get("cpu_percent") or 0.0),
        threads=p.get("threads") or 0,
        listening_ports=tuple(p.get("listening_ports") or ()),
        gpu_index=p.get("gpu_index"),
        gpu_memory_bytes=p.get("gpu_memory_bytes"),
    )


def _gpu(g: dict[str, Any]) -> GpuSample:
    return GpuSample(
        index=g["index"],
        name=g["name"],
        uuid=g["uuid"],
        util_percent_mean=float(g["util_percent_mean"]),
        util_percent_max=float(g["util_percent_max"]),
        memory_used_bytes=g["memory_used_bytes"],
        memory_total_bytes=g["memory_total_bytes"],
        samples=g.get("samples", 0),
    )


def recorded(folder: Path) -> tuple[Snapshot, dict[str, Any]]:
    """The facts `diag snapshot --json` recorded on the GPU host, as a Snapshot."""
    d = json.loads((folder / "snapshot-json.json").read_text())
    meta = json.loads((folder / "meta.json").read_text())
    snap = Snapshot(
        host=d["host"],
        taken_at=dt.datetime.fromisoformat(d["taken_at"]),
        processes=tuple(_proc(p) for p in d["processes"]),
        gpus=tuple(_gpu(g) for g in d["gpus"]),
        servers=tuple(d["servers"]),
        collective_evidence=tuple(d.get("collective_evidence") or ()),
    )
    return snap, meta


@pytest.mark.parametrize("folder", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_hangs(folder: Path) -> None:
    snap, meta = recorded(folder)
    found = {f.id: f for f in apply_snapshot_rules(snap)}
    assert f"port {meta['port']}" in found["startup.no_listen_port"].message
    if meta["mode"] == "cpu":
        hang = found["startup.cpu_side_hang"]
        assert "every GPU idle (max 0% utilization)" in hang.message
        assert "GiB of GPU memory" in hang.message
    else:
        assert "startup.cpu_side_hang" not in found  # the GPU spins: not a CPU-side wait
        if any("has launched up to" in str(e.get("text")) for e in snap.collective_evidence):
            wait = found["nccl.waiting_for_rank"]
            assert wait.ranks == (f"rank {meta['outlier_rank']}",)
            assert "AllReduce operation counts" in wait.message


def test_fixtures_cover_both_kinds_of_hang() -> None:
    modes = {json.loads((f / "meta.json").read_text())["mode"] for f in SCENARIOS}
    assert {"cpu", "collective"} <= modes


def test_ras_summary_of_many_ranks_still_names_the_one_behind() -> None:
    folder = GPU_RUNS / "h200x2" / "collective-sync-w8"
    snap, meta = recorded(folder)
    wait = {f.id: f for f in apply_snapshot_rules(snap)}["nccl.waiting_for_rank"]
    assert wait.ranks == (f"rank {meta['outlier_rank']}",)
    assert "than 7 other ranks" in wait.message


def test_cpu_side_hang_names_every_rank_of_eight() -> None:
    snap, _ = recorded(GPU_RUNS / "h200x2" / "cpu-w8")
    hang = {f.id: f for f in apply_snapshot_rules(snap)}["startup.cpu_side_hang"]
    assert hang.ranks == tuple(f"TP{r}" for r in range(8))
    assert hang.evidence_total == 8
