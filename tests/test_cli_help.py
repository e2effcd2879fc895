"""Every command's ``--help`` as a new user reads it: at 80 columns, no word cut."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from diag.cli import app

runner = CliRunner()
BOX = re.compile(r"[\s│╭╮╰╯─]+")


def _paths() -> list[list[str]]:
    """Every command path: [], ["analyze"], ["rules", "list"], ..."""
    out: list[list[str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        out.append(path)
        for name in getattr(cmd, "commands", {}):
            walk(cmd.commands[name], [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def _unwrapped(path: list[str]) -> str:
    """The help of ``path`` laid out on lines too wide to wrap: every word whole."""
    wide: dict[str, Any] = {"terminal_width": 10_000, "max_content_width": 10_000}
    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("diag", [], resilient_parsing=True, **wide)
    for name in path:
        cmd = cmd.get_command(ctx, name)
        ctx = cmd.make_context(name, [], parent=ctx, resilient_parsing=True, **wide)
    return str(cmd.get_help(ctx))


def _words(text: str) -> Counter[str]:
    return Counter(w for w in BOX.split(text) if w)


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "diag")
def test_help_at_80_columns_cuts_no_word(path: list[str]) -> None:
    """A new user's check: at 80 columns the help cut words and option types mid-word
    (``<terminal|json|markdown|per`` / ``fetto>``, ``ProxyJump=bastio…``). Each word of
    the help at 80 columns is a whole word of the unwrapped help, and no line is wider."""
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, prog_name="diag")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.output
    assert _words(result.output) == _words(_unwrapped(path))


def _closed_stdout(args: list[str]) -> tuple[int, str]:
    """Run diag with a stdout whose reader has already left (``| head -1`` once head is
    done): (exit code, stderr)."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "diag", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    "args",
    [["snapshot", "--help"], ["--help"], ["analyze", "--help"], ["rules", "list"], ["version"]],
    ids=" ".join,
)
def test_a_reader_that_left_ends_the_command_quietly(args: list[str]) -> None:
    """A new user's check: ``diag snapshot --help | head -1`` exited 1. A closed stdout
    ends the command quietly, with the exit code it would have had (0 here)."""
    code, err = _closed_stdout(args)
    assert (code, err) == (0, "")


def test_a_reader_that_left_keeps_the_commands_own_exit_code() -> None:
    code, err = _closed_stdout(["analyze", "--example", "--color", "never", "--fail-on", "info"])
    assert (code, err) == (1, "")  # the example's findings fail the run, pipe or not
    code, err = _closed_stdout(["rules", "show", "no.such_rule"])
    assert code == 2 and err.startswith("diag: error: no rule 'no.such_rule'")
    assert "Traceback" not in err
