"""The second annotator's blind labels (fixtures/agreement/) stay usable: each names a
tuning log case of the corpus, a phase of the vocabulary (or 'none') and finding ids the
corpus uses; tools/annotator_agreement.py scores them."""

from __future__ import annotations

from pathlib import Path

import tomllib
from corpus_split_loader import SPLIT, load_tool

from diag.model import PHASES

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
SECOND = ROOT / "fixtures" / "agreement" / "second_annotator.toml"


def _corpus_ids() -> set[str]:
    ids: set[str] = set()
    for case in REAL.glob("*/*/case.toml"):
        data = tomllib.loads(case.read_text())
        ids |= set(data.get("expected_findings", ())) | set(data.get("unexpected_findings", ()))
    return ids


def test_second_annotator_labels_name_tuning_cases_and_known_ids() -> None:
    second = tomllib.loads(SECOND.read_text())
    assert len(second) >= 30
    ids = _corpus_ids()
    for rel, label in second.items():
        case = REAL / rel
        assert (case / "log.txt").is_file(), rel
        assert SPLIT.part_of(case) == "tuning", rel  # never a held-out case
        assert label["last_phase"] in (*PHASES, "none"), rel
        assert set(label["expected_findings"]) <= ids, rel


def test_agreement_tool_scores_the_file(capsys) -> None:  # type: ignore[no-untyped-def]
    tool = load_tool("annotator_agreement")
    assert tool.main([]) == 0
    out = capsys.readouterr().out
    n = len(tomllib.loads(SECOND.read_text()))
    assert f"{n} cases" in out
    # the second annotator is scored as diag is: a count out of n on each line
    assert out.count(f"/{n}") == 4
