"""The columnar repeat cap decides exactly as the line-by-line loop it replaced."""

from __future__ import annotations

import random
from typing import Any

import pytest

from diag.parse import native, pipeline
from diag.parse.pipeline import RepeatCap
from diag.parse.prefilter import Lines

np = pytest.importorskip("numpy")

_KINDS = (
    b"[2026-02-23 01:00:00 TP3] WARNING scheduler.py:1422: The request queue is long.",
    b"[2026-02-23 01:00:00 TP5] ERROR Request 4f1 failed",
    b"Traceback (most recent call last):",
    b'  File "/x/y.py", line 12, in run',
    b"    raise RuntimeError('boom')",
    b"\t at frame 3",
    b"   ",
    b"",
    b"\r",
    b"\x0b \x0c",
    b"\r progress 10%",
    b"x" * 200 + b" 123",
    b"x" * 200 + b" 456",
)


def _chunks(
    rng: random.Random, n_chunks: int, per: int, new: float = 0.02
) -> list[bytes]:
    out = []
    for _ in range(n_chunks):
        lines = []
        for _ in range(per):
            k = rng.choice(_KINDS)
            # digits vary: the same kind; a few letters vary: a new kind now and then
            k = k.replace(b"3", str(rng.randint(0, 999)).encode())
            if rng.random() < new:
                k += bytes([97 + rng.randint(0, 25 if new < 0.1 else 9)])
            lines.append(k)
        out.append(b"\n".join(lines) + (b"\n" if rng.random() < 0.8 else b""))
    return out


def _lines(chunk: bytes, rng: random.Random) -> tuple[Lines, Any]:
    nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    probe = Lines(nl=nl, size=len(chunk), candidates=np.empty(0, dtype=np.int64))
    n = len(probe)
    cand = np.array(sorted(rng.sample(range(n), k=max(1, n * 3 // 4))), dtype=np.int64)
    return Lines(nl=nl, size=len(chunk), candidates=cand), cand


_NATIVE = native.load()


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("seed", range(12))
def test_columnar_cap_equals_the_loop(
    seed: int, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways of telling kinds apart: their bytes (in Python), a 64-bit hash (in C)."""
    if engine == "native" and _NATIVE is None:
        pytest.skip("no C compiler: the scanner is not built")
    rng = random.Random(seed)
    # small limits so that every branch is taken: free lines, the cap, the budget, late
    monkeypatch.setattr(pipeline, "REPEAT_CAP_AFTER", rng.choice((0, 50, 400)))
    monkeypatch.setattr(pipeline, "REPEAT_KEEP", rng.choice((2, 5, 20)))
    monkeypatch.setattr(pipeline, "REPEAT_BUDGET", rng.choice((30, 200, 10_000)))
    monkeypatch.setattr(pipeline, "REPEAT_KEEP_LATE", rng.choice((1, 2)))
    cap = RepeatCap(_NATIVE if engine == "native" else None)
    ref: dict[str, Any] = {"kinds": {}, "skipping": False, "parsed": 0, "late": 0}
    g0 = 0
    for chunk in _chunks(rng, 6, rng.choice((5, 120, 700)), new=rng.choice((0.02, 0.3))):
        data: bytes | bytearray = bytearray(chunk) if rng.random() < 0.5 else chunk
        lines, cand = _lines(chunk, rng)
        if engine == "native" and rng.random() < 0.5:
            # the candidates' bounds and kinds computed ahead (the read-ahead thread's way)
            lines = cap.prepare(data, lines)
            assert lines.cand_kinds is not None
            cand = lines.candidates
        kept, dropped = cap.split(g0, data, lines, cand)
        want = RepeatCap.split_lines(ref, g0, data, lines, cand)
        assert (kept, set(dropped.tolist())) == want
        assert dropped.tolist() == sorted(want[1])
        assert (cap.parsed, cap.late, cap.skipping) == (ref["parsed"], ref["late"],
                                                          ref["skipping"])
        g0 += len(lines)


def test_the_random_chunks_reach_every_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "REPEAT_CAP_AFTER", 50)
    monkeypatch.setattr(pipeline, "REPEAT_KEEP", 5)
    monkeypatch.setattr(pipeline, "REPEAT_BUDGET", 200)
    monkeypatch.setattr(pipeline, "REPEAT_KEEP_LATE", 2)
    rng = random.Random(7)
    cap = RepeatCap()
    g0 = dropped = 0
    for chunk in _chunks(rng, 6, 700, new=0.3):
        lines, cand = _lines(chunk, rng)
        _, drop = cap.split(g0, chunk, lines, cand)
        dropped += len(drop)
        g0 += len(lines)
    assert dropped > 1000 and cap.late > 0 and cap.parsed >= 200
