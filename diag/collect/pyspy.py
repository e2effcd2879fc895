"""Tiered, bounded, concurrent py-spy dumps of every target, under one deadline.

Every py-spy runs through :mod:`diag.runner` (its own session, killed with its group when
the deadline passes — py-spy is killed, never the target), and every phase dumps all its
targets in parallel:

1. a Python-only dump of every target (0.01-0.1 s each); a target that is already
   stopped (state T) makes the pausing modes fail, so it gets ``--nonblocking`` (which
   never pauses); a target that cannot be paused falls back to ``--nonblocking`` too;
2. ``--native`` dumps (a wait inside C++ — ``c10d::Work::wait``, ``TCPStore::doWait``,
   ``flock`` — is invisible without them). They cost 0.2-3 s of CPU each (py-spy loads
   libtorch's symbols per process), so by default one rank per group of identical Python
   stacks is dumped natively and stands for the others (``native_peer``);
   ``native_all`` dumps every rank natively. The first of a group to be dumped
   represents it, so its native dump starts as soon as its own Python dump is in; one
   rank the caller names (``lead``: the likeliest to stand for the largest group) has its
   native dump started before any other dump (``start_lead``; its Python-only dump is in
   long before py-spy has read the binaries and suspends it);
3. a second look tells *stuck* (same Python frames) from *slow* (moving) without a
   wait of its own: a natively dumped rank's second sample is its ``--native`` dump (py-spy
   suspends the target some 0.1-0.2 s after it starts, once it has read the binaries, and
   reads every frame then); every other target gets a Python-only dump, at least
   ``min_gap_s`` after its first, while the native dumps run; the lead, whose native dump
   may read it only ~0.1 s after its first look, gets one more look ``min_gap_s`` after
   its first: ``--nonblocking`` while its native dump still holds it (no suspend needed;
   off the critical path), Python-only once that dump is done.
   More samples (``samples`` > 2) follow ``interval_s`` apart.

Each dump pauses its target while py-spy reads it (the default modes; ``--nonblocking``
never pauses): a few ms for a Python-only dump; a ``--native`` dump keeps its target
stopped while it unwinds every thread *and symbolises the libraries on the stack*, which
for a rank waiting in libtorch is most of the dump (0.3-0.6 s; a rank in ``time.sleep``:
~10 ms). benchmarks/bench_snapshot.py measures both.

After every dump the target's state is read again: if the dump left it stopped it is
continued with SIGCONT, but a process that was stopped before diag came is left as it was
(and that is recorded). The pid is checked against its start time before and after each
dump, so a reused pid is never dumped or signalled. Each target's outcome is recorded:
ok, timeout, permission_denied, not_found, partial, no_pyspy or not_python.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

from diag.collect import stackapi
from diag.collect.procfs import read_stat
from diag.limits import MAX_PYSPY_OUTPUT_BYTES, loads_json
from diag.model import StackProcess, StackThread
from diag.runner import Runner

__all__ = [
    "OUTCOMES",
    "DumpAttempt",
    "DumpResult",
    "DumpTarget",
    "EarlyNative",
    "dump_all",
    "find_pyspy",
    "main_thread",
    "no_pyspy",
    "python_signature",
    "start_lead",
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
    native_peer: int | None = None  # whose --native dump stands for this one's C++ frames
    python_stack: StackProcess | None = None  # the Python-only sample (for grouping)

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
    if st.state in ("Z", "X"):
        return False, None  # it exited (a zombie its parent has not reaped yet)
    return True, st.state


class _Dumper:
    def __init__(
        self,
        runner: Runner,
        pyspy: str,
        proc_root: Path,
        deadline: float,
        launched: threading.Event | None = None,
    ) -> None:
        self.launched = launched or threading.Event()
        self.runner = runner
        self.pyspy = pyspy
        self.proc_root = proc_root
        self.deadline = deadline
        # what a target in state D may spend on a pausing dump (the others keep the rest)
        self.d_share = max(0.5, (deadline - time.monotonic()) / 4)

    def once(
        self, target: DumpTarget, mode: str, *, share: float | None = None
    ) -> tuple[DumpAttempt, StackProcess | None]:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0.05:
            return DumpAttempt(mode, "timeout", 0.0, "deadline passed before this dump"), None
        if share is not None:
            remaining = min(remaining, share)
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
        if getattr(res, "truncated", False):
            return DumpAttempt(
                mode, "partial", elapsed,
                f"py-spy output past {MAX_PYSPY_OUTPUT_BYTES >> 20} MiB: cut, py-spy killed",
            ), None  # fmt: skip
        if res.returncode != 0:
            err = " ".join(res.stderr.split())[:400] or f"py-spy exited {res.returncode}"
            return DumpAttempt(mode, _classify_failure(res.stderr), elapsed, err), None
        try:
            data = loads_json(res.stdout)
        except ValueError as exc:
            return DumpAttempt(mode, "partial", elapsed, f"py-spy JSON unreadable: {exc}"), None
        try:
            stack = stackapi.parse(data, pid=target.pid, title=target.title, mode=mode)
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            # (a py-spy on PATH is input too: a shape it never prints is a partial dump)
            msg = f"py-spy JSON of an odd shape: {str(exc)[:200] or type(exc).__name__}"
            return DumpAttempt(mode, "partial", elapsed, msg), None
        return DumpAttempt(mode, "ok", elapsed), stack

    def after(self, target: DumpTarget, was_stopped: bool) -> tuple[bool, bool]:
        """(still the same process, resumed): continue a target a dump left stopped."""
        alive, state = _alive_same(target.pid, target.starttime_ticks, self.proc_root)
        if not alive:
            return False, False
        if state == "T" and not was_stopped:
            # A dump left it stopped (py-spy killed mid-attach: the tracer's exit detaches
            # it, and the SIGSTOP of the attach can leave it in group-stop); never leave it
            # so. ("t", a ptrace stop, belongs to a live tracer and ends with it.)
            for _ in range(3):
                try:
                    os.kill(target.pid, signal.SIGCONT)
                except ProcessLookupError:
                    return False, False
                time.sleep(0.01)
                alive, state = _alive_same(target.pid, target.starttime_ticks, self.proc_root)
                if not alive or state != "T":
                    break
            return alive, True
        return True, False

    def first(self, target: DumpTarget, state: str | None = None) -> _Work:
        """The first dump: Python-only (``--nonblocking`` if stopped or it fails).
        ``state``: the target's state, read before any dump of it (the lead's: its
        ``--native`` dump is already started); else it is read here."""
        work = _Work(target)
        if state is None:
            alive, state = _alive_same(target.pid, target.starttime_ticks, self.proc_root)
        else:
            alive = True
        if not alive:
            work.outcome = "not_found"
            work.attempts.append(DumpAttempt("-", "not_found", 0.0, "process gone (or pid reused)"))
            return work
        work.was_stopped = state in ("T", "t")
        # in uninterruptible sleep (D: NFS, a GPU driver call) a pausing dump waits until
        # the target leaves it: it gets a non-blocking dump first, and a pausing one only
        # within its own share of the deadline
        work.d_state = state == "D"
        self.python_tiers(work)
        work.first_done = time.monotonic()
        return work

    def python_tiers(self, work: _Work) -> None:
        target = work.target
        # A pausing dump can fail transiently (the target moved while py-spy read it):
        # Python-only is tried twice before falling back to --nonblocking.
        if work.was_stopped:
            tiers = ["nonblocking"]
        elif work.d_state:
            tiers = ["nonblocking", "python"]
        else:
            tiers = ["python", "python", "nonblocking"]
        for i, mode in enumerate(tiers):
            if mode == "python" and i > 0 and work.outcome != "partial" and not work.d_state:
                continue  # retry Python-only only after a transient failure
            share = self.d_share if work.d_state and mode != "nonblocking" else None
            attempt, stack = self.once(target, mode, share=share)
            work.attempts.append(attempt)
            if not self.check(work):
                return
            if stack is not None:
                work.python = stack
                work.outcome = "ok"
                return
            work.outcome = attempt.outcome
            if attempt.outcome in ("no_pyspy", "not_python", "not_found"):
                return
            # EPERM while suspending is also what another tracer (a second py-spy, gdb)
            # causes: --nonblocking needs no suspend, so it is tried before giving up.

    def check(self, work: _Work) -> bool:
        same, resumed = self.after(work.target, work.was_stopped)
        work.resumed = work.resumed or resumed
        if not same:
            work.outcome = "not_found"
        return same

    def native(self, work: _Work) -> None:
        self.take_native(work, *self.once(work.target, "native"))

    def take_native(
        self, work: _Work, attempt: DumpAttempt, stack: StackProcess | None
    ) -> None:
        """A ``--native`` dump's result into ``work`` (its Python frames put back)."""
        work.attempts.append(attempt)
        if not self.check(work):
            return
        if stack is not None:
            work.native = with_python_frames(stack, work.python)
        else:
            work.outcome = "partial"

    def early_native(self, target: DumpTarget) -> tuple[DumpAttempt, StackProcess | None]:
        """The lead's ``--native`` dump, started before any other dump (``start_lead``)."""
        self.launched.set()
        attempt, stack = self.once(target, "native")
        self.after(target, False)  # (a dump that left it stopped: continued)
        return attempt, stack

    def adopt_native(
        self, work: _Work, early: Future[tuple[DumpAttempt, StackProcess | None]]
    ) -> None:
        """The lead's early ``--native`` dump becomes its native dump; one that collided
        with the lead's own Python-only dump (both py-spys suspend it: the second is
        refused) is taken again, now that the Python-only dump is in."""
        got = early.result()
        if got[0].outcome == "permission_denied":
            work.attempts.append(got[0])
            self.native(work)
            return
        self.take_native(work, *got)

    def sample(
        self,
        work: _Work,
        not_before: float = 0.0,
        after: Future[None] | None = None,
        beside: Future[None] | None = None,
    ) -> None:
        """One more look. ``after``: a dump of the same target to wait for (never two
        pausing py-spys at once); ``beside``: one that may still be running when this look
        is due (the lead's --native dump, which holds the target for most of a second): a
        look taken while it runs is ``--nonblocking``, which needs no suspend and reads the
        target as that dump holds it."""
        if after is not None:
            after.result()
        wait = not_before - time.monotonic()
        if wait > 0:
            if time.monotonic() + wait >= self.deadline:
                return
            time.sleep(wait)
        running = beside is not None and not beside.done()
        mode = "nonblocking" if work.was_stopped or work.d_state or running else "python"
        attempt, stack = self.once(work.target, mode)
        if stack is not None:
            work.extra.append(stack)
        else:
            work.attempts.append(attempt)
        self.check(work)


def with_python_frames(native: StackProcess, python: StackProcess | None) -> StackProcess:
    """The --native dump with the Python frames its unwinder lost put back.

    py-spy's native unwinder can stop short of the interpreter's frames (on a loaded
    host, or a libpython it cannot unwind through): a thread then comes back with its
    C++ frames only (``c10d::Work::wait``), or with the innermost few of its Python frames.
    Where the Python-only dump of the same thread (same thread id) shows those innermost
    frames and more, the rest is appended on the outer end, so the dump still says which
    Python call waits. A thread whose Python frames disagree with the Python-only dump
    (it moved between the two dumps) is left as the native dump gave it.
    """
    if python is None:
        return native
    by_tid = {t.thread_id: t for t in python.threads if t.thread_id is not None}
    threads = []
    changed = False
    for t in native.threads:
        py = by_tid.get(t.thread_id) if t.thread_id is not None else None
        mine = [f for f in t.frames if not f.native]
        theirs = [f for f in py.frames if not f.native] if py is not None else []
        key = [(f.name, f.filename) for f in mine]
        if len(theirs) > len(mine) and key == [(f.name, f.filename) for f in theirs[: len(mine)]]:
            t = replace(t, frames=(*t.frames, *theirs[len(mine) :]))
            changed = True
        threads.append(t)
    return replace(native, threads=tuple(threads)) if changed else native


@dataclass
class _Work:
    """One target's dumps while they are being taken."""

    target: DumpTarget
    outcome: str = "timeout"
    python: StackProcess | None = None
    native: StackProcess | None = None
    extra: list[StackProcess] = field(default_factory=list)
    attempts: list[DumpAttempt] = field(default_factory=list)
    was_stopped: bool = False
    resumed: bool = False
    native_peer: int | None = None
    d_state: bool = False
    first_done: float = 0.0  # time.monotonic() when the first (Python-only) dump was in

    def result(self, elapsed_s: float) -> DumpResult:
        first = self.native or self.python
        moving: bool | None = None
        later = [*([self.native] if self.native is not None else []), *self.extra]
        if self.python is not None and later:
            sigs = {python_signature(s) for s in (self.python, *later)}
            moving = len(sigs) > 1
        if first is not None:
            errs = [a.error for a in self.attempts if a.error]
            first = replace(
                first,
                outcome=self.outcome,
                samples=(1 if self.python is not None and self.python is not self.native else 0)
                + (1 if self.native is not None else 0)
                + len(self.extra),
                moving=moving,
                error=errs[0] if errs and self.outcome != "ok" else None,
            )
        return DumpResult(
            pid=self.target.pid,
            outcome=self.outcome,
            stack=first,
            attempts=tuple(self.attempts),
            samples=tuple(self.extra),
            was_stopped=self.was_stopped,
            resumed=self.resumed,
            moving=moving,
            elapsed_s=round(elapsed_s, 3),
            native_peer=self.native_peer,
            python_stack=self.python,
        )


def _can_native(w: _Work) -> bool:
    return (
        w.target.native
        and w.python is not None
        and not w.was_stopped
        and not w.d_state  # (a native dump pauses it: it would wait out the deadline)
        and w.outcome == "ok"
    )


def _sampled(w: _Work) -> bool:
    return w.python is not None and w.outcome != "not_found"


@dataclass(frozen=True, slots=True)
class EarlyNative:
    """The lead's ``--native`` dump, started before any other dump (:func:`start_lead`)."""

    target: DumpTarget
    state: str  # the lead's state, read before its native dump started
    future: Future[tuple[DumpAttempt, StackProcess | None]]


def start_lead(
    target: DumpTarget,
    *,
    runner: Runner,
    pyspy: str,
    proc_root: Path = Path("/proc"),
    timeout_s: float = 10.0,
    launched: threading.Event | None = None,
) -> EarlyNative | None:
    """Start the lead's ``--native`` dump now, in a thread of its own (the critical path:
    py-spy reads the binaries for 0.1-0.3 s before it suspends the target, while the
    caller reads /proc and starts the other dumps). Its state is read first, so a
    tracer's stop never reads as "stopped before diag came"; None (nothing started):
    stopped, traced, in D or gone, a target no pausing dump may touch first."""
    alive, state = _alive_same(target.pid, target.starttime_ticks, proc_root)
    if not alive or state not in ("S", "R"):
        return None
    dumper = _Dumper(runner, pyspy, proc_root, time.monotonic() + timeout_s, launched)
    future: Future[tuple[DumpAttempt, StackProcess | None]] = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(dumper.early_native(target))
        except BaseException as exc:  # (handed to whoever waits on it)
            future.set_exception(exc)

    threading.Thread(target=run, name="pyspy-lead", daemon=True).start()
    assert state is not None
    return EarlyNative(target, state, future)


def no_pyspy(targets: Sequence[DumpTarget]) -> dict[int, DumpResult]:
    """Every target's outcome when py-spy is not installed."""
    miss = DumpAttempt("-", "no_pyspy", 0.0, "py-spy is not installed")
    return {t.pid: DumpResult(t.pid, "no_pyspy", None, (miss,)) for t in targets}


def dump_all(
    targets: Sequence[DumpTarget],
    *,
    runner: Runner,
    proc_root: Path = Path("/proc"),
    timeout_s: float = 10.0,
    samples: int = 2,
    interval_s: float = 1.0,
    min_gap_s: float = 0.25,
    pyspy: str | None = None,
    native_all: bool = False,
    lead: int | None = None,
    launched: threading.Event | None = None,
    early: EarlyNative | None = None,
) -> dict[int, DumpResult]:
    """Dump every target concurrently; all attempts share one deadline of ``timeout_s``.

    1. every target, Python-only (``--nonblocking`` for a stopped one), in parallel;
    2. ``--native`` for one rank per group of identical Python stacks (every rank with
       ``native_all``), in parallel;
    3. with ``samples`` > 1, a second look at every target while the native dumps run
       (a native dump is its rank's second look; the others get a Python-only dump at
       least ``min_gap_s`` after their first); samples 3, 4, ... ``interval_s`` apart.

    ``lead`` (a pid the caller expects to stand for the largest group) gets its
    ``--native`` dump at once, beside its Python-only dump instead of after it: the
    native dump is the critical path, and py-spy reads the binaries for ~0.1 s before it
    suspends the target, by when the Python-only dump is long in. The lead stands for its
    group of identical Python stacks whichever that turns out to be (the other results
    wait for its Python-only dump, a few ms), so no rank is dumped natively that would
    not be otherwise. Since its native dump may read it only ~0.1 s after its first
    look, the lead gets one more Python-only look after it (``samples`` > 1).

    ``early``: the lead's native dump, already started by :func:`start_lead` (the
    caller starts it before its own /proc reads); else it is started here, before any
    other dump. While it runs (most of a second), the lead's one more look is taken
    ``--nonblocking`` beside it, ``min_gap_s`` after its first, not after it.

    ``launched`` is set once the lead's native dump is being started (without a lead:
    once every first dump is handed out; in any case before this returns): the caller
    holds back work that would compete for the interpreter until then.
    """
    launched = launched or threading.Event()
    try:
        return _dump_all(
            targets, runner=runner, proc_root=proc_root, timeout_s=timeout_s,
            samples=samples, interval_s=interval_s, min_gap_s=min_gap_s, pyspy=pyspy,
            native_all=native_all, lead=lead, launched=launched, early=early,
        )  # fmt: skip
    finally:
        launched.set()


def _dump_all(
    targets: Sequence[DumpTarget],
    *,
    runner: Runner,
    proc_root: Path,
    timeout_s: float,
    samples: int,
    interval_s: float,
    min_gap_s: float,
    pyspy: str | None,
    native_all: bool,
    lead: int | None,
    launched: threading.Event,
    early: EarlyNative | None,
) -> dict[int, DumpResult]:
    if not targets:
        return {}
    exe = pyspy or find_pyspy(runner)
    if exe is None:
        return no_pyspy(targets)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    dumper = _Dumper(runner, exe, proc_root, deadline, launched)
    workers = min(64, 2 * len(targets) + 2)
    lead_target = next((t for t in targets if t.pid == lead and t.native), None)
    if early is not None and early.target != lead_target:
        early = None  # (not one of this call's targets: its dump is not used)
    if early is None and lead_target is not None:  # the lead's --native dump first of all
        early = start_lead(
            lead_target, runner=runner, pyspy=exe, proc_root=proc_root,
            timeout_s=timeout_s, launched=launched,
        )  # fmt: skip
    if early is None:
        lead_target = None  # (stopped, traced, in D or gone: dumped as any other)
    order = sorted(targets, key=lambda t: t is not lead_target)  # the lead's dump first
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pyspy") as pool:
        # Every target gets its Python-only dump first (fast, all in parallel); the lead's
        # --native dump is already under way. The first of each group of identical Python
        # stacks to come in stands for its group (with native_all every rank stands for
        # itself; the lead always for its own): its --native dump starts at once. Every
        # other target's second look (a Python-only dump, at least min_gap_s after its
        # first) is queued as soon as its first dump is in, so it runs beside the natives.
        by_pid: dict[int, _Work] = {}
        reps: dict[tuple[tuple[str, str, int | None], ...], int] = {}
        plan: dict[int, int] = {}
        natives: list[Future[None]] = []
        looks: list[Future[None]] = []
        firsts = [
            pool.submit(dumper.first, t, early.state if early and t is lead_target else None)
            for t in order
        ]
        if early is None:
            launched.set()
        waiting: list[_Work] = []  # results in before the lead's: placed after it

        def place(w: _Work) -> None:
            pid = w.target.pid
            if _can_native(w) and w.python is not None:
                rep = pid if native_all else reps.setdefault(python_signature(w.python), pid)
                plan[pid] = rep
                if rep == pid:
                    if early is not None and pid == lead:
                        natives.append(pool.submit(dumper.adopt_native, w, early.future))
                        if samples > 1:  # one more look, beside the native dump if it runs
                            looks.append(
                                pool.submit(
                                    dumper.sample, w, w.first_done + min_gap_s, None, natives[-1]
                                )
                            )
                    else:
                        natives.append(pool.submit(dumper.native, w))
                    return  # (its native dump is its second look)
            if samples > 1 and _sampled(w):
                looks.append(pool.submit(dumper.sample, w, w.first_done + min_gap_s))

        lead_in = lead_target is None
        for fut in as_completed(firsts):
            w = fut.result()
            by_pid[w.target.pid] = w
            if not lead_in and w.target is not lead_target:
                waiting.append(w)
                continue
            lead_in = True
            for x in (w, *waiting):
                place(x)
            waiting.clear()
        got = early.future.result() if early is not None and lead not in plan else None
        if got is not None and lead is not None:  # (its Python-only dump failed: not used)
            by_pid[lead].attempts.append(got[0])
        works = [by_pid[t.pid] for t in targets]
        for f in natives:
            f.result()
        for pid, rep in plan.items():
            if rep != pid and by_pid[rep].native is not None:
                by_pid[pid].native_peer = rep
        if samples > 1:  # a native dump that failed is no second look: a Python-only one is
            looks += [
                pool.submit(dumper.sample, by_pid[pid], by_pid[pid].first_done + min_gap_s)
                for pid, rep in sorted(plan.items())
                if rep == pid
                and by_pid[pid].native is None
                and _sampled(by_pid[pid])
                and not (early is not None and pid == lead)  # (its look is queued)
            ]
        for f in looks:
            f.result()
        for k in range(2, samples):
            wait = t0 + (k - 1) * interval_s - time.monotonic()
            if time.monotonic() + max(wait, 0) >= deadline:
                break
            if wait > 0:
                time.sleep(wait)
            list(pool.map(dumper.sample, [w for w in works if _sampled(w)]))
    elapsed = time.monotonic() - t0
    return {w.target.pid: w.result(elapsed) for w in works}
