"""Run every rule's examples: the engine behind `diag rules test` and the parametrised test.

Each pattern rule lists ``match`` lines (must match), ``no_match`` lines (must not), and
``todo_match`` / ``todo_no_match`` for known misses (they must still miss: when one starts
passing, the result says so, so that it moves to the real list). Every ``match`` line must
also contain one of the rule's needles, or the log prefilter would never hand it over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from diag.rules.engine import hits_for_line
from diag.rules.loader import Rule

__all__ = ["ExampleResult", "run_examples"]


@dataclass(frozen=True, slots=True)
class ExampleResult:
    rule: str
    path: str
    kind: str  # match | no_match | todo_match | todo_no_match | needles
    line: str
    ok: bool
    detail: str = ""


def _one(rule: Rule, kind: str, line: str) -> ExampleResult:
    try:
        matched = bool(hits_for_line(rule, line))
    except TimeoutError:
        return ExampleResult(rule.id, rule.path, kind, line, False, "pattern timed out")
    if kind == "match":
        low = line.lower()
        if not any(n in low for n in rule.needles):
            return ExampleResult(
                rule.id, rule.path, kind, line, False, "contains none of the rule's needles"
            )
        return ExampleResult(rule.id, rule.path, kind, line, matched, "" if matched else "no match")
    if kind == "no_match":
        return ExampleResult(
            rule.id, rule.path, kind, line, not matched, "matched" if matched else ""
        )
    if kind == "todo_match":
        detail = "now matches: move it to `match`" if matched else "known miss"
        return ExampleResult(rule.id, rule.path, kind, line, not matched, detail)
    detail = "no longer matches: move it to `no_match`" if not matched else "known false match"
    return ExampleResult(rule.id, rule.path, kind, line, matched, detail)


def run_examples(rules: Iterable[Rule]) -> list[ExampleResult]:
    """One result per example line of every pattern rule (check rules have none)."""
    out: list[ExampleResult] = []
    for rule in rules:
        if rule.match is None:
            continue
        ex = rule.examples
        if not ex.match:
            out.append(ExampleResult(rule.id, rule.path, "match", "", False, "no `match` example"))
        for kind, lines in (
            ("match", ex.match),
            ("no_match", ex.no_match),
            ("todo_match", ex.todo_match),
            ("todo_no_match", ex.todo_no_match),
        ):
            out.extend(_one(rule, kind, line) for line in lines)
    return out
