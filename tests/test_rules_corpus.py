"""Findings on the real-log corpus (fixtures/real, copied from public bug reports).

tests/test_corpus.py scores whole cases (phase and findings); this file holds the rules'
own bar: expected findings reported and unexpected ones not, healthy startups report
nothing at warning or above, every evidence line points at the line it quotes, and the
built-in example (the story) reads as the issue asks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.model import Analysis

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
CASES = sorted(
    p
    for fw in ("sglang", "vllm")
    for p in (REPO / "fixtures" / "real" / fw).glob("*")
    if (p / "log.txt").is_file()
)
EXAMPLE = REPO / "diag" / "data" / "example.log"

_cache: dict[Path, Analysis] = {}


def _analysis(path: Path) -> Analysis:
    if path not in _cache:
        _cache[path] = analyze([path])
    return _cache[path]


def _case(case: Path) -> dict[str, object]:
    with open(case / "case.toml", "rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_expected_and_unexpected_findings(case: Path) -> None:
    label = _case(case)
    found = {f.id for f in _analysis(case / "log.txt").findings}
    expected = set(label.get("expected_findings", []))  # type: ignore[arg-type]
    unexpected = set(label.get("unexpected_findings", []))  # type: ignore[arg-type]
    assert expected <= found, f"missing {sorted(expected - found)}; found {sorted(found)}"
    assert not (unexpected & found), f"unexpected {sorted(unexpected & found)}"


HEALTHY = [c for c in CASES if "healthy" in c.name]


@pytest.mark.parametrize("case", HEALTHY, ids=[c.name for c in HEALTHY])
def test_healthy_startups_report_nothing_at_warning_or_above(case: Path) -> None:
    loud = [
        (f.id, f.message)
        for f in _analysis(case / "log.txt").findings
        if f.severity in ("error", "warning")
    ]
    assert not loud


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_evidence_points_at_the_line_it_quotes(case: Path) -> None:
    path = case / "log.txt"
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for finding in _analysis(path).findings:
        assert finding.evidence, finding.id
        assert finding.evidence_total >= len(finding.evidence)
        for ev in finding.evidence:
            assert 1 <= ev.line <= len(lines), (finding.id, ev)
            quoted = ev.text.strip()[:40]
            window = "\n".join(lines[max(0, ev.line - 2) : ev.line + 1])
            assert quoted in window, (finding.id, ev.line, quoted, lines[ev.line - 1][:120])


def test_the_story_example_reads_as_the_issue_asks() -> None:
    a = _analysis(EXAMPLE)
    by_id = {f.id: f for f in a.findings}
    # the excerpt ends right after every rank's "Load weight end": LABELS.md calls that a
    # cut excerpt (nothing in it shows the hours of silence of the story), said as info
    assert "startup.stalled" not in by_id
    cut = by_id["startup.cut_excerpt"]
    assert cut.severity == "info"
    assert "every rank (8) finished weights_load" in cut.message
    assert "not proven stalled" in cut.message
    fallback = by_id["quant.fallback_unquantized"]
    assert fallback.severity == "warning" and fallback.ranks == ("TP3", "TP6")
    assert by_id["attention.backend_fallback"].severity == "info"
    assert [f.severity for f in a.findings] == sorted(
        (f.severity for f in a.findings), key=["error", "warning", "info"].index
    )
    fired = {f.id for f in a.findings}
    assert set(a.rules_checked) - fired, "the report must list rules that did not fire"


def test_rules_still_fire_when_the_prefilter_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large logs reach the rules only through the prefilter (needles, levels,
    tracebacks): force it on for every case and compare with the full parse."""
    import diag.analyze as analyze_module

    diffs = []
    for case in CASES:
        full = {f.id for f in analyze_module.analyze([case / "log.txt"]).findings}
        with monkeypatch.context() as patch:
            patch.setattr(analyze_module, "PREFILTER_MIN_BYTES", 0)
            filtered = {f.id for f in analyze_module.analyze([case / "log.txt"]).findings}
        if full != filtered:
            diffs.append((case.name, sorted(full ^ filtered)))
    assert not diffs


def test_every_match_example_is_a_prefilter_candidate() -> None:
    """The prefilter looks for needles as written, Capitalized and UPPER: each rule's
    match examples must contain one of its literals (case-sensitively)."""
    from diag.parse.prefilter import candidate_literals
    from diag.rules.loader import builtin_rules

    literals = candidate_literals()
    misses = [
        (rule.id, line[:80])
        for rule in builtin_rules()
        for line in rule.examples.match
        if not any(lit in line for lit in literals)
    ]
    assert not misses


def test_the_abi_trap_reports_the_import_error_as_the_root() -> None:
    """The LLaVA case: vLLM says "architecture not supported", the cause printed above it
    is a flash-attn binary built for another torch."""
    a = _analysis(REPO / "fixtures/real/vllm/llava-arch-unsupported-flashattn-abi/log.txt")
    by_id = {f.id: f for f in a.findings}
    assert by_id["env.version_mismatch"].role == "root"
    assert "undefined symbol" in by_id["env.version_mismatch"].message
    for cascade in ("model.unsupported", "python.exception"):
        assert by_id[cascade].role == "cascade"
        assert by_id[cascade].cascade_of == "env.version_mismatch"
