"""Snapshot rules on hand-built live facts (the story's host, an NCCL hang, stopped ranks)."""

from __future__ import annotations

import datetime as dt

from diag.model import (
    Finding,
    GpuSample,
    ProcessInfo,
    RankId,
    Snapshot,
    StackFrame,
    StackGroup,
    Unavailable,
)
from diag.rules import apply_snapshot_rules
from diag.rules.snapshot_checks import server_port

GIB = 1024**3
NOW = dt.datetime(2026, 2, 23, 1, 48, 0)


def proc(
    pid: int,
    role: str,
    *,
    tp: int | None = None,
    rss_gib: float = 1.0,
    state: str = "S",
    ports: tuple[int, ...] = (),
    cmdline: tuple[str, ...] = (),
) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        ppid=1,
        role=role,
        title=f"sglang::scheduler_TP{tp}" if tp is not None else "python3",
        cmdline=cmdline,
        framework="sglang",
        rank=RankId(tp=tp) if tp is not None else None,
        rank_source="title" if tp is not None else None,
        state=state,
        rss_bytes=int(rss_gib * GIB),
        cpu_percent=1.0,
        threads=40,
        listening_ports=ports,
    )


def gpu(index: int, util: float) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA RTX PRO 6000 Blackwell",
        uuid=f"GPU-{index}",
        util_percent_mean=util,
        util_percent_max=util,
        memory_used_bytes=90 * GIB,
        memory_total_bytes=96 * GIB,
        samples=10,
    )


LAUNCH = (
    "python3",
    "-m",
    "sglang.launch_server",
    "--model",
    "kimi",
    "--tp",
    "8",
    "--port",
    "30000",
)


def story(util: float = 2.0, ports: tuple[int, ...] = ()) -> Snapshot:
    procs = (proc(100, "launcher", cmdline=LAUNCH, ports=ports),) + tuple(
        proc(200 + i, "scheduler", tp=i, rss_gib=226) for i in range(8)
    )
    return Snapshot(
        host="gpu-box",
        taken_at=NOW,
        processes=procs,
        gpus=tuple(gpu(i, util) for i in range(8)),
    )


def by_id(findings: tuple[Finding, ...]) -> dict[str, Finding]:
    return {f.id: f for f in findings}


def test_server_port_from_cmdline_or_default() -> None:
    assert server_port(LAUNCH, "sglang") == 30000
    assert server_port(("vllm", "serve", "m", "--port=8123"), "vllm") == 8123
    assert server_port(("vllm", "serve", "m"), "vllm") == 8000
    assert server_port(("python3", "x.py"), None) is None


def test_the_story_host_is_a_cpu_side_hang_with_no_port() -> None:
    found = by_id(apply_snapshot_rules(story()))
    assert "port 30000" in found["startup.no_listen_port"].message
    hang = found["startup.cpu_side_hang"]
    assert hang.severity == "error"
    assert "226 GiB" in hang.message and "CPU side" in hang.message
    assert hang.evidence and hang.evidence[0].source == "snapshot:gpu-box"


def test_busy_gpus_or_an_open_port_are_not_a_cpu_side_hang() -> None:
    assert "startup.cpu_side_hang" not in by_id(apply_snapshot_rules(story(util=97.0)))
    healthy = by_id(apply_snapshot_rules(story(ports=(30000,))))
    assert "startup.no_listen_port" not in healthy
    assert "startup.cpu_side_hang" not in healthy


def test_collector_server_reading_is_preferred() -> None:
    snap = Snapshot(
        host="h",
        taken_at=NOW,
        processes=story().processes,
        gpus=Unavailable("no NVML"),
        servers=(
            {"framework": "sglang", "launcher_pid": 100, "port": 31000, "port_listening": False},
        ),
    )
    found = by_id(apply_snapshot_rules(snap))
    assert "port 31000" in found["startup.no_listen_port"].message
    assert "startup.cpu_side_hang" not in found  # no GPU facts: no claim


def test_collective_wait_names_the_rank_outside() -> None:
    frames = (StackFrame("all_reduce", "torch/distributed/distributed_c10d.py", 2050),)
    groups = (
        StackGroup("stack.nccl_collective", tuple(f"TP{i}" for i in range(7)), frames),
        StackGroup("stack.weights_io", ("TP7",), (StackFrame("read", "safetensors.py", 1),)),
    )
    snap = Snapshot(
        host="h", taken_at=NOW, processes=(), gpus=(), groups=groups, outlier_tp_ranks=(7,)
    )
    found = by_id(apply_snapshot_rules(snap))
    wait = found["nccl.waiting_for_rank"]
    assert (
        "7 ranks" in wait.message and "TP7" in wait.message and "stack.weights_io" in wait.message
    )
    assert wait.ranks == ("TP7",)
    assert found["rank.outlier"].ranks == ("TP7",)


def test_stopped_and_disk_wait_processes() -> None:
    snap = Snapshot(
        host="h",
        taken_at=NOW,
        processes=(proc(1, "scheduler", tp=0, state="T"), proc(2, "scheduler", tp=1, state="D")),
        gpus=(),
    )
    found = by_id(apply_snapshot_rules(snap))
    assert "pid 1" in found["process.stopped"].message
    assert "pid 2" in found["process.uninterruptible_io"].message
    assert list(found) == sorted(
        found, key=lambda k: ["error", "warning", "info"].index(found[k].severity)
    )
