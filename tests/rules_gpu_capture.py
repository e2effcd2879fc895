"""Capture real CUDA / NCCL / torch error output on a GPU host, for the rule examples.

Run on a machine with (ideally) two GPUs and torch:
    python3 tests/rules_gpu_capture.py OUTDIR
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

SCENARIOS: dict[str, tuple[str, dict[str, str]]] = {
    "cuda-oom": (_OOM, {}),
    "cuda-device-assert": (_ASSERT, {}),
    "cuda-invalid-ordinal": (_ORDINAL, {}),
    "cuda-no-gpu": (_NO_GPU, {"CUDA_VISIBLE_DEVICES": ""}),
    "cuda-graph-capture-sync": (_CAPTURE, {}),
    "nccl-watchdog-timeout": (_NCCL_TIMEOUT, {"NCCL_DEBUG": "WARN"}),
    "nccl-duplicate-gpu": (_NCCL_DUP, {"NCCL_DEBUG": "WARN"}),
}


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for name, (code, env_extra) in SCENARIOS.items():
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
    sys.exit(main(Path(sys.argv[1])))
