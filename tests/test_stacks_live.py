"""Real py-spy JSON of real blocked processes -> parse_pyspy_json -> wait site.

Each child sets up one kind of wait, prints ``ready`` and blocks; the test dumps it with
the real py-spy (``--json``, with and without ``--native``), parses and classifies it.
Children run in their own session and are always killed and reaped. Without py-spy or
ptrace permission the tests skip with the fix (or fail under DIAG_REQUIRE_LIVE=1).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from diag.model import RankId, StackProcess
from diag.stacks.merge import group_stacks, outlier_tp_ranks
from diag.stacks.pyspy_json import parse_pyspy_json
from diag.stacks.textdump import parse_stack_text

pytestmark = pytest.mark.live

PYSPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


@pytest.fixture(scope="module", autouse=True)
def _gate() -> None:
    reason = None
    if not Path(PYSPY).exists():
        reason = "py-spy is missing: pip install py-spy"
    else:
        with _child("import time; print('ready', flush=True); time.sleep(60)") as pid:
            res = subprocess.run(
                [PYSPY, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
            )
            if res.returncode != 0:
                reason = (
                    "py-spy cannot attach (ptrace refused): run as root or give the container "
                    f"SYS_PTRACE; py-spy said: {res.stderr.strip()[:160]}"
                )
    if reason is not None:
        if os.environ.get("DIAG_REQUIRE_LIVE"):
            pytest.fail(reason)
        pytest.skip(reason)


@contextmanager
def _child(code: str, *, ready_timeout: float = 60.0) -> Iterator[int]:
    """A Python child running ``code``; yields its pid once it printed ``ready``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_ready(proc, ready_timeout)
        time.sleep(0.2)  # from print() to the blocking call
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _wait_ready(proc: subprocess.Popen[str], timeout: float) -> None:
    """Wait for the child's ``ready`` line, at most ``timeout`` seconds."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"child {proc.pid} not ready after {timeout} s")
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"child did not start: {line!r}"


def _dump(
    pid: int, *, native: bool, title: str | None = None, settled: str | None = None
) -> StackProcess:
    """One py-spy JSON dump; with ``settled``, dumps again (up to ~10 s) until a frame
    of the main thread has that name, so a busy machine cannot catch the child before
    it reached its wait."""
    cmd = [PYSPY, "dump", "--json", "--pid", str(pid)]
    if native:
        cmd.insert(2, "--native")
    for _ in range(40):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        p = parse_pyspy_json(
            json.loads(res.stdout), pid=pid, title=title, mode="native" if native else "python"
        )
        main = [
            f.name
            for t in p.threads
            if t.name == "MainThread" or t.thread_id == pid
            for f in t.frames
        ]
        if settled is None or settled in main:
            return p
        time.sleep(0.25)
    raise AssertionError(f"pid {pid} never reached {settled!r}: {main}")


def _main(p: StackProcess) -> list[str]:
    thread = next(t for t in p.threads if t.thread_id == p.wait_thread)
    return [f.name for f in thread.frames]


QUEUE = """
import queue, threading
def monitor():
    threading.Event().wait()
threading.Thread(target=monitor, name="tqdm_monitor", daemon=True).start()
q = queue.Queue()
print("ready", flush=True)
q.get()
"""


@pytest.mark.parametrize("native", [False, True])
def test_queue_get_with_a_helper_thread(native: bool) -> None:
    with _child(QUEUE) as pid:
        p = _dump(pid, native=native, settled="Queue.get")
    assert p.pid == pid and p.mode == ("native" if native else "python")
    assert {t.name for t in p.threads} == {"MainThread", "tqdm_monitor"}
    assert p.threads[0].name == "MainThread"  # main thread first whatever py-spy's order
    assert p.wait_site == "stack.ipc_wait" and p.wait_thread == pid
    assert "Queue.get" in _main(p)
    assert p.threads[0].idle is True and p.threads[0].owns_gil is False
    if native:
        assert any(f.native and f.module for f in p.threads[0].frames)


@pytest.mark.parametrize("native", [False, True])
def test_text_view_and_json_of_the_same_process_agree(native: bool) -> None:
    with _child(QUEUE) as pid:
        as_json = _dump(pid, native=native, settled="Queue.get")
        cmd = [PYSPY, "dump", "--pid", str(pid)] + (["--native"] if native else [])
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (as_text,) = parse_stack_text(res.stdout)
    assert as_text.pid == pid and as_text.title is not None
    assert (as_text.wait_site, as_text.wait_thread) == (as_json.wait_site, as_json.wait_thread)

    def shape(p: StackProcess) -> set[tuple[str | None, tuple[str, ...]]]:
        return {(t.name, tuple(f.name for f in t.frames if not f.native)) for t in p.threads}

    assert shape(as_text) == shape(as_json)


SOCKET = """
import socket
a, b = socket.socketpair()
print("ready", flush=True)
a.makefile("rb").readline()
"""


def test_socket_read() -> None:
    with _child(SOCKET) as pid:
        p = _dump(pid, native=False, settled="SocketIO.readinto")
    assert p.wait_site == "stack.ipc_wait"
    assert _main(p)[0] == "SocketIO.readinto"


PIPE = """
import multiprocessing as mp
r, w = mp.Pipe(duplex=False)
print("ready", flush=True)
r.recv()
"""


def test_multiprocessing_pipe_recv() -> None:
    with _child(PIPE) as pid:
        p = _dump(pid, native=True, settled="Connection._recv")
    assert p.wait_site == "stack.ipc_wait"
    assert any("Connection" in n or "_recv" in n for n in _main(p))


LOCK = """
import threading
lock = threading.Lock()
lock.acquire()
def take():
    lock.acquire()
print("ready", flush=True)
take()
"""


def test_lock_is_invisible_without_native_and_named_with_it() -> None:
    with _child(LOCK) as pid:
        python = _dump(pid, native=False, settled="take")
        native = _dump(pid, native=True, settled="PyThread_acquire_lock_timed")
    # Python-only: the C call is invisible; no site is invented.
    assert python.wait_site is None and _main_or_none(python) is None
    assert native.wait_site == "stack.gil_or_lock"
    assert "PyThread_acquire_lock_timed" in _main(native)


def _main_or_none(p: StackProcess) -> list[str] | None:
    return None if p.wait_thread is None else _main(p)


GLOO = """
import os, sys, time
import torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2],
                        rank=rank, world_size=2)
print("ready", flush=True)
if rank == 0:
    dist.all_reduce(torch.ones(4))   # rank 1 never joins
time.sleep(600)
"""


def test_real_gloo_collective_that_one_rank_never_joins() -> None:
    pytest.importorskip("torch")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GLOO, str(r), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        for r in (0, 1)
    ]
    try:
        for p in procs:
            _wait_ready(p, 120.0)
        time.sleep(1.0)
        dumps = [
            _dump(
                p.pid,
                native=True,
                title=f"sglang::scheduler_TP{r}",
                settled="all_reduce" if r == 0 else "clock_nanosleep",
            )
            for r, p in enumerate(procs)
        ]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)
            if p.stdout is not None:
                p.stdout.close()
    rank0, rank1 = dumps
    assert (rank0.rank, rank1.rank) == (RankId(tp=0), RankId(tp=1))
    assert rank0.wait_site == "stack.nccl_collective"
    assert "all_reduce" in _main(rank0)
    assert rank1.wait_site != "stack.nccl_collective"
    assert outlier_tp_ranks(dumps, group_stacks(dumps)) == (1,)
