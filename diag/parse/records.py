"""Lines -> record drafts: grammars, continuation lines, year inference.

A :class:`SourceParser` takes the lines of one source in order (all of them, or only the
prefilter's candidates with their line numbers) and keeps *drafts*: mutable records whose
rank attribution and year are settled once the whole input is known, then frozen into
:class:`~diag.model.Record` by :func:`freeze`.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from diag.model import RankId, Record
from diag.parse.coords import Coords, rank_from_path
from diag.parse.grammars import (
    PLACEHOLDER_YEAR,
    Parsed,
    is_continuation_text,
    is_exception_line,
    parse_line,
)
from diag.parse.text import fold_typography, split_physical, strip_ansi
from diag.parse.unwrap import SourceUnwrapper, folded_before, unwrap_line, wrap_breaks

__all__ = ["Draft", "SourceParser", "align_wrapper_clock", "apply_layout", "assign_path_ranks",
           "freeze", "ranks_from_paths", "resolve_years", "starts_record"]

MAX_CONTINUATION = 400  # continuation lines kept per record (the rest are counted)
MAX_MESSAGE = 256_000  # characters of a message kept (multi-MB lines are cut)
REPEAT_CAP_AFTER = 20_000  # records of a source before repeated kinds of lines are capped
REPEAT_KEEP = 200  # lines of one kind parsed once capped (the rest only counted)
_DIGITS = re.compile(r"[0-9]+")
# A Python traceback's frame line, whole: a paste wrapped at a width breaks a long one
# (``fold -s`` after its last space, "..., in " + "__init__"; a hard wrap anywhere,
# mid-path), which this grammar proves; see SourceParser._frame_rest
_FRAME_WHOLE = re.compile(r'\s*File "[^"\n]+", line \d+, in [\w<>.]+\s*')
_FRAME_REST = re.compile(r"\S+(?: \S+){0,4}")  # (the rest: a few words, no more)
MAX_PHYSICAL = 1 << 20  # characters of a physical line looked at (before '\r' splitting)
# (speed) a Parsed's fields in order (a fresh one is Parsed(*fields)), and how many texts'
# parses a source remembers (SourceParser._pieces) before it forgets them all
_PARSED_FIELDS = operator.attrgetter(*(f.name for f in fields(Parsed)))
_MEMO_MAX = 1 << 14
_MEMO_TEXT = 4096  # characters of the longest text remembered
# (speed) a log whose texts seldom recur (a time stamp, a request id on each line: the
# warnings of a serving log) makes remembering them a cost: after each _MEMO_PROBE texts
# remembered, a memo that served fewer than one in _MEMO_RARE of them remembers none of
# the next _MEMO_PAUSE texts (then looks again); texts remembered are still looked up
_MEMO_PROBE = 4096
_MEMO_RARE = 16
_MEMO_PAUSE = 8 * _MEMO_PROBE


@dataclass(slots=True)
class Draft:
    source: str
    line: int
    raw: str
    p: Parsed
    continuation: list[str] = field(default_factory=list)
    dropped: int = 0
    rank: RankId | None = None
    rank_reason: str | None = None
    in_traceback: bool = False


DETECT_LINES = 60  # non-blank lines a source's gutters are decided on


class SourceParser:
    """Parses the lines of one source, attaching continuation lines.

    The source's wrappers are removed first (:mod:`diag.parse.unwrap`): which gutters the
    whole source carries (a markdown quote, line numbers, srun labels) is decided on its
    first :data:`DETECT_LINES` non-blank lines, which are held back until then (or until
    :attr:`drafts` is read); :meth:`prime` decides from a sample given up front."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._drafts: list[Draft] = []
        self.unwrapper = SourceUnwrapper()
        self._held: list[tuple[int, str, bool]] = []
        self._held_nonblank = 0
        self._last: Draft | None = None  # last record of the source
        self._last_line = -10
        self._tail: Draft | None = None  # the record the last line was attached to
        self._by_stream: dict[
            tuple[str | None, int | None, str | None, RankId | None, str | None], Draft
        ] = {}
        self._unknown_lines = 0
        self._first_unknown: int | None = None
        self._last_unknown: int | None = None
        self._known_lines = 0
        self.undecodable = 0  # bytes of invalid UTF-8 (set by the prefilter path)
        self._repeats = 0  # lines only counted: more of a kind than REPEAT_KEEP
        self._kinds: dict[str, int] = {}
        self._skipping = False
        # a hard-wrapped line being joined back: [first line, last line, text, gutter, force]
        self._pend: tuple[int, int, str, Coords | None, bool] | None = None
        self._pend_width = 0  # the width of the pending line's last physical piece
        # (speed) text -> its pieces and their parses (:meth:`_pieces`)
        self._memo: dict[str, tuple[tuple[str, tuple[Any, ...]], ...]] = {}
        self._memo_hits = 0  # texts the memo served since its last probe
        self._memo_stored = 0  # texts remembered since then
        self._memo_pause = 0  # texts still to go unremembered

    # counters read after feeding: the held lines count too
    @property
    def unknown_lines(self) -> int:
        self._release_held()
        return self._unknown_lines

    @property
    def first_unknown(self) -> int | None:
        self._release_held()
        return self._first_unknown

    @property
    def last_unknown(self) -> int | None:
        self._release_held()
        return self._last_unknown

    @property
    def known_lines(self) -> int:
        self._release_held()
        return self._known_lines

    @property
    def repeats(self) -> int:
        self._release_held()
        return self._repeats

    def _release_held(self) -> None:
        if self._held:
            self._release()
        if self._pend is not None:
            self._flush_wrap()

    @property
    def drafts(self) -> list[Draft]:
        """The records so far (lines held for the gutter decision are parsed first)."""
        self._release_held()
        return self._drafts

    def parsed(self, start: int, stop: int) -> list[Draft]:
        """The records ``start:stop`` parsed so far, without parsing the lines held for
        the gutter decision (unlike :attr:`drafts`: nothing changes)."""
        return self._drafts[start:stop]

    def prime(self, sample: Iterable[str]) -> None:
        """Decide the source-wide gutters from ``sample`` (the source's first lines, raw)."""
        self.unwrapper.decide((strip_ansi(fold_typography(x)) for x in sample), _starts_or_bar)
        if self._held:
            self._release()

    def unwrap_notes(self) -> list[str]:
        """What the unwrapping layer removed from this source, for the analysis notes."""
        return self.unwrapper.notes(self.name)

    def _release(self) -> None:
        if not self.unwrapper.decided:
            self.unwrapper.decide((strip_ansi(t) for _, t, _ in self._held), _starts_or_bar)
        held, self._held = self._held, []
        for lineno, text, force in held:
            self._feed(lineno, text, force)

    def feed(self, lineno: int, physical: str, *, force: bool = False) -> None:
        """One physical line (1-based number).

        Once a source has :data:`REPEAT_CAP_AFTER` records, a kind of line (the line with
        its digits removed) seen :data:`REPEAT_KEEP` times is only counted (``repeats``),
        and so are the indented lines after it; ``force`` bypasses this (a rank's last
        line, the first serving line)."""
        if not physical.isascii():
            physical = fold_typography(physical)
        if not physical or physical.isspace():
            return
        if not self.unwrapper.decided:
            self._held.append((lineno, physical, force))
            self._held_nonblank += 1
            if self._held_nonblank >= DETECT_LINES:
                self._release()
            return
        self._feed(lineno, physical, force)

    def _feed(self, lineno: int, physical: str, force: bool) -> None:
        if len(physical) > MAX_PHYSICAL:
            cut = len(physical) - MAX_PHYSICAL
            if "\r" in physical[-MAX_PHYSICAL:]:
                # a tqdm bar rewritten in place thousands of times: the latest updates count
                physical = physical[-MAX_PHYSICAL:]
            else:
                physical = physical[:MAX_PHYSICAL] + f" …[{cut} chars cut]"
        text = strip_ansi(physical)
        wrap = self.unwrapper.wrap
        if wrap is not None:
            self._feed_wrapped(lineno, text, force, wrap)
            return
        gutter: Coords | None = None
        if self.unwrapper.gutters:
            text, gutter = self.unwrapper.strip_gutters(text)
        elif self.unwrapper.wrapped:
            text = self.unwrapper.strip_inner(text)
        self._feed_text(lineno, text, gutter, force)

    def _feed_text(self, lineno: int, text: str, gutter: Coords | None, force: bool) -> None:
        if len(self._drafts) >= REPEAT_CAP_AFTER and not force and self._capped(text):
            return
        pieces = self._memo.get(text)
        if pieces is None:
            for piece, p in self._pieces(text):
                self._piece(lineno, piece, p, gutter)
            return
        self._memo_hits += 1
        for piece, values in pieces:
            self._piece(lineno, piece, Parsed(*values), gutter)

    def _pieces(self, text: str) -> list[tuple[str, Parsed]]:
        """(speed) The logical pieces of a line's text and each one's parse, remembered
        per text (the parse as its fields, :data:`_PARSED_FIELDS`, taken before the
        builder and the year pass change it: a later line of the same text gets a fresh
        :class:`Parsed` of them): both depend on the text alone, and a line recurs (every
        rank logs the same message; a log pasted twice)."""
        out = []
        for piece in split_physical(text):
            if piece:
                if len(piece) > MAX_MESSAGE:
                    piece = piece[:MAX_MESSAGE] + f" …[{len(piece) - MAX_MESSAGE} chars cut]"
                out.append((piece, parse_line(piece)))
        if self._memo_pause:
            self._memo_pause -= 1
        elif len(text) <= _MEMO_TEXT:  # (a longer one is a dump, not a recurring message)
            memo = self._memo
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            if len(out) == 1:
                piece, p = out[0]
                memo[text] = ((piece, _PARSED_FIELDS(p)),)
            else:
                memo[text] = tuple((piece, _PARSED_FIELDS(p)) for piece, p in out)
            self._memo_stored += 1
            if self._memo_stored >= _MEMO_PROBE:
                if self._memo_hits * _MEMO_RARE < self._memo_stored:
                    self._memo_pause = _MEMO_PAUSE
                self._memo_hits = self._memo_stored = 0
        return out

    def _feed_wrapped(self, lineno: int, text: str, force: bool, wrap: tuple[int, bool]) -> None:
        """A hard-wrapped source: a line the wrap broke is joined with the lines after it
        that continue it (the next physical lines, up to one that is not full)."""
        gutter = None
        if self.unwrapper.gutters:
            text, gutter = self.unwrapper.strip_gutters(text)
        elif self.unwrapper.wrapped:
            text = self.unwrapper.strip_inner(text)
        body = text[:-1] if text[-1:] == "\r" else text
        if len(body) > wrap[0]:
            # a line wider than the wrap: the source was not wrapped after all
            self.unwrapper.wrap = None
            if self._pend is not None:
                self._flush_wrap()
            self._feed_text(lineno, text, gutter, force)
            return
        pend = self._pend
        if pend is not None:
            first, last, joined, g, f = pend
            # a full line that ends in spaces was padded to the width (it ended there)
            # unless the wrap broke inside an indentation: then the text goes on mid-line
            padded = joined[-2:] == "  "
            if lineno == last + 1 and not starts_record(text) and not (
                padded and text[:1] in (" ", "\t")
            ) and folded_before(self._pend_width, body, wrap):
                joined += text[:-1] if text[-1:] == "\r" else text
                self._pend = (first, lineno, joined, g, f or force)
                self._pend_width = len(body)
                if not _full(body, wrap):
                    self._flush_wrap()
                return
            self._flush_wrap()
        if _full(body, wrap):
            self._pend = (lineno, lineno, text[:-1] if text[-1:] == "\r" else text, gutter, force)
            self._pend_width = len(body)
            return
        self._feed_text(lineno, text, gutter, force)

    def _flush_wrap(self) -> None:
        pend, self._pend = self._pend, None
        if pend is not None:
            self._feed_text(pend[0], pend[2], pend[3], pend[4])

    def _capped(self, text: str) -> bool:
        """The repeat cap: True for a line only counted."""
        inner = text
        if self.unwrapper.counts and text[:1] not in (" ", "\t"):
            inner = unwrap_line(text)[0]  # a per-line wrapper hides the indentation
        if not inner or inner.isspace():
            return True  # a wrapped blank line: nothing, as a blank line is
        if inner[:1] in (" ", "\t"):
            if self._skipping:
                self._repeats += 1
                return True
            return False
        kind = _DIGITS.sub("", inner[:160])
        seen = self._kinds.get(kind, 0) + 1
        self._kinds[kind] = seen
        self._skipping = seen > REPEAT_KEEP
        if self._skipping:
            self._repeats += 1
            return True
        return False

    def feed_many(self, lines: Iterable[tuple[int, str]]) -> None:
        for lineno, text in lines:
            self.feed(lineno, text)

    def _piece(self, lineno: int, text: str, p: Parsed, gutter: Coords | None = None) -> None:
        """One logical piece of a line (cut to :data:`MAX_MESSAGE`) and its parse."""
        if p.unwrapped:
            counts = self.unwrapper.counts
            for k in p.unwrapped:
                counts[k] += 1
            if not p.message.strip() and p.grammar == "plain" and p.pid is None and (
                p.rank is None
            ):
                return  # a wrapper's own marker line (a CI section start, an empty quote)
        if gutter is not None and p.rank is None:
            p.rank = gutter.rank()
            p.rank_reason = "srun --label task prefix (global rank, read as TP)"
        last = self._last
        near = last is not None and lineno - self._last_line <= 2
        msg = p.message
        # the prefix kind is part of the stream: torch's "[rank0]:" lines are not the
        # continuation of SGLang's "[... TP0]" lines
        # a wrapper's process or pid (a compose service, journald's writer) separates
        # streams but does not make a line prefixed: its indented lines continue the record
        # before them, as in the unwrapped log
        key = (p.process or p.wrap_process, p.pid if p.pid is not None else p.wrap_pid,
               p.logger_file, p.rank, p.rank_reason)
        prefixed = p.grammar not in ("plain", "traceback", "faulthandler") or (
            p.rank is not None or p.pid is not None or p.process is not None
        )
        # 1. a prefixed line (vLLM/Ray/torch [rankN]: prefix) whose body continues a record:
        #    it joins the record of the same process/rank, however the streams interleave
        if prefixed and p.grammar != "progress":
            prev = self._by_stream.get(key)
            if prev is not None:
                if (msg[:1] in (" ", "\t") and msg.strip()) or msg.startswith(
                    ("During handling of the above", "The above exception was")
                ):
                    self._attach(prev, msg, lineno)
                    return
                if prev.in_traceback and prev.continuation and is_exception_line(msg):
                    self._attach(prev, msg, lineno)
                    prev.in_traceback = False
                    return
        # 2. the rest of a frame line a wrap broke (``File "...", line 3, in`` then
        #    ``__init__`` at column 0): joined to it (the text proves where it belongs)
        if not prefixed and self._frame_rest(msg, lineno):
            return
        # 3. a bare continuation line (indented, or a traceback's closing lines)
        if not prefixed and last is not None and near:
            if is_continuation_text(msg) and p.grammar != "progress":
                self._attach(last, msg, lineno)
                return
            if p.grammar == "plain" and last.continuation and _lost_indent_body(last, msg):
                self._attach(last, msg, lineno)
                return
            if last.in_traceback and last.continuation and is_exception_line(msg):
                self._attach(last, msg, lineno)
                last.in_traceback = False
                return
        if p.grammar == "plain" and p.ts is None and p.level is None:
            self._unknown_lines += 1
            if self._first_unknown is None:
                self._first_unknown = lineno
            self._last_unknown = lineno
        else:
            self._known_lines += 1
        d = Draft(source=self.name, line=lineno, raw=text, p=p)
        d.rank, d.rank_reason = p.rank, p.rank_reason
        if (
            p.grammar == "progress"
            and last is not None
            and near
            and not last.p.message.strip()
            and (last.p.process or last.rank)
        ):
            # vLLM prints a worker's prefix, then its tqdm bar on the next line
            p.process, p.pid = last.p.process, last.p.pid
            if last.rank is not None:
                d.rank = last.rank
                d.rank_reason = "the bar follows its process prefix on the line before"
        if "Traceback (most recent call last)" in p.message or p.grammar == "faulthandler":
            d.in_traceback = True
        self._drafts.append(d)
        self._last = d
        self._tail = None  # (a record's own line is no broken frame: its rest would come
        self._last_line = lineno  # as an unprefixed line only in a traceback's body)
        self._by_stream[key] = d

    def _attach(self, d: Draft, text: str, lineno: int) -> None:
        if len(d.continuation) < MAX_CONTINUATION:
            d.continuation.append(text)
            self._tail = d
        else:
            d.dropped += 1
        if "Traceback (most recent call last)" in text:
            d.in_traceback = True
        self._last_line = lineno

    def _frame_rest(self, msg: str, lineno: int) -> bool:
        """Joins ``msg`` to the line before it (the last line attached to a record, right
        above) when that is a frame line a wrap broke and ``msg`` its rest: the two make
        one whole frame line (``_FRAME_WHOLE``), with the space the break took (fold -s
        keeps it on the first piece; a paste may have stripped it) or none (a hard wrap
        mid-word). True when joined."""
        d = self._tail
        if d is None or lineno != self._last_line + 1 or not d.continuation:
            return False
        prev = d.continuation[-1]
        if not prev.lstrip().startswith("File") or _FRAME_WHOLE.fullmatch(prev):
            return False
        rest = msg.strip()
        if not rest or not _FRAME_REST.fullmatch(rest):
            return False
        for joined in (prev + rest, prev.rstrip() + " " + rest):
            if _FRAME_WHOLE.fullmatch(joined):
                d.continuation[-1] = joined
                self._last_line = lineno
                return True
        return False


def _lost_indent_body(last: Draft, msg: str) -> bool:
    """A traceback pasted without its indentation: the source line under a frame
    (``File "x.py", line 3, in f`` then ``return g()`` at column 0) and the caret line under
    that belong to the frame's record, as they would indented."""
    prev = last.continuation[-1]
    if prev.startswith('File "') and is_continuation_text(prev):
        return True  # the line right under an unindented frame: its source line
    stripped = msg.strip()
    return bool(stripped) and not stripped.strip("^~") and len(last.continuation) >= 2 and (
        last.continuation[-2].startswith('File "')
    )


def _full(body: str, wrap: tuple[int, bool]) -> bool:
    """A physical line the wrap may have broken (as wide as the wrap, padded or not; or a
    ``fold -s`` piece): the next line decides (:meth:`SourceParser._feed_wrapped`).
    A ``fold -s`` piece may end in several spaces: the wrap broke right after an
    indentation (a caret line's, a source line's under a long prefix), and the next line,
    its rest, is a word too long to have fitted (:func:`folded_before`)."""
    if len(body) == wrap[0] or wrap_breaks(body, wrap):
        return True
    return wrap[1] and body[-2:] == "  " and bool(body.strip())


def starts_record(text: str) -> bool:
    """The line starts a record of its own (a stamp, a level, a process or rank prefix, a
    traceback header): it does not continue a hard-wrapped line before it."""
    return _starts(text, bars=False)


def _starts_or_bar(text: str) -> bool:
    """:func:`starts_record`, and a progress bar counts as a start (deciding whether a
    source was wrapped: repeated bars as wide as the widest line are no wrap)."""
    return _starts(text, bars=True)


def _starts(text: str, *, bars: bool) -> bool:
    if not text.strip():
        return True
    if text.startswith(("Traceback (", "During handling", "The above exception")):
        return True
    p = parse_line(text)
    if any(k != "html" for k in p.unwrapped):
        return True  # a wrapper's prefix (a stamp, a compose service) starts output lines
    if bars and p.grammar == "progress":
        return True
    if p.grammar in ("plain", "progress", "traceback"):  # "traceback": named anywhere
        return p.ts is not None or p.level is not None or p.pid is not None or (
            p.rank is not None
        )
    return True


def resolve_years(
    drafts: list[Draft], *, year: int | None, ref: dt.datetime | None
) -> str | None:
    """Settle placeholder years (vLLM, glog) and dates (SGLang 2024 time-only) in place.

    With ``year`` the first stamp gets that year and a month going back (Dec -> Jan) moves
    to the next. Without it the last stamp is anchored at ``ref`` (the latest full date in
    the source, else the file's mtime) and earlier ones walk back across rollovers.
    Returns a note about the inference, or None when nothing needed it."""
    note = _resolve_years(drafts, year=year, ref=ref)
    shifted = align_wrapper_clock(drafts)
    if shifted is not None:
        note = f"{note}; {shifted}" if note else shifted
    return note


_ZONE_SLACK_S = 120.0


def align_wrapper_clock(drafts: Sequence[Draft]) -> str | None:
    """Lines that only a wrapper dated (a container runtime's or CI runner's stamp, often
    UTC) are put on the framework's clock (often local time): they move by the time zone
    between the two stamps on the lines that carry both (the median difference, when it
    is a whole quarter hour give or take two minutes and 80% of the lines agree). Without
    that, one wrapper-dated line hours away from the framework's times reads as hours of
    silence. Returns a note, or None when nothing moved."""
    offsets = [
        (d.p.ts - w).total_seconds()
        for d in drafts
        if (w := d.p.wrapper_ts) is not None and d.p.ts is not None and d.p.ts is not w
    ]
    if not offsets:
        return None
    offsets.sort()
    median = offsets[len(offsets) // 2]
    # a time zone: a whole quarter hour within a day's zones, the stamps a moment apart
    # (the runtime stamps a line when it reads it); anything else is left alone (stamps of
    # unrelated runs pasted together, a clock that drifted)
    zone = round(median / 900) * 900
    if zone == 0 or abs(zone) > 14 * 3600 or abs(median - zone) > _ZONE_SLACK_S:
        return None
    near = sum(1 for o in offsets if abs(o - zone) <= _ZONE_SLACK_S)
    if near * 5 < len(offsets) * 4:
        return None
    shift = dt.timedelta(seconds=zone)
    n = 0
    for d in drafts:
        w = d.p.wrapper_ts
        if w is not None and d.p.ts is w:
            d.p.ts = d.p.wrapper_ts = w + shift
            n += 1
    if not n:
        return None
    return (
        f"{n} lines dated only by a wrapper's stamp moved {_signed(zone)} onto the "
        "framework's clock (the time zone between the two stamps on the lines with both)"
    )


def _signed(seconds: float) -> str:
    sign = "+" if seconds >= 0 else "-"
    s = abs(seconds)
    if s >= 3600:
        return f"{sign}{s / 3600:.4g} h"
    if s >= 60:
        return f"{sign}{s / 60:.4g} min"
    return f"{sign}{s:.3g} s"


def _resolve_years(
    drafts: list[Draft], *, year: int | None, ref: dt.datetime | None
) -> str | None:
    yl = [d for d in drafts if d.p.ts is not None and d.p.yearless]
    dl = [d for d in drafts if d.p.ts is not None and d.p.dateless]
    if not yl and not dl:
        return None
    full = [d.p.ts for d in drafts if d.p.ts is not None and not (d.p.yearless or d.p.dateless)]
    anchor: dt.datetime | None = max(full) if full else ref
    note: str | None = None
    if yl:
        if year is not None:
            cur, prev_m = year, None
            for d in yl:
                ts = d.p.ts
                assert ts is not None
                if prev_m is not None and ts.month < prev_m - 6:
                    cur += 1
                prev_m = ts.month
                d.p.ts = _with_year(ts, cur)
            note = f"year {year} given for timestamps that have none"
        else:
            if anchor is None:
                anchor = dt.datetime.now()
            last = yl[-1].p.ts
            assert last is not None
            cur = anchor.year
            if (last.month, last.day) > (anchor.month, anchor.day + 1):
                cur -= 1
            nxt_m: int | None = None
            for d in reversed(yl):
                ts = d.p.ts
                assert ts is not None
                if nxt_m is not None and ts.month > nxt_m + 6:
                    cur -= 1
                nxt_m = ts.month
                d.p.ts = _with_year(ts, cur)
            how = "the latest full date in it" if full else "its modification time"
            note = f"year of year-less timestamps inferred from {how} ({anchor:%Y-%m-%d})"
    if dl:
        base = (anchor or dt.datetime.now()).date()
        days = 0
        nxt: dt.datetime | None = None
        for d in reversed(dl):
            ts = d.p.ts
            assert ts is not None
            if nxt is not None and (ts - nxt).total_seconds() > 12 * 3600:
                days += 1
            nxt = ts
            day = base - dt.timedelta(days=days)
            d.p.ts = ts.replace(year=day.year, month=day.month, day=day.day)
        note = (note + "; " if note else "") + f"date of time-only stamps taken as {base}"
    return note


def _with_year(ts: dt.datetime, year: int) -> dt.datetime:
    if ts.year != PLACEHOLDER_YEAR:
        return ts
    try:
        return ts.replace(year=year)
    except ValueError:  # Feb 29 in a non-leap year
        return ts.replace(year=year, day=28)


def ranks_from_paths(names: Sequence[str]) -> dict[str, RankId]:
    """Per-rank files: each source name's rank, when at least two sources' names name
    distinct ranks (``rank0.log``, ``rank1.log``); {} otherwise (a lone ``dsv3-tp8.log``
    names a size, not a rank)."""
    found = {n: rank_from_path(n) for n in names}
    ranks = {n: r for n, r in found.items() if r is not None}
    if len(ranks) < 2 or len(set(ranks.values())) != len(ranks):
        return {}
    return ranks


def assign_path_ranks(drafts: Sequence[Draft], names: Sequence[str]) -> str | None:
    """Give the rank-less lines of per-rank files the rank their file name names (lines
    with a rank of their own keep it; HTTP-server lines stay rank-less). Returns a note,
    or None when the file names name no ranks."""
    ranks = ranks_from_paths(names)
    if not ranks:
        return None
    n = 0
    for d in drafts:
        r = ranks.get(d.source)
        if r is None or d.rank is not None:
            continue
        if d.p.grammar == "uvicorn" or d.p.process in ("APIServer", "uvicorn"):
            continue
        d.rank, d.rank_reason = r, f"the file name {d.source.rsplit('/', 1)[-1]} names {r.label}"
        n += 1
    if not n:
        return None
    return f"{n} lines given the rank their file name names ({len(ranks)} per-rank files)"


def apply_layout(
    drafts: Sequence[Draft], tp: object, pp: object, dp: object = None
) -> str | None:
    """Rank coordinates that need the layout to be read right.

    - Global ranks (torch ``[rank5]:``, vLLM ``(VllmWorker rank=5 ..)``, torchrun / srun
      labels) were read as TP; with pipeline parallelism they are ``pp_rank * tp + tp_rank``
      (the order of torch.distributed's world in vLLM's and SGLang's parallel state), so
      rank 5 of tp=4 pp=2 is PP1 TP1, not TP5.
    - vLLM with dp > 1 and tp = pp = 1: each ``(EngineCore_DPn pid=..)`` process runs its
      model itself (no worker processes), so its lines are rank DPn TP0.

    Returns a note when a rank was re-read."""
    notes: list[str] = []
    tp_n = tp if isinstance(tp, int) and tp > 0 else None
    pp_n = pp if isinstance(pp, int) and pp > 0 else 1
    dp_n = dp if isinstance(dp, int) and dp > 0 else 1
    if tp_n is not None and pp_n > 1:
        n = 0
        for d in drafts:
            r = d.rank
            if not d.p.global_rank or r is None or r.tp is None or r.pp is not None:
                continue
            if d.rank is not d.p.rank or r.tp >= tp_n * pp_n:
                continue  # attributed otherwise, or not a rank of this layout
            d.rank = RankId(node=r.node, dp=r.dp, pp=r.tp // tp_n, tp=r.tp % tp_n, ep=r.ep)
            if d.rank_reason != "tag":
                d.rank_reason = f"global rank {r.tp} of tp={tp_n} pp={pp_n}"
            n += 1
        if n:
            notes.append(f"global ranks of {n} lines read as PP x TP (tp={tp_n}, pp={pp_n})")
    if tp_n == 1 and pp_n == 1 and dp_n > 1:
        n = 0
        for d in drafts:
            rep = d.p.replica
            if d.rank is None and rep is not None and rep < dp_n:
                d.rank = RankId(dp=rep, tp=0)
                d.rank_reason = f"{d.p.process} runs the model itself (tp=pp=1): DP{rep} TP0"
                n += 1
        if n:
            notes.append(f"{n} lines of vLLM engine cores read as their DP rank (tp=pp=1)")
    return "; ".join(notes) or None


def freeze(d: Draft) -> Record:
    cont = tuple(d.continuation)
    if d.dropped:
        cont += (f"… {d.dropped} more continuation lines",)
    p = d.p
    return Record(
        source=d.source,
        line=d.line,
        message=p.message,
        raw=d.raw,
        ts=p.ts,
        rank=d.rank,
        rank_reason=d.rank_reason,
        process=p.process or p.wrap_process,
        pid=p.pid if p.pid is not None else p.wrap_pid,
        host=p.host,
        level=p.level,
        logger_file=p.logger_file,
        grammar=p.grammar,
        continuation=cont,
    )
