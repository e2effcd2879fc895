#!/usr/bin/env python3
"""How far two annotators of the corpus agree, and how diag's score compares.

fixtures/agreement/second_annotator.toml holds a second, blind labelling of some tuning log
cases (phase and expected findings, from LABELS.md, the log and its source URL only). This
script scores the second annotator against the corpus labels exactly as diag is scored
(tools/score-corpus: the same last phase, every expected finding found, none of the
unexpected ones), prints the plain agreement (same phase and the same expected set), and
with ``--diag`` runs ``diag analyze`` on the same cases and scores it against both sets of
labels. 'none' (the second annotator's "no phase proven") is counted both as it is and as
'launch', the corpus's floor.

usage: tools/annotator_agreement.py [--diag] [--file PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"


def _floor(phase: str | None) -> str:
    return "launch" if phase in (None, "none") else phase


def _right(phase: str | None, found: set[str], label: dict[str, Any], *, floor: bool) -> bool:
    """Scored as tools/score-corpus scores diag: ``phase`` and ``found`` against ``label``."""
    want = label.get("last_phase")
    same = _floor(phase) == _floor(want) if floor else phase == want
    expected = set(label.get("expected_findings", []))
    unexpected = set(label.get("unexpected_findings", [])) - expected
    return same and expected <= found and not (found & unexpected)


def _diag_answer(case: Path) -> tuple[str | None, set[str]]:
    sys.path.insert(0, str(ROOT))
    import json

    from diag.report.combined import load_case
    from diag.report.combined_json import render_combined_json

    out = json.loads(render_combined_json(load_case([case / "log.txt"])))
    return out.get("last_phase"), {f["id"] for f in out.get("findings", [])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", default=str(ROOT / "fixtures/agreement/second_annotator.toml"))
    ap.add_argument("--diag", action="store_true", help="also score diag on the same cases")
    args = ap.parse_args(argv)
    second = tomllib.loads(Path(args.file).read_text())
    n = 0
    agree = agree_floor = 0
    b_right = b_right_floor = 0
    d_vs_a = d_vs_b = d_vs_a_floor = d_vs_b_floor = 0
    for rel, b in sorted(second.items()):
        case = REAL / rel
        a = tomllib.loads((case / "case.toml").read_text())
        n += 1
        ea, eb = set(a.get("expected_findings", [])), set(b.get("expected_findings", []))
        agree += a.get("last_phase") == b.get("last_phase") and ea == eb
        agree_floor += _floor(a.get("last_phase")) == _floor(b.get("last_phase")) and ea == eb
        b_right += _right(b.get("last_phase"), eb, a, floor=False)
        b_right_floor += _right(b.get("last_phase"), eb, a, floor=True)
        if args.diag:
            phase, found = _diag_answer(case)
            b_label = {**b, "unexpected_findings": a.get("unexpected_findings", [])}
            d_vs_a += _right(phase, found, a, floor=False)
            d_vs_b += _right(phase, found, b_label, floor=False)
            d_vs_a_floor += _right(phase, found, a, floor=True)
            d_vs_b_floor += _right(phase, found, b_label, floor=True)
    print(f"{n} cases (second annotator: {args.file})")
    print(
        f"same phase and same expected findings: {agree}/{n} "
        f"({agree_floor}/{n} with none = launch)"
    )
    print(
        f"second annotator scored against the corpus labels as diag is: {b_right}/{n} "
        f"({b_right_floor}/{n} with none = launch)"
    )
    if args.diag:
        print(
            f"diag against the corpus labels: {d_vs_a}/{n} ({d_vs_a_floor}/{n}); against the "
            f"second annotator's (the corpus's unexpected lists kept): {d_vs_b}/{n} "
            f"({d_vs_b_floor}/{n})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
