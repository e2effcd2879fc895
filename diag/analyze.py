"""`diag analyze` engine: inputs -> records -> events -> timelines -> Analysis.

Reading is one call (:func:`diag.parse.pipeline.read_sources`): inputs under 1 MiB are
parsed line by line, larger ones stream through the prefilter, which hands only the lines
that can matter to the parser (the analyser passes it the literals: the phase catalogue's
and the rules' needles); the serving figures are columns read on both paths alike.

Then: year inference, rank attribution (always with a reason), config from the args
lines, framework, phase events from the catalogue, per-rank timelines, expected and
missing ranks, stragglers; stack dumps found in the text, their groups, and the rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import io
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from diag.aside import Aside
from diag.clocks import align_events, refuse_cross_host, several_folders, shift_times
from diag.errors import InputError
from diag.frames import frame_events
from diag.model import (
    Analysis,
    Event,
    PhaseInterval,
    RankId,
    RankTimeline,
    Record,
    StackGroup,
    StackProcess,
    phase_index,
)
from diag.nodes import node_view, with_folder_nodes
from diag.parse.attribute import any_log_word as _any_log_word
from diag.parse.attribute import attribute as _attribute
from diag.parse.attribute import config_of as _config
from diag.parse.attribute import detect_framework as _detect_framework
from diag.parse.attribute import version_of as _version
from diag.parse.pipeline import PREFILTER_MIN_BYTES, Collected, read_sources
from diag.parse.reader import Source, resolve_inputs
from diag.parse.records import Draft, SourceParser, freeze
from diag.phases import load_catalogue
from diag.raise_phases import raise_events
from diag.rules.specdec import RecordList
from diag.timeline import (
    RankStats,
    build_timelines,
    expected_ranks,
    missing_ranks,
    reached_phase,
    stragglers,
)

__all__ = ["PREFILTER_MIN_BYTES", "analyze", "analyze_parsed", "analyze_text"]

ProgressFn = Callable[[int, int], None]


def analyze(
    inputs: Sequence[str | Path],
    *,
    year: int | None = None,
    rules_dirs: Sequence[Path] = (),
    progress: ProgressFn | None = None,
    prefilter: bool | None = None,
    clocks: Mapping[str, tuple[float, float]] | None = None,
) -> Analysis:
    """Analyse log files, folders, ``-`` (stdin), compressed files or bundles.

    ``clocks``: node -> (offset, error bound) of its clock as measured when the logs were
    collected (a job bundle's fan-out); they stand in for the offsets read from the logs.

    ``prefilter`` forces (True) or forbids (False) the streaming prefilter; by default it is
    used for inputs of at least :data:`PREFILTER_MIN_BYTES`. Raises :class:`InputError` for
    a missing path, empty input, or input with no recognisable log line."""
    sources = resolve_inputs(inputs)
    return _analyze_sources(sources, year=year, rules_dirs=rules_dirs, progress=progress,
                            prefilter=prefilter, clocks=clocks)


def analyze_text(text: str, name: str = "<text>", *, year: int | None = None,
                 prefilter: bool | None = False) -> Analysis:
    """Analyse a string (for tests and callers that hold the log in memory)."""

    data = text.encode("utf-8", errors="surrogateescape")
    src = Source(name=name, open=lambda: io.BytesIO(data), size=len(data), mtime=None)
    return _analyze_sources([src], year=year, rules_dirs=(), progress=None, prefilter=prefilter)


def analyze_parsed(
    names: Sequence[str],
    parser: SourceParser,
    *,
    lines: int,
    notes: Sequence[str] = (),
    rules_dirs: Sequence[Path] = (),
) -> Analysis:
    """Analyse what a :class:`SourceParser` has been fed so far (``diag watch``: the
    lines are fed as they arrive, and this runs on the records so far, without reading
    the input again). Safe to call repeatedly as more lines are fed."""
    col = Collected()
    col.drafts = list(parser.drafts)
    col.notes = list(notes)
    col.lines = lines
    col.undecodable = parser.undecodable
    srcs = [Source(name=n, open=lambda: io.BytesIO(b""), size=None, mtime=None) for n in names]
    return _finish(srcs, col, rules_dirs)


# ---------------------------------------------------------------------------


def _dump_lines(drafts: Sequence[Draft]) -> bool:
    """A text of no log line may still be a stack dump (eu-stack's ``TID n:`` threads of
    ``#0  0x.. symbol`` frames, a bare gdb backtrace): three lines that can start or carry
    one (also inside one line that lost its newlines) make it worth reading as such."""
    from diag.stacks.textdump import dump_lines_in

    return sum(dump_lines_in(d.p.message) for d in drafts[:2000]) >= 3


@contextlib.contextmanager
def _gc_off() -> Iterator[None]:
    """(speed) The analysis builds tens of thousands of long-lived objects (records, their
    fields, events) and no garbage cycles to speak of: the cyclic collector's passes over
    them (a full one each time the long-lived objects grew by a quarter) are wasted. It is
    off for the analysis and back on after it."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@_gc_off()
def _analyze_sources(
    sources: Sequence[Source],
    *,
    year: int | None,
    rules_dirs: Sequence[Path],
    progress: ProgressFn | None,
    prefilter: bool | None,
    clocks: Mapping[str, tuple[float, float]] | None = None,
) -> Analysis:
    col = read_sources(
        sources,
        year=year,
        literals=lambda: _literals(tuple(Path(d) for d in rules_dirs)),
        progress=progress,
        prefilter=prefilter,
        warm=_warm,
    )
    recognised = any(  # (speed: stops at the first, not a count of 80,000 drafts)
        d.p.grammar != "plain" or d.p.ts is not None or d.rank is not None or d.p.pid
        for d in col.drafts
    )
    if recognised or _any_log_word(col.drafts) or _dump_lines(col.drafts):
        return _frame_list(_finish(sources, col, rules_dirs, clocks), col.drafts)
    # No line has a log's shape (time, level, rank, pid) and none is a known log word. A
    # paste can still hold a message the rules know (a library's error without its logger's
    # prefix), or be the messages of a log without their prefix (a viewer's message column,
    # `print` output): it is refused only when the analysis finds nothing in it and its
    # lines are not messages of the sources (diag.parse.known_messages, read only here).
    analysis = _frame_list(_finish(sources, col, rules_dirs, clocks), col.drafts)
    note = "no line has a log's shape (time, level, rank or pid): read as plain text"
    if not (analysis.findings or analysis.stack_processes
            or analysis.last_phase not in (None, "launch")):
        from diag.parse.known_messages import message_paste

        paste = message_paste(_plain_lines(col.drafts))
        if paste is None:
            raise InputError(
                f"{', '.join(s.name for s in sources)}: not a log (no recognisable line)"
            )
        note = (
            "no line has a log's shape (time, level, rank or pid), but "
            f"{paste[0]} of {paste[1]} are messages of the sources (without their logger's "
            "prefix): read as a paste of log messages"
        )
    return dataclasses.replace(analysis, notes=(*analysis.notes, note))


def _plain_lines(drafts: Sequence[Draft]) -> Iterator[str]:
    """The text's lines, in order (a record's message, then its continuation lines)."""
    for d in drafts:
        yield d.p.message
        yield from d.continuation


# the grammars of lines no logger wrote (a wrapper's stamp or prefix may still be on them)
_NOT_LOGGED = frozenset({"plain", "pyspy", "faulthandler", "traceback", "progress"})


def _frame_list(analysis: Analysis, drafts: Sequence[Draft]) -> Analysis:
    """A text with no line of a log's shape and no dump in it may still be a frame list a
    reporter wrote by hand (:mod:`diag.stacks.loose`): one process of its frames, noted.
    It replaces what the dump readers made of such a text only where they found no wait
    (a tree's connectors read as a py-spy frame's name) and the list does."""
    if (
        len(drafts) > 400
        or any(p.wait_site for p in analysis.stack_processes)
        or any(d.p.grammar not in _NOT_LOGGED for d in drafts)
    ):
        return analysis
    from diag.stacks.loose import frame_list_process

    lines = [
        (d.line + i, ln) for d in drafts for i, ln in enumerate((d.p.message, *d.continuation))
    ]
    proc = frame_list_process(lines, source=drafts[0].source if drafts else None)
    if proc is None or (analysis.stack_processes and proc.wait_site is None):
        return analysis
    from diag.stacks.merge import group_stacks

    note = (f"no dump format: {len(proc.threads[0].frames)} frames read from a hand-written "
            "frame list (innermost first; a call tree's order reversed)")
    return dataclasses.replace(
        analysis, stack_processes=(proc,), stack_groups=group_stacks([proc]),
        notes=(*analysis.notes, note),
    )


def _warm(drafts: Sequence[Draft]) -> None:
    """(speed) Done by the parsing thread while it waits for the read-ahead thread: the
    finish's imports (the stacks' grouping and classifier too, which the collective-wait
    check of every vLLM or SGLang log imports: done before the stacks' child is forked,
    neither process imports them after the read), and what the finish will ask the phase
    catalogue about these drafts' messages (the framework vote, the message-scoped match:
    both remembered per message), so that less is left for after the read."""
    from diag.rules import apply_rules  # noqa: F401
    from diag.stacks.merge import group_stacks  # noqa: F401 (the stacks' classifier, too)
    from diag.stacks.textdump import extract_stack_processes  # noqa: F401

    cat = load_catalogue()
    for d in drafts:
        cat.prepare(d.p.message, d.p.logger_file)


# Checks whose findings come from the serving columns, not from lines: their needles do
# not make serving lines candidates.
_SERVING_CHECKS = frozenset({"specdec_acceptance", "specdec_summary"})


def _literals(rules_dirs: tuple[Path, ...]) -> tuple[str, ...]:
    """The prefilter's candidate literals: the phase catalogue's and the rules' needles."""
    from diag.parse.prefilter import BULK_ENTRIES, candidate_literals
    from diag.rules import load_rules

    needles: set[str] = set()
    for r in load_rules(rules_dirs):
        if r.check in _SERVING_CHECKS:
            continue
        gates = r.match.gates if r.match is not None and r.check is None else ()
        if gates and all(g for g in gates):
            # a pattern rule whose every pattern has gate literals: those are finer than
            # its needles ("kv cache" is in every vLLM throughput line; its patterns' gates
            # are not)
            needles.update(lit for g in gates if g for lit in g)
        else:
            needles.update(r.needles)
    phase: set[str] = set()
    for e in load_catalogue().entries:
        if e.id in BULK_ENTRIES:
            continue
        if not e.literals:
            raise ValueError(f"phase entry {e.id}: regex has no required literal")
        phase |= set(e.literals)
    return candidate_literals(sorted(needles), phase)


# ---------------------------------------------------------------------------


def _note_layout(config: dict[str, object], notes: list[str]) -> None:
    """(hardening) A parallel layout too large to list its ranks is said, not enumerated."""
    from diag.limits import MAX_EXPECTED_RANKS

    odd = config.get("implausible")
    if isinstance(odd, dict) and odd:
        sizes = ", ".join(f"{k} {v}" for k, v in odd.items())
        notes.append(f"implausible parallel layout in the args line ({sizes}): ignored")
        return
    world = 1
    for key in ("tp", "pp", "dp"):
        v = config.get(key)
        world *= v if isinstance(v, int) and v > 0 else 1
    if world > MAX_EXPECTED_RANKS:
        notes.append(
            f"the args line implies {world} ranks: expected ranks are listed up to "
            f"{MAX_EXPECTED_RANKS} only"
        )


# vLLM's messages that its engine is gone: V1 vllm/v1/engine/exceptions.py (EngineDeadError:
# "EngineCore encountered an issue"), V0 engine/multiprocessing/client.py ("Engine process
# (pid N) died", MQEngineDeadError), entrypoints/launcher.py ("MQLLMEngine is already dead"),
# engine/async_llm_engine.py (AsyncEngineDeadError "Background loop has errored already")
_ENGINE_DEAD = re.compile(
    r"EngineDeadError|EngineCore encountered an issue|Engine process \(pid \d+\) died"
    r"|MQLLMEngine is already dead|Background loop has errored already"
)
_HTTP_5XX = re.compile(r'"POST /[^"]*" 5\d\d\b')


def _requests_after_engine_death(events: list[Event], records: Sequence[Record]) -> list[Event]:
    """A generation request answered 5xx after the log said the engine is dead was refused
    by the HTTP server alone (the engine never ran it): it proves listening, not serving."""
    dead: dict[str, int] = {}
    for r in records:
        if r.source not in dead and _ENGINE_DEAD.search(r.text[:4000]):
            dead[r.source] = r.line
    if not dead:
        return events
    out = []
    for e in events:
        at = dead.get(e.source)
        if at is not None and e.line > at and e.phase == "serving" and _HTTP_5XX.search(e.message):
            e = replace(e, phase="listening", fields={**e.fields, "refused": "engine dead"})
        out.append(e)
    return out


# SGLang's server warm-up (srt/entrypoints/http_server.py _execute_server_warmup, srt/server.py
# _wait_and_warmup in 0.2.15-0.3.6): once the HTTP server is up it sends one request of its
# own and, when that fails, logs "Initialization failed. warmup error: <traceback>" and kills
# its process tree before any client is let in.
_WARMUP_FAILED = re.compile(r"Initialization failed\. warmup error")
_ACCESS_PATTERNS = frozenset({"any.http_request", "any.http_post", "any.http_post_combined"})


def _failed_warmup_request(events: list[Event], records: Sequence[Record]) -> list[Event]:
    """The request the HTTP layer logged just before SGLang's failed warm-up is the
    warm-up's own (its access line answered 5xx, the handler traceback of the HTTP
    process): it proves the warm-up ran, not that the server served. The events right
    before the warm-up error, back to the first that is neither, become ``warmup``; an
    engine line between (a prefill batch, a rank's traceback) stops the walk."""
    failed: dict[str, int] = {}
    for r in records:
        if r.source not in failed and _WARMUP_FAILED.search(r.text[:4000]):
            failed[r.source] = r.line
    if not failed:
        return events
    out = list(events)
    for source, at in failed.items():
        idx = [i for i, e in enumerate(out) if e.source == source and e.line < at]
        for i in reversed(idx):
            e = out[i]
            if e.phase != "serving" or e.rank is not None:
                break
            if not ((e.pattern in _ACCESS_PATTERNS and _HTTP_5XX.search(e.message))
                    or e.pattern.startswith("frames.")):
                break
            # the access line still proves the HTTP server answered (LABELS.md: any access
            # line proves listening); the frames of the warm-up's batch prove the warm-up
            phase = "warmup" if e.pattern.startswith("frames.") else "listening"
            out[i] = replace(e, phase=phase, fields={**e.fields, "request": "warm-up"})
    return out


def _finish(
    sources: Sequence[Source],
    col: Collected,
    rules_dirs: Sequence[Path],
    clocks: Mapping[str, tuple[float, float]] | None = None,
) -> Analysis:
    drafts = col.drafts
    framework = _detect_framework(drafts)
    config, version = _config(drafts)
    _note_layout(config, col.notes)
    version = version or _version(drafts, framework)
    _attribute(drafts, framework, config)
    # the serving figures of the whole input travel with the records (to the spec checks)
    # logs of several nodes, one folder each: a rank's node is its folder (diag.nodes)
    with_folder_nodes(drafts, [s.name for s in sources])
    records = RecordList((freeze(d) for d in drafts), col.serving)
    # (speed) the stacks found in the text need the records only: on a large input they
    # are worked out in a forked child (diag.aside) while this process goes on
    stacks = Aside(functools.partial(_stack_view, records),
                   fork=len(records) >= ASIDE_MIN_RECORDS)
    try:
        return _events_on(sources, col, rules_dirs, clocks, drafts, records, stacks,
                          framework=framework, config=config, version=version)
    finally:
        stacks.close()


def _events_on(
    sources: Sequence[Source],
    col: Collected,
    rules_dirs: Sequence[Path],
    clocks: Mapping[str, tuple[float, float]] | None,
    drafts: Sequence[Draft],
    records: RecordList,
    stacks: Aside[_StackView],
    *,
    framework: str,
    config: dict[str, object],
    version: str | None,
) -> Analysis:
    """:func:`_finish` after the records: events, timelines, stacks and the rules."""
    cat = load_catalogue()
    events: list[Event] = []
    for r in records:
        ev = cat.match(r)
        if ev is not None:
            events.append(ev)
    events = _requests_after_engine_death(events, records)
    in_method: set[tuple[str, int]] = set()
    frames = frame_events(records, in_method)
    if in_method:
        # a traceback inside a start-up RPC (diag.frames._METHOD) is no crash while serving
        events = [
            e for e in events
            if not (e.pattern == "any.serving_traceback" and (e.source, e.line) in in_method)
        ]
    # the exception lines whose message a start-up function raises (diag.raise_phases)
    raised = raise_events(records, framework)
    if frames or raised:
        order = {s: i for i, s in enumerate(dict.fromkeys(r.source for r in records))}
        events = sorted(
            events + frames + raised, key=lambda e: (order.get(e.source, 0), e.line)
        )
    events = _failed_warmup_request(events, records)
    notes = list(col.notes)
    # several nodes: each node's clock put on one reference clock (diag.clocks)
    clock = align_events(events, folders=several_folders([r.source for r in events]),
                         known=clocks)
    if clock is not None:
        notes += clock.notes
        if clock.shifted:
            records = RecordList(shift_times(records, clock), col.serving)
            events = shift_times(events, clock)
            stacks.close()  # the stacks are read from the shifted records
            stacks = Aside(functools.partial(_stack_view, records), fork=False)
    if not events and records:
        # The server ran (it logged) but no line marks a phase: it got as far as launch.
        first = records[0]
        events.append(
            Event(
                source=first.source,
                line=first.line,
                ts=first.ts,
                rank=None,
                phase="launch",
                kind="mark",
                pattern="fallback.logged",
                message=first.message[:500],
                fields={"reason": "no phase marker in the log; the process had started"},
            )
        )
        notes.append("no line marks a startup phase: last phase taken as launch")
    stats = _rank_stats(records)
    log_start, log_end = _log_bounds(records, stats)
    ranks, global_phases = build_timelines(events, stats, log_end)
    seen = [t.rank for t in ranks]
    expected = expected_ranks(config, seen, framework)
    missing = missing_ranks(expected, seen)
    behind, refused = refuse_cross_host(
        stragglers(ranks, server_up=_server_up(ranks, global_phases)), ranks, clock
    )
    notes += refused
    # several nodes: which log is which node's, and the expected nodes with no log
    nodes = node_view(events, config)
    if nodes is not None:
        notes = [*(n for n in nodes.notes if nodes.missing and "have no log" in n), *notes,
                 *(n for n in nodes.notes if not (nodes.missing and "have no log" in n))]
    reached = _stage_reached(drafts, events, notes) or reached_phase(events)
    analysis = Analysis(
        sources=tuple(s.name for s in sources),
        framework=framework,
        version=version,
        config=config,
        ranks=ranks,
        expected_ranks=expected,
        missing_ranks=missing,
        stragglers=behind,
        log_end=log_end,
        records=col.lines,
        events=tuple(events),
        global_phases=global_phases,
        notes=tuple(notes),
        undecodable_bytes=col.undecodable,
        reached=reached,
        log_start=log_start,
    )
    return _post(analysis, records, rules_dirs, stacks)


def _stage_reached(
    drafts: Sequence[Draft], events: Sequence[Event], notes: list[str]
) -> str | None:
    """Several engines in one log (vLLM-Omni's ``[Stage-N]`` tags): the phase the engine
    whose error ends the run reached, not the furthest phase of any engine (another stage
    loading its model proves nothing for the one that failed). None when the log holds
    one engine, or no stage logged an error."""
    if not any(d.p.stage is not None for d in drafts[:20000]):
        return None
    stage_at: dict[tuple[str, int], int] = {}
    failing: int | None = None
    for d in drafts:
        st = d.p.stage
        if st is None:
            continue
        for i in range(len(d.continuation) + 1):
            stage_at[(d.source, d.line + i)] = st
        if (d.p.level or "").upper() in ("ERROR", "CRITICAL") or d.in_traceback:
            failing = st
    if failing is None or len(set(stage_at.values())) < 2:
        return None
    mine = [e for e in events if stage_at.get((e.source, e.line)) == failing]
    reached = reached_phase(mine) or "launch"
    stages = ", ".join(map(str, sorted(set(stage_at.values()))))
    notes.append(
        f"several engine stages log here ({stages}): the last phase is that of stage "
        f"{failing}, whose error ends the run"
    )
    return reached


def _server_up(ranks: Sequence[RankTimeline], glob: Sequence[PhaseInterval]) -> bool:
    phases = [t.last_phase for t in ranks] + [p.phase for p in glob]
    return any(phase_index(p) >= phase_index("listening") for p in phases)


def _rank_stats(records: Sequence[Record]) -> dict[RankId, RankStats]:
    """Per rank: first and last timestamp and record count (in the prefilter path, the
    bulk lines between a rank's first and last line are not counted)."""
    # (speed) each record's rank hashed once, to group the records (a RankId's hash is
    # computed afresh at every dict look-up: one per record and statistic was 0.05 s on
    # 40,000 records)
    by_rank: dict[RankId, list[Record]] = {}
    for r in records:
        rank = r.rank
        if rank is None:
            continue
        mine = by_rank.get(rank)
        if mine is None:
            by_rank[rank] = [r]
        else:
            mine.append(r)
    out: dict[RankId, RankStats] = {}
    for rank, mine in by_rank.items():
        first: dt.datetime | None = None
        last: dt.datetime | None = None
        inferred = True
        for r in mine:
            inferred = inferred and r.rank_reason != "tag"
            ts = r.ts
            if ts is not None:
                if first is None or ts < first:
                    first = ts
                if last is None or ts > last:
                    last = ts
        out[rank] = RankStats(first_ts=first, last_ts=last, lines=len(mine), inferred=inferred)
    return out


def _log_bounds(
    records: Iterable[Record], stats: dict[RankId, RankStats]
) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The log's first and last time stamp (any line's, not only the timeline's)."""
    first: dt.datetime | None = None
    best: dt.datetime | None = None
    for r in records:
        if r.ts is not None:
            if best is None or r.ts > best:
                best = r.ts
            if first is None or r.ts < first:
                first = r.ts
    for st in stats.values():
        if st.last_ts is not None and (best is None or st.last_ts > best):
            best = st.last_ts
        if st.first_ts is not None and (first is None or st.first_ts < first):
            first = st.first_ts
    return first, best


_StackView = tuple[tuple[StackProcess, ...], tuple[StackGroup, ...]]

# (speed) records from which the stack extractor runs in a forked child (about 18 us a
# record on a large log's records; a fork costs a few ms)
ASIDE_MIN_RECORDS = 4000


def _stack_view(records: Sequence[Record]) -> _StackView:
    """The stacks found in the text (processes and their groups)."""
    from diag.stacks.textdump import extract_stack_processes

    processes = extract_stack_processes(records, tracebacks=True)
    if not processes:  # (speed: the stack classifier's import compiles ~120 regexes)
        return (), ()
    from diag.stacks.merge import group_stacks

    return tuple(processes), group_stacks(processes)


def _post(
    analysis: Analysis,
    records: list[Record],
    rules_dirs: Sequence[Path],
    stacks: Aside[_StackView] | None = None,
) -> Analysis:
    """Stacks found in the text, their groups, then the rules engine (whose line pass,
    which needs no stacks, runs first: meanwhile a forked child may be finding them)."""
    from diag.rules import apply_rules, scan_rules

    scanned = scan_rules(analysis, records, extra_dirs=rules_dirs)
    if stacks is None:
        stacks = Aside(functools.partial(_stack_view, records), fork=False)
    processes, groups = stacks.result()
    analysis = dataclasses.replace(analysis, stack_processes=processes, stack_groups=groups)
    return apply_rules(analysis, records, extra_dirs=rules_dirs, scanned=scanned)
