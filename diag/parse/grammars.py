"""Line grammars: one logical line -> the fields of a Record.

A line is first unwrapped (docker/k8s timestamps, compose service names, journald,
Buildkite, TorchServe, FastChat, k9s borders, HTML colour tags, Python-logging wrappers,
vLLM/Ray process prefixes), then read by the first grammar that fits: SGLang
``[ts DPx TPy]``, vLLM ``LEVEL mm-dd hh:mm:ss [file.py:n]``, NCCL, torch c10d/glog, uvicorn,
Ray, tqdm bars, stack dumps, tracebacks, and ``plain`` when nothing fits.

Grammars never raise: malformed input yields a ``plain`` line.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass

from diag.model import RankId
from diag.parse.coords import (
    TAGS_RE_SRC,
    Coords,
    match_message_rank,
    match_proc_prefix,
    match_stage,
    match_torch_rank,
    small_int,
    tags_rank,
)
from diag.parse.unwrap import Wrap, record_start, unescape_entities, unwrap_line

__all__ = [
    "LEVELS",
    "Parsed",
    "parse_line",
    "is_continuation_text",
    "is_exception_line",
]

LEVELS = {
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARNING",
    "WARN": "WARNING",
    "ERROR": "ERROR",
    "CRITICAL": "CRITICAL",
    "FATAL": "CRITICAL",
    "I": "INFO",
    "W": "WARNING",
    "E": "ERROR",
    "F": "CRITICAL",
}

_LVL = r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_LEVEL_COLON = re.compile(r"(?:WARNING|ERROR|CRITICAL): ?")


@dataclass(slots=True)
class Parsed:
    """Mutable scratch result of one line (the record builder freezes it)."""

    message: str
    grammar: str = "plain"
    ts: dt.datetime | None = None
    yearless: bool = False  # ts carries a placeholder year (vLLM/glog): resolve later
    dateless: bool = False  # ts carries a placeholder date (SGLang 2024 time-only)
    rank: RankId | None = None
    rank_reason: str | None = None
    process: str | None = None
    pid: int | None = None
    host: str | None = None
    level: str | None = None
    logger_file: str | None = None
    wrapper_ts: dt.datetime | None = None
    repeated: int = 0
    unwrapped: tuple[str, ...] = ()  # the wrappers removed (diag.parse.unwrap kinds)
    global_rank: bool = False  # rank.tp is a global rank (torch [rankN], vLLM rank=N)
    replica: int | None = None  # vLLM EngineCore_DPn: the DP replica the line's process serves
    stage: int | None = None  # vLLM-Omni "[Stage-N]": the engine stage that logged the line
    wrap_process: str | None = None  # process / pid a wrapper named (compose, journald)
    wrap_pid: int | None = None


PLACEHOLDER_YEAR = 2000  # a leap year, so that Feb 29 of a year-less stamp is valid
PLACEHOLDER_DATE = dt.date(2000, 1, 1)

# ---------------------------------------------------------------------------
# wrappers: diag.parse.unwrap; rank prefixes: diag.parse.coords

_REPEATED = re.compile(
    r"\s*\[repeated (?P<n>\d{1,9})x across cluster\](?:\s*\(Ray deduplicates.*)?$", re.A
)

# ---------------------------------------------------------------------------
# grammars

# Python logging formats: "2025-03-07 23:50:27,531 - name - LEVEL - msg" and level first
_PYLOG_WRAP = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:,(?P<f>\d+))? - (?P<name>[\w.<>]+) - "
    + _LVL
    + r" - (?P<msg>.*)$",
    re.S | re.A,
)
_PYLOG_LEVEL_FIRST = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:,(?P<f>\d+))? - "
    + _LVL
    + r" - (?:(?P<name>[\w.<>]+): )?(?P<msg>.*)$",
    re.S | re.A,
)

# (SGLang Diffusion, sglang/multimodal_gen since 0.5.5, stamps "[MM-DD HH:MM:SS] msg":
# no year, no rank tag)
_SGLANG = re.compile(
    r"^\[?(?:(?:(?P<d>\d{4}-\d\d-\d\d)|(?P<md>[01]\d-[0-3]\d)) )?(?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"(?P<tags>" + TAGS_RE_SRC + r")?\] ?(?P<msg>.*)$",
    re.S | re.A,
)
# SGLang's prefix cut by the reporter to its rank tags ("[TP0] msg", "[DP0 TP3 EP3] msg":
# the time stamp trimmed away, the tags of srt/utils.py configure_logger's
# "[%(asctime)s{prefix}] " kept): read as SGLang's, with the rank and no time
_SGLANG_TAGS_ONLY = re.compile(r"^\[(?P<tags>[A-Z][A-Z0-9_ ]{1,80})\] (?P<msg>\S.*)$", re.S | re.A)
_TAGS_ALL = re.compile(TAGS_RE_SRC, re.A)
_SGLANG_LEVEL_FILE = re.compile(
    _LVL + r" (?P<file>[\w./\-]+\.py):(?P<line>\d{1,9}): ?(?P<msg>.*)$", re.S | re.A
)
# a logging config's bracketed fields after the time's own bracket:
# "[2026-04-15 17:13:02][http_server.py:1991][INFO]: msg" ("[%(asctime)s][%(filename)s:
# %(lineno)d][%(levelname)s]: %(message)s"), also without the file
_BRACKET_FIELDS = re.compile(
    r"(?:\[(?P<file>[\w./\-]+\.py):(?P<line>\d{1,9})\])?\[" + _LVL + r"\]:? ?(?P<msg>.*)$",
    re.S | re.A,
)
# (paste damage: a markdown view that escaped each `]` and lost the backslash shows it as
# `[]`: "ERROR 10-20 03:20:50 [core.py:720[] msg")
# LMCache's logger (lmcache/logging.py build_format, 0.2-0.4): "[%(asctime)s] LMCache
# %(levelname)s: %(message)s (%(filename)s:%(lineno)d:%(name)s)", in the engine's process
# (a vLLM or SGLang worker, behind its process prefix): "[2025-09-04 01:00:51,159] LMCache
# WARN : msg (cache_engine.py:1087:lmcache.v1.cache_engine)"
_LMCACHE = re.compile(
    r"^LMCache " + _LVL + r" ?: ?(?P<msg>.*?)"
    r"(?: \((?P<file>[\w.\-]+\.py):(?P<line>\d{1,9}):(?P<name>[\w.]+)\))?$",
    re.S | re.A,
)
_VLLM = re.compile(
    r"^" + _LVL + r" (?:(?P<y>\d{4})-)?(?P<md>\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[?(?P<file>[\w./\-]+\.py):(?P<line>\d{1,9})\[?\] ?(?P<msg>.*)$",
    re.S | re.A,
)
# 2025-04-13 14:53:38 INFO 511 [pynccl.py:78] msg    (user logging formats)
_ISO_LEVEL_PID_FILE = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d)[ T](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<f>\d+))? " + _LVL
    + r"(?: (?P<pid>\d{1,9}))? \[(?P<file>[\w./\-]+\.py):(?P<line>\d{1,9})\] ?(?P<msg>.*)$",
    re.S | re.A,
)
# Ray: 2024-04-13 10:17:27,901 INFO worker.py:1752 -- msg
_RAY = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:,(?P<f>\d+))? " + _LVL
    + r" (?P<file>[\w./\-]+\.py):(?P<line>\d{1,9}) -- (?P<msg>.*)$",
    re.S | re.A,
)
# 2026-01-17 10:49:37 | warnings | 140592998728832 | WARNING : msg
_PIPE = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:[.,]\d+)? \| (?P<name>[\w.]+) \| "
    r"(?P<tid>\d{1,20}) \| " + _LVL + r"\s*: ?(?P<msg>.*)$",
    re.S | re.A,
)
# tracing (Dynamo): after an RFC3339 wrapper: "INFO model_runner.init_device_graphs: msg"
_TRACING = re.compile(r"^\s*" + _LVL + r"\s+(?P<target>[\w.:<>]+): (?P<msg>.*)$", re.S | re.A)
# generic "2025-.. 12:00:00[,123] [-] LEVEL [-] msg"
_ISO_GENERIC = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d)[ T](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<f>\d+))?Z?\s+(?:[-|]\s+)?"
    r"(?:" + _LVL + r"\s*(?:[-|:]\s+)?)?(?P<msg>.*)$",
    re.S | re.A,
)
_NCCL = re.compile(
    r"^(?P<host>[\w.\-]+):(?P<pid>\d{1,9}):(?P<tid>\d{1,20}) \[(?P<dev>\d{1,9})\] "
    r"(?:(?P<src>[\w/.\-]+:\d+) )?(?P<msg>NCCL (?P<nl>INFO|WARN|ERROR|TRACE|ABORT)\b.*)$",
    re.S | re.A,
)
# torch c10d / glog: [W1222 15:01:54.123 ProcessGroupNCCL.cpp:..] or I0820 02:41:20.4 710 x.cpp:422]
# TensorFlow / XLA / JAX (tsl/platform/default/logging.cc, LogMessage::GenerateLogMessage:
# "%s.%06d: %c%s %s:%d] %s", time, micros, "IWEF"[severity], " tid" when asked, file, line):
# "2025-11-14 12:47:54.577428: E external/local_xla/.../cuda_dnn.cc:9261] Unable to ..."
_TSL = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)\.(?P<f>\d{1,9}): (?P<l>[IWEF])(?: \d{1,20})? "
    r"(?P<file>[\w./\-]+\.(?:cc|cpp|h|hpp|c|cu)):(?P<line>\d{1,9})\] ?(?P<msg>.*)$",
    re.S | re.A,
)
_GLOG = re.compile(
    r"^\[?(?P<l>[IWEF])(?P<md>\d{3,4}) (?P<t>\d\d:\d\d:\d\d)(?:\.\d+)?\s+(?:(?P<pid>\d{1,9}) )?"
    r"(?P<file>[\w./\-]+\.(?:cpp|cc|h|hpp|c|cu|py)):(?P<line>\d{1,9})\]\s?(?P<msg>.*)$",
    re.S | re.A,
)
_UVICORN = re.compile(r"^" + _LVL + r":\s+(?P<msg>.*)$", re.S | re.A)
# Python logging's BASIC_FORMAT ("%(levelname)s:%(name)s:%(message)s", logging.basicConfig()
# without a format: a program that runs the engine as a library, its loggers unconfigured)
_PY_BASIC = re.compile(r"^" + _LVL + r":(?P<name>[A-Za-z_][\w.]{0,120}):(?P<msg>.*)$", re.S | re.A)
# Python's `warnings` module (CPython Lib/warnings.py, _formatwarnmsg_impl):
# `/path/to/file.py:223: UserWarning: message` (the source line follows, indented)
_PY_WARNING = re.compile(
    r"^(?P<file>(?:[A-Za-z]:)?[^\s:]*\.pyx?):(?P<line>\d+): (?P<cat>[A-Z]\w*Warning): (?P<msg>.*)$",
    re.S | re.A,
)
_TQDM = re.compile(r"\d+%\|| \d+% Completed \| \d+/\d+|^\s*\d+%\s*\|.*\| *\d+/\d+", re.A)
_PYSPY = re.compile(
    r"^(?:Process \d+: |Python v\d|Thread (?:0x[0-9A-Fa-f]+ |\d+ )?\((?:idle|active|gil)|"
    r"Pyspy (?:dump for PID|failed to dump))", re.A)
_FAULTHANDLER = re.compile(
    r"^(?:Fatal Python error: |Thread 0x[0-9a-fA-F]+ \(most recent call first\)|"
    r"Current thread 0x[0-9a-fA-F]+ \(most recent call first\)|Extension modules: )", re.A)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)", re.A)


# (speed) a log prints many lines a second: each stamp is read once (a datetime is immutable)
@functools.lru_cache(maxsize=1 << 14)
def _dt(d: str | None, t: str, frac: str | None = None) -> dt.datetime | None:
    try:
        base = PLACEHOLDER_DATE if d is None else dt.date(int(d[:4]), int(d[5:7]), int(d[8:10]))
        hh, mm, ss = int(t[0:2]), int(t[3:5]), int(t[6:8])
        us = int((frac or "0")[:6].ljust(6, "0"))
        return dt.datetime(base.year, base.month, base.day, hh, mm, min(ss, 59), us)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1 << 14)
def _dt_md(md: str, t: str) -> dt.datetime | None:
    """'03-10', '0310' or '310' + time, with the placeholder year. (torch's own c10 logger,
    without glog, prints the month unpadded: ``[E207 01:29:36.73 ProcessGroupNCCL.cpp:616]``
    is February 7.)"""
    digits = md.replace("-", "")
    if len(digits) == 3:
        digits = "0" + digits
    try:
        return dt.datetime(
            PLACEHOLDER_YEAR, int(digits[0:2]), int(digits[2:4]),
            int(t[0:2]), int(t[3:5]), min(int(t[6:8]), 59),
        )
    except ValueError:
        return None


def _sglang_rank(tags: str | None, p: Parsed) -> None:
    if not tags:
        return
    rank = tags_rank(tags)
    if rank is not None:
        p.rank = rank
        p.rank_reason = "tag"


def _apply_wrap(w: Wrap, p: Parsed) -> None:
    p.unwrapped = tuple(w.kinds)
    if w.ts is not None:
        p.wrapper_ts = w.ts
    if w.host is not None:
        p.host = w.host
    # a wrapper's process (compose service, journald identifier) and pid are not the
    # framework's: rank attribution reads p.process / p.pid, so they are kept apart
    if w.pid is not None:
        p.wrap_pid = w.pid
    if w.process is not None:
        p.wrap_process = w.process
    if w.coords is not None and p.rank is None:
        rank = w.coords.rank()
        if rank is not None:
            p.rank = rank
            p.global_rank = w.coords.global_rank
            kind = w.kinds[-1] if w.kinds else "launcher"
            p.rank_reason = f"{kind} prefix (global rank, read as TP)"


def _unwrap(line: str, p: Parsed) -> str:
    """Strip wrappers (:func:`diag.parse.unwrap.unwrap_line`), then the process prefixes
    (vLLM/Ray ``(Name pid=..)``, torch ``[rankN]:``), recording what they tell."""
    line, w = unwrap_line(line)
    if w is not None:
        _apply_wrap(w, p)
        if line[:1] == " ":
            # a paste indented as a whole, then wrapped line by line (a CI or container
            # stamp before " (SGLangEngine pid=1) ..."): the process prefix is the record
            bare = line.lstrip(" ")
            if len(line) - len(bare) <= 4 and match_proc_prefix(bare) is not None:
                line = bare
    if line[:1] not in "([":
        return line
    outer: Coords | None = None
    pp = match_proc_prefix(line) if line[:1] == "(" else None  # (speed: its first test)
    while pp is not None:
        if pp.pid is not None:
            p.pid = pp.pid
        if pp.ip:
            p.host = pp.ip
        # the innermost prefix is the process that logged the line
        p.process = pp.name or p.process or "pid"
        coords = pp.coords.under(outer) if pp.coords is not None else outer
        rank = None if coords is None else coords.rank()
        if rank is not None:
            if pp.ip:
                rank = RankId(node=pp.ip, dp=rank.dp, pp=rank.pp, tp=rank.tp, ep=rank.ep)
            p.rank = rank
            p.rank_reason = "tag"
            p.global_rank = coords is not None and coords.global_rank
        if coords is not None and coords.replica:
            p.replica = coords.dp
        outer = coords
        line = line[pp.end :]
        pp = match_proc_prefix(line) if line[:1] == "(" else None
    st = match_stage(line)
    if st is not None:
        p.stage = st[0]
        line = line[st[1] :]
    tr = match_torch_rank(line)
    if tr is not None:
        if p.rank is None:
            p.rank = RankId(tp=tr[0])
            p.rank_reason = "torch [rankN] prefix (global rank, read as TP)"
            p.global_rank = True
        line = line[tr[1] :]
        if line[:1] in "<0123456789#" or "</" in line[:60] or "|" in line[:90]:
            line, w = unwrap_line(line)
            if w is not None:
                _apply_wrap(w, p)
    return line


def parse_line(raw: str) -> Parsed:
    """Parse one logical line (ANSI already stripped)."""
    if "\t" in raw[:160] and raw[:1] not in " \t":
        # tabs between a line's head fields (a paste through a table or a spreadsheet):
        # read as the spaces the logger wrote
        raw = raw[:160].replace("\t", " ") + raw[160:]
    p = Parsed(message=raw)
    if raw[:1] not in " \t":
        line = _unwrap(raw, p)
    elif raw[:1] == " " and raw[1:2] not in " \t" and record_start(raw[1:]):
        # one space before a framework record (a terminal pane's margin, a paste whose
        # first column was a space): a record begins at the margin, and no record's
        # continuation starts with a record's head one column in (a wider indentation is
        # a paste's own, which the source's gutter takes off, or a continuation)
        line = _unwrap(raw[1:], p)
    elif "&" in raw and ";" in raw:
        line = unescape_entities(raw)  # an indented line copied from an HTML view
    else:
        line = raw
    if "[repeated " in line:
        m = _REPEATED.search(line)
        if m:
            p.repeated = small_int(m.group("n")) or 0
            line = line[: m.start()]
    first = line[:1]
    m = None
    if first == "[" or (first.isdigit() and (line[2:3] == ":" or line[4:5] == "-")):
        m = _SGLANG.match(line)
        if m:
            p.grammar = "sglang"
            d = m.group("d")
            md = m.group("md")
            if md is not None:
                p.ts = _dt_md(md, m.group("t"))
                p.yearless = True
            else:
                p.ts = _dt(d, m.group("t"))
                p.dateless = d is None
            _sglang_rank(m.group("tags"), p)
            msg = m.group("msg")
            if msg[:8] == "LMCache ":
                lm = _LMCACHE.match(msg)
                if lm is not None:
                    # a library both frameworks load: its own grammar, no vote for either
                    p.grammar = "lmcache"
                    p.level = LEVELS[lm.group("level")]
                    p.logger_file = lm.group("file")
                    p.message = lm.group("msg")
                    return p
            m2 = _SGLANG_LEVEL_FILE.match(msg) or (
                _BRACKET_FIELDS.match(msg) if msg[:1] == "[" else None
            )
            if m2:
                p.level = LEVELS[m2.group("level")]
                p.logger_file = m2.group("file")
                msg = m2.group("msg")
            # the vLLM-format line logged through an SGLang wrapper keeps its own level
            p.message = msg
            if p.level is None and msg.startswith(("WARNING", "ERROR", "CRITICAL")):
                p.level = msg.split(" ", 1)[0].rstrip(":")
                # "[ts] ERROR: <text>" (a "%(levelname)s: %(message)s" handler, every line
                # of a logged traceback behind it): the text is the message, its own
                # indentation kept ("ERROR:   File ...")
                lm = _LEVEL_COLON.match(msg)
                if lm is not None:
                    p.message = msg[lm.end() :]
            return p
    if first == "[" and (mt := _SGLANG_TAGS_ONLY.match(line)) is not None:
        tags = " " + mt.group("tags")
        if _TAGS_ALL.fullmatch(tags) and (rank := tags_rank(tags)) is not None:
            p.grammar = "sglang"
            p.rank = rank
            p.rank_reason = "tag"
            p.message = mt.group("msg")
            return p
    if first in "DIWECF":
        m = _VLLM.match(line)
        if m:
            p.grammar = "vllm"
            p.level = LEVELS[m.group("level")]
            if m.group("y"):  # a logging config with the year in its date format
                p.ts = _dt(f"{m.group('y')}-{m.group('md')}", m.group("t"))
            else:
                p.ts = _dt_md(m.group("md"), m.group("t"))
                p.yearless = True
            p.logger_file = m.group("file")
            p.message = m.group("msg")
            return p
        m = _PY_BASIC.match(line)
        if m:
            p.grammar = "pylog"
            p.level = LEVELS[m.group("level")]
            p.logger_file = m.group("name")
            p.message = m.group("msg")
            return p
        m = _UVICORN.match(line)
        if m:
            p.grammar = "uvicorn"
            p.level = LEVELS[m.group("level")]
            p.message = m.group("msg")
            p.process = p.process or "uvicorn"
            return p
    if first in "[IWEF":
        m = _GLOG.match(line)
        if m:
            p.grammar = "glog"
            p.level = LEVELS[m.group("l")]
            p.ts = _dt_md(m.group("md"), m.group("t"))
            p.yearless = True
            p.logger_file = m.group("file")
            if m.group("pid") and p.pid is None:
                p.pid = small_int(m.group("pid"))
            p.message = m.group("msg")
            return p
    if first.isdigit() and line[26:28] == ": ":
        m = _TSL.match(line)
        if m:
            p.grammar = "tsl"
            p.ts = _dt(m.group("d"), m.group("t"), m.group("f"))
            p.level = LEVELS[m.group("l")]
            p.logger_file = m.group("file")
            p.message = m.group("msg")
            return p
    if first.isdigit():
        for rx, name in (
            (_ISO_LEVEL_PID_FILE, "pylog"),
            (_RAY, "ray"),
            (_PIPE, "pylog"),
            (_PYLOG_LEVEL_FIRST, "pylog"),
            (_PYLOG_WRAP, "pylog"),
        ):
            m = rx.match(line)
            if m:
                gd = m.groupdict()
                p.grammar = name
                p.ts = _dt(gd["d"], gd["t"], gd.get("f"))
                p.level = LEVELS[gd["level"]]
                p.logger_file = gd.get("file") or gd.get("name")
                if gd.get("pid"):
                    p.pid = p.pid or small_int(gd["pid"])
                p.message = gd["msg"]
                return p
        m = _ISO_GENERIC.match(line)
        if m:
            p.grammar = "iso"
            p.ts = _dt(m.group("d"), m.group("t"), m.group("f"))
            if m.group("level"):
                p.level = LEVELS[m.group("level")]
            p.message = m.group("msg")
            return p
    if ":" in line[:80] and "NCCL" in line[:200]:
        m = _NCCL.match(line)
        if m:
            p.grammar = "nccl"
            p.host = m.group("host")
            p.pid = small_int(m.group("pid"))
            nl = m.group("nl")
            p.level = {"WARN": "WARNING", "ERROR": "ERROR", "ABORT": "ERROR"}.get(nl, "INFO")
            p.message = m.group("msg")
            p.logger_file = m.group("src")
            p.process = p.process or f"{m.group('host')}:{m.group('pid')}"
            return p
    if p.wrapper_ts is not None:
        m = _TRACING.match(line)
        if m:
            p.grammar = "tracing"
            p.level = LEVELS[m.group("level")]
            p.logger_file = m.group("target")
            p.message = m.group("msg").rstrip()
            p.ts = p.wrapper_ts
            return p
    if "Warning: " in line[:400]:
        m = _PY_WARNING.match(line)
        if m:
            p.grammar = "pywarning"
            p.level = "WARNING"
            p.logger_file = m.group("file").replace("\\", "/").rsplit("/", 1)[-1]
            p.message = f"{m.group('cat')}: {m.group('msg')}"
            if p.ts is None and p.wrapper_ts is not None:
                p.ts = p.wrapper_ts
            return p
    p.message = line
    if p.rank is None and line[:1] in "R[":
        # SGLang 0.1-0.2's "%(message)s" lines: 'Rank 0: load weight end.', '[gpu_id=1] ...'
        mr = match_message_rank(line)
        if mr is not None:
            p.rank = mr[0].rank()
            p.rank_reason = "tag"
            p.global_rank = True
    if "%" in line and _TQDM.search(line):  # (every form holds a '%': speed)
        p.grammar = "progress"
    elif _PYSPY.match(line):
        p.grammar = "pyspy"
    elif _FAULTHANDLER.match(line):
        p.grammar = "faulthandler"
    elif _TRACEBACK.search(line):
        p.grammar = "traceback"
    if p.ts is None and p.wrapper_ts is not None:
        p.ts = p.wrapper_ts
    return p


_EXC_LINE = re.compile(
    r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault|Abort\w*)\b:?", re.A)


def is_continuation_text(message: str) -> bool:
    """A line that continues the record before it: indented (traceback frames, py-spy
    frames, wrapped bodies) or a traceback's closing parts."""
    if not message:
        return False
    c = message[0]
    if c in " \t":
        return bool(message.strip())
    if c == "F" and _FRAME.match(message):
        return True  # a traceback frame whose indentation a paste lost
    return message.startswith(("During handling of the above", "The above exception was"))


_FRAME = re.compile(r'File "[^"]+", line \d+,? in \S', re.A)


def is_exception_line(message: str) -> bool:
    return _EXC_LINE.match(message) is not None
