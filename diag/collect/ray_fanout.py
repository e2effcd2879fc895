"""``diag snapshot --ray``: one snapshot task per alive node of the Ray cluster the server
runs on (vLLM's Ray executor, or any Ray job), scheduled on that node with node-affinity
scheduling, the results merged like ``--hosts`` (:func:`diag.collect.fanout.merge`).

Each task asks for no CPU (``num_cpus=0``: a hung server's actors may hold every CPU and
GPU of the node) and runs ``diag snapshot`` as a subprocess of the Ray worker on that
node, so the node needs diag in the Python environment its Ray workers run in. Each
node's clock is read Cristian-style first: a tiny task returns the node's time, the offset
is that time minus the midpoint of the task's round trip and the error bound half of it.

Ray is an optional extra: ``pip install 'diag[ray]'``. The driver joins the running
cluster (``address="auto"``, or ``--ray-address``) and leaves it again; it starts
nothing on the cluster but these tasks.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from diag.collect.fanout import HostResult, JobView, merge
from diag.errors import DiagError, InputError

__all__ = ["alive_nodes", "node_names", "results_from_replies", "snapshot_ray"]


class RayMissing(DiagError):
    """Ray is not installed where diag runs."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(
            "--ray: Ray is not installed in diag's environment",
            help_text="pip install 'diag[ray]' (in the environment the Ray cluster runs)",
        ) from None
    return ray


def alive_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The alive nodes of ``ray.nodes()``, in a stable order (head first, then by address)."""
    alive = [n for n in nodes if n.get("Alive") and n.get("NodeID")]
    return sorted(
        alive,
        key=lambda n: (not n.get("IsHeadNode", False), str(n.get("NodeManagerAddress")),
                       str(n.get("NodeID"))),
    )


def node_names(nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """NodeID -> the name the job view uses: the node's host name, or its address where
    two nodes share a host name, or both with the node id where they share both (several
    Ray nodes on one machine)."""
    host = {str(n["NodeID"]): str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress"))
            for n in nodes}
    addr = {str(n["NodeID"]): str(n.get("NodeManagerAddress") or "") for n in nodes}
    out: dict[str, str] = {}
    for nid in host:
        name = host[nid]
        if sum(1 for v in host.values() if v == name) > 1:
            name = addr[nid] or name
            if sum(1 for k in host if (addr[k] or host[k]) == name) > 1:
                name = f"{name}/{nid[:8]}"
        out[nid] = name
    return out


def _clock_probe() -> float:
    return time.time()


def _snapshot_task(argv: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """Runs on the node: ``diag snapshot ...`` as a subprocess, its output returned."""
    import subprocess

    exe = shutil.which("diag") or shutil.which("diag", path=os.path.dirname(sys.executable))
    cmd = [exe, *argv] if exe else [sys.executable, "-m", "diag", *argv]
    base = {"hostname": socket.gethostname(), "pid": os.getpid()}
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return {**base, "missing": True}
    except subprocess.TimeoutExpired:
        return {**base, "timeout": True}
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    missing = proc.returncode != 0 and any("No module named diag" in ln for ln in err)
    return {**base, "rc": proc.returncode, "stdout": proc.stdout, "stderr": err[-5:],
            "missing": missing}


def results_from_replies(
    names: Mapping[str, str],
    replies: Mapping[str, Mapping[str, Any] | str],
    clocks: Mapping[str, tuple[float, float]],
    elapsed: Mapping[str, float],
) -> list[HostResult]:
    """Each node's reply (the task's dict, or why there is none) as a HostResult."""
    from diag.report.snapshot_read import snapshot_from_dict

    out: list[HostResult] = []
    for nid, name in names.items():
        reply = replies.get(nid, "no reply")
        offset, err = clocks.get(nid, (None, None))
        took = elapsed.get(nid, 0.0)
        if isinstance(reply, str):
            out.append(HostResult(name, False, error=reply, elapsed_s=took,
                                  remedy="ray status; raise --timeout for slow nodes"))
            continue
        if reply.get("missing"):
            out.append(HostResult(
                name, False, error="diag is not installed in that node's Ray environment",
                remedy="pip install diag in the Python environment of the Ray workers",
                elapsed_s=took, offset_s=offset, offset_err_s=err))
            continue
        if reply.get("timeout"):
            out.append(HostResult(name, False, error="the snapshot ran past its deadline",
                                  remedy="raise --timeout", elapsed_s=took))
            continue
        data = reply.get("stdout") or b""
        try:
            raw = json.loads(data)
            snap = snapshot_from_dict(raw)
        except (ValueError, DiagError) as exc:
            tail = "; ".join(reply.get("stderr") or ()) or str(exc)
            out.append(HostResult(name, False, error=f"no snapshot (exit {reply.get('rc')}): "
                                  f"{tail[-300:]}", exit_code=reply.get("rc"), elapsed_s=took))
            continue
        out.append(HostResult(name, True, snapshot=snap, raw=raw, exit_code=reply.get("rc"),
                              elapsed_s=took, offset_s=offset, offset_err_s=err))
    return out


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A GCS address that refuses connections is an input error at once (Ray itself
    retries for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray-address {address}: not HOST:PORT",
                         help_text="--ray-address 10.0.0.1:6379 (the head's GCS port)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise InputError(f"--ray-address {address}: no Ray cluster there "
                         f"({exc.strerror or exc})",
                         help_text="ray status (on the head node) shows the address") from None


def snapshot_ray(
    *,
    address: str | None = None,
    remote_args: Sequence[str] = ("snapshot", "--json"),
    timeout_s: float = 60.0,
    record: Path | None = None,
) -> JobView:
    """One snapshot task per alive node, merged. ``record`` writes the nodes and replies
    as JSON (what a replay test reads back)."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    t0 = time.monotonic()
    if address and address != "auto" and not address.startswith("ray://"):
        _reachable(address)
    try:
        ray.init(address=address or "auto", logging_level="ERROR", log_to_driver=False,
                 include_dashboard=False, configure_logging=False)
    except ConnectionError as exc:
        raise InputError(f"--ray: no Ray cluster to join ({exc})",
                         help_text="start diag on a node of the cluster, or pass "
                         "--ray-address HOST:PORT") from None
    try:
        nodes = alive_nodes(ray.nodes())
        names = node_names(nodes)
        probe = ray.remote(num_cpus=0)(_clock_probe)
        task = ray.remote(num_cpus=0, max_retries=0)(_snapshot_task)

        def on(nid: str) -> Any:
            return NodeAffinitySchedulingStrategy(node_id=nid, soft=False)

        clocks: dict[str, tuple[float, float]] = {}
        for nid in names:  # one at a time: the round trip is the bound
            probe.options(scheduling_strategy=on(nid)).remote()  # warm a worker
        for nid in names:
            best: tuple[float, float] | None = None
            for _ in range(3):
                a = time.time()
                remote_now = ray.get(probe.options(scheduling_strategy=on(nid)).remote(),
                                     timeout=timeout_s)
                b = time.time()
                if best is None or (b - a) / 2 < best[1]:
                    best = (remote_now - (a + b) / 2, (b - a) / 2)
            if best is not None:
                clocks[nid] = best
        started = time.monotonic()
        refs = {
            nid: task.options(scheduling_strategy=on(nid)).remote(list(remote_args), timeout_s)
            for nid in names
        }
        replies: dict[str, Mapping[str, Any] | str] = {}
        elapsed: dict[str, float] = {}
        pending = dict(refs)
        deadline = started + timeout_s + 10.0
        while pending and time.monotonic() < deadline:
            ready, _ = ray.wait(list(pending.values()), num_returns=1,
                                timeout=max(0.1, deadline - time.monotonic()))
            for ref in ready:
                nid = next(k for k, v in pending.items() if v == ref)
                del pending[nid]
                elapsed[nid] = time.monotonic() - started
                try:
                    replies[nid] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001  (a task that died: say why)
                    replies[nid] = f"the task failed: {type(exc).__name__}: {str(exc)[:300]}"
        for nid in pending:
            replies[nid] = f"no answer within {timeout_s + 10.0:.0f} s"
            elapsed[nid] = time.monotonic() - started
            ray.cancel(pending[nid], force=True)
    finally:
        ray.shutdown()
    if record is not None:
        record.write_text(json.dumps({
            "nodes": [{k: n.get(k) for k in ("NodeID", "NodeManagerAddress",
                                             "NodeManagerHostname", "Alive", "IsHeadNode")}
                      for n in nodes],
            "replies": {k: (v if isinstance(v, str) else
                            {**v, "stdout": v.get("stdout", b"").decode("utf-8", "replace")})
                        for k, v in replies.items()},
            "clocks": clocks,
            "elapsed": elapsed,
        }, indent=1))
    results = results_from_replies(names, replies, clocks, elapsed)
    return merge(results, elapsed_s=time.monotonic() - t0)
