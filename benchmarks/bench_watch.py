#!/usr/bin/env python3
"""The watcher's own cost and its reaction time, on real processes.

1. Cost: a child that became ready and then logs ``--rate`` serving lines per second
   (SGLang's ``Decode batch`` lines of 8 ranks, with a WARNING now and then) is watched by
   ``diag watch --follow`` for ``--seconds``; the watcher's CPU time (user + sys, from
   /proc, children included) per minute of watching, as a percentage of one core. Beside
   it, the reference: ``tail -F`` of the same log (what people use today).
2. Latency: a child loads its weights and goes silent; ``diag watch --stall-after B``
   reports the stall at B + latency seconds after the child's last line.

    python benchmarks/bench_watch.py [--rate 1000] [--seconds 60] [--budget 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
CHILD = HERE.parent / "tests" / "live" / "watch_child.py"

SERVING = r'''
import datetime as dt, sys, time, socket
rate, port = float(sys.argv[1]), int(sys.argv[2])
def ts(): return dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
print(f"[{ts()}] server_args=ServerArgs(model_path='m', tp_size=8, port={port})", flush=True)
for r in range(8):
    print(f"[{ts()} TP{r}] Load weight end. type=X, dtype=torch.bfloat16", flush=True)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
print(f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)", flush=True)
n, t0 = 0, time.monotonic()
while True:
    n += 1
    r = n % 8
    if n % 500 == 0:
        line = f"[{ts()} TP{r}] WARNING: request {n} exceeded the max tokens"
    else:
        line = (f"[{ts()} TP{r}] Decode batch. #running-req: 32, #token: {n % 9000}, "
                f"token usage: 0.{n % 97:02d}, accept len: 2.{n % 9}, gen throughput (token/s): "
                f"{1000 + n % 500}.12, #queue-req: 0,")
    sys.stdout.write(line + "\n"); sys.stdout.flush()
    lag = n / rate - (time.monotonic() - t0)
    if lag > 0:
        time.sleep(lag)
'''


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cost(rate: float, seconds: float) -> tuple[float, float, int]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    log = tmp / "server.log"
    port = _free_port()
    with log.open("wb") as out:
        child = subprocess.Popen([sys.executable, "-c", SERVING, str(rate), str(port)],
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(1.0)
        watcher = subprocess.Popen(
            [sys.executable, "-m", "diag", "watch", "--follow", "--json", "--no-snapshot",
             "--out", str(tmp / "out"), str(log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tail = subprocess.Popen(["tail", "-F", str(log)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(5.0)  # start-up and the first read of what was there
        wp, tp = psutil.Process(watcher.pid), psutil.Process(tail.pid)
        w0, t0, lines0 = _cpu(wp), _cpu(tp), log.stat().st_size
        time.sleep(seconds)
        w1, t1, lines1 = _cpu(wp), _cpu(tp), log.stat().st_size
        watcher.terminate()
        tail.terminate()
        watcher.wait(timeout=30)
        tail.wait(timeout=10)
        return (100 * (w1 - w0) / seconds, 100 * (t1 - t0) / seconds,
                int((lines1 - lines0) / seconds))
    finally:
        child.kill()


def latency(budget: float) -> float:
    tmp = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    argv = [sys.executable, "-m", "diag", "watch", "--json", "--no-snapshot", "--exit-on-stall",
            "--stall-after", str(budget), "--out", str(tmp / "out"), "--",
            sys.executable, str(CHILD), "--mode", "hang", "--port", str(_free_port())]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    stall_at = None
    for line in proc.stdout:
        ev = json.loads(line)
        if ev["event"] == "stall":
            stall_at = time.time()
            break
    proc.wait(timeout=60)
    log = next((tmp / "out").glob("server-*.log"))
    # the child's last line is its "Load weight end": the log's mtime is when it was written
    last_line = log.stat().st_mtime
    assert stall_at is not None
    return stall_at - last_line - budget


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--budget", type=float, default=5)
    a = ap.parse_args()
    load = os.getloadavg()[0]
    w, t, bps = cost(a.rate, a.seconds)
    lat = [latency(a.budget) for _ in range(3)]
    print(f"load average {load:.1f}; {a.rate:.0f} lines/s ({bps / 1024:.0f} KiB/s) for "
          f"{a.seconds:.0f} s")
    print("| watcher | CPU, % of one core |")
    print("| --- | ---: |")
    print(f"| `diag watch --follow` (parse, progress, analysis refresh) | {w:.2f} |")
    print(f"| `tail -F` of the same log (reference) | {t:.2f} |")
    print()
    print(f"stall report latency past a {a.budget:.0f} s budget, 3 runs: "
          + ", ".join(f"{x:.2f} s" for x in lat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
