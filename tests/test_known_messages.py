"""A paste of the sources' messages without their logger's prefix (diag.parse.known_messages,
diag/data/message_heads.txt, written by tools/gen_message_heads.py from the message table)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from diag.parse.known_messages import HEAD, MIN_HEAD, message_lines, message_paste

ROOT = Path(__file__).resolve().parents[1]


def _tool():  # type: ignore[no-untyped-def]
    tool = ROOT / "tools" / "gen_message_heads.py"
    sys.path.insert(0, str(tool.parent))
    spec = importlib.util.spec_from_file_location("gen_message_heads", tool)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_message_heads"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_heads_are_up_to_date() -> None:
    """diag/data/message_heads.txt is what tools/gen_message_heads.py writes from the
    tables now, and every head is specific."""
    mod = _tool()
    heads = mod.build()
    assert len(heads) > 20000
    path = ROOT / "diag" / "data" / "message_heads.txt"
    assert path.read_text(encoding="utf-8") == mod.render(heads)
    assert all(MIN_HEAD <= len(h) <= HEAD and h == h.lstrip() and "  " not in h
               for h in heads)


@pytest.mark.parametrize(
    ("line", "known"),
    [
        # vllm/v1/worker/gpu_worker.py's determine_available_memory debug line (0.9.2)
        ("Initial free memory: 78.50 GiB, free memory: 7.10 GiB, requested GPU memory: "
         "71.20 GiB", True),
        # the first piece is kept whitespace-collapsed: a wrapped paste's double spaces
        ("enabled   custom ops:  Counter()", True),
        ("    enabled custom ops: Counter()", True),
        # code and prose
        ('logger.debug("enabled custom ops: %s", ops)', False),
        ("def enabled_custom_ops(self) -> list[str]:", False),
        ("The server started and then stopped.", False),
        ("", False),
    ],
)
def test_a_line_is_a_message_of_the_sources(line: str, known: bool) -> None:
    assert message_lines([line])[0] == int(known)


def test_a_paste_needs_two_messages_or_a_short_text() -> None:
    msg = "enabled custom ops: Counter()"
    assert message_paste([msg]) == (1, 1)
    assert message_paste([msg, "", "prose", "more prose", "yet more"]) == (1, 4)
    assert message_paste([msg, "a", "b", "c", "d"]) is None
    assert message_paste([msg, "a", "b", "c", "d", msg]) == (2, 6)


def test_the_heads_are_not_read_on_a_logs_path() -> None:
    """The 40,000 heads are loaded only for a text the analyser would otherwise refuse."""
    code = (
        "import sys\n"
        "from diag.analyze import analyze_text\n"
        "analyze_text('[2026-02-22 22:35:01 TP0] Init torch distributed begin.\\n')\n"
        "import diag.parse.known_messages as km\n"
        "print(km._heads.cache_info().currsize)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=ROOT,
    )
    assert out.stdout.strip() == "0"
