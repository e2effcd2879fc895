"""The streaming prefilter: only lines that can matter become Python records.

Per chunk of a large input (8 MiB, cut at a line end):

1. One multi-literal pass in Rust (polars ``str.extract_all`` over the whole chunk, which
   the regex crate runs with Teddy / Aho-Corasick) says which *required literals* occur.
   The literals come from the phase catalogue (each entry's regex is reduced to literals
   every match must contain), warning/error words, stack-dump and traceback markers,
   carriage returns, indented (continuation) lines, and the rule needles of
   ``diag.rules.needles()`` in their usual capitalisations.
2. Each literal that occurs is located with ``str.find`` (memmem speed); the lines around
   those positions are the candidates, plus the line before an indented one (the head
   its continuation attaches to).
3. The bulk (serving batch lines, NCCL INFO chatter, HTTP access lines) is not parsed; its
   first and last line per rank and per kind in each chunk are, and so is each rank's last
   line in the chunk: enough for serving begin/end, the last timestamp of every rank and
   the silence at the end of the log.

Line numbers stay exact (newlines are counted between candidates).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from diag.parse import reader
from diag.parse.coords import rank_keys
from diag.parse.literals import required_literals
from diag.parse.reader import Source, iter_chunks
from diag.parse.records import SourceParser
from diag.parse.text import decode

__all__ = [
    "BULK_ENTRIES",
    "BulkStats",
    "candidate_literals",
    "required_literals",
    "scan_source",
]

# Catalogue entries whose lines are bulk: handled by first/last per chunk, never each.
BULK_ENTRIES = frozenset({"sglang.batch", "vllm.throughput", "any.http_request", "any.nccl_info"})

# Literals of the bulk kinds located per rank key (sglang) or globally, first and last.
_KEYED_BULK = ("Prefill batch", "Decode batch")
_GLOBAL_BULK = (
    "Prefill batch",
    "Decode batch",
    "Avg prompt throughput",
    "SpecDecoding metrics",
    '"POST /',
    '"GET /',
    "NCCL INFO",
)

_EXTRA_LITERALS = (
    # levels (SGLang/vLLM/uvicorn/glog/NCCL) and error words
    "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "Warning", "Error", "Exception",
    "Killed", "killed", "Timeout", "timeout", "Timed out", "timed out", "OOM",
    "out of memory", "Traceback", "Segmentation fault", "core dumped", "Aborted",
    "terminate called", "what():", "[W", "[E", "[F", "Interrupt",
    # torch's per-rank prefix on tracebacks and dumps: "[rank0]:   File ..."
    "[rank",
    # torch's failed-collective report and C++ backtraces: "#0 all_reduce from ...",
    # "frame #0: c10::Error::Error(...)"
    "#0 ", "frame #",
    # stack dumps and faulthandler
    "Process ", "Thread 0x", "(idle)", "(active)", "(gil)", "Pyspy ", "py-spy",
    "Fatal Python error", "most recent call",
    "Python v",
    # args and config lines
    "server_args=", "non-default args", "args: Namespace", "with config:",
    # progress bars and their tqdm updates (a line's CRLF end is no reason: see _lines)
    "%|", "% Completed",
    # continuation lines: a newline followed by indentation
    "\n ", "\n\t",
)


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
    """Drop literals that contain a shorter one of the set (the shorter finds them)."""
    out: list[str] = []
    for lit in sorted(set(lits), key=len):
        if not any(o in lit for o in out):
            out.append(lit)
    return out


@lru_cache(maxsize=8)
def candidate_literals(extra_rule_dirs: tuple[Path, ...] = ()) -> tuple[str, ...]:
    """Every literal whose presence makes a line a candidate (the needles of the rules in
    ``extra_rule_dirs`` too)."""
    from diag.phases import load_catalogue

    lits: set[str] = set(_EXTRA_LITERALS)
    for e in load_catalogue().entries:
        if e.id in BULK_ENTRIES:
            continue
        req = required_literals(e.regex.pattern)
        if req is None:
            raise ValueError(f"phase entry {e.id}: regex has no required literal")
        lits |= req
    lits |= set(_rule_needles(extra_rule_dirs))
    return tuple(_minimal(lits))


def _rule_needles(extra_dirs: tuple[Path, ...] = ()) -> list[str]:
    from diag.rules import needles

    out: set[str] = set()
    for n in needles(list(extra_dirs)) if extra_dirs else needles():
        if isinstance(n, str) and len(n) >= 3:
            out |= _variants(n)
    return sorted(out)


_SAMPLE = 8 << 10
BLOCK_BYTES = 64 << 10
# Line kinds that make up the bulk of a serving log; a block holding only these is skipped.
_BULK_MARKERS = (
    b" batch. #",  # SGLang "Prefill batch. #new-seq" and "Decode batch. #running-req"
    b" batch, #",  # the same in 0.4.6+
    b"Avg prompt throughput",
    b'" 200 OK',
    b"NCCL INFO",
)


def _keys_in(text: str) -> set[str]:
    # the one rank-key function (SGLang tags of any kind, vLLM/Ray prefixes, [rankN]:)
    return rank_keys(text)


def _blocks(data: bytes, lo: int, hi: int) -> list[tuple[int, int]]:
    """(start, end) of ~64 KiB pieces of ``data[lo:hi]`` that end at a newline."""
    out: list[tuple[int, int]] = []
    n = hi
    i = lo
    while i < n:
        j = data.find(b"\n", min(i + BLOCK_BYTES, n - 1), n)
        j = n if j < 0 else j + 1
        out.append((i, j))
        i = j
    return out


class _Scanner:
    """Per-source prefilter state."""

    def __init__(
        self, sp: SourceParser, stats: BulkStats, rule_dirs: tuple[Path, ...] = ()
    ) -> None:
        self.sp = sp
        self.stats = stats
        self.lits = sorted({x.lower() for x in candidate_literals(rule_dirs)})
        self.first_found: set[bytes] = set()  # bulk literals (per key) already located once
        self.markers: tuple[bytes, ...] = ()  # bulk kinds that dominate this chunk
        # chunks left to look for the first serving line of ranks that have none yet
        self.keyed_budget: int | None = None
        self.nul = 0  # NUL bytes seen in the parsed parts
        self.absent: dict[str, int] = {}  # rank key -> chunks in a row it was not found in

    def _decode(self, raw: bytes) -> str:
        text, bad = decode(raw)
        self.sp.undecodable += bad
        if "\x00" in text:
            self.nul += text.count("\x00")
        return text

    def _pick_markers(self, data: bytes, lo: int) -> None:
        sample = data[lo : lo + 4 * BLOCK_BYTES]
        counts = [(sample.count(m), m) for m in _BULK_MARKERS]
        self.markers = tuple(m for c, m in sorted(counts, reverse=True)[:3] if c > 0)

    def chunk(self, data: bytes, base: int, lo: int = 0, hi: int | None = None) -> int:
        """Feed the candidate lines of ``data[lo:hi]``; returns its number of lines."""
        import polars as pl

        sp = self.sp
        keys = self.stats.keys
        hi = len(data) if hi is None else hi
        blocks = _blocks(data, lo, hi)
        self._pick_markers(data, lo)
        # 1. blocks made only of bulk lines (serving batch lines, access lines) are not
        #    parsed: counting the markers is cheaper than a multi-literal scan
        block_lines: list[int] = []
        todo: list[int] = []
        for bi, (a, b) in enumerate(blocks):
            n = data.count(b"\n", a, b) + (0 if data[b - 1 : b] == b"\n" else 1)
            block_lines.append(n)
            bulk = 0
            for m in self.markers:
                bulk += data.count(m, a, b)
                if bulk >= n:
                    break
            if bulk < n:
                todo.append(bi)
        picked: dict[int, str] = {}  # line number -> line
        todo_text: list[str] = []
        block_line0: list[int] = []
        acc = base
        for n in block_lines:
            block_line0.append(acc)
            acc += n
        n_lines = acc - base
        if todo:
            texts = [self._decode(data[blocks[bi][0] : blocks[bi][1]]) for bi in todo]
            todo_text = texts
            mask = pl.Series(texts).str.contains_any(self.lits, ascii_case_insensitive=True)
            for bi, text, hit in zip(todo, texts, mask.to_list(), strict=True):
                if hit:
                    self._lines(text, block_line0[bi], picked)
        # 2. rank keys: sampled from the chunk's ends and from the candidates. A key seen
        #    here is searched for in this chunk; one not seen for two chunks no longer is
        #    (a rank that went quiet, or one that never logs serving lines) until it shows
        #    up in a sample or a candidate again.
        seen_now: set[str] = set()
        if hi - lo > 2 * _SAMPLE:
            seen_now |= _keys_in(self._decode(data[lo : lo + _SAMPLE]))
            seen_now |= _keys_in(self._decode(data[hi - _SAMPLE : hi]))
        else:
            seen_now |= _keys_in(self._decode(data[lo:hi]))
        if picked:
            seen_now |= _keys_in("\n".join(picked.values()))
        keys |= seen_now
        for key in seen_now:
            self.absent[key] = 0
        # 3. first and last lines of the bulk: each rank's last line in the chunk, the first
        #    serving line of each rank and kind, and the chunk's last line
        extra: set[int] = set()
        for key in keys:
            if self.absent.get(key, 0) >= 2:
                continue
            bkey = key.encode()
            i = data.rfind(bkey, lo, hi)
            if i >= 0:
                extra.add(i)
                self.absent[key] = 0
            else:
                self.absent[key] = self.absent.get(key, 0) + 1
            if key.endswith("] ") and (self.keyed_budget is None or self.keyed_budget > 0):
                for lit in _KEYED_BULK:
                    probe = bkey + lit.encode()
                    if probe in self.first_found:
                        continue
                    i = data.find(probe, lo, hi)
                    if i >= 0:
                        extra.add(i)
                        self.first_found.add(probe)
        for lit in _GLOBAL_BULK:
            blit = lit.encode()
            if blit in self.first_found:
                continue
            if any(m in blit or blit in m for m in self.markers):
                i = data.find(blit, lo, hi)  # a bulk kind of this chunk: found early
            else:
                # not a bulk kind here: it can only be in the blocks that were scanned
                i = -1
                for bi, text in zip(todo, todo_text, strict=False):
                    j = text.find(lit)
                    if j >= 0:
                        i = blocks[bi][0] + len(text[:j].encode())
                        break
            if i >= 0:
                extra.add(i)
                self.first_found.add(blit)
        if self.keyed_budget is not None:
            self.keyed_budget -= 1
        elif any(lit.encode() in self.first_found for lit in _KEYED_BULK):
            self.keyed_budget = 2
        last = hi - 1
        while last >= lo and data[last] in (10, 13):
            last -= 1
        if last >= lo:
            extra.add(last)
        starts = [a for a, _ in blocks]
        forced: set[int] = set()
        for pos in extra:
            start = max(lo, data.rfind(b"\n", lo, pos) + 1)
            bi = bisect.bisect_right(starts, start) - 1
            num = block_line0[bi] + data.count(b"\n", starts[bi], start) + 1
            forced.add(num)
            if num not in picked:
                end = data.find(b"\n", start, hi)
                picked[num] = self._decode(data[start : hi if end < 0 else end])
        for num in sorted(picked):
            sp.feed(num, picked[num], force=num in forced)
        self.stats.candidates += len(picked)
        self.stats.lines += n_lines
        self.stats.bulk_lines += n_lines - len(picked)
        return n_lines

    def _lines(self, text: str, line0: int, picked: dict[int, str]) -> None:
        import polars as pl

        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        lm = pl.Series(lines).str.contains_any(self.lits, ascii_case_insensitive=True)
        for k, (line, m) in enumerate(zip(lines, lm.to_list(), strict=True)):
            if not m and line[:1] == "#" and line[1:2].isdigit() and " from " in line:
                m = True  # a frame of torch's failed-collective report
            elif not m and line.startswith("frame #"):
                m = True  # a C++ backtrace frame
            if m or ("\r" in line and "\r" in line.rstrip("\r")):
                picked[line0 + k + 1] = line
                if k > 0 and ("% Completed" in line or "%|" in line):
                    picked[line0 + k] = lines[k - 1]  # a worker prefix printed before its bar
            elif line[:1] in (" ", "\t") and line.strip():
                picked[line0 + k + 1] = line
                if k > 0:
                    picked[line0 + k] = lines[k - 1]


def scan_source(
    src: Source,
    sp: SourceParser,
    notes: list[str],
    *,
    progress: Callable[[int, int], None] | None = None,
    done_before: int = 0,
    total: int = 0,
    rule_dirs: Sequence[Path] = (),
) -> BulkStats:
    """Stream one source through the prefilter into ``sp``; returns the bulk statistics.

    ``rule_dirs``: folders of extra rules, whose needles also make lines candidates."""
    stats = BulkStats()
    scanner = _Scanner(sp, stats, tuple(Path(d) for d in rule_dirs))
    base = 0  # lines before this chunk
    for buf, lo, hi, consumed in iter_chunks(src, notes, chunk_bytes=reader.CHUNK_BYTES):
        base += scanner.chunk(buf, base, lo, hi)
        if progress is not None:
            done = done_before + consumed
            progress(min(done, total) if total else done, total)  # total 0: size unknown
    if scanner.nul:
        notes.append(f"{src.name}: {scanner.nul} NUL bytes dropped")
    return stats
