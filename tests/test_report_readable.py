"""Readable without colour, short by default, closer on demand: `--color`, NO_COLOR /
FORCE_COLOR, phase letters, the one-screen default, `--rank`, `--context`, and tables
that stay tables at 80 columns (the live table of a bundle, the snapshot's table)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from diag.analyze import analyze
from diag.commands.analyze import ColorMode, use_color
from diag.report.combined import combine
from diag.report.snapshot_read import snapshot_from_dict
from diag.report.snapshot_view import render_snapshot
from diag.report.terminal import PHASE_LETTERS, render_terminal

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "fixtures" / "gpu" / "h200x2" / "cpu-w8"


def diag(*args: str, env: dict[str, str] | None = None) -> str:
    import os

    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full.update(env or {})
    r = subprocess.run(
        [sys.executable, "-m", "diag", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=full,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_color_modes_and_environment() -> None:
    assert use_color(ColorMode.always, isatty=False, env={"NO_COLOR": "1"})
    assert not use_color(ColorMode.never, isatty=True, env={"FORCE_COLOR": "1"})
    assert not use_color(ColorMode.auto, isatty=True, env={"NO_COLOR": "1"})
    assert use_color(ColorMode.auto, isatty=False, env={"FORCE_COLOR": "1"})
    assert not use_color(ColorMode.auto, isatty=False, env={"FORCE_COLOR": "0"})
    assert use_color(ColorMode.auto, isatty=True, env={})
    assert not use_color(ColorMode.auto, isatty=False, env={})


def test_pipe_gets_letters_and_colour_only_when_asked() -> None:
    plain = diag("analyze", "--example")
    assert "\x1b[" not in plain
    tp0 = next(x for x in plain.splitlines() if x.startswith("TP0 "))
    assert "D" * 10 in tp0 and "W" * 10 in tp0  # dist_init, weights_load
    assert "D dist_init  W weights_load" in plain  # the legend names the letters
    forced = diag("analyze", "--example", env={"FORCE_COLOR": "1"})
    assert "\x1b[" in forced and "█" in forced
    assert "\x1b[" in diag("analyze", "--example", "--color", "always")
    assert "\x1b[" not in diag("analyze", "--example", "--color", "never", env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in diag("analyze", "--example", env={"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert len(set(PHASE_LETTERS.values())) == len(PHASE_LETTERS)  # one letter, one phase


def test_default_view_is_one_screen_and_verbose_has_the_rest() -> None:
    short = diag("analyze", "--example", "--width", "120")
    assert len(short.splitlines()) <= 40
    assert "why:" not in short and "remedy:" not in short
    long = diag("analyze", "--example", "-v", "--width", "120")
    assert "why:" in long and "remedy:" in long and "caveat:" in long
    assert "Checked and did not fire: " in long
    url = next(x for x in long.splitlines() if "compressed_tensors" in x and "see " in x)
    assert url.strip().startswith("see https://") and url.rstrip().endswith(".py")  # not wrapped


def test_rank_and_context() -> None:
    out = diag("analyze", "--example", "--rank", "tp3", "--context", "2")
    rows = [x for x in out.splitlines() if x.startswith("TP")]
    assert [r.split()[0] for r in rows] == ["TP3"]
    assert "[TP3, TP6]" in out and "example.log:111  TP3" in out
    assert "example.log:112  TP6" not in out  # TP6's evidence is not TP3's
    # two log lines either side of the evidence line, numbered
    assert "example.log:109 " in out and "example.log:113 " in out
    # in the log's order: lines before, the evidence line, lines after
    assert out.index("example.log:109 ") < out.index("example.log:111  TP3") < out.index(
        "example.log:113 "
    )
    r = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "--example", "--rank", "TP9"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2 and "no such rank" in r.stderr and "Traceback" not in r.stderr


def _render(renderable: Any, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    console.file.close()
    return console.export_text().splitlines()


def test_tables_stay_tables_at_80_columns() -> None:
    snap = snapshot_from_dict(json.loads((CAPTURE / "snapshot-json.json").read_text()))
    view = combine(analyze([CAPTURE / "server.log"]), snap)
    lines = _render(render_terminal(view, verbose=False), 80)
    assert all(len(x) <= 80 for x in lines)
    header = next(x for x in lines if x.startswith("rank ") and "wait site" in x)
    rows = [x for x in lines if x.startswith("TP") and "stack.dist_init" in x]
    assert len(rows) == 8  # one line per rank: cells not wrapped
    assert "state" in header and "RSS" in header
    snap_lines = _render(render_snapshot(snap)[1], 80)
    sched = [x for x in snap_lines if "scheduler" in x]
    assert len(sched) == 8 and all("stack.dist_init" in x for x in sched)
    assert all(len(x) <= 80 for x in snap_lines)
    wide = _render(render_snapshot(snap)[1], 200)
    assert any("top frames" in x for x in wide)


@pytest.mark.parametrize("width", [80, 120])
def test_example_fits_its_width(width: int) -> None:
    out = diag("analyze", "--example", "--width", str(width))
    assert max(len(x) for x in out.splitlines()) <= width
