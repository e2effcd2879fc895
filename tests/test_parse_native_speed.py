"""The scanner's faster passes against the plain ones they replace (same answers):
dg_last_skip (jumps to where a key can end) against dg_last (walks every byte), and the
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


def _keysets(rng: random.Random) -> list[list[bytes]]:
    vllm = [b"(VllmWorker rank=%d pid=%d) " % (r, 1000 + r) for r in range(8)]
    sgl = [b"TP%d] " % r for r in range(4)] + [b"DP1 TP%d] " % r for r in range(2)]
    torch = [b"[rank%d]:" % r for r in range(4)]
    ansi = [b"(EngineCore pid=77)\x1b[0m "]
    mixed = vllm + sgl + torch + ansi
    one_byte = [b"] ", b"x"]  # a key of one byte: the plain walk
    wide = [b"a] ", b"b) ", b"c: ", b"d> ", b"e< ", b"f;", b"g,", b"h.", b"i!"]  # >4 pairs
    suffixes = [b"TP1] ", b"P1] ", b"1] ", b"] "]  # keys that end other keys
    rand = [bytes(rng.choice(b"ab] )x:") for _ in range(rng.randint(2, 6))) for _ in range(5)]
    return [vllm, sgl, torch, mixed, one_byte, wide, suffixes, rand]


def _text(rng: random.Random, keys: list[bytes], n_lines: int) -> bytes:
    noise = [b"INFO 12-01 10:00:00 [core.py:12] ", b"x", b"] ", b") ", b"]:", b" ",
             b"(VllmWorker rank=9 pid=1) ", b"TP] ", b"\x1b[0m ", b"pid=", b"\r", b"  "]
    lines = [b"".join(rng.choice(keys + noise) for _ in range(rng.randint(0, 12)))
             for _ in range(n_lines)]
    return b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")


def test_last_skip_equals_the_plain_walk() -> None:
    assert NAT is not None
    rng = random.Random(2026)
    for keys in _keysets(rng):
        ac = native.Automaton(NAT, [k[::-1] for k in keys], [0] * len(keys), caseless=False,
                              special=False)
        for _ in range(150):
            chunk = _text(rng, keys, rng.choice((0, 1, 3, 40, 400)))
            nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
            n = len(nl) + 1
            for dropped in (None, np.array([rng.random() < rng.choice((0.1, 0.5, 0.9))
                                            for _ in range(n)], dtype=np.uint8)):
                for absent in (None, np.array([int(k not in chunk) for k in keys],
                                              dtype=np.uint8)):
                    want = ac.last(chunk, nl, dropped, absent, skip=False).tolist()
                    got = ac.last(chunk, nl, dropped, absent, skip=True).tolist()
                    assert got == want, (keys, chunk, dropped)


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
