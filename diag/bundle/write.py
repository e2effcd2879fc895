"""Writing a bundle: redacted on the way in, written atomically.

Layout of the ``.tar.gz`` (``manifest.json`` first, so a reader checks as it streams):

- ``manifest.json`` format, schema version, diag version, created, host, command line,
  per-member size and sha256, redaction counts per kind, one entry per log (source name,
  lines kept / total, whether it was cut), notes;
- ``report.md`` and ``analysis.json`` when there is an analysis;
- ``snapshot.json`` and ``stacks/<name>`` (raw py-spy output) when a snapshot was taken;
- ``env.json`` (see :mod:`diag.bundle.env`);
- ``logs/<name>`` each log, and ``logs/<name>.index.json`` beside an excerpt.

Logs: a log that fits the per-log share of the cap (and, by default, is at most
``WHOLE_LOG_BYTES``) is kept whole. A larger one is excerpted: lines are taken in order of
priority until its share of the cap is spent — every evidence line with
``CONTEXT_LINES`` around it, the head, the tail, the last ``RANK_TAIL_LINES`` of each
rank (so each rank's silence reads as in the original), the first and last line of each
rank's phases, every phase event; with ``full_logs``, then everything else from the top. The
excerpt keeps each line byte for byte (bar redaction) and its index lists the original
line numbers as ``[first, count]`` segments, so ``diag analyze BUNDLE`` sees every kept
line at its original number.

Every text goes through one :class:`~diag.redact.Redactor` before it is held anywhere;
members are built in memory (each capped) and the archive is written to a temporary file
in the destination folder, fsynced, then renamed: an interrupted run leaves no bundle
(and no temporary file, unless the process is killed outright).
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import datetime as dt
import gzip
import hashlib
import io
import itertools
import json
import lzma
import os
import re
import socket
import tarfile
import tempfile
import zlib
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from diag import __version__
from diag.bundle.env import collect_env
from diag.bundle.read import FORMAT, MANIFEST, SCHEMA_VERSION
from diag.errors import BundleError, DiagError, InputError
from diag.model import Analysis, Snapshot
from diag.parse.coords import RANK_KEY_PORTABLE
from diag.redact import Redactor
from diag.runner import Runner, SubprocessRunner

__all__ = [
    "CONTEXT_LINES",
    "DEFAULT_LOG_CAP",
    "FULL_LOG_CAP",
    "HEAD_LINES",
    "RANK_TAIL_LINES",
    "TAIL_LINES",
    "WHOLE_LOG_BYTES",
    "BundleInfo",
    "LogMember",
    "write_bundle",
]

_MiB = 1024 * 1024
DEFAULT_LOG_CAP = 24 * _MiB  # all logs together, default mode
FULL_LOG_CAP = 256 * _MiB  # all logs together, --full-logs
WHOLE_LOG_BYTES = 4 * _MiB  # default mode keeps a log whole up to this size
HEAD_LINES = 1000
TAIL_LINES = 2000
RANK_TAIL_LINES = 200  # the last lines of each rank, kept in an excerpt
CONTEXT_LINES = 10


@dataclass(frozen=True, slots=True)
class LogMember:
    member: str
    source: str
    lines_total: int
    lines_kept: int
    bytes_kept: int
    mode: str  # whole | excerpt
    cut: bool  # lines were left out
    index: str | None = None


@dataclass(frozen=True, slots=True)
class BundleInfo:
    path: Path
    size: int
    members: tuple[str, ...]
    redactions: Mapping[str, int]
    logs: tuple[LogMember, ...]
    snapshot: bool
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# logs


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


def _compression(path: Path) -> str | None:
    """The compression of a file, by its first bytes (as `diag analyze` decides)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; pass the log files in it") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def _open_log(path: Path) -> IO[bytes]:
    kind = _compression(path)
    if kind == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    if kind == "zstd":
        try:
            import zstandard  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise InputError(
                f"{path}: zstd-compressed, and the zstandard package is not installed",
                help_text="pip install zstandard, or decompress it first: zstd -d FILE",
            ) from None
        return zstandard.ZstdDecompressor().stream_reader(path.open("rb"))  # type: ignore[no-any-return]
    return path.open("rb")


def _line_chunks(
    path: Path, notes: list[str] | None = None, block: int = 8 << 20
) -> Iterator[list[bytes]]:
    """Lines of a (possibly compressed) log, without their newlines, a few MiB at a time
    (split on ``\\n`` only: a tqdm ``\\r`` stays inside its line). A damaged stream
    ends early (the same place each pass) with a note, keeping what was read."""
    rest = b""
    pieces: list[bytes] = []
    size = 0
    try:
        with _open_log(path) as handle:
            # read1: a damaged stream still gives every byte before the damage
            read = getattr(handle, "read1", handle.read)
            while data := read(block):
                pieces.append(data)
                size += len(data)
                if size >= block:
                    parts = (rest + b"".join(pieces)).split(b"\n")
                    pieces, size = [], 0
                    rest = parts.pop()
                    if parts:
                        yield parts
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        if notes is not None:
            notes.append(f"{path.name}: read stopped early ({exc}); the lines before are kept")
    parts = (rest + b"".join(pieces)).split(b"\n")
    rest = parts.pop()
    if parts:
        yield parts
    if rest:
        yield [rest]


def _plain_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".bz2", ".xz", ".zst", ".zstd"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _matches(source: str, path: Path) -> bool:
    if source in (str(path), path.name):
        return True
    return Path(source).name in (path.name, _plain_name(path))


def _wanted_lines(
    path: Path, analysis: Analysis | None
) -> tuple[list[int], list[int], list[int]]:
    """(evidence lines, rank phase bounds, event lines) of this log in the analysis."""
    evidence: list[int] = []
    bounds: list[int] = []
    events: list[int] = []
    if analysis is None:
        return evidence, bounds, events
    for finding in analysis.findings:
        evidence += [e.line for e in finding.evidence if _matches(e.source, path)]
    for timeline in analysis.ranks:
        for phase in timeline.phases:
            if _matches(phase.source, path) or not phase.source:
                bounds += [phase.first_line, phase.last_line]
    for phase in analysis.global_phases:
        if _matches(phase.source, path) or not phase.source:
            bounds += [phase.first_line, phase.last_line]
    events = [e.line for e in analysis.events if _matches(e.source, path)]
    for process in analysis.stack_processes:
        if process.source and process.line and _matches(process.source, path):
            evidence.append(process.line)
    return evidence, bounds, events


def _select(
    lengths: array[int],
    budget: int,
    *,
    whole_ok: bool,
    wanted: tuple[list[int], list[int], list[int]],
    full: bool,
    rank_tails: Sequence[int] = (),
) -> bytearray:
    """Which lines (0-based flags) to keep, by priority, within the byte budget."""
    n = len(lengths)
    total = sum(lengths)
    keep = bytearray(n)
    if whole_ok and total <= budget:
        keep[:] = b"\x01" * n
        return keep
    used = 0

    def take(indices: Iterable[int]) -> bool:
        nonlocal used
        for i in indices:
            if 0 <= i < n and not keep[i]:
                if used + lengths[i] > budget:
                    return False
                keep[i] = 1
                used += lengths[i]
        return True

    evidence, bounds, events = wanted
    around: list[int] = []
    for line in sorted(set(evidence)):
        around += range(line - 1 - CONTEXT_LINES, line + CONTEXT_LINES)
    take(around)
    take(range(min(n, HEAD_LINES)))
    take(range(n - 1, max(-1, n - 1 - TAIL_LINES), -1))
    take(rank_tails)  # the last lines of each rank, latest first
    take([line - 1 for line in sorted(set(bounds))])
    take([line - 1 for line in sorted(set(events))])
    if full:
        take(range(n))
    return keep


def _learn_hosts(path: Path, redactor: Redactor) -> None:
    """(redact_hosts) Learn every host a log names before any member is written, so each
    host has one mask from its first mention in any member."""
    for chunk in _line_chunks(path):
        for line in itertools.compress(chunk, redactor.hints(chunk)):
            redactor.learn_hosts(line.decode("utf-8", "surrogateescape"))


# What tags a line with its rank or process (SGLang ``TP3]``, ``DP0 ATTN_CP1 TP1 EP1]``;
# vLLM ``(Worker_TP0 pid=1)``, ``(VllmWorker rank=1 pid=2)``; torch ``[rank2]:``): the one
# rank-key form of diag.parse.coords, in the syntax polars' regex engine reads.
_RANK_TAG = RANK_KEY_PORTABLE


@dataclass(frozen=True, slots=True)
class _Scan:
    lengths: array[int]  # of every line, newline included
    rank_tails: list[int]  # 0-based lines: the last RANK_TAIL_LINES of each rank


def _scan(path: Path, notes: list[str]) -> _Scan:
    """First pass over a log. Rank tails are only looked for in a log too big to keep
    whole (one vectorised pass per chunk)."""
    import polars as pl

    lengths: array[int] = array("Q")
    big = RANK_TAIL_LINES > 0 and (
        _compression(path) is not None or path.stat().st_size > WHOLE_LOG_BYTES
    )
    tails: dict[str, list[int]] = {}
    for chunk in _line_chunks(path, notes):
        base = len(lengths)
        lengths.extend(len(line) + 1 for line in chunk)
        if not big:
            continue
        text = pl.Series([line.decode("utf-8", "replace") for line in chunk], dtype=pl.Utf8)
        last = (
            pl.DataFrame({"tag": text.str.extract(_RANK_TAG, 1), "i": range(len(chunk))})
            .drop_nulls()
            .group_by("tag")
            .tail(RANK_TAIL_LINES)
        )
        for tag, index in zip(last["tag"].to_list(), last["i"].to_list(), strict=True):
            kept = tails.setdefault(tag, [])
            kept.append(base + index)
        for tag, kept in tails.items():
            if len(kept) > 4 * RANK_TAIL_LINES:
                tails[tag] = sorted(kept)[-RANK_TAIL_LINES:]
    rank_tails = sorted(
        (i for kept in tails.values() for i in sorted(kept)[-RANK_TAIL_LINES:]), reverse=True
    )
    return _Scan(lengths, rank_tails)


def _log_member(
    path: Path,
    member: str,
    redactor: Redactor,
    budget: int,
    *,
    scan: _Scan,
    analysis: Analysis | None,
    full: bool,
    source: str,
) -> tuple[LogMember, bytes, bytes | None]:
    """Second pass: the kept lines, redacted, and the index of an excerpt."""
    lengths = scan.lengths
    total = sum(lengths)
    whole_ok = full or total <= WHOLE_LOG_BYTES
    keep = _select(
        lengths,
        budget,
        whole_ok=whole_ok,
        wanted=_wanted_lines(path, analysis),
        full=full,
        rank_tails=scan.rank_tails,
    )
    out = io.BytesIO()
    base = 0
    redactor.end_stream()
    for chunk in _line_chunks(path):
        flags = keep[base : base + len(chunk)]
        chunk = chunk[: len(flags)]  # (lines added since the first pass are left out)
        base += len(chunk)
        kept_lines = chunk if flags.count(0) == 0 else list(itertools.compress(chunk, flags))
        if not kept_lines:
            continue
        flagged = redactor.hints(kept_lines, stream=True)
        for i in itertools.compress(range(len(kept_lines)), flagged):
            # only the lines the prefilter flags go through the redactor
            text = redactor.text(
                kept_lines[i].decode("utf-8", "surrogateescape"), learn=False, stream=True
            )
            kept_lines[i] = text.encode("utf-8", "surrogateescape")
        out.write(b"\n".join(kept_lines))
        out.write(b"\n")
    redactor.end_stream()
    keep = keep[:base]  # (the file may have changed between the passes)
    segments = [[m.start() + 1, m.end() - m.start()] for m in re.finditer(b"\x01+", keep)]
    kept = keep.count(1)
    n = len(lengths)
    whole = kept == n
    index_name = None if whole else f"{member}.index.json"
    index = None
    if index_name is not None:
        index = json.dumps(
            {"source": source, "lines_total": n, "segments": segments}, separators=(",", ":")
        ).encode()
    info = LogMember(
        member=member,
        source=source,
        lines_total=n,
        lines_kept=kept,
        bytes_kept=out.tell(),
        mode="whole" if whole else "excerpt",
        cut=not whole,
        index=index_name,
    )
    return info, out.getvalue(), index


# ---------------------------------------------------------------------------
# analysis / snapshot serialisation (other work items' renderers, guarded)


def _analysis_dict(analysis: Analysis) -> Any:
    from diag.report.json_out import analysis_to_dict

    return analysis_to_dict(analysis)


def _snapshot_dict(snapshot: Snapshot) -> Any:
    from diag.report.snapshot_json import snapshot_to_dict

    return snapshot_to_dict(snapshot)


def _markdown(
    analysis: Analysis | None, snapshot: Snapshot | None, env: Mapping[str, object]
) -> str:
    """report.md: the log analysis and the snapshot of its server, as one view (with the
    environment collapsed at the end)."""
    from dataclasses import replace

    from diag.report.combined import combine, empty_analysis
    from diag.report.markdown import render_markdown

    base = analysis if analysis is not None else empty_analysis("bundle", snapshot)
    return render_markdown(replace(combine(base, snapshot), environment=env))


def _snapshot_stacks(snapshot: Snapshot) -> dict[str, str]:
    """stacks/<pid>-<rank or role>.json (each process's dump as py-spy's JSON shape:
    threads, frames innermost first) and .txt (as `py-spy dump` prints it)."""
    from diag.report.json_out import thread_to_dict

    out: dict[str, str] = {}
    for p in snapshot.processes:
        s = p.stack
        if s is None:
            continue
        who = p.rank.label.replace(" ", "_") if p.rank is not None else p.role
        threads = [thread_to_dict(t) for t in s.threads]
        out[f"{p.pid}-{who}.json"] = json.dumps(
            {
                "pid": p.pid,
                "title": p.title,
                "outcome": s.outcome,
                "mode": s.mode,
                "error": s.error,
                "threads": threads,
            },
            indent=1,
        )
        text = [f"Process {p.pid}: {p.title}", f"outcome: {s.outcome} ({s.mode or '-'})"]
        for t in s.threads:
            state = "idle" if t.idle else "active"
            text.append(f'\nThread {t.thread_id} ({state}): "{t.name or ""}"')
            for f in t.frames:
                where = f" ({f.filename}:{f.line})" if f.line is not None else (
                    f" ({f.filename})" if f.filename else ""
                )
                text.append(f"    {f.name}{where}")
        out[f"{p.pid}-{who}.txt"] = "\n".join(text) + "\n"
    return out


def _summary(analysis: Analysis | None, redactor: Redactor) -> dict[str, object] | None:
    """What the analysis concluded, for triage without opening the other members."""
    if analysis is None:
        return None
    return {
        "framework": analysis.framework,
        "version": redactor.text(analysis.version) if analysis.version else None,
        "last_phase": analysis.last_phase,
        "ranks": len(analysis.ranks),
        "findings": [f.id for f in analysis.findings],
    }


def _stack_member(redactor: Redactor, text: str) -> bytes:
    """A raw stack dump: py-spy JSON is redacted field by field (a local named
    ``password`` loses its value), anything else line by line."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return redactor.text(text).encode("utf-8", "surrogateescape")
    return _dumps(redactor.value(parsed))


def _dumps(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def _safe_member_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    return cleaned[:120] or "unnamed"


# ---------------------------------------------------------------------------
# the archive


def _tarinfo(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_atomically(out: Path, members: Mapping[str, bytes], mtime: int) -> int:
    folder = out.parent
    if not folder.is_dir():
        raise InputError(f"{out}: folder {folder} does not exist")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=folder)
    except OSError as exc:
        raise DiagError(
            f"cannot write {out}: {exc.strerror or exc}",
            help_text="Pick a folder you can write to: --out /tmp/hang.tar.gz",
        ) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw:
            with (
                gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=mtime) as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                for name, data in members.items():
                    tar.addfile(_tarinfo(name, len(data), mtime), io.BytesIO(data))
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise DiagError(
                f"cannot write {out}: {exc.strerror or exc} (nothing was written)",
                help_text="Free some space or pick another folder: --out /tmp/hang.tar.gz",
            ) from None
        raise
    with contextlib.suppress(OSError):  # make the rename durable (best effort)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return out.stat().st_size


def write_bundle(
    out: Path,
    *,
    logs: Sequence[Path] = (),
    analysis: Analysis | None = None,
    snapshot: Snapshot | None = None,
    full_logs: bool = False,
    redact_hosts: bool = False,
    command_line: Sequence[str] = (),
    raw_stacks: Mapping[str, str] | None = None,
    env_pids: Sequence[int] = (),
    runner: Runner | None = None,
    log_cap: int | None = None,
    notes: Sequence[str] = (),
) -> BundleInfo:
    """Write one bundle to ``out`` (atomically) and describe what went in.

    ``env_pids`` adds processes whose command line and environment go into env.json
    (the snapshot's processes are always included)."""
    hosts = [snapshot.host] if snapshot is not None and snapshot.host else []
    redactor = Redactor(redact_hosts=redact_hosts, hosts=hosts)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    mtime = int(now.timestamp())
    cap = log_cap if log_cap is not None else (FULL_LOG_CAP if full_logs else DEFAULT_LOG_CAP)
    all_notes = [redactor.text(n) for n in notes]

    # Hosts first (with redact_hosts): from the snapshot's command lines and from a first
    # pass over every log, so each host has one mask from its first mention in any member.
    if snapshot is not None and redact_hosts:
        for process in snapshot.processes:
            for arg in process.cmdline:
                redactor.learn_hosts(arg)
    if redact_hosts:
        for path in logs:
            _learn_hosts(path, redactor)
    snapshot_member: bytes | None = None
    if snapshot is not None:
        snapshot_member = _dumps(redactor.value(_snapshot_dict(snapshot)))

    log_members: list[tuple[LogMember, bytes, bytes | None]] = []
    used_names: set[str] = set()
    share = cap // max(1, len(logs))
    sources: set[str] = set()
    read_notes: list[str] = []
    for path in logs:
        # one name per log: node0/server.log and node1/server.log become server.log and
        # node1-server.log (the source name `diag analyze BUNDLE` shows)
        source = redactor.text(_plain_name(path))
        if source in sources and path.parent.name:
            source = f"{redactor.text(path.parent.name)}-{source}"
        base, counter = source, 2
        while source in sources:
            source, counter = f"{counter}-{base}", counter + 1
        sources.add(source)
        name = _safe_member_name(source)
        member = f"logs/{name}"
        while member in used_names:
            member, counter = f"logs/{counter}-{name}", counter + 1
        used_names.add(member)
        log_members.append(
            _log_member(
                path,
                member,
                redactor,
                share,
                scan=_scan(path, read_notes),
                analysis=analysis,
                full=full_logs,
                source=source,
            )
        )
    all_notes += [redactor.text(n) for n in read_notes]
    for info, _data, _index in log_members:
        if info.cut:
            all_notes.append(
                f"{info.member}: {info.lines_kept} of {info.lines_total} lines kept "
                f"({'cap' if full_logs else 'excerpt'}: {cap // _MiB} MiB for all logs; "
                "line numbers are in its index)"
            )

    pids = list(env_pids)
    if snapshot is not None:
        pids += [p.pid for p in snapshot.processes]
    env = collect_env(redactor, runner=runner or SubprocessRunner(), pids=pids)
    members: dict[str, bytes] = {}
    if analysis is not None or snapshot is not None:  # (a snapshot alone gets one too)
        members["report.md"] = redactor.text(_markdown(analysis, snapshot, env)).encode(
            "utf-8", "surrogateescape"
        )
    if analysis is not None:
        members["analysis.json"] = _dumps(redactor.value(_analysis_dict(analysis)))
    if snapshot_member is not None:
        members["snapshot.json"] = snapshot_member
    if raw_stacks is None and snapshot is not None:
        raw_stacks = _snapshot_stacks(snapshot)
    for name, text in sorted((raw_stacks or {}).items()):
        members[f"stacks/{_safe_member_name(redactor.text(name))}"] = _stack_member(
            redactor, text
        )
    members["env.json"] = _dumps(env)
    for info, data, index in log_members:
        members[info.member] = data
        if index is not None and info.index is not None:
            members[info.index] = index

    try:
        host = socket.gethostname()
    except OSError:  # pragma: no cover
        host = "unknown"
    manifest_head: dict[str, Any] = {
        "format": FORMAT,
        "schema": SCHEMA_VERSION,
        "diag_version": __version__,
        "created": now.isoformat(),
        "host": redactor.host_mask(host),
        "command_line": redactor.argv(list(command_line)),
        "redact_hosts": redact_hosts,
        "full_logs": full_logs,
        "log_cap_bytes": cap,
        "snapshot": snapshot is not None,
        "logs": [dataclasses.asdict(info) for info, _d, _i in log_members],
        "summary": _summary(analysis, redactor),
        "notes": all_notes,
    }
    manifest = {
        **manifest_head,
        "redactions": redactor.summary(),
        "members": {
            name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in members.items()
        },
    }
    archive = {MANIFEST: _dumps(manifest), **members}
    if not out.name:
        raise BundleError("no output file name given")
    size = _write_atomically(out, archive, mtime)
    return BundleInfo(
        path=out,
        size=size,
        members=tuple(archive),
        redactions=redactor.summary(),
        logs=tuple(info for info, _d, _i in log_members),
        snapshot=snapshot is not None,
        notes=tuple(all_notes),
    )
