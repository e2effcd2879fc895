"""One sanitiser for text from input that reaches a terminal or a Markdown file.

A log line, a process title or a bundle's manifest can carry escape sequences (OSC 52
writes the clipboard, OSC 0 the window title, ``ESC[2J`` clears the screen) and bidi
overrides. Every such character is made visible instead of passed through: C0 controls
as their Unicode control pictures (``ESC`` -> ``␛``, one cell wide, so layouts hold), DEL
as ``␡``, C1 controls and bidi overrides as ``\\x9b`` / ``\\u202e`` text. Newlines and
tabs stay. Rich markup is never parsed from input (renderers build ``Text`` objects), and
:func:`markup_safe` escapes it where a caller prints with markup on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segment

__all__ = ["Sanitized", "markup_safe", "visible"]

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _picture(match: re.Match[str]) -> str:
    c = match.group(0)
    code = ord(c)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ .. ␟ (ESC -> ␛)
    if code == 0x7F:
        return "\u2421"  # ␡
    if code <= 0x9F:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character and escape sequence made visible (``\\n``
    and ``\\t`` kept)."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_picture, text)


def markup_safe(text: str) -> str:
    """``text`` ready for a rich print with markup on: visible, and its ``[...]`` escaped."""
    return escape(visible(text))


class Sanitized:
    """A renderable whose every text segment passes :func:`visible` on its way to the
    terminal (the styles rich adds are not text, and stay)."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _clean(console.render(self.inner, options))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.inner)


def _clean(segments: Iterable[Segment]) -> Iterable[Segment]:
    for seg in segments:
        if seg.control or _UNSAFE.search(seg.text) is None:
            yield seg
        else:
            yield Segment(visible(seg.text), seg.style)
