"""Driver of the GPU run: hang the mini server each way, read it, save everything.

One device run = one call of this script. For each scenario it starts the mini server
(tests/gpu/mini_server.py) in its own session, waits for the hang, then records, in this
order: NVML utilization over a window, psutil facts, ``diag snapshot --json`` (and the
terminal view, and an auto-discovery run) end to end, raw ``py-spy dump`` of every
process (``--native --json``, ``--json``, ``--native`` text), a sequential shell loop of
``py-spy dump --native`` over the ranks (the benchmark's baseline), the processes' states
afterwards (none may be left stopped), and finally kills the whole process group.

Everything lands under ``--out`` (one folder per scenario) and, with ``--tar``, in one
tarball (the device returns at most 8 files). A short summary goes to stdout.

    python tests/gpu/drive.py --out /tmp/gpu-run --scenarios collective,cpu
    python tests/gpu/drive.py --out /tmp/cpu-run --backend gloo --weights-gb 0.05 --host-gb 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_run  # noqa: E402

__all__ = ["SCENARIOS", "main", "run_scenario"]

# name -> (mini server mode, wait style, backend (None: --backend), weights device)
SCENARIOS: dict[str, tuple[str, str, str | None, str | None]] = {
    "collective": ("collective", "blocking", None, None),
    "collective-sync": ("collective", "sync", None, None),
    "collective-barrier": ("collective", "barrier", None, None),
    "cpu": ("cpu", "blocking", None, None),
    # gloo for the process group, weights on the GPU (no NCCL needed; no GPU spin)
    "collective-gloo": ("collective", "blocking", "gloo", "cuda"),
    "cpu-gloo": ("cpu", "blocking", "gloo", "cuda"),
}


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_spec(spec: str, args: argparse.Namespace) -> tuple[str, int, int, str]:
    """``name[@world[/outlier]]`` -> (name, world, outlier rank, folder name)."""
    name, _, rest = spec.partition("@")
    world, outlier = args.world, args.outlier_rank
    if rest:
        w, _, o = rest.partition("/")
        world = int(w)
        outlier = int(o) if o else outlier
    if name not in SCENARIOS:
        raise SystemExit(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    folder = name if (world, outlier) == (args.world, args.outlier_rank) else f"{name}-w{world}"
    return name, world, outlier, folder


def run_scenario(spec: str, out: Path, args: argparse.Namespace, t_end: float) -> dict[str, Any]:
    name, world, outlier, folder = parse_spec(spec, args)
    mode, wait, backend, device = SCENARIOS[name]
    backend = backend or args.backend
    work = out / folder
    work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "scenario": folder,
        "mode": mode,
        "wait": wait,
        "backend": backend,
        "world": world,
    }
    server = gpu_run.start_server(
        work,
        mode=mode,
        world=world,
        backend=backend,
        device=device,
        wait=wait,
        outlier_rank=outlier,
        weights_gb=args.weights_gb,
        host_gb=args.host_gb,
        port=args.port,
    )
    try:
        summary["time_to_hang_s"] = round(gpu_run.wait_for_hang(server, args.hang_deadline), 2)
        time.sleep(args.settle)
        pids = server.pids
        ranks = server.rank_pids
        meta = {
            "scenario": folder,
            "mode": mode,
            "wait": wait,
            "world": world,
            "backend": backend,
            "device": device,
            "outlier_rank": outlier if mode == "collective" else None,
            "weights_gb": args.weights_gb,
            "host_gb": args.host_gb,
            "port": args.port,
            "pids": pids,
            "time_to_hang_s": summary["time_to_hang_s"],
        }
        _write(work / "meta.json", meta)

        nvml = gpu_run.nvml_sample(window_s=args.nvml_window)
        _write(work / "nvml.json", nvml)
        summary["gpu_util_mean"] = [
            round(g["util_mean"], 1) for g in nvml.get("gpus", [])
        ] or nvml.get("unavailable")
        summary["gpu_procs"] = [g.get("processes") for g in nvml.get("gpus", [])]
        summary["process_sm_util"] = [g.get("process_sm_util") for g in nvml.get("gpus", [])]

        facts = gpu_run.process_facts(server.all_pids)
        _write(work / "facts.json", facts)
        gpu_run.save_proc_tree(server.all_pids, work / "proc")
        summary["procs"] = [
            {
                k: f.get(k)
                for k in ("pid", "name", "status", "cpu_percent", "rss_bytes", "listening_ports")
            }
            for f in facts
        ]

        snaps: dict[str, Any] = {}
        if time.monotonic() < t_end:
            launcher = str(pids["launcher"])
            for key, extra in (
                ("json", ["--json", "--pid", launcher]),
                ("text", ["--pid", launcher]),
                ("auto_json", ["--json"]),
                ("json_samples1", ["--json", "--pid", launcher, "--samples", "1"]),
            ):
                res = gpu_run.diag_snapshot(extra, timeout=args.snapshot_timeout)
                snaps[key] = res
                suffix = "json" if key.endswith("json") else "txt"
                _write(work / f"snapshot-{key}.{suffix}", res["stdout"])
                if time.monotonic() > t_end:
                    break
        _write(
            work / "snapshot-runs.json",
            {k: {kk: vv for kk, vv in v.items() if kk != "stdout"} for k, v in snaps.items()},
        )
        summary["snapshot"] = {
            k: {"rc": v["rc"], "seconds": v["seconds"]}
            | ({"stderr_tail": v["stderr"][-400:]} if v["rc"] not in (0, 1) else {})
            for k, v in snaps.items()
        }
        parsed = _json_or_none(snaps["json"]["stdout"]) if "json" in snaps else None
        if isinstance(parsed, dict):
            summary["snapshot_outlier_tp_ranks"] = parsed.get("outlier_tp_ranks")
            summary["snapshot_verdict"] = parsed.get("verdict")
            summary["snapshot_wait_sites"] = {
                str(p.get("title")): p.get("wait_site") for p in parsed.get("processes", [])
            }
        summary["states_after_snapshot"] = gpu_run.states(server.all_pids)

        timings: list[dict[str, Any]] = []
        roles = [("launcher", pids["launcher"])]
        roles += [(f"rank{r}", pid) for r, pid in enumerate(ranks)]
        if pids.get("detokenizer"):
            roles.append(("detokenizer", pids["detokenizer"]))
        for role, pid in roles:
            for native, as_json, suffix in (
                (True, True, "native.json"),
                (False, True, "python.json"),
                (True, False, "native.txt"),
            ):
                res = gpu_run.pyspy_dump(int(pid), native=native, as_json=as_json)
                _write(work / "pyspy" / f"{role}.{suffix}", res.get("stdout", ""))
                timings.append(
                    {
                        "role": role,
                        "pid": pid,
                        "mode": suffix,
                        "rc": res.get("rc"),
                        "seconds": res.get("seconds"),
                        "stderr": res.get("stderr", "")[-500:],
                    }
                )
        _write(work / "pyspy-timings.json", timings)
        summary["pyspy_seconds"] = {f"{t['role']}.{t['mode']}": t["seconds"] for t in timings}
        loop = gpu_run.sequential_pyspy_loop(ranks)
        _write(work / "pyspy-loop.json", loop)
        summary["sequential_native_loop_s"] = loop.get("seconds")
        summary["states_after_all"] = gpu_run.states(server.all_pids)
    except Exception as exc:  # record and go on to the next scenario
        summary["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        summary["kill"] = gpu_run.kill_server(server)
        _write(work / "summary.json", summary)
    return summary


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pyspy": gpu_run.pyspy_path(),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = torch.cuda.is_available()
        env["cuda_devices"] = torch.cuda.device_count()
        if torch.cuda.is_available():
            env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception as exc:
        env["torch_error"] = repr(exc)
    exe = gpu_run.pyspy_path()
    if exe:
        env["pyspy_version"] = gpu_run._run([exe, "--version"], 10)["stdout"].strip()
    env["nvidia_smi"] = gpu_run._run(["nvidia-smi", "-L"], 20) if _has("nvidia-smi") else None
    env["nccl_env"] = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_"))}
    return env


def _has(program: str) -> bool:
    import shutil

    return shutil.which(program) is not None


def run_bench(out: Path, timeout: float) -> dict[str, Any]:
    bench = gpu_run.REPO / "benchmarks" / "bench_snapshot.py"
    if not bench.exists():
        return {"skipped": "benchmarks/bench_snapshot.py does not exist"}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(gpu_run.REPO), env.get("PYTHONPATH", "")) if p
    )
    res = gpu_run._run([sys.executable, str(bench)], timeout, env=env)
    _write(out / "bench_snapshot.txt", res["stdout"] + "\n--- stderr\n" + res["stderr"])
    return {k: v for k, v in res.items() if k != "stdout"} | {"stdout_tail": res["stdout"][-3000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--scenarios", default="collective,cpu")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--outlier-rank", type=int, default=1)
    p.add_argument("--weights-gb", type=float, default=4.0)
    p.add_argument("--host-gb", type=float, default=2.0)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--settle", type=float, default=4.0)
    p.add_argument("--nvml-window", type=float, default=3.0)
    p.add_argument("--hang-deadline", type=float, default=150.0)
    p.add_argument("--snapshot-timeout", type=float, default=90.0)
    p.add_argument("--budget", type=float, default=500.0, help="seconds for the whole run")
    p.add_argument("--bench", action="store_true", help="also run benchmarks/bench_snapshot.py")
    p.add_argument("--tar", type=Path, default=None, help="pack --out into this tarball")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    t_end = t0 + args.budget
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    _write(out / "env.json", env)
    print(json.dumps({"env": env}, default=str)[:2000], flush=True)
    results: dict[str, Any] = {}
    specs = [s for s in args.scenarios.split(",") if s]
    for spec in specs:
        parse_spec(spec, args)  # fail early on a typo
    for spec in specs:
        if time.monotonic() > t_end - 60:
            results[spec] = {"skipped": "time budget"}
            continue
        results[spec] = run_scenario(spec, out, args, t_end)
        print(json.dumps({spec: results[spec]}, default=str), flush=True)
    if args.bench:
        left = t_end - time.monotonic()
        results["bench"] = run_bench(out, max(30.0, left)) if left > 45 else {"skipped": "budget"}
        print(json.dumps({"bench": results["bench"]}, default=str), flush=True)
    results["total_s"] = round(time.monotonic() - t0, 1)
    _write(out / "summary.json", results)
    if args.tar:
        with tarfile.open(args.tar, "w:gz") as tar:
            tar.add(out, arcname=out.name)
    print(json.dumps({"total_s": results["total_s"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
