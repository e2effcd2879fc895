"""The rules engine's batch needle pass: a superset of the texts that hold a needle."""

from __future__ import annotations

import random

import pytest

from diag.parse import native
from diag.rules.engine import _NeedleFinder

NEEDLES = ("error:", "nccl warn", "out of memory", ".cc:", "killed", "ünïcode", "x" * 40)
PIECES = ("ERROR:", "Error", "error", ": ", "NCCL WARN", "nccl", " warn", "out of", " memory",
          "OUT OF MEMORY", "init.cc:12", ".CC:", "KILLED", "kil", "led", "\n", "\n  ", "\r",
          "ÜNÏCODE", "ünï", "code", "\u212aILLED", "x" * 39, "x", "#1 ", "plain text ", "İ")


@pytest.mark.skipif(native.load() is None, reason="no C compiler: the scanner is not built")
@pytest.mark.parametrize("seed", range(4))
def test_batch_pass_keeps_every_text_with_a_needle(seed: int) -> None:
    rng = random.Random(seed)
    finder = _NeedleFinder(NEEDLES)
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
             for _ in range(_NeedleFinder.BATCH + 500)]
    maybe = finder.maybe(texts)
    assert maybe is not None and len(maybe) == len(texts)
    exact = [bool(finder.present(t.lower())) for t in texts]
    assert all(m for m, e in zip(maybe, exact, strict=True) if e)
    # and it filters: most texts without a needle are left out
    assert sum(maybe) < len(texts) * 0.9
    assert sum(exact) > 100


def test_few_texts_are_each_tested() -> None:
    assert _NeedleFinder(NEEDLES).maybe(["error: x"] * 10) is None


@pytest.mark.skipif(native.load() is None, reason="no C compiler: the scanner is not built")
@pytest.mark.parametrize("seed", range(4))
def test_batch_pass_finds_exactly_the_needles_of_each_text(seed: int) -> None:
    rng = random.Random(seed)
    finder = _NeedleFinder((*NEEDLES, "nccl", "cc:", "r:", "\u03c3x"))
    pieces = (*PIECES, "\u03a3X", "\u03a3", "\ud800", "k\u212a")
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
             for _ in range(_NeedleFinder.BATCH + 500)]
    found = finder.found(texts)
    assert found is not None and len(found) == len(texts)
    assert found == [tuple(finder.present(t.lower())) for t in texts]
    assert sum(1 for f in found if len(f) > 1) > 50


def test_needle_with_a_newline_is_tested_per_text() -> None:
    texts = ["a\nb"] * (_NeedleFinder.BATCH + 1)
    assert _NeedleFinder(("a\nb",)).found(texts) is None
