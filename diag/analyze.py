"""`diag analyze` engine: inputs -> records -> events -> timelines -> Analysis.

Inputs under 1 MiB are parsed line by line. Larger ones stream through the prefilter
(:mod:`diag.parse.prefilter`): blocks of serving lines are recognised by counting, the rest
gets one multi-literal pass in Rust that picks the lines that can matter (phase markers,
warnings and errors, tracebacks, stack dumps, rule needles), and each rank's last line and
first serving line are picked from the bulk; the result equals the line-by-line parse.

Then: year inference, rank attribution (always with a reason), config from the args
lines, framework, phase events from the catalogue, per-rank timelines, expected and
missing ranks, stragglers; stack dumps found in the text, their groups, and the rules.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from diag.errors import InputError
from diag.model import (
    Analysis,
    Event,
    PhaseInterval,
    RankId,
    RankTimeline,
    Record,
    phase_index,
)
from diag.parse import reader
from diag.parse.config import detect_config_line, normalise, parse_config_message
from diag.parse.reader import UTF16_BOMS, Source, iter_chunks, resolve_inputs
from diag.parse.records import REPEAT_KEEP, Draft, SourceParser, freeze, resolve_years
from diag.parse.text import decode
from diag.phases import load_catalogue
from diag.timeline import (
    RankStats,
    build_timelines,
    expected_ranks,
    missing_ranks,
    stragglers,
)

__all__ = ["PREFILTER_MIN_BYTES", "analyze", "analyze_parsed", "analyze_text"]

# Inputs at least this large stream through the prefilter; smaller ones are read whole.
PREFILTER_MIN_BYTES = 1 << 20

ProgressFn = Callable[[int, int], None]


def analyze(
    inputs: Sequence[str | Path],
    *,
    year: int | None = None,
    rules_dirs: Sequence[Path] = (),
    progress: ProgressFn | None = None,
    prefilter: bool | None = None,
) -> Analysis:
    """Analyse log files, folders, ``-`` (stdin), compressed files or bundles.

    ``prefilter`` forces (True) or forbids (False) the streaming prefilter; by default it is
    used for inputs of at least :data:`PREFILTER_MIN_BYTES`. Raises :class:`InputError` for
    a missing path, empty input, or input with no recognisable log line."""
    sources = resolve_inputs(inputs)
    return _analyze_sources(sources, year=year, rules_dirs=rules_dirs, progress=progress,
                            prefilter=prefilter)


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
    col = _Collected()
    col.drafts = list(parser.drafts)
    col.notes = list(notes)
    col.lines = lines
    col.undecodable = parser.undecodable
    srcs = [Source(name=n, open=lambda: io.BytesIO(b""), size=None, mtime=None) for n in names]
    return _finish(srcs, col, rules_dirs)


# ---------------------------------------------------------------------------


class _Collected:
    """What reading all sources gathered."""

    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self.notes: list[str] = []
        self.undecodable = 0
        self.nul_bytes = 0
        self.lines = 0


def _analyze_sources(
    sources: Sequence[Source],
    *,
    year: int | None,
    rules_dirs: Sequence[Path],
    progress: ProgressFn | None,
    prefilter: bool | None,
) -> Analysis:
    total = sum(s.size or 0 for s in sources)
    # a compressed source is taken as ten times its size (typical for logs)
    # ... and one of unknown size (a long stdin) as large
    expanded = sum(
        PREFILTER_MIN_BYTES if s.size is None else s.size * (10 if s.compressed else 1)
        for s in sources
    )
    use_pf = prefilter if prefilter is not None else expanded >= PREFILTER_MIN_BYTES
    col = _Collected()
    done_before = 0
    binary: list[str] = []
    for src in sources:
        if _looks_binary(src):
            binary.append(src.name)
            col.notes.append(f"{src.name}: skipped: binary data, not a log")
            done_before += src.size or 0
            if progress is not None:
                progress(done_before, total)
            continue
        sp = SourceParser(src.name)
        if use_pf:
            from diag.parse.prefilter import scan_source

            stats = scan_source(
                src,
                sp,
                col.notes,
                progress=progress,
                done_before=done_before,
                total=total,
                rule_dirs=rules_dirs,
            )
            col.lines += stats.lines
            col.undecodable += sp.undecodable
        else:
            _read_full(src, sp, col, progress, done_before, total)
        done_before += src.size or 0
        if sp.repeats:
            col.notes.append(
                f"{src.name}: {sp.repeats} lines repeating a kind of line already seen "
                f"{REPEAT_KEEP} times were counted, not parsed"
            )
        if sp.unknown_lines and sp.known_lines:
            first, last = sp.first_unknown, sp.last_unknown
            col.notes.append(
                f"{sp.unknown_lines} lines of {src.name} (lines {first}-{last}) "
                "matched no known log format"
            )
        note = resolve_years(sp.drafts, year=year, ref=src.mtime)
        if note:
            col.notes.append(f"{src.name}: {note}")
        col.drafts.extend(sp.drafts)
    if col.undecodable:
        col.notes.append(f"{col.undecodable} bytes of invalid UTF-8 replaced")
    if col.nul_bytes:
        col.notes.append(f"{col.nul_bytes} NUL bytes dropped")
    if binary and not col.drafts:
        raise InputError(f"{', '.join(binary)}: not a log (binary data)")
    if total == 0 and not col.drafts:
        raise InputError("input is empty")
    recognised = sum(
        1
        for d in col.drafts
        if d.p.grammar != "plain" or d.p.ts is not None or d.rank is not None or d.p.pid
    )
    if not col.drafts:
        raise InputError(f"{', '.join(s.name for s in sources)}: input is empty")
    if recognised == 0 and not _any_log_word(col.drafts):
        raise InputError(
            f"{', '.join(s.name for s in sources)}: not a log (no recognisable line)"
        )
    return _finish(sources, col, rules_dirs)


_CONTROL = frozenset(chr(c) for c in range(32)) - {"\t", "\n", "\r", "\x1b", "\x0c"}


def _looks_binary(src: Source) -> bool:
    """More than 10% of the first 64 KiB is control characters or invalid UTF-8."""
    try:
        with (src.sniff or src.open)() as stream:
            head = stream.read(1 << 16)
    except (OSError, EOFError, ValueError):
        return False  # the reader reports damage with a note
    if not head or head[:2] in UTF16_BOMS:
        return False
    text, bad = decode(head)
    odd = bad + sum(1 for c in text if c in _CONTROL)
    return odd * 10 > len(head)


# Lines that say "a process ran and stopped" even with no log format around them.
_LOG_LINE = re.compile(
    r"^(?:[\w.]+(?:Error|Exception|Interrupt|Exit)(?:: |$)|Killed$|Aborted(?: \(core dumped\))?$|"
    r"Segmentation fault|terminate called after throwing|Fatal Python error: |"
    r'File "[^"]+", line \d+,? in \S+$)'  # a traceback or faulthandler frame
)


def _any_log_word(drafts: Sequence[Draft]) -> bool:
    """Plain lines only: is any of them a log line all the same (an exception's last line,
    the shell's "Killed", a message of the phase catalogue)?"""
    cat = load_catalogue()
    for d in drafts[:20000]:
        msg = d.p.message.strip()
        if _LOG_LINE.match(msg) or cat.any_message.search(msg):
            return True
        if any(_LOG_LINE.match(c.strip()) for c in d.continuation[-3:]):
            return True
    return False


def _read_full(
    src: Source,
    sp: SourceParser,
    col: _Collected,
    progress: ProgressFn | None,
    done_before: int,
    total: int,
) -> None:
    lineno = 0
    for buf, lo, hi, consumed in iter_chunks(src, col.notes, chunk_bytes=reader.CHUNK_BYTES):
        chunk = buf[lo:hi]
        col.nul_bytes += chunk.count(b"\x00")
        text, bad = decode(chunk)
        col.undecodable += bad
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for i, line in enumerate(lines, start=lineno + 1):
            sp.feed(i, line)
        lineno += len(lines)
        col.lines += len(lines)
        if progress is not None:
            done = done_before + consumed
            progress(min(done, total) if total else done, total)  # total 0: size unknown


# ---------------------------------------------------------------------------
# attribution


_WORLD_RANK = re.compile(r"world_size=(\d+) rank=(\d+) local_rank=\d+")


def _detect_framework(drafts: Sequence[Draft]) -> str:
    """Votes: SGLang's line format and names, vLLM's process prefixes and names, and
    messages of the phase catalogue that only one of the two prints. vLLM-format lines
    count for vLLM, a little (SGLang logs carry some from the vLLM code it imports)."""
    cat = load_catalogue()
    own = [e for e in cat.entries if e.framework != "any" and e.where == "message"]
    sg = vl = 0
    for d in drafts:
        g = d.p.grammar
        msg = d.p.message
        if g == "sglang":
            sg += 3
        elif g == "vllm":
            vl += 1
        if d.p.process and d.p.process.startswith(
            ("VllmWorker", "Worker", "EngineCore", "APIServer", "RayWorker")
        ):
            vl += 3
        low = msg[:400].lower()
        if "sglang" in low or "server_args=" in low or "sgl_kernel" in low:
            sg += 2
        if "vllm" in low or "llm engine" in low or "enginecore" in low:
            vl += 1
        if cat.any_message.search(msg):
            for e in own:
                if e.could_match(msg) and e.regex.search(msg):
                    if e.framework == "sglang":
                        sg += 2
                    else:
                        vl += 2
                    break
        for c in d.continuation[:50]:
            if "/sglang/" in c:
                sg += 1
            elif "/vllm/" in c:
                vl += 1
    if sg == 0 and vl == 0:
        return "unknown"
    return "sglang" if sg >= vl else "vllm"


def _config(drafts: Sequence[Draft]) -> tuple[dict[str, object], str | None]:
    merged: dict[str, object] = {}
    version: str | None = None
    raw_all: dict[str, object] = {}
    for i, d in enumerate(drafts):
        msg = d.p.message
        if not detect_config_line(msg):
            continue
        text = msg
        if d.continuation:
            text = msg + " " + " ".join(c.strip() for c in d.continuation)
        raw, v = parse_config_message(text)
        if not raw and "LLM engine" not in msg:
            # a paste that hard-wrapped the args line: join the plain lines after it
            wrapped = [text]
            for nxt in drafts[i + 1 : i + 400]:
                if nxt.p.grammar != "plain" or nxt.line - d.line > 400:
                    break
                wrapped.append(nxt.raw)
            raw, v = parse_config_message("".join(wrapped))
        if v and not version:
            version = v
        for k, val in raw.items():
            raw_all.setdefault(k, val)
    if raw_all:
        merged = normalise(raw_all)
        merged["raw"] = raw_all
    return merged, version


_VERSION_RE = (
    re.compile(r"vLLM API server version (\d+\.\d+\.\d+\S*)"),
    re.compile(r"LLM engine \(v(\d+\.\d+[^)]*)\)"),
    re.compile(r"\bsglang[=:]{1,2}v?(\d+\.\d+\.\d+(?:\.post\d+)?)"),
)


def _version(drafts: Sequence[Draft], framework: str) -> str | None:
    for d in drafts:
        for rx in _VERSION_RE:
            m = rx.search(d.p.message)
            if m and (framework != "sglang" or "sglang" in rx.pattern):
                return m.group(1)
    return None


def _attribute(drafts: Sequence[Draft], framework: str, config: dict[str, object]) -> None:
    """Give rank-less lines a rank where the log says which one, always with the reason."""
    # 1. vLLM workers without rank in their prefix: the pid's own "rank=N" line. Pids
    #    are per source (one file per node: pids of two hosts may collide)
    pid_rank: dict[tuple[str, int], tuple[RankId, str]] = {}
    for d in drafts:
        if d.p.pid is None:
            continue
        m = _WORLD_RANK.search(d.p.message)
        if m and (d.rank is None or d.rank_reason != "tag"):
            reason = f"pid {d.p.pid} logged world_size={m.group(1)} rank={m.group(2)}"
            rank = RankId(node=d.p.host, tp=int(m.group(2)))
            pid_rank.setdefault((d.source, d.p.pid), (rank, reason))
    # ... and a process whose other lines name its rank (NCCL lines of a tagged worker)
    tagged_pids: dict[tuple[str, int], set[RankId]] = defaultdict(set)
    for d in drafts:
        if d.p.pid is not None and d.rank is not None and d.rank_reason == "tag":
            tagged_pids[(d.source, d.p.pid)].add(d.rank)
    for key, ranks in tagged_pids.items():
        if len(ranks) == 1 and key not in pid_rank:
            (rank,) = ranks
            pid_rank[key] = (rank, f"pid {key[1]} is {rank.label} (its other lines are tagged)")
    if pid_rank:
        for d in drafts:
            if d.rank is None and d.p.pid is not None and (d.source, d.p.pid) in pid_rank:
                d.rank, d.rank_reason = pid_rank[(d.source, d.p.pid)]
    tagged = any(d.rank is not None and d.rank_reason == "tag" for d in drafts)
    procs = {d.p.process for d in drafts if d.p.process}
    # 2. vLLM V0 multiprocessing workers: rank by pid order (with the driver as TP0)
    v0 = framework == "vllm" and any(
        p in ("VllmWorkerProcess", "RayWorkerWrapper", "RayWorkerVllm") for p in procs
    )
    v1 = any(
        p.startswith(("EngineCore", "APIServer", "VllmWorker", "Worker"))
        and p != "VllmWorkerProcess"
        for p in procs
    )
    if v0 and not v1:
        worker_pids = sorted(
            {d.p.pid for d in drafts if d.p.process == "VllmWorkerProcess" and d.p.pid}
        )
        ranked = {pid for _, pid in pid_rank}
        for i, pid in enumerate(worker_pids, start=1):
            if pid in ranked:
                continue
            reason = (
                "VllmWorkerProcess pid order (vLLM V0 starts workers in rank order; "
                "the driver is TP0)"
            )
            for d in drafts:
                if d.p.pid == pid and d.rank is None:
                    d.rank, d.rank_reason = RankId(tp=i), reason
        for d in drafts:
            if d.rank is None and d.p.process is None and d.p.grammar == "vllm":
                d.rank = RankId(tp=0)
                d.rank_reason = "vLLM V0 driver (lines with no process prefix) is TP0"
        return
    # 3. single-rank layouts: every line belongs to the one rank
    world = 1
    for k in ("tp", "pp", "dp"):
        v = config.get(k)
        if isinstance(v, int) and v > 0:
            world *= v
    if config and world == 1 and not tagged and not pid_rank:
        reason = "single-rank layout (tp=pp=dp=1): every line belongs to TP0"
        for d in drafts:
            if d.rank is None and d.p.grammar not in ("uvicorn",) and d.p.process not in (
                "APIServer",
            ):
                d.rank, d.rank_reason = RankId(tp=0), reason
        return
    for d in drafts:
        if d.rank is None and d.p.grammar == "progress":
            d.rank_reason = "unattributed: progress bar has no rank prefix"


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


def _finish(sources: Sequence[Source], col: _Collected, rules_dirs: Sequence[Path]) -> Analysis:
    drafts = col.drafts
    framework = _detect_framework(drafts)
    config, version = _config(drafts)
    _note_layout(config, col.notes)
    version = version or _version(drafts, framework)
    _attribute(drafts, framework, config)
    records = [freeze(d) for d in drafts]
    cat = load_catalogue()
    events: list[Event] = []
    for r in records:
        ev = cat.match(r)
        if ev is not None:
            events.append(ev)
    notes = list(col.notes)
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
    log_end = _log_end(records, stats)
    ranks, global_phases = build_timelines(events, stats, log_end)
    seen = [t.rank for t in ranks]
    expected = expected_ranks(config, seen, framework)
    missing = missing_ranks(expected, seen)
    analysis = Analysis(
        sources=tuple(s.name for s in sources),
        framework=framework,
        version=version,
        config=config,
        ranks=ranks,
        expected_ranks=expected,
        missing_ranks=missing,
        stragglers=stragglers(ranks, server_up=_server_up(ranks, global_phases)),
        log_end=log_end,
        records=col.lines,
        events=tuple(events),
        global_phases=global_phases,
        notes=tuple(notes),
        undecodable_bytes=col.undecodable,
    )
    return _post(analysis, records, rules_dirs)


def _server_up(ranks: Sequence[RankTimeline], glob: Sequence[PhaseInterval]) -> bool:
    phases = [t.last_phase for t in ranks] + [p.phase for p in glob]
    return any(phase_index(p) >= phase_index("listening") for p in phases)


def _rank_stats(records: Sequence[Record]) -> dict[RankId, RankStats]:
    """Per rank: first and last timestamp and record count (in the prefilter path, the
    bulk lines between a rank's first and last line are not counted)."""
    first: dict[RankId, dt.datetime] = {}
    last: dict[RankId, dt.datetime] = {}
    count: dict[RankId, int] = defaultdict(int)
    inferred: dict[RankId, bool] = {}
    for r in records:
        if r.rank is None:
            continue
        count[r.rank] += 1
        inferred[r.rank] = inferred.get(r.rank, True) and r.rank_reason != "tag"
        if r.ts is not None:
            if r.rank not in first or r.ts < first[r.rank]:
                first[r.rank] = r.ts
            if r.rank not in last or r.ts > last[r.rank]:
                last[r.rank] = r.ts
    return {
        rank: RankStats(
            first_ts=first.get(rank),
            last_ts=last.get(rank),
            lines=count[rank],
            inferred=inferred.get(rank, False),
        )
        for rank in count
    }


def _log_end(records: Iterable[Record], stats: dict[RankId, RankStats]) -> dt.datetime | None:
    best: dt.datetime | None = None
    for r in records:
        if r.ts is not None and (best is None or r.ts > best):
            best = r.ts
    for st in stats.values():
        if st.last_ts is not None and (best is None or st.last_ts > best):
            best = st.last_ts
    return best


def _post(analysis: Analysis, records: list[Record], rules_dirs: Sequence[Path]) -> Analysis:
    """Stacks found in the text, their groups, then the rules engine."""
    import dataclasses

    from diag.stacks.merge import group_stacks
    from diag.stacks.textdump import extract_stack_processes

    processes = extract_stack_processes(records)
    analysis = dataclasses.replace(
        analysis,
        stack_processes=tuple(processes),
        stack_groups=group_stacks(processes) if processes else (),
    )
    from diag.rules import apply_rules

    return apply_rules(analysis, records, extra_dirs=rules_dirs)
