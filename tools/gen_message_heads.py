#!/usr/bin/env python3
"""Write diag/data/message_heads.txt: how the messages of the sources begin, so that a paste
of messages without their logger's prefix is read as the log it is.

A reporter often pastes only the messages (a log viewer's message column, ``print`` output,
a copy without the ``INFO 01-01 00:00:00 [file.py:12]`` part): no line then has a time,
level, rank or pid. Such a text is still a log when its lines are messages the releases
print. For every row of fixtures/messages/messages.tsv (any framework, any level; a raise's
message as well, which a paste may show without its exception class), cpp_messages.tsv
and csrc_messages.tsv, this writes the start of the template's first literal piece (up to
:data:`HEAD` characters): a line that starts with one is a message of the sources.

A head is kept only when it is specific: the template starts with text (not a hole), its
first piece has at least :data:`MIN_HEAD` characters and two words, and its literal text
(the first three pieces) at least :data:`MIN_LITERAL` characters. The analyser loads the
file only for a text it would otherwise refuse (diag.parse.known_messages).

Usage:
    python3 tools/gen_message_heads.py            # rewrite diag/data/message_heads.txt
    python3 tools/gen_message_heads.py --check    # exit 1 when it is not up to date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gen_raise_phases import pieces  # noqa: E402
from message_table import TABLE, Message, load_table, write_or_check  # noqa: E402

from diag.parse.known_messages import HEAD, MIN_HEAD  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "diag" / "data" / "message_heads.txt"
TABLES = (TABLE, TABLE.with_name("cpp_messages.tsv"), TABLE.with_name("csrc_messages.tsv"))
MIN_LITERAL = 16  # literal characters of the first three pieces together
_WORDS = re.compile(r"[A-Za-z]{2,}[ ,:;'-]+[A-Za-z]{2,}")  # two words: prose, not code


def head_of(m: Message) -> str | None:
    """The head of a message's template, or None when it is not specific enough."""
    ps = pieces(m.template)
    if ps is None:
        return None
    kept: list[str] = []
    for p in ps[:3]:
        line, newline, _ = p.partition("\n")  # a multi-line message: its first line
        if line:
            kept.append(line)
        if newline:
            break
    if not kept:
        return None
    first = " ".join(kept[0].split())
    if (
        len(first) < MIN_HEAD
        or not _WORDS.search(first)
        or sum(len(p.strip()) for p in kept) < MIN_LITERAL
    ):
        return None
    return first[:HEAD]


def build() -> list[str]:
    heads: set[str] = set()
    for path in TABLES:
        for m in load_table(path):
            h = head_of(m)
            if h is not None:
                heads.add(h)
    return sorted(heads)


HEADER = (
    "# how the messages of the sources begin (diag.parse.known_messages): the first literal\n"
    "# piece of every template of fixtures/messages/{messages,cpp_messages,csrc_messages}.tsv\n"
    "# (any framework and level, raises too), whitespace collapsed, cut at "
    f"{HEAD} characters;\n"
    "# written by tools/gen_message_heads.py; do not edit\n"
)


def render(heads: list[str]) -> str:
    return HEADER + "".join(h + "\n" for h in heads)


def main() -> int:
    text = render(build())
    heads = text.count("\n") - HEADER.count("\n")
    return write_or_check(OUT, text, "gen_message_heads.py", f"{heads} heads")


if __name__ == "__main__":
    sys.exit(main())
