"""`diag analyze --json` without the interactive CLI: the scripted run, started fast.

``diag analyze --json PATHS...`` and ``diag analyze --example --json`` (``--format json``
/ ``-f json`` too) with no other option are run here, without importing typer, rich or
the other commands. Anything else (another option, ``--help``, a glob the shell left
alone, an error to report) returns None and goes the usual way through the typer app,
which then prints exactly what it always prints.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["run_fast", "write_stdout"]

EXAMPLE_RESOURCE = "example.log"  # as diag.commands.analyze.EXAMPLE_RESOURCE


def _plain_json_args(argv: Sequence[str]) -> tuple[bool, list[str]] | None:
    """(example, paths) when ``argv`` is the plain JSON form, else None."""
    if not argv or argv[0] != "analyze":
        return None
    example = json_out = False
    paths: list[str] = []
    args = list(argv[1:])
    while args:
        a = args.pop(0)
        if a == "--example":
            example = True
        elif a == "--json" or a == "--format=json":
            json_out = True
        elif a in ("--format", "-f") and args and args[0].lower() == "json":
            args.pop(0)
            json_out = True
        elif a == "--":
            paths.extend(args)
            break
        elif a.startswith("-") and a != "-":
            return None  # another option: the full CLI handles it
        else:
            paths.append(a)
    if not json_out or example == bool(paths):
        return None
    if any(c in p for p in paths for c in "*?[") and not all(os.path.exists(p) for p in paths):
        return None  # a glob to expand: the full CLI does it
    return example, paths


def run_fast(argv: Sequence[str]) -> int | None:
    """Run the plain ``analyze --json`` form; its exit code, or None (not this form, or
    an error: the caller runs the full CLI, which reports it)."""
    parsed = _plain_json_args(argv)
    if parsed is None:
        return None
    example, paths = parsed
    import importlib.resources

    from diag.errors import DiagError
    from diag.report.combined import load_case
    from diag.report.combined_json import render_combined_json

    if "-" in paths:
        return None  # stdin can be read once only: leave it to the full CLI
    try:
        if example:
            resource = importlib.resources.files("diag.data").joinpath(EXAMPLE_RESOURCE)
            with importlib.resources.as_file(resource) as path:
                case = load_case([path], year=None, rules_dirs=[], progress=None)
        else:
            case = load_case(paths, year=None, rules_dirs=[], progress=None)
    except DiagError:
        return None
    write_stdout(render_combined_json(case) + "\n")
    return 0


def write_stdout(text: str) -> None:
    """``text`` on stdout, whatever its encoding; a reader gone (``| head``) is fine."""
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:  # a non-UTF-8 stdout
            sys.stdout.flush()
            sys.stdout.buffer.write(text.encode(sys.stdout.encoding or "ascii", "replace"))
        sys.stdout.flush()
    except BrokenPipeError:  # `diag ... --json | head`: fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
