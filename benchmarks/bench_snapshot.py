"""Benchmark: `diag snapshot` end to end vs. a sequential shell loop of `py-spy dump --native`.

Starts a mini server (tests/live/mini_server.py) with 8 real gloo ranks hung in a
collective (rank 7 never joins), then, in one run and over the same pids (launcher, 8
ranks, detokenizer):

- ``loop``: ``for p in PIDS; do py-spy dump --native --pid $p; done`` in bash (what a
  person does by hand),
- ``diag snapshot --json`` as a fresh process (interpreter start, discovery, /proc, psutil
  CPU window, NVML, every dump in parallel under one deadline, analysis, rules), with the
  default 2 samples ~1 s apart and with ``--samples 1``.

Each is run ``--repeat`` times (after one warm-up of each, so that py-spy's symbol loading
of libtorch is not counted against only one side) and the median is reported.

    .venv/bin/python benchmarks/bench_snapshot.py [--ranks 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from live.harness import mini_server  # noqa: E402

CPU: dict[str, list[float]] = {}


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(
    argv: list[str], key: str | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall seconds of one run; its CPU seconds (all its descendants: py-spy included,
    the target processes not) are kept under ``key``: CPU time depends far less on the
    load of a shared machine than wall time does."""
    c0 = _cpu()
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if key is not None:
        CPU.setdefault(key, []).append(_cpu() - c0)
    return wall, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    diag = [sys.executable, "-m", "diag", "snapshot"]
    with mini_server(framework="sglang", tp=args.ranks, mode="collective") as srv:
        names = [f"rank{r}" for r in range(args.ranks)] + ["launcher", "detokenizer"]
        t0 = time.monotonic()
        srv.wait_ready(names, timeout=300)
        startup = time.monotonic() - t0
        time.sleep(1.0)
        pids = sorted(p.pid for p in srv.tree())
        loop = (
            f"for p in {' '.join(map(str, pids))}; do {pyspy} dump --native --pid $p "
            "> /dev/null || echo fail $p; done"
        )
        runs: dict[str, list[float]] = {"loop": [], "diag2": [], "diag1": []}
        snap_doc: dict[str, object] = {}
        for i in range(args.repeat + 1):
            el, res = _timed(["bash", "-c", loop], "loop" if i else None)
            if "fail" in res.stdout:  # e.g. another tracer held a rank at that moment
                print(f"note: py-spy loop run {i}: {res.stdout.strip()}", file=sys.stderr)
            if i:
                runs["loop"].append(el)
            el, res = _timed([*diag, "--pid", str(srv.pid), "--json"], "diag2" if i else None)
            if res.returncode != 0:
                raise SystemExit(f"diag snapshot failed ({res.returncode}): {res.stderr}")
            snap_doc = json.loads(res.stdout)
            if i:
                runs["diag2"].append(el)
            el, res = _timed(
                [*diag, "--pid", str(srv.pid), "--json", "--samples", "1"], "diag1" if i else None
            )
            if i:
                runs["diag1"].append(el)
        med = {k: statistics.median(v) for k, v in runs.items()}
        dumped = [p for p in snap_doc["processes"] if p["dump"]["outcome"] == "ok"]  # type: ignore[index]
        print(
            f"mini server: {args.ranks} gloo ranks + launcher + detokenizer "
            f"({len(pids)} pids), ready in {startup:.1f} s; median of {args.repeat} runs"
        )
        print()
        load = os.getloadavg()[0]
        print(f"host: {os.cpu_count()} cores, load average {load:.1f} at the end")
        print("| method | wall (s), median | min-max | vs loop | CPU (s), median |")
        print("| --- | ---: | ---: | ---: | ---: |")
        spread = {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in runs.items()}
        cpu = {k: statistics.median(v) for k, v in CPU.items()}
        print(
            f"| sequential `py-spy dump --native` loop, {len(pids)} pids | {med['loop']:.2f} "
            f"| {spread['loop']} | 1.0x | {cpu['loop']:.2f} |"
        )
        for key, label in (
            ("diag2", "`diag snapshot --json` (2 samples, default)"),
            ("diag1", "`diag snapshot --json --samples 1`"),
        ):
            print(
                f"| {label} | {med[key]:.2f} | {spread[key]} | "
                f"{med['loop'] / med[key]:.1f}x faster | {cpu[key]:.2f} |"
            )
        print()
        print(
            f"snapshot: {len(dumped)} of {len(snap_doc['processes'])} processes dumped ok, "  # type: ignore[arg-type]
            f"outliers {snap_doc['outlier_tp_ranks']}, "
            f"timings {snap_doc['timings']}"
        )
        print(f"verdict: {snap_doc['verdict']}")


if __name__ == "__main__":
    main()
