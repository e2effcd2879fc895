"""rank_keys' shortcut (tags only, when no other key form can occur) finds what the full
alternation finds."""

from __future__ import annotations

import random

import pytest

from diag.parse.coords import KEY_RE, rank_keys

PIECES = ("[2025-01-01 00:00:00 DP0 TP3 EP3] ", "00:00:00.123 PD1 TP2] ", "12:34:56 TP7] ",
          "(VllmWorker rank=3 pid=12) ", "(Worker_TP0 pid=9) ", "pid=", "[rank3]:", "[rank",
          "x", " ", "\n", "] ", "12:", "34:56", " TP", "1", "(", ")", "DP", "ERROR ")


@pytest.mark.parametrize("seed", range(4))
def test_rank_keys_equal_the_full_search(seed: int) -> None:
    rng = random.Random(seed)
    short = 0
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 10)))
        want = {a or b or c for a, b, c in KEY_RE.findall(text)}
        assert rank_keys(text) == want, text
        short += "pid=" not in text and "[rank" not in text and bool(want)
    assert short > 100  # the shortcut is taken, and finds keys
