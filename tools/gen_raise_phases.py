#!/usr/bin/env python3
"""Write diag/data/raise_phases.tsv: the start-up phase each raised message of the sources
proves, for the exception line that ends a traceback.

An exception's message names the step that raised it as surely as a log line does: vLLM's
``ValueError: No valid attention backend found for cuda with ...`` is raised by the
platform's ``get_attn_backend_cls``, which runs while the model is built (weights_load).
For every ``raise`` of the sglang / vllm releases in fixtures/messages/messages.tsv whose
source file and function fixtures/messages/phase_map.yaml gives a phase later than launch,
this writes one row: the exception class, the message's pattern (its literal pieces up to
the third, holes any text; anchored at the message's start) and the phase.

A pattern is kept only when it is specific: its first literal piece at least
:data:`MIN_HEAD` characters (the runtime looks patterns up by the message's head), at
least :data:`MIN_LITERAL` literal characters in all, and no sample of another raise of the
same class and framework whose phase differs (or that marks none) matches it.

Usage:
    python3 tools/gen_raise_phases.py            # rewrite diag/data/raise_phases.tsv
    python3 tools/gen_raise_phases.py --check    # exit 1 when it is not up to date
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from message_table import (  # noqa: E402
    HOLE,
    Message,
    load_map,
    load_table,
    samples,
    version_key,
    write_or_check,
)

from diag.raise_phases import EXCEPTION_CLASS, NO_PHASE  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "diag" / "data" / "raise_phases.tsv"
MIN_HEAD = 12  # characters of the first literal piece (the runtime's look-up key)
MIN_LITERAL = 20  # literal characters of the kept pieces together
PIECES = 3  # literal pieces kept: a long message's tail varies more between releases


def pieces(template: str) -> list[str] | None:
    """The template's literal pieces, in order, split at its holes (``{{``/``}}`` are
    literal braces); None when it starts with a hole."""
    out = [""]
    pos = 0
    for m in HOLE.finditer(template):
        out[-1] += template[pos : m.start()]
        tok = m.group(0)
        if tok == "{{":
            out[-1] += "{"
        elif tok == "}}":
            out[-1] += "}"
        else:
            out.append("")
        pos = m.end()
    out[-1] += template[pos:]
    return [p for p in out if p] if out[0] else None


def pattern_of(m: Message) -> str | None:
    """The message's anchored pattern (the first :data:`PIECES` literal pieces, a hole any
    text between them), or None when it is not specific enough."""
    ps = pieces(m.template)
    if ps is None:
        return None
    kept: list[str] = []
    for p in ps[:PIECES]:
        head, newline, _ = p.partition("\n")  # an exception line shows the first line only
        if head:
            kept.append(head)
        if newline:
            break
    if not kept or any("\t" in p for p in kept):
        return None
    if len(kept[0].strip()) < MIN_HEAD or sum(len(p) for p in kept) < MIN_LITERAL:
        return None
    return "^" + ".*?".join(_escape(p) for p in kept)


def _escape(text: str) -> str:
    """``re.escape`` for the metacharacters only (spaces stay readable in the table)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


@dataclass
class _Row:
    """One kept pattern: its phase, where it is raised, the releases that raise it."""

    phase: str
    where: set[str] = field(default_factory=set)
    versions: set[str] = field(default_factory=set)


def build() -> list[tuple[str, ...]]:
    pm = load_map()
    table = [m for m in load_table() if m.level.startswith("raise:") and m.framework != "torch"]
    phase_of: dict[Message, str | None] = {}
    for m in table:
        p = pm.phase_of(m)
        phase_of[m] = p if p is not None and not p.startswith("none") else None
    # every raise's samples, by (framework, class): what a kept pattern must not match
    by_class: dict[tuple[str, str], list[tuple[str, str | None]]] = defaultdict(list)
    for m in table:
        cls = m.level.split(":", 1)[1]
        for s in samples(m):
            text = s.split(": ", 1)[1] if ": " in s else s
            by_class[(m.framework, cls)].append((text, phase_of[m]))
    rows: dict[tuple[str, str, str], _Row] = {}
    ambiguous: set[tuple[str, str, str]] = set()
    for m in table:
        phase = phase_of[m]
        cls = m.level.split(":", 1)[1]
        if phase is None or phase == "launch" or not re.fullmatch(EXCEPTION_CLASS, cls):
            continue
        pat = pattern_of(m)
        if pat is None:
            continue
        key = (m.framework, cls, pat)
        row = rows.setdefault(key, _Row(phase))
        if row.phase != phase:
            ambiguous.add(key)
        row.where.add(f"{m.file}:{m.function}")
        row.versions.update(m.versions)
    out: list[tuple[str, ...]] = []
    for key, row in sorted(rows.items()):
        framework, cls, pat = key
        rx = re.compile(pat, re.S)
        clash = key in ambiguous or any(
            ph != row.phase and rx.match(text)
            for text, ph in by_class[(framework, cls)]
        )
        vs = sorted(row.versions, key=lambda v: (version_key(v), v))
        out.append((
            # a message the framework raises in steps of different phases (or in one that
            # marks none) proves no phase: its row says so ('-'), so that the runtime does
            # not take the other framework's row for the same words instead
            framework, NO_PHASE if clash else row.phase, cls, pat,
            ", ".join(sorted(row.where)), f"{vs[0]} / {vs[-1]}" if len(vs) > 1 else vs[0],
        ))
    return out


HEADER = (
    "# raised message -> the start-up phase its raising function marks (phase_map.yaml);\n"
    "# '-': the framework raises it in steps of different phases (it proves none)\n"
    "# written by tools/gen_raise_phases.py from fixtures/messages/messages.tsv; do not edit\n"
    "framework\tphase\texception\tpattern\twhere\tversions\n"
)


def render(rows: list[tuple[str, ...]]) -> str:
    return HEADER + "".join("\t".join(r) + "\n" for r in rows)


def main() -> int:
    text = render(build())
    return write_or_check(OUT, text, "gen_raise_phases.py", f"{text.count(chr(10)) - 3} patterns")


if __name__ == "__main__":
    sys.exit(main())
