#!/usr/bin/env python3
"""Perturbation testing: the answer on a damaged or re-wrapped log is the answer on the clean one.

Users paste logs that terminals, CI systems, container runtimes and issue trackers have
changed on the way. Each perturbation below applies one such change, deterministically, to
a TUNING case's log (never a held-out one); the answer diag gives (last phase, finding ids,
stragglers and missing ranks) must stay the one it gives on the clean log. A perturbation
that removes information (time stamps) compares only what the remaining text can still
prove (:data:`IGNORED`).

usage:
  tools/perturb.py [--corpus DIR] [-v] [-k NAME,...]
      DIR: a folder of tuning cases (``tools/corpus_split.py materialise OUT`` ->
      OUT/tuning); default: the tuning part of fixtures/real, chosen by the split.
Prints one line per perturbation (same/total) and, with -v, each case that changed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Generic, TypeVar

ROOT = Path(__file__).resolve().parent.parent

__all__ = [
    "IGNORED",
    "PERTURBATIONS",
    "SHORT_PASTES",
    "SUITE",
    "Signature",
    "Suite",
    "compare",
    "compare_short",
    "perturb",
    "read_case",
    "signature",
    "tuning_files",
    "tuning_logs",
]

RankKeys = frozenset[tuple[object, ...]]
Signature = tuple[str | None, frozenset[str], RankKeys, RankKeys]


def read_case(path: Path) -> str:
    """A case's log or dump as the analyser reads it (undecodable bytes kept)."""
    return path.read_bytes().decode("utf-8", errors="surrogateescape")


def tuning_files(kinds: Sequence[str], filename: str, corpus: Path | None = None) -> list[Path]:
    """``filename`` of every tuning case of ``kinds``: under ``corpus`` (a folder of tuning
    cases), else in the tuning part of fixtures/real (the split decides from case.toml
    alone: a held-out case is never read)."""
    if corpus is not None:
        return sorted(p for p in corpus.glob(f"*/*/{filename}") if p.parent.parent.name in kinds)
    here = str(Path(__file__).resolve().parent)  # tools/, where corpus_split.py is
    if here not in sys.path:
        sys.path.insert(0, here)
    import corpus_split as split
    return [
        d / filename for d in split.case_dirs(split.REAL)
        if d.parent.name in kinds and split.part_of(d) == "tuning"
    ]


def tuning_logs(corpus: Path | None = None) -> list[Path]:
    """The log files of the tuning part."""
    return tuning_files(("sglang", "vllm"), "log.txt", corpus)


# ---------------------------------------------------------------------------------------
# perturbations: (text, rng) -> text

Perturb = Callable[[str, random.Random], str]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _hard_wrap(width: int) -> Perturb:
    """A terminal or a copy tool that breaks every line at ``width`` columns."""

    def f(text: str, rng: random.Random) -> str:
        out: list[str] = []
        for ln in _lines(text):
            if len(ln) <= width:
                out.append(ln)
                continue
            out.extend(ln[i : i + width] for i in range(0, len(ln), width))
        return "\n".join(out)

    return f


def _word_wrap(width: int) -> Perturb:
    """``fold -s``: breaks after the last space before ``width`` (the space stays)."""

    def f(text: str, rng: random.Random) -> str:
        out: list[str] = []
        for ln in _lines(text):
            while len(ln) > width:
                cut = ln.rfind(" ", 0, width)
                cut = width if cut <= 0 else cut + 1
                out.append(ln[:cut])
                ln = ln[cut:]
            out.append(ln)
        return "\n".join(out)

    return f


# a line that starts a framework record (not a continuation, not a bar)
_START = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\[\d\d:\d\d:\d\d"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d "
    r"|\([A-Za-z_]*[\w ]*pid=\d+"
)


def _lost_newlines(sep: str, share: float) -> Perturb:
    """Newlines lost between records (a paste outside a code block, a chat client)."""

    def f(text: str, rng: random.Random) -> str:
        out: list[str] = []
        for ln in _lines(text):
            if out and out[-1].strip() and _START.match(ln) and rng.random() < share:
                out[-1] = out[-1] + sep + ln
            else:
                out.append(ln)
        return "\n".join(out)

    return f


def _prefix(make: Callable[[int, random.Random], str]) -> Perturb:
    def f(text: str, rng: random.Random) -> str:
        lines = _lines(text)
        return "\n".join(make(i, rng) + ln if ln.strip() else ln for i, ln in enumerate(lines))

    return f


_FW_TIME = re.compile(
    r"(?:\[|^)(?P<d>\d{4}-\d\d-\d\d)[ T](?P<t>\d\d:\d\d:\d\d)"
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (?P<md>\d\d-\d\d) (?P<t2>\d\d:\d\d:\d\d)"
    r"|^\[(?P<t3>\d\d:\d\d:\d\d)"
)


def _stamped(fmt: Callable[[dt.datetime, random.Random], str], offset_h: int) -> Perturb:
    """A container runtime's or CI runner's stamp on every line, on the framework's own
    clock shifted by ``offset_h`` hours (a runtime in UTC, the framework in local time);
    a line without a time of its own gets the time of the line before."""

    def f(text: str, rng: random.Random) -> str:
        out = []
        now = dt.datetime(2025, 3, 14, 6, 0, 0)
        first = True
        lines = _lines(text)
        for ln in lines:  # the clock starts at the first time the log shows
            m = _FW_TIME.search(ln)
            if m and (m.group("d") or m.group("md")):
                d, t = (m.group("d"), m.group("t")) if m.group("d") else (
                    f"2025-{m.group('md')}", m.group("t2"))
                try:
                    now = dt.datetime.fromisoformat(f"{d} {t}")
                except ValueError:
                    continue
                break
        for ln in lines:
            m = _FW_TIME.search(ln[:200])
            if m:
                try:
                    if m.group("d"):
                        d = dt.datetime.fromisoformat(f"{m.group('d')} {m.group('t')}")
                    elif m.group("md"):
                        d = dt.datetime.fromisoformat(f"2025-{m.group('md')} {m.group('t2')}")
                    else:
                        d = dt.datetime.fromisoformat(f"{now:%Y-%m-%d} {m.group('t3')}")
                    if first or d >= now:
                        now = d
                    first = False
                except ValueError:
                    pass
            out.append(fmt(now + dt.timedelta(hours=offset_h), rng) + ln if ln.strip() else ln)
        return "\n".join(out)

    return f


def _gha(t: dt.datetime, rng: random.Random) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{rng.randrange(10**7):07d}Z "


def _kubectl(t: dt.datetime, rng: random.Random) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{rng.randrange(10**9):09d}Z "


def _cri(t: dt.datetime, rng: random.Random) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{rng.randrange(10**9):09d}+00:00 stdout F "


def _journald(t: dt.datetime, rng: random.Random) -> str:
    return f"{t:%b %d %H:%M:%S} gpu-node-3 python3[28059]: "


_ANSI_WORD = re.compile(r"^(\[[^\]]{1,60}\]|\([^)]{1,80}\)|INFO|WARNING|ERROR|DEBUG)")


def _ansi(real_esc: bool) -> Perturb:
    """Colour codes around the first token and at the end of a line (a coloured terminal,
    or the codes left behind as text where the ESC byte was lost)."""
    esc = "\x1b" if real_esc else ""

    def f(text: str, rng: random.Random) -> str:
        out = []
        for ln in _lines(text):
            m = _ANSI_WORD.match(ln)
            if m:
                ln = f"{esc}[1;36m{m.group(1)}{esc}[0m" + ln[m.end() :]
            elif ln.strip() and rng.random() < 0.3:
                ln = f"{esc}[33m" + ln + f"{esc}[0m"
            out.append(ln)
        return "\n".join(out)

    return f


def _crlf(text: str, rng: random.Random) -> str:
    return text.replace("\n", "\r\n")


def _trailing_spaces(text: str, rng: random.Random) -> str:
    return "\n".join(ln + " " * rng.randrange(1, 4) if ln.strip() else ln for ln in _lines(text))


def _line_numbers(text: str, rng: random.Random) -> str:
    return "\n".join(f"{i + 1:>5} | {ln}" for i, ln in enumerate(_lines(text)))


def _numbers_own_line(text: str, rng: random.Random) -> str:
    # a code viewer's copy (GitHub's blob view, a gist, a CI log page): each line's number
    # lands on a line of its own before it
    return "\n".join(f"{i + 1}\n{ln}" for i, ln in enumerate(_lines(text)))


def _double_spaced(text: str, rng: random.Random) -> str:
    """A blank line after every line (a copy out of some web views and terminals)."""
    return "\n\n".join(_lines(text))


def _quote(text: str, rng: random.Random) -> str:
    return "\n".join(f"> {ln}" if ln else ">" for ln in _lines(text))


_PREFIX = re.compile(
    r"^(?:\([\w\- ]{1,80}pid=\d+(?:, ip=[\w.:]+)?\) )*"  # vLLM / Ray process prefixes
    r"(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[ \w]*)\] "  # SGLang stamp and rank tags
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w./\-]+\.py:\d+: )?"
    r"|\[\d\d:\d\d:\d\d(?: [\w ]*)?\] "  # SGLang 2024, time only
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
    r"\[?[\w./\-]+\.py:\d+\] )"  # vLLM level, time, logger
)


def _bare_messages(text: str, rng: random.Random) -> str:
    """Only the messages: the framework's line prefixes (time stamps, levels, loggers,
    rank tags, process prefixes) cut off by the reporter or a log viewer. What the
    messages say (phases, errors) must still be read; what needs the times or ranks is
    compared no more (:data:`IGNORED`)."""
    return "\n".join(_PREFIX.sub("", ln, count=1) for ln in _lines(text))


_SG_TP = re.compile(r"^(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: DP\d+)?(?: PP\d+)?) TP(\d+)\]")
_VL_RANK = re.compile(r"\(VllmWorker rank=(\d+) pid=(\d+)\)")
_VL_TP = re.compile(r"\(Worker_TP(\d+) pid=(\d+)\)")


def _rank_format(text: str, rng: random.Random) -> str:
    """The same ranks in another release's prefix: SGLang's ``TPn`` gains the ``EPn`` of
    an expert-parallel run; vLLM's ``VllmWorker rank=n`` <-> ``Worker_TPn``."""
    out = []
    for ln in _lines(text):
        ln = _SG_TP.sub(lambda m: f"{m.group(1)} TP{m.group(2)} EP{m.group(2)}]", ln, count=1)
        if "VllmWorker rank=" in ln:
            ln = _VL_RANK.sub(lambda m: f"(Worker_TP{m[1]} pid={m[2]})", ln, count=1)
        elif "(Worker_TP" in ln:
            ln = _VL_TP.sub(lambda m: f"(VllmWorker rank={m[1]} pid={m[2]})", ln, count=1)
        out.append(ln)
    return "\n".join(out)


_RANK_OF = re.compile(r" TP(\d+)(?: EP\d+)?\] |rank=(\d+) |Worker_TP(\d+) |\[rank(\d+)\]:")


def _interleave(text: str, rng: random.Random) -> str:
    """Two ranks' lines arrive in another order: adjacent one-line records of different
    ranks swap (each rank's own order is kept)."""
    lines = _lines(text)
    i = 0
    while i + 1 < len(lines):
        a, b = lines[i], lines[i + 1]
        ma, mb = _RANK_OF.search(a[:120]), _RANK_OF.search(b[:120])
        nxt = lines[i + 2] if i + 2 < len(lines) else ""
        if (
            ma and mb and ma.group(0) != mb.group(0) and not nxt[:1].isspace()
            and rng.random() < 0.5
        ):
            lines[i], lines[i + 1] = b, a
            i += 2
        else:
            i += 1
    return "\n".join(lines)


_CONFIG_LINE = re.compile(r"server_args=|non-default args|with config:|args=Namespace|engine_args")


def _mid_line(text: str, rng: random.Random) -> str:
    """Two processes writing at once: a ranked line cut by another rank's whole line, its
    rest on the next line (``[.. TP0] Load wei[.. TP1] Capture ...\nght end. ...``)."""
    lines = _lines(text)
    i = 0
    while i + 1 < len(lines):
        a, b = lines[i], lines[i + 1]
        ma, mb = _RANK_OF.search(a[:120]), _RANK_OF.search(b[:120])
        if ma and mb and ma.group(0) != mb.group(0) and len(a) > 60 and rng.random() < 0.3:
            k = rng.randrange(ma.end() + 5, len(a) - 5)
            lines[i], lines[i + 1] = a[:k] + b, a[k:]
            i += 2
        else:
            i += 1
    return "\n".join(lines)


def _excerpt_head(text: str, rng: random.Random) -> str:
    """The paste starts late: the lines before the first one the clean analysis uses (a
    phase event, a finding's evidence, the configuration) are gone."""
    from diag.analyze import analyze_text
    from diag.errors import InputError

    lines = _lines(text)
    try:
        a = analyze_text(text, name="log.txt")
    except InputError:
        return text
    used = [e.line for e in a.events if not e.pattern.startswith("fallback.")]
    used += [ev.line for f in a.findings for ev in f.evidence]
    used += [i + 1 for i, ln in enumerate(lines) if _CONFIG_LINE.search(ln)]
    first = min(used, default=1)
    return "\n".join(lines[first - 1 :])


def _middle_cut(text: str, rng: random.Random) -> str:
    """The reporter cut a run of repeated lines out of the middle and wrote ``...``: a
    kind of line (digits removed) seen 3+ times in a row keeps its first and last."""
    lines = _lines(text)
    out: list[str] = []
    i = 0
    digits = re.compile(r"[0-9]+")
    while i < len(lines):
        kind = digits.sub("", lines[i])[:80]
        j = i
        while j + 1 < len(lines) and digits.sub("", lines[j + 1])[:80] == kind and kind.strip():
            j += 1
        if j - i >= 3:
            out.extend([lines[i], "...", lines[j]])
        else:
            out.extend(lines[i : j + 1])
        i = j + 1
    return "\n".join(out)


def _lost_indent(text: str, rng: random.Random) -> str:
    """A paste outside a code block: every line's indentation gone (traceback frames and
    their source lines start at column 0)."""
    return "\n".join(ln.lstrip(" \t") for ln in _lines(text))


def _html_escaped(text: str, rng: random.Random) -> str:
    """Text copied from an HTML view: quotes and angle brackets as entities."""
    return (
        text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
        .replace(">", "&gt;").replace("'", "&#39;")
    )


def _tabs(text: str, rng: random.Random) -> str:
    """Indentation re-typed with tabs (an editor's paste)."""
    out = []
    for ln in _lines(text):
        body = ln.lstrip(" ")
        n = len(ln) - len(body)
        out.append("\t" * (n // 4) + " " * (n % 4) + body if n else ln)
    return "\n".join(out)


def _nbsp(text: str, rng: random.Random) -> str:
    """Text copied from a rendered web page or a chat app: indentation and runs of spaces
    kept as no-break spaces (U+00A0), every other space of a run."""
    out = []
    for ln in _lines(text):
        body = ln.lstrip(" ")
        lead = "\xa0" * (len(ln) - len(body))
        out.append(lead + re.sub("  +", lambda m: " \xa0" * (len(m.group()) // 2)
                                 + " " * (len(m.group()) % 2), body))
    return "\n".join(out)


def _smart_quotes(text: str, rng: random.Random) -> str:
    """A word processor's or chat app's auto-correct: straight quotes made typographic."""
    text = re.sub(r'(^|[\s(\[{=])"', "\\1\u201c", text, flags=re.M)
    text = text.replace('"', "\u201d")
    text = re.sub(r"(^|[\s(\[{=])'", "\\1\u2018", text, flags=re.M)
    return text.replace("'", "\u2019")


PERTURBATIONS: dict[str, Perturb] = {
    "wrap80": _hard_wrap(80),
    "wrap100": _hard_wrap(100),
    "wrap120": _hard_wrap(120),
    "wrap160": _hard_wrap(160),
    "fold100": _word_wrap(100),
    "glued": _lost_newlines("", 0.5),
    "glued-space": _lost_newlines(" ", 0.5),
    "gha": _stamped(_gha, 0),
    "kubectl": _stamped(_kubectl, -8),
    "cri": _stamped(_cri, 0),
    "journald": _stamped(_journald, 0),
    "compose": _prefix(lambda i, r: "sglang-server-1  | "),
    "quote": _quote,
    "line-numbers": _line_numbers,
    "numbers-own-line": _numbers_own_line,
    "double-spaced": _double_spaced,
    "ansi": _ansi(True),
    "ansi-text": _ansi(False),
    "crlf": _crlf,
    "trailing-spaces": _trailing_spaces,
    "bare-messages": _bare_messages,
    "rank-format": _rank_format,
    "interleave": _interleave,
    "excerpt-head": _excerpt_head,
    "middle-cut": _middle_cut,
    "quote+wrap100": lambda t, r: _quote(_hard_wrap(100)(t, r), r),
    "compose+ansi": lambda t, r: _prefix(lambda i, _: "vllm-1  | ")(_ansi(True)(t, r), r),
    "lost-indent": _lost_indent,
    "html-escaped": _html_escaped,
    "tabs": _tabs,
    "nbsp": _nbsp,
    "smart-quotes": _smart_quotes,
    "mid-line": _mid_line,
    # a launcher of its own format (one no rule of diag names): a constant word prefix on
    # every line, and the launcher's own stamp before a bar
    "launcher-prefix": _prefix(lambda i, r: "vLLM STDOUT: "),
    "launcher-stamp": _prefix(
        lambda i, r: f"2025-03-01 10:{(i // 60) % 60:02d}:{i % 60:02d}.{r.randrange(1000):03d} >> "
    ),
}


# ---------------------------------------------------------------------------------------
# short pastes: a few lines around the line that proves the phase reached
#
# A reporter pastes the few lines that show the problem, not the log: no banner, no args
# line, no version, none of the earlier lines a reader learns a prefix or a rank table from.
# Each family below keeps only such a window of a tuning log; the line that set the clean
# analysis's phase reached (:func:`diag.timeline.reaching_event`) is kept, so the cut must
# still reach that phase, from its own lines. Only the phase reached is compared (a
# finding may rest on lines the cut removed, a rank comparison on ranks it removed).

_TB_HEAD = re.compile(r"Traceback \(most recent call last\)|\(most recent call first\)")
_TB_FRAME = re.compile(r'File:? "[^"]+", line \d+')


# an event whose phase the analysis set from another line (diag.analyze: a request refused
# after the engine died proves listening; the warm-up's own request proves warmup): the
# line alone proves another phase, so it is no proof a window can keep
_FROM_CONTEXT = frozenset({"refused", "request"})


def _proof(text: str, last: bool = False) -> tuple[list[str], int, bool] | None:
    """(lines, 0-based index of the proving line, whether it is part of a traceback) of
    the clean analysis: the line of the event that set the phase reached (``last``: the
    last event of that phase, not one whose phase the analysis set from its context);
    None when the analysis reads nothing or reached no phase from a marker."""
    from diag.analyze import analyze_text
    from diag.errors import InputError
    from diag.timeline import reaching_event

    try:
        a = analyze_text(text, name="log.txt")
    except InputError:
        return None
    phase, ev = reaching_event(a.events)
    if (
        ev is None or phase is None or a.last_phase != phase or ev.pattern.startswith("fallback.")
        or _FROM_CONTEXT.intersection(ev.fields)
    ):
        return None
    if last:
        same = [e for e in a.events if e.phase == phase and e.source == ev.source
                and e.line >= ev.line and not _FROM_CONTEXT.intersection(e.fields)]
        ev = max(same, key=lambda e: e.line, default=ev)
    lines = _lines(text)
    i = ev.line - 1
    tb = (
        ev.pattern.startswith(("frames.", "raises.")) or "traceback" in ev.pattern
        or any(_TB_FRAME.search(ln) or _TB_HEAD.search(ln) for ln in lines[max(0, i - 1) : i + 1])
    )
    return lines, i, tb


# a traceback's indented line after any prefix (a stamp, a process or rank tag, a logger)
_TB_INDENTED = re.compile(r"^\s|[\]):] {2,}\S|\^\^\^|~~~")


def _in_tb(line: str) -> bool:
    """A traceback's line other than its exception line: a header, a frame, a source or
    caret line (indented after any prefix), a blank."""
    return bool(_TB_FRAME.search(line) or _TB_HEAD.search(line) or _TB_INDENTED.search(line)
                or not line.strip())


def _tb_span(lines: list[str], i: int, tb: bool) -> tuple[int, int]:
    """The traceback line ``i`` is part of (from its header, when one is within reach, or
    else its first frame, to its exception line); (i, i) when it is part of none."""
    if not tb:
        return i, i
    lo = next((j for j in range(i, max(-1, i - 400), -1) if _TB_HEAD.search(lines[j])), None)
    if lo is None:  # a headless fragment: the frames before it
        lo = i
        while lo > 0 and _in_tb(lines[lo - 1]) and lines[lo - 1].strip():
            lo -= 1
    hi = i
    while hi + 1 < len(lines):
        hi += 1
        if not _in_tb(lines[hi]) and not (
            hi + 1 < len(lines) and lines[hi + 1].strip() and _in_tb(lines[hi + 1])
        ):
            break  # the exception line (another's, where tracebacks interleave, goes on)
    return lo, hi


def _proof_window(before: int, after: int | None, last: bool = False) -> Perturb:
    """``before`` lines before the proving line and ``after`` after it (``after`` None: to
    the end); a traceback keeps all of its frames."""

    def f(text: str, rng: random.Random) -> str:
        got = _proof(text, last)
        if got is None:
            return text
        lines, i, tb = got
        lo, hi = _tb_span(lines, i, tb)
        lo = max(0, min(lo, i - before))
        hi = len(lines) - 1 if after is None else max(hi, i + after)
        return "\n".join(lines[lo : hi + 1])

    return f


def _last_lines(n: int) -> Perturb:
    """The last ``n`` lines, where the last line that proves the phase reached is among
    them (its traceback too); the log is left whole where it is not."""

    def f(text: str, rng: random.Random) -> str:
        got = _proof(text, last=True)
        if got is None:
            return text
        lines, i, tb = got
        while lines and not lines[-1].strip():
            lines.pop()
        if len(lines) <= n or i >= len(lines) or i < len(lines) - n:
            return text
        lo, _ = _tb_span(lines, i, tb)
        return "\n".join(lines[min(lo, len(lines) - n) :])

    return f


_WINDOW = _proof_window(3, 5)
SHORT_PASTES: dict[str, Perturb] = {
    "proof-window": _WINDOW,
    "proof-lines": _proof_window(1, 1),
    "proof-last": _proof_window(8, 2, last=True),
    "proof-tail": _proof_window(0, None),
    "last-lines": _last_lines(12),
    # the window under a paste's damage: a launcher's prefix or stamp learned from its few
    # lines (diag.parse.unwrap), the logger's prefixes cut off, a terminal's wrap
    "proof-window+launcher": lambda t, r: _prefix(lambda i, _: "job-7 STDOUT: ")(_WINDOW(t, r), r),
    "proof-window+stamp": lambda t, r: PERTURBATIONS["launcher-stamp"](_WINDOW(t, r), r),
    "proof-window+bare": lambda t, r: _bare_messages(_WINDOW(t, r), r),
    "proof-window+wrap100": lambda t, r: _hard_wrap(100)(_WINDOW(t, r), r),
}

# what a perturbation may legitimately change: a silence measured from time stamps is
# gone with them, and so are per-rank comparisons once the rank tags are gone
_TIME_FINDINGS = frozenset({
    "startup.stalled", "startup.cut_excerpt", "startup.no_listen_port", "weights.slow_load",
    "rank.straggler", "rank.missing", "watchdog.timeout",
})
IGNORED: dict[str, frozenset[str]] = {"bare-messages": _TIME_FINDINGS}


def _rank_key(r: object) -> tuple[object, ...]:
    return tuple(getattr(r, k, None) for k in ("node", "dp", "pp", "tp"))


def signature(text: str, name: str = "log.txt") -> Signature:
    from diag.analyze import analyze_text
    from diag.errors import InputError

    try:
        a = analyze_text(text, name=name)
    except InputError as exc:
        return (f"not read: {type(exc).__name__}", frozenset(), frozenset(), frozenset())
    return (
        a.last_phase,
        frozenset(f.id for f in a.findings),
        frozenset(map(_rank_key, a.stragglers)),
        frozenset(map(_rank_key, a.missing_ranks)),
    )


def compare(clean: Signature, got: Signature, ignored: frozenset[str] = frozenset()) -> list[str]:
    """What differs (empty: the same answer)."""
    diffs = []
    if clean[0] != got[0]:
        diffs.append(f"last_phase {clean[0]} -> {got[0]}")
    lost, extra = (clean[1] - got[1]) - ignored, (got[1] - clean[1]) - ignored
    if lost:
        diffs.append(f"lost {sorted(lost)}")
    if extra:
        diffs.append(f"extra {sorted(extra)}")
    if "rank.straggler" not in ignored and clean[2] != got[2]:
        diffs.append(f"stragglers {sorted(map(str, clean[2]))} -> {sorted(map(str, got[2]))}")
    if "rank.missing" not in ignored and clean[3] != got[3]:
        diffs.append(f"missing {sorted(map(str, clean[3]))} -> {sorted(map(str, got[3]))}")
    return diffs


def compare_short(clean: Signature, got: Signature) -> list[str]:
    """What a short paste (:data:`SHORT_PASTES`) changes: the phase reached. (Not the
    framework: a few lines may hold only another framework's lines, e.g. vLLM's platform
    line that SGLang 0.1-0.4 logs through its vLLM import, or a vLLM log's NCCL lines.)"""
    return [f"last_phase {clean[0]} -> {got[0]}"] if clean[0] != got[0] else []


def _compare(clean: Signature, got: Signature, name: str) -> list[str]:
    if name in SHORT_PASTES:
        return compare_short(clean, got)
    return compare(clean, got, IGNORED.get(name, frozenset()))


S = TypeVar("S")


@dataclasses.dataclass(frozen=True)
class Suite(Generic[S]):
    """One perturbation test, shared by this tool and tools/perturb_stacks.py (and their
    tests): the families, the answer compared (``signature`` of a text), what differs
    (``compare(clean, got, family)``, empty when the same), the files of the tuning cases and
    a case's id (which seeds its perturbations)."""

    families: Mapping[str, Perturb]
    signature: Callable[[str], S]
    compare: Callable[[S, S, str], list[str]]
    files: Callable[[Path | None], list[Path]]
    case_id: Callable[[Path], str]
    noun: str  # what the cases are ("logs")
    # (label, kept, phrase): a second, looser figure of each family (the set of wait sites)
    loose: tuple[str, Callable[[list[str]], bool], str] | None = None

    def perturb(self, name: str, text: str, seed: str) -> str:
        return self.families[name](text, random.Random(f"{name}:{seed}"))

    def cases(self, corpus: Path | None = None) -> list[tuple[str, str]]:
        """(case id, text) of every tuning case."""
        return [(self.case_id(f), read_case(f)) for f in self.files(corpus)]

    def diffs(self, name: str, case: str, text: str, clean: S) -> list[str]:
        """What family ``name`` changes in the answer on ``text`` (clean answer ``clean``)."""
        return self.compare(clean, self.signature(self.perturb(name, text, case)), name)

    def misses(
        self, name: str, cases: Iterable[tuple[str, str]], clean: Callable[[str], S]
    ) -> list[str]:
        """``case: diffs`` of each case whose answer family ``name`` changes (``clean``: a
        case id's clean answer)."""
        out = []
        for case, text in cases:
            diffs = self.diffs(name, case, text, clean(case))
            if diffs:
                out.append(f"{case}: {'; '.join(diffs)}")
        return out

    def run(
        self, cases: Iterable[tuple[str, str]], names: Iterable[str]
    ) -> dict[str, list[tuple[str, list[str]]]]:
        """family -> [(case, diffs)] for every case (diffs empty when the same)."""
        names = list(names)
        out: dict[str, list[tuple[str, list[str]]]] = {n: [] for n in names}
        for case, text in cases:
            clean = self.signature(text)
            for n in names:
                out[n].append((case, self.diffs(n, case, text, clean)))
        return out

    def main(self, argv: list[str], doc: str) -> int:
        """The command line of a perturbation tool: ``[--corpus DIR] [-v] [-k NAME,...]``."""
        import argparse

        ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
        ap.add_argument("--corpus", type=Path)
        ap.add_argument("-v", action="store_true")
        ap.add_argument("-k", default="", help="comma-separated family names")
        a = ap.parse_args(argv)
        names = [n for n in a.k.split(",") if n] or list(self.families)
        res = self.run(self.cases(a.corpus), names)
        total_same = total_loose = total = 0
        for n in names:
            rows = res[n]
            same = sum(1 for _, d in rows if not d)
            total_same += same
            total += len(rows)
            line = f"{n:18} {same:4}/{len(rows)}"
            if self.loose is not None:
                loose = sum(1 for _, d in rows if self.loose[1](d))
                total_loose += loose
                line += f"  {self.loose[0]} {loose:4}/{len(rows)}"
            print(line)
            if a.v:
                for case, d in rows:
                    if d:
                        print(f"    {case}: {'; '.join(d)}")
        tail = f" ({total_loose}/{total} {self.loose[2]})" if self.loose is not None else ""
        print(f"all {total_same}/{total} perturbed {self.noun} give the clean answer{tail}")
        return 0 if total_same == total else 1


SUITE: Suite[Signature] = Suite(
    families={**PERTURBATIONS, **SHORT_PASTES},
    signature=signature,
    compare=_compare,
    files=tuning_logs,
    case_id=lambda log: f"{log.parent.parent.name}/{log.parent.name}",
    noun="logs",
)
perturb = SUITE.perturb


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(SUITE.main(sys.argv[1:], __doc__ or ""))
