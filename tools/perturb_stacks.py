#!/usr/bin/env python3
"""Perturbation testing for stack dumps: a damaged paste of a dump gives the clean dump's answer.

tools/perturb.py damages the tuning LOGS; this does the same to the tuning STACK DUMPS
(fixtures/real/stacks/*/dump.txt of the tuning part, the split deciding from case.toml
alone: a held-out dump is never read). Each family is one change a terminal, a CI system,
a container runtime, an issue tracker or a chat app makes to a pasted dump; most are
perturb.py's own (shared code), a few are the dump's own (:data:`DUMP_ONLY`). The answer
compared is the dump signature: the multiset of (rank, wait site) over the processes
``diag analyze`` finds (its ``stack_processes``), or the refusal. The scored answer of a
dump case is whether its labelled wait site is among the processes' sites, so the set of
sites (``sites``) is printed beside the strict figure.

usage:
  tools/perturb_stacks.py [--corpus DIR] [-v] [-k NAME,...]
      DIR: a folder of tuning cases (``tools/corpus_split.py materialise OUT`` ->
      OUT/tuning): its stacks/*/dump.txt; default: the tuning dumps of fixtures/real.
Prints one line per family (same/total, sites-same/total) and, with -v, each case that
changed.
"""

from __future__ import annotations

import random
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import perturb as _logs  # noqa: E402  (tools/perturb.py: the shared families)

__all__ = [
    "DUMP_ONLY",
    "IGNORE_RANKS",
    "PERTURBATIONS",
    "SKIPPED",
    "SUITE",
    "DumpSignature",
    "compare",
    "perturb",
    "signature",
    "tuning_dumps",
]

# (refusal or None, sorted multiset of (rank label, wait site))
DumpSignature = tuple[str | None, tuple[tuple[str, str], ...]]


def tuning_dumps(corpus: Path | None = None) -> list[Path]:
    """The dump files of the tuning part."""
    return _logs.tuning_files(("stacks",), "dump.txt", corpus)


# ---------------------------------------------------------------------------------------
# the dump's own damage: (text, rng) -> text

_lines = _logs._lines


def _glued(sep: str, share: float) -> _logs.Perturb:
    """A chat app or an issue form that lost newlines: any line break (not only one before
    a log record, as perturb.py's ``glued``) gone with ``share``, ``sep`` in its place."""

    def f(text: str, rng: random.Random) -> str:
        out: list[str] = []
        for ln in _lines(text):
            if out and out[-1].strip() and ln.strip() and rng.random() < share:
                out[-1] = out[-1] + sep + ln
            else:
                out.append(ln)
        return "\n".join(out)

    return f


def _flattened(text: str, rng: random.Random) -> str:
    """Every newline of the paste lost, a space in its place (a one-line text field)."""
    return " ".join(ln for ln in _lines(text) if ln.strip())


# py-spy's text frame: `    name (file.py:12)` / `    0x7f.. (libc.so.6)`
_PYSPY_FRAME = re.compile(
    r"^(\s+)(\S.*?) (\((?:[^()\s]+:\d+|[^()\s]+\.so[\w.\-]*|[^()\s]*python[\d.]*)\))$"
)


def _pyspy_columns(text: str, rng: random.Random) -> str:
    """py-spy frames re-aligned into two columns: every frame's place starts at one column
    (a reporter's table, a viewer that aligns ``name   (file:line)``)."""
    lines = _lines(text)
    width = max(
        (len(m.group(2)) for ln in lines if (m := _PYSPY_FRAME.match(ln))), default=0
    )
    out = []
    for ln in lines:
        m = _PYSPY_FRAME.match(ln)
        out.append(f"{m.group(1)}{m.group(2):<{width}}  {m.group(3)}" if m else ln)
    return "\n".join(out)


def _fenced(text: str, rng: random.Random) -> str:
    """The dump in a markdown code fence with a line of prose before and after it (a fence
    longer than any the text holds, as markdown wants)."""
    fence = "`" * max([3, *(len(m) + 1 for m in re.findall(r"`{3,}", text))])
    return (
        f"The server hangs; here is the dump of the stuck process:\n\n{fence}text\n"
        + text.rstrip("\n") + f"\n{fence}\n\nAny idea what is going on?\n"
    )


def _shell_prompt(text: str, rng: random.Random) -> str:
    """The command that took the dump, with its shell prompt, before it."""
    return f"root@gpu-node-3:/workspace# py-spy dump --pid {rng.randrange(1000, 99999)}\n" + text


# --- dump damage of session dg23: what the corpus's dumps show done to a dump's own lines


def _stamped_after_head(text: str, rng: random.Random) -> str:
    """A log collector's stamp (``2025-06-22 03:09:55  ``, two spaces) before every line
    after the first two, blank lines the bare stamp: a collector that began stamping after
    the error's first lines (the s37 none_dealloc dump's paste)."""
    lines = _lines(text)
    stamp = f"2025-06-22 03:09:{rng.randrange(10, 60)}  "
    return "\n".join(ln if i < 2 else stamp + ln for i, ln in enumerate(lines))


# py-spy's thread header: `Thread 0x7F.. (idle): "MainThread"` / `Thread 187 (active+gil):`
_PYSPY_HEADER = re.compile(r'^Thread (?:0x[0-9a-fA-F]+|\d+) \(([a-z+]+)\):(?: "(.*)")?$')


def _retyped_header(text: str, rng: random.Random) -> str:
    """py-spy's thread headers re-typed by the reporter: the id dropped, the quoted name
    before the state (``Thread "MainThread" (idle):``), as the s44 omlx report has them."""
    out = []
    for ln in _lines(text):
        m = _PYSPY_HEADER.match(ln)
        if m is None:
            out.append(ln)
        elif m.group(2) is not None:
            out.append(f'Thread "{m.group(2)}" ({m.group(1)}):')
        else:
            out.append(f"Thread ({m.group(1)}):")
    return "\n".join(out)


def _cat_numbered(text: str, rng: random.Random) -> str:
    """``cat -n``'s (or an editor's) line numbers: the number right-aligned in six columns
    and a tab before each line (GNU coreutils cat -n)."""
    return "\n".join(f"{i + 1:>6}\t{ln}" for i, ln in enumerate(_lines(text)))


DUMP_ONLY: dict[str, _logs.Perturb] = {
    "dump-glued": _glued("", 0.5),
    "dump-glued-space": _glued(" ", 0.5),
    "flattened": _flattened,
    "pyspy-columns": _pyspy_columns,
    "fenced": _fenced,
    "shell-prompt": _shell_prompt,
    "stamp-after-head": _stamped_after_head,
    "retyped-header": _retyped_header,
    "cat-numbered": _cat_numbered,
}

# perturb.py's families that say nothing about a pasted dump (the rest are used as they are)
SKIPPED: dict[str, str] = {
    "excerpt-head": "cuts before the first phase event or finding's evidence a log has: a "
    "dump has none (no tuning dump changes), and a dump cut before its thread header loses "
    "what its answer rests on (the thread's name and state)",
}

PERTURBATIONS: dict[str, _logs.Perturb] = {
    **{n: f for n, f in _logs.PERTURBATIONS.items() if n not in SKIPPED},
    **DUMP_ONLY,
}

# families that take the rank prefixes off: only the wait sites are compared
IGNORE_RANKS = frozenset({"bare-messages"})


def signature(text: str, name: str = "dump.txt") -> DumpSignature:
    """(refusal, sorted multiset of (rank label, wait site)) of ``diag analyze``'s stack
    processes of ``text``."""
    from diag.analyze import analyze_text
    from diag.errors import InputError

    try:
        a = analyze_text(text, name=name)
    except InputError as exc:
        return (f"not read: {type(exc).__name__}", ())
    return (None, tuple(sorted(
        (p.rank.label if p.rank is not None else "", str(p.wait_site))
        for p in a.stack_processes
    )))


def compare(clean: DumpSignature, got: DumpSignature, ignore_ranks: bool = False) -> list[str]:
    """What differs (empty: the same answer). The first item, where the set of wait sites
    differs, starts with ``sites``."""
    if clean[0] != got[0]:
        return [f"sites: {clean[0] or 'read'} -> {got[0] or 'read'}"]
    diffs = []
    a = {s for _, s in clean[1]}
    b = {s for _, s in got[1]}
    if a != b:
        diffs.append(f"sites: lost {sorted(a - b)} extra {sorted(b - a)}")
    ca: Counter[tuple[str, str]] = Counter(("" if ignore_ranks else r, s) for r, s in clean[1])
    cb: Counter[tuple[str, str]] = Counter(("" if ignore_ranks else r, s) for r, s in got[1])
    if ca != cb:
        lost, extra = ca - cb, cb - ca
        diffs.append(
            f"processes {len(clean[1])} -> {len(got[1])}: lost {_show(lost)} extra {_show(extra)}"
        )
    return diffs


def _show(c: Counter[tuple[str, str]]) -> str:
    return "[" + ", ".join(
        f"{n}x {r + ' ' if r else ''}{s}" for (r, s), n in sorted(c.items())
    ) + "]"


def sites_kept(diffs: list[str]) -> bool:
    return not diffs or not diffs[0].startswith("sites")


SUITE: _logs.Suite[DumpSignature] = _logs.Suite(
    families=PERTURBATIONS,
    signature=signature,
    compare=lambda clean, got, name: compare(clean, got, name in IGNORE_RANKS),
    files=tuning_dumps,
    case_id=lambda dump: dump.parent.name,
    noun="dumps",
    loose=("sites", sites_kept, "the clean set of wait sites"),
)
perturb = SUITE.perturb


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(SUITE.main(sys.argv[1:], __doc__ or ""))
