"""(speed) One function run in a forked child while this process goes on with other work.

The analysis's finish is serial Python: on two cores, a part of it that needs nothing the
rest computes (the stack extractor over the records) can run in a child forked at that
point (it sees the same objects, copy-on-write) while the parent matches phases and runs
the rules' line pass; the child's answer comes back pickled through a pipe.

The child is used only on Linux, only from a process with no other Python thread (a fork
copies one thread: a lock another thread holds would stay held in the child; the child
calls no library that runs threads of its own), and only where the caller asks for it.
Whatever goes wrong in or with the child (an exception, a result that does not pickle, a
killed child), :meth:`Aside.result` computes the answer here instead: the result is the
same either way, and an exception is raised the same way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Aside", "can_fork"]

T = TypeVar("T")

_OK = b"\x01"  # first byte of the child's answer: a pickled result follows
_READ = 1 << 20


def can_fork() -> bool:
    """Whether a child may be forked here and now (Linux, no other Python thread)."""
    return sys.platform == "linux" and hasattr(os, "fork") and threading.active_count() == 1


class Aside(Generic[T]):
    """``fn()`` computed in a forked child (when ``fork`` and :func:`can_fork`), else here,
    when :meth:`result` asks. Call :meth:`close` when the result is no longer wanted (a
    child not waited for is killed)."""

    def __init__(self, fn: Callable[[], T], *, fork: bool = True) -> None:
        self._fn = fn
        self._pid: int | None = None
        self._fd: int | None = None
        if fork and can_fork():
            self._start()

    @property
    def forked(self) -> bool:
        """Whether a child is computing the result."""
        return self._pid is not None

    def _start(self) -> None:
        try:
            r, w = os.pipe()
        except OSError:
            return
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns of a fork with threads running, counting those of the
                # process's libraries (OpenBLAS's pool, when numpy was imported without
                # OPENBLAS_NUM_THREADS=1): the child never calls into them (and no Python
                # thread runs: can_fork)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # the child: compute, write, and leave without running any cleanup
            code = 1
            try:
                os.close(r)
                data = _OK + pickle.dumps(self._fn(), protocol=pickle.HIGHEST_PROTOCOL)
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view) :]
                code = 0
            except BaseException:  # noqa: BLE001, S110 - the parent computes it again
                pass
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._fd = pid, r

    def result(self) -> T:
        """The child's result; or, when no child ran or it failed, ``fn()`` computed now."""
        got = self._collect()
        if got is not None:
            try:
                value: T = pickle.loads(got)  # noqa: S301 - our own child's bytes
                return value
            except Exception:  # noqa: BLE001 - computed again here
                pass
        return self._fn()

    def _collect(self) -> bytes | None:
        if self._pid is None or self._fd is None:
            return None
        parts: list[bytes] = []
        try:
            while True:
                part = os.read(self._fd, _READ)
                if not part:
                    break
                parts.append(part)
        except OSError:
            parts = []
        ok = self._reap(kill=False) == 0
        data = b"".join(parts)
        return data[1:] if ok and data[:1] == _OK else None

    def _reap(self, *, kill: bool) -> int | None:
        pid, fd = self._pid, self._fd
        self._pid = self._fd = None
        if fd is not None:
            os.close(fd)
        if pid is None:
            return None
        if kill:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return None
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Kill and reap a child whose result was not asked for (nothing if it was)."""
        self._reap(kill=True)
