"""Fuzz the rule loader: YAML rule files (schema, regexes, aliases, nesting) must load or
raise RuleError naming the file; nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Gen, drive, instrumented  # noqa: E402

with instrumented():
    from diag.errors import RuleError
    from diag.rules.checks import CHECKS
    from diag.rules.loader import _parse_file

BOMBS = [
    "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n"
    "id: &g [*f, *f, *f, *f, *f, *f, *f, *f]\n",
    "a: &a [*a]\n",
    "id: " + "[" * 5000 + "]" * 5000 + "\n",
]


def one_input(data: bytes) -> None:
    g = Gen(data)
    mode = g.byte() % 8
    text = g.rest().decode("utf-8", "replace")
    if mode == 0:
        text = BOMBS[len(text) % len(BOMBS)] + text
    elif mode < 4:
        text = Gen(data[::-1]).mutate_text(text)
    try:
        _parse_file(text, "fuzz.yaml", CHECKS)
    except RuleError as exc:
        assert "fuzz.yaml" in str(exc), exc


if __name__ == "__main__":
    drive("rule_loader", one_input, float(sys.argv[1]) if len(sys.argv) > 1 else 60)
