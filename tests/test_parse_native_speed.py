"""The scanner's faster passes against the plain ones they replace (same answers): the
SSSE3 kind hashes (bytes packed 16 at a time) against the portable packing.

Skipped where no C compiler is there (the scanner is then not used)."""

from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest

from diag.parse import native

NAT = native.load()
pytestmark = pytest.mark.skipif(NAT is None, reason="no C compiler: the scanner is not built")


def test_kind_hashes_equal_the_portable_packing() -> None:
    """Lines of every length up to past the 160 bytes hashed, digits anywhere (the SSSE3
    pass packs 16, then 8 bytes at a time, then reads the last word of the line)."""
    assert NAT is not None
    rng = random.Random(7)
    alphabet = b"abc XYZ:[]()0123456789\t.-"
    lines = [bytes(rng.choice(alphabet) for _ in range(n)) for n in range(0, 200)
             for _ in range(20)]
    data = b"\n".join(lines)
    starts, ends, at = [], [], 0
    for line in lines:
        starts.append(at)
        ends.append(at + len(line))
        at += len(line) + 1
    s = np.array(starts, dtype=np.int64)
    e = np.array(ends, dtype=np.int64)
    fast = NAT.kinds(data, s, e)
    plain = np.zeros(len(s), dtype=np.uint64)
    fn = NAT.lib.dg_kinds_plain
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_void_p]
    fn(native._addr(data), s.ctypes.data, e.ctypes.data, len(s), plain.ctypes.data)
    assert fast.tolist() == plain.tolist()
    # and the same kind (digits deleted, first 160 bytes) gives the same hash
    by_kind: dict[bytes, int] = {}
    for line, h in zip(lines, fast.tolist(), strict=True):
        kind = line[:160].translate(None, b"0123456789")
        assert by_kind.setdefault(kind, h) == h
