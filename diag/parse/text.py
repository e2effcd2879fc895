"""Text clean-up before grammars: decoding, colour codes, tqdm updates, glued lines
(records glued on one line are cut again by :func:`diag.parse.unwrap.split_glued`).

Everything here is pure string work, shared by the full parser and the prefilter path.
"""

from __future__ import annotations

import codecs
import re

from diag.parse.unwrap import split_glued

__all__ = [
    "ANSI_RE",
    "decode",
    "fold_typography",
    "split_physical",
    "strip_ansi",
]

# Real ESC sequences, caret-notation ones pasted as text (^[[0;36m), and ESC-stripped ones
# ([1;36m / [0m) that pastes leave behind. The ESC-stripped form is only removed when it is
# an SGR code (digits and ';' followed by 'm'; a bare [m only where no name follows:
# "[multiproc_executor.py:800]" keeps its "[m").
# A carriage return in caret notation ("^M" ending the line: a CRLF file shown by `cat -v`,
# vim or less, then pasted) goes with them.
ANSI_RE = re.compile(
    r"(?:\x1b|\^\[)\[[0-9;?]*[A-Za-z]|\x1b[()][AB0-2]|\[(?:\d{1,3}(?:;\d{1,3})*m|m(?![a-z0-9_]))"
    r"|\^M$"
)
_ANSI_HINT = re.compile(r"\x1b|\^\[|\[[\d;]*m|\^M$")
_ANSI_BARE = re.compile(r"\[[\d;]*m")  # the one form of _ANSI_HINT with neither ESC nor "^"

# tqdm bar end followed directly by the next log line (no newline): split after the bar.
_GLUED_BAR = re.compile(
    r"(\[[0-9:?]+<[0-9:?]+,\s*[0-9.?]+\s*(?:it/s|s/it|B/s|[kMG]B/s)\])(?=\S)"
)


# What a rendered page, a chat app or a word processor puts in place of the ASCII a log
# printed (each one character for one, so widths and offsets stay): no-break and narrow
# spaces for spaces (HTML views keep runs of spaces as U+00A0), typographic quotes for
# straight ones (auto-correct: a traceback's `File “/x.py”` no longer reads as a frame).
TYPOGRAPHY = str.maketrans({
    "\u00a0": " ", "\u2007": " ", "\u202f": " ",
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
})
# the same characters encoded: a line holding one is a candidate of the prefilter
TYPOGRAPHY_LITERALS = ("\u00a0", "\u2007", "\u202f", "\u2018", "\u2019", "\u201c", "\u201d")


def fold_typography(s: str) -> str:
    """``s`` with :data:`TYPOGRAPHY`'s characters as the ASCII they stand for."""
    return s if s.isascii() else s.translate(TYPOGRAPHY)


def strip_ansi(s: str) -> str:
    if "\x1b" not in s and "^" not in s:
        # (speed) of _ANSI_HINT's forms only the bare "[..m" can be there: looked for from
        # the first "["
        i = s.find("[")
        if i < 0 or _ANSI_BARE.search(s, i) is None:
            return s
    elif _ANSI_HINT.search(s) is None:
        return s
    return ANSI_RE.sub("", s)


class _Counter:
    __slots__ = ("bad",)

    def __init__(self) -> None:
        self.bad = 0


def decode(data: bytes | bytearray) -> tuple[str, int]:
    """Decode UTF-8; invalid bytes become U+FFFD. Returns (text, number of bad bytes).

    NUL bytes are kept in the text (the grammars ignore them)."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        pass
    counter = _Counter()

    def handler(exc: UnicodeError) -> tuple[str, int]:
        assert isinstance(exc, UnicodeDecodeError)
        counter.bad += exc.end - exc.start
        return ("\ufffd", exc.end)

    name = f"diag-count-{id(counter)}"
    codecs.register_error(name, handler)
    text = data.decode("utf-8", errors=name)
    return text, counter.bad


_PANE_BORDER = re.compile(r"\s*\u2502\u2502\s*")


def split_physical(line: str) -> list[str]:
    """One physical line -> the logical pieces in it.

    A trailing CR is dropped; inner CRs separate tqdm updates (each one its own piece);
    a progress bar glued to the next log line is split after the bar."""
    if "\x00" in line:
        line = line.replace("\x00", "")
    if line.endswith("\r"):
        line = line.rstrip("\r")
    parts = line.split("\r") if "\r" in line else [line]
    if "\u2502\u2502" in line:
        # a terminal UI's panes copied side by side (k9s, a tmux split): two panes' box
        # borders meet as '││' between their texts, each a line of its own
        parts = [q for p in parts for q in _PANE_BORDER.split(p)]
    out: list[str] = []
    for part in parts:
        if "it/s]" in part or "s/it]" in part:
            pieces = _GLUED_BAR.split(part)
            # split keeps the bar group: rejoin each bar with the text before it
            buf = ""
            for i, piece in enumerate(pieces):
                if i % 2 == 1:
                    out.append(buf + piece)
                    buf = ""
                else:
                    buf = piece
            if buf:
                out.append(buf)
        elif part or not out:
            out.append(part)
    result: list[str] = []
    for p in out:
        if p.strip():
            result.extend(split_glued(p))
    return result or ([""] if not out else [])
