"""The fuzz harnesses of tests/fuzz run over their seed corpus (and the generators' hostile
tokens) in the normal suite, so that they do not rot between fuzz runs and every input a
fuzz run saved as a crash stays fixed (issue 12)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent / "fuzz"
HARNESSES = ["line_grammar", "config_reader", "rule_loader", "pyspy_json", "bundle", "analyze_file"]


def _harness(name: str):  # type: ignore[no-untyped-def]
    os.environ["DIAG_FUZZ_INSTRUMENT"] = "0"
    sys.path.insert(0, str(FUZZ))
    try:
        return importlib.import_module(f"fuzz_{name}")
    finally:
        sys.path.remove(str(FUZZ))


@pytest.mark.parametrize("name", HARNESSES)
def test_harness_runs_its_seeds(name: str) -> None:
    mod = _harness(name)
    common = importlib.import_module("_common") if "_common" in sys.modules else None
    seeds = sorted((FUZZ / "corpus" / name).glob("*"))
    assert seeds, name
    for seed in seeds:
        data = seed.read_bytes()
        mod.one_input(data)
        mod.one_input(b"\x01" + data[:2000])  # the mutating branch of each harness
    if common is not None:
        for token in common.DIGITS + common.NESTS:
            mod.one_input(b"\x00" + token.encode())


@pytest.mark.parametrize(
    ("name", "data"),
    [
        # fuzz_rule_loader: a 5000-digit number reached the YAML loader's int()
        ("rule_loader", b"\x01id: x\nseverity: " + b"9" * 5000 + b"\n"),
        # benchmarks/hostile_table.py: digit runs in dumps, a garbled tqdm rate
        ("analyze_file", b"\x00" + b'  File "/x.py", line ' + b"9" * 5000 + b", in f\n"),
        ("analyze_file", b"\x00Loading shards: 50% 1/2 [00:01<00:01, ..14it/s]\n"),
    ],
)
def test_saved_crashes_stay_fixed(name: str, data: bytes) -> None:
    _harness(name).one_input(data)
