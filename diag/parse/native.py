"""diag's compiled line scanner (``_scan.c``), loaded through :mod:`ctypes`.

The library is found, in this order: next to ``_scan.c`` (``pip install`` builds it there,
see ``hatch_build.py``), in diag's cache folder, or built into that folder now with the
system C compiler (``$CC``, else ``cc``; about 0.3 s, once per version of the source).
Each file is named by a hash of the source and the machine, so a stale build is never
loaded. Without a compiler, with ``DIAG_NO_NATIVE=1``, or when anything in that goes
wrong, :func:`load` returns None and the prefilter uses Hyperscan (same result, slower on
logs where most lines are candidates): diag never fails for want of it.

What the passes do is in ``_scan.c``'s header; :class:`Automaton` wraps one automaton.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Automaton", "Counter", "Native", "build", "cap", "library_name", "load", "loaded"]

SOURCE = Path(__file__).with_name("_scan.c")
_FLAGS = ("-O2", "-shared", "-fPIC", "-std=c99")
_COMPILE_TIMEOUT_S = 60


def library_name() -> str:
    """The file name of the library built from this source on this machine."""
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(" ".join((platform.machine(), platform.system(), *_FLAGS)).encode())
    return f"_scan-{h.hexdigest()[:16]}.so"


def build(dest: Path) -> Path | None:
    """Compile the library into folder ``dest``; its path, or None (no compiler, an error).
    Written under a temporary name and renamed: a concurrent run never loads half a file."""
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        return None
    target = dest / library_name()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".scan-", suffix=".so", dir=dest)
        os.close(fd)
        done = subprocess.run(  # noqa: S603 - the compiler named by $CC, on our own source
            [cc, *_FLAGS, "-o", tmp, str(SOURCE)], capture_output=True,
            timeout=_COMPILE_TIMEOUT_S, check=False,
        )
        if done.returncode != 0:
            os.unlink(tmp)
            return None
        os.replace(tmp, target)
    except (OSError, subprocess.SubprocessError):
        return None
    return target


_I32P = ctypes.POINTER(ctypes.c_int32)


class Native:
    """The loaded library's functions, typed."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self.lib = lib
        lib.dg_build.restype = ctypes.c_void_p
        lib.dg_build.argtypes = [ctypes.c_char_p, _I32P, _I32P, ctypes.c_int32,
                                 ctypes.c_int32, ctypes.c_int32]
        lib.dg_free.restype = None
        lib.dg_free.argtypes = [ctypes.c_void_p]
        lib.dg_candidates.restype = ctypes.c_uint64
        lib.dg_candidates.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                      ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_int64]
        for fn in (lib.dg_last, lib.dg_last_skip):
            fn.restype = ctypes.c_int32
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.dg_hits.restype = ctypes.c_int64
        lib.dg_hits.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        lib.dg_find.restype = ctypes.c_int64
        lib.dg_find.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p,
                                ctypes.c_int64, ctypes.c_int64]
        lib.dg_newlines.restype = ctypes.c_int64
        lib.dg_newlines.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                    ctypes.c_int64]
        lib.dg_newlines_flags.restype = ctypes.c_int64
        lib.dg_newlines_flags.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                          ctypes.c_int64, ctypes.c_void_p]
        lib.dg_utf8_valid.restype = ctypes.c_int32
        lib.dg_utf8_valid.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.dg_nonblank.restype = None
        lib.dg_nonblank.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int64, ctypes.c_void_p]
        lib.dg_kinds.restype = None
        lib.dg_kinds.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int64, ctypes.c_void_p]
        lib.dg_form.restype = ctypes.c_int64
        lib.dg_form.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32,
                                ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        lib.dg_counter_new.restype = ctypes.c_void_p
        lib.dg_counter_new.argtypes = []
        lib.dg_counter_free.restype = None
        lib.dg_counter_free.argtypes = [ctypes.c_void_p]
        lib.dg_cap.restype = ctypes.c_int32
        lib.dg_cap.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_void_p]
        self._programs: dict[tuple[Any, ...], tuple[Any, bytes, int, int]] = {}

    def find(self, chunk: bytes | bytearray, needle: bytes, rare: int = 0) -> int:
        """The first offset of ``needle`` in ``chunk`` (-1: none); ``rare``: the index of
        a byte of it that is rare in the text (memchr runs on that byte)."""
        return int(self.lib.dg_find(_addr(chunk), len(chunk), needle, len(needle), rare))

    def newlines(self, chunk: bytes | bytearray) -> Any:
        """The offsets of the newlines of ``chunk`` (numpy int64)."""
        return self.newlines_flags(chunk)[0]

    def newlines_flags(self, chunk: bytes | bytearray) -> tuple[Any, int]:
        """(the offsets of the newlines of ``chunk``, flags): bit 0 set when ``chunk`` may
        hold a NUL byte, bit 1 when it may hold a byte past ASCII (both unsure: set), bit 2
        when it is known to be valid UTF-8 (as :meth:`utf8_valid` tells; unsure: clear)."""
        import numpy as np

        addr = _addr(chunk)
        guess = len(chunk) // 64 + 16
        out = np.empty(guess, dtype=np.int64)
        flags = ctypes.c_int32(3)
        n = int(self.lib.dg_newlines_flags(addr, len(chunk), out.ctypes.data, guess,
                                           ctypes.byref(flags)))
        if n > guess:
            out = np.empty(n, dtype=np.int64)
            self.lib.dg_newlines(addr, len(chunk), out.ctypes.data, n)
        return out[:n], int(flags.value) if chunk else 0

    def utf8_valid(self, chunk: bytes | bytearray) -> bool:
        """Whether ``chunk`` decodes as strict UTF-8 (without building the text)."""
        return bool(self.lib.dg_utf8_valid(_addr(chunk), len(chunk)))

    def nonblank(self, chunk: bytes | bytearray, starts: Any, ends: Any) -> Any:
        """Per line [starts[i], ends[i]): whether ``bytes.strip()`` leaves anything (bool)."""
        return self._per_line(self.lib.dg_nonblank, chunk, starts, ends, "uint8").view(bool)

    def kinds(self, chunk: bytes | bytearray, starts: Any, ends: Any) -> Any:
        """The kind hash (uint64) of each line [starts[i], ends[i]) of ``chunk``."""
        return self._per_line(self.lib.dg_kinds, chunk, starts, ends, "uint64")

    _BIG = 256  # numbers of more than 15 digits reported per call (more: a second call)

    def form(self, chunk: bytes | bytearray, q: Any, steps: Sequence[Any]) -> list[Any] | None:
        """The value columns (numpy float64, one per number or list step) of the line form
        ``steps`` (see :func:`diag.parse.serving._match_form`: literals, "num", "int",
        ("int", digits), "list") matched at each offset ``q``, or None when one offset
        does not hold the whole form. A number of more than 15 digits is read by
        ``float()``, as the numpy reader does."""
        import numpy as np

        key = tuple(steps)
        prog = self._programs.get(key)
        if prog is None:
            ops: list[int] = []
            lits = b""
            cols = 0
            for step in steps:
                if isinstance(step, bytes):
                    if b"\x00" in step:
                        raise ValueError("a form's literal holds a NUL byte")
                    ops += [0, len(lits), len(step)]
                    lits += step
                elif step == "list":
                    ops += [2, 0, 0]
                    cols += 1
                else:
                    digits = step[1] if isinstance(step, tuple) else 12
                    ops += [1, digits, 8 if step == "num" else 0]
                    cols += 1
            prog = (np.array(ops, dtype=np.int32), lits or b"\x00", len(ops) // 3, cols)
            self._programs[key] = prog
        arr, lits, n_ops, cols = prog
        q = np.ascontiguousarray(q, dtype=np.int64)
        nq = len(q)
        out = np.empty(cols * nq, dtype=np.float64)
        big = self._BIG
        while True:
            cell = np.empty(big, dtype=np.int64)
            at = np.empty(big, dtype=np.int64)
            length = np.empty(big, dtype=np.int64)
            n = int(self.lib.dg_form(_addr(chunk), len(chunk), q.ctypes.data, nq,
                                     arr.ctypes.data, n_ops, lits, out.ctypes.data,
                                     cell.ctypes.data, at.ctypes.data, length.ctypes.data, big))
            if n <= big:
                break
            big = n
        if n < 0:
            return None
        for c, a, ln in zip(cell[:n].tolist(), at[:n].tolist(), length[:n].tolist(),
                            strict=True):
            out[c] = float(chunk[a : a + ln])
        return [out[j * nq : (j + 1) * nq] for j in range(cols)]

    @staticmethod
    def _per_line(fn: Any, chunk: bytes | bytearray, starts: Any, ends: Any, dtype: str) -> Any:
        """``fn(chunk, starts, ends, n, out)`` over the lines given: ``out``, one value each."""
        import numpy as np

        starts = np.ascontiguousarray(starts, dtype=np.int64)
        ends = np.ascontiguousarray(ends, dtype=np.int64)
        out = np.zeros(len(starts), dtype=dtype)
        if len(starts):
            fn(_addr(chunk), starts.ctypes.data, ends.ctypes.data, len(starts), out.ctypes.data)
        return out


class Counter:
    """A count per 64-bit key, kept in C (the repeat cap's kinds over a run; see
    :func:`cap`)."""

    def __init__(self, native: Native) -> None:
        self._native = native
        ptr = native.lib.dg_counter_new()
        if not ptr:
            raise MemoryError("the scanner's counter could not be made")
        self._ptr: ctypes.c_void_p | None = ctypes.c_void_p(ptr)

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr is not None and ptr.value:
            self._native.lib.dg_counter_free(ptr)
            self._ptr = None


def cap(counter: Counter, chunk: bytes | bytearray, starts: Any, ends: Any, ids: Any,
        state: list[int], keep: int, keep_late: int, budget: int) -> Any:
    """The repeat cap over the candidate lines [starts[i], ends[i]) of ``chunk`` in order
    (kinds ``ids``, counted in ``counter``); ``state``: [skipping, parsed, late], updated.
    Returns which lines are dropped (numpy bool). See ``dg_cap`` in ``_scan.c``."""
    import numpy as np

    nat = counter._native
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    ids = np.ascontiguousarray(ids, dtype=np.uint64)
    st = np.array(state, dtype=np.int64)
    drop = np.zeros(len(starts), dtype=np.uint8)
    if len(starts) and nat.lib.dg_cap(_addr(chunk), starts.ctypes.data, ends.ctypes.data,
                                      ids.ctypes.data, len(starts), counter._ptr,
                                      st.ctypes.data, keep, keep_late, budget,
                                      drop.ctypes.data) != 0:
        raise MemoryError("the scanner's counter could not grow")
    state[:] = st.tolist()
    return drop.view(bool)


def _addr(chunk: bytes | bytearray) -> int:
    """The address of ``chunk``'s bytes (no copy; the caller keeps ``chunk`` alive)."""
    import numpy as np

    if not chunk:
        return 0
    return int(np.frombuffer(chunk, dtype=np.uint8).ctypes.data)


class Automaton:
    """One automaton of byte strings. ``kinds[i]``: 0 a candidate literal, 1 a candidate
    whose line before is one too, 2 a label (reported by presence, matched with its case),
    3 a candidate literal walked by its first 32 bytes, its rest compared where they occur
    (same candidates as 0, a smaller automaton for long literals).
    ``caseless``: ASCII letters of the input match either case."""

    def __init__(self, native: Native, patterns: Sequence[bytes], kinds: Sequence[int],
                 *, caseless: bool, special: bool) -> None:
        self._native = native
        n = len(patterns)
        lens = (ctypes.c_int32 * max(n, 1))(*[len(p) for p in patterns])
        ks = (ctypes.c_int32 * max(n, 1))(*kinds)
        ptr = native.lib.dg_build(b"".join(patterns), lens, ks, n, int(caseless), int(special))
        if not ptr:
            raise MemoryError("the scanner's automaton could not be built")
        self._ptr: ctypes.c_void_p | None = ctypes.c_void_p(ptr)
        self.n_patterns = n
        self.n_labels = sum(1 for k in kinds if k == 2)
        # (speed) the label offsets' buffer, kept from chunk to chunk: a fresh one costs
        # a page fault per 4 KiB the offsets fill (about 10% of the pass on a vLLM
        # serving log, where every line has labels); one per thread (the parsing thread
        # runs the pass too, on the chunks the read-ahead thread leaves it)
        self._local = threading.local()

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr is not None and ptr.value:
            self._native.lib.dg_free(ptr)
            self._ptr = None

    LABEL_CAP = 1 << 16  # positions kept per label and chunk (pages touched only as used)

    def candidates(
        self, chunk: bytes | bytearray, nl: Any, n_lines: int
    ) -> tuple[Any, int, dict[int, Any]]:
        """(sorted indices of the candidate lines of ``chunk``, bits of the labels found,
        label index -> sorted start offsets of all its occurrences, for each label found
        at most :data:`LABEL_CAP` times); ``nl``: the offsets of its newlines."""
        import numpy as np

        nl = np.ascontiguousarray(nl, dtype=np.int64)
        mask = np.zeros(max(n_lines, 1), dtype=np.uint8)
        count = np.zeros(max(self.n_labels, 1), dtype=np.int64)
        cap = self.LABEL_CAP
        at = getattr(self._local, "at", None)
        if at is None:
            at = self._local.at = np.empty(max(self.n_labels, 1) * cap, dtype=np.int64)
        labels = self._native.lib.dg_candidates(self._ptr, _addr(chunk), len(chunk),
                                                nl.ctypes.data, len(nl),
                                                mask.ctypes.data, n_lines,
                                                count.ctypes.data, at.ctypes.data, cap)
        # (np.sort copies: the buffer is free again once this is built)
        where = {j: np.sort(at[j * cap : j * cap + c])
                 for j, c in enumerate(count[: self.n_labels].tolist()) if 0 < c <= cap}
        return np.flatnonzero(mask[:n_lines]).astype(np.int64), int(labels), where

    def hits(self, text: bytes | bytearray) -> tuple[Any, Any]:
        """(line indices, pattern indices) of each (line, pattern) pair where the pattern
        occurs on that line of ``text`` (lines cut at newlines), each pair once, in order
        of line. The automaton must be built without ``special`` and hold no pattern with
        a newline."""
        import numpy as np

        cap = len(text) // 32 + 64
        while True:
            lines = np.empty(cap, dtype=np.int64)
            pats = np.empty(cap, dtype=np.int32)
            n = int(self._native.lib.dg_hits(self._ptr, _addr(text), len(text),
                                             lines.ctypes.data, pats.ctypes.data, cap))
            if n < 0:
                raise MemoryError("the scanner's hit pass could not allocate")
            if n <= cap:
                return lines[:n], pats[:n]
            cap = n

    def last(self, chunk: bytes | bytearray, nl: Any, dropped: Any = None,
             absent: Any = None, *, skip: bool = True) -> Any:
        """Start offset (int64) of each pattern's last occurrence in ``chunk`` on a line
        whose ``dropped`` flag (uint8 per line, or None) is 0; -1 where there is none.
        ``absent`` (uint8 per pattern, or None): patterns the caller knows are not in
        the chunk (-1 without a walk). The automaton must hold the patterns reversed."""
        import numpy as np

        nl = np.ascontiguousarray(nl, dtype=np.int64)
        out = np.full(max(self.n_patterns, 1), -1, dtype=np.int64)
        dptr = aptr = None
        if dropped is not None:
            dropped = np.ascontiguousarray(dropped, dtype=np.uint8)
            dptr = dropped.ctypes.data
        if absent is not None:
            absent = np.ascontiguousarray(absent, dtype=np.uint8)
            aptr = absent.ctypes.data
        # (speed) dg_last_skip: the same answer, jumping over the text where no key can
        # end (dg_last, the walk of every byte, is the tests' reference: skip=False)
        fn = self._native.lib.dg_last_skip if skip else self._native.lib.dg_last
        fn(self._ptr, _addr(chunk), len(chunk), nl.ctypes.data, len(nl), dptr, aptr,
           out.ctypes.data)
        return out[: self.n_patterns]


_LOADED: list[Native | None] = []


def loaded() -> Native | None:
    """The library when :func:`load` was called already (never builds or loads it)."""
    return _LOADED[0] if _LOADED else None


def load() -> Native | None:
    """The library (built if need be), or None; decided once per process."""
    if _LOADED:
        return _LOADED[0]
    lib = None if os.environ.get("DIAG_NO_NATIVE") else _load()
    _LOADED.append(lib)
    return lib


def _load() -> Native | None:
    try:
        name = library_name()
    except OSError:
        return None
    places = [SOURCE.parent / name]
    from diag import cache

    folder = cache.cache_dir()
    if folder is not None:
        places.append(folder / "native" / name)
    for path in places:
        if path.is_file():
            got = _open(path)
            if got is not None:
                return got
    if folder is None:
        return None
    built = build(folder / "native")
    return _open(built) if built is not None else None


def _open(path: Path) -> Native | None:
    try:
        return Native(ctypes.CDLL(str(path)), path)
    except (OSError, AttributeError):
        return None
