"""Terminal injection: escape sequences in evidence lines, process titles and manifest
fields are shown visibly escaped by the terminal view, the Markdown view, ``bundle
verify`` and the error line, never passed to the terminal (issue 12)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from diag.report.sanitize import Sanitized, markup_safe, visible
from tests.test_bundle_hostile import LOG, _manifest, _write

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # write the clipboard
TITLE = "\x1b]0;pwned\x07"  # set the window title
CLEAR = "\x1b[2J\x1b[H"  # clear the screen
C1 = "\x9b31m"  # 8-bit CSI
BIDI = "\u202e"  # right-to-left override
HOSTILE = OSC52 + TITLE + CLEAR + C1 + BIDI

LINES = (
    "[2025-03-14 06:55:09 TP0] Init torch distributed begin.\n"
    f"[2025-03-14 06:57:09 TP0] RuntimeError: CUDA out of memory. {HOSTILE} Tried to "
    "allocate 2 GiB\n"
)


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
            or c == BIDI]  # fmt: skip


def test_visible() -> None:
    assert visible("a\x1b[2Jb\x07\x9b\u202ec\n\t") == "a␛[2Jb␇\\x9b\\u202ec\n\t"
    assert visible("plain") == "plain"
    assert markup_safe("[red]x\x1b") == "\\[red]x␛"


def test_sanitized_renderable_keeps_rich_styles() -> None:
    buf = io.StringIO()
    console = Console(file=buf, color_system="truecolor", width=80, force_terminal=True)
    console.print(Sanitized(Text("bold" + CLEAR, style="bold red")))
    out = buf.getvalue()
    assert "␛[2J" in out  # the input's sequence, visible
    assert "\x1b[2J" not in out and "\x1b[1;31m" in out  # rich's own style codes stay


@pytest.mark.parametrize("fmt", [[], ["--format=markdown"]])
def test_analyze_views_escape_the_log(tmp_path: Path, fmt: list[str]) -> None:
    log = tmp_path / "evil.log"
    log.write_text(LINES)
    out = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", str(log), *fmt],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "cuda.oom" in out.stdout
    assert _raw_controls(out.stdout) == []
    assert "␛]52;c;" in out.stdout


def test_bundle_verify_escapes_manifest_fields(tmp_path: Path) -> None:
    members = {"env.json": b"{}", "logs/a.log": LOG}
    manifest = _manifest(
        members,
        diag_version="0.1" + TITLE,
        created=CLEAR + "2026",
        summary={"framework": OSC52, "last_phase": C1, "findings": [BIDI + "x"]},
        logs=[{"member": "logs/a.log", "source": "a" + CLEAR + ".log"}],
        redactions={OSC52: 1},
    )
    bundle = _write(tmp_path / "evil.tar.gz", members, manifest=manifest)
    out = subprocess.run(
        [sys.executable, "-m", "diag", "bundle", "verify", str(bundle)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok:")
    assert _raw_controls(out.stdout) == []
    assert "␛]0;pwned" in out.stdout


def test_error_line_escapes_markup_and_controls(tmp_path: Path) -> None:
    name = str(tmp_path / ("[bold]x[/bold]" + TITLE + ".log"))
    out = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", name],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "[bold]x[/bold]" in out.stderr and _raw_controls(out.stderr) == []
