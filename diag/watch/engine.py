"""The watcher: follow a start-up, tell per rank whether it still progresses, and when
it stops, take the snapshot and the bundle before anyone kills the evidence.

One loop, polled every ``tick_s``: new lines go into a :class:`SourceParser` (never read
twice) and the progress tracker; the analysis of the records so far is refreshed when new
lines arrived (at most once a second, and less often when it is costly); phase changes,
new findings, stalls and their end, readiness and the launched server's exit become
:class:`WatchEvent` values handed to ``emit``. The engine never prints: the command
renders the events (live table, plain lines or JSON lines).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diag.collect.facts import port_open
from diag.errors import EXIT_STALLED
from diag.limits import ascii_int
from diag.model import Analysis, Finding, Snapshot, phase_index
from diag.parse.records import SourceParser
from diag.watch.follow import FileFollower, Launched, LineSource
from diag.watch.progress import SERVER, Stall, Tracker, format_duration

__all__ = [
    "LAST_GASP_FINDINGS",
    "RankRow",
    "WatchEvent",
    "WatchOptions",
    "WatchView",
    "Watcher",
]

# The server's own watchdog is about to kill it: write the bundle first.
LAST_GASP_FINDINGS = frozenset({"watchdog.timeout", "watchdog.engine_iteration", "nccl.timeout"})
# Read from where the log ends: while the log is live its end is only "now".
LOG_END_FINDINGS = frozenset({"startup.stalled", "startup.no_listen_port", "startup.cut_excerpt"})
TERMINATION_LOG_MAX = 4096
# Serving lines (SGLang's batch lines, vLLM's throughput and spec-decode metrics, HTTP
# access lines): once the server listens, one in BULK_SAMPLE is parsed.
_BULK = re.compile(
    r'Decode batch|Prefill batch|Avg prompt throughput|SpecDecoding metrics|HTTP/1\.[01]" 200'
)
BULK_SAMPLE = 64  # Kubernetes reads at most 4 KiB of /dev/termination-log

_PORT_IN_URL = re.compile(r"https?://[^\s/:]+:(\d{2,5})\b")


@dataclass(frozen=True, slots=True)
class WatchOptions:
    budgets: Mapping[str, float]
    out_dir: Path
    exit_on_stall: bool = False
    keep_running: bool = False
    follow: bool = False  # keep following once the server listens
    on_stall: str | None = None  # a shell command run with the bundle path
    pid: int | None = None  # the server to snapshot (launch mode: the launched one)
    port: int | None = None
    snapshot: bool = True
    tick_s: float = 0.25
    host_every_s: float = 2.0
    termination_log: Path = Path("/dev/termination-log")
    rules_dirs: tuple[Path, ...] = ()
    grace_s: float = 10.0
    jit_dirs: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: str  # start | phase | finding | stall | stall_end | bundle | ready | exit | note
    at: dt.datetime
    text: str
    data: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RankRow:
    key: str
    phase: str | None
    shards: tuple[int, int] | None
    rate: float | None  # shards per second
    eta_s: float | None
    in_phase_s: float
    last_line_s: float | None
    quiet_s: float  # since the last progress
    budget_s: float | None
    why: str
    stalled: bool


@dataclass(frozen=True, slots=True)
class WatchView:
    """What the live table shows, at one moment."""

    source: str
    framework: str
    config: str
    elapsed_s: float
    lines: int
    rows: tuple[RankRow, ...]
    findings: tuple[Finding, ...]
    state: str  # starting | stalled | ready | exited


def _default_jit_dirs() -> tuple[Path, ...]:
    home = Path.home()
    user = os.environ.get("USER", "root")
    return (
        home / ".cache" / "flashinfer",
        home / ".triton" / "cache",
        home / ".cache" / "deep_gemm",
        home / ".cache" / "vllm" / "torch_compile_cache",
        Path("/tmp") / f"torchinductor_{user}",
    )


def _config_line(a: Analysis | None) -> str:
    if a is None:
        return ""
    c = a.config
    parts = [f"{k}={c[k]}" for k in ("tp", "pp", "dp", "ep", "nnodes") if k in c]
    model = c.get("model")
    if model:
        parts.insert(0, str(model).rsplit("/", 1)[-1])
    return " ".join(parts)


_port_open = port_open  # the one connect probe (diag.collect.facts)


def _read_bytes(pid: int, proc_root: Path = Path("/proc")) -> int | None:
    """``read_bytes`` of /proc/PID/io (bytes the process made the storage layer fetch)."""
    try:
        text = (proc_root / str(pid) / "io").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("read_bytes:"):
            value = ascii_int(line.split(":", 1)[1].strip())
            return value if value is not None and value >= 0 else None
    return None


class Watcher:
    def __init__(
        self,
        source: LineSource,
        options: WatchOptions,
        emit: Callable[[WatchEvent], None],
        *,
        launched: Launched | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.options = options
        self.emit_fn = emit
        self.clock = clock
        self.start = clock()
        self.parser = SourceParser(source.name)
        self.tracker = Tracker(options.budgets, self.start)
        self.lines = 0
        self.analysis: Analysis | None = None
        self.state = "starting"
        self.exit_code: int | None = None
        self.bundles: list[Path] = []
        self._phases: dict[str, str | None] = {}
        self._findings: set[tuple[str, tuple[str, ...]]] = set()
        self._stalled: dict[str, Stall] = {}
        self._dirty = False
        self._bulk = 0
        self._last_analysis = -1e9
        self._analysis_cost = 0.0
        self._last_host = -1e9
        self._io: dict[int, int] = {}
        self._jit_mtime: dict[Path, float] = {}
        self._gasp_done = False
        self._notify_missing = False
        self._last_notify = -1e9
        self._last_verdict = ""
        self._terminate: int | None = None  # a signal the watcher received
        self._ready_noted = False
        self._jit_dirs = options.jit_dirs or _default_jit_dirs()
        self.launched = launched
        self._root_pid = self.launched.pid if self.launched is not None else options.pid
        if isinstance(source, FileFollower) and launched is None:
            # a log that was already quiet before the watcher came: its age counts
            mtime = source.mtime()
            if mtime is not None:
                age = max(0.0, time.time() - mtime)
                self._initial_age = age
            else:
                self._initial_age = 0.0
        else:
            self._initial_age = 0.0

    # ------------------------------------------------------------------ events

    def emit(self, kind: str, text: str, **data: object) -> None:
        self.emit_fn(WatchEvent(kind, dt.datetime.now(dt.timezone.utc), text, data))

    def request_stop(self, sig: int) -> None:
        """Called from a signal handler: SIGTERM (a supervisor) or SIGINT (Ctrl-C)."""
        self._terminate = sig

    # ------------------------------------------------------------------ loop

    def run(self, on_tick: Callable[[WatchView], None] | None = None) -> int:
        self.emit("start", f"watching {self.source.name}", source=self.source.name,
                  pid=self._root_pid)
        if isinstance(self.source, FileFollower) and not self.source.path.exists():
            self.emit("note", f"{self.source.path} does not exist yet: waiting for it")
        first = True
        while True:
            now = self.clock()
            self._feed(self.source.poll(), now)
            if first and self._initial_age and self.lines:
                self._backdate(self._initial_age)
            first = False
            # cheap while it is costly; a serving server's findings change slowly
            every = (max(30.0, 20 * self._analysis_cost) if self.state == "ready"
                     else min(10.0, max(1.0, 20 * self._analysis_cost)))
            if self._dirty and now - self._last_analysis >= every:
                self._refresh(now)
            if now - self._last_host >= self.options.host_every_s:
                self._host_progress(now)
                self._last_host = now
            code = self._check(now)
            if code is not None:
                self.exit_code = code
                return code
            if on_tick is not None:
                on_tick(self.view(now))
            time.sleep(self.options.tick_s)

    def _backdate(self, age: float) -> None:
        for rp in self.tracker.ranks.values():
            rp.last_progress -= age
            rp.phase_since -= age

    def _feed(self, lines: Sequence[str], now: float) -> None:
        if not lines:
            return
        before = len(self.parser.drafts)
        serving = self.state == "ready"
        fresh = False
        for line in lines:
            self.lines += 1
            if serving and _BULK.search(line):
                # a serving server's bulk: parse a sample (the figures the rules read
                # from them stay current), count the rest
                self._bulk += 1
                if self._bulk % BULK_SAMPLE:
                    continue
            else:
                fresh = True
            self.parser.feed(self.lines, line)
        for d in self.parser.drafts[before:]:
            key = d.rank.label if d.rank is not None else SERVER
            self.tracker.line(key, d.p.message, now)
        if fresh or not serving:
            self._dirty = True

    def _refresh(self, now: float) -> None:
        from diag.analyze import analyze_parsed

        t0 = time.monotonic()
        try:
            a = analyze_parsed(
                [self.source.name], self.parser, lines=self.lines,
                rules_dirs=self.options.rules_dirs,
            )
        except Exception as exc:  # the watcher must outlive any one bad refresh
            self.emit("note", f"analysis failed on the lines so far: {exc}")
            self._dirty = False
            return
        self._analysis_cost = time.monotonic() - t0
        self._last_analysis = now
        self._dirty = False
        self.analysis = a
        for t in a.ranks:
            shards = (t.shards.done, t.shards.total) if t.shards is not None else None
            ended = any(p.ended for p in t.phases if p.phase == t.last_phase)
            self._phase_event(t.rank.label, t.last_phase, shards, now, ended=ended)
        last_global = max(a.global_phases, key=lambda p: phase_index(p.phase), default=None)
        if last_global is not None:
            self._phase_event(SERVER, last_global.phase, None, now)
        for f in a.findings:
            key = (f.id, f.ranks)
            if key in self._findings or f.id in LOG_END_FINDINGS:
                continue  # the watcher's own clock decides stalls, not the log's end
            self._findings.add(key)
            ranks = ", ".join(f.ranks)
            self.emit("finding", f"{f.severity}: {f.id}: {f.message}", id=f.id,
                      severity=f.severity, ranks=list(f.ranks))
            if f.id in LAST_GASP_FINDINGS and not self._gasp_done:
                self._gasp_done = True
                self.emit("note", f"{f.id} ({ranks or 'server'}): the server's watchdog may "
                          "kill it: writing the bundle now")
                self._capture("last-gasp", [])

    def _phase_event(self, key: str, phase: str | None, shards: tuple[int, int] | None,
                     now: float, *, ended: bool = False) -> None:
        self.tracker.phase(key, phase, shards, now, ended=ended)
        if self._phases.get(key, "") != phase:
            self._phases[key] = phase
            self.emit("phase", f"{key}: {phase}", rank=key, phase=phase)

    def _host_progress(self, now: float) -> None:
        """Disk reads of the server's processes and JIT cache growth count as progress."""
        if self._root_pid is not None:
            try:
                import psutil

                root = psutil.Process(self._root_pid)
                procs = [root, *root.children(recursive=True)]
            except Exception:  # gone, or not ours to see
                procs = []
            from diag.collect.discover import rank_from_title

            for p in procs:
                rb = _read_bytes(p.pid)
                if rb is None:
                    continue
                prev = self._io.get(p.pid)
                self._io[p.pid] = rb
                if prev is not None and rb > prev:
                    try:
                        title = " ".join(p.cmdline()[:1]) or p.name()
                    except Exception:
                        title = ""
                    rank = rank_from_title(title)
                    key = rank.label if rank is not None else None
                    if key is not None and key not in self.tracker.ranks:
                        key = None
                    self.tracker.host(key, f"disk reads ({(rb - prev) >> 10} KiB)", now)
        for d in self._jit_dirs:
            try:
                m = d.stat().st_mtime
            except OSError:
                continue
            prev_m = self._jit_mtime.get(d)
            self._jit_mtime[d] = m
            if prev_m is not None and m > prev_m:
                self.tracker.host(None, f"JIT cache {d.name} grew", now)

    # ------------------------------------------------------------------ decisions

    def _listening(self) -> tuple[bool, int | None]:
        a = self.analysis
        if a is None:
            return False, None
        up = any(phase_index(t.last_phase) >= phase_index("listening") for t in a.ranks) or any(
            phase_index(p.phase) >= phase_index("listening") for p in a.global_phases
        )
        port = self.options.port
        cfg_port = a.config.get("port")
        if port is None and isinstance(cfg_port, int):
            port = cfg_port
        if port is None:
            for e in a.events:
                if e.phase == "listening":
                    m = _PORT_IN_URL.search(e.message)
                    if m:
                        port = int(m.group(1))
                        break
        return up, port

    def _notify(self, *assignments: str) -> None:
        """systemd (``Type=notify``): through the ``systemd-notify`` binary, only when
        systemd gave us a ``NOTIFY_SOCKET``."""
        if "NOTIFY_SOCKET" not in os.environ:
            return
        from diag.runner import SubprocessRunner

        runner = SubprocessRunner()
        binary = runner.which("systemd-notify")
        if binary is None:
            if not self._notify_missing:
                self._notify_missing = True
                self.emit("note", "NOTIFY_SOCKET is set but systemd-notify is not on PATH")
            return
        runner.run([binary, f"--pid={os.getpid()}", *assignments], timeout=5)

    def _check(self, now: float) -> int | None:
        launched = self.launched
        if (self.state == "starting" and "NOTIFY_SOCKET" in os.environ
                and now - self._last_notify > 30.0):
            # still progressing: ask for more time than the longest budget left
            self._last_notify = now
            extend = int(max(self.tracker.budgets.values(), default=600.0) * 1e6)
            self._notify(f"EXTEND_TIMEOUT_USEC={extend}")
        if self._terminate is not None:
            return self._on_signal(self._terminate)
        if launched is not None and launched.returncode() is not None:
            self._feed(self.source.poll(), now)
            launched.stop(0)  # reap what is left of its group
            self._feed(self.source.poll(), now)
            self._refresh(now)
            code = launched.exit_status()
            errors = [f for f in (self.analysis.findings if self.analysis else ())
                      if f.severity == "error" and f.id not in LOG_END_FINDINGS]
            self.state = "exited"
            self.emit("exit", f"the server exited with code {code}", code=code,
                      findings=[f.id for f in errors])
            return code
        if self.source.closed and not self._dirty:
            self._refresh(now)
            self.state = "exited" if self.state != "ready" else self.state
            self.emit("exit", f"{self.source.name}: input ended", code=0)
            return 0
        if self.state != "ready":
            up, port = self._listening()
            if up and (port is None or _port_open(port)):
                self.state = "ready"
                took = now - self.start
                where = f"port {port} accepts connections" if port else "no port known"
                self.emit("ready", f"the server is listening ({where}) after "
                          f"{format_duration(took)}", port=port, elapsed_s=round(took, 1))
                self._notify("READY=1", f"STATUS=listening after {format_duration(took)}")
                if not self.options.follow:
                    return 0
            elif up and port is not None and not self._ready_noted:
                self._ready_noted = True
                self.emit("note", f"the log says listening; waiting for port {port} to accept")
        if self.state == "ready":
            return None
        if self._dirty and self.tracker.stalled(now):
            self._refresh(now)  # decide on every line that arrived, not a stale analysis
        stalls = {s.key: s for s in self.tracker.stalled(now)}
        for key in list(self._stalled):
            if key not in stalls:
                rp = self.tracker.ranks[key]
                self.emit("stall_end", f"{key} progresses again ({rp.why})", rank=key)
                del self._stalled[key]
        new = [s for k, s in stalls.items() if k not in self._stalled]
        self._stalled.update(stalls)
        if new:
            self.state = "stalled"
            return self._on_stall(new)
        if not self._stalled and self.state == "stalled":
            self.state = "starting"
        return None

    def _on_stall(self, new: Sequence[Stall]) -> int | None:
        stuck = sorted(self._stalled.values(), key=lambda s: s.key)
        parts = [f"{s.key} {s.where} for {format_duration(s.silent_s)} "
                 f"(budget {format_duration(s.budget_s)}; last progress: {s.why})" for s in stuck]
        self.emit("stall", "no progress: " + "; ".join(parts),
                  ranks=[s.key for s in stuck], phases=[s.phase for s in stuck],
                  silent_s=[round(s.silent_s, 1) for s in stuck])
        self._capture("stall", stuck)
        self._notify(f"STATUS=stalled: {self._last_verdict[:200]}")
        if self.options.exit_on_stall:
            if self.launched is not None and not self.options.keep_running:
                self.emit("note", "stopping the launched server (--exit-on-stall)")
                self.launched.stop(self.options.grace_s)
            return EXIT_STALLED
        return None

    def _on_signal(self, sig: int) -> int:
        name = signal.Signals(sig).name
        launched = self.launched
        if sig == signal.SIGTERM and self.state != "ready" and (self.lines or launched):
            # a supervisor is about to kill us (and the server): evidence first
            self.emit("note", f"{name}: writing the bundle before stopping")
            self._capture("sigterm", sorted(self._stalled.values(), key=lambda s: s.key),
                          quick=True)
        if launched is not None:
            launched.signal(sig)
            deadline = time.monotonic() + self.options.grace_s
            while launched.returncode() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            launched.stop(0)
            code = launched.exit_status()
            self.emit("exit", f"{name}: the server exited with code {code}", code=code)
            return code if code else 128 + sig
        self.emit("exit", f"{name}: stopped watching", code=128 + sig)
        return 128 + sig

    # ------------------------------------------------------------------ evidence

    def _capture(self, why: str, stuck: Sequence[Stall], *, quick: bool = False) -> None:
        """Snapshot + bundle through the existing engine functions; the verdict line."""
        snap: Snapshot | None = None
        notes: list[str] = [f"written by diag watch ({why})"]
        if self.options.snapshot:
            try:
                from diag.collect.snapshot import SnapshotOptions, take_snapshot

                opts = SnapshotOptions(pid=self._root_pid, samples=1 if quick else 2,
                                       timeout_s=3.0 if quick else 10.0)
                snap = take_snapshot(opts)
            except Exception as exc:  # a probe failing must not lose the bundle
                notes.append(f"snapshot failed: {exc}")
        self._dirty = True
        self._refresh(self.clock())
        verdict = self.verdict(stuck, snap)
        self._last_verdict = verdict
        out = self.options.out_dir
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = out / f"diag-{why}-{stamp}.tar.gz"
        logs = self._log_paths()
        try:
            from diag.bundle.write import write_bundle

            out.mkdir(parents=True, exist_ok=True)
            info = write_bundle(
                target, logs=logs, analysis=self.analysis, snapshot=snap,
                command_line=("diag", "watch", why), notes=notes,
                env_pids=[self._root_pid] if self._root_pid else [],
            )
            self.bundles.append(info.path)
            self.emit("bundle", f"bundle written: {info.path}", path=str(info.path),
                      verdict=verdict)
        except Exception as exc:
            self.emit("note", f"could not write the bundle: {exc}")
            info = None
        self._termination_log(verdict)
        if self.options.on_stall and info is not None and why != "sigterm":
            self._hook(str(info.path), verdict)

    def _log_paths(self) -> list[Path]:
        if isinstance(self.source, FileFollower):
            return [self.source.path]
        tee = getattr(self.source, "tee_path", None)
        return [Path(tee)] if tee else []

    def verdict(self, stuck: Sequence[Stall], snap: Snapshot | None) -> str:
        by_where: dict[str, list[Stall]] = {}
        for s in stuck:
            by_where.setdefault(s.where, []).append(s)
        parts = [
            f"{', '.join(x.key for x in group)} stuck {where} for "
            f"{format_duration(max(x.silent_s for x in group))}"
            for where, group in by_where.items()
        ]
        if snap is not None:
            sites: dict[str, list[str]] = {}
            for p in snap.processes:
                if p.rank is not None and p.stack is not None and p.stack.wait_site:
                    sites.setdefault(p.stack.wait_site, []).append(p.rank.label)
            for site, ranks in sorted(sites.items()):
                parts.append(f"{', '.join(ranks)} in {site}")
            if snap.verdict:
                parts.append(snap.verdict.splitlines()[0])
        return "; ".join(parts) or "no progress"

    def _termination_log(self, verdict: str) -> None:
        path = self.options.termination_log
        if not path.exists() or not os.access(path, os.W_OK):
            return
        data = verdict.encode("utf-8", "replace")[:TERMINATION_LOG_MAX]
        with contextlib.suppress(OSError):
            path.write_bytes(data)

    def _hook(self, bundle: str, verdict: str) -> None:
        from diag.runner import SubprocessRunner

        env = dict(os.environ, DIAG_BUNDLE=bundle, DIAG_VERDICT=verdict[:4000])
        res = SubprocessRunner().run(
            ["/bin/sh", "-c", f'{self.options.on_stall} "$DIAG_BUNDLE"'], timeout=30, env=env
        )
        state = "timed out" if res.timed_out else f"exit {res.returncode}"
        self.emit("note", f"--on-stall hook: {state}")

    # ------------------------------------------------------------------ view

    def view(self, now: float | None = None) -> WatchView:
        now = self.clock() if now is None else now
        rows = []
        keys = sorted(self.tracker.ranks, key=lambda k: (k == SERVER, k))
        for key in keys:
            rp = self.tracker.ranks[key]
            rows.append(RankRow(
                key=key, phase=rp.phase, shards=rp.shards, rate=rp.shard_rate,
                eta_s=self.tracker.eta_s(key), in_phase_s=now - rp.phase_since,
                last_line_s=None if rp.last_line is None else now - rp.last_line,
                quiet_s=now - rp.last_progress, budget_s=self.tracker.budget(rp.phase),
                why=rp.why, stalled=key in self._stalled,
            ))
        a = self.analysis
        return WatchView(
            source=self.source.name,
            framework=a.framework if a else "unknown",
            config=_config_line(a),
            elapsed_s=now - self.start,
            lines=self.lines,
            rows=tuple(rows),
            findings=tuple(f for f in (a.findings if a else ()) if f.id not in LOG_END_FINDINGS),
            state=self.state,
        )

    def summary(self) -> list[tuple[str, list[tuple[str, float | None]]]]:
        """Phase durations per rank (for the ready summary)."""
        a = self.analysis
        if a is None:
            return []
        return [
            (t.rank.label, [(p.phase, p.duration_s) for p in t.phases]) for t in a.ranks
        ]
