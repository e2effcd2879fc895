"""Stack dumps found in text: py-spy text dumps and faulthandler dumps.

(Placeholder until the snapshot work item lands.)
"""

from __future__ import annotations

from collections.abc import Sequence

from diag.model import Record, StackProcess

__all__ = ["extract_stack_processes"]


def extract_stack_processes(records: Sequence[Record]) -> list[StackProcess]:
    return []
