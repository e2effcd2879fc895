"""Write ``diag analyze --json``'s output for many inputs, one file each, to compare two trees.

usage: python benchmarks/json_identity.py OUT [--corpus] [PATH ...]

Runs in one process (the start-up once): every corpus log (``fixtures/real/*/*/log.txt``,
with ``--corpus``) and every PATH given (a log, a .gz or a folder, as the CLI takes them)
through the same calls as ``diag analyze --json`` (:func:`diag.report.combined.load_case`
and :func:`diag.report.combined_json.render_combined_json`), writing each output (or the
error it raised) to ``OUT/<name>.json``. Run it with each tree first on ``PYTHONPATH``
(``PYTHONPATH=/path/to/other/checkout python benchmarks/json_identity.py /tmp/a ...``) and
compare the two folders with ``diff -r``: a speed change must leave them byte for byte
the same.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(path: Path) -> str:
    try:
        rel = path.resolve().relative_to(ROOT / "fixtures" / "real")
        return "corpus__" + "__".join(rel.parts[:-1])
    except ValueError:
        h = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
        return f"{path.name}__{h}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--corpus", action="store_true", help="every fixtures/real/*/*/log.txt")
    ap.add_argument("paths", nargs="*", type=Path)
    a = ap.parse_args(argv)
    import diag
    from diag.errors import DiagError
    from diag.report.combined import load_case
    from diag.report.combined_json import render_combined_json

    print(f"diag from {Path(diag.__file__).parent}", file=sys.stderr)
    paths = list(a.paths)
    if a.corpus:
        paths += sorted((ROOT / "fixtures" / "real").glob("*/*/log.txt"))
    a.out.mkdir(parents=True, exist_ok=True)
    for p in paths:
        try:
            case = load_case([p], year=None, rules_dirs=[], progress=None)
            text = render_combined_json(case) + "\n"
        except DiagError as exc:
            text = f"error: {type(exc).__name__}: {exc}\n"
        (a.out / (_name(p) + ".json")).write_text(text, encoding="utf-8")
    print(f"{len(paths)} outputs in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
