#!/usr/bin/env python3
"""The wait-site catalogue from the sources: framework functions that block in a call no
Python-only stack dump can show.

py-spy without ``--native``, faulthandler and pystack show Python frames only. Where a
framework function calls straight into C (``tensor.item()``, a ZeroMQ ``socket.recv()``,
``TCPStore.get``, ``fcntl.flock``, ``safe_open(...).get_tensor``, ``lock.acquire()``), the
innermost frame of a thread blocked there is that function itself, and only its own call
says what it waits for. This script reads the sources of several releases WITHOUT importing
them (``ast`` only), finds every such call in the functions of vLLM and SGLang, and writes
one row per function and site: framework, package-relative path, qualified name, site, the
primitive, the call lines per run of releases (``0.4.1..0.4.3:120,131``: every release read
from 0.4.1 to 0.4.3 has them) and the function's own lines (``def`` to its last
line) per version. :mod:`diag.stacks.classify` looks a frame up there (``catalogue`` rule)
when no frame of the stack names a wait: at a call line of a release read, that call's
site; at a line inside the function in no release read (a release between or after them),
the function's site where all its calls agree.

usage:
  tools/stack_catalogue.py [--out diag/stacks/wait_catalogue.tsv] [--tree DIR] [SRC...]
SRC is ``NAME==VERSION@DIR`` (DIR holds the ``vllm/`` or ``sglang/`` package: an unpacked
wheel or a site-packages), e.g.
  vllm==0.8.5@/work/cache/src/vllm-0.8.5 sglang==0.5.23@.venv-sglang/lib/python3.11/site-packages
or ``--tree /work/cache/src`` for every ``vllm-X``/``sglang-Y`` folder there (each release's
wheel unpacked: ``pip download --no-deps vllm==X``, then its ``vllm/*.py``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diag.stacks.primitives import PRIMITIVES, primitive_of_call  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from releases import release_key, release_sources  # noqa: E402

OUT = ROOT / "diag" / "stacks" / "wait_catalogue.tsv"

__all__ = ["PRIMITIVES", "calls_of", "main"]

def calls_of(fn: ast.AST) -> list[tuple[int, str, str]]:
    """(line, site, primitive) of the primitive calls in a function's own body (nested
    functions and classes are theirs, not its)."""
    out: list[tuple[int, str, str]] = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            got = primitive_of_call(node)
            if got is not None:
                out.append((node.lineno, got[0], got[1]))
        stack.extend(ast.iter_child_nodes(node))
    return out


def _functions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of every function, as ``__qualname__`` (py-spy's name on
    Python 3.11+): ``Class.method``, ``outer.<locals>.inner``."""
    out: list[tuple[str, ast.AST]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}{child.name}"
                out.append((q, child))
                walk(child, f"{q}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(tree, "")
    return out


def scan(name: str, version: str, root: Path, rows: dict[tuple[str, str, str, str], dict]) -> int:
    pkg = root / name
    if not pkg.is_dir():
        raise SystemExit(f"{root}: no {name}/ package inside")
    n = 0
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/tests/" in rel or "/test/" in rel or "/benchmarks/" in rel:
            continue
        try:
            tree = ast.parse(path.read_bytes(), filename=rel)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for qual, fn in _functions(tree):
            span = (getattr(fn, "lineno", 0), getattr(fn, "end_lineno", None) or 0)
            for line, site, label in calls_of(fn):
                key = (name, rel, qual, site)
                row = rows.setdefault(
                    key, {"primitives": set(), "lines": defaultdict(set), "spans": {}}
                )
                row["primitives"].add(label)
                row["lines"][version].add(line)
                row["spans"][version] = span
                n += 1
    return n


def _runs(per: dict[str, str], order: list[str]) -> str:
    """``v1..v2:value`` for each run of releases (consecutive in ``order``, the releases
    read) that hold the same value; ``v:value`` for a run of one."""
    out: list[str] = []
    run: list[str] = []
    value: str | None = None
    for v in [*order, None]:
        got = per.get(v) if v is not None else None
        if run and got != value:
            head = run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}"
            out.append(f"{head}:{value}")
            run = []
        if got is not None:
            if not run:
                value = got
            run.append(v)  # type: ignore[arg-type]
    return ";".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("sources", nargs="*", help="NAME==VERSION@DIR")
    ap.add_argument(
        "--tree",
        type=Path,
        help="a folder of unpacked releases, NAME-VERSION/NAME/ each (vllm-0.9.2/vllm/)",
    )
    a = ap.parse_args(argv)
    sources = release_sources(a.sources, a.tree)
    if not sources:
        ap.error("no sources (SRC... or --tree)")
    rows: dict[tuple[str, str, str, str], dict] = {}
    versions: dict[str, list[str]] = defaultdict(list)
    for name, version, where in sources:
        n = scan(name, version, where, rows)
        versions[name].append(version)
        print(f"{name} {version}: {n} calls", file=sys.stderr)
    order = {k: sorted(v, key=release_key) for k, v in versions.items()}
    lines = [
        "# wait-site catalogue: framework functions that block in a call with no Python frame",
        "# written by tools/stack_catalogue.py from the sources of: "
        + "; ".join(f"{k} {', '.join(order[k])}" for k in sorted(versions)),
        "framework\tpath\tfunction\tsite\tprimitives\tlines\tspans",
    ]
    for (fw, rel, qual, site), row in sorted(rows.items()):
        calls = {v: ",".join(map(str, sorted(ls))) for v, ls in row["lines"].items()}
        per = _runs(calls, order[fw])
        spans = _runs({v: f"{a}-{b}" for v, (a, b) in row["spans"].items()}, order[fw])
        prims = ",".join(sorted(row["primitives"]))
        lines.append(f"{fw}\t{rel}\t{qual}\t{site}\t{prims}\t{per}\t{spans}")
    a.out.write_text("\n".join(lines) + "\n")
    print(f"{len(rows)} rows -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
