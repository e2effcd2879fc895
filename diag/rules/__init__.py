"""The rules engine: findings over records, events, timeline and snapshot facts.

``apply_rules`` is the one entry point the analyser calls; ``apply_snapshot_rules`` the
one the live snapshot calls; ``needles`` tells the log prefilter which lines the pattern
rules can match. Rules live in YAML files (``rules/`` in the repository, shipped as
``diag/rule_library``); the few that need code name a check in :mod:`diag.rules.checks`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from diag.model import Analysis, Finding, Record, Snapshot
from diag.rules.engine import Scanned, evaluate, scan
from diag.rules.loader import Rule, builtin_rules, load_rules
from diag.rules.snapshot_checks import snapshot_findings

__all__ = [
    "Rule", "Scanned", "apply_rules", "apply_snapshot_rules", "load_rules", "needles",
    "scan_rules",
]


def apply_rules(
    analysis: Analysis,
    records: Sequence[Record],
    *,
    extra_dirs: Sequence[Path] = (),
    scanned: Scanned | None = None,
) -> Analysis:
    """The analysis with ``findings`` (sorted by severity, then time) and
    ``rules_checked`` filled in. Raises RuleError for a bad rule file. ``scanned``: the
    line pass (:func:`scan_rules`) of the same records and rule folders, done already."""
    rules = scanned.rules if scanned is not None else load_rules(extra_dirs)
    findings, checked, notes = evaluate(analysis, records, rules, scanned)
    return dataclasses.replace(
        analysis,
        findings=findings,
        rules_checked=checked,
        notes=analysis.notes + notes,
    )


def scan_rules(
    analysis: Analysis, records: Sequence[Record], *, extra_dirs: Sequence[Path] = ()
) -> Scanned:
    """The pattern rules' pass over the records, for :func:`apply_rules`; it reads the
    analysis's framework and events only, so it can run before the stacks are found."""
    return scan(analysis, records, load_rules(extra_dirs))


def needles(extra_dirs: Sequence[Path] = ()) -> list[str]:
    """Lowercase literal substrings: every line a rule can match contains at least one."""
    rules = load_rules(extra_dirs) if extra_dirs else builtin_rules()
    return sorted({n for r in rules for n in r.needles})


def apply_snapshot_rules(snapshot: Snapshot) -> tuple[Finding, ...]:
    """Findings from live facts: processes, ports, GPU use, merged stacks."""
    return snapshot_findings(snapshot)
