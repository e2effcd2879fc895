"""`diag analyze`: read logs, print where each rank stopped and why.

``diag analyze [PATHS...]`` takes files, folders, globs and ``-`` (stdin);
``--example`` analyses the built-in example log (the story of DESIGN.md). The result is
rendered as the terminal view (default), ``--json`` / ``--format json`` (exactly the JSON,
nothing else), ``--format markdown`` (for a GitHub issue) or ``--format perfetto`` (a
trace for ui.perfetto.dev); ``--out FILE`` writes it to a file instead of stdout.

Exit codes: 0 clean (no finding at or above ``--fail-on``), 1 findings at or above
``--fail-on``, 2 usage or input error (raised as :class:`DiagError`, printed by cli.main).
"""

from __future__ import annotations

import contextlib
import enum
import glob
import importlib.resources
import io
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from diag.errors import EXIT_CLEAN, EXIT_FINDINGS, InputError
from diag.model import SEVERITIES, Analysis, Combined, Finding

__all__ = [
    "EXAMPLE_RESOURCE",
    "ColorMode",
    "FailOn",
    "Format",
    "exit_code_for",
    "expand_globs",
    "register",
    "render",
    "use_color",
]

EXAMPLE_RESOURCE = "example.log"
PIPE_WIDTH = 120  # the terminal view's width when stdout is a pipe or a file


class Format(str, enum.Enum):
    terminal = "terminal"
    json = "json"
    markdown = "markdown"
    perfetto = "perfetto"


class FailOn(str, enum.Enum):
    error = "error"
    warning = "warning"
    info = "info"
    none = "none"


def exit_code_for(findings: Sequence[Finding], fail_on: str) -> int:
    """1 when a finding is at or above ``fail_on`` (error > warning > info), else 0."""
    if fail_on == "none":
        return EXIT_CLEAN
    threshold = [str(s) for s in SEVERITIES].index(fail_on)
    hit = any(
        f.severity in SEVERITIES and SEVERITIES.index(f.severity) <= threshold for f in findings
    )
    return EXIT_FINDINGS if hit else EXIT_CLEAN


class ColorMode(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


def use_color(mode: ColorMode, *, isatty: bool, env: Mapping[str, str] | None = None) -> bool:
    """Colour or not: --color always/never decide; auto honours NO_COLOR (any value:
    off) and FORCE_COLOR (a value other than 0/false: on), else colour on a terminal."""
    if mode is ColorMode.always:
        return True
    if mode is ColorMode.never:
        return False
    env = os.environ if env is None else env
    if env.get("NO_COLOR"):
        return False
    force = env.get("FORCE_COLOR")
    if force is not None and force.strip().lower() not in ("0", "false", "no", ""):
        return True
    return isatty


def render(
    analysis: Analysis | Combined,
    fmt: Format,
    *,
    width: int | None = None,
    verbose: bool = True,
    color: bool = False,
    context: dict[tuple[str, int], list[tuple[int, str]]] | None = None,
) -> str:
    """The analysis (or a log and its snapshot) rendered as text in the chosen format,
    secrets redacted in every format (``--json`` redacts its own strings)."""
    if fmt is Format.json:
        from diag.report.combined_json import render_combined_json

        return render_combined_json(analysis) + "\n"
    from diag.redact import Redactor, redact_tree

    redactor = Redactor()
    analysis = redact_tree(analysis, redactor)  # type: ignore[assignment]
    if context is not None:
        context = {
            at: [(n, redactor.text(line, learn=False)) for n, line in lines]
            for at, lines in context.items()
        }
    if fmt is Format.markdown:
        from diag.report.markdown import render_markdown

        return render_markdown(analysis)
    if fmt is Format.perfetto:
        from diag.report.perfetto import render_perfetto

        return render_perfetto(analysis) + "\n"
    from diag.report.terminal import render_terminal

    buf = io.StringIO()
    Console(
        file=buf,
        width=width or PIPE_WIDTH,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
    ).print(render_terminal(analysis, verbose=verbose, context=context), crop=False)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A transient rich progress bar on stderr, or None when it would be noise."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(
        TextColumn("reading logs"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("read", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


def _run_analysis(
    paths: Sequence[str],
    *,
    example: bool,
    year: int | None,
    rules_dirs: Sequence[Path],
    progress: Callable[[int, int], None] | None,
) -> Combined:
    """Logs and bundles analysed; a bundle's snapshot joins the analysis."""
    from diag.report.combined import load_case

    if example:
        resource = importlib.resources.files("diag.data").joinpath(EXAMPLE_RESOURCE)
        with importlib.resources.as_file(resource) as path:
            return load_case([path], year=year, rules_dirs=rules_dirs, progress=progress)
    return load_case(expand_globs(paths), year=year, rules_dirs=rules_dirs, progress=progress)


def expand_globs(paths: Sequence[str]) -> list[str]:
    """Expand quoted globs (`'logs/rank*.log'`) the shell left alone; keep the rest as is."""
    out: list[str] = []
    for p in paths:
        if p != "-" and any(c in p for c in "*?[") and not Path(p).exists():
            matches = sorted(glob.glob(p, recursive=True))
            out.extend(matches or [p])  # no match: the engine says "no such file"
        else:
            out.append(p)
    return out


def _write_out(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"cannot write {path}: {exc.strerror or exc}",
            help_text="Pass --out a path in a folder you can write to.",
        ) from exc


def _emit(text: str) -> None:
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:  # a non-UTF-8 stdout (PYTHONIOENCODING=ascii ...)
            encoding = sys.stdout.encoding or "ascii"
            sys.stdout.flush()
            sys.stdout.buffer.write(text.encode(encoding, errors="replace"))
        sys.stdout.flush()
    except BrokenPipeError:  # `diag analyze ... | head`: the reader left, that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def analyze_command(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help="Log files, folders, globs, .gz/.bz2/.xz files, or - for stdin.",
            show_default=False,
        ),
    ] = None,
    example: Annotated[
        bool, typer.Option("--example", help="Analyse the built-in example log (the story).")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the JSON result and nothing else.")
    ] = False,
    fmt: Annotated[
        Format | None,
        typer.Option(
            "--format",
            "-f",
            help="terminal (default), json, markdown (GitHub issue) or perfetto (trace).",
            case_sensitive=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the rendering to this file.", dir_okay=False),
    ] = None,
    year: Annotated[
        int | None,
        typer.Option("--year", help="Year for log time stamps that have none (vLLM).", min=1970),
    ] = None,
    rules: Annotated[
        list[Path] | None,
        typer.Option(
            "--rules",
            help="A folder of extra rule files (repeatable).",
        ),
    ] = None,
    fail_on: Annotated[
        FailOn,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a finding at or above this severity is reported.",
            case_sensitive=False,
        ),
    ] = FailOn.none,
    width: Annotated[
        int | None,
        typer.Option(
            "--width", help="Width of the terminal view (default: the terminal's).", min=40
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Why, remedy and caveat of each finding; the quiet rules."
        ),
    ] = False,
    rank: Annotated[
        str | None,
        typer.Option(
            "--rank",
            help="Look at one rank only (TP3, 'DP0 TP1'): its row, "
            "its findings and evidence, its stack.",
        ),
    ] = None,
    context: Annotated[
        int | None,
        typer.Option(
            "--context", "-C", min=0, max=50, help="Show N log lines around each evidence line."
        ),
    ] = None,
    color: Annotated[
        ColorMode,
        typer.Option(
            "--color",
            help="auto (NO_COLOR / FORCE_COLOR honoured), always, never.",
            case_sensitive=False,
        ),
    ] = ColorMode.auto,
) -> None:
    """Read multi-rank SGLang / vLLM logs or a bundle: timeline, live snapshot, findings."""
    _analyze_main(
        paths,
        example=example,
        json_out=json_out,
        fmt=fmt,
        out=out,
        year=year,
        rules=rules,
        fail_on=fail_on,
        width=width,
        verbose=verbose,
        rank=rank,
        context=context,
        color=color,
        default=Format.terminal,
    )


def _analyze_main(
    paths: list[str] | None,
    *,
    example: bool,
    json_out: bool,
    fmt: Format | None,
    out: Path | None,
    year: int | None,
    rules: list[Path] | None,
    fail_on: FailOn,
    width: int | None,
    verbose: bool,
    rank: str | None,
    context: int | None,
    color: ColorMode,
    default: Format,
) -> None:
    paths = list(paths or [])
    if json_out and fmt not in (None, Format.json):
        raise typer.BadParameter(
            "--json and --format disagree; pass one of them", param_hint="--json"
        )
    chosen = Format.json if json_out else (fmt or default)
    if example and paths:
        raise typer.BadParameter("pass either --example or PATHS, not both", param_hint="--example")
    if not example and not paths:
        raise InputError(
            "no input: pass a log file, a folder, - for stdin, or --example",
            help_text="Try `diag analyze --example`, or `diag analyze server.log`.",
        )
    if rules:
        from diag.commands.rules import check_rules_dirs

        check_rules_dirs(rules)
    show_progress = chosen is not Format.json and sys.stderr.isatty()
    with _progress(show_progress) as progress:
        analysis = _run_analysis(
            paths, example=example, year=year, rules_dirs=list(rules or []), progress=progress
        )
    code = exit_code_for(analysis.analysis.findings, fail_on.value)
    if rank is not None:
        from diag.report.combined import focus

        analysis = focus(analysis, rank)
    lines = None
    if context:
        from diag.report.combined import context_lines

        lines = context_lines(analysis, context)
    if out is not None:
        _write_out(out, render(analysis, chosen, width=width, verbose=verbose, context=lines))
        if sys.stderr.isatty():
            Console(stderr=True, highlight=False).print(f"wrote {chosen.value} report to {out}")
    elif chosen is Format.terminal and sys.stdout.isatty():
        from diag.report.terminal import render_terminal

        on = use_color(color, isatty=True)
        Console(
            highlight=False, width=width, no_color=not on, color_system="auto" if on else None
        ).print(render_terminal(analysis, verbose=verbose, context=lines))
    else:
        on = chosen is Format.terminal and use_color(color, isatty=False)
        _emit(render(analysis, chosen, width=width, verbose=verbose, color=on, context=lines))
    if code:
        raise typer.Exit(code)


def report_command(
    paths: Annotated[
        list[str] | None,
        typer.Argument(help="A bundle (or logs) to report on.", show_default=False),
    ] = None,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            "-f",
            help="markdown (default), terminal, json or perfetto.",
            case_sensitive=False,
        ),
    ] = Format.markdown,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the report to this file.", dir_okay=False),
    ] = None,
    rank: Annotated[str | None, typer.Option("--rank", help="One rank only.")] = None,
) -> None:
    """The GitHub-ready report of a bundle (its log analysis and live snapshot together)."""
    _analyze_main(
        paths,
        example=False,
        json_out=False,
        fmt=fmt,
        out=out,
        year=None,
        rules=None,
        fail_on=FailOn.none,
        width=None,
        verbose=True,
        rank=rank,
        context=None,
        color=ColorMode.auto,
        default=Format.markdown,
    )


def register(app: typer.Typer) -> None:
    app.command("analyze", no_args_is_help=False)(analyze_command)
    app.command("report", no_args_is_help=True)(report_command)
