"""Benchmark `diag analyze --json` over a matrix of log mixes, against cat and ripgrep.

usage: python benchmarks/bench_analyze.py [--size 1024] [--mixes clean,warn1,...]
                                          [--dir /tmp/diag-bench] [--update-readme]
       python benchmarks/bench_analyze.py --against OTHER_CHECKOUT [--pairs 3] ...

For every mix of benchmarks/mixes.py (generated once per size into --dir), with the page
cache warm, runs and measures (wall, CPU user+sys, peak RSS, from wait4):

  * ``diag analyze --json`` (the whole CLI, as a user runs it);
  * ``cat`` (the floor; ``cat`` of the compressed bytes for the .gz mix);
  * ``rg -c`` with the 7 patterns of :data:`RG_PATTERNS`;
  * ``rg -c -i -F -f LITERALS``: one pass with diag's own candidate literal set
    (case-insensitive, as diag matches them), the reference the targets are set against.

``-z`` is given to ripgrep for the .gz mix, which it then decompresses itself. Prints one
Markdown table (the load average beside each row: the box is shared) and the start-up
time of ``diag analyze --example --json``; ``--update-readme`` writes both into README.md
between the ``bench:start`` / ``bench:end`` markers. Targets (issue 11): per GiB at most
3 s wall, at most 2x the ``rg -F -f`` run, peak RSS at most 400 MB.

``--against OTHER_CHECKOUT``: a paired comparison instead of the table, for a box shared
with other work: per mix, ``--pairs`` rounds of ``diag analyze --json`` from this checkout
(A), then from the other (B, e.g. a ``git worktree`` of the commit before a change), then
``rg -c -i -F -f`` with each one's literals, all in the same minutes; prints each one's
medians (CPU user+sys, wall, peak RSS) and the load. Each diag runs as ``python -P -m diag``
with ``PYTHONPATH`` set to its checkout, its bytecode compiled first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from mixes import MIXES, write_mix  # noqa: E402

__all__ = ["RG_PATTERNS", "main"]

RG_PATTERNS = (
    "Traceback",
    "ERROR",
    "WARNING",
    "Killed",
    "out of memory",
    "NCCL WARN",
    "Load weight end",
)
MARK_START = "<!-- bench:start -->"
MARK_END = "<!-- bench:end -->"


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    rss_mb: float
    load: float


def _run(argv: list[str], *, ok: tuple[int, ...] = (0, 1),
         env: dict[str, str] | None = None) -> Run:
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if code not in ok:  # rg: 1 = no match; diag: 1 = findings
        raise SystemExit(f"{argv[0]} failed (rc={code}): {err[-400:]}")
    return Run(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, load)


def _size_of(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _files(path: Path) -> list[str]:
    if path.is_dir():
        return sorted(str(p) for p in path.rglob("*") if p.is_file())
    return [str(path)]


def _ready_mix(folder: Path, name: str, size: int) -> Path:
    """The mix's file (or folder), generated once per size, its pages read into the cache."""
    path = _mix_path(folder, name, size)
    if not path.exists():
        print(f"generating {path} ...", file=sys.stderr)
        write_mix(name, path, size << 20)
    _warm(path)
    return path


def _warm(path: Path) -> None:
    for f in _files(path):
        with open(f, "rb") as fh:
            while fh.read(16 << 20):
                pass


def _literal_file(folder: Path) -> Path:
    """diag's candidate literals (lower-case; diag matches them in any case), one a line."""
    from diag.analyze import _literals

    out = folder / "diag-literals.txt"
    out.write_text("\n".join(lit for lit in _literals(()) if "\n" not in lit) + "\n")
    return out


def _tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _tree_literal_file(folder: Path, tree: Path, tag: str) -> Path:
    """:func:`_literal_file` of the diag in checkout ``tree`` (in a child process)."""
    out = folder / f"diag-literals-{tag}.txt"
    code = (
        "import sys\n"
        "from diag.analyze import _literals\n"
        "lits = [x for x in _literals(()) if chr(10) not in x]\n"
        "open(sys.argv[1], 'w').write(chr(10).join(lits) + chr(10))\n"
    )
    subprocess.run([sys.executable, "-P", "-c", code, str(out)], check=True,
                   env=_tree_env(tree))
    return out


def _paired(a: argparse.Namespace, names: list[str], rg: str) -> int:
    """A B A B: this checkout's diag and the one of ``--against``, with ``rg -F -f`` of
    each one's literals, per mix; medians printed (see the module's docstring)."""
    trees = {"A": ROOT, "B": a.against.resolve()}
    for tree in trees.values():
        if not (tree / "diag" / "__init__.py").exists():
            raise SystemExit(f"{tree} is no diag checkout")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "diag")],
                       check=False, stdout=subprocess.DEVNULL)
    lits = {k: _tree_literal_file(a.dir, t, k) for k, t in trees.items()}
    print(f"A = {trees['A']}, B = {trees['B']}; {a.pairs} pairs per mix, {a.size} MiB; "
          "medians: CPU s / wall s, peak RSS MB", file=sys.stderr)
    print("| mix | load | A CPU / wall | B CPU / wall | A / B CPU | A RSS | B RSS "
          "| rg A CPU / wall | rg B CPU / wall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        path = _ready_mix(a.dir, name, a.size)
        files = _files(path)
        gz = ["-z"] if name == "gz" else []
        runs: dict[str, list[Run]] = {k: [] for k in ("A", "B", "rgA", "rgB")}
        for _ in range(a.pairs):
            for k, tree in trees.items():
                runs[k].append(_run([sys.executable, "-P", "-m", "diag", "analyze", "--json",
                                     str(path)], env=_tree_env(tree)))
            for k in trees:
                runs["rg" + k].append(_run([rg, "-c", "-i", "-F", *gz, "-f", str(lits[k]),
                                            *files]))

        def med(k: str, attr: str, runs: dict[str, list[Run]] = runs) -> float:
            return float(statistics.median(getattr(r, attr) for r in runs[k]))

        loads = [r.load for rs in runs.values() for r in rs]
        print(f"| {name} | {min(loads):.1f}-{max(loads):.1f} "
              f"| {med('A', 'cpu_s'):.2f} / {med('A', 'wall_s'):.2f} "
              f"| {med('B', 'cpu_s'):.2f} / {med('B', 'wall_s'):.2f} "
              f"| {med('A', 'cpu_s') / med('B', 'cpu_s'):.3f} "
              f"| {max(r.rss_mb for r in runs['A']):.0f} | {max(r.rss_mb for r in runs['B']):.0f} "
              f"| {med('rgA', 'cpu_s'):.2f} / {med('rgA', 'wall_s'):.2f} "
              f"| {med('rgB', 'cpu_s'):.2f} / {med('rgB', 'wall_s'):.2f} |", flush=True)
    return 0


def _mix_path(folder: Path, name: str, size_mib: int) -> Path:
    suffix = "" if name == "folder8" else (".log.gz" if name == "gz" else ".log")
    return folder / f"{name}-{size_mib}m{suffix}"


def _compile_bytecode(py: str) -> None:
    """Write diag's bytecode (``__pycache__``, as ``pip install`` does for a wheel): an
    editable install under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile every
    module from source at each start (0.17 s of the 0.4 s start-up on this box)."""
    import diag

    subprocess.run([py, "-m", "compileall", "-q", str(Path(diag.__file__).parent)],
                   check=False, stdout=subprocess.DEVNULL)


def _startup(diag: str) -> tuple[float, float, float, float]:
    """Median wall and CPU of `diag analyze --example --json` over 5 runs, and the wall
    and CPU time of `import diag.analyze` (the engine's imports, in a fresh interpreter,
    less the interpreter's own start); diag's bytecode compiled first."""
    py0 = Path(diag).with_name("python")
    _compile_bytecode(str(py0) if py0.exists() else sys.executable)
    _run([diag, "analyze", "--example", "--json"])
    runs = [_run([diag, "analyze", "--example", "--json"]) for _ in range(5)]
    py = str(Path(diag).with_name("python")) if Path(diag).with_name("python").exists() else (
        sys.executable)
    imp = [_run([py, "-c", "import diag.analyze"]) for _ in range(5)]
    base = [_run([py, "-c", "pass"]) for _ in range(5)]
    return (
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.cpu_s for r in runs),
        statistics.median(r.wall_s for r in imp) - statistics.median(r.wall_s for r in base),
        statistics.median(r.cpu_s for r in imp) - statistics.median(r.cpu_s for r in base),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="MiB per mix (default 1024)")
    ap.add_argument("--mixes", default=",".join(MIXES), help="comma-separated mix names")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/diag-bench"))
    ap.add_argument("--update-readme", action="store_true")
    ap.add_argument("--drop", action="store_true", help="delete each mix after measuring it")
    ap.add_argument("--against", type=Path,
                    help="another diag checkout: paired runs, this one (A) and it (B)")
    ap.add_argument("--pairs", type=int, default=3, help="rounds per mix with --against")
    a = ap.parse_args(argv)
    names = [n for n in a.mixes.split(",") if n]
    unknown = [n for n in names if n not in MIXES]
    if unknown:
        raise SystemExit(f"unknown mixes: {unknown}; known: {sorted(MIXES)}")
    a.dir.mkdir(parents=True, exist_ok=True)
    diag = shutil.which("diag") or str(Path(sys.executable).with_name("diag"))
    rg = shutil.which("rg")
    if rg is None:
        raise SystemExit("ripgrep (rg) is needed for the reference runs: apt-get install ripgrep")
    if a.against is not None:
        return _paired(a, names, rg)
    lits = _literal_file(a.dir)
    rows: list[str] = []
    for name in names:
        path = _ready_mix(a.dir, name, a.size)
        size = _size_of(path)
        files = _files(path)
        gz = ["-z"] if name == "gz" else []
        d = _run([diag, "analyze", "--json", str(path)])
        c = _run(["cat", *files], ok=(0,))
        argv_rg = [rg, "-c", *gz]
        for p in RG_PATTERNS:
            argv_rg += ["-e", p]
        r7 = _run([*argv_rg, *files])
        rf = _run([rg, "-c", "-i", "-F", *gz, "-f", str(lits), *files])
        gib = (a.size << 20) / (1 << 30)  # the mix's size (uncompressed for .gz)
        per_gib = d.wall_s / gib
        ratio = d.wall_s / rf.wall_s
        cpu_ratio = d.cpu_s / rf.cpu_s
        ok = per_gib <= 3.0 and ratio <= 2.0 and d.rss_mb <= 400
        rows.append(
            f"| {name} | {size / (1 << 20):.0f} | {d.wall_s:.2f} | {d.cpu_s:.2f} | "
            f"{d.rss_mb:.0f} | {per_gib:.2f} | {d.cpu_s / gib:.2f} | {c.wall_s:.2f} | "
            f"{r7.wall_s:.2f} | {rf.wall_s:.2f} | {rf.cpu_s:.2f} | {ratio:.1f}x | "
            f"{cpu_ratio:.1f}x | "
            f"{'yes' if ok else 'no'} | {d.load:.1f} |"
        )
        print(rows[-1], file=sys.stderr)
        if a.drop:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    wall, cpu, imp, imp_cpu = _startup(diag)
    load = os.getloadavg()
    head = (
        f"{a.size} MiB per mix (uncompressed), {os.cpu_count()} CPUs, page cache warm, "
        f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}.\n\n"
        "| mix | MiB on disk | diag wall s | diag CPU s | diag peak RSS MB | diag wall s/GiB | "
        "diag CPU s/GiB | `cat` s | `rg -c` 7 patterns s | `rg -c -i -F -f` diag's literals s "
        "| `rg -F -f` CPU s | diag / `rg -F -f` (wall) | diag / `rg -F -f` (CPU) | targets met "
        "| load |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | ---: |\n"
    )
    tail = (
        f"\n`diag analyze --example --json`: {wall:.2f} s wall, {cpu:.2f} s CPU (median of "
        f"5, bytecode compiled); of which `import diag.analyze` {imp:.2f} s wall, "
        f"{imp_cpu:.2f} s CPU.\n"
    )
    table = head + "\n".join(rows) + "\n" + tail
    descr = "\n".join(f"- `{n}`: {MIXES[n][0]}" for n in names)
    print(table)
    print(descr)
    if a.update_readme:
        readme = ROOT / "README.md"
        text = readme.read_text(encoding="utf-8")
        if MARK_START in text and MARK_END in text:
            pre, rest = text.split(MARK_START, 1)
            _, post = rest.split(MARK_END, 1)
            block = f"{MARK_START}\n{table}\nThe mixes:\n\n{descr}\n{MARK_END}"
            readme.write_text(pre + block + post, encoding="utf-8")
            print("README.md updated", file=sys.stderr)
        else:
            print("README.md has no bench:start/bench:end markers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
