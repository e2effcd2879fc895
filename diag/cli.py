"""The command line: the only module that prints to the console or exits.

Each subcommand lives in ``diag/commands/<name>.py`` and registers itself on the app
(``COMMANDS`` below is the explicit registry). Commands raise :class:`DiagError`;
``main`` turns it into one red line, its remedy, and its exit code.

The app (typer, rich and every command module) is built on first use: the plain
``diag analyze --json PATHS`` / ``--example`` runs without it (:mod:`diag.commands.fast`),
and so does the plain ``diag snapshot --json`` (:mod:`diag.commands.fast_snapshot`), so a
scripted run does not pay for the interactive CLI's imports.
"""

from __future__ import annotations

import inspect
import io
import os
import sys
from typing import Any

__all__ = ["COMMANDS", "app", "main"]  # noqa: F822 - app and COMMANDS via __getattr__

_BUILT: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    """The typer app with every command registered (built once)."""
    if _BUILT:
        return _BUILT
    import typer

    from diag.commands import analyze as analyze_cmd
    from diag.commands import bundle as bundle_cmd
    from diag.commands import diff as diff_cmd
    from diag.commands import rules as rules_cmd
    from diag.commands import snapshot as snapshot_cmd
    from diag.commands import watch as watch_cmd

    app = typer.Typer(
        name="diag",
        help="Forensics for LLM inference servers (SGLang, vLLM): where did startup hang, and why.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        # click's plain help, not rich's panels: at 80 columns rich cut words and option
        # types mid-word ("per|fetto", "ProxyJump=bastio…"); click wraps at spaces
        rich_markup_mode=None,
        add_completion=False,
    )
    COMMANDS = (analyze_cmd, snapshot_cmd, bundle_cmd, rules_cmd, watch_cmd, diff_cmd)
    for command in COMMANDS:
        command.register(app)

    _whole_short_help(app)

    @app.callback()
    def _root() -> None:
        """Forensics for LLM inference servers (SGLang, vLLM): where did startup hang, and why."""

    @app.command("version")
    def version() -> None:
        """Print diag's version."""
        from diag import __version__

        typer.echo(__version__)

    _BUILT.update(app=app, COMMANDS=COMMANDS)
    return _BUILT


def _whole_short_help(app: Any) -> None:
    """Command lists (``diag --help``, ``diag rules --help``) show each command's first
    paragraph whole, wrapped at words: click shortens a help it is not given a short help
    for at the width, cutting it with "..."."""
    from typer.models import DefaultPlaceholder

    def first_paragraph(doc: str | None) -> str:
        return " ".join((doc or "").split("\n\n", 1)[0].split())

    for info in app.registered_commands:
        if info.short_help is None:
            info.short_help = first_paragraph(info.help or inspect.getdoc(info.callback))
    for group in app.registered_groups:
        sub = group.typer_instance
        if isinstance(sub.info.short_help, DefaultPlaceholder) and isinstance(sub.info.help, str):
            sub.info.short_help = first_paragraph(sub.info.help)
        _whole_short_help(sub)


def __getattr__(name: str) -> Any:
    if name in ("app", "COMMANDS"):
        return _build()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _ReaderMayLeave(io.TextIOWrapper):
    """stdout or stderr whose reader may leave early (``diag snapshot --help | head -1``):
    from the first write or flush that meets a closed pipe on, the rest goes to /dev/null.
    The command ends as it would have, with its own exit code (0 for ``--help``), and no
    BrokenPipeError traceback or ``Exception ignored`` line at exit (click turned the
    error into exit 1)."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            self._to_devnull()
            super().flush()  # what was pending goes to /dev/null

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.fileno())
        finally:
            os.close(devnull)


def _quiet_when_the_reader_leaves() -> None:
    """Put stdout and stderr behind :class:`_ReaderMayLeave` (each left as it is where it
    is not a plain text stream over a file, as under a test runner's capture)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if type(stream) is not io.TextIOWrapper:
            continue
        try:
            stream.flush()
            wrapped = _ReaderMayLeave(
                stream.buffer,
                encoding=stream.encoding,
                errors=stream.errors,
                line_buffering=stream.line_buffering,
                write_through=stream.write_through,
            )
        except (AttributeError, OSError, ValueError):
            continue
        setattr(sys, name, wrapped)


def main() -> None:
    """Entry point: run the app; a DiagError becomes one line, a hint and its exit code."""
    # (speed) numpy's OpenBLAS starts a thread per core at import and they spin waiting
    # for work diag never gives them (0.05 s of the import, and up to 3% of a large
    # analysis's CPU): one thread, unless the user chose otherwise
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from diag.commands.fast import run_fast
    from diag.errors import DiagError

    _quiet_when_the_reader_leaves()
    code = run_fast(sys.argv[1:])
    if code is None:
        from diag.commands.fast_snapshot import exit_now, run_fast_snapshot

        code = run_fast_snapshot(sys.argv[1:])
        if code is not None:
            exit_now(code)  # (without the interpreter's teardown: ~30 ms)
    if code is not None:
        sys.exit(code)
    from rich.console import Console

    from diag.report.sanitize import markup_safe

    err = Console(stderr=True, highlight=False)
    try:
        _build()["app"]()  # standalone: usage errors print themselves and exit 2
    except DiagError as exc:
        # (the message may quote the input: shown through the sanitiser, markup escaped)
        err.print(
            f"[bold red]diag: error:[/] {markup_safe(exc.message)}", markup=True, soft_wrap=True
        )
        if exc.help_text:
            err.print(f"[dim]hint: {markup_safe(exc.help_text)}[/]", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("diag: interrupted")
        sys.exit(130)
