"""``diag watch`` (follow a start-up, catch the stall itself) and ``diag probe`` (one-shot,
with probe semantics, for a Kubernetes startupProbe ``exec`` or a systemd unit)."""

from __future__ import annotations

import datetime as dt
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from diag.errors import EXIT_STALLED, InputError

if TYPE_CHECKING:
    from diag.watch.engine import WatchEvent

__all__ = ["probe_log", "register"]


def _budgets(budget: list[str] | None, stall_after: str | None) -> dict[str, float]:
    from diag.watch.progress import parse_budgets, parse_duration

    after = parse_duration(stall_after) if stall_after else None
    return parse_budgets(budget or [], after)


def probe_log(
    log: Path, *, port: int | None, budgets: dict[str, float], now: float | None = None
) -> tuple[int, str]:
    """One look at a start-up: (exit code, one line). 0 once the server listens, or while
    every rank progressed within its phase's budget; EXIT_STALLED naming the rank, phase
    and time when one did not. Progress is read from the log itself: a rank's last line of
    a new kind (heartbeats and repeats do not count), at the log's own timestamps, with the
    file's age added for the time since its last line."""
    from diag.analyze import analyze_parsed
    from diag.parse.records import SourceParser, resolve_years
    from diag.watch.engine import _port_open
    from diag.watch.progress import SERVER, Tracker, format_duration

    if port is not None and _port_open(port):
        return 0, f"ready: port {port} accepts connections"
    if not log.is_file():
        raise InputError(f"{log}: no such file", help_text="diag probe --log server.log")
    sp = SourceParser(str(log))
    n = 0
    with log.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            sp.feed(n, raw.decode("utf-8", "replace").rstrip("\r\n"))
    st = log.stat()
    resolve_years(sp.drafts, year=None, ref=dt.datetime.fromtimestamp(st.st_mtime))
    a = analyze_parsed([str(log)], sp, lines=n)
    listening = any(t.last_phase in ("listening", "serving") for t in a.ranks) or any(
        p.phase in ("listening", "serving") for p in a.global_phases
    )
    if listening and port is None:
        return 0, "ready: the log says the server listens"
    wall_now = time.time() if now is None else now
    age = max(0.0, wall_now - st.st_mtime)
    tracker = Tracker(budgets, 0.0)
    end = a.log_end
    if end is None:
        phase = a.last_phase or "launch"
        budget = tracker.budget(phase)
        if budget is not None and age > budget:
            return EXIT_STALLED, (
                f"stalled: the log has no timestamps and is {format_duration(age)} old "
                f"in {phase} (budget {format_duration(budget)})"
            )
        return 0, f"progressing: {phase}, log written {format_duration(age)} ago"
    for d in sp.drafts:
        if d.p.ts is None:
            continue
        t = (d.p.ts - end).total_seconds()
        tracker.line(d.rank.label if d.rank else SERVER, d.p.message, t)
    for tl in a.ranks:
        rp = tracker.ranks.get(tl.rank.label)
        if rp is not None:
            rp.phase = tl.last_phase
    server = tracker.ranks.get(SERVER)
    if server is not None:
        server.phase = a.last_phase
    stalls = tracker.stalled(age)
    if stalls:
        worst = max(stalls, key=lambda s: s.silent_s)
        who = ", ".join(s.key for s in stalls)
        return EXIT_STALLED, (
            f"stalled: {who} no progress in {worst.phase or 'launch'} for "
            f"{format_duration(worst.silent_s)} (budget {format_duration(worst.budget_s)})"
        )
    return 0, f"progressing: {a.last_phase or 'launch'} ({len(tracker.ranks)} ranks within budget)"


def register(app: typer.Typer) -> None:
    @app.command("watch")
    def watch(
        target: Annotated[
            list[str] | None,
            typer.Argument(help="A log to follow, - for stdin, or -- CMD ... to launch."),
        ] = None,
        out: Annotated[
            Path, typer.Option("--out", "-o", help="Folder for the launched log and bundles.")
        ] = Path("diag-watch"),
        stall_after: Annotated[
            str | None,
            typer.Option("--stall-after", help="No progress for this long is a stall "
                         "(every phase; e.g. 300, 5m)."),
        ] = None,
        budget: Annotated[
            list[str] | None,
            typer.Option("--budget", help="PHASE=DURATION[,...]: a phase's own budget."),
        ] = None,
        exit_on_stall: Annotated[
            bool, typer.Option("--exit-on-stall", help="Stop (exit 4) once a stall is bundled.")
        ] = False,
        keep_running: Annotated[
            bool, typer.Option("--keep-running", help="With --exit-on-stall: leave the "
                               "launched server running.")
        ] = False,
        follow: Annotated[
            bool, typer.Option("--follow", help="Keep watching once the server listens.")
        ] = False,
        on_stall: Annotated[
            str | None, typer.Option("--on-stall", help="Shell command run with the bundle "
                                     "path ($DIAG_BUNDLE) on a stall.")
        ] = None,
        pid: Annotated[
            int | None, typer.Option("--pid", help="The server to snapshot (follow mode).")
        ] = None,
        port: Annotated[
            int | None, typer.Option("--port", help="The HTTP port that proves readiness.")
        ] = None,
        no_snapshot: Annotated[
            bool, typer.Option("--no-snapshot", help="Bundle the log only, no live snapshot.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event.")] = (
            False
        ),
        termination_log: Annotated[
            Path, typer.Option("--termination-log", hidden=True,
                               help="Where the verdict goes (Kubernetes reads this path).")
        ] = Path("/dev/termination-log"),
    ) -> None:
        """Follow a start-up (launch it, a log file, or stdin) and catch the stall itself:
        per-rank progress, snapshot + bundle when a rank stops."""
        from diag.watch.engine import Watcher, WatchOptions
        from diag.watch.follow import FileFollower, Launched, LineSource, StreamFollower

        args = list(target or [])
        launch = "--" in sys.argv[1:]
        if not args:
            raise InputError(
                "nothing to watch",
                help_text="diag watch server.log | diag watch - | diag watch -- CMD ...",
            )
        if pid is not None and pid <= 0:
            raise InputError(f"--pid {pid}: not a process id")
        budgets = _budgets(budget, stall_after)
        out.mkdir(parents=True, exist_ok=True)
        source: LineSource
        launched: Launched | None = None
        if launch:
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            launched = Launched(args, out / f"server-{stamp}.log")
            source = FileFollower(launched.log)
        elif args == ["-"]:
            source = StreamFollower(sys.stdin.buffer)
        else:
            if len(args) != 1:
                raise InputError(
                    f"{' '.join(args)}: one log at a time",
                    help_text="To launch a command, put it after --: diag watch -- CMD ...",
                )
            path = Path(args[0])
            if path.is_dir():
                raise InputError(f"{path}: is a folder", help_text="Name the log file.")
            source = FileFollower(path)
        options = WatchOptions(
            budgets=budgets, out_dir=out, exit_on_stall=exit_on_stall,
            keep_running=keep_running, follow=follow, on_stall=on_stall, pid=pid, port=port,
            snapshot=not no_snapshot, termination_log=termination_log,
        )
        tty = sys.stdout.isatty() and not as_json
        from diag.report.watch_view import event_json, event_line, live_renderable, summary_lines

        live = None
        console = None
        if tty:
            from rich.console import Console
            from rich.live import Live

            console = Console()
            live = Live(console=console, refresh_per_second=4, transient=False)

        def emit(e: WatchEvent) -> None:
            if as_json:
                typer.echo(event_json(e))
            elif live is not None and console is not None:
                if e.kind not in ("phase",):
                    live.console.print(event_line(e), highlight=False, markup=False)
            else:
                typer.echo(event_line(e))

        watcher = Watcher(source, options, emit, launched=launched)

        def _handler(signum: int, _frame: object) -> None:
            watcher.request_stop(signum)

        old = {s: signal.signal(s, _handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            if live is not None:
                with live:
                    code = watcher.run(on_tick=lambda v: live.update(live_renderable(v)))
            else:
                code = watcher.run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if watcher.state == "ready" or code == 0:
            rows = summary_lines(watcher.summary())
            if as_json:
                typer.echo(event_json(_summary_event(watcher.summary())))
            elif rows:
                typer.echo("phase durations per rank:")
                for line in rows:
                    typer.echo("  " + line)
        if launched is not None and launched.returncode() is None:
            typer.echo(f"the server keeps running: pid {launched.pid}, log {launched.log}")
        raise typer.Exit(code)

    @app.command("probe")
    def probe(
        log: Annotated[Path, typer.Option("--log", "-l", help="The server's log.")],
        port: Annotated[
            int | None, typer.Option("--port", help="Ready once this port accepts.")
        ] = None,
        stall_after: Annotated[
            str | None, typer.Option("--stall-after", help="Budget for every phase.")
        ] = None,
        budget: Annotated[
            list[str] | None,
            typer.Option("--budget", help="PHASE=DURATION[,...], e.g. weights_load=40m."),
        ] = None,
    ) -> None:
        """One-shot startup check: exit 0 once listening or while every rank progresses
        within its phase budget, 4 when a rank made no progress for longer (for a
        Kubernetes startupProbe exec)."""
        code, line = probe_log(log, port=port, budgets=_budgets(budget, stall_after))
        typer.echo(line)
        raise typer.Exit(code)


def _summary_event(rows: list[tuple[str, list[tuple[str, float | None]]]]) -> WatchEvent:

    from diag.watch.engine import WatchEvent

    return WatchEvent(
        "summary", dt.datetime.now(dt.timezone.utc), "phase durations per rank",
        {"ranks": {k: dict(v) for k, v in rows}},
    )

