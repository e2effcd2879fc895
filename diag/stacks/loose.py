"""A frame list in no dump format: what a reporter wrote down by hand.

Bug reports carry stacks that no tool printed: a py-spy dump condensed to its innermost
lines with the reporter's notes beside them (``cuStreamSynchronize   <- never returns``), a
call tree redrawn with box-drawing connectors, a list of bare C++ symbols copied from gdb.
None of them has a header, so the dump readers of :mod:`diag.stacks.textdump` see no dump.

This reader is the last resort of a text in which nothing else was recognised (no line of
a log's shape, no dump): it keeps the lines that are one frame each (a py-spy
``name (file:line)``, a faulthandler-like ``file.py line N in name``, a lone symbol), drops
the reporter's annotations, and gives the frames, innermost first, to the classifier as one
thread of one process (mode ``list``). Prose lines (several words) are not frames; fewer
than :data:`MIN_FRAMES` frames is no list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from diag.model import StackFrame, StackProcess, StackThread

__all__ = ["MIN_FRAMES", "frame_list_process"]

MIN_FRAMES = 3

# a tree's connectors and a list's bullets or numbers before the frame
_LEAD = re.compile(r"^[\s│|├└┣┗─━>*•·-]*(?:(?:#|frame #)?\d{1,3}[.):]?\s+)?[\s│|├└─>*•·-]*")
# a reporter's note after the frame: an arrow, a comment
_NOTE = re.compile(r"\s*(?:←|<-+|<=|-->?|=>|#\s|//).*$")
# `name (file.py:12)` / `name (libfoo.so)`: py-spy's frame
# (the place may stand in a column of its own: `sched_yield        (utils.py:48)`)
_PYSPY = re.compile(r"^([\w.<>~:]+) +\(([^()\s]+?(?::\d+|\.so[\w.]*))\)$")
# `file.py:12 in name`, `file.py line 12 in name`, `file.py, line 12, in name`
_PLACE = re.compile(r"^\"?([^\s\"]+\.pyx?)\"?(?::(\d+)|,? line (\d+),?) in ([\w.<>]+)\b")
# a lone symbol: `cudaStreamSynchronize`, `c10::TensorImpl::~TensorImpl`, `Tensor.tolist()`,
# `THPStorage_newSharedCuda(...)::{lambda(void*)#1}::_FUN`
_SYMBOL = re.compile(r"^(?:[A-Za-z_~][\w~]*(?:(?:::|\.)[A-Za-z_~{][\w~{}()*#]*)*)(?:\([^()]*\))?"
                     r"(?:::[\w~{}()*#]+)*$")
# what says the order: a call tree (each frame one level deeper) is outermost first
_OUTER_FIRST = re.compile(r"most recent call last|[└├]─")


# a log collector's bare stamp before the line (`2025-06-22 03:09:55  `, ISO, asctime)
_STAMP = re.compile(
    r"^(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
    r"(?: UTC)?(?:[ \t]+|$))+"
)


def _written(line: str) -> str:
    """A list line without a collector's stamp, its tree connectors, bullets and the
    reporter's note."""
    return _NOTE.sub("", _LEAD.sub("", _STAMP.sub("", line))).strip()


def _frame(text: str) -> StackFrame | None:
    """The frame a cleaned list line (:func:`_written`) names, or None."""
    if not text or len(text) > 300:
        return None
    m = _PYSPY.match(text)
    if m:
        name, where = m.groups()
        file, _, num = where.rpartition(":")
        if num.isdigit():
            return StackFrame(name=name, filename=file, line=int(num))
        return StackFrame(name=name, filename=where, native=True)
    m = _PLACE.match(text)
    if m:
        num = m.group(2) or m.group(3)
        return StackFrame(name=m.group(4), filename=m.group(1), line=int(num))
    if " " not in text and _SYMBOL.match(text):
        name = text[:-2] if text.endswith("()") else text
        return StackFrame(name=name, native="::" in name or "." not in name)
    return None


_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def _fenced(lines: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The lines inside the text's markdown code fences where it has any (the prose around
    them is the report, not the list), else every line; the fence lines are left out. As
    in CommonMark, a fence is closed by one of its own character at least as long (a
    fence of four backticks holds a pasted text with fences of three)."""
    every = list(lines)
    inside: list[tuple[int, str]] = []
    fenced = False
    opened: str | None = None
    for item in every:
        m = _FENCE.match(item[1])
        if opened is None:
            if m:
                fenced, opened = True, m.group(1)
            continue
        mark = m.group(1) if m else ""
        if mark[:1] == opened[:1] and len(mark) >= len(opened) and item[1].strip() == mark:
            opened = None  # its closing fence
        else:
            inside.append(item)
    return inside if fenced else every


def frame_list_process(
    lines: Iterable[tuple[int, str]], *, source: str | None = None
) -> StackProcess | None:
    """The frames of a hand-written frame list (its lines with their numbers), one process
    with one thread, classified;
    None where the text holds fewer than :data:`MIN_FRAMES` frame lines or where its
    frame lines are a minority of its lines (prose that names a function or two)."""
    from diag.stacks.classify import classified
    from diag.stacks.primitives import primitive_in_line

    # frames, and calls of a blocking primitive written as a line of their own
    # (`Tensor.tolist()`): the call the frame outside it was making
    items: list[StackFrame | str] = []
    first: int | None = None
    words = 0
    outer_first = False
    for number, line in _fenced(lines):
        if not line.strip() or _FENCE.match(line):
            continue
        if _OUTER_FIRST.search(line):
            outer_first = True
        written = _written(line)
        f = _frame(written)
        if f is None:
            words += 1
            continue
        if first is None:
            first = number
        call = f"{f.name}()"
        if not f.filename and written.endswith("()") and primitive_in_line(call) is not None:
            items.append(call)
        else:
            items.append(f)
    if not outer_first:
        items.reverse()  # outermost first from here on
    frames: list[StackFrame] = []
    for item in items:
        if isinstance(item, str):
            if frames and frames[-1].call is None:
                frames[-1] = replace(frames[-1], call=item)
            continue
        frames.append(item)
    if len(frames) + sum(isinstance(x, str) for x in items) < MIN_FRAMES or len(items) < words:
        return None
    frames.reverse()

    thread = StackThread(thread_id=None, name=None, frames=tuple(frames))
    return classified(
        StackProcess(pid=None, title=None, threads=(thread,), mode="list", source=source,
                     line=first)
    )
