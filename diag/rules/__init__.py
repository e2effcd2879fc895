"""The rules engine: findings over records, events, timeline and snapshot facts.

``apply_rules`` is the one entry point the analyser and the snapshot call.
(Placeholder until the rules work item lands: it returns the analysis unchanged.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from diag.model import Analysis, Record

__all__ = ["apply_rules"]


def apply_rules(
    analysis: Analysis,
    records: Sequence[Record],
    *,
    extra_dirs: Sequence[Path] = (),
) -> Analysis:
    return analysis
