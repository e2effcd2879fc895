"""The streaming prefilter: which lines of a chunk can matter, decided per line in
compiled code.

:class:`Matcher` is built once per run from the candidate literals (:func:`candidate_literals`:
the phase catalogue's required literals, warning and error words, stack-dump and traceback
markers, config-line markers, and the rules' needles that the caller passes in). Per chunk
(8 MiB, cut at a line end) one Hyperscan pass over the bytes (case-insensitive literals,
plus three byte patterns: a newline followed by indentation, a carriage return inside a
line, a torch frame ``#0 ...`` at a line start) reports where candidates are; numpy maps
those offsets to line numbers. Only the candidate lines, and each rank's first serving
line and last line (:class:`SourceScan`), are decoded and handed to Python. Without the
``hyperscan`` package the same candidate set comes from polars (``str.contains_any`` on
the chunk's lines; its automaton is rebuilt per chunk).

Bulk lines (serving batch lines, vLLM's throughput and spec-decode metrics, HTTP access
lines, NCCL INFO chatter) are no candidates: their figures are columns
(:mod:`diag.parse.serving`), and their first and last line per rank feed the timeline.

Line numbers stay exact (newlines are counted in compiled code).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from diag.parse.coords import rank_keys
from diag.parse.literals import LITERALS_VERSION, _hs_escape, hyperscan_db, required_literals
from diag.parse.text import TYPOGRAPHY_LITERALS

__all__ = [
    "BULK_ENTRIES",
    "BULK_KINDS",
    "BulkStats",
    "Matcher",
    "SourceScan",
    "TRACEBACK_LABEL",
    "candidate_literals",
    "required_literals",
]

# Catalogue entries whose lines are bulk: handled by first/last per chunk, never each.
BULK_ENTRIES = frozenset({
    "sglang.batch", "vllm.throughput", "any.http_request", "any.http_access", "any.http_post",
    "any.nccl_info",
})

# Literals of the bulk kinds located per rank key (sglang) or globally, first and last.
_KEYED_BULK = ("Prefill batch", "Decode batch")
BULK_KINDS = _GLOBAL_BULK = (
    "Prefill batch",
    "Decode batch",
    "Avg prompt throughput",
    "SpecDecoding metrics",
    '"POST /',
    '"GET /',
    '"HEAD /',
    '"PUT /',
    '"DELETE /',
    '"OPTIONS /',
    '"PATCH /',
    "NCCL INFO",
)

EXTRA_LITERALS = (
    # levels (SGLang/vLLM/uvicorn/glog/NCCL) and error words
    "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "Warning", "Error", "Exception",
    "Killed", "killed", "Timeout", "timeout", "Timed out", "timed out", "OOM",
    "out of memory", "Traceback", "Segmentation fault", "core dumped", "Aborted",
    "terminate called", "what():", "[W", "[E", "[F", "Interrupt",
    # torch's per-rank prefix on tracebacks and dumps: "[rank0]:   File ..."
    "[rank",
    # vLLM's worker processes (start-up and failures; the serving lines are the API
    # server's): each worker's rank key is seen even when it logs a lone line
    "(VllmWorker", "(Worker",
    # C++ backtraces: "frame #0: c10::Error::Error(...)"
    "frame #",
    # stack dumps and faulthandler
    "Process ", "Thread 0x", "(idle)", "(active)", "(gil)", "Pyspy ", "py-spy",
    "Fatal Python error", "most recent call", "Waiting for the GIL", " at remote 0x",
    "Python v",
    # args and config lines
    "server_args=", "non-default args", "args: Namespace", "with config:",
    # progress bars and their tqdm updates
    "%|", "% Completed",
    # a no-break space or a typographic quote: text a page or an app retyped, read once
    # folded to ASCII (diag.parse.text.TYPOGRAPHY), whatever else it says
    *TYPOGRAPHY_LITERALS,
)
# Candidates whose line before is one too (a worker prefix printed before its bar)
_WITH_LINE_BEFORE = ("%|", "% completed")


@dataclass(slots=True)
class BulkStats:
    lines: int = 0  # lines read
    bulk_lines: int = 0  # lines not parsed
    candidates: int = 0
    keys: set[str] = field(default_factory=set)


def _variants(needle: str) -> set[str]:
    words = needle.split(" ")
    return {
        needle,
        needle.capitalize(),
        needle.upper(),
        " ".join(w.capitalize() for w in words),
    }


def _minimal(lits: Iterable[str]) -> list[str]:
    """Lower-cased, without the literals that contain a shorter one of the set."""
    out: list[str] = []
    for lit in sorted({x.lower() for x in lits}, key=lambda s: (len(s), s)):
        if not any(o in lit for o in out):
            out.append(lit)
    return out


def candidate_literals(
    needles: Iterable[str], phase_literals: Iterable[str] = ()
) -> tuple[str, ...]:
    """The lower-cased literals whose presence (any case) makes a line a candidate:
    :data:`EXTRA_LITERALS`, the phase catalogue's (``phase_literals``: every non-bulk
    entry's required literals) and the rule ``needles`` given. The result is kept in
    diag's cache (keyed by the literals given): it takes ~0.2 s to compute."""
    from diag import cache

    lits: set[str] = set(EXTRA_LITERALS) | set(phase_literals)
    for n in needles:
        if len(n) >= 3:
            lits |= _variants(n)
    given = sorted(lits)
    key = cache.content_key(given, "candidate-literals", str(LITERALS_VERSION))
    stored = cache.load("candidate-literals", key)
    if isinstance(stored, tuple) and all(isinstance(x, str) for x in stored):
        return stored
    out = tuple(_minimal(given))
    cache.store("candidate-literals", key, out)
    return out


# ---------------------------------------------------------------------------
# the matcher


@dataclass(frozen=True, slots=True)
class Lines:
    """A chunk's lines (by the offsets of its newlines) and which of them are candidates."""

    nl: Any  # numpy int64: offset of each newline (line i ends at nl[i])
    size: int  # bytes in the chunk (its last line may lack its newline)
    candidates: Any  # numpy int64: sorted indices of candidate lines
    present: frozenset[str] = frozenset()  # which of the matcher's labels occur
    # label -> sorted start offsets of its occurrences (compiled scanner only; a label
    # found more often than the scanner keeps is absent here)
    label_at: dict[str, Any] | None = None
    # the labels ``present`` tells about (the matcher's)
    looked_for: frozenset[str] = frozenset()
    # the candidates' start and end offsets and kind hashes (numpy; the repeat cap's input,
    # computed ahead by :meth:`diag.parse.pipeline.RepeatCap.prepare`), or None
    cand_starts: Any = None
    cand_ends: Any = None
    cand_kinds: Any = None
    # bit 0: the chunk may hold a NUL byte; bit 1: a byte past ASCII (found by the
    # compiled newline pass; both set when unknown); bit 2: it is valid UTF-8 (checked in
    # the same pass; clear when unknown)
    byte_flags: int = 3
    # (NUL bytes, invalid UTF-8 bytes) of the chunk, when counted ahead (else None)
    byte_counts: tuple[int, int] | None = None

    def __len__(self) -> int:
        n = len(self.nl)
        return n + (1 if self.size and (not n or int(self.nl[-1]) != self.size - 1) else 0)

    def index(self, offsets: Any) -> Any:
        """The line index of each byte offset (numpy array)."""
        return self._np().searchsorted(self.nl, offsets, side="left")

    def line_of(self, offset: int) -> int:
        return int(self._np().searchsorted(self.nl, offset, side="left"))

    def start(self, i: int) -> int:
        return int(self.nl[i - 1]) + 1 if i > 0 else 0

    def end(self, i: int) -> int:
        return int(self.nl[i]) if i < len(self.nl) else self.size

    def bounds(self, idx: Any) -> tuple[list[int], list[int]]:
        """(starts, ends) of the lines ``idx`` (a sorted numpy array), as lists."""
        np = self._np()
        nl = self.nl
        if not len(idx):
            return [], []
        prev = idx - 1
        starts = np.where(prev >= 0, nl[np.maximum(prev, 0)] + 1, 0) if len(nl) else (
            np.zeros(len(idx), dtype=np.int64))
        inside = idx < len(nl)
        ends = np.where(inside, nl[np.minimum(idx, max(len(nl) - 1, 0))] if len(nl) else 0,
                        self.size)
        return starts.tolist(), ends.tolist()


    def bounds_np(self, idx: Any) -> tuple[Any, Any]:
        """(starts, ends) of the lines ``idx`` (a sorted numpy array), as numpy arrays."""
        np = self._np()
        nl = self.nl
        if not len(idx):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if not len(nl):
            return np.zeros(len(idx), dtype=np.int64), np.full(len(idx), self.size)
        # (speed) the newlines framed by -1 and the chunk's size: line i runs from
        # edges[i] + 1 to edges[i + 1], two gathers (on a log of candidates only, 12 M
        # lines per GiB, a where / maximum / minimum each was a pass over them all)
        edges = np.empty(len(nl) + 2, dtype=np.int64)
        edges[0] = -1
        edges[1:-1] = nl
        edges[-1] = self.size
        starts = edges[idx]
        starts += 1
        ends = edges[idx + 1]
        return starts, ends

    @staticmethod
    def _np() -> Any:
        import numpy as np

        return np


_CONT, _CR, _FRAME = (b"\\n[ \\t]", b"\\r[^\\n]", b"\\n#[0-9]")

# A traceback that a process prefix precedes on every line (vLLM's multiprocessing
# children: "(EngineCore_DP0 pid=212)   File ...", Ray's "(RayWorkerWrapper pid=9) ...")
# hides its frames' indentation from the newline-then-indentation pattern; its body is
# handed over whole (see _prefixed_traceback_lines).
_TB_START = b"Traceback (most recent call last)"
# (speed) the same, as a label of the matcher (its presence in a chunk comes with the
# candidate pass, not from a search of the chunk's 8 MiB: 0.2 s per GiB)
TRACEBACK_LABEL = _TB_START.decode()
_TB_MAX_LINES = 4000  # a traceback's body, at most (a chained one restarts the count)


def _prefixed_traceback_lines(chunk: bytes | bytearray, nl: Any,
                              carry: bytes | None = None) -> tuple[list[int], bytes | None]:
    """Indices of the lines of ``chunk`` that continue a traceback whose start line has a
    prefix before ``Traceback (most recent call last)``: the lines after it that carry
    the same prefix and then an indentation (frames, source lines, carets), and the one
    line after them with the prefix (the exception line). A traceback of no prefix needs
    none of this (its indented lines are candidates already); lines a full parse would
    not attach cost only speed here, never a difference in the result.

    ``carry``: the prefix of a traceback the chunk before ended inside (chunks are cut
    at line ends); returned likewise for the next chunk (None when none is open)."""
    import numpy as np

    out: list[int] = []
    size = len(chunk)

    def walk(prefix: bytes, i: int, pos: int) -> tuple[int, bool]:
        """From line ``i`` + 1 at offset ``pos``: (where the walk stopped, still open)."""
        n = 0
        while pos < size and n < _TB_MAX_LINES and chunk.startswith(prefix, pos):
            after = chunk[pos + len(prefix):pos + len(prefix) + 1]
            i += 1
            n += 1
            out.append(i)
            end = chunk.find(b"\n", pos)
            pos = size if end < 0 else end + 1
            if after not in (b" ", b"\t"):
                return pos, False  # the exception line (or the next record: one line)
        return pos, pos >= size and n < _TB_MAX_LINES

    open_prefix: bytes | None = None
    if carry:
        pos, still = walk(carry, -1, 0)
        open_prefix = carry if still else None
    at = chunk.find(_TB_START)
    while at >= 0:
        ls = chunk.rfind(b"\n", 0, at) + 1
        prefix = bytes(chunk[ls:at])
        le = chunk.find(b"\n", at)
        if not prefix.strip() or le < 0:
            at = chunk.find(_TB_START, at + len(_TB_START))
            continue
        i = int(np.searchsorted(nl, le, side="left"))  # the start line's index
        pos, still = walk(prefix, i, le + 1)
        open_prefix = prefix if still else None
        at = chunk.find(_TB_START, max(at + len(_TB_START), pos - 1))
    return out, open_prefix


class Matcher:
    """Candidate lines of chunks of bytes; the automaton is built once (here)."""

    def __init__(
        self,
        literals: Sequence[str],
        labels: Sequence[str] = (),
        complete: Callable[[bytes | bytearray, frozenset[str]], frozenset[str]] | None = None,
    ) -> None:
        """``labels``: literals (case-sensitive) to report the presence of, per chunk;
        ``complete``: adds to the labels found (given the chunk)."""
        self.complete = complete
        import numpy as np

        self._np = np
        self.literals = tuple(literals)
        self.labels = tuple(labels)
        self._looked_for = frozenset(self.labels)
        self._before = {i for i, lit in enumerate(self.literals) if lit in _WITH_LINE_BEFORE}
        self._hs: Any = None
        self._ac: Any = None
        from diag.parse import native

        nat = self._nat = native.load()
        if nat is not None:
            pats = [lit.encode("utf-8", "surrogatepass") for lit in self.literals]
            pats += [lab.encode("utf-8", "surrogatepass") for lab in self.labels]
            # (speed) kind 3: a literal past 32 bytes is walked by its first 32 and its
            # rest compared where they occur (_scan.c's DG_CUT): the same candidates, with
            # the phase catalogue's whole-message literals (4,333 literals, median 47
            # characters) an automaton of 86k states and 45 MB instead of 218k and 115 MB
            # (built at every run: 0.11 -> 0.05 s of CPU; 70 MB less peak RSS)
            kinds = [1 if i in self._before else 3 for i in range(len(self.literals))]
            kinds += [2] * len(self.labels)
            if len(self.labels) <= 64:
                try:
                    self._ac = native.Automaton(nat, pats, kinds, caseless=True, special=True)
                except MemoryError:  # pragma: no cover - Hyperscan takes over
                    self._ac = None
        if self._ac is not None:
            self.engine = "native"
            return
        hyperscan: Any
        try:
            import hyperscan
        except ImportError:  # pragma: no cover - hyperscan ships wheels for x86-64 and arm64
            hyperscan = None
        if hyperscan is not None:
            # each literal as "literal, then to the end of its line", all under one id
            # (0, or 1 for the literals whose line before is a candidate too): Hyperscan
            # reports an id at an end offset once, so a candidate line is one report
            ids: list[int] = []
            exprs: list[bytes] = []
            flags: list[int] = []
            line_flags = hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_MULTILINE
            for i, lit in enumerate(self.literals):
                exprs.append(_hs_escape(lit) + b"[^\\n]*$")
                ids.append(1 if i in self._before else 0)
                flags.append(line_flags)
            exprs += [_CONT, _CR, _FRAME]
            ids += [2, 3, 4]
            flags += [0, 0, 0]
            for j, lab in enumerate(self.labels):
                exprs.append(_hs_escape(lab))
                ids.append(5 + j)
                flags.append(hyperscan.HS_FLAG_SINGLEMATCH)
            self._hs = hyperscan_db(hyperscan, exprs, flags, "prefilter-hs", ids)
        self.engine = "hyperscan" if self._hs is not None else "polars"

    def newlines(self, chunk: bytes | bytearray) -> Any:
        """Offsets of the newlines of ``chunk`` (numpy int64)."""
        if self._nat is not None:
            return self._nat.newlines(chunk)
        np = self._np
        return np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)

    def newline_pass(self, chunk: bytes | bytearray) -> tuple[Any, int]:
        """(the newline offsets of ``chunk``, its byte flags: see
        :attr:`Lines.byte_flags`), for :meth:`lines`."""
        if self._nat is not None:
            nl, flags = self._nat.newlines_flags(chunk)
            return nl, flags
        return self.newlines(chunk), 3

    def lines(self, chunk: bytes | bytearray, nl: Any = None, byte_flags: int = 3) -> Lines:
        """The lines of ``chunk`` (whole lines; the last may lack its newline); ``nl``:
        its newline offsets, when already known (and ``byte_flags``, what that pass
        found)."""
        np = self._np
        if nl is None:
            if self._nat is not None:
                nl, byte_flags = self._nat.newlines_flags(chunk)
            else:
                nl = self.newlines(chunk)
        size = len(chunk)
        label_at: dict[str, Any] | None = None
        n_lines = len(nl) + (1 if size and (not len(nl) or int(nl[-1]) != size - 1) else 0)
        if self._ac is not None:
            cands, bits, where = self._ac.candidates(chunk, nl, n_lines)
            present = frozenset(lab for j, lab in enumerate(self.labels) if bits >> j & 1)
            label_at = {self.labels[j]: at for j, at in where.items()}
        elif self._hs is not None:
            cands, present = self._hyperscan(chunk, nl, n_lines)
        else:
            cands = self._polars(chunk, n_lines)
            present = frozenset(lab for lab in self.labels if lab.encode() in chunk)
        if self.complete is not None:
            present = self.complete(chunk, present)
        # a line starting the chunk is not preceded by a newline: test it here
        first_in = size and (chunk[:1] in (b" ", b"\t")
                             or (chunk[:1] == b"#" and chunk[1:2].isdigit()))
        if first_in and (not len(cands) or int(cands[0]) != 0):  # (sorted, each once)
            cands = np.concatenate([np.zeros(1, dtype=np.int64), cands])
        return Lines(nl=nl, size=size, candidates=cands, present=present, label_at=label_at,
                     looked_for=self._looked_for, byte_flags=byte_flags)

    def _hyperscan(
        self, chunk: bytes | bytearray, nl: Any, n_lines: int
    ) -> tuple[Any, frozenset[str]]:
        np = self._np
        at: list[int] = []  # offsets inside (or at the end of) candidate lines
        prev: list[int] = []  # ... whose line before is a candidate too
        labels: list[int] = []
        add_at, add_prev = at.append, prev.append

        def on_match(ident: int, _frm: int, to: int, _flags: int, _ctx: object) -> None:
            if ident == 0:  # a literal: ``to`` is its line's end
                add_at(to)
            elif ident == 1 or ident == 2:  # noqa: PLR1714 - the common case first
                # a literal whose line before counts (at the line's end), or a newline +
                # indentation (at the indentation): this line and the one before
                add_prev(to if ident == 1 else to - 1)
            elif ident <= 4:
                add_at(to - 1)
            else:
                labels.append(ident - 5)

        self._hs.scan(chunk, match_event_handler=on_match)
        present = frozenset(self.labels[i] for i in labels)
        if not at and not prev:
            return np.empty(0, dtype=np.int64), present
        idx = np.searchsorted(nl, np.array(at, dtype=np.int64), side="left")
        if prev:
            pidx = np.searchsorted(nl, np.array(prev, dtype=np.int64), side="left")
            idx = np.concatenate([idx, pidx, pidx[pidx > 0] - 1])
            out = np.unique(idx)
        elif len(idx) > 1 and bool((idx[1:] >= idx[:-1]).all()):
            # reports come by end offset: sorted, only repeats to drop
            keep = np.empty(len(idx), dtype=bool)
            keep[0] = True
            np.not_equal(idx[1:], idx[:-1], out=keep[1:])
            out = idx[keep]
        else:
            out = np.unique(idx)
        return out[out < n_lines], present

    def _polars(self, chunk: bytes | bytearray, n_lines: int) -> Any:
        import polars as pl

        from diag.parse.text import decode

        np = self._np
        text, _ = decode(chunk)
        if text.endswith("\n"):
            text = text[:-1]
        s = pl.Series([text]).str.split("\n").explode()
        lits = list(self.literals)
        before = [lit for lit in self.literals if lit in _WITH_LINE_BEFORE]
        hit = s.str.contains_any(lits, ascii_case_insensitive=True)
        hit = hit | s.str.contains(r"\r[^\n]") | s.str.contains(r"^#[0-9]")
        cont = s.str.contains(r"^[ \t]")
        bar = s.str.contains_any(before, ascii_case_insensitive=True)
        prev = (cont | bar).shift(-1, fill_value=False)
        mask = hit | cont | prev
        out = np.flatnonzero(mask.to_numpy())
        return out[out < n_lines].astype(np.int64)


# ---------------------------------------------------------------------------
# per source: the lines that feed the timeline


def _hs_bytes(lit: bytes) -> bytes:
    from diag.parse.literals import _HS_BYTE

    return b"".join([_HS_BYTE[b] for b in lit])


_TAIL_WINDOW = 512 << 10  # bytes at a chunk's end looked at first for each key's last line


class _KeyScan:
    """Where each rank key last occurs in a chunk on a line the repeat cap did not drop,
    and where each (key, batch kind) pair first occurs, in a few Hyperscan passes
    whatever the number of keys: the keys reversed over the chunk's last 512 KiB
    reversed (a key's first report is its last occurrence), over the whole chunk
    reversed for the keys not found there, again with the dropped lines blanked out
    (over the last 512 KiB, 1 MiB, 2 MiB) for keys last seen on one; the pairs forward.
    Each pattern is reported once (``HS_FLAG_SINGLEMATCH``); the databases are rebuilt
    when a key is new (keys are a log's own, not cached on disk). The real-corpus mix's
    167 keys cost 0.3 s per 8 MiB chunk with one ``rfind`` / ``find`` each."""

    def __init__(self, hyperscan: Any, native: Any = None) -> None:
        """``hyperscan`` (the module) or ``native`` (diag's compiled scanner, which then
        finds each key's last line on a line not dropped exactly, in one backward walk
        that skips the dropped lines): at least one of them."""
        self._hs = hyperscan
        self._native = native
        self.keys: tuple[str, ...] = ()
        self._rev: Any = None
        self._fwd: Any = None
        self._probes: list[bytes] = []
        self._probe_kind: dict[bytes, str] = {}
        # key run -> (index of its rarest byte, the keys holding it)
        self._probes_of: dict[bytes, tuple[int, list[int]]] = {}

    def _build(self, keys: Iterable[str]) -> None:
        self.keys = tuple(sorted(keys))
        enc = [k.encode("utf-8", "surrogatepass") for k in self.keys]
        if self._native is not None:
            from diag.parse.native import Automaton

            self._rev = Automaton(self._native, [k[::-1] for k in enc], [0] * len(enc),
                                  caseless=False, special=False)
            # each key's longest run without digits: keys sharing it are all absent from a
            # chunk that lacks it (checked with memchr on a rare byte of it, before the walk)
            self._probes_of = {}
            for i, k in enumerate(enc):
                run = max(_DIGIT_RUNS.split(k), key=len)
                if len(run) >= 2:
                    self._probes_of.setdefault(run, (_rare_byte(run), []))[1].append(i)
        else:
            self._rev = self._db([_hs_bytes(k[::-1]) for k in enc])
        pairs = [(k + lit.encode(), lit) for k in enc if k.endswith(b"] ") for lit in _KEYED_BULK]
        self._probes = [p for p, _ in pairs]
        self._probe_kind = dict(pairs)  # probe -> its batch kind (a label of the matcher)
        # (speed) the probes' Hyperscan database is compiled when a chunk needs it (the
        # scanner's label offsets mostly answer instead: each new key rebuilt it)
        self._fwd = None

    def _db(self, exprs: list[bytes]) -> Any:
        hs = self._hs
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
                   flags=[hs.HS_FLAG_SINGLEMATCH] * len(exprs))
        return db

    def scan(
        self, chunk: bytes | bytearray, lines: Lines, keys: set[str], skip: set[bytes],
        dropped: Any,
    ) -> tuple[dict[str, int], dict[bytes, int]]:
        """(key -> offset of its last occurrence on a line the repeat cap did not drop,
        probe -> offset of its first occurrence) in ``chunk``, for the ``keys`` given and
        the probes not in ``skip``; ``dropped``: the dropped lines (sorted numpy int64)."""
        import numpy as np

        if len(keys) != len(self.keys):
            self._build(keys)
        size = len(chunk)
        last: dict[str, int] = {}
        first: dict[bytes, int] = {}
        if not self.keys:
            return last, first
        names = self.keys
        if self._native is not None:
            mask = None
            if len(dropped):
                mask = np.zeros(len(lines) + 1, dtype=np.uint8)
                mask[dropped] = 1
            absent = np.zeros(len(names), dtype=np.uint8)
            for probe, (rare, idx) in self._probes_of.items():
                if self._native.find(chunk, probe, rare) < 0:
                    absent[idx] = 1
            offsets = self._rev.last(chunk, lines.nl, mask, absent)
            last = {names[i]: at for i, at in enumerate(offsets.tolist()) if at >= 0}
            self._first(chunk, skip, first, lines)
            return last, first
        arr = np.frombuffer(chunk, dtype=np.uint8)

        def on_last(ident: int, _frm: int, to: int, _flags: int, _ctx: object) -> None:
            key = names[ident]
            if key not in last:
                last[key] = size - to

        # the chunk's tail first (a key's last line is mostly near the end): the whole
        # chunk reversed only for keys not in it
        for window in (_TAIL_WINDOW, size):
            lo = max(0, size - window)
            self._rev.scan(arr[lo:][::-1].copy(), match_event_handler=on_last)
            if len(last) == len(names) or lo == 0:
                break
        if len(dropped) and last:
            # a key last seen on a dropped line: scanned for again with the dropped lines
            # blanked out, over the chunk's last 512 KiB, then 1 and 2 MiB (past that
            # the key's line of this chunk is given up, as the rfind walk gives up after
            # 64 dropped lines)
            at = np.array(list(last.values()), dtype=np.int64)
            drop = dropped
            gone = np.isin(lines.index(at), drop)
            if gone.any():
                need = {k for k, g in zip(last, gone.tolist(), strict=True) if g}
                for key in need:
                    del last[key]
                starts, ends = lines.bounds_np(drop)
                full = starts < ends
                starts, ends = starts[full], ends[full]
                for window in (_TAIL_WINDOW, 2 * _TAIL_WINDOW, 4 * _TAIL_WINDOW):
                    lo = max(0, size - window)
                    blank = arr[lo:].copy()
                    marks = np.zeros(size - lo + 1, dtype=np.int8)
                    inside = ends > lo
                    marks[np.maximum(starts[inside], lo) - lo] += 1
                    marks[ends[inside] - lo] -= 1
                    blank[np.cumsum(marks[:-1], dtype=np.int8).astype(bool)] = 0
                    self._rev.scan(blank[::-1].copy(), match_event_handler=on_last)
                    if need.issubset(last) or lo == 0:
                        break
        self._first(chunk, skip, first, lines)
        return last, first

    def _first(
        self, chunk: bytes | bytearray, skip: set[bytes], first: dict[bytes, int],
        lines: Lines,
    ) -> None:
        """The first occurrence of each probe not in ``skip`` (into ``first``). A probe
        whose batch kind is absent from the chunk (the matcher looked for that label and
        did not find it, or one ``in`` says so) is not looked for: no pass over the chunk
        for keys that print no batch line."""
        probes = self._probes
        kind = self._probe_kind
        has: dict[str, bool] = {}
        wanted: list[bytes] = []
        for p in probes:
            if p in skip:
                continue
            lit = kind[p]
            if lit not in has:
                has[lit] = (lit in lines.present if lit in lines.looked_for
                            else lit.encode() in chunk)
            if has[lit]:
                wanted.append(p)
        if not wanted:
            return
        if self._first_at_labels(chunk, wanted, first, lines):
            return
        if self._fwd is None and self._probes and self._hs is not None:
            self._fwd = self._db([_hs_bytes(p) for p in self._probes])
        if self._fwd is None:  # no Hyperscan: one find per probe still looked for
            for p in probes:
                if p not in skip:
                    j = chunk.find(p)
                    if j >= 0:
                        first[p] = j
            return

        def on_first(ident: int, _frm: int, to: int, _flags: int, _ctx: object) -> None:
            p = probes[ident]
            if p not in skip:
                first[p] = to - len(p)

        self._fwd.scan(chunk, match_event_handler=on_first)

    def _first_at_labels(
        self, chunk: bytes | bytearray, wanted: list[bytes], first: dict[bytes, int],
        lines: Lines,
    ) -> bool:
        """The first occurrence of each probe of ``wanted`` (into ``first``) from the
        scanner's offsets of its batch kind (every occurrence of the kind in the chunk:
        a probe is its key right before one), when they are known for every kind wanted
        and few (a key that never prints a batch line then costs no pass over the chunk);
        False (nothing done) otherwise."""
        at = lines.label_at
        if at is None:
            return False
        kind = self._probe_kind
        by_kind: dict[str, dict[bytes, bytes]] = {}
        for p in wanted:
            lit = kind[p]
            if lit not in at:
                return False  # (found more often than the scanner keeps)
            by_kind.setdefault(lit, {})[p[: len(p) - len(lit.encode())]] = p
        if sum(len(at[lit]) for lit in by_kind) > _FEW_LABELS:
            return False
        import numpy as np

        arr = np.frombuffer(chunk, dtype=np.uint8)
        for lit, want in by_kind.items():
            offsets = at[lit]  # (sorted)
            # (speed) per width w (a key's length, 8 for longer keys): the w bytes before
            # each offset as one 64-bit number, one gather for all the keys of that width;
            # a key of up to 8 bytes is found where its number is, a longer one is compared
            # whole where its last 8 bytes are (in order: each key's first one kept)
            groups: dict[int, dict[int, list[bytes]]] = {}
            for k in want:
                w = min(len(k), 8)
                code = int.from_bytes(k[len(k) - w :], "little")
                groups.setdefault(w, {}).setdefault(code, []).append(k)
            for w, by_code in groups.items():
                o = offsets[offsets >= w]
                if not len(o):
                    continue
                tails = np.zeros((len(o), 8), dtype=np.uint8)
                tails[:, :w] = arr[o[:, None] - w + np.arange(w)]
                codes = tails.view("<u8").ravel()
                wanted_codes = np.fromiter(by_code, dtype=np.uint64, count=len(by_code))
                hits = np.flatnonzero(np.isin(codes, wanted_codes))
                if not len(hits):
                    continue
                if w < 8:
                    # the whole key: its first offset is its number's first hit
                    got, j = np.unique(codes[hits], return_index=True)
                    for code, i in zip(got.tolist(), hits[j].tolist(), strict=True):
                        for k in by_code[code]:
                            first[want[k]] = int(o[i]) - w
                    continue
                left = {k for ks in by_code.values() for k in ks}
                for i in hits.tolist():
                    q = int(o[i])
                    for k in by_code[int(codes[i])]:
                        if k in left and q >= len(k) and chunk[q - len(k) : q] == k:
                            first[want[k]] = q - len(k)
                            left.discard(k)
                    if not left:
                        break
        return True


# batch kind offsets up to which the probes are looked for at them (more: one pass)
_FEW_LABELS = 4096
_DIGIT_RUNS = re.compile(rb"[0-9]+")
# bytes by how common they are in log text (lower: rarer), for the memchr of a probe
_COMMONNESS = {**dict.fromkeys(range(256), 1), **dict.fromkeys(b" ", 4),
               **dict.fromkeys(b"abcdefghijklmnopqrstuvwxyz", 3),
               **dict.fromkeys(b"0123456789.:-/", 2),
               **dict.fromkeys(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ_([{<=|", 0)}


def _rare_byte(probe: bytes) -> int:
    """The index of the byte of ``probe`` least common in log text."""
    return min(range(len(probe)), key=lambda i: _COMMONNESS[probe[i]])


def _key_scanner() -> _KeyScan | bool:
    from diag.parse import native

    nat = native.load()
    hyperscan: Any
    try:
        import hyperscan
    except ImportError:  # pragma: no cover - hyperscan ships wheels for x86-64 and arm64
        hyperscan = None
    if hyperscan is None and nat is None:
        return False
    return _KeyScan(hyperscan, nat)


class SourceScan:
    """Per-source prefilter state: rank keys seen, first serving lines found."""

    def __init__(self, stats: BulkStats) -> None:
        self.stats = stats
        self.first_found: set[bytes] = set()  # bulk literals (per key) already located once
        # chunks left to look for the first serving line of ranks that have none yet
        self.keyed_budget: int | None = None
        self.absent: dict[str, int] = {}  # rank key -> chunks in a row it was not found in
        self._keyscan: _KeyScan | bool | None = None  # False: no Hyperscan
        self.tb_open: bytes | None = None  # a prefixed traceback's prefix, open at a chunk end

    def traceback_body(self, chunk: bytes | bytearray, lines: Lines) -> list[int]:
        """The lines of ``chunk`` that continue a traceback under a process prefix and are
        no candidates (:func:`_prefixed_traceback_lines`), also of one the chunk before
        ended inside (in chunk order: the in-order stage calls this). They are parsed
        as the full parse parses a line that is no candidate: never under the repeat cap."""
        if self.tb_open is None and (
            TRACEBACK_LABEL not in lines.present if TRACEBACK_LABEL in lines.looked_for
            else _TB_START not in chunk
        ):
            return []
        body, self.tb_open = _prefixed_traceback_lines(chunk, lines.nl, self.tb_open)
        if not body:
            return []
        import numpy as np

        extra = np.setdiff1d(np.asarray(body, dtype=np.int64), lines.candidates,
                             assume_unique=False)
        return extra.tolist()  # type: ignore[no-any-return]

    def timeline_lines(
        self, chunk: bytes | bytearray, lines: Lines, candidate_text: Iterable[str],
        dropped: Any,
    ) -> list[int]:
        """Indices of the lines (not candidates already) that the timeline needs: each
        rank's last line in the chunk (its last one the repeat cap did not drop:
        ``dropped`` holds the dropped candidates, a sorted numpy array), the first serving
        line of each rank and kind, and the chunk's last line."""
        np = self._np()
        keys = self.stats.keys
        size = len(chunk)
        seen_now: set[str] = set()
        sample = 8 << 10
        if size > 2 * sample:
            seen_now |= rank_keys(chunk[:sample].decode("utf-8", "replace"))
            seen_now |= rank_keys(chunk[size - sample :].decode("utf-8", "replace"))
        else:
            seen_now |= rank_keys(chunk.decode("utf-8", "replace"))
        seen_now |= rank_keys("\n".join(candidate_text))
        keys |= seen_now
        for key in seen_now:
            self.absent[key] = 0
        pos: set[int] = set()
        if self._keyscan is None:
            self._keyscan = _key_scanner()
        if self._keyscan:
            assert isinstance(self._keyscan, _KeyScan)
            last_at, first_at = self._keyscan.scan(chunk, lines, keys, self.first_found,
                                                   dropped)
            pos.update(last_at.values())
            for probe, j in first_at.items():
                pos.add(j)
                self.first_found.add(probe)
        else:
            self._scan_keys(chunk, lines, keys, dropped, pos)
        label_at = lines.label_at or {}
        for lit in _GLOBAL_BULK:
            if lit not in lines.present:
                continue
            blit = lit.encode()
            # (speed) the scanner's offsets of the kind, when it kept them all: its first
            # and last occurrence without a pass over the chunk (rfind: 0.3 s per GiB)
            at = label_at.get(lit)
            if at is not None and len(at) > 0:
                lo, hi = int(at[0]), int(at[-1])
            else:
                lo, hi = chunk.find(blit), chunk.rfind(blit)
            pos.add(hi)  # the kind's last line
            if blit not in self.first_found:
                pos.add(lo)
                self.first_found.add(blit)
        last = size - 1
        while last >= 0 and chunk[last] in (10, 13):
            last -= 1
        if last >= 0:
            pos.add(last)
        if not pos:
            return []
        n = len(lines)
        idx = lines.index(np.array(sorted(pos), dtype=np.int64))
        return sorted({i for i in idx.tolist() if i < n})

    def _scan_keys(
        self, chunk: bytes | bytearray, lines: Lines, keys: set[str], dropped: Any,
        pos: set[int],
    ) -> None:
        """Without Hyperscan: one ``rfind`` per key (a key absent from two chunks in a row
        is looked for again once a sample shows it), a ``find`` per (key, batch kind) for
        the two chunks after the first was found."""
        gone = set(dropped.tolist()) if len(dropped) else set()
        for key in keys:
            if self.absent.get(key, 0) >= 2:
                continue
            bkey = key.encode()
            i = chunk.rfind(bkey)
            tries = 0
            while i >= 0 and tries < 64:
                li = lines.line_of(i)
                if li not in gone:
                    break
                i = chunk.rfind(bkey, 0, lines.start(li))
                tries += 1
            if i >= 0 and tries < 64:
                pos.add(i)
                self.absent[key] = 0
            else:
                self.absent[key] = self.absent.get(key, 0) + 1
            if key.endswith("] ") and (self.keyed_budget is None or self.keyed_budget > 0):
                for lit in _KEYED_BULK:
                    probe = bkey + lit.encode()
                    if probe in self.first_found:
                        continue
                    j = chunk.find(probe)
                    if j >= 0:
                        pos.add(j)
                        self.first_found.add(probe)
        if self.keyed_budget is not None:
            self.keyed_budget -= 1
        elif any(lit.encode() in self.first_found for lit in _KEYED_BULK):
            self.keyed_budget = 2

    @staticmethod
    def _np() -> Any:
        import numpy as np

        return np
