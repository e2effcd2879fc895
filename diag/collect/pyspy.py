"""Tiered, bounded, concurrent py-spy dumps of every target, under one deadline.

Each target is dumped in its own thread; every py-spy runs through :mod:`diag.runner`
(its own session, killed with its group when the deadline passes — py-spy is killed,
never the target). Per target the tiers are ``--native`` first (a wait inside C++ —
``c10d::Work::wait``, ``TCPStore::doWait``, ``flock`` — is invisible without it), then
Python-only, then ``--nonblocking`` for a target that cannot be paused; a target that is
already stopped (state T) makes the pausing modes fail, so it gets ``--nonblocking``
straight away. After every dump the target's state is read again: if the dump left it
stopped it is continued with SIGCONT, but a process that was stopped before diag came is
left as it was (and that is recorded). The pid is checked against its start time before
and after, so a reused pid is never dumped or signalled. Further samples (Python-only,
``interval_s`` apart) tell *stuck* (same frames) from *slow* (moving).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from diag.collect import stackapi
from diag.collect.procfs import read_stat
from diag.model import StackProcess, StackThread
from diag.runner import Runner

__all__ = [
    "OUTCOMES",
    "DumpAttempt",
    "DumpResult",
    "DumpTarget",
    "dump_all",
    "find_pyspy",
    "main_thread",
    "python_signature",
]

OUTCOMES = ("ok", "timeout", "permission_denied", "not_found", "partial", "no_pyspy", "not_python")


@dataclass(frozen=True, slots=True)
class DumpTarget:
    pid: int
    starttime_ticks: int | None
    title: str | None = None
    native: bool = True


@dataclass(frozen=True, slots=True)
class DumpAttempt:
    mode: str  # native | python | nonblocking
    outcome: str
    elapsed_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DumpResult:
    pid: int
    outcome: str
    stack: StackProcess | None
    attempts: tuple[DumpAttempt, ...]
    samples: tuple[StackProcess, ...] = ()
    was_stopped: bool = False  # state T before diag touched it (left stopped)
    resumed: bool = False  # a dump left it stopped and diag sent SIGCONT
    moving: bool | None = None
    elapsed_s: float = 0.0

    @property
    def error(self) -> str | None:
        errs = [a.error for a in self.attempts if a.error]
        return errs[-1] if errs and self.outcome != "ok" else None


def find_pyspy(runner: Runner) -> str | None:
    """py-spy on PATH, else beside the running interpreter (a venv's bin/)."""
    found = runner.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else None


def main_thread(p: StackProcess) -> StackThread | None:
    for t in p.threads:
        if p.pid is not None and t.thread_id == p.pid:
            return t
    for t in p.threads:
        if t.name == "MainThread":
            return t
    return p.threads[0] if p.threads else None


def python_signature(p: StackProcess) -> tuple[tuple[str, str, int | None], ...]:
    """The Python frames of the main thread (native frames dropped), to compare samples."""
    t = main_thread(p)
    if t is None:
        return ()
    return tuple((f.name, f.filename, f.line) for f in t.frames if not f.native)


def _classify_failure(stderr: str) -> str:
    low = stderr.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return "permission_denied"
    if "no such process" in low or "esrch" in low or "failed to open process" in low:
        return "not_found"
    if "python version" in low or "python interpreter" in low or "not a python" in low:
        return "not_python"
    return "partial"


def _alive_same(pid: int, starttime: int | None, proc_root: Path) -> tuple[bool, str | None]:
    st = read_stat(pid, proc_root)
    if st is None:
        return False, None
    if starttime is not None and st.starttime_ticks != starttime:
        return False, None  # the pid was reused by another process
    return True, st.state


class _Dumper:
    def __init__(
        self,
        runner: Runner,
        pyspy: str,
        proc_root: Path,
        deadline: float,
    ) -> None:
        self.runner = runner
        self.pyspy = pyspy
        self.proc_root = proc_root
        self.deadline = deadline

    def once(self, target: DumpTarget, mode: str) -> tuple[DumpAttempt, StackProcess | None]:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0.05:
            return DumpAttempt(mode, "timeout", 0.0, "deadline passed before this dump"), None
        argv = [self.pyspy, "dump", "--json", "--pid", str(target.pid)]
        if mode == "native":
            argv.append("--native")
        elif mode == "nonblocking":
            argv.append("--nonblocking")
        res = self.runner.run(argv, timeout=remaining)
        elapsed = round(res.elapsed_s, 3)
        if res.missing:
            return DumpAttempt(
                mode, "no_pyspy", elapsed, res.stderr.strip() or "py-spy not found"
            ), None
        if res.timed_out:
            return DumpAttempt(
                mode, "timeout", elapsed, f"py-spy killed after {elapsed:.1f} s"
            ), None
        if res.returncode != 0:
            err = " ".join(res.stderr.split())[:400] or f"py-spy exited {res.returncode}"
            return DumpAttempt(mode, _classify_failure(res.stderr), elapsed, err), None
        try:
            data = json.loads(res.stdout)
        except json.JSONDecodeError as exc:
            return DumpAttempt(mode, "partial", elapsed, f"py-spy JSON unreadable: {exc}"), None
        try:
            stack = stackapi.parse(data, pid=target.pid, title=target.title, mode=mode)
        except ValueError as exc:
            return DumpAttempt(mode, "partial", elapsed, str(exc)), None
        return DumpAttempt(mode, "ok", elapsed), stack

    def after(self, target: DumpTarget, was_stopped: bool) -> tuple[bool, bool]:
        """(still the same process, resumed): continue a target a dump left stopped."""
        alive, state = _alive_same(target.pid, target.starttime_ticks, self.proc_root)
        if not alive:
            return False, False
        if state in ("T", "t") and not was_stopped:
            # A dump left it stopped (py-spy killed mid-attach); never leave it so.
            for _ in range(3):
                try:
                    os.kill(target.pid, signal.SIGCONT)
                except ProcessLookupError:
                    return False, False
                time.sleep(0.01)
                alive, state = _alive_same(target.pid, target.starttime_ticks, self.proc_root)
                if not alive or state not in ("T", "t"):
                    break
            return alive, True
        return True, False

    def dump(self, target: DumpTarget, samples: int, interval_s: float) -> DumpResult:
        t0 = time.monotonic()
        alive, state = _alive_same(target.pid, target.starttime_ticks, self.proc_root)
        if not alive:
            return DumpResult(
                target.pid,
                "not_found",
                None,
                (DumpAttempt("-", "not_found", 0.0, "process gone (or pid reused)"),),
            )
        was_stopped = state in ("T", "t")
        if was_stopped:
            tiers = ["nonblocking"]
        else:
            tiers = (["native"] if target.native else []) + ["python", "nonblocking"]
        attempts: list[DumpAttempt] = []
        resumed = False
        first: StackProcess | None = None
        outcome = "timeout"
        for mode in tiers:
            attempt, stack = self.once(target, mode)
            attempts.append(attempt)
            same, r = self.after(target, was_stopped)
            resumed = resumed or r
            if not same:
                outcome = "not_found"
                break
            if stack is not None:
                first = stack
                preferred = tiers[0]
                outcome = "ok" if mode == preferred or was_stopped else "partial"
                break
            outcome = attempt.outcome
            if attempt.outcome in ("no_pyspy", "not_python", "not_found"):
                break
            if attempt.outcome == "permission_denied" and mode != "native":
                break
        extra: list[StackProcess] = []
        if first is not None and samples > 1:
            light = "nonblocking" if was_stopped or first.mode == "nonblocking" else "python"
            for k in range(1, samples):
                wait = t0 + k * interval_s - time.monotonic()
                if wait > 0:
                    if time.monotonic() + wait >= self.deadline:
                        break
                    time.sleep(wait)
                attempt, stack = self.once(target, light)
                same, r = self.after(target, was_stopped)
                resumed = resumed or r
                if stack is not None:
                    extra.append(stack)
                else:
                    attempts.append(attempt)
                if not same:
                    break
        moving: bool | None = None
        if first is not None and extra:
            sigs = {python_signature(s) for s in (first, *extra)}
            moving = len(sigs) > 1
        if first is not None:
            first = replace(first, outcome=outcome, samples=1 + len(extra), moving=moving)
            if attempts and outcome != "ok":
                errs = [a.error for a in attempts if a.error]
                if errs:
                    first = replace(first, error=errs[0])
        return DumpResult(
            pid=target.pid,
            outcome=outcome,
            stack=first,
            attempts=tuple(attempts),
            samples=tuple(extra),
            was_stopped=was_stopped,
            resumed=resumed,
            moving=moving,
            elapsed_s=round(time.monotonic() - t0, 3),
        )


def dump_all(
    targets: Sequence[DumpTarget],
    *,
    runner: Runner,
    proc_root: Path = Path("/proc"),
    timeout_s: float = 10.0,
    samples: int = 2,
    interval_s: float = 1.0,
    pyspy: str | None = None,
) -> dict[int, DumpResult]:
    """Dump every target concurrently; all attempts share one deadline of ``timeout_s``."""
    if not targets:
        return {}
    exe = pyspy or find_pyspy(runner)
    if exe is None:
        miss = DumpAttempt("-", "no_pyspy", 0.0, "py-spy is not installed")
        return {t.pid: DumpResult(t.pid, "no_pyspy", None, (miss,)) for t in targets}
    deadline = time.monotonic() + timeout_s
    dumper = _Dumper(runner, exe, proc_root, deadline)
    with ThreadPoolExecutor(max_workers=min(32, len(targets)), thread_name_prefix="pyspy") as pool:
        futures = {t.pid: pool.submit(dumper.dump, t, samples, interval_s) for t in targets}
        return {pid: f.result() for pid, f in futures.items()}
