"""Run rules over an analysis: pattern rules over records, check rules over aggregates.

Flow: each record's text (message plus continuation lines) is tested line by line
against every pattern rule whose needles it contains, within the rule's level, phase and
framework limits (regexes run with a timeout). Hits group per rule into one finding:
ranks collapsed, a few evidence lines and the total. Check rules then run in the order of
:data:`diag.rules.checks.CHECKS`, seeing the findings so far. Finally cascades are tied to
the root they follow, and findings are sorted by severity, then time.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import functools
import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

import regex

from diag.limits import RULE_REGEX_BUDGET_S, RULE_REGEX_TOTAL_S
from diag.model import SEVERITIES, Analysis, Event, Evidence, Finding, RankId, Record
from diag.rules.checks import CHECKS, CheckContext, CheckOutcome, Hit
from diag.rules.loader import REGEX_TIMEOUT_S, Rule

__all__ = [
    "MAX_EVIDENCE",
    "Scanned",
    "evaluate",
    "hits_for_line",
    "outcome_finding",
    "render_message",
    "scan",
    "sort_findings",
]

MAX_EVIDENCE = 5
_MAX_TEXT = 400
_MAX_LINE = 1 << 16
_SEARCHED_MAX = 1 << 16  # (match spec, line) pairs remembered (then all forgotten at once)
_MISS = object()
_MAX_TIMEOUTS = 3  # a pattern that times out this often is dropped for the run
_FIELD = regex.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _PhaseAt:
    """The phase in force at a (source, line): the latest event at or before it."""

    def __init__(self, events: Sequence[Event]) -> None:
        per_source: dict[str, list[tuple[int, str]]] = {}
        for ev in events:
            per_source.setdefault(ev.source, []).append((ev.line, ev.phase))
        self._lines: dict[str, list[int]] = {}
        self._phases: dict[str, list[str]] = {}
        for source, items in per_source.items():
            items.sort()
            self._lines[source] = [line for line, _ in items]
            self._phases[source] = [phase for _, phase in items]

    def __call__(self, source: str, line: int) -> str | None:
        lines = self._lines.get(source)
        if not lines:
            return None
        i = bisect.bisect_right(lines, line) - 1
        return self._phases[source][i] if i >= 0 else None


class _NeedleFinder:
    """Which needles occur in a (lowercased) text: one substring test per needle (a big
    alternation regex is slower than this in both `re` and `regex`)."""

    # texts from which one compiled pass first picks those that may hold a needle
    BATCH = 2000

    def __init__(self, needles: Sequence[str]) -> None:
        self._needles = tuple(sorted(set(needles)))

    def present(self, low: str) -> list[str]:
        return [n for n in self._needles if n in low]

    def maybe(self, texts: Sequence[str]) -> Any:
        """Per text, whether it holds a needle (lowercased; see :meth:`found`); None (test
        each) where :meth:`found` gives None."""
        found = self.found(texts)
        return None if found is None else [bool(f) for f in found]

    def found(self, texts: Sequence[str]) -> list[tuple[str, ...]] | None:
        """Per text, the needles its lowercased text holds, in the order :meth:`present`
        gives them (the same needles: each text's lowercased UTF-8 is searched for the
        needles' bytes, which finds a needle exactly where the text holds it), from one
        pass of diag's compiled scanner over all the texts lowercased; None (test each)
        for fewer than :data:`BATCH` texts, without the scanner, or for a needle that is
        empty or holds a newline."""
        needles = self._needles
        if len(texts) < self.BATCH or not needles or any(
            not n or "\n" in n for n in needles
        ):
            return None
        from diag.parse import native

        nat = native.load()
        if nat is None:
            return None
        import numpy as np

        pats = [n.encode("utf-8", "surrogatepass") for n in needles]
        try:
            ac = native.Automaton(nat, pats, [0] * len(pats), caseless=False, special=False)
        except MemoryError:  # pragma: no cover - each text is tested instead
            return None
        lows = list(map(str.lower, texts))
        blob = "\n".join(lows).encode("utf-8", "surrogatepass")
        lines, which = ac.hits(blob)
        # each text's lines (its newlines, plus one), counted by C-level calls
        per = np.fromiter(map(str.count, lows, itertools.repeat("\n")), dtype=np.int64,
                          count=len(lows)) + 1
        owner = np.repeat(np.arange(len(lows), dtype=np.int64), per)
        # (text, needle) pairs, each once, by text then needle (``needles`` is sorted)
        pairs = np.unique(owner[lines] * len(needles) + which.astype(np.int64))
        out: list[tuple[str, ...]] = [()] * len(texts)
        if not len(pairs):
            return out
        # each text's run of pairs, read from two plain lists (a numpy split per text
        # costs more than the pairs themselves: most texts hold one needle or two)
        texts_at = (pairs // len(needles)).tolist()
        which_at = (pairs % len(needles)).tolist()
        start = 0
        for i in range(1, len(texts_at) + 1):
            if i == len(texts_at) or texts_at[i] != texts_at[start]:
                out[texts_at[start]] = tuple(needles[j] for j in which_at[start:i])
                start = i
        return out


def _last_frame(lines: Sequence[str]) -> str:
    """The innermost traceback frame among continuation lines ("File ..., line N, in f"),
    else the last line that is not a caret/tilde marker."""
    stripped = [c.strip() for c in lines if c.strip()]
    frames = [c for c in stripped if c.startswith('File "')]
    if frames:
        return frames[-1]
    plain = [c for c in stripped if c.strip("^~ ")]
    return plain[-1] if plain else ""


# Error-level rules on INFO/DEBUG lines: the line must read as a failure (an exception name,
# a failure word, or a memory size measured below zero: "Available KV cache memory: -3.86
# GiB"). Advice ("If you are running out of memory, consider ...") and import-time
# discovery ("Found nccl from library ...") at INFO mention a failure without reporting one.
_QUIET = frozenset({"INFO", "DEBUG"})
_ADVICE_PRONE = frozenset({"cuda.oom", "dist.init_hang"})
_ERROR_SHAPE = regex.compile(
    r"\b[A-Z]\w*(?:Error|Exception|Exit|Failure)\b"
    r"|(?i:\b(?:error|errors|failed|fails|failure|fatal|abort(?:ed|ing)?|killed|died|dead|crash(?:ed)?"
    r"|timed out|refused|unable|cannot|could not|not enough)\b)"
    r"|:\s*-\d+(?:\.\d+)?\s?[KMGT]i?B\b"
)

_CODE = regex.compile(r'^\s*(?:raise\b|File "|return\b)')


def _is_code(line: str) -> bool:
    """A traceback's frame or source line (`File "..."`, `raise ...`): code that names
    errors, not a report of one."""
    return _CODE.match(line) is not None


def _logger_name(rec: Record) -> str:
    name = (rec.logger_file or "").split(":", 1)[0]
    return name.rsplit("/", 1)[-1]


def _no_exc_info(records: Sequence[Record], at: int, i: int) -> bool:
    """The line is a message logged with ``logger.exception()`` outside an ``except``
    block: Python's logging then prints ``NoneType: None`` as its traceback (vLLM V0's
    client.py logs the engine's death so, "RuntimeError('Engine process (pid 76) died.')"),
    so the exception it names was never raised there."""
    rec = records[at]
    nxt = rec.continuation[i : i + 1] if i < len(rec.continuation) else []
    if not nxt:
        later = (
            r for r in records[at + 1 : at + 4] if r.source == rec.source and r.message.strip()
        )
        following = next(later, None)
        nxt = [following.message] if following is not None else []
    return bool(nxt) and nxt[0].strip() == "NoneType: None"


@functools.lru_cache(maxsize=1)
def _handled_messages() -> regex.Pattern[str] | None:
    """The messages SGLang's and vLLM's request handlers log with ``logger.exception``
    after catching what one request raised (diag/data/handled_errors.tsv, generated from
    the sources' message table by tools/gen_handled_errors.py)."""
    try:
        text = resources.files("diag.data").joinpath("handled_errors.tsv").read_text("utf-8")
    except OSError:
        return None
    pats = [ln.split("\t", 1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")]
    return regex.compile("(?:" + "|".join(pats) + ")") if pats else None


# CPython's PyErr_WriteUnraisable (Python/errors.c): an exception raised where nothing can
# catch it (a __del__, a weakref callback, a generator closed at exit) is printed as
# "Exception ignored in: <obj>" and its traceback, and the program goes on
_UNRAISABLE = regex.compile(r"^Exception ignored (?:in\b|on calling\b|while\b)")


def handled_traceback(records: Sequence[Record], at: int) -> bool:
    """The exception line ends a traceback that was handled, not one that ended the run:
    a request handler logged it after catching it ("Error in request: ..." from SGLang's
    serving_base.handle_request, vLLM's "Error in chat completion stream generator."),
    so that request was answered with an error and the server went on; or the interpreter
    printed it as unraisable ("Exception ignored in: ...") and went on. The head is the
    record the line belongs to, or the last record before it that is no traceback line (a
    traceback whose lines lost their indentation, or that a container stamp made records
    of their own); the walk stops at a line of another process (a process prefix's pid)."""
    handled = _handled_messages()

    def is_handled(message: str) -> bool:
        head = message.strip()
        return _UNRAISABLE.match(head) is not None or (
            handled is not None and handled.match(head) is not None
        )

    rec = records[at]
    if is_handled(rec.message):
        return True  # the exception line is inside the handler's own record
    for j in range(at - 1, max(-1, at - 120), -1):
        r = records[j]
        if r.source != rec.source:
            return False
        if rec.pid is not None and r.pid is not None and r.pid != rec.pid:
            return False  # another process's lines head no traceback of this one
        if not _traceback_material(r.message):
            return is_handled(r.message)
    return False


_TB_MATERIAL = regex.compile(
    r'^(?:File "|Traceback \(most recent call|During handling of the above|The above exception|'
    r"[\^~ ]*$|-{2,}$|(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b)"
)


def _traceback_material(message: str) -> bool:
    """A line of a traceback (a frame, its source line, carets, its header, an exception
    line), also where a paste took its indentation away."""
    return message[:1] in (" ", "\t") or _TB_MATERIAL.match(message.strip()) is not None


def hits_for_line(rule: Rule, line: str) -> list[Any]:
    """Matches of a pattern rule on one line of text, ignoring record limits (used by
    the example runner, so examples test exactly what the engine tests: a line whose
    message, its log prefix parsed off, is a traceback's frame or source line is code,
    which the engine never matches)."""
    if rule.match is None:
        return []
    from diag.parse.grammars import parse_line

    if _is_code(line) or _is_code(parse_line(line).message):
        return []
    low = line.lower()
    if not any(n in low for n in rule.needles):
        return []
    m = rule.match.search(line)
    return [] if m is None else [m]


def _scan(
    rules: Sequence[Rule],
    records: Sequence[Record],
    framework: str,
    phase_at: _PhaseAt,
    notes: list[str],
) -> dict[str, list[Hit]]:
    active = [r for r in rules if r.match is not None and r.applies_to(framework)]
    hits: dict[str, list[Hit]] = {r.id: [] for r in active}
    timeouts: dict[str, int] = {}
    spent: dict[str, float] = {}  # regex seconds per rule over the whole input
    total_spent = [0.0]  # ... and of all rules together
    total_noted: list[bool] = []
    # needle -> positions of the rules that declare it; one pass of literal tests per
    # record picks the rules worth running (most records contain no needle at all)
    by_needle: dict[str, list[int]] = {}
    for pos, rule in enumerate(active):
        for n in rule.needles:
            by_needle.setdefault(n, []).append(pos)
    finder = _NeedleFinder(tuple(by_needle))
    texts = [rec.text for rec in records]
    found = finder.found(texts)
    # (speed) (match spec, line) -> its match: a line recurs (every rank logs the same
    # message; a repeated warning), and is searched once per rule (a line's search that
    # timed out is not remembered)
    searched: dict[tuple[int, str], Any] = {}
    for at, rec in enumerate(records):
        text = texts[at]
        present: Sequence[str]
        # (speed) whether ``present`` holds every needle of each of the record's lines:
        # the lines are then tested for those needles only (see ``per_rule`` below)
        exact = found is not None and len(text) <= _MAX_LINE
        if found is not None and exact:
            present = found[at]
        else:
            if len(text) > _MAX_LINE:  # a multi-MB "line" is a data dump, not a message
                text = "\n".join(part[:_MAX_LINE] for part in text.split("\n"))
            present = finder.present(text.lower())
        if not present:
            continue
        wanted = sorted({pos for n in present for pos in by_needle[n]})
        level = (rec.level or "").upper()
        phase: str | None = None
        phase_known = False
        # (speed) the record's lines, each lowercased and its code test, made once for all
        # the rules wanted (not once per rule and needle), when the first one gets there
        lines: list[str] = []
        lows: list[str] = []
        code: list[bool | None] = []
        # (speed) a record of several lines: per rule (its position), the lines that hold
        # one of its needles, ascending (each line tested once for the record's needles,
        # not once per rule for each of the rule's needles)
        per_rule: dict[int, list[int]] | None = None
        for pos in wanted:
            rule = active[pos]
            spec = rule.match
            assert spec is not None
            if spec.levels and level not in spec.levels:
                continue
            if spec.loggers and _logger_name(rec) not in spec.loggers:
                continue
            if (
                spec.frameworks
                and framework in ("sglang", "vllm")
                and framework not in spec.frameworks
            ):
                continue
            if spec.phases or spec.not_phases:
                if not phase_known:
                    phase = phase_at(rec.source, rec.line)
                    phase_known = True
                if spec.phases and phase not in spec.phases:
                    continue
                if phase in spec.not_phases:
                    continue
            if timeouts.get(rule.id, 0) >= _MAX_TIMEOUTS:
                continue
            if spent.get(rule.id, 0.0) > RULE_REGEX_BUDGET_S:
                continue  # (its total regex time is spent: noted once below)
            if total_spent[0] > RULE_REGEX_TOTAL_S:
                if not total_noted:
                    total_noted.append(True)
                    notes.append(
                        f"rule patterns used their {RULE_REGEX_TOTAL_S:.0f} s budget in all "
                        f"(at {rec.source}:{rec.line}); later lines were not matched"
                    )
                break
            if not lines:
                # the record's own lines (a message is one line: a newline inside one, from
                # a caller's record, would shift every line number after it)
                lines = [part[:_MAX_LINE] for part in (rec.message, *rec.continuation)]
                lows = [line.lower() for line in lines]
                code = [None] * len(lines)
                if exact and len(lines) > 1:
                    per_rule = {}
                    for i, low in enumerate(lows):
                        for n in present:
                            if n in low:
                                for q in by_needle[n]:
                                    got = per_rule.setdefault(q, [])
                                    if not got or got[-1] != i:
                                        got.append(i)
            if per_rule is not None:
                at_lines: Iterable[int] = per_rule.get(pos, ())
            else:
                at_lines = range(len(lines))
            for i in at_lines:
                line = lines[i]
                if per_rule is None and len(lines) > 1 and not any(
                    n in lows[i] for n in rule.needles
                ):
                    continue
                is_code = code[i]
                if is_code is None:
                    is_code = code[i] = _is_code(line)
                if is_code:
                    continue
                key = (id(spec), line)
                m = searched.get(key, _MISS)
                if m is _MISS:
                    began = time.perf_counter()
                    try:
                        m = spec.search(line, lows[i])
                    except TimeoutError:
                        m = None
                        timed_out = True
                    else:
                        timed_out = False
                    took = time.perf_counter() - began
                    total_spent[0] += took
                    used = spent.get(rule.id, 0.0) + took
                    spent[rule.id] = used
                    if used > RULE_REGEX_BUDGET_S:
                        notes.append(
                            f"rule {rule.id}: its patterns used their "
                            f"{RULE_REGEX_BUDGET_S:.0f} s budget (at {rec.source}:"
                            f"{rec.line + i}); rule skipped for the rest"
                        )
                        break
                    if timed_out:
                        timeouts[rule.id] = timeouts.get(rule.id, 0) + 1
                        if timeouts[rule.id] == 1:
                            # (a timeout depends on the machine's speed and load: the line
                            # it cost is named, never lost silently)
                            notes.append(
                                f"rule {rule.id}: a pattern timed out on {rec.source}:"
                                f"{rec.line + i} ({REGEX_TIMEOUT_S * 1000:.0f} ms); that line "
                                "was not matched by it"
                            )
                        if timeouts[rule.id] == _MAX_TIMEOUTS:
                            notes.append(
                                f"rule {rule.id}: pattern timed out {_MAX_TIMEOUTS} times "
                                f"(last at {rec.source}:{rec.line + i}); rule skipped for the "
                                "rest"
                            )
                        break
                    if len(searched) >= _SEARCHED_MAX:
                        searched.clear()
                    searched[key] = m
                if m is None:
                    continue
                if (
                    rule.finding_id in _ADVICE_PRONE
                    and level in _QUIET
                    and not _ERROR_SHAPE.search(line)
                ):
                    continue  # an INFO/DEBUG line that mentions the failure: advice, not one
                if rule.finding_id == "python.exception" and (
                    _no_exc_info(records, at, i) or handled_traceback(records, at)
                ):
                    continue
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                for gi, value in enumerate(m.groups(), start=1):
                    if value is not None:
                        groups.setdefault(f"g{gi}", value)
                groups.setdefault("match", m.group(0))
                if i == 0 and rec.continuation:
                    tail = _last_frame(rec.continuation)
                    if tail:
                        groups.setdefault("tail", tail[:200])
                hits[rule.id].append(
                    Hit(
                        source=rec.source,
                        line=rec.line + i,
                        text=line.strip(),
                        rank=rec.rank,
                        ts=rec.ts,
                        groups=groups,
                        level=level or None,
                    )
                )
    return hits


def render_message(template: str, values: Mapping[str, object]) -> str:
    """Fill ``{name}`` fields from ``values``; a field with no value becomes empty."""

    def sub(m: Any) -> str:
        value = values.get(m.group(1))
        return "" if value is None else str(value)

    return str(_FIELD.sub(sub, template)).strip().rstrip(":").strip()


def _rank_labels(ranks: Sequence[RankId | None]) -> tuple[str, ...]:
    known = sorted({r for r in ranks if r is not None}, key=lambda r: r.sort_key)
    return tuple(r.label for r in known)


def _pick_evidence(hits: Sequence[Hit]) -> tuple[Evidence, ...]:
    """A few lines that prove it: one line per rank first (at most 3 with the same
    text), then further distinct lines, in log order. Where more lines matched than are
    shown, the last one of a distinct text is kept too: a library reports a failure at
    each layer it passes, and its last report (the outcome) follows its first (the cause)."""
    ordered = sorted(hits, key=lambda h: (h.source, h.line))
    if len(ordered) > MAX_EVIDENCE:
        last = ordered[-1]
        if all(h.text[:120] != last.text[:120] for h in ordered[:-1]):
            rest = _pick_evidence_of(ordered[:-1], MAX_EVIDENCE - 1)
            return (*rest, last.evidence())
    return _pick_evidence_of(ordered, MAX_EVIDENCE)


def _pick_evidence_of(ordered: Sequence[Hit], most: int) -> tuple[Evidence, ...]:
    chosen: list[Hit] = []
    seen_ranks: set[RankId | None] = set()
    per_text: dict[str, int] = {}
    for h in ordered:
        if len(chosen) >= most:
            break
        key = h.text[:120]
        if h.rank not in seen_ranks and per_text.get(key, 0) < 3:
            chosen.append(h)
            seen_ranks.add(h.rank)
            per_text[key] = per_text.get(key, 0) + 1
    for h in ordered:
        if len(chosen) >= most:
            break
        if h not in chosen and h.text[:120] not in per_text:
            chosen.append(h)
            per_text[h.text[:120]] = 1
    chosen.sort(key=lambda h: (h.source, h.line))
    return tuple(h.evidence() for h in chosen)


def _dedupe(hits: Sequence[Hit]) -> list[Hit]:
    seen: set[tuple[str, int, str]] = set()
    out: list[Hit] = []
    for h in hits:
        key = (h.source, h.line, h.text)
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out


def _finding(rule: Rule, message: str, hits: Sequence[Hit], ranks: Sequence[str]) -> Finding:
    return Finding(
        id=rule.finding_id,
        severity=rule.severity,
        title=rule.title,
        message=message,
        role="root",
        ranks=tuple(ranks),
        evidence=_pick_evidence(hits),
        evidence_total=len(hits),
        summary=rule.summary,
        why=rule.why,
        remedy=rule.remedy,
        caveat=rule.caveat,
        references=rule.references,
    )


def _pattern_finding(rule: Rule, hits: Sequence[Hit]) -> Finding:
    ranks = _rank_labels([h.rank for h in hits])
    special = {"count", "ranks", "line"}
    message = ""
    for template in rule.message:
        wanted = set(_FIELD.findall(template)) - special
        complete = [h for h in hits if wanted <= set(h.groups)]
        if complete:
            first = complete[0]
            values: dict[str, object] = dict(first.groups)
            values["count"] = len(hits)
            values["ranks"] = ", ".join(ranks) if ranks else "no rank"
            values["line"] = first.text[:_MAX_TEXT]
            message = render_message(template, values)
            break
    if not message:
        message = hits[0].text[:_MAX_TEXT]
    if len(hits) > 1:
        where = f" on {len(ranks)} ranks" if len(ranks) > 1 else ""
        message += f" ({len(hits)} lines{where})"
    return _finding(rule, message, hits, ranks)


def outcome_finding(rule: Rule, outcome: CheckOutcome) -> Finding:
    hits = _dedupe(outcome.hits)
    ranks = outcome.ranks if outcome.ranks else _rank_labels([h.rank for h in hits])
    finding = _finding(rule, outcome.message, hits, ranks)
    if len(hits) <= MAX_EVIDENCE:
        # a check chose these few lines (a wait's first and last repeat): all of them are
        # its evidence, the same text twice included
        ordered = sorted(hits, key=lambda h: (h.source, h.line))
        finding = dataclasses.replace(finding, evidence=tuple(h.evidence() for h in ordered))
    if outcome.severity is not None:
        finding = dataclasses.replace(finding, severity=outcome.severity)
    return finding


def sort_findings(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """Severity first (error, warning, info), then the time of the first evidence."""
    far = dt.datetime.max

    def key(f: Finding) -> tuple[int, int, dt.datetime, str]:
        times = [e.ts.replace(tzinfo=None) for e in f.evidence if e.ts is not None]
        first = min(times) if times else far
        return (SEVERITIES.index(f.severity), 0 if times else 1, first, f.id)

    return tuple(sorted(findings, key=key))


def _tie_cascades(findings: list[Finding], origins: Mapping[str, Sequence[Rule]]) -> list[Finding]:
    """Tie each cascade to the root it follows.

    A finding of cascade rules follows the first finding of its ``cascade_of`` that fired
    (a root in its own right before another cascade); with none it stands as a root,
    keeping its caveat. A root rule with ``cascade_after`` becomes a cascade when one of
    those findings came earlier in the log. No two findings end up following each other.
    """
    by_id = {f.id: f for f in findings}

    def cascade_kind(fid: str) -> bool:
        rules = origins.get(fid, ())
        return bool(rules) and all(r.role == "cascade" for r in rules)

    def first(f: Finding) -> tuple[str, int, dt.datetime | None]:
        ev = min(f.evidence, key=lambda e: (e.source, e.line))
        return (ev.source, ev.line, ev.ts)

    def earlier(a: Finding, b: Finding) -> bool:
        if not a.evidence or not b.evidence:
            return False
        (sa, la, ta), (sb, lb, tb) = first(a), first(b)
        if sa == sb:
            return la < lb
        if ta is None or tb is None:
            return False
        return ta.replace(tzinfo=None) < tb.replace(tzinfo=None)

    follows: dict[str, str] = {}
    # 1. roots that came after an error they are the consequence of
    for f in findings:
        if cascade_kind(f.id):
            continue
        after = [c for r in origins.get(f.id, ()) for c in r.cascade_after]
        before = [c for c in after if c in by_id and c != f.id and earlier(by_id[c], f)]
        if before:
            follows[f.id] = ([c for c in before if not cascade_kind(c)] or before)[0]
    # 2. cascade rules' findings, never following one that follows them
    for f in findings:
        if not cascade_kind(f.id):
            continue
        named = [c for r in origins[f.id] for c in r.cascade_of if c in by_id and c != f.id]
        named = [c for c in named if follows.get(c) != f.id]
        solid = [c for c in named if not cascade_kind(c) and c not in follows]
        if solid or named:
            follows[f.id] = (solid or named)[0]
    out: list[Finding] = []
    for f in findings:
        root = follows.get(f.id)
        if root is not None and follows.get(root) != f.id:
            f = dataclasses.replace(f, role="cascade", cascade_of=root)
        out.append(f)
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Scanned:
    """The pattern rules' pass over the records (:func:`scan`): the rules, hits by rule
    id, notes."""

    rules: tuple[Rule, ...]
    hits: Mapping[str, list[Hit]]
    notes: tuple[str, ...]


def scan(analysis: Analysis, records: Sequence[Record], rules: Sequence[Rule]) -> Scanned:
    """The pattern rules' pass over the records; of the analysis it reads the framework
    and the events only (not the stacks: it may run before they are found)."""
    notes: list[str] = []
    hits = _scan(rules, records, analysis.framework, _PhaseAt(analysis.events), notes)
    return Scanned(tuple(rules), hits, tuple(notes))


def evaluate(
    analysis: Analysis,
    records: Sequence[Record],
    rules: Sequence[Rule],
    scanned: Scanned | None = None,
) -> tuple[tuple[Finding, ...], tuple[str, ...], tuple[str, ...]]:
    """Findings (sorted), the finding ids the rules checked for (each once), and notes
    for the analysis. ``scanned``: :func:`scan` of the same analysis (its framework and
    events), records and rules, done already (its rules stand for ``rules``)."""
    if scanned is None:
        scanned = scan(analysis, records, rules)
    rules = scanned.rules
    notes = list(scanned.notes)
    framework = analysis.framework
    hits = scanned.hits
    findings: dict[str, Finding] = {}
    origins: dict[str, list[Rule]] = {}
    checked: list[str] = []

    def add(rule: Rule, finding: Finding) -> None:
        origins.setdefault(finding.id, []).append(rule)
        prior = findings.get(finding.id)
        if prior is None:
            findings[finding.id] = finding
            return
        # two rules, one finding id: keep one finding with both rules' evidence
        merged_ranks = tuple(dict.fromkeys(prior.ranks + finding.ranks))
        findings[finding.id] = dataclasses.replace(
            prior,
            ranks=merged_ranks,
            evidence=(
                prior.evidence
                + tuple(
                    e for e in finding.evidence
                    if all((e.source, e.line) != (p.source, p.line) for p in prior.evidence)
                )
            )[: MAX_EVIDENCE + 1],
            evidence_total=prior.evidence_total + finding.evidence_total,
            severity=min(prior.severity, finding.severity, key=SEVERITIES.index),
        )

    for rule in rules:
        if rule.check is None and rule.match is not None:
            if not rule.applies_to(framework):
                continue
            checked.append(rule.finding_id)
            rule_hits = _dedupe(hits.get(rule.id, []))
            if rule_hits:
                add(rule, _pattern_finding(rule, rule_hits))

    order = list(CHECKS)
    check_rules = sorted(
        (r for r in rules if r.check in CHECKS and r.applies_to(framework)),
        key=lambda r: order.index(r.check or ""),
    )
    for rule in check_rules:
        checked.append(rule.finding_id)
        ctx = CheckContext(
            analysis=analysis,
            records=records,
            hits=tuple(_dedupe(hits.get(rule.id, []))),
            fired=dict(findings),
            params=rule.params,
        )
        outcome = CHECKS[rule.check or ""](ctx)
        if outcome is not None:
            add(rule, outcome_finding(rule, outcome))

    exc = findings.get("python.exception")
    if exc is not None:
        findings["python.exception"] = _with_announcers(exc, records)
    findings = _with_logged_messages(findings, records)
    tied = _tie_cascades(list(findings.values()), origins)
    return sort_findings(tied), tuple(dict.fromkeys(checked)), tuple(notes)


# an exception's line as a traceback ends it ("torch._dynamo.exc.Unsupported: <message>",
# "ValueError: <message>"): a dotted class path or an error-like class name, then its text
_EXC_MESSAGE = regex.compile(
    r"^(?:(?:[a-z_]\w*\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault))"
    r": (?P<msg>\S.{19,})$"
)
# the text a framework puts before an exception's message when it logs it ahead of the
# re-raise ("Piecewise CUDA Graph failed with error: ", "... hit an exception: ")
_LOGGED_BEFORE = regex.compile(r"(?i)(?:error|exception|fail\w*)\W{0,3}$")
_LOGGED_WINDOW = 400  # records above an exception line searched for its logged message


def _with_logged_messages(
    findings: Mapping[str, Finding], records: Sequence[Record]
) -> dict[str, Finding]:
    """Each error finding whose evidence is an exception's line, with the line above it
    where the framework logged the same message before re-raising it (SGLang's
    piecewise CUDA-graph runner, sglang/srt/compilation/piecewise_context_manager.py:
    ``logger.error("Piecewise CUDA Graph failed with error: %s\\n%s", e, ...)`` then
    ``raise``): the error's first report, often with its explanation below it."""
    wanted: dict[tuple[str, int], str] = {}
    for f in findings.values():
        if f.severity != "error":
            continue
        for e in f.evidence:
            m = _EXC_MESSAGE.match(e.text.strip())
            if m is not None:
                wanted[(e.source, e.line)] = m.group("msg").strip()
    if not wanted:
        return dict(findings)
    logged: dict[tuple[str, int], Record] = {}
    recent: dict[str, list[Record]] = {}
    for rec in records:
        window = recent.setdefault(rec.source, [])
        msg = wanted.get((rec.source, rec.line))
        if msg is not None:
            for prev in reversed(window):
                text = prev.message.strip()
                at = text.find(msg)
                if (
                    at > 0
                    and _EXC_MESSAGE.match(text) is None
                    and _LOGGED_BEFORE.search(text[:at].rstrip(" :")) is not None
                ):
                    logged[(rec.source, rec.line)] = prev
                    break
        window.append(rec)
        if len(window) > 2 * _LOGGED_WINDOW:
            del window[:_LOGGED_WINDOW]
    if not logged:
        return dict(findings)
    out: dict[str, Finding] = {}
    for fid, f in findings.items():
        have = {(e.source, e.line) for e in f.evidence}
        extra = []
        for e in f.evidence:
            first = logged.get((e.source, e.line))
            if first is not None and (first.source, first.line) not in have:
                have.add((first.source, first.line))
                extra.append(
                    Evidence(
                        first.source, first.line, first.message.strip()[:500],
                        first.rank.label if first.rank is not None else None, first.ts,
                    )
                )
        if f.severity == "error" and extra:
            evidence = tuple(sorted((*f.evidence, *extra), key=lambda e: (e.source, e.line)))
            f = dataclasses.replace(
                f,
                evidence=evidence[: MAX_EVIDENCE + 1 + len(extra)],
                evidence_total=f.evidence_total + len(extra),
            )
        out[fid] = f
    return out


_ANNOUNCE_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL", "EXCEPTION"})
# threading.excepthook's header above an uncaught exception's traceback (Lib/threading.py,
# Python 3.8+: "Exception in thread NAME:")
_THREAD_EXCEPTION = regex.compile(r"^Exception in thread \S.*:$")
# the frameworks' own announcers, whatever the level prefix the paste kept: SGLang 0.1-0.3's
# logger.error(f"Exception in ModelTpServer:\n{traceback}") (tp_worker.py; also
# ControllerSingle, ControllerMulti, TokenizerManager, run_tp_server) and 0.4+'s
# "Scheduler hit an exception: {traceback}"
_ANNOUNCER_TEXT = regex.compile(
    r"^(?:Exception in [A-Za-z_]\w{2,40}|[A-Z]\w{2,40} hit an exception):$"
)


def _with_announcers(finding: Finding, records: Sequence[Record]) -> Finding:
    """python.exception's evidence with the line that announced each traceback: the
    ERROR/CRITICAL record that ends right above it (``logger.exception(msg)`` prints its
    message, then the traceback: vLLM's "EngineCore failed to start.", SGLang's "Scheduler
    hit an exception", a wrapper's own "Error in ... setup"), which says what failed."""
    starts = frozenset((e.source, e.line) for e in finding.evidence)
    if not starts:
        return finding
    extra: list[Evidence] = []
    have = set(starts)  # the evidence so far: an announcer is added once
    prev: Record | None = None
    for rec in records:
        if (rec.source, rec.line) in starts and prev is not None and prev.source == rec.source:
            end = prev.line + len(prev.continuation)
            if (
                end == rec.line - 1
                and (
                    (prev.level or "").upper() in _ANNOUNCE_LEVELS
                    or _THREAD_EXCEPTION.match(prev.message.strip()) is not None
                    or _ANNOUNCER_TEXT.match(prev.message.strip()) is not None
                )
                and "Traceback (most recent call last)" in (rec.raw or rec.message)
                and (prev.source, prev.line) not in have
            ):
                have.add((prev.source, prev.line))
                extra.append(
                    Evidence(
                        prev.source, prev.line, prev.message.strip()[:500],
                        prev.rank.label if prev.rank is not None else None, prev.ts,
                    )
                )
        prev = rec
    if not extra:
        return finding
    evidence = tuple(sorted((*finding.evidence, *extra), key=lambda e: (e.source, e.line)))
    return dataclasses.replace(
        finding,
        evidence=evidence[: MAX_EVIDENCE + len(extra)],
        evidence_total=finding.evidence_total + len(extra),
    )
