#!/usr/bin/env python3
"""The corpus split: which real cases are tuned on and which are held out.

Every case under ``fixtures/real/<kind>/<slug>/`` records its thread URL in ``case.toml``.
Cases gathered before the split was made (2026-12-01; no ``added`` key) were tuned on long
ago and stay in the tuning part. Cases added since (``added = "YYYY-MM-DD"``) go to the
held-out part when the first 8 hex digits of sha256(url), read as a number, fall in the
lowest 45 of 100 buckets; a thread is therefore always on one side, whoever copies it.

Nobody changes the analyser while looking at a held-out case: use ``materialise`` to get a
folder of tuning cases for ``score-corpus --corpus``, and ``score`` for the held-out figure
(it prints counts only, never the names of held-out misses).

usage:
  tools/corpus_split.py list [tuning|heldout]      one case id per line
  tools/corpus_split.py materialise OUTDIR          OUTDIR/{tuning,heldout}/<kind>/<slug> links
  tools/corpus_split.py counts                      cases per part and kind
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
KINDS = ("sglang", "vllm", "stacks")
HELD_OUT_BUCKETS = 45  # of 100

__all__ = ["REAL", "KINDS", "case_dirs", "is_held_out", "part_of"]


def is_held_out(url: str) -> bool:
    """The held-out rule on a URL alone (normalised: no trailing slash or fragment)."""
    norm = url.strip().split("#", 1)[0].rstrip("/")
    return int(hashlib.sha256(norm.encode()).hexdigest()[:8], 16) % 100 < HELD_OUT_BUCKETS


def part_of(case_dir: Path) -> str:
    with (case_dir / "case.toml").open("rb") as fh:
        case = tomllib.load(fh)
    if "added" not in case:
        return "tuning"
    return "heldout" if is_held_out(str(case.get("url", ""))) else "tuning"


def case_dirs(root: Path = REAL) -> list[Path]:
    return sorted(
        d for k in KINDS if (root / k).is_dir() for d in (root / k).iterdir()
        if (d / "case.toml").is_file()
    )


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "counts"
    dirs = case_dirs()
    if cmd == "list":
        want = argv[1] if len(argv) > 1 else "tuning"
        for d in dirs:
            if part_of(d) == want:
                print(f"{d.parent.name}/{d.name}")
        return 0
    if cmd == "materialise":
        out = Path(argv[1])
        for d in dirs:
            dest = out / part_of(d) / d.parent.name / d.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                dest.symlink_to(d.resolve())
        return 0
    if cmd == "counts":
        counts: dict[tuple[str, str], int] = {}
        for d in dirs:
            key = (part_of(d), d.parent.name)
            counts[key] = counts.get(key, 0) + 1
        for (part, kind), n in sorted(counts.items()):
            print(f"{part:8} {kind:7} {n}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
