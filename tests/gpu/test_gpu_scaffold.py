"""The GPU run's scaffolding, on the CPU: the mini server (gloo) really hangs as designed,
the driver's readings work, and every process is reaped. Keeps tests/gpu from rotting
between device runs (CI has no GPU)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gpu_run
import pytest

pytestmark = pytest.mark.live

try:
    import setproctitle  # noqa: F401
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - CI installs both
    pytest.skip(f"{exc.name} missing: pip install torch setproctitle", allow_module_level=True)

SGLANG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP\d+)?\] ")


def test_collective_hang_on_gloo(tmp_path: Path) -> None:
    server = gpu_run.start_server(
        tmp_path,
        mode="collective",
        world=3,
        backend="gloo",
        outlier_rank=2,
        weights_gb=0.02,
        host_gb=0.02,
    )
    try:
        gpu_run.wait_for_hang(server, deadline_s=240)
        facts = {f["pid"]: f for f in gpu_run.process_facts(server.all_pids, window_s=0.2)}
        launcher = facts[server.pids["launcher"]]
        assert " ".join(launcher["cmdline"]).startswith("python3 -m sglang.launch_server")
        for r, pid in enumerate(server.rank_pids):
            assert facts[pid]["name"] == f"sglang::scheduler_TP{r}"
            assert 30000 not in facts[pid]["listening_ports"]
        # the launcher keeps its environment readable; a titled scheduler's is zeroed
        environ = Path(f"/proc/{launcher['pid']}/environ").read_bytes()
        assert b"PYTHONUNBUFFERED=1" in environ
        assert b"PYTHONUNBUFFERED" not in Path(f"/proc/{server.rank_pids[0]}/environ").read_bytes()

        if gpu_run.pyspy_path() is not None:
            dump = gpu_run.pyspy_dump(server.rank_pids[2], native=False, as_json=True)
            assert dump["rc"] == 0, dump["stderr"]
            names = [f["name"] for t in json.loads(dump["stdout"]) for f in t["frames"]]
            assert "wait_for_jit_cache_lock" in names
            dump = gpu_run.pyspy_dump(server.rank_pids[0], native=False, as_json=True)
            names = [f["name"] for t in json.loads(dump["stdout"]) for f in t["frames"]]
            assert "capture_cuda_graph" in names and "all_reduce" in names
        assert set(gpu_run.states(server.all_pids).values()) <= {"sleeping", "running"}
    finally:
        result = gpu_run.kill_server(server)
    assert result["still_alive"] == []
    lines = server.log_path.read_text().splitlines()
    tagged = [ln for ln in lines if SGLANG_LINE.match(ln)]
    assert any("server_args=ServerArgs(" in ln for ln in tagged)
    for r in range(3):
        assert any(f" TP{r}] Load weight end." in ln for ln in tagged)
        assert any(f" TP{r}] Capture cuda graph begin." in ln for ln in tagged)
    shards = "Loading safetensors checkpoint shards: 100% Completed"
    assert any(ln.startswith(shards) for ln in lines)


def test_driver_scenario_spec() -> None:
    import argparse

    import drive

    args = argparse.Namespace(world=2, outlier_rank=1)
    assert drive.parse_spec("cpu", args) == ("cpu", 2, 1, "cpu")
    assert drive.parse_spec("collective-sync@8/5", args) == (
        "collective-sync",
        8,
        5,
        "collective-sync-w8",
    )
    with pytest.raises(SystemExit):
        drive.parse_spec("nope", args)
