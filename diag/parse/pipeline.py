"""The one read path: bytes -> lines -> candidates -> record drafts (+ serving columns).

:func:`read_sources` is what the analyser calls, once. Per source, the bytes come in
chunks of whole lines (:func:`diag.parse.reader.iter_chunks`, 8 MiB); each chunk then
goes one of two ways, with the same result:

- **line by line** (inputs under :data:`PREFILTER_MIN_BYTES`): every line is parsed;
- **prefilter** (larger inputs): one compiled pass (:class:`diag.parse.prefilter.Matcher`)
  says which lines are candidates, and only those, plus each rank's first serving line
  and last line, are parsed.

On both paths:

- the serving figures (:mod:`diag.parse.serving`) are read from the whole text of every
  chunk, so spec-decode and throughput findings do not depend on the path;
- one repeat cap (:class:`RepeatCap`) spans all inputs: past the first
  :data:`REPEAT_CAP_AFTER` lines of the input, a candidate line whose kind (its first 160
  characters without digits) was parsed :data:`REPEAT_KEEP` times is only counted, and so
  are the indented lines after it; once :data:`REPEAT_BUDGET` lines were parsed under the
  cap, :data:`REPEAT_KEEP_LATE` times (a log of thousands of kinds stays bounded; a note
  says how many lines that cut). Only candidate lines are capped (the bulk is never
  parsed on the prefilter path), so on the line-by-line path the matcher is run on the
  chunks past the first :data:`REPEAT_CAP_AFTER` lines too.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count, repeat
from typing import Any

from diag.errors import InputError
from diag.parse import reader
from diag.parse.prefilter import Lines
from diag.parse.reader import Source, iter_chunks, utf16_codec
from diag.parse.records import Draft, SourceParser, assign_path_ranks, resolve_years
from diag.parse.serving import (
    SPEC_MARKERS,
    ServingFigures,
    present_labels,
    scan_chunk,
    spec_positions,
)
from diag.parse.serving import labels as serving_labels
from diag.parse.text import decode

__all__ = [
    "PREFILTER_MIN_BYTES",
    "REPEAT_BUDGET",
    "REPEAT_CAP_AFTER",
    "REPEAT_KEEP",
    "REPEAT_KEEP_LATE",
    "Collected",
    "RepeatCap",
    "read_sources",
]

# Inputs at least this large stream through the prefilter; smaller ones are read line by line.
PREFILTER_MIN_BYTES = 1 << 20
REPEAT_CAP_AFTER = 20_000  # lines of the whole input before repeated kinds are capped
REPEAT_KEEP = 200  # candidate lines of one kind parsed once capped (the rest only counted)
# Candidate lines parsed under the cap (all kinds) after which a kind is parsed only
# REPEAT_KEEP_LATE times: a log of thousands of kinds of line stays bounded too
REPEAT_BUDGET = 10_000
REPEAT_KEEP_LATE = 3
# The prefilter parses a source's first and last lines whatever they hold (banners, the
# args line, the last words before a hang): the checks that read the log's tail see the
# same records on both paths.
HEAD_LINES = 100
TAIL_LINES = 200
_DIGITS = re.compile(r"[0-9]+")

ProgressFn = Callable[[int, int], None]
# (speed) what the analysis will ask of some drafts, worked out ahead (see _Run.idle)
WarmFn = Callable[[Sequence[Draft]], None]
_WARM_BATCH = 256  # drafts per call (a few ms: a chunk that comes meanwhile waits no longer)

# Labels whose figures come from one (the last) batch line of a chunk: a chunk with no
# other label is not decoded whole for the serving columns.
_SAMPLED_ONLY = frozenset({
    "Decode batch", "Prefill batch", '"POST /', '"GET /', '"HEAD /', '"PUT /', '"DELETE /',
    '"OPTIONS /', '"PATCH /', "NCCL INFO", " token usage: ", "#running-req: ", "#queue-req: ",
    "gen throughput (token/s): ",
})


@dataclass(slots=True)
class Collected:
    """What reading all sources gathered."""

    drafts: list[Draft] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    undecodable: int = 0
    nul_bytes: int = 0
    lines: int = 0
    serving: ServingFigures = field(default_factory=ServingFigures)
    repeats: int = 0
    candidates: int = 0  # lines the prefilter handed to the parser
    engine: str = "lines"  # how lines were chosen: lines | hyperscan | polars


class RepeatCap:
    """The repeat cap over every source of one run (see the module docstring). A line's
    kind is read from its bytes (the first 160, digits deleted), on both paths. Past
    :data:`REPEAT_BUDGET` lines parsed under the cap (all kinds together), a kind is
    parsed only :data:`REPEAT_KEEP_LATE` times (``late`` counts the lines that cut).

    With diag's compiled scanner, decided per chunk in one compiled pass (``dg_cap``:
    :meth:`split_lines`'s loop over the kinds' 64-bit hashes, counted in one C table for
    the run). Without it, in columns: each head line's kind is cut and digit-stripped by
    C-level ``map`` calls and numbered through one dict (a kind's number is the first one
    handed out for it); how many times each kind was seen before a line follows from a
    sort of those numbers; whether an indented line follows a dropped head from a running
    maximum; the point where the budget is spent from a cumulative sum (past it the
    chunk's rest is decided again with the late limit). The result is that of
    :meth:`split_lines`, the line-by-line loop both replace (tests compare them)."""

    __slots__ = ("count", "counter", "ids", "late", "native", "next_id", "parsed", "skipping")

    def __init__(self, native: Any = None) -> None:
        """``native``: diag's compiled scanner (or :func:`diag.parse.native.load`, called
        on first use): kinds are then told apart by a 64-bit hash computed in C, not by
        their bytes."""
        self.native = native
        self.ids: dict[bytes, int] = {}  # kind -> its number
        self.count: dict[int, int] = {}  # kind number -> lines of that kind seen
        self.counter: Any = None  # the same in C (compiled scanner: kinds are hashes)
        self.next_id = 0
        self.skipping = False
        self.parsed = 0  # candidate lines parsed past the first REPEAT_CAP_AFTER lines
        self.late = 0  # lines counted only because the budget was spent

    def split(
        self, g0: int, chunk: bytes | bytearray, lines: Lines, idx: Any
    ) -> tuple[list[int], Any]:
        """The candidate lines ``idx`` (numpy) of ``chunk`` (first line = input line
        ``g0 + 1``) that are parsed (a list), and those only counted (a sorted numpy
        int64 array: on a log of one repeated line that is every line, never a set)."""
        import numpy as np

        none = np.empty(0, dtype=np.int64)
        if not len(idx):
            return [], none
        free = int((idx < REPEAT_CAP_AFTER - g0).sum()) if g0 < REPEAT_CAP_AFTER else 0
        if free == len(idx):
            return idx.tolist(), none
        head_free = idx[:free].tolist()
        # the candidates' bounds and kind hashes, when the read-ahead thread computed them
        pre = lines.cand_kinds if idx is lines.candidates else None
        idx = idx[free:]
        n = len(idx)
        if pre is not None:
            starts, ends = lines.cand_starts[free:], lines.cand_ends[free:]
        else:
            starts, ends = lines.bounds_np(idx)
        if callable(self.native):
            self.native = self.native()
        if self.native is not None:
            kept, dropped = self._split_native(chunk, idx, starts, ends, pre, free)
            return head_free + kept, dropped
        arr = np.frombuffer(chunk, dtype=np.uint8)
        empty = starts == ends
        first = arr[np.minimum(starts, max(len(arr) - 1, 0))] if len(arr) else (
            np.zeros(n, dtype=np.uint8))
        indented = ~empty & ((first == 32) | (first == 9))
        head = ~empty & ~indented
        # (without the scanner: kinds are told apart by their bytes, numbered through a
        # dict; bytes: a kind is a dict key; a chunk of few candidates is not copied whole)
        data = bytes(chunk) if isinstance(chunk, bytearray) and n > 256 else chunk
        ctl = np.flatnonzero(head & ((first == 13) | (first == 11) | (first == 12)))
        for j in ctl.tolist():  # a line of only control white space: kept, like a blank
            a = int(starts[j])
            if not data[a : min(int(ends[j]), a + 160)].strip():
                head[j] = False
        hpos = np.flatnonzero(head)
        seen = np.zeros(n, dtype=np.int64)
        if len(hpos):
            hs = starts[hpos]
            he = np.minimum(ends[hpos], hs + 160)
            cut: Iterator[Any] = map(data.__getitem__, map(slice, hs.tolist(), he.tolist()))
            raws: Iterator[bytes] = map(bytes, cut) if isinstance(data, bytearray) else cut
            kinds = map(bytes.translate, raws, repeat(None), repeat(b"0123456789"))
            ids = np.fromiter(map(self.ids.setdefault, kinds, count(self.next_id)),
                              dtype=np.int64, count=len(hpos))
            self.next_id += len(hpos)
            uniq, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
            inv = inv.reshape(-1)
            counts = self.count
            prior = np.array([counts.get(u, 0) for u in uniq.tolist()], dtype=np.int64)
            order = np.argsort(inv, kind="stable")
            group0 = np.concatenate(([0], np.cumsum(cnt)[:-1]))
            rank = np.empty(len(hpos), dtype=np.int64)
            rank[order] = np.arange(len(hpos)) - group0[inv[order]]
            seen[hpos] = prior[inv] + rank + 1
            for u, total in zip(uniq.tolist(), (prior + cnt).tolist(), strict=True):
                counts[u] = total
        pos = np.arange(n)
        lasthead = np.maximum.accumulate(np.where(head, pos, -1))
        ind_pos = np.flatnonzero(indented)

        def decide(limit: Any) -> tuple[Any, Any]:
            drop = head & (seen > limit)
            # an indented line after a dropped head is dropped too (unless blank)
            state = np.where(lasthead >= 0, drop[np.maximum(lasthead, 0)], self.skipping)
            for j in ind_pos[state[ind_pos]].tolist():
                if data[int(starts[j]) : int(ends[j])].strip():
                    drop[j] = True
            kept = ~drop & (head | indented)
            return drop, kept

        if self.parsed >= REPEAT_BUDGET:
            limit: Any = REPEAT_KEEP_LATE
            drop, kept = decide(limit)
        else:
            drop, kept = decide(REPEAT_KEEP)
            cum = self.parsed + np.cumsum(kept)
            spent = np.flatnonzero(head & kept & (cum >= REPEAT_BUDGET))
            if len(spent):
                limit = np.where(pos <= spent[0], REPEAT_KEEP, REPEAT_KEEP_LATE)
                drop, kept = decide(limit)
        self.late += int((drop & head & (seen <= REPEAT_KEEP)).sum())
        self.parsed += int(kept.sum())
        if len(hpos):
            self.skipping = bool(drop[hpos[-1]])
        return head_free + idx[~drop].tolist(), idx[drop].astype(np.int64, copy=False)

    def _split_native(
        self, chunk: bytes | bytearray, idx: Any, starts: Any, ends: Any, pre: Any, free: int
    ) -> tuple[list[int], Any]:
        """:meth:`split` past the free lines, in one compiled pass (``dg_cap``: the loop of
        :meth:`split_lines` over the kinds' hashes); the kept lines after the free ones
        (a list) and the dropped ones (numpy int64)."""
        import numpy as np

        from diag.parse.native import Counter, cap

        nat = self.native
        # (the hash reads a line's first 160 bytes at most)
        ids = pre[free:] if pre is not None else nat.kinds(chunk, starts, ends)
        if self.counter is None:
            self.counter = Counter(nat)
        state = [int(self.skipping), self.parsed, self.late]
        drop = cap(self.counter, chunk, starts, ends, ids, state, REPEAT_KEEP,
                   REPEAT_KEEP_LATE, REPEAT_BUDGET)
        self.skipping, self.parsed, self.late = bool(state[0]), state[1], state[2]
        return idx[~drop].tolist(), idx[drop].astype(np.int64, copy=False)

    def prepare(self, chunk: bytes | bytearray, lines: Lines) -> Lines:
        """``lines`` with its candidates' bounds and kind hashes (compiled scanner only;
        else ``lines`` as it is). Depends on the chunk alone, not on the cap's state: the
        read-ahead thread calls it, so that :meth:`split` finds them done."""
        import dataclasses

        if callable(self.native):
            self.native = self.native()
        nat = self.native
        cands = lines.candidates
        if nat is None or not len(cands):
            return lines
        starts, ends = lines.bounds_np(cands)
        kinds = nat.kinds(chunk, starts, ends)  # (the hash reads 160 bytes at most)
        return dataclasses.replace(lines, cand_starts=starts, cand_ends=ends, cand_kinds=kinds)

    # the line-by-line loop the columns above replace (the tests' reference)
    @staticmethod
    def split_lines(
        state: dict[str, Any], g0: int, chunk: bytes | bytearray, lines: Lines, idx: Any
    ) -> tuple[list[int], set[int]]:
        """The same decision, one line at a time; ``state``: kinds (dict), skipping,
        parsed, late (updated)."""
        keep: list[int] = []
        dropped: set[int] = set()
        if not len(idx):
            return keep, dropped
        free = int((idx < REPEAT_CAP_AFTER - g0).sum()) if g0 < REPEAT_CAP_AFTER else 0
        keep = idx[:free].tolist()
        idx = idx[free:]
        if not len(idx):
            return keep, dropped
        starts, ends = lines.bounds(idx)
        data = bytes(chunk)
        kinds: dict[bytes, int] = state["kinds"]
        skipping, parsed, late = state["skipping"], state["parsed"], state["late"]
        limit = REPEAT_KEEP if parsed < REPEAT_BUDGET else REPEAT_KEEP_LATE
        for i, a, b in zip(idx.tolist(), starts, ends, strict=True):
            if a == b:
                keep.append(i)
                continue
            c = data[a]
            if c == 32 or c == 9:  # noqa: PLR1714
                if skipping and data[a:b].strip():
                    dropped.add(i)
                else:
                    keep.append(i)
                    parsed += 1
                continue
            raw = data[a : b if b - a <= 160 else a + 160]
            if c in (13, 11, 12) and not raw.strip():
                keep.append(i)
                continue
            kind = raw.translate(None, b"0123456789")
            seen = kinds.get(kind, 0) + 1
            kinds[kind] = seen
            skipping = seen > limit
            if skipping:
                dropped.add(i)
                if seen <= REPEAT_KEEP:
                    late += 1
            else:
                keep.append(i)
                parsed += 1
                if parsed >= REPEAT_BUDGET:
                    limit = REPEAT_KEEP_LATE
        state.update(skipping=skipping, parsed=parsed, late=late)
        return keep, dropped


class _Run:
    """State of one read over all sources."""

    def __init__(
        self, literals: Sequence[str] | Callable[[], Sequence[str]], col: Collected,
        warm: WarmFn | None = None,
    ) -> None:
        self.literals = literals
        self.col = col
        # (speed) the drafts handed to ``warm`` while the parsing waits for a chunk: the
        # source being parsed and how many of its drafts were handed over
        self.warm = warm
        self.parser: SourceParser | None = None
        self.warmed = 0
        # (speed) set by the parsing thread when it finds no chunk waiting: the read-ahead
        # thread then leaves its next chunk's matcher pass to it (see _chunks)
        self.hungry = False
        from diag.parse import native

        self.cap = RepeatCap(native.load)
        self.glines = 0  # lines of earlier chunks (all sources)
        # prefilter path: chunks whose in-order stage (:meth:`settle`) is done, and their
        # lines (the cap's position)
        self.settled = 0
        self.settled_lines = 0
        self._matcher: object | None = None

    @property
    def matcher(self):  # type: ignore[no-untyped-def]  # -> prefilter.Matcher
        from diag.parse.prefilter import Matcher

        if self._matcher is None:
            lits = self.literals() if callable(self.literals) else self.literals
            from diag.parse.prefilter import BULK_KINDS, TRACEBACK_LABEL

            labels = tuple(dict.fromkeys((*serving_labels(), *BULK_KINDS, TRACEBACK_LABEL)))
            self._matcher = Matcher(lits, labels, present_labels)
            self.col.engine = self._matcher.engine
        return self._matcher

    def idle(self) -> bool:
        """(speed) Called by the parsing thread when it would wait for the next chunk:
        marks it hungry (the read-ahead thread then leaves the matcher pass of the next
        chunk it reads to this thread: :meth:`walk`) and hands the next
        :data:`_WARM_BATCH` drafts of the source being parsed to ``warm`` (which works
        out, ahead, what the analysis will ask of them); False when there were none
        left to hand over."""
        self.hungry = True
        sp = self.parser
        if self.warm is None or sp is None:
            return False
        batch = sp.parsed(self.warmed, self.warmed + _WARM_BATCH)
        if not batch:
            return False
        self.warmed += len(batch)
        self.warm(batch)
        return True

    def walk(self, chunk: bytes | bytearray, pf: _Pf) -> None:
        """The matcher's pass over a chunk whose read-ahead thread left it to the parsing
        thread (which waited: the two threads then run the pass over two chunks at once,
        on two cores)."""
        if pf.newlines is None:
            raise RuntimeError("a chunk was left to the parsing thread without its newlines")
        nl, flags = pf.newlines
        pf.got, pf.newlines = self.matcher.lines(chunk, nl, flags), None

    def _bytes_stats(self, chunk: bytes | bytearray, scanner: Any = None,
                     flags: int = 3, counts: tuple[int, int] | None = None) -> None:
        """NUL bytes and invalid UTF-8 in ``chunk`` (counted alike on both paths; see
        :func:`_bytes_counts`); ``counts``: those two, when counted ahead."""
        nul, bad = _bytes_counts(chunk, scanner, flags) if counts is None else counts
        self.col.nul_bytes += nul
        self.col.undecodable += bad

    def ahead(self, chunk: bytes | bytearray, lines: Lines) -> Lines:
        """``lines`` with the passes over ``chunk`` that depend on the chunk alone done
        (the cap's kind hashes, :meth:`RepeatCap.prepare`; NUL and invalid UTF-8 bytes):
        the read-ahead thread does them while the parsing is behind it (so that both
        cores stay busy whichever thread is the slower on a log); else the parsing thread
        does them, with the same result."""
        import dataclasses

        from diag.parse import native

        lines = self.cap.prepare(chunk, lines)
        return dataclasses.replace(
            lines, byte_counts=_bytes_counts(chunk, native.load(), lines.byte_flags))

    def counted(self, chunk: bytes | bytearray, lines: Lines) -> Lines:
        """``lines`` with the chunk's NUL and invalid UTF-8 bytes counted (the read-ahead
        thread does it for every chunk: only a chunk with a byte past ASCII or a NUL is
        looked at, mostly a real log's, where the parsing is the slower thread)."""
        import dataclasses

        from diag.parse import native

        if lines.byte_counts is not None or not lines.byte_flags:
            return lines
        return dataclasses.replace(
            lines, byte_counts=_bytes_counts(chunk, native.load(), lines.byte_flags))

    # -- line by line --------------------------------------------------------------

    def full_chunk(
        self, name: str, sp: SourceParser, chunk: bytes | bytearray, lineno: int
    ) -> tuple[int, int]:
        """Feed every line of ``chunk``; returns (lines, lines capped)."""
        text, _ = decode(chunk)
        self._bytes_stats(chunk)
        scan_chunk(self.col.serving, chunk, name, lineno)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        dropped: set[int] = set()
        if self.glines + len(lines) > REPEAT_CAP_AFTER:
            found = self.matcher.lines(chunk)
            dropped = set(self.cap.split(self.glines, chunk, found, found.candidates)[1].tolist())
        capped = len(dropped)
        for i, line in enumerate(lines):
            if i not in dropped:
                sp.feed(lineno + i + 1, line, force=True)
        self.glines += len(lines)
        return len(lines), capped

    # -- prefilter -----------------------------------------------------------------

    def settle(self, pf: _Pf, chunk: bytes | bytearray) -> tuple[dict[int, str], Any, list[int]]:
        """The in-order stage of a chunk on the prefilter path (done once, by the thread
        that gets to it first, always in chunk order: the repeat cap's and the source's
        timeline state go from chunk to chunk): (the kept candidates' text by line index,
        the dropped candidates (sorted numpy int64), the lines the timeline and the
        spec-decode figures need). The read-ahead thread does it for the chunk it just
        matched while the parsing is behind it and the chunk before is done; else the
        parsing thread does it, with the same result."""
        if pf.done is None:
            if pf.seq != self.settled:
                raise RuntimeError("prefilter chunks settled out of order")
            pf.done = self._stage(pf, chunk)
            self.settled += 1
        return pf.done

    def _stage(self, pf: _Pf, chunk: bytes | bytearray) -> tuple[dict[int, str], Any, list[int]]:
        from diag.parse.prefilter import SourceScan

        scan, lines = pf.scan, pf.lines
        assert isinstance(scan, SourceScan)
        body = scan.traceback_body(chunk, lines)
        kept, dropped = self.cap.split(self.settled_lines, chunk, lines, lines.candidates)
        if body:  # (no candidates: kept, as the full parse keeps such a line)
            kept = sorted({*kept, *body})
        keep: dict[int, str] = {}
        if kept:
            starts, ends = lines.bounds(self._np.asarray(kept, dtype=self._np.int64))
            for i, a, b in zip(kept, starts, ends, strict=True):
                keep[i] = decode(chunk[a:b])[0]
        more = scan.timeline_lines(chunk, lines, keep.values(), dropped)
        present = lines.present
        if any(m in present for m in SPEC_MARKERS):
            spec = spec_positions(chunk, present, lines.label_at)
            if spec:
                more += lines.index(spec).tolist()
        self.settled_lines += len(lines)
        return keep, dropped, more

    def pf_chunk(
        self, name: str, sp: SourceParser, pf: _Pf, chunk: bytes | bytearray,
        lineno: int, tail_from: int | None,
    ) -> tuple[int, int]:
        """Feed the candidate and timeline lines of ``chunk`` (``pf``: its lines, from
        the matcher, and its stage, :meth:`settle`) and those of the source's head and,
        from line index ``tail_from`` on, its tail; returns (lines, capped)."""
        from diag.parse import native

        lines = pf.lines
        self._bytes_stats(chunk, native.load(), lines.byte_flags, lines.byte_counts)
        scan_chunk(self.col.serving, chunk, name, lineno, lines.present, lines.nl,
                   lines.label_at)
        keep, dropped, more = self.settle(pf, chunk)
        n = len(lines)
        more += range(min(n, max(0, HEAD_LINES - lineno)))
        if tail_from is not None:
            more += range(max(0, tail_from), n)
        if len(dropped) and more:
            # (dropped: sorted) the timeline's lines that the cap dropped stay dropped
            np = self._np
            want = np.asarray(more, dtype=np.int64)
            at = np.minimum(np.searchsorted(dropped, want), len(dropped) - 1)
            more = want[dropped[at] != want].tolist()
        for i in more:
            if i not in keep:
                keep[i] = decode(chunk[lines.start(i) : lines.end(i)])[0]
        for i in sorted(keep):
            sp.feed(lineno + i + 1, keep[i], force=True)
        self.col.candidates += len(keep)
        self.glines += n
        return n, len(dropped)

    @property
    def _np(self):  # type: ignore[no-untyped-def]
        import numpy as np

        return np


def _bytes_counts(chunk: bytes | bytearray, scanner: Any = None, flags: int = 3) -> tuple[int, int]:
    """(NUL bytes, invalid UTF-8 bytes) in ``chunk``; ``scanner``: diag's compiled
    scanner, which looks for a NUL and tells valid UTF-8 without decoding (and lets the
    other thread run meanwhile); ``flags``: what its newline pass saw
    (:attr:`Lines.byte_flags`: no NUL, no byte past ASCII, when clear; valid UTF-8, when
    its bit 2 is set), so plain ASCII or text known valid is not looked at again."""
    nul = bad = 0
    if scanner is not None:
        if flags & 1 and scanner.find(chunk, b"\x00") >= 0:
            nul = chunk.count(b"\x00")
        if flags & 2 and not flags & 4 and not scanner.utf8_valid(chunk):
            bad = decode(chunk)[1]
        return nul, bad
    if b"\x00" in chunk:
        nul = chunk.count(b"\x00")
    if not chunk.isascii():
        bad = decode(chunk)[1]
    return nul, bad


@dataclass(slots=True)
class _Pf:
    """A chunk on the prefilter path, as the read-ahead thread hands it over."""

    got: Lines | None  # its lines (None: the matcher's pass is left to the parsing thread)
    scan: Any  # its source's SourceScan
    seq: int  # its place among all the run's chunks
    done: tuple[dict[int, str], Any, list[int]] | None = None  # its stage (_Run.settle)
    # (got None) the chunk's newline offsets and byte flags, for that pass
    newlines: tuple[Any, int] | None = None

    @property
    def lines(self) -> Lines:
        if self.got is None:
            raise RuntimeError("a chunk's lines were used before its matcher pass")
        return self.got

    @lines.setter
    def lines(self, value: Lines) -> None:
        self.got = value


class _SourceRead:
    """Reading one source: its chunks go through the prefilter or line by line."""

    def __init__(self, run: _Run, name: str, sp: SourceParser, use_pf: bool) -> None:
        self.run, self.name, self.sp, self.use_pf = run, name, sp, use_pf
        self.lineno = 0
        self.repeats = 0
        self.primed = False

    def step(self, chunk: bytes | bytearray, lines: object, n_lines: int,
             after: int | None) -> None:
        """Parse one chunk (``lines``: its :class:`_Pf` on the prefilter path); ``after``:
        lines after it in the source (None: many)."""
        if self.use_pf:
            if not self.primed:
                self.sp.prime(decode(chunk[: 64 << 10])[0].split("\n")[:60])
                self.primed = True
            tail = None
            if after is not None and after < TAIL_LINES:
                tail = n_lines - (TAIL_LINES - after)
            assert isinstance(lines, _Pf)
            n, capped = self.run.pf_chunk(self.name, self.sp, lines, chunk, self.lineno, tail)
        else:
            n, capped = self.run.full_chunk(self.name, self.sp, chunk, self.lineno)
        self.lineno += n
        self.repeats += capped


def read_sources(
    sources: Sequence[Source],
    *,
    year: int | None,
    literals: Sequence[str] | Callable[[], Sequence[str]],
    progress: ProgressFn | None = None,
    prefilter: bool | None = None,
    warm: WarmFn | None = None,
) -> Collected:
    """Read every source into record drafts, notes and the serving figures.

    ``literals``: the candidate literals (:func:`diag.parse.prefilter.candidate_literals`),
    or a function that returns them (called only when the matcher is needed).
    ``prefilter`` forces (True) or forbids (False) the prefilter; by default it is used
    for inputs of at least :data:`PREFILTER_MIN_BYTES` (a compressed one counted at ten
    times its size, one of unknown size as large). Raises :class:`InputError` for empty
    input, or input with no recognisable log line.

    ``warm``: called with batches of the drafts parsed so far while the parsing waits for
    the read-ahead thread (prefilter path; speed only: what it works out must not change
    the result, and drafts may still change after it saw them)."""
    total = sum(s.size or 0 for s in sources)
    expanded = sum(
        PREFILTER_MIN_BYTES if s.size is None else s.size * (10 if s.compressed else 1)
        for s in sources
    )
    use_pf = prefilter if prefilter is not None else expanded >= PREFILTER_MIN_BYTES
    col = Collected()
    run = _Run(literals, col, warm)
    done_before = 0
    binary: list[str] = []
    is_binary = [_looks_binary(src) for src in sources]
    # every source's chunks in one stream (one read-ahead thread for them all: the next
    # file is read and matched while the last chunks of this one are parsed)
    stream = _chunks(run, [s for s, b in zip(sources, is_binary, strict=True) if not b], use_pf)
    try:
        for src, skip in zip(sources, is_binary, strict=True):
            if skip:
                binary.append(src.name)
                col.notes.append(f"{src.name}: skipped: binary data, not a log")
                done_before += src.size or 0
                if progress is not None:
                    progress(done_before, total)
                continue
            done_before = _read_one(run, src, stream, use_pf, year, progress, done_before,
                                    total)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return _collected(run, sources, binary, total)


def _read_one(
    run: _Run, src: Source, stream: Iterator[_Item], use_pf: bool, year: int | None,
    progress: ProgressFn | None, done_before: int, total: int,
) -> int:
    """Parse one source's chunks from ``stream`` (up to its end marker, whose notes are
    the reader's for this source); returns the progress position after it."""
    col = run.col
    sp = SourceParser(src.name)
    run.parser, run.warmed = sp, 0
    # chunk, its lines (prefilter path), their number, position
    pending: list[tuple[bytes | bytearray, object, int, int]] = []
    reading = _SourceRead(run, src.name, sp, use_pf)
    for chunk, lines, n_lines, consumed, notes in stream:
        if chunk is None:  # this source's end: the reader's notes about it
            col.notes.extend(notes)
            break
        if isinstance(lines, _Pf) and lines.got is None:
            run.walk(chunk, lines)
        pending.append((chunk, lines, n_lines, consumed))
        # a chunk is parsed once TAIL_LINES lines follow it (it holds no tail line)
        while len(pending) > 1 and sum(p[2] for p in pending[1:]) >= TAIL_LINES:
            c, ls, n_lines, pos = pending.pop(0)
            reading.step(c, ls, n_lines, None)
            if progress is not None:
                done = done_before + pos
                progress(min(done, total) if total else done, total)  # 0: size unknown
    while pending:
        c, ls, n_lines, pos = pending.pop(0)
        reading.step(c, ls, n_lines, sum(p[2] for p in pending))
        if progress is not None:
            done = done_before + pos
            progress(min(done, total) if total else done, total)
    col.lines += reading.lineno
    repeats = reading.repeats
    done_before += src.size or 0
    if repeats:
        col.repeats += repeats
        col.notes.append(
            f"{src.name}: {repeats} lines repeating a kind of line already seen "
            f"{REPEAT_KEEP} times were counted, not parsed"
        )
    if sp.unknown_lines and sp.known_lines:
        first, last = sp.first_unknown, sp.last_unknown
        col.notes.append(
            f"{sp.unknown_lines} lines of {src.name} (lines {first}-{last}) "
            "matched no known log format"
        )
    col.notes.extend(sp.unwrap_notes())
    note = resolve_years(sp.drafts, year=year, ref=src.mtime)
    if note:
        col.notes.append(f"{src.name}: {note}")
    col.drafts.extend(sp.drafts)
    return done_before


def _collected(run: _Run, sources: Sequence[Source], binary: list[str], total: int) -> Collected:
    """The notes of the whole read, and the checks for input with nothing in it."""
    col = run.col
    # per-rank files (rank0.log, rank1.log ...): rank-less lines get their file's rank
    note = assign_path_ranks(col.drafts, [s.name for s in sources if s.name not in binary])
    if note:
        col.notes.append(note)
    if run.cap.late:
        col.notes.append(
            f"the input holds more than {REPEAT_BUDGET} lines worth parsing: past them, "
            f"{run.cap.late} lines of kinds already seen {REPEAT_KEEP_LATE} times were "
            "counted, not parsed (they are in the repeat counts above)"
        )
    if col.undecodable:
        col.notes.append(f"{col.undecodable} bytes of invalid UTF-8 replaced")
    if col.nul_bytes:
        col.notes.append(f"{col.nul_bytes} NUL bytes dropped")
    if binary and not col.drafts:
        raise InputError(f"{', '.join(binary)}: not a log (binary data)")
    if not col.drafts:  # "<path>: empty file" (a new user's check: the path was left out)
        names = ", ".join(s.name for s in sources) or "input"
        what = "empty input" if names == "<stdin>" else "empty file" + "s" * (len(sources) > 1)
        raise InputError(f"{names}: {what}" + ("" if total == 0 else " (blank lines only)"))
    col.notes.extend(f"{s.name}: empty file" for s in sources if s.size == 0)
    return col


# (chunk, its lines on the prefilter path, their number, position, None), or at a
# source's end (None, None, 0, 0, the reader's notes about that source)
_Item = tuple[Any, Any, int, int, Any]


def _chunks(run: _Run, sources: Sequence[Source], use_pf: bool) -> Iterator[_Item]:
    """Every chunk of ``sources``, one source after the other, each source ended by a
    marker that carries the reader's notes about it. On the prefilter path the reading
    and the matcher's pass (compiled code, which lets other threads run) go on in one
    thread up to :data:`_AHEAD` chunks ahead of the parsing, across the sources: on two
    cores their time comes off the wall clock, and a folder of files is one pipeline."""

    def produce(behind: Callable[[], bool] = lambda: False) -> Iterator[_Item]:
        from diag.parse.prefilter import BulkStats, SourceScan

        seq = count()
        for src in sources:
            notes: list[str] = []
            scan = SourceScan(BulkStats())  # (prefilter path: the source's timeline state)
            for buf, lo, hi, consumed in iter_chunks(src, notes,
                                                     chunk_bytes=reader.CHUNK_BYTES):
                chunk = buf[lo:hi] if (lo, hi) != (0, len(buf)) else buf
                if use_pf:
                    if run.hungry and run.matcher.engine == "native":
                        # the parsing thread waits for a chunk: it runs this chunk's
                        # matcher pass (compiled code) while this thread reads the next
                        # (diag's scanner only: a Hyperscan scratch serves one thread)
                        run.hungry = False
                        nl, flags = run.matcher.newline_pass(chunk)
                        pf = _Pf(None, scan, next(seq), newlines=(nl, flags))
                        yield chunk, pf, _lines_of(nl, len(chunk)), consumed, None
                        continue
                    pf = _Pf(run.matcher.lines(chunk), scan, next(seq))
                    if behind():
                        # the parsing has chunks waiting: this thread would wait too, so
                        # it does the chunk's own passes and, when the chunk before is
                        # done, its in-order stage (else the parsing does them)
                        pf.lines = run.ahead(chunk, pf.lines)
                        if run.settled == pf.seq:
                            run.settle(pf, chunk)
                    else:
                        pf.lines = run.counted(chunk, pf.lines)
                    yield chunk, pf, len(pf.lines), consumed, None
                else:
                    yield chunk, None, _count_lines(chunk), consumed, None
            yield None, None, 0, 0, notes

    if not use_pf:
        return produce()
    run.matcher  # noqa: B018 - built here, before the thread that uses it starts
    return _ahead(produce, _AHEAD, idle=run.idle)


_AHEAD = 2  # chunks read and matched ahead of the parsing
_SWITCH_S = 0.0005  # the interpreter's switch interval while the read-ahead thread runs
_END = object()


class _Failed:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _ahead(make: Callable[[Callable[[], bool]], Iterator[Any]], depth: int,
           idle: Callable[[], bool] | None = None) -> Iterator[Any]:
    """The items of ``make(behind)``, produced in a thread at most ``depth`` items ahead
    (``behind()``: whether ``depth`` items wait for the consumer, so that the thread's
    next put waits); an exception there is raised here. ``idle()``: called while no item
    waits, as long as it returns True (it did some work and may have more). Closing this
    generator stops the thread at its next item (it holds no lock and is a daemon: it
    never keeps the process alive)."""
    import queue
    import threading

    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:  # noqa: PERF203 - a bounded wait that watches the stop flag
                continue
        return False

    def work() -> None:
        try:
            for item in make(q.full):
                if not put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put(_Failed(exc))
            return
        put(_END)

    thread = threading.Thread(target=work, name="diag-read-ahead", daemon=True)
    # The reader gives the GIL up for each compiled pass and read; taking it back waits
    # for the parser to yield it, up to the switch interval (5 ms by default) each time:
    # a shorter one while both threads run
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, _SWITCH_S))
    thread.start()
    try:
        while True:
            if idle is not None:
                while q.empty() and idle():
                    pass
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=1.0)
        sys.setswitchinterval(switch)


def _lines_of(nl: Any, size: int) -> int:
    """Lines in a chunk of ``size`` bytes whose newlines are at offsets ``nl`` (as
    :meth:`Lines.__len__` counts them)."""
    n = len(nl)
    return n + (1 if size and (not n or int(nl[-1]) != size - 1) else 0)


def _count_lines(chunk: bytes | bytearray) -> int:
    """Lines in a chunk of whole lines (the last may lack its newline)."""
    if not chunk:
        return 0
    return chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)


_CONTROL = frozenset(chr(c) for c in range(32)) - {"\t", "\n", "\r", "\x1b", "\x0c"}


_NUL_RUN = re.compile(rb"\x00{8,}")


def _looks_binary(src: Source) -> bool:
    """More than 10% of the first 64 KiB is control characters or invalid UTF-8, not
    counting runs of NUL bytes: a log file's hole (a writer that kept its offset while
    the file was truncated under it, logrotate's ``copytruncate``, a crash before the
    page cache reached the disk) is a run of NULs between lines of text, which the
    reader drops with a note."""
    try:
        with (src.sniff or src.open)() as stream:
            head = stream.read(1 << 16)
    except (OSError, EOFError, ValueError):
        return False  # the reader reports damage with a note
    if not head or utf16_codec(head) is not None:
        return False
    if b"\x00" * 8 in head:
        head = _NUL_RUN.sub(b"", head)
        if not head:
            return False
    text, bad = decode(head)
    odd = bad + sum(1 for c in text if c in _CONTROL)
    return odd * 10 > len(head)
