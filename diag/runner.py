"""The one place diag starts other programs.

``Runner`` is a Protocol with a real implementation (:class:`SubprocessRunner`) and tests
may pass a fake. Everything that runs a command (py-spy, nvidia-smi, rg in benchmarks
aside) goes through it, so that timeouts, process groups and error translation live in
one module.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from diag.limits import MAX_PYSPY_OUTPUT_BYTES, MAX_RUN_STDERR_BYTES

__all__ = ["RunResult", "Runner", "SubprocessRunner", "spawn_group"]


@dataclass(frozen=True, slots=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it timed out and was killed
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool = False
    missing: bool = False  # the program was not found
    truncated: bool = False  # output past the runner's cap: cut, and the program killed


class Runner(Protocol):
    def which(self, program: str) -> str | None: ...

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> RunResult: ...


class SubprocessRunner:
    """Runs each command in its own session, killing the whole group on timeout; its
    output is capped (``max_stdout`` / ``max_stderr`` bytes)."""

    max_stdout: int = MAX_PYSPY_OUTPUT_BYTES
    max_stderr: int = MAX_RUN_STDERR_BYTES

    def which(self, program: str) -> str | None:
        return shutil.which(program)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(env) if env is not None else None,
            )
        except FileNotFoundError as exc:
            return RunResult(tuple(argv), None, "", str(exc), 0.0, missing=True)
        except PermissionError as exc:
            return RunResult(tuple(argv), None, "", str(exc), 0.0, missing=True)
        out, err, timed_out, truncated = self._collect(proc, start + timeout)
        return RunResult(
            tuple(argv),
            None if timed_out else proc.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            time.monotonic() - start,
            timed_out=timed_out,
            truncated=truncated,
        )

    def _collect(
        self, proc: subprocess.Popen[bytes], deadline: float
    ) -> tuple[bytes, bytes, bool, bool]:
        """Read both pipes until EOF, the deadline or the output cap; then the group is
        killed and the pipes closed whatever its children do (a grandchild that keeps a
        pipe open, or floods it, never stretches the deadline or fills memory)."""
        assert proc.stdout is not None and proc.stderr is not None
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        caps = {out_fd: self.max_stdout, err_fd: self.max_stderr}
        bufs: dict[int, bytearray] = {fd: bytearray() for fd in caps}
        timed_out = truncated = False
        exited_at: float | None = None
        with selectors.DefaultSelector() as sel:
            for fd in caps:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map() and not truncated:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > 0.5:
                    break  # it exited; a child of it holds the pipe: stop reading
                wait = deadline - now if exited_at is None else 0.1
                for key, _ in sel.select(min(wait, 0.25)):
                    fd = int(key.fd)
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    room = caps[fd] - len(bufs[fd])
                    bufs[fd] += chunk[:room]
                    if len(chunk) > room:
                        truncated = True
                        break
        if proc.poll() is None and not (timed_out or truncated):
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        # the group goes whatever it did (a child left behind by py-spy, a flood)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        proc.stderr.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
        return bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out, truncated


def spawn_group(
    argv: Sequence[str], *, stdout: IO[bytes], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a long-running program (``diag watch -- CMD``) in its own session and process
    group, stdout and stderr combined into ``stdout`` (a file), stdin closed. The caller
    owns it: it forwards signals with ``os.killpg`` and reaps it."""
    return subprocess.Popen(
        list(argv),
        stdout=stdout,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(env) if env is not None else None,
    )
