"""Fuzz the line grammar: every physical line a log can hold goes through parse_line and
the per-source parser (rank tags, pids, timestamps, repeat counts, prefixes)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Gen, drive, instrumented  # noqa: E402

with instrumented():
    from diag.parse.grammars import parse_line
    from diag.parse.records import SourceParser


def one_input(data: bytes) -> None:
    g = Gen(data)
    mode = g.byte()
    text = g.rest().decode("utf-8", "replace")
    if mode % 2:
        text = Gen(data[::-1]).mutate_text(text)
    for line in text.splitlines()[:50] or [text]:
        parse_line(line)
    sp = SourceParser("fuzz.log")
    for i, line in enumerate(text.splitlines()[:200], start=1):
        sp.feed(i, line)


if __name__ == "__main__":
    drive("line_grammar", one_input, float(sys.argv[1]) if len(sys.argv) > 1 else 60)
