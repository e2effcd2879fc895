"""Every size an input can choose, bounded in one place.

A log, a bundle, a rule file or a process on the host is input from a stranger: whatever
it declares (a member size, a line number, a tensor-parallel size, a digit run) is checked
against a limit here before diag allocates, loops or waits on it. An exceeded limit is a
note (``input cut at N``) or a one-line error, never a crash and never an unbounded wait.
"""

from __future__ import annotations

import json
import re

__all__ = [
    "DECOMPRESSED_FLOOR_BYTES",
    "FIFO_READ_TIMEOUT_S",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_ARCHIVE_MEMBER_BYTES",
    "MAX_ARCHIVE_TOTAL_BYTES",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_DECOMPRESSION_RATIO",
    "MAX_EXPECTED_RANKS",
    "MAX_INDEX_PADDING_LINES",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_PLAUSIBLE_WORLD",
    "MAX_PYSPY_OUTPUT_BYTES",
    "MAX_RUN_STDERR_BYTES",
    "MAX_YAML_NODES",
    "RULE_REGEX_BUDGET_S",
    "RULE_REGEX_TOTAL_S",
    "ascii_int",
    "loads_json",
]

# -- compressed inputs (.gz/.bz2/.xz/.zst logs, members of .zip/.tar archives) ----------
MAX_DECOMPRESSED_BYTES = 4 << 30  # per compressed input
MAX_DECOMPRESSION_RATIO = 50.0  # decompressed / compressed, checked past the floor (logs: 5-30)
DECOMPRESSED_FLOOR_BYTES = 32 << 20
MAX_ARCHIVE_MEMBERS = 10_000
MAX_ARCHIVE_MEMBER_BYTES = 512 << 20
MAX_ARCHIVE_TOTAL_BYTES = 1 << 30

# -- pipes --------------------------------------------------------------------------------
FIFO_READ_TIMEOUT_S = 10.0  # a FIFO / process substitution with no data for this long

# -- bundles ------------------------------------------------------------------------------
MAX_INDEX_PADDING_LINES = 50_000_000  # empty lines an excerpt's index may put back
MAX_JSON_DEPTH = 64

# -- values taken from logs and processes -------------------------------------------------
MAX_INT_DIGITS = 18  # an int field longer than this is not a number diag believes
MAX_EXPECTED_RANKS = 4096  # ranks enumerated from a config's tp x pp x dp
MAX_PLAUSIBLE_WORLD = 65_536  # a parallel size past this is an implausible config

# -- rules --------------------------------------------------------------------------------
RULE_REGEX_BUDGET_S = 5.0  # regex time per rule over a whole analysis
RULE_REGEX_TOTAL_S = 20.0  # ... and of all rules together
MAX_YAML_NODES = 200_000  # nodes a rule file may expand to (aliases counted expanded)

# -- commands diag runs -------------------------------------------------------------------
MAX_PYSPY_OUTPUT_BYTES = 64 << 20
MAX_RUN_STDERR_BYTES = 1 << 20

_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def ascii_int(text: object, *, max_digits: int = MAX_INT_DIGITS) -> int | None:
    """``text`` as an int when it is ASCII digits (an optional sign) of a sane length,
    else None. Unicode digits (``²``, ``٣``) and 5000-digit runs never reach ``int()``."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if len(str(abs(text))) <= max_digits else None
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(text, str):
        return None
    s = text.strip()
    if not s or len(s.lstrip("+-")) > max_digits or not _ASCII_INT.fullmatch(s):
        return None
    return int(s)


def loads_json(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> object:
    """``json.loads`` that raises ValueError (never RecursionError) for malformed text and
    for a document nested deeper than ``max_depth``."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    stack: list[tuple[object, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return obj
