"""``diag watch``: follow a start-up live and catch the stall itself."""

__all__: list[str] = []
