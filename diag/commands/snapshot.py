"""`diag snapshot`: where is every worker of a live server stuck, right now.

Exit codes: 0 collected, 2 usage error, 3 partial collection (py-spy missing, ptrace
refused, a dump timed out) — the rest of the snapshot is still printed.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from diag.errors import EXIT_PARTIAL, DiagError, InputError

__all__ = ["register", "write_snapshot_bundle"]


def write_snapshot_bundle(path: Path, snap: Any) -> Path:
    """Keep the evidence through the bundle writer (``diag.bundle.write.write_bundle``)."""
    try:
        from diag.bundle import write as bundle_write
    except ImportError as exc:
        raise DiagError(
            f"cannot write {path}: the bundle writer is not available ({exc})",
            help_text="Use `diag snapshot --json > snap.json` to keep the snapshot.",
        ) from exc
    fn = getattr(bundle_write, "write_bundle", None)
    if fn is None:
        raise DiagError(f"cannot write {path}: diag.bundle.write has no write_bundle")
    params = inspect.signature(fn).parameters
    kwargs: dict[str, Any] = {}
    if "snapshot" in params:
        kwargs["snapshot"] = snap
    result = fn(path, **kwargs)
    return Path(result) if isinstance(result, (str, Path)) else path


def register(app: typer.Typer) -> None:
    @app.command("snapshot")
    def snapshot(
        pid: Annotated[
            int | None,
            typer.Option("--pid", help="A process of the server (launcher or any rank)."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Also write a bundle (.tar.gz) of the evidence."),
        ] = None,
        samples: Annotated[
            int, typer.Option("--samples", min=1, max=10, help="Stack samples ~1 s apart.")
        ] = 2,
        timeout: Annotated[
            float, typer.Option("--timeout", min=0.5, max=600, help="Deadline for all dumps (s).")
        ] = 10.0,
        no_native: Annotated[
            bool, typer.Option("--no-native", help="Python frames only (faster, no C++ wait site).")
        ] = False,
        native_all: Annotated[
            bool,
            typer.Option(
                "--native-all",
                help="--native for every rank (default: one rank per group of identical "
                "Python stacks stands for the others).",
            ),
        ] = False,
    ) -> None:
        """Find SGLang / vLLM servers on this host and say where every rank is stuck."""
        from diag.collect.snapshot import SnapshotOptions, take_snapshot
        from diag.report.snapshot_json import snapshot_to_dict
        from diag.report.snapshot_view import render_snapshot

        if pid is not None and pid <= 0:
            raise InputError(f"--pid {pid}: not a process id", help_text="Pass a positive pid.")
        snap = take_snapshot(
            SnapshotOptions(
                pid=pid,
                samples=samples,
                timeout_s=timeout,
                native=not no_native,
                native_all=native_all,
            )
        )
        console = Console(highlight=False)
        if not console.is_terminal:
            console = Console(highlight=False, width=160)
        if as_json:
            typer.echo(json.dumps(snapshot_to_dict(snap), indent=2))
        else:
            for part in render_snapshot(snap):
                console.print(part)
        if out is not None:
            written = write_snapshot_bundle(out, snap)
            Console(stderr=True, highlight=False).print(f"bundle written: {written}")
        if snap.partial:
            err = Console(stderr=True, highlight=False)
            for reason in snap.partial:
                err.print(f"[yellow]diag: partial collection:[/] {reason}", soft_wrap=True)
            raise typer.Exit(EXIT_PARTIAL)
