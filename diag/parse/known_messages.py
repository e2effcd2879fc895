"""Is a text with no log-shaped line a paste of the sources' messages?

A reporter often pastes only the messages of a log (a viewer's message column, ``print``
output, a copy that left the ``INFO 01-01 00:00:00 [file.py:12]`` prefix behind): no line
then has a time, level, rank or pid, and the analyser would refuse the text as "not a log".
``diag/data/message_heads.txt`` (written by ``tools/gen_message_heads.py`` from the
sources' message table, fixtures/messages/messages.tsv, and the C++ tables beside it)
lists how every specific message of the releases begins; a line that starts with one of
them is a message of the sources. The file is read only for a text that would otherwise
be refused (:func:`message_lines`), never on a log's normal path.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from importlib import resources

__all__ = ["HEAD", "MIN_HEAD", "message_lines", "message_paste"]

HEAD = 24  # characters of a message's first literal piece kept as its head
MIN_HEAD = 12  # a head is at least this long (shorter first pieces are not listed)
_SCAN = 4000  # lines looked at


@lru_cache(maxsize=1)
def _heads() -> tuple[frozenset[str], tuple[int, ...]]:
    """The heads, and their lengths (longest first)."""
    try:
        text = resources.files("diag.data").joinpath("message_heads.txt").read_text("utf-8")
    except OSError:
        return frozenset(), ()
    heads = frozenset(ln for ln in text.split("\n") if ln and not ln.startswith("#"))
    return heads, tuple(sorted({len(h) for h in heads}, reverse=True))


def _is_message(line: str, heads: frozenset[str], lengths: tuple[int, ...]) -> bool:
    text = " ".join(line[: 4 * HEAD].split())
    if len(text) < MIN_HEAD:
        return False
    return any(text[:n] in heads for n in lengths if n <= len(text))


def message_lines(lines: Iterable[str]) -> tuple[int, int]:
    """(lines that are messages of the sources, non-blank lines), over the first lines."""
    heads, lengths = _heads()
    known = total = 0
    for i, line in enumerate(lines):
        if i >= _SCAN:
            break
        if not line.strip():
            continue
        total += 1
        if heads and _is_message(line, heads, lengths):
            known += 1
    return known, total


def message_paste(lines: Iterable[str]) -> tuple[int, int] | None:
    """(message lines, non-blank lines) when the text's lines are messages of the sources,
    else None. Two of them, or one that is a quarter of the text (a short paste), make it
    a log; a long text of prose or code with one line that happens to begin like a
    message does not."""
    known, total = message_lines(lines)
    return (known, total) if known >= 2 or (known == 1 and 4 * known >= total) else None
