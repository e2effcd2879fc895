"""Start, wait for and always reap the mini servers of ``mini_server.py``.

Like pystack's ``spawn_child_process``: the server runs in its own session
(``start_new_session=True``, so a stopped rank is never continued by a shell's SIGHUP),
readiness is a file handshake (each rank writes ``ready_dir/rank<r>`` right before it
starts to wait), and teardown SIGKILLs the whole process group and every descendant seen,
whatever happened in the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from diag.collect.snapshot import SnapshotOptions, take_snapshot
from diag.model import Snapshot

__all__ = [
    "SLEEPER",
    "MiniServer",
    "free_port",
    "gate_reason",
    "mini_server",
    "ready_child",
    "require_live",
    "snapshot_of",
    "stopped_pids",
]

MINI = Path(__file__).with_name("mini_server.py")
# a child's program for ready_child: says it runs, then sleeps
SLEEPER = """
import sys, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
time.sleep(120)
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MiniServer:
    proc: subprocess.Popen[bytes]
    ready_dir: Path
    log: Path
    port: int
    tp: int
    framework: str
    seen: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        self.seen.update(p.pid for p in procs)
        return procs

    def rank_pids(self) -> dict[int, int]:
        out = {}
        for r in range(self.tp):
            path = self.ready_dir / f"rank{r}"
            out[r] = int(json.loads(path.read_text())["pid"])
        return out

    def wait_ready(self, names: list[str], timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((self.ready_dir / n).exists() for n in names):
                self.tree()
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"mini server exited {self.proc.returncode}:\n{self.log_text()}")
            time.sleep(0.1)
        raise TimeoutError(f"mini server not ready after {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def kill(self) -> None:
        self.tree()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for pid in self.seen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def stopped_pids(pids: set[int]) -> list[int]:
    """Those of ``pids`` in state T (stopped) right now."""
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                out.append(pid)
    return out


@contextlib.contextmanager
def mini_server(
    *, framework: str = "sglang", tp: int = 2, mode: str = "collective",
    extra: tuple[str, ...] = (),
) -> Iterator[MiniServer]:
    ready_dir = Path(tempfile.mkdtemp(prefix=f"diag-mini-{mode}-"))
    log = ready_dir / "server.log"
    port = free_port()
    argv = [
        sys.executable,
        str(MINI),
        "launcher",
        "--framework",
        framework,
        "--tp",
        str(tp),
        "--mode",
        mode,
        "--port",
        str(port),
        "--ready-dir",
        str(ready_dir),
        *extra,
    ]
    env = dict(os.environ)
    if mode == "fr_mismatch" and "nccl" in extra:  # NCCL's recorder, its dumps and pipe
        env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(ready_dir / "nccl_trace_rank_")
        env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = str(ready_dir / "nccl_trace_rank_")
    elif mode == "fr_mismatch":  # set at launch, as a user would: ranks' environ shows it
        env["TORCH_FR_BUFFER_SIZE"] = "2000"
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(ready_dir / "fr_trace_rank_")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = MiniServer(proc, ready_dir, log, port, tp, framework)
    try:
        yield server
    finally:
        server.kill()
        shutil.rmtree(ready_dir, ignore_errors=True)


@contextlib.contextmanager
def ready_child(argv: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A child that prints ``ready`` on its stdout once it runs (``popen``: more Popen
    arguments): yielded then, and killed and reaped whatever happened in the test."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, **popen)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def gate_reason() -> str | None:
    """Why live tests cannot run here (with the fix), or None."""
    try:
        import setproctitle  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is missing: .venv/bin/pip install torch==2.13.0 setproctitle"
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        return "py-spy is missing: pip install py-spy"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
        start_new_session=True, stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # the interpreter is up: py-spy can find it
        res = subprocess.run(
            [pyspy, "dump", "--pid", str(child.pid)], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return "py-spy hung on a plain sleeping process (ptrace blocked?)"
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    if res.returncode != 0:
        return (
            "py-spy cannot attach (ptrace refused): run as root, or `--cap-add SYS_PTRACE`, "
            f"or `sysctl kernel.yama.ptrace_scope=0`. py-spy said: {res.stderr.strip()[:200]}"
        )
    return None


def require_live() -> None:
    """Skip the test where live tests cannot run (fail instead with DIAG_REQUIRE_LIVE)."""
    reason = gate_reason()
    if reason is not None:
        if os.environ.get("DIAG_REQUIRE_LIVE"):
            pytest.fail(f"live tests cannot run: {reason}")
        pytest.skip(f"live tests cannot run: {reason}")


def snapshot_of(server: MiniServer, **kw: object) -> Snapshot:
    """``diag snapshot`` of the server (``kw``: SnapshotOptions), which leaves no process
    stopped."""
    kw.setdefault("timeout_s", 30.0)
    snap = take_snapshot(SnapshotOptions(pid=server.pid, **kw))  # type: ignore[arg-type]
    left = stopped_pids(server.seen | {p.pid for p in snap.processes})
    assert left == [], f"processes left stopped: {left}"
    return snap
