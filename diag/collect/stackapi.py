"""The seam between the collector and the stack analysis of ``diag.stacks``.

The collector parses, classifies, groups and compares stacks only through these five
functions, so the rest of the collector does not depend on which submodule of
``diag.stacks`` holds each step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from diag.model import StackGroup, StackProcess

# diag.stacks is imported on first use: the collector starts its dumps before the stack
# analysis (its classifier's tables are most of the import time) is loaded.

__all__ = ["classify", "gpu_facts", "group", "outliers", "parse"]


def parse(data: object, *, pid: int | None, title: str | None, mode: str) -> StackProcess:
    """py-spy ``--json`` output (already decoded) -> StackProcess; ValueError when the
    data is not of py-spy's shape."""
    from diag.stacks.pyspy_json import parse_pyspy_json

    return parse_pyspy_json(data, pid=pid, title=title, mode=mode)


def classify(p: StackProcess) -> StackProcess:
    """The same process with ``wait_site`` / ``wait_thread`` filled in where known."""
    from diag.stacks.classify import classified

    return classified(p)


def gpu_facts(
    processes: Sequence[StackProcess], util_by_pid: Mapping[int, float]
) -> list[StackProcess]:
    """Let GPU utilisation settle what a stack alone cannot (a CUDA sync on a GPU spinning
    at 100% while a peer's GPU is idle is a collective the peer never joined)."""
    from diag.stacks.classify import apply_gpu_facts

    return list(apply_gpu_facts(list(processes), dict(util_by_pid)))


def group(processes: Sequence[StackProcess]) -> tuple[StackGroup, ...]:
    from diag.stacks.merge import group_stacks

    return tuple(group_stacks(list(processes)))


def outliers(
    processes: Sequence[StackProcess], groups: Sequence[StackGroup], serving: bool = False
) -> tuple[int, ...]:
    from diag.stacks.merge import outlier_tp_ranks

    return tuple(outlier_tp_ranks(list(processes), list(groups), serving))
