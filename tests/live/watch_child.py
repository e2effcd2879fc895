"""A child program for the `diag watch` tests: logs like SGLang or vLLM, then behaves.

    python watch_child.py --framework sglang|vllm --mode ready|crash|slow|hang --port P

- ``ready``: dist init, 4 shards, KV cache, then listens on ``--port`` and says so;
- ``crash``: dies after weight loading with a CUDA error traceback (exit code 3);
- ``slow``: loads 10 shards, one every ``--shard-s`` seconds (slower than any budget a
  naive timer would give the whole load), then becomes ready;
- ``hang``: loads its weights, then sleeps forever without a line (a stall);
- ``heartbeat``: loads its weights, then logs the same wait line every second forever.
Real processes and real sockets; nothing is mocked.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import sys
import time

__all__ = ["main"]


def _line(fw: str, tag: str, msg: str) -> None:
    now = dt.datetime.now()
    if fw == "sglang":
        head = f"[{now:%Y-%m-%d %H:%M:%S} {tag}] " if tag else f"[{now:%Y-%m-%d %H:%M:%S}] "
        print(head + msg, flush=True)
    else:
        who = f"(VllmWorker TP{tag[2:]} pid={os.getpid()}) " if tag else ""
        print(f"{who}INFO {now:%m-%d %H:%M:%S} [model_runner.py:1] {msg}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", default="sglang")
    ap.add_argument("--mode", default="ready")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--shard-s", type=float, default=0.2)
    a = ap.parse_args()
    fw, ranks = a.framework, [f"TP{r}" for r in range(a.tp)]
    if fw == "sglang":
        _line(fw, "", f"server_args=ServerArgs(model_path='m', tp_size={a.tp}, port={a.port})")
    else:
        _line(fw, "", f"non-default args: {{'tensor_parallel_size': {a.tp}, 'port': {a.port}}}")
    for t in ranks:
        _line(fw, t, "Init torch distributed begin.")
    for t in ranks:
        _line(fw, t, "Init torch distributed ends. mem usage=0.00 GB")
    for t in ranks:
        _line(fw, t, "Load weight begin. avail mem=20.00 GB")
    shards = 10 if a.mode == "slow" else 4
    for k in range(1, shards + 1):
        time.sleep(a.shard_s)
        pct = 100 * k // shards
        print(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {k}/{shards} "
              f"[00:{k:02d}<00:00, 1.00it/s]", flush=True)
    for t in ranks:
        _line(fw, t, "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
              "avail mem=10.00 GB, mem usage=10.00 GB.")
    if a.mode == "hang":
        time.sleep(3600)
        return 0
    if a.mode == "heartbeat":
        while True:
            time.sleep(1)
            _line(fw, "", "Waiting for the scheduler to be ready ...")
    if a.mode == "crash":
        print("Traceback (most recent call last):", flush=True)
        print('  File "model_runner.py", line 1, in init_memory_pool', flush=True)
        print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
        return 3
    for t in ranks:
        _line(fw, t, "KV Cache is allocated. #tokens: 8192")
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.port))
    srv.listen(8)
    print(f"INFO:     Uvicorn running on http://127.0.0.1:{a.port} (Press CTRL+C to quit)",
          flush=True)
    while True:
        conn, _ = srv.accept()
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
