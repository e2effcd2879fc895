"""`diag diff A B`: compare two runs (logs or bundles).

Config differences, phase durations side by side with the ratio, findings only in one
run, ranks that behave differently. ``--json`` / ``--format json|markdown|terminal``.

Exit codes: 0 compared, 2 usage or input error.
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

__all__ = ["DiffFormat", "register"]


class DiffFormat(str, enum.Enum):
    terminal = "terminal"
    json = "json"
    markdown = "markdown"


def diff_command(
    a: Annotated[str, typer.Argument(help="Run A: a log, a folder or a bundle.")],
    b: Annotated[str, typer.Argument(help="Run B: a log, a folder or a bundle.")],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the JSON and nothing else.")
    ] = False,
    fmt: Annotated[
        DiffFormat | None,
        typer.Option(
            "--format", "-f", help="terminal (default), json or markdown.", case_sensitive=False
        ),
    ] = None,
    year: Annotated[
        int | None, typer.Option("--year", help="Year for log time stamps that have none.")
    ] = None,
    width: Annotated[int | None, typer.Option("--width", min=40, help="Terminal width.")] = None,
) -> None:
    """Compare two runs: config, phase durations, findings, ranks that differ."""
    from diag.diff import diff_runs, diff_to_dict, render_diff_markdown, render_diff_terminal
    from diag.report.combined import load_case

    if json_out and fmt not in (None, DiffFormat.json):
        raise typer.BadParameter("--json and --format disagree", param_hint="--json")
    chosen = DiffFormat.json if json_out else (fmt or DiffFormat.terminal)
    run_a = load_case([a], year=year)
    run_b = load_case([b], year=year)
    d = diff_runs(run_a, run_b, a_name=_name(a), b_name=_name(b))
    if chosen is DiffFormat.json:
        typer.echo(json.dumps(diff_to_dict(d), indent=2, ensure_ascii=False))
    elif chosen is DiffFormat.markdown:
        typer.echo(render_diff_markdown(d), nl=False)
    else:
        tty = sys.stdout.isatty()
        Console(
            highlight=False,
            width=width or (None if tty else 120),
            color_system="auto" if tty else None,
        ).print(render_diff_terminal(d))


def _name(path: str) -> str:
    """The run's name: the file, with its folder when the file name says little."""
    p = Path(path)
    if path == "-" or not p.parent.name:
        return path
    return f"{p.parent.name}/{p.name}" if p.stem in ("log", "server", "output", "dump") else p.name


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_command)
