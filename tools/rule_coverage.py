#!/usr/bin/env python3
"""Which raised or logged messages of the sources (fixtures/messages/messages.tsv) a rule
catches: every template whose text matches a pattern is rendered (holes as ``7``), fed to
``diag analyze`` as an exception line (raised) or an ERROR line (logged), and listed when
the rule does not fire. A way to find a rule's gaps from the frameworks' own messages, not
from one log.

usage: tools/rule_coverage.py RULE_ID REGEX   e.g. cuda.oom 'out of memory|not enough memory'
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "fixtures" / "messages" / "messages.tsv"
_HOLE = re.compile(r"\{[^}]*\}|%[-0-9.]*[sdfrx]")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    from diag.analyze import analyze_text
    from diag.errors import InputError

    rule, pattern = argv[0], re.compile(argv[1], re.I)
    seen: set[str] = set()
    hit, missed = 0, []
    with TABLE.open(newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            level, template = row["level"], row["template"]
            raised = level.startswith("raise:")
            if not (raised or level in ("error", "warning", "critical", "exception")):
                continue
            if not pattern.search(template):
                continue
            line = _HOLE.sub("7", template)  # a hole: a number fits most (codes, pids, ranks)
            if raised:
                text = (
                    'Traceback (most recent call last):\n  File "/x/y.py", line 1, in f\n'
                    f"    g()\n{level.split(':', 1)[1]}: {line}\n"
                )
            else:
                text = f"{level.upper()} 01-01 00:00:00 [x.py:1] {line}\n"
            if text in seen:
                continue
            seen.add(text)
            try:
                ids = {f.id for f in analyze_text(text).findings}
            except InputError:
                ids = set()
            if rule in ids:
                hit += 1
            else:
                missed.append(f"{row['framework']}\t{row['file']}\t{level}\t{line[:160]}")
    print(f"{rule}: {hit} caught, {len(missed)} not")
    for m in missed:
        print("  " + m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
