"""Capture real CUDA / NCCL / torch error output on a GPU host, for the rule examples.

Run on a machine with (ideally) two GPUs and torch:
    python3 tests/rules_gpu_capture.py OUTDIR [SCENARIO...]
Each scenario runs in its own interpreter (with a timeout) and its stdout+stderr is saved
as OUTDIR/<scenario>.log, exactly as printed; fixtures/rules_gpu/ holds one recorded set,
and tests/test_rules_gpu_errors.py runs the rules over it. Not collected by pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["SCENARIOS", "main"]

_OOM = """
import torch
x = torch.empty(int(400e9), dtype=torch.uint8, device="cuda")
"""

_ASSERT = """
import torch
a = torch.zeros(3, device="cuda")
i = torch.tensor([5], device="cuda")
b = a[i]
torch.cuda.synchronize()
"""

_ORDINAL = """
import torch
torch.zeros(1, device="cuda:9")
"""

_NO_GPU = """
import torch
torch.zeros(1, device="cuda")
"""

_CAPTURE = """
import torch
x = torch.ones(4, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x * 2
    y.sum().item()
"""

# Two ranks; the second all-reduce is joined by rank 0 only: the NCCL watchdog fires.
_NCCL_TIMEOUT = """
import datetime, os, time
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def run(rank):
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29571", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=10))
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    if rank == 0:
        dist.all_reduce(t)
        torch.cuda.synchronize()
    else:
        time.sleep(45)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, nprocs=2, join=True)
"""

# Both ranks on GPU 0: NCCL refuses a duplicate GPU in one communicator.
_NCCL_DUP = """
import datetime
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def run(rank):
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29572", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()

if __name__ == "__main__":
    mp.spawn(run, nprocs=2, join=True)
"""

# Rank 0 binds the store port, but something already listens there.
_STORE_IN_USE = """
import datetime, socket
import torch.distributed as dist
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 29581)); s.listen()
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29581", rank=0, world_size=2,
                        timeout=datetime.timedelta(seconds=5))
"""

# Rank 1 of 2 connects to a master that never started.
_STORE_REFUSED = """
import datetime
import torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29583", rank=1, world_size=2,
                        timeout=datetime.timedelta(seconds=8))
"""

# gloo: rank 1 skips the second all-reduce; rank 0's recv times out.
_GLOO_TIMEOUT = """
import datetime, time
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def run(rank):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29585", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=5))
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        dist.all_reduce(t)
    else:
        time.sleep(20)

if __name__ == "__main__":
    mp.spawn(run, nprocs=2, join=True)
"""

# NCCL told to use a network interface that does not exist.
_NCCL_IFNAME = """
import datetime
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def run(rank):
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29587", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()

if __name__ == "__main__":
    mp.spawn(run, nprocs=2, join=True)
"""

# torch.compile with a C compiler that does not exist and cold Triton/Inductor caches.
_INDUCTOR_NO_CC = """
import torch

@torch.compile
def f(x):
    return torch.sin(x) * 2 + 1

print(f(torch.ones(8, device="cuda")))
"""

SCENARIOS: dict[str, tuple[str, dict[str, str]]] = {
    "dist-store-port-in-use": (_STORE_IN_USE, {}),
    "dist-store-refused": (_STORE_REFUSED, {}),
    "gloo-recv-timeout": (_GLOO_TIMEOUT, {}),
    "nccl-bad-ifname": (
        _NCCL_IFNAME,
        {
            "NCCL_DEBUG": "WARN",
            "NCCL_SOCKET_IFNAME": "nonexistent0",
            "NCCL_P2P_DISABLE": "1",
            "NCCL_SHM_DISABLE": "1",
            "NCCL_IB_DISABLE": "1",
        },
    ),
    "inductor-no-cc": (
        _INDUCTOR_NO_CC,
        {
            "CC": "/nonexistent/gcc",
            "TRITON_CACHE_DIR": "/tmp/cap/triton-cold",
            "TORCHINDUCTOR_CACHE_DIR": "/tmp/cap/inductor-cold",
        },
    ),
    "cuda-oom": (_OOM, {}),
    "cuda-device-assert": (_ASSERT, {}),
    "cuda-invalid-ordinal": (_ORDINAL, {}),
    "cuda-no-gpu": (_NO_GPU, {"CUDA_VISIBLE_DEVICES": ""}),
    "cuda-graph-capture-sync": (_CAPTURE, {}),
    "nccl-watchdog-timeout": (_NCCL_TIMEOUT, {"NCCL_DEBUG": "WARN"}),
    "nccl-duplicate-gpu": (_NCCL_DUP, {"NCCL_DEBUG": "WARN"}),
}


def main(out: Path, only: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for name, (code, env_extra) in SCENARIOS.items():
        if only and name not in only:
            continue
        script = out.parent / f"_{name}.py"
        script.write_text(code)
        env = {**os.environ, **env_extra, "PYTHONUNBUFFERED": "1"}
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, str(script)],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            text, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            text = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()  # type: ignore[union-attr]
            rc = -999
        (out / f"{name}.log").write_text(text)
        summary.append(f"{name}: rc={rc} {time.monotonic() - start:.1f}s {len(text)} chars")
        print(summary[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
