"""`diag analyze` (placeholder: the owning work item replaces this module)."""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    pass
