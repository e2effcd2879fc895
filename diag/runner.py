"""The one place diag starts other programs.

``Runner`` is a Protocol with a real implementation (:class:`SubprocessRunner`) and tests
may pass a fake. Everything that runs a command (py-spy, nvidia-smi, rg in benchmarks
aside) goes through it, so that timeouts, process groups and error translation live in
one module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

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
    """Runs each command in its own session, killing the whole group on timeout."""

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
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return RunResult(
                tuple(argv),
                None,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.monotonic() - start,
                timed_out=True,
            )
        return RunResult(
            tuple(argv),
            proc.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            time.monotonic() - start,
        )


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
