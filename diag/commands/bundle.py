"""`diag bundle`: one redacted .tar.gz with everything a maintainer asks for.

``diag bundle --log LOG... [--no-snapshot] [--full-logs] [--redact-hosts] [--out FILE]``
analyses the logs, takes a live snapshot of the servers on this host (unless
``--no-snapshot``), collects env.json, and writes the bundle atomically.
``diag bundle verify FILE`` checks a bundle's schema, checksums and structure.

Exit codes: 0 written / verified, 2 bad input or a bad bundle (one line saying why),
3 written, but the live snapshot in it is partial (py-spy missing, ptrace refused, ...).
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from diag.bundle.read import is_bundle
from diag.errors import EXIT_PARTIAL, DiagError, InputError
from diag.model import Analysis, Snapshot

__all__ = ["bundle_app", "register"]

bundle_app = typer.Typer(
    name="bundle",
    help="Pack logs, analysis, a live snapshot and the environment into one redacted bundle.",
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # click's plain help: wraps at words (see diag.cli)
    add_completion=False,
)


def _analyse(logs: Sequence[Path]) -> tuple[Analysis | None, str | None]:
    """Run `diag analyze`'s engine on the logs; (None, why) when it cannot: the bundle
    is still worth writing (the logs and the environment are the evidence)."""
    from diag.analyze import analyze

    try:
        result = analyze(list(logs))
    except DiagError as exc:
        return None, f"no analysis: {exc.message}"
    return result, None


def _expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given; a folder stands for the files in it (sorted, hidden ones skipped)."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")
            )
            if not found:
                raise InputError(f"{path}: folder holds no files")
            out += found
        elif path.is_file():
            if is_bundle(path):
                raise InputError(
                    f"{path}: is already a diag bundle",
                    help_text=f"Check it with `diag bundle verify {path}`, "
                    f"or read it with `diag analyze {path}`.",
                )
            out.append(path)
        else:
            what = "not a file" if path.exists() else "no such file"
            raise InputError(f"{path}: {what}")
    return out


def _snapshot(pid: int | None) -> tuple[Snapshot | None, list[str]]:
    """A live snapshot through the collector (None, with a note, when it cannot run)."""
    from diag.collect.snapshot import SnapshotOptions, take_snapshot

    return take_snapshot(SnapshotOptions(pid=pid)), []


def _own_server(analysis: Analysis, snapshot: Snapshot) -> tuple[Snapshot, str]:
    """Only the server the log belongs to goes into the bundle (its processes, command
    lines and environment); the others are named by framework and port, nothing more."""
    from diag.report.combined import log_server, server_part

    index, how = log_server(analysis, snapshot)
    others = [
        f"{s.get('framework')} port {s.get('port')}"
        for i, s in enumerate(snapshot.servers)
        if i != index
    ]
    why = (
        f"{len(others)} other server(s) seen on this host and left out of the bundle "
        f"({', '.join(others)})" + (f"; {how}" if how else "")
    )
    return server_part(snapshot, index), why


def _default_out() -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"diag-bundle-{stamp}.tar.gz")


@bundle_app.callback(invoke_without_command=True)
def create(
    ctx: typer.Context,
    log: Annotated[
        list[Path] | None,
        typer.Option("--log", "-l", help="A server log or folder (repeat for ranks / nodes)."),
    ] = None,
    no_snapshot: Annotated[
        bool, typer.Option("--no-snapshot", help="Offline: analysis and env only.")
    ] = False,
    full_logs: Annotated[
        bool,
        typer.Option("--full-logs", help="Whole logs, not excerpts (still capped; cuts noted)."),
    ] = False,
    redact_hosts: Annotated[
        bool,
        typer.Option("--redact-hosts", help="Also mask host names and IPs (consistently)."),
    ] = False,
    pid: Annotated[
        int | None,
        typer.Option("--pid", help="Snapshot the server this process belongs to."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Bundle file (default diag-bundle-TIME.tar.gz)."),
    ] = None,
) -> None:
    """Write a redacted bundle: logs, analysis, report, live snapshot, environment."""
    if ctx.invoked_subcommand is not None:
        return
    from diag.bundle.write import write_bundle

    logs = list(log or [])
    if not logs and no_snapshot:
        raise InputError(
            "nothing to bundle: give --log LOG, or drop --no-snapshot to snapshot a live server",
            help_text="diag bundle --log server.log",
        )
    logs = _expand(logs)
    if pid is not None and pid <= 0:
        raise InputError(f"--pid {pid}: not a process id", help_text="Pass a positive pid.")
    target = out if out is not None else _default_out()
    if target.is_dir():
        raise InputError(f"--out {target}: is a folder", help_text="Name a file: --out hang.tar.gz")

    notes: list[str] = []
    analysis: Analysis | None = None
    if logs:
        analysis, why = _analyse(logs)
        if why is not None:
            notes.append(why)
    snapshot: Snapshot | None = None
    if not no_snapshot:
        snapshot, snap_notes = _snapshot(pid)
        notes += snap_notes
    if snapshot is not None and analysis is not None and len(snapshot.servers) > 1:
        snapshot, why = _own_server(analysis, snapshot)
        notes.append(why)
    info = write_bundle(
        target,
        logs=logs,
        analysis=analysis,
        snapshot=snapshot,
        full_logs=full_logs,
        redact_hosts=redact_hosts,
        command_line=["diag", *sys.argv[1:]],
        env_pids=[pid] if pid is not None else [],
        notes=notes,
    )
    masked = ", ".join(f"{k} {v}" for k, v in info.redactions.items()) or "nothing"
    typer.echo(f"wrote {info.path} ({info.size} bytes, {len(info.members)} members)")
    typer.echo(f"redacted: {masked}")
    if snapshot is not None:
        typer.echo(f"snapshot: {len(snapshot.processes)} processes")
    for note in info.notes:
        typer.echo(f"note: {note}")
    partial = getattr(snapshot, "partial", ()) if snapshot is not None else ()
    if partial:  # the bundle is written; say what the snapshot could not collect
        for reason in partial:
            typer.echo(f"diag: partial collection: {reason}", err=True)
        raise typer.Exit(EXIT_PARTIAL)


@bundle_app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="The bundle (.tar.gz) to check.")],
) -> None:
    """Check a bundle: safe members, schema version, sizes and checksums, log indexes."""
    from diag.bundle.verify import verify_bundle

    if not file.exists():
        raise InputError(f"{file}: no such file")
    report = verify_bundle(file)
    typer.echo(
        f"ok: {report.path} schema {report.schema}, diag {report.diag_version}, "
        f"created {report.created}, {report.members} members, {report.bytes} bytes"
    )
    parts = ["analysis" if report.analysis else "", "snapshot" if report.snapshot else ""]
    held = ", ".join(p for p in parts if p) or "no analysis, no snapshot"
    typer.echo(f"holds: {held}; logs: {', '.join(report.logs) or 'none'}")
    summary = report.summary
    if summary:
        findings = summary.get("findings")
        ids = ", ".join(str(f) for f in findings) if isinstance(findings, list) else ""
        typer.echo(
            f"analysis: {summary.get('framework')}, last phase {summary.get('last_phase')}, "
            f"findings: {ids or 'none'}"
        )
    if report.cut_logs:
        typer.echo(f"cut (excerpts): {', '.join(report.cut_logs)}")
    masked = ", ".join(f"{k} {v}" for k, v in report.redactions.items()) or "nothing"
    typer.echo(f"redacted: {masked}")


def register(app: typer.Typer) -> None:
    app.add_typer(bundle_app, name="bundle")
