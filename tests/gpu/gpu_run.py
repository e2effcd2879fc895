"""The GPU run's steps: start the mini server, wait for its hang, read it, take it down.

Shared by the driver (``drive.py``, one device run that writes everything under a folder)
and the live test (``test_gpu_live.py``). Every step records what it saw, with timings,
as plain JSON-able dicts: these records are the fixtures that ``tests/test_gpu_replay.py``
replays without a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "HERE",
    "REPO",
    "Server",
    "diag_snapshot",
    "free_port",
    "gpu_count",
    "kill_server",
    "nvml_sample",
    "process_facts",
    "pyspy_dump",
    "pyspy_path",
    "save_proc_tree",
    "sequential_pyspy_loop",
    "start_server",
    "states",
    "wait_for_hang",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MINI_SERVER = HERE / "mini_server.py"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gpu_count() -> int:
    """NVIDIA GPUs NVML sees; 0 when there is no NVML or no driver."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU here
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def pyspy_path() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else None


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    ready_dir: Path
    log_path: Path
    world: int
    mode: str
    started: float
    pids: dict[str, Any] = field(default_factory=dict)

    @property
    def rank_pids(self) -> list[int]:
        return [int(p) for p in self.pids.get("ranks", [])]

    @property
    def all_pids(self) -> list[int]:
        out = [int(self.pids["launcher"])] if "launcher" in self.pids else []
        out += self.rank_pids
        if self.pids.get("detokenizer"):
            out.append(int(self.pids["detokenizer"]))
        return out


def start_server(
    workdir: Path,
    *,
    mode: str,
    world: int,
    backend: str,
    wait: str = "blocking",
    device: str | None = None,
    outlier_rank: int = 1,
    weights_gb: float = 4.0,
    host_gb: float = 2.0,
    port: int = 30000,
) -> Server:
    """Start the mini server in its own session (setsid), its output to ``server.log``."""
    ready = workdir / "ready"
    if ready.exists():
        shutil.rmtree(ready)
    ready.mkdir(parents=True)
    log_path = workdir / "server.log"
    argv = [
        sys.executable,
        str(MINI_SERVER),
        f"--mode={mode}",
        f"--world={world}",
        f"--backend={backend}",
        f"--wait={wait}",
        *([f"--device={device}"] if device else []),
        f"--outlier-rank={outlier_rank}",
        f"--weights-gb={weights_gb}",
        f"--host-gb={host_gb}",
        f"--port={port}",
        f"--master-port={free_port()}",
        f"--ready-dir={ready}",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # Keep NVLink multicast off (the device machines require it; harmless elsewhere).
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=str(workdir),
        )
    return Server(proc, ready, log_path, world, mode, time.monotonic())


def wait_for_hang(server: Server, deadline_s: float) -> float:
    """Wait until every rank has entered its hang; returns seconds from start.

    Raises RuntimeError (with the log's tail) when the server exits or the deadline passes.
    """
    end = server.started + deadline_s
    while time.monotonic() < end:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"mini server exited with {server.proc.returncode}:\n{_tail(server.log_path)}"
            )
        pids_file = server.ready_dir / "pids.json"
        if not server.pids and pids_file.exists():
            with contextlib.suppress(ValueError):
                server.pids = json.loads(pids_file.read_text())
        hung = list(server.ready_dir.glob("hang.*"))
        if server.pids and len(hung) >= server.world:
            return time.monotonic() - server.started
        time.sleep(0.2)
    raise RuntimeError(f"no hang within {deadline_s:.0f} s:\n{_tail(server.log_path)}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def _status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.Error as exc:
        return f"gone: {type(exc).__name__}"


def states(pids: Sequence[int]) -> dict[int, str]:
    return {pid: _status(pid) for pid in pids}


def _primed(pid: int) -> psutil.Process | None:
    try:
        p = psutil.Process(pid)
        p.cpu_percent(None)
    except psutil.Error:
        return None
    return p


def _facts(p: psutil.Process) -> dict[str, Any]:
    try:
        with p.oneshot():
            listening = sorted(
                {
                    c.laddr.port
                    for c in p.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN
                }
            )
            return {
                "pid": p.pid,
                "ppid": p.ppid(),
                "cmdline": p.cmdline(),
                "name": p.name(),
                "status": p.status(),
                "rss_bytes": p.memory_info().rss,
                "cpu_percent": p.cpu_percent(None),
                "threads": p.num_threads(),
                "listening_ports": listening,
                "create_time": p.create_time(),
            }
    except psutil.Error as exc:
        return {"pid": p.pid, "error": repr(exc)}


def process_facts(pids: Sequence[int], window_s: float = 1.0) -> list[dict[str, Any]]:
    """psutil facts of each process; CPU% over one window shared by all of them."""
    procs = [p for p in (_primed(pid) for pid in pids) if p is not None]
    time.sleep(window_s)
    return [_facts(p) for p in procs]


ENV_KEYS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
)
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "SGLANG_", "VLLM_")


def _copy(src: Path, dst: Path) -> None:
    try:
        data = src.read_bytes()
    except OSError:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(data)


def _environ_subset(raw: bytes) -> bytes:
    keep = []
    for item in raw.split(b"\0"):
        key = item.split(b"=", 1)[0].decode("utf-8", "replace")
        if key in ENV_KEYS or key.startswith(ENV_PREFIXES):
            keep.append(item)
    return b"\0".join(keep) + (b"\0" if keep else b"")


def save_proc_tree(pids: Sequence[int], dest: Path, proc: Path = Path("/proc")) -> None:
    """Copy what the no-ptrace tier reads of each process into ``dest`` (a fake /proc).

    Per process: stat, status, cmdline, comm, wchan, syscall, environ (only rank, device
    and NCCL/torch variables), task/<tid>/{stat,comm,wchan}, and fd/<n> socket links;
    plus /proc/stat and /proc/net/tcp{,6}. Replays read it through a ``proc_root``.
    """
    for name in ("stat", "net/tcp", "net/tcp6", "uptime"):
        _copy(proc / name, dest / name)
    for pid in pids:
        base, out = proc / str(pid), dest / str(pid)
        for name in ("stat", "status", "cmdline", "comm", "wchan", "syscall"):
            _copy(base / name, out / name)
        with contextlib.suppress(OSError):
            (out / "environ").write_bytes(_environ_subset((base / "environ").read_bytes()))
        with contextlib.suppress(OSError):
            for task in (base / "task").iterdir():
                for name in ("stat", "comm", "wchan"):
                    _copy(task / name, out / "task" / task.name / name)
        with contextlib.suppress(OSError):
            (out / "fd").mkdir(parents=True, exist_ok=True)
            for fd in (base / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:"):
                        os.symlink(target, out / "fd" / fd.name)


def nvml_sample(window_s: float = 3.0, interval_s: float = 0.1) -> dict[str, Any]:
    """Per-GPU utilization over a window (every reading kept), memory, per-process memory."""
    try:
        import pynvml
    except ImportError as exc:
        return {"unavailable": f"pynvml not importable: {exc}"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"unavailable": f"NVML init failed: {exc}"}
    try:
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        util: list[list[int]] = [[] for _ in range(n)]
        t0 = time.monotonic()
        while time.monotonic() - t0 < window_s:
            for i, h in enumerate(handles):
                util[i].append(int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
            time.sleep(interval_s)
        gpus = []
        for i, h in enumerate(handles):
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            entry: dict[str, Any] = {
                "index": i,
                "name": _s(pynvml.nvmlDeviceGetName(h)),
                "uuid": _s(pynvml.nvmlDeviceGetUUID(h)),
                "util": util[i],
                "util_mean": sum(util[i]) / max(1, len(util[i])),
                "memory_used_bytes": int(mem.used),
                "memory_total_bytes": int(mem.total),
            }
            entry["process_sm_util"] = _process_util(pynvml, h, t0)
            try:
                entry["processes"] = {
                    str(p.pid): int(p.usedGpuMemory or 0)
                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                }
            except Exception as exc:
                entry["processes_error"] = repr(exc)
            entry["power_mw"] = _try_int(lambda h=h: pynvml.nvmlDeviceGetPowerUsage(h))
            entry["clock_sm_mhz"] = _try_int(lambda h=h: pynvml.nvmlDeviceGetClockInfo(h, 1))
            gpus.append(entry)
        return {
            "driver": _s(pynvml.nvmlSystemGetDriverVersion()),
            "window_s": window_s,
            "interval_s": interval_s,
            "gpus": gpus,
        }
    finally:
        pynvml.nvmlShutdown()


def _process_util(pynvml: Any, handle: Any, since_monotonic: float) -> Any:
    """Per-process SM utilization samples since the window began (not on every GPU/VM)."""
    since_us = int((time.time() - (time.monotonic() - since_monotonic)) * 1e6)
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except Exception as exc:
        return f"unavailable: {exc!r}"
    out: dict[str, list[int]] = {}
    for smp in samples:
        out.setdefault(str(smp.pid), []).append(int(smp.smUtil))
    return out


def _try_int(fn: Any) -> int | str:
    try:
        return int(fn())
    except Exception as exc:  # NVMLError_NotSupported and friends: keep the reason
        return f"unavailable: {exc!r}"


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pyspy_dump(pid: int, *, native: bool, as_json: bool, timeout: float = 30.0) -> dict[str, Any]:
    """One ``py-spy dump``; returns rc, seconds, stdout, stderr (py-spy in its own session)."""
    exe = pyspy_path()
    if exe is None:
        return {"pid": pid, "rc": None, "error": "py-spy not found", "seconds": 0.0}
    argv = [exe, "dump", "--pid", str(pid)]
    if native:
        argv.append("--native")
    if as_json:
        argv.append("--json")
    return _run(argv, timeout) | {"pid": pid, "native": native, "json": as_json}


def sequential_pyspy_loop(pids: Sequence[int], timeout: float = 120.0) -> dict[str, Any]:
    """The baseline of the benchmark: a plain shell loop of ``py-spy dump --native``."""
    exe = pyspy_path()
    if exe is None:
        return {"error": "py-spy not found"}
    script = f'for p in {" ".join(str(p) for p in pids)}; do "{exe}" dump --native --pid $p; done'
    res = _run(["bash", "-c", script], timeout)
    res.pop("stdout", None)
    return res | {"pids": list(pids)}


def diag_snapshot(extra: Sequence[str], timeout: float = 180.0) -> dict[str, Any]:
    """``python -m diag snapshot ...`` end to end (interpreter start included)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    exe = pyspy_path()
    if exe:  # diag looks py-spy up on PATH
        env["PATH"] = os.pathsep.join((str(Path(exe).parent), env.get("PATH", "")))
    env.setdefault("COLUMNS", "160")
    return _run([sys.executable, "-m", "diag", "snapshot", *extra], timeout, env=env)


def _run(argv: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return {
        "argv": list(argv),
        "rc": proc.returncode,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - t0, 4),
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
    }


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_server(server: Server, grace_s: float = 10.0) -> dict[str, Any]:
    """SIGKILL the server's process group and every process it started; reap; report."""
    known = set(server.all_pids)
    with contextlib.suppress(psutil.Error):
        known |= {c.pid for c in psutil.Process(server.proc.pid).children(recursive=True)}
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.proc.pid, signal.SIGKILL)
    for pid in known:  # spawned children share the group, but be sure
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(timeout=grace_s)
    end = time.monotonic() + grace_s
    alive = [p for p in known if _alive(p)]
    while alive and time.monotonic() < end:
        time.sleep(0.1)
        alive = [p for p in alive if _alive(p)]
    return {"killed": sorted(known), "still_alive": alive, "returncode": server.proc.returncode}
