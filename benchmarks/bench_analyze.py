"""Benchmark `diag analyze --json` against ripgrep and a naive per-line regex loop.

usage: python benchmarks/bench_analyze.py [--log PATH] [--size-mib 1024] [--naive-slice 10]

Generates the log with benchmarks/gen_log.py when PATH does not exist, warms the page
cache, then prints one Markdown table: wall time, CPU time (user+sys) and peak RSS of
  * ``cat`` (the floor),
  * ``diag analyze --json`` (this package, as a user runs it),
  * ``rg`` with 7 patterns (skipped with a note when ripgrep is not installed),
  * a naive Python loop that tries ~20 ``re`` patterns on every line, run on the first
    1/N of the file and extrapolated (said so in the table).
Also prints the machine's load average: on a shared box the wall times move with it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NAIVE_PATTERNS", "RG_PATTERNS", "main"]

RG_PATTERNS = (
    "Traceback",
    "ERROR",
    "WARNING",
    "Killed",
    "out of memory",
    "NCCL WARN",
    "Load weight end",
)

NAIVE_PATTERNS = (
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)((?: (?:DP|PP|TP|EP)\d+)*)\] (.*)$",
    r"^(INFO|WARNING|ERROR|DEBUG) (\d\d-\d\d) (\d\d:\d\d:\d\d) \[?([\w./]+\.py):(\d+)\] (.*)$",
    r"Init torch distributed (begin|ends)",
    r"Load weight (begin|end)",
    r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)",
    r"KV Cache is allocated",
    r"Memory pool end",
    r"Capture cuda graph (begin|end)",
    r"The server is fired up and ready to roll",
    r"Uvicorn running on (\S+)",
    r"(Prefill|Decode) batch[.,]",
    r"Traceback \(most recent call last\)",
    r"\bERROR\b|\bCRITICAL\b",
    r"\bWARNING\b",
    r"out of memory|OOM",
    r"NCCL (WARN|ERROR)",
    r"Killed|killed",
    r"[Tt]imeout|timed out",
    r"server_args=",
    r"Automatically detected platform (\w+)",
)


@dataclass
class Result:
    name: str
    wall_s: float
    cpu_s: float
    rss_mb: float | None
    note: str = ""


def _run(name: str, argv: list[str], note: str = "") -> Result:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):  # rg: 1 = no match; diag: 1 = findings
        raise SystemExit(f"{name} failed (rc={proc.returncode}): {err[-400:]}")
    return Result(name, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, note)


def _naive(path: Path, fraction: int) -> Result:
    """The loop most tools write: every line against every pattern."""
    size = path.stat().st_size
    limit = size // fraction
    pats = [re.compile(p) for p in NAIVE_PATTERNS]
    hits = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    done = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            done += len(line)
            for p in pats:
                if p.search(line):
                    hits += 1
            if done >= limit:
                break
    wall = (time.perf_counter() - t0) * size / max(done, 1)
    cpu = (time.process_time() - c0) * size / max(done, 1)
    note = f"ran on the first 1/{fraction} ({done >> 20} MiB), extrapolated; {hits} hits"
    return Result(f"naive Python loop, {len(pats)} `re` patterns", wall, cpu, None, note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, default=Path("/tmp/diag-bench-1g.log"))
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--naive-slice", type=int, default=10)
    a = ap.parse_args(argv)
    if not a.log.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gen_log import generate

        print(f"generating {a.log} ({a.size_mib} MiB) ...", file=sys.stderr)
        generate(a.log, a.size_mib)
    size = a.log.stat().st_size
    with open(a.log, "rb") as fh:  # warm the page cache
        while fh.read(16 << 20):
            pass
    diag = shutil.which("diag") or str(Path(sys.executable).with_name("diag"))
    results = [_run("cat > /dev/null (floor)", ["cat", str(a.log)])]
    results.append(_run("diag analyze --json", [diag, "analyze", "--json", str(a.log)]))
    rg = shutil.which("rg")
    if rg:
        argv_rg = [rg, "-c"]
        for p in RG_PATTERNS:
            argv_rg += ["-e", p]
        results.append(_run(f"rg, {len(RG_PATTERNS)} patterns", [*argv_rg, str(a.log)]))
    results.append(_naive(a.log, a.naive_slice))
    load = os.getloadavg()
    print(f"\n{a.log}: {size / (1 << 20):.0f} MiB, {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| reader | wall s | CPU s (user+sys) | peak RSS MB | note |")
    print("| --- | ---: | ---: | ---: | --- |")
    for r in results:
        rss = f"{r.rss_mb:.0f}" if r.rss_mb is not None else "-"
        print(f"| {r.name} | {r.wall_s:.2f} | {r.cpu_s:.2f} | {rss} | {r.note} |")
    if not rg:
        print("\n(rg skipped: ripgrep is not installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
