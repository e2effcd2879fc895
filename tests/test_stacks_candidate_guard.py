"""The stack extractor's literal guard never hides a line its candidate search matches."""

from __future__ import annotations

import random

import pytest

from diag.stacks.textdump import _CANDIDATE, _candidate

PIECES = ("Thread ", "Thread", "Current thread", "current Thread", "Process 12", "Process x",
          'File "', "File ", "Traceback", "Pyspy ", "Stack (", "Stack trace", "Stack of ",
          "Stack", "KeyboardInterrupt", '.py", line 3 in ', '.py", line ', "#0 ", "#12 ", "#",
          "#running-req: 3", " #3 foo from bar", " #4   0xdeadbeef in ", " encountered !",
          "] Caught signal 11", "]  Caught signal 6", "backtrace (tid:",
          " 12 0x00007f12aabbccdd x() ",
          "3 0x0000deadbeef00 f() ", " 0x", "0x12", " ", "\t", "a", "7", "(", ")", "]", "[",
          "ünï", "INFO ", "[2026-01-01 00:00:00 TP0] ")


@pytest.mark.parametrize("seed", range(6))
def test_guard_agrees_with_the_search(seed: int) -> None:
    rng = random.Random(seed)
    hits = 0
    for _ in range(4000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))
        want = _CANDIDATE.search(text) is not None
        assert _candidate(text) == want, text
        hits += want
    assert 400 < hits < 3900  # both answers are exercised
