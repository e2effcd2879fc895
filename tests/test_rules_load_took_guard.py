"""The slow-load check's literal guard before its pattern: it keeps every line the
pattern matches, whatever the case (the pattern is case-insensitive)."""

from __future__ import annotations

import random

from diag.rules.checks import _LOAD_TOOK, _may_report_load

LINES = (
    "Loading weights took 700.5 seconds",
    "LOADING WEIGHTS TOO\u212a 800 s",  # Kelvin sign: IGNORECASE reads it as k
    "Model loading took 12.3 GiB and 900.1 seconds",
    "[2025-01-01 00:00:00] Load weight end. type=X, dtype=bf16, elapsed=650.0 s",
    "load we\u0130ght end. elapsed=990 sec",  # dotted capital I: IGNORECASE reads it as i
    "LOAD WEIGHT END. avail mem=3 GB, elapsed=1200 s",
)
PIECES = ("Loading", "LOADING", "weights", "WEIGHTS", "we\u0130ghts", " took ", " TOO\u212a ",
          "Model loading ", "took", "12.5", " GiB and ", "Load weight end.", "LOAD WEIGHT END",
          " x=1,", " elapsed=", "3.5", " s", " seconds", "sec", " ", "\u03a3", "\u212a")


def test_the_guard_keeps_every_match() -> None:
    for line in LINES:
        assert _LOAD_TOOK.search(line) is not None, line
        assert _may_report_load(line), line
    rng = random.Random(0)
    matched = 0
    odd = {"k": "\u212a", "i": "\u0130", "s": "\u017f"}
    for _ in range(20000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 9)))
        if rng.random() < 0.5:  # a line of the pattern's, letters in random cases
            text = rng.choice(LINES) + text
            text = "".join(
                odd[c.lower()] if c.lower() in odd and rng.random() < 0.2
                else (c.upper() if rng.random() < 0.5 else c.lower()) for c in text)
        if _LOAD_TOOK.search(text) is not None:
            matched += 1
            assert _may_report_load(text), text
    assert matched > 2000
