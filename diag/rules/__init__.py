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
from diag.rules.engine import evaluate
from diag.rules.loader import Rule, builtin_rules, load_rules
from diag.rules.snapshot_checks import snapshot_findings

__all__ = ["Rule", "apply_rules", "apply_snapshot_rules", "load_rules", "needles"]


def apply_rules(
    analysis: Analysis,
    records: Sequence[Record],
    *,
    extra_dirs: Sequence[Path] = (),
) -> Analysis:
    """The analysis with ``findings`` (sorted by severity, then time) and
    ``rules_checked`` filled in. Raises RuleError for a bad rule file."""
    rules = load_rules(extra_dirs)
    findings, checked, notes = evaluate(analysis, records, rules)
    return dataclasses.replace(
        analysis,
        findings=findings,
        rules_checked=checked,
        notes=analysis.notes + notes,
    )


def needles(extra_dirs: Sequence[Path] = ()) -> list[str]:
    """Lowercase literal substrings: every line a rule can match contains at least one."""
    rules = load_rules(extra_dirs) if extra_dirs else builtin_rules()
    return sorted({n for r in rules for n in r.needles})


def apply_snapshot_rules(snapshot: Snapshot) -> tuple[Finding, ...]:
    """Findings from live facts: processes, ports, GPU use, merged stacks."""
    return snapshot_findings(snapshot)
