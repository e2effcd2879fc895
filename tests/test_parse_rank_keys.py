"""rank_keys (KEY_RE's alternatives searched apart, each from a literal) finds what the
full alternation finds."""

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


# pieces that put one key form against another: colons and digits in a worker's ip, times
# with more colons, colour codes, a prefix broken by a newline, tags without a time
HARD = (*PIECES, ", ip=10.0.0.1:12:34:56) ", "(Worker pid=7, ip=1:22:33:44)", "11:", "\x1b[0m ",
        "^[[0m ", "(EngineCore_DP0 pid=3)", "\x1b[0m", "(Worker\npid=4) ", "rank=1 ", " DP0",
        "12:34:56,789", " EP2] ", ":", "99", "[rank12]: ", "TP1_X", " NODE0 TP0] ", "\t")


@pytest.mark.parametrize("seed", range(4))
def test_rank_keys_equal_the_full_search_on_mixed_forms(seed: int) -> None:
    rng = random.Random(100 + seed)
    for _ in range(5000):
        text = "".join(rng.choice(HARD) for _ in range(rng.randint(0, 14)))
        want = {a or b or c for a, b, c in KEY_RE.findall(text)}
        assert rank_keys(text) == want, text
