"""Benchmark: `diag snapshot` end to end vs. a sequential shell loop of `py-spy dump --native`.

For each rank count (``--ranks 8,16``) it starts a mini server (tests/live/mini_server.py)
with that many real gloo ranks hung in a collective (the last rank never joins), then, in
one run and over the same pids (launcher, the ranks, detokenizer), side by side:

- ``loop``: ``for p in PIDS; do py-spy dump --native --pid $p; done`` in bash (what a
  person does by hand),
- ``one``: a lone ``py-spy dump --native`` of TP0 (a rank in the collective): the floor of
  a snapshot whose critical path is one such dump,
- ``diag snapshot --json`` as a fresh process (interpreter start, discovery, /proc, psutil
  CPU window, NVML, every dump in parallel under one deadline, analysis, rules), with the
  default 2 samples (the second look runs beside the native dumps) and with ``--samples 1``.

Each is run ``--repeat`` times (after one warm-up of each, so that py-spy's symbol loading
of libtorch is not counted against only one side), interleaved, and the median is
reported, with the load average before and after every rank count. ``--baseline DIR``
adds the same two snapshot forms run from another checkout (``git archive REF diag
rules | tar -x -C DIR``), interleaved in the same run: before and after on one machine.

After the timed runs, the snapshot is run ``--repeat`` more times while every rank's
main-thread state is polled (about every 0.3 ms): the time a rank spends in ptrace's
stop (``t``) is how long the snapshot paused it, libtorch's symbols and all (a
``--native`` dump keeps its target stopped while py-spy symbolises the libraries on the
stack).

``--pause`` also measures how long py-spy stops a target: a busy-loop probe (tests/live
has none that logs its own stalls, so it is here) notes every gap in its loop longer
than 0.2 ms; each mode is run ``--repeat`` times against it, and the longest gap inside
each dump's window is its pause (median reported). ``diag snapshot --pid PROBE`` is
measured the same way: the sum of the gaps is what the snapshot costs that target.

    .venv/bin/python benchmarks/bench_snapshot.py [--ranks 8,16] [--repeat 5] [--pause]
        [--baseline DIR]
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
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from live.harness import mini_server  # noqa: E402

PROBE = r"""
import sys, threading, time
threshold, nthreads = float(sys.argv[2]), int(sys.argv[3])
for _ in range(nthreads):
    threading.Thread(target=lambda: [time.sleep(0.05) for _ in iter(int, 1)], daemon=True).start()
out = open(sys.argv[1], "w", buffering=1)
out.write("ready\n")
last = time.perf_counter()
while True:
    now = time.perf_counter()
    if now - last > threshold:
        out.write(f"{time.monotonic():.6f} {now - last:.6f}\n")
    last = now
"""


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(
    argv: list[str], cwd: str | None = None
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds of one run (CPU: it and its descendants, py-spy included, the
    targets not; CPU time depends far less on the load of a shared machine than wall)."""
    c0 = _cpu()
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd)
    return time.perf_counter() - t0, _cpu() - c0, res


def _stopped(pids: list[int], argv: list[str], cwd: str | None = None) -> dict[int, float]:
    """Seconds each pid's main thread spent stopped by a tracer (state ``t``) while
    ``argv`` ran, from its /proc state polled in a loop (each interval between two polls
    that see it stopped counts)."""
    out = dict.fromkeys(pids, 0.0)
    done = threading.Event()

    def poll() -> None:
        last = time.perf_counter()
        while not done.is_set():
            now = time.perf_counter()
            for pid in pids:
                try:
                    stat = Path(f"/proc/{pid}/stat").read_bytes()
                except OSError:
                    continue
                if stat[stat.rindex(b")") + 2 :][:1] == b"t":
                    out[pid] += now - last
            last = now
            time.sleep(0.0002)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        subprocess.run(argv, capture_output=True, timeout=300, cwd=cwd, check=False)
    finally:
        done.set()
        poller.join()
    return out


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def bench_ranks(ranks: int, repeat: int, pyspy: str, baseline: str | None) -> dict[str, object]:
    diag = [sys.executable, "-m", "diag", "snapshot"]
    with mini_server(framework="sglang", tp=ranks, mode="collective") as srv:
        names = [f"rank{r}" for r in range(ranks)] + ["launcher", "detokenizer"]
        t0 = time.monotonic()
        srv.wait_ready(names, timeout=300)
        startup = time.monotonic() - t0
        time.sleep(1.0)
        load_before = _load()
        pids = sorted(p.pid for p in srv.tree())
        loop = (
            f"for p in {' '.join(map(str, pids))}; do {pyspy} dump --native --pid $p "
            "> /dev/null || echo fail $p; done"
        )
        lead = srv.rank_pids()[0]  # TP0: the rank the snapshot dumps natively first
        methods = {
            "loop": ["bash", "-c", loop],
            "one": [pyspy, "dump", "--native", "--pid", str(lead)],
            "diag2": [*diag, "--pid", str(srv.pid), "--json"],
            "diag1": [*diag, "--pid", str(srv.pid), "--json", "--samples", "1"],
        }
        if baseline:
            methods["base2"] = methods["diag2"]
            methods["base1"] = methods["diag1"]
        wall: dict[str, list[float]] = {k: [] for k in methods}
        cpu: dict[str, list[float]] = {k: [] for k in methods}
        docs: list[dict[str, Any]] = []
        base_docs: list[dict[str, Any]] = []
        outside: list[float] = []  # wall minus the snapshot's own total: start, imports, output
        for i in range(repeat + 1):
            for key, argv in methods.items():
                el, c, res = _timed(argv, cwd=baseline if key.startswith("base") else None)
                if key == "one" and res.returncode != 0:
                    print(f"note: lone native dump run {i}: {res.stderr.strip()}", file=sys.stderr)
                if key == "loop" and "fail" in res.stdout:  # e.g. another tracer held a rank
                    print(f"note: py-spy loop run {i}: {res.stdout.strip()}", file=sys.stderr)
                elif key != "loop" and res.returncode != 0:
                    raise SystemExit(f"diag snapshot failed ({res.returncode}): {res.stderr}")
                if key == "diag2":
                    docs.append(json.loads(res.stdout))
                if key == "base2":
                    base_docs.append(json.loads(res.stdout))
                if i:  # run 0 is the warm-up
                    wall[key].append(el)
                    cpu[key].append(c)
                    if key == "diag2":
                        outside.append(el - float(docs[-1]["timings"]["total_s"]))
        rank_pids = sorted(srv.rank_pids().values())
        paused: dict[str, list[dict[int, float]]] = {"diag2": [], "base2": []}
        for _ in range(repeat):
            for key in paused:
                if key in methods:
                    cwd = baseline if key.startswith("base") else None
                    paused[key].append(_stopped(rank_pids, methods[key], cwd))
        return {
            "ranks": ranks,
            "pids": len(pids),
            "startup_s": startup,
            "load_before": load_before,
            "load_after": _load(),
            "wall": wall,
            "cpu": cpu,
            "doc": docs[-1],
            "timings": _median_timings(docs[1:]),
            "base_timings": _median_timings(base_docs[1:]) if base_docs else {},
            "base_moving": [
                sorted({str(p["stack"]["moving"]) for p in d["processes"] if p["stack"]})
                for d in base_docs
            ],
            "paused": paused,
            "outside_s": statistics.median(outside),
            "moving": [
                sorted({str(p["stack"]["moving"]) for p in d["processes"] if p["stack"]})
                for d in docs
            ],
        }


def _median_timings(docs: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each of the snapshot's own ``timings`` over the measured runs."""
    keys = [k for k in docs[-1]["timings"] if all(k in d["timings"] for d in docs)]
    return {k: round(statistics.median(float(d["timings"][k]) for d in docs), 3) for k in keys}


def print_table(r: dict[str, object], repeat: int) -> None:
    wall: dict[str, list[float]] = r["wall"]  # type: ignore[assignment]
    cpu: dict[str, list[float]] = r["cpu"]  # type: ignore[assignment]
    med = {k: statistics.median(v) for k, v in wall.items()}
    doc: dict[str, object] = r["doc"]  # type: ignore[assignment]
    print(
        f"\n{r['ranks']} gloo ranks + launcher + detokenizer ({r['pids']} pids), ready in "
        f"{r['startup_s']:.1f} s; median of {repeat}; host {os.cpu_count()} cores, "
        f"load average {r['load_before']} before, {r['load_after']} after"
    )
    print("| method | wall (s), median | min-max | vs loop | CPU (s), median |")
    print("| --- | ---: | ---: | ---: | ---: |")
    rows = (
        ("loop", f"sequential `py-spy dump --native` loop, {r['pids']} pids"),
        ("one", "one `py-spy dump --native` of TP0 alone (the floor)"),
        ("diag2", "`diag snapshot --json` (default: 2 samples)"),
        ("diag1", "`diag snapshot --json --samples 1`"),
        ("base2", "baseline: `diag snapshot --json` (default)"),
        ("base1", "baseline: `diag snapshot --json --samples 1`"),
    )
    for key, label in rows:
        if key not in wall:
            continue
        speed = (
            "1.0x" if key == "loop" else "-" if key == "one"
            else f"{med['loop'] / med[key]:.1f}x faster"
        )  # fmt: skip
        print(
            f"| {label} | {med[key]:.2f} | {min(wall[key]):.2f}-{max(wall[key]):.2f} "
            f"| {speed} | {statistics.median(cpu[key]):.2f} |"
        )
    procs = doc["processes"]
    assert isinstance(procs, list)
    dumped = [p for p in procs if p["dump"]["outcome"] == "ok"]
    print(
        f"last default snapshot: {len(dumped)} of {len(procs)} dumped ok, outliers "
        f"{doc['outlier_tp_ranks']}, moving per run {r['moving']}, timings {doc['timings']}"
    )
    print(f"verdict: {doc['verdict']}")
    print(
        f"default snapshot, medians: {r['timings']}; outside the snapshot's own total "
        f"(interpreter start, imports, JSON out) {r['outside_s']:.3f} s; one native dump "
        f"(loop / pids) {med['loop'] / int(r['pids']):.3f} s"  # type: ignore[call-overload]
    )
    if r["base_timings"]:
        print(f"baseline, medians: {r['base_timings']}; moving per run {r['base_moving']}")
    paused: dict[str, list[dict[int, float]]] = r["paused"]  # type: ignore[assignment]
    for key, runs in paused.items():
        if not runs:
            continue
        most = [max(run.values()) * 1000 for run in runs]
        rest = [sorted(run.values())[-2] * 1000 for run in runs if len(run) > 1]
        print(
            f"{'baseline' if key == 'base2' else 'default'} snapshot: ranks paused (main "
            f"thread in ptrace stop), median of {len(runs)}: the most-paused rank "
            f"{statistics.median(most):.0f} ms ({min(most):.0f}-{max(most):.0f}), the next "
            f"{statistics.median(rest):.0f} ms; every rank, per run (ms): "
            + "; ".join(
                ",".join(f"{v * 1000:.0f}" for _, v in sorted(run.items())) for run in runs
            )
        )


def _gaps(log: Path, start: float, end: float) -> list[float]:
    out = []
    for line in log.read_text().splitlines()[1:]:
        at, gap = (float(x) for x in line.split())
        if start <= at <= end + 0.05:
            out.append(gap * 1000.0)
    return out


def bench_pause(repeat: int, pyspy: str, threads: int) -> None:
    """How long each py-spy mode (and a whole snapshot) stops a busy Python target."""
    tmp = Path(tempfile.mkdtemp(prefix="diag-pause-"))
    log = tmp / "gaps.txt"
    script = tmp / "probe.py"
    script.write_text(PROBE)
    probe = subprocess.Popen([sys.executable, str(script), str(log), "0.0002", str(threads)])
    try:
        while not log.exists() or not log.read_text().startswith("ready"):
            time.sleep(0.05)
        time.sleep(0.5)
        modes = {
            "nothing (baseline: a 1 s window, sum of stalls)": ["sleep", "1"],
            "py-spy dump (Python-only)": [pyspy, "dump", "--pid", str(probe.pid)],
            "py-spy dump --native": [pyspy, "dump", "--native", "--pid", str(probe.pid)],
            "py-spy dump --nonblocking": [pyspy, "dump", "--nonblocking", "--pid", str(probe.pid)],
            "diag snapshot --json --pid PROBE (sum of its pauses)": [
                sys.executable, "-m", "diag", "snapshot", "--json", "--pid", str(probe.pid),
            ],
        }  # fmt: skip
        print(
            f"\npause of a busy Python target ({threads + 1} threads), median of {repeat} "
            f"(longest stall in the window, ms); load {_load()}"
        )
        print("| what | pause (ms), median | min-max |")
        print("| --- | ---: | ---: |")
        for label, argv in modes.items():
            vals = []
            for _ in range(repeat):
                t0 = time.monotonic()
                subprocess.run(argv, capture_output=True, timeout=120, check=False)
                t1 = time.monotonic()
                gaps = _gaps(log, t0, t1)
                summed = label.startswith(("diag", "nothing"))
                vals.append(sum(gaps) if summed else max(gaps, default=0.0))
                time.sleep(0.3)
            print(f"| {label} | {statistics.median(vals):.1f} | {min(vals):.1f}-{max(vals):.1f} |")
    finally:
        probe.kill()
        probe.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="8", help="comma-separated rank counts, e.g. 8,16")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pause", action="store_true", help="also measure py-spy's pause")
    ap.add_argument("--pause-threads", type=int, default=48)
    ap.add_argument("--baseline", help="another checkout's root: its snapshot, side by side")
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    print(f"run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {_load()}")
    for n in (int(x) for x in args.ranks.split(",")):
        print_table(bench_ranks(n, args.repeat, pyspy, args.baseline), args.repeat)
    if args.pause:
        bench_pause(args.repeat, pyspy, args.pause_threads)


if __name__ == "__main__":
    main()
