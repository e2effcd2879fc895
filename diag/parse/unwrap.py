"""The one unwrapping layer: paste damage and wrappers around the framework's own lines.

Used by the log reader (:mod:`diag.parse.records` / :mod:`diag.parse.grammars`) and the
stack-dump reader (:mod:`diag.stacks.textdump`) alike.

Per line (unambiguous; tried on every line, outermost first, cheap guards first):

- HTML remnants of a rendered paste: ``<font color="#2AA1B3"><b>(APIServer pid=1)</b></font>``
  (tags dropped, ``&lt;`` ``&gt;`` ``&amp;`` ``&quot;`` decoded on such lines);
- k9s / box borders ``│ INFO ... │``;
- CI logs: Buildkite ``bk;t=1785725275247``, GitLab ``section_start:1700000000:name`` /
  ``section_end:...`` markers and its ``00O+`` stream tag, GitHub Actions ``##[group]`` /
  ``##[endgroup]`` / ``##[error]`` markers;
- Google Cloud Logging's export ``ERROR 2026-06-15T14:10:59.392125190Z `` (severity, stamp);
- RFC 3339 timestamps of GitHub Actions, kubectl ``--timestamps``, docker ``-t`` and the CRI
  log format (``2025-01-01T00:00:00.123456789Z stdout F ``), TorchServe after them, and
  Jenkins' bracketed ``[2024-01-01T00:00:00.123Z] ``;
- FastChat ``2024-04-13 10:17:32 | INFO | stdout | ``; journald ``авг 18 14:15:04 host
  python3[28059]: `` (any month language, or after an ISO stamp);
- docker compose service prefixes ``sglang-1  | `` (also inside py-spy dumps);
- OpenMPI ``--tag-output`` ``[1,3]<stdout>:``, torchrun ``[default3]:`` (a rank);
- a markdown quote (``> ``) right before a framework record (the per-source gutter below
  takes quotes on lines of any text, where most lines carry one);
- a Python-logging launcher around a framework line:
  ``2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] ...``, and a
  ``[launcher] `` style bracketed word before a framework line.

Per source (ambiguous on one line, so only where most of a source's first lines carry it):
markdown quotes (``> `` and ``> > ``), line-number gutters (``  123 | ``, ``123\\t``), srun
``--label`` task prefixes (``3: ``, a rank), stern's pod and container columns
(``decode-6c8f-vh88z vllm ``, the pods varying).

Logs whose newlines were lost: :func:`split_glued` cuts a line again before recognisable
record starts (an SGLang or vLLM stamp, a vLLM process prefix before a level), conservatively,
and before each recurrence of a Ray / vLLM process prefix that recurs on the line (a
worker's traceback flattened into one line keeps the prefix of each of its lines).

Every function is pure and never raises; a clean line passes through unchanged at the cost
of a few ``str`` tests (:func:`unwrap_line` returns ``None`` for the wrap).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from diag.parse.coords import TAGS_RE_SRC, Coords, match_proc_prefix, small_int

__all__ = [
    "SourceUnwrapper",
    "Wrap",
    "detect_wrap",
    "record_start",
    "split_glued",
    "unescape_entities",
    "unwrap_line",
    "wrap_breaks",
    "wrapper_dt",
]

_MAX_ROUNDS = 8


@dataclass(slots=True)
class Wrap:
    """What the wrappers around one line said. ``kinds`` names them, outermost first."""

    kinds: list[str] = field(default_factory=list)
    ts: dt.datetime | None = None
    host: str | None = None
    pid: int | None = None
    process: str | None = None  # compose service, journald identifier
    coords: Coords | None = None  # torchrun / srun / mpirun rank


def wrapper_dt(d: str, t: str, frac: str | None = None) -> dt.datetime | None:
    """``YYYY-MM-DD`` + ``hh:mm:ss`` (+ fraction) -> datetime, None when invalid."""
    try:
        us = int((frac or "0")[:6].ljust(6, "0")) if frac and frac.isascii() else 0
        return dt.datetime(
            int(d[0:4]), int(d[5:7]), int(d[8:10]),
            int(t[0:2]), int(t[3:5]), min(int(t[6:8]), 59), us,
        )
    except ValueError:
        return None


_D = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_T = r"[0-9]{2}:[0-9]{2}:[0-9]{2}"
_RFC3339 = re.compile(
    r"(?P<d>" + _D + r")T(?P<t>" + _T + r")(?:[.,](?P<f>[0-9]{1,12}))?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?[ \t]"  # one: the indentation after it is the line's
    r"(?:(?:stdout|stderr) [FP] |[0-9]{2}[OE]\+? )?"  # CRI log format / GitLab stream tag
)
# Jenkins' timestamper plugin: "[2024-01-01T00:00:00.123Z] "
_JENKINS = re.compile(
    r"\[(?P<d>" + _D + r")T(?P<t>" + _T + r")(?:[.,](?P<f>[0-9]{1,12}))?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?\] "
)
# Google Cloud Logging's export (Logs Explorer download, `gcloud logging read` in its text
# form): the entry's severity (LogSeverity) and its RFC 3339 time stamp before the payload
_GCP = re.compile(
    r"(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) "
    r"(?P<d>" + _D + r")T(?P<t>" + _T + r")(?:[.,](?P<f>[0-9]{1,12}))?(?:Z|[+-][0-9]{2}:?[0-9]{2}) "
)
_TORCHSERVE = re.compile(r"\[(?P<lvl>[A-Z]{3,8})\s*\] \S+ (?:MODEL_LOG - |MODEL_METRICS - )?")
_FASTCHAT = re.compile(
    r"(?P<d>" + _D + r") (?P<t>" + _T + r") \| [A-Z]{3,8} \| [\w.]{1,60} \| "
)
_JOURNALD = re.compile(
    r"\S{3,5}\.? {1,2}[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} (?P<host>\S{1,253}) "
    r"(?P<ident>[\w.@\-]{1,80})\[(?P<pid>[0-9]{1,9})\]: "
)
_JOURNALD_REST = re.compile(
    r"(?P<host>\S{1,253}) (?P<ident>[\w.@\-]{1,80})\[(?P<pid>[0-9]{1,9})\]: "
)
_BUILDKITE = re.compile(r"(?:\x1b?_?bk;t=[0-9]{1,20}\x07?)+ ?")
_GITLAB_SECTION = re.compile(
    r"section_(?:start|end):[0-9]{1,20}:[\w.\-]{1,200}(?:\[[^\]]{0,200}\])?"
)
_GHA_MARKER = re.compile(r"##\[(?:group|endgroup|error|warning|notice|debug|command|section)\]")
_COMPOSE = re.compile(r"(?P<svc>[A-Za-z][\w.\-]{0,80}?)\s+\|(?: |$)")
_K9S = re.compile(r"[│|]\s?(?P<body>.*?)\s*[│|]?\s*$", re.S)
_HTML_TAG = re.compile(r"</?(?:font|b|span|i|strong|em|code|pre|br|div|p)\b[^<>]{0,200}>", re.I)
_ENTITIES = (
    ("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"), ("&#x27;", "'"),
    ("&nbsp;", " "), ("&amp;", "&"),
)
_MPI = re.compile(r"\[[0-9]{1,6},(?P<r>[0-9]{1,6})\]<(?:stdout|stderr)>:\s?")
_TORCHRUN = re.compile(r"\[(?P<role>[a-z][a-z_\-]{0,30}?)(?P<r>[0-9]{1,6})\]:\s?")
_LEVEL_WORDS = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_PYLOG_WRAP = re.compile(
    r"(?P<d>" + _D + r") (?P<t>" + _T + r")(?:,(?P<f>[0-9]{1,9}))? - [\w.<>]{1,80} - "
    + _LEVEL_WORDS + r" - "
)
_BRACKET_WORD = re.compile(r"\[(?P<w>[a-z][\w.\-]{1,30})\] ")
# what a framework record starts with (after a launcher's own prefix)
_RECORD_START = re.compile(
    r"\[(?:" + _D + r" )?" + _T
    + r"|\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]"
    + r"|" + _LEVEL_WORDS + r" [0-9]{2}-[0-9]{2} " + _T
    + r"|" + _LEVEL_WORDS + r":\s"
    + r"|" + _D + r"[ T]" + _T
)



def record_start(text: str) -> bool:
    """Whether ``text`` begins as a framework's record: SGLang's or vLLM's stamp, a
    process prefix, a level and its stamp, uvicorn's level, an ISO stamp."""
    return _RECORD_START.match(text) is not None


# per-source gutters
_QUOTE = re.compile(r"(?:> ?)+")
_NUM_GUTTER = re.compile(r"[ \t]{0,8}[0-9]{1,7}(?:[ \t]*[|│][ \t]?|\t)")
_SRUN = re.compile(r" {0,3}(?P<r>[0-9]{1,5}): ")
# a bare bar gutter: a CI log viewer's copied lines (Buildkite's web view gives
# ``  | (EngineCore_DP0 pid=6804) ...``), a quoted table-less paste behind ``│ ``
_BAR_GUTTER = re.compile(r"[ \t]{0,8}[|│¦][ \t]?")
_NUMERIC = re.compile(r"[0-9.,:;%+\-eE \t|│]*")
_SAMPLE_LINES = 60
_SOURCE_SHARE = 0.6


def _html(line: str, w: Wrap) -> str:
    out = _HTML_TAG.sub("", line)
    if out != line:
        for a, b in _ENTITIES:
            if a in out:
                out = out.replace(a, b)
        w.kinds.append("html")
    return out


def unescape_entities(line: str) -> str:
    """``&lt;`` ``&gt;`` ``&quot;`` ``&#39;`` ``&#x27;`` ``&nbsp;`` ``&amp;`` decoded (the
    entities an HTML view writes; no others, so a URL's ``&copy=`` stays)."""
    for a, b in _ENTITIES:
        if a in line:
            line = line.replace(a, b)
    return line


def _stamped(w: Wrap | None, kind: str, m: re.Match[str]) -> Wrap:
    """The wrap with a stamp wrapper's kind and time (its ``d``, ``t`` and optional ``f``
    groups) added."""
    w = w or Wrap()
    w.kinds.append(kind)
    w.ts = wrapper_dt(m.group("d"), m.group("t"), m.groupdict().get("f"))
    return w


def unwrap_line(line: str) -> tuple[str, Wrap | None]:
    """Strip the per-line wrappers of one logical line (ANSI already stripped).

    Returns the framework's own line and what the wrappers said (None when there were
    none: the text is then ``line`` itself)."""
    if not line:
        return line, None
    w: Wrap | None = None
    if "&" in line and ";" in line and "<" not in line:
        # text copied from an HTML view with its entities (no tags around them; a line
        # with tags has them stripped first, below)
        out = unescape_entities(line)
        if out != line:
            w = Wrap(kinds=["html"])
            line = out
    if "\\|" in line:
        # a markdown table cell (or inline code in one) escapes each pipe: tqdm's bars,
        # launchers' "|" separators
        w = w or Wrap(kinds=[])
        w.kinds.append("markdown-escape")
        line = line.replace("\\|", "|")
    for _ in range(_MAX_ROUNDS):
        if not line:
            break
        before = line
        c0 = line[0]
        if c0 == "<" or "</" in line[:120]:
            w = w or Wrap()
            line = _html(line, w).lstrip()
            if not line:
                break
            c0 = line[0]
        # a box border (k9s, a TUI): "│" is no log's own first character, so it goes even
        # where the closing border was lost (a hard wrap, a cut); "|" only with both
        if c0 in "│|" and len(line) > 2 and (c0 == "│" or line.rstrip().endswith(("│", "|"))):
            m = _K9S.match(line)
            if m and m.group("body") != line:
                w = w or Wrap()
                w.kinds.append("border")
                line = m.group("body")
                if not line:
                    break
                c0 = line[0]
        if c0 == ">":
            # a markdown quote before a framework record (unambiguous on its own line, where
            # too few lines are quoted for the per-source gutter: a partly quoted paste)
            m = _QUOTE.match(line)
            if m and _RECORD_START.match(line, m.end()):
                w = w or Wrap()
                w.kinds.append("quote")
                line = line[m.end() :]
                c0 = line[:1]
        if "bk;t=" in line[:16]:
            m = _BUILDKITE.match(line)
            if m:
                w = w or Wrap()
                w.kinds.append("buildkite")
                line = line[m.end() :]
        elif c0 == "s" and line.startswith("section_"):
            m = _GITLAB_SECTION.match(line)
            if m:
                w = w or Wrap()
                w.kinds.append("gitlab")
                line = line[m.end() :].lstrip("\r")
        elif c0 == "#" and line.startswith("##["):
            m = _GHA_MARKER.match(line)
            if m:
                w = w or Wrap()
                w.kinds.append("github-actions")
                line = line[m.end() :]
        if not line:
            break
        c0 = line[0]
        if "0" <= c0 <= "9":
            if line[10:11] == "T":
                m = _RFC3339.match(line)
                if m:
                    w = _stamped(w, "timestamp", m)
                    line = line[m.end() :]
                    m2 = _TORCHSERVE.match(line) if line[:1] == "[" else None
                    if m2:
                        line = line[m2.end() :]
                    m2 = _JOURNALD_REST.match(line) if "]: " in line[:300] else None
                    if m2:
                        w.kinds.append("journald")
                        w.host, w.pid = m2.group("host"), small_int(m2.group("pid"))
                        w.process = w.process or m2.group("ident")
                        line = line[m2.end() :]
                    continue
            elif line[10:11] == " " and " - " in line[19:32]:
                m = _PYLOG_WRAP.match(line)
                if m and _RECORD_START.match(line, m.end()):
                    w = _stamped(w, "python-logging", m)
                    line = line[m.end() :]
                    continue
            elif line[10:11] == " " and line[19:22] == " | ":
                m = _FASTCHAT.match(line)
                if m:
                    w = _stamped(w, "fastchat", m)
                    line = line[m.end() :]
                    continue
        elif "A" <= c0 <= "Z":
            sp = line.find(" ", 4, 10)
            if sp > 0 and line[sp + 11 : sp + 12] == "T" and line[sp + 1 : sp + 3] in ("19", "20"):
                m = _GCP.match(line)
                if m:
                    w = _stamped(w, "cloud-logging", m)
                    line = line[m.end() :]
                    continue
        elif c0 == "[":
            if line[11:12] == "T" and line[1:2].isdigit():
                m = _JENKINS.match(line)
                if m:
                    w = _stamped(w, "timestamp", m)
                    line = line[m.end() :]
                    continue
            if line[1:2].isdigit() and "<std" in line[:24]:
                m = _MPI.match(line)
                if m:
                    w = w or Wrap()
                    w.kinds.append("mpirun")
                    w.coords = Coords(tp=small_int(m.group("r")), global_rank=True)
                    line = line[m.end() :]
                    continue
            elif line[1:2].islower() and not line.startswith("[rank"):
                m = _TORCHRUN.match(line)
                if m:
                    w = w or Wrap()
                    w.kinds.append("torchrun")
                    w.coords = w.coords or Coords(tp=small_int(m.group("r")), global_rank=True)
                    line = line[m.end() :]
                    continue
                m = _BRACKET_WORD.match(line)
                if m and _RECORD_START.match(line, m.end()):
                    w = w or Wrap()
                    w.kinds.append("launcher")
                    line = line[m.end() :]
                    continue
        if ("]: " in line[:300]) and c0 not in "[( \t" and not ("0" <= c0 <= "9"):
            m = _JOURNALD.match(line)
            if m:
                w = w or Wrap()
                w.kinds.append("journald")
                w.host, w.pid = m.group("host"), small_int(m.group("pid"))
                w.process = w.process or m.group("ident")
                line = line[m.end() :]
                continue
        if "|" in line[:90] and c0.isalpha():
            m = _COMPOSE.match(line)
            if m:
                w = w or Wrap()
                w.kinds.append("compose")
                w.process = w.process or m.group("svc")
                line = line[m.end() :]
                continue
        if '="' in line and ("line=" in line or "msg=" in line):
            m = _LOGFMT.search(line)
            if m:
                w = w or Wrap()
                w.kinds.append("logfmt")
                line = _go_unquote(m.group("v"))
                continue
        if line == before:
            break
    return line, w


# a Go program's logfmt record that carries a child's output line as a quoted field after
# other key=value fields (LocalAI's backends: `... GRPC stderr id="x" line="  File \"...\""
# caller={...}`; slog/logrus `time=... level=... msg="..."`): the field's value is the line
_LOGFMT = re.compile(
    r'\b[A-Za-z_][\w.]*=(?:"(?:[^"\\]|\\.)*"|[^\s"=]+)\s+(?:line|msg)="(?P<v>(?:[^"\\]|\\.)*)"'
)
_GO_ESCAPE = re.compile(r'\\(["\\tnr])')


def _go_unquote(value: str) -> str:
    """A Go-quoted string's value (strconv.Quote's escapes of a quote, a backslash, a tab,
    a newline and a carriage return)."""
    return _GO_ESCAPE.sub(
        lambda m: {'"': '"', "\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[m.group(1)], value
    )


def _merge(outer: Wrap | None, inner: Wrap | None) -> Wrap | None:
    if outer is None:
        return inner
    if inner is None:
        return outer
    outer.kinds.extend(inner.kinds)
    outer.ts = inner.ts or outer.ts
    outer.host = inner.host or outer.host
    outer.pid = inner.pid if inner.pid is not None else outer.pid
    outer.process = outer.process or inner.process
    outer.coords = inner.coords or outer.coords
    return outer


class SourceUnwrapper:
    """Per-source unwrapping: decides from the first lines which ambiguous gutters the
    whole source carries (a quote, a line-number gutter, srun labels), strips them and the
    per-line wrappers, and counts what it removed (:meth:`notes`)."""

    __slots__ = ("_gutters", "_indent", "_inner", "counts", "decided", "wrap", "wrapped")

    def __init__(self, sample: Iterable[str] | None = None) -> None:
        self._gutters: tuple[str, ...] = ()
        # gutters inside a per-line wrapper (a CI viewer's bar under a journald or kubectl
        # stamp): taken off a line's text after its wrapper
        self._inner: tuple[str, ...] = ()
        self._indent = ""  # the whole paste indented (the "indent" gutter): this prefix
        self.counts: Counter[str] = Counter()
        self.decided = False
        # most sample lines carry a per-line wrapper (a CI or container stamp, a compose
        # prefix): a reader that looks at raw lines (indentation, prefixes) should unwrap
        # them first or read the source line by line
        self.wrapped = False
        # hard-wrapped paste (a terminal's or a copy tool's fixed width): (width, words),
        # see detect_wrap; None when the source's lines were not broken
        self.wrap: tuple[int, bool] | None = None
        if sample is not None:
            self.decide(sample)

    # -- per-source detection ------------------------------------------------------------
    def decide(
        self, lines: Iterable[str], is_start: Callable[[str], bool] | None = None
    ) -> tuple[str, ...]:
        """Look at (up to 60 non-blank) lines and fix the source-wide gutters (and, given
        ``is_start``, whether the source was hard-wrapped: :func:`detect_wrap`)."""
        seen: list[str] = []
        for ln in lines:
            if ln.strip():
                seen.append(ln)
                if len(seen) >= _SAMPLE_LINES:
                    break
        self._indent = paste_indent(seen)
        if self._indent:
            cut = len(self._indent)
            self._gutters = ("indent", *detect_gutters([x[cut:] for x in seen]))
        else:
            self._gutters = detect_gutters(seen)
            if self._gutters:
                # indented under the gutter (a quoted paste of an indented block), and
                # a gutter of its own under the indentation (a launcher's tag)
                inner = [self.strip_gutters(x)[0] for x in seen]
                self._indent = paste_indent(inner)
                if self._indent:
                    cut = len(self._indent)
                    under = detect_gutters([x[cut:] for x in inner if x.startswith(self._indent)])
                    self._gutters = (*self._gutters, "indent", *under)
        self.decided = True
        if seen:
            inner = [self.strip_gutters(x)[0] for x in seen] if self._gutters else seen
            n = sum(1 for x in inner if unwrap_line(x)[1] is not None)
            self.wrapped = n * 10 >= len(seen) * 6
            if self.wrapped and not self._gutters:
                # the quote, line-number, bar or label gutter of a paste that a per-line
                # wrapper wraps again (an indentation only before such a gutter, a paste
                # indented as a whole under it: a wrapper keeps the record's own)
                texts = [unwrap_line(x)[0] for x in inner]
                self._inner = detect_gutters(texts)
                indent = "" if self._inner else paste_indent(texts)
                if indent:
                    cut = len(indent)
                    under = detect_gutters([x[cut:] for x in texts if x.startswith(indent)])
                    if under:
                        self._indent, self._inner = indent, ("indent", *under)
            if is_start is not None:
                self.wrap = detect_wrap(inner, is_start)
            self.counts.clear()  # the sample is counted again when it is parsed
        return self._gutters

    @property
    def gutters(self) -> tuple[str, ...]:
        return self._gutters

    def strip_gutters(
        self, line: str, gutters: tuple[str, ...] | None = None
    ) -> tuple[str, Coords | None]:
        """The source-wide gutters off one physical line (and an srun label's rank)."""
        coords: Coords | None = None
        for g in self._gutters if gutters is None else gutters:
            if g == "indent":
                if line.startswith(self._indent):
                    line = line[len(self._indent) :]
                    self.counts["indent"] += 1
            elif g == "quote":
                if line[:1] == ">":
                    m = _QUOTE.match(line)
                    if m:
                        line = line[m.end() :]
                        self.counts["quote"] += 1
            elif g == "number-lines":
                if _NUM_LINE.fullmatch(line) is not None:
                    self.counts["line-numbers"] += 1
                    return "", coords
            elif g == "line-numbers":
                m = _NUM_GUTTER.match(line)
                if m:
                    line = line[m.end() :]
                    self.counts["line-numbers"] += 1
            elif g == "bar":
                m = _BAR_GUTTER.match(line)
                if m:
                    line = line[m.end() :]
                    self.counts["bar"] += 1
            elif g.startswith("prefix:"):
                m = _compiled_prefix(g[7:]).match(line)
                if m:
                    line = line[m.end() :]
                    self.counts["prefix"] += 1
            elif g.startswith("pod:"):
                m = _pod_prefix(g[4:]).match(line)
                if m:
                    line = line[m.end() :]
                    self.counts["pod"] += 1
            elif g.startswith("label:"):
                word = g[6:]
                if line.startswith(word) and line[len(word) : len(word) + 1] in (" ", ""):
                    line = line[len(word) + 1 :]
                    self.counts["label"] += 1
            elif g == "srun":
                m = _SRUN.match(line)
                if m:
                    coords = Coords(tp=small_int(m.group("r")), global_rank=True)
                    line = line[m.end() :]
                    self.counts["srun"] += 1
        return line, coords

    def strip_inner(self, line: str) -> str:
        """The line with the gutter inside its per-line wrapper taken off (the wrapper
        kept, for the record parser to read): ``<stamp>   | (EngineCore pid=1) ...`` ->
        ``<stamp> (EngineCore pid=1) ...``."""
        if not self._inner:
            return line
        inner, w = unwrap_line(line)
        if w is None or not line.endswith(inner) or not inner:
            return line
        stripped, _ = self.strip_gutters(inner, self._inner)
        if stripped == inner:
            return line
        head = line[: len(line) - len(inner)]
        return head + stripped if head.endswith((" ", "\t")) else head + " " + stripped

    def unwrap(self, line: str) -> tuple[str, Wrap | None]:
        """Gutters, then per-line wrappers (:func:`unwrap_line`)."""
        coords: Coords | None = None
        if self._gutters:
            line, coords = self.strip_gutters(line)
        text, w = unwrap_line(line)
        if w is not None:
            for k in w.kinds:
                self.counts[k] += 1
            if self._inner:
                text, inner = self.strip_gutters(text, self._inner)
                coords = coords or inner
        if coords is not None:
            w = _merge(Wrap(kinds=["srun"], coords=coords), w)
        return text, w

    def notes(self, name: str) -> list[str]:
        """One note per kind of wrapper removed from ``name``."""
        if not self.counts:
            return []
        parts = ", ".join(f"{k} ({n})" for k, n in sorted(self.counts.items()))
        return [f"{name}: wrappers removed (lines): {parts}"]


_WRAP_MIN_WIDTH = 40


def wrap_breaks(body: str, wrap: tuple[int, bool]) -> bool:
    """A physical line (no line end) that a hard wrap of ``wrap`` broke: as wide as the
    wrap, or, breaking at spaces (``fold -s``), ending in the space it broke after."""
    width, words = wrap
    n = len(body)
    if n == width:
        return body[-2:] != "  "  # padded to the width: the line ended
    # fold -s breaks after the last space that fits: before a long word (a path) that may
    # leave a short piece ("  File ")
    return words and body[-1:] == " " and body[-2:-1] not in (" ", "") and bool(body.strip())


def folded_before(width: int, nxt: str, wrap: tuple[int, bool]) -> bool:
    """Whether a piece ``width`` wide that a word wrap may have broken (``fold -s``: after
    the last space that fits) was broken before ``nxt``: the wrap moved ``nxt``'s first word
    down only because it did not fit, so piece and word reach the wrap's width. A line that
    merely ends in a space (a paste's trailing blanks) before a short next line was not
    broken. A piece as wide as the wrap was cut by the width itself."""
    full, words = wrap
    if width >= full or not words:
        return True
    return width + len(nxt.split(" ", 1)[0]) >= full


def detect_wrap(inner: list[str], is_start: Callable[[str], bool]) -> tuple[int, bool] | None:
    """Was this source hard-wrapped (a terminal's copy, ``fold``)? ``inner``: sample lines
    without colour codes and without the source's gutters (a quote is added after the
    copy that wrapped the lines).

    Width W = the longest sample line. Wrapped at W when at least two lines of two kinds
    (digits aside; three of one kind) are exactly W wide and the line after them does not
    start a record (``is_start``: it continues the line), with few full lines that neither
    continue nor end a run of full lines (one full line is enough at a terminal's usual
    width when the next line starts mid-text); wrapped at spaces (``fold -s``) when
    at least three long lines end in a space and are followed by no record start. A log
    that was not wrapped has one longest line, or longest lines followed by records."""
    n = len(inner)
    if n < 3:
        return None
    lens = [len(x.rstrip("\r")) for x in inner]
    width = max(lens)
    if width < _WRAP_MIN_WIDTH:
        return None
    # fold -s: lines that end in the one space they broke after, of any length (a long
    # word after it moves whole to the next line), followed by the rest mid-text
    spaced = [
        i for i in range(n - 1)
        if lens[i] != width and wrap_breaks(inner[i].rstrip("\r"), (width, True))
        and folded_before(lens[i], inner[i + 1], (width, True))
    ]
    spaced_cont = [
        i for i in spaced if not is_start(inner[i + 1]) and not _INDENTED.match(inner[i + 1])
    ]
    words = len(spaced_cont) >= 3 and len(spaced_cont) * 3 >= len(spaced) * 2
    # a full line padded with spaces (a terminal copy keeps the padding) ended there
    exact = [i for i in range(n - 1) if lens[i] == width and inner[i][width - 2 : width] != "  "]
    if len(exact) >= 2:
        # what follows must read as the rest of a line: no record start, and no exception
        # line (a traceback's last line follows its longest line often enough)
        cont = [
            i for i in exact
            if not is_start(inner[i + 1]) and not _EXCEPTION_START.match(inner[i + 1])
        ]
        # kinds of (line, next line) pairs, digits aside: a pair repeated is one kind
        kinds = {_DIGIT_RUN.sub("", inner[i] + "\n" + inner[i + 1]) for i in cont}
        # a full line followed by a record is the last piece of a line exactly k times
        # as wide (a full line before it); any other is evidence against the wrap
        against = sum(
            1 for i in exact if i not in cont and not (i > 0 and lens[i - 1] == width)
        )
        # the next lines mostly start mid-text (a line of a message and its indented
        # detail line, or a traceback's frame line and its source line, are no wrap);
        # one kind of line only (a wait message repeating): three of them
        mid = sum(1 for i in cont if not _INDENTED.match(inner[i + 1]))
        need = 2 if len(kinds) >= 2 or mid >= 2 else 3
        # the same full line each time (digits aside) narrower than a terminal is a
        # repeated message as long as the longest line, not a wrap (CUTLASS's "Error:
        # Failed to initialize the TMA descriptor 801", then its descriptor's fields)
        # (a line that ends in the space a word wrap broke after is cut all the same)
        one_line = len({_DIGIT_RUN.sub("", inner[i]) for i in cont}) == 1
        if (
            one_line and not words and not inner[cont[0]].rstrip("\r").endswith(" ")
            and (
                width < min(_TERMINAL_WIDTHS)
                # (or of a width no terminal has, ending a sentence before one that starts:
                # a short paste that holds a block twice, vLLM's plugin notice's "... which
                # plugins to load." then "Platform plugin ascend is activated")
                or width not in _TERMINAL_WIDTHS and all(
                    _ended_then_started(inner[i].rstrip("\r"), inner[i + 1]) for i in cont
                )
            )
        ):
            need = len(cont) + 1
        if len(cont) >= need and against * 2 <= len(cont) and mid * 2 >= len(cont):
            return (width, words)
    elif len(exact) == 1 and width in _TERMINAL_WIDTHS:
        # one wrapped line: only at a terminal's usual width, the next line mid-text
        nxt = inner[exact[0] + 1]
        if (
            not _INDENTED.match(nxt) and not is_start(nxt) and not _EXCEPTION_START.match(nxt)
            and not _ended_then_started(inner[exact[0]].rstrip("\r"), nxt)
        ):
            return (width, words)
    if words:
        return (width, True)
    return None


_DIGIT_RUN = re.compile(r"[0-9]+")
# indentation (a wrap that broke at a space leaves one space before the text)
_INDENTED = re.compile(r"\t|  | ?$")
_TERMINAL_WIDTHS = frozenset({80, 100, 120, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256})
# one full line is weak evidence: not where it ends a statement (a closing bracket, a
# period, a colon) and the next line starts a sentence of its own (a capitalised word and
# a space: SGLang 0.2's "Exception in ModelTpServer:" after a 256-wide CUDA error line)
_SENTENCE_START = re.compile(r"[A-Z][a-z]+ ")


def _ended_then_started(line: str, nxt: str) -> bool:
    return line[-1:] in ").:]" and _SENTENCE_START.match(nxt) is not None


_EXCEPTION_START = re.compile(
    r"[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt)(?::|\s*$)"
)


# what a record of a framework or its launcher starts with: a process prefix, a stamp, a
# level word, a date
# A "(" starts a record only as a process prefix ("(EngineCore_DP0 pid=12)", Ray's
# "(RayWorkerWrapper pid=7, ip=10.0.0.2)"): pystack's frame lines, "(Python) File ..." /
# "(C) File ...", indented 4 under their thread header, are a dump's own body.
_RECORD_LEAD = re.compile(
    r"\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]|\[|"
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL|WARN)\b"
)


def paste_indent(lines: list[str]) -> str:
    """The indentation most non-blank lines of ``lines`` start with (the others: pieces
    of lines a hard wrap broke), where the lines under it start records (a paste
    indented as a whole: a list item's code block, a quoted mail; " (SGLangEngine pid=1)
    [2026-03-25 16:16:10] INFO: ..."); "" when few lines are indented, or the lines are
    a traceback's or another text's own indented body (few start a record once the
    indentation is off)."""
    lines = [ln for ln in lines if ln.strip()]
    if len(lines) == 1:
        # a paste of one line: indented only as a whole (it continues no line before it)
        lead = lines[0][: len(lines[0]) - len(lines[0].lstrip(" \t"))]
        return lead if lead and _RECORD_LEAD.match(lines[0], len(lead)) else ""
    if len(lines) < 2:
        return ""
    leads = [ln[: len(ln) - len(ln.lstrip(" \t"))] for ln in lines]
    indented = [ld for ld in leads if ld]
    if len(indented) < max(2, int(len(lines) * _SOURCE_SHARE + 0.999)):
        return ""
    common = indented[0]
    for lead in indented[1:]:
        k = 0
        while k < min(len(common), len(lead)) and common[k] == lead[k]:
            k += 1
        common = common[:k]
        if not common:
            return ""
    mine = [ln for ln in lines if ln.startswith(common)]
    starts = sum(1 for ln in mine if _RECORD_LEAD.match(ln, len(common)))
    return common if starts * 2 >= len(mine) else ""


_PREFIX_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled_prefix(rx: str) -> re.Pattern[str]:
    pattern = _PREFIX_CACHE.get(rx)
    if pattern is None:
        if len(_PREFIX_CACHE) > 64:
            _PREFIX_CACHE.clear()
        pattern = _PREFIX_CACHE[rx] = re.compile(rx)
    return pattern


# a code viewer's copy (GitHub's blob view, a gist, a CI log page): each line's number on a
# line of its own before the line's text
_NUM_LINE = re.compile(r"[ \t]{0,8}[0-9]{1,7}[ \t]*")


def _number_lines(lines: list[str]) -> bool:
    """Most of ``lines`` (non-blank) alternate with a bare number of their own, counting up
    by one (a blank text line leaves two numbers in a row)."""
    nums = [int(ln) for ln in lines if _NUM_LINE.fullmatch(ln) is not None]
    if len(nums) < 3 or len(nums) * 10 < len(lines) * 3:
        return False
    ones = sum(1 for a, b in zip(nums, nums[1:], strict=False) if b == a + 1)
    return ones * 10 >= (len(nums) - 1) * 8


def _need(n: int) -> int:
    """How many of ``n`` sample lines a source-wide gutter must be on: one or two lines,
    every one of them; more, most of them."""
    return n if n < 3 else max(2, int(n * _SOURCE_SHARE + 0.999))


def detect_gutters(lines: list[str]) -> tuple[str, ...]:
    """The ambiguous gutters that most of ``lines`` (non-blank) carry."""
    n = len(lines)
    need = _need(n)
    if n == 0:
        return ()
    out: list[str] = []
    quoted = sum(1 for ln in lines if ln[:1] == ">")
    if quoted >= need:
        out.append("quote")
        lines = [_QUOTE.sub("", ln, count=1) if ln[:1] == ">" else ln for ln in lines]
    if _number_lines(lines):
        out.append("number-lines")
        lines = [ln for ln in lines if _NUM_LINE.fullmatch(ln) is None]
        n = len(lines)
        need = _need(n)
        if n == 0:
            return tuple(out)
    nums = [m for m in (_NUM_GUTTER.match(ln) for ln in lines) if m]
    if len(nums) >= need and not _looks_like_data(lines):
        out.append("line-numbers")
    else:
        sr = sum(1 for ln in lines if _SRUN.match(ln))
        if sr >= need:
            out.append("srun")
        elif _bar_gutter(lines, need):
            out.append("bar")
        elif (ctr := _pod_gutter(lines, need)) is not None:
            out.append("pod:" + ctr)
        elif (label := _label_gutter(lines, need)) is not None:
            out.append("label:" + label)
        elif (shape := _prefix_gutter(lines, need)) is not None:
            out.append("prefix:" + shape)
    return tuple(out)


# where a framework's own line begins (SGLang's stamp, vLLM's level and stamp or its process
# prefix, uvicorn's level, an NCCL line, a traceback): a wrapper's prefix is what comes before
_FRAMEWORK_HEAD = re.compile(
    r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|"
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d|"
    r"\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=\d{1,9}\s*)?pid=\d{1,9}(?:, ip=[\d.]+)?\) |"
    r"(?:INFO|WARNING|ERROR):\s{2,}|\S+:\d+:\d+ \[\d+\] NCCL |Traceback \(most recent call"
)
_PREFIX_END = frozenset(" \t|:>])-")
_OWN_PREFIX = re.compile(
    r"pid=|rank|\b(?:TP|PP|DP|EP|CP)[0-9_]|\x1b|\^\[|\.py:[0-9]|\((?:Python|C)\)|"
    r"\b(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b",  # a level: the line's own head
    re.I,
)
# a traceback's own lines (an indented source line is not: any text can be indented)
_TRACE_LINE = re.compile(
    r'\s*File "|Traceback \(most recent call|[A-Za-z_][\w.]*(?:Error|Exception)\b|'
    r"During handling of the above exception|The above exception was the direct cause|"
    r"[^|\n]{0,160}?\b\d{1,3}%\|"  # a progress bar's line
)
_DIGITS = re.compile(r"[0-9]+")
# a stack dump's own lines: py-spy's process, interpreter and thread headers and its
# indented `func (file.py:12)` frames, faulthandler's thread headers (its `File "..."`
# frames are a traceback's), gdb's `#3  0x... in f` frames and py-bt's header, c10's
# `frame #3: ...` lines under a torch error, UCX's `12 0x00007f.. func()  file:line`
# frames; torch's `[rank3]:` before any of a rank's lines; the dumpstacks recipe's
# `# Thread: name(id)` and `File: "x.py", line 12, in f`
_DUMP_HEAD = re.compile(
    r"Thread (?:0x[0-9a-fA-F]+|\d+) |Current thread 0x|Process \d+: |Python v\d|"
    r"\s+[^\s()]{1,200} \([^()\s]+:\d+\)\s*$|#\d{1,4}\s+(?:0x[0-9a-fA-F]+ in )?\S|"
    r"(?:Stack|Traceback) \(most recent call first\)|frame #\d{1,4}: |"
    r"\s*\d{1,4} +0x[0-9a-fA-F]{4,16} +\S|\[rank\d{1,6}\]:|"
    r"Traceback for thread \d+|\s+\((?:Python|C)\) File "  # pystack's
    r'|# Thread(?:ID)?: |\s*File: "'  # a signal handler's sys._current_frames() dump
)


# the grammars of a framework's or its libraries' own line heads (not a generic ISO stamp,
# which a launcher's own prefix also is)
_LOG_HEADS = frozenset({
    "sglang", "vllm", "glog", "nccl", "lmcache", "pylog", "pywarning", "tsl", "uvicorn",
})


def _starts_known(line: str) -> bool:
    """A line that begins as a framework's own line, a traceback's or a stack dump's, or
    as a line of any log format the grammars read (SGLang 0.1-0.3's time-only
    ``[12:00:01 TP0]``, Python logging's ``2025-06-25 11:25:58,633 - INFO -``, glog's
    ``I0625 11:25:58.633 12 file.cc:7]``): what a launcher's prefix can stand before."""
    if (
        _FRAMEWORK_HEAD.match(line) is not None
        or _TRACE_LINE.match(line) is not None
        or _DUMP_HEAD.match(line) is not None
    ):
        return True
    if line[:1] in (" ", "\t") or not line.strip():
        return False
    from diag.parse.grammars import parse_line  # (grammars imports this module)

    return parse_line(line).grammar in _LOG_HEADS


def _prefix_gutter(lines: list[str], need: int) -> str | None:
    """A wrapper's prefix of one shape before most lines, which no per-line rule knows (a
    launcher's ``vLLM STDOUT: ``, ``worker-1 >> ``, its own stamp ``2025-03-01 10:00:12.123
    | ``): cut candidates end at a separator in a line's first 60 characters, digits free;
    the one that most lines carry and after which most lines read as log or traceback
    lines (and more than before) wins. Its regex, else None."""
    shapes: Counter[str] = Counter()
    for ln in lines:
        if ln[:1] in (" ", "\t"):
            continue  # indentation is no prefix
        seen: set[str] = set()
        for i in range(2, min(len(ln) - 1, 60) + 1):  # never the whole line
            if ln[i - 1] in _PREFIX_END and (ln[i - 1] == " " or ln[i] == " "):
                shape = _DIGITS.sub("0", ln[:i])
                if shape not in seen:
                    seen.add(shape)
                    shapes[shape] += 1
    # a prefix that names a process or a rank is the framework's (or torch's, Ray's) own
    # attribution, read by the grammars: never a gutter to drop
    candidates = [
        sh
        for sh, n in shapes.items()
        if n >= need
        and not _OWN_PREFIX.search(sh)
        and any(c.isalnum() for c in sh)  # punctuation alone: a quote or a bar, read above
        and not _LEVEL_WORD.fullmatch(sh.strip(" :|-[]"))  # a level is the line's own
    ]
    if not candidates:
        return None
    if sum(1 for ln in lines if unwrap_line(ln)[1] is not None) * 2 >= len(lines):
        return None  # a per-line wrapper diag reads (its stamp kept) already explains them
    known_before = [_starts_known(ln) or unwrap_line(ln)[1] is not None for ln in lines]
    # lines a prefix can stand before (an indented line is a continuation's)
    flush = sum(1 for ln in lines if ln[:1] not in (" ", "\t"))
    best: tuple[int, int, str] | None = None
    for shape in candidates:
        rx = "".join(
            r"[0-9]+" if part == "0" else re.escape(part)
            for part in re.split(r"(0)", shape) if part
        )
        pattern = _compiled_prefix(rx)
        before = after = total = 0
        for ln, was in zip(lines, known_before, strict=True):
            m = pattern.match(ln)
            rest = ln[m.end() :] if m is not None else ln
            if m is not None and not rest.strip():
                continue  # the wrapper's prefix before an empty line: neither way
            total += 1
            before += was
            after += _starts_known(rest)
        # the same prefix before every line of three or more is the wrapper's even where
        # little of what follows is a framework's line (a short paste of an error's
        # message lines under a launcher's prefix): one line must still read better
        everywhere = flush >= 3 and shapes[shape] == flush
        if after <= before or (after * 3 < total and not everywhere):
            continue
        if best is None or (after - before, len(shape)) > (best[0], best[1]):
            best = (after - before, len(shape), rx)
    return best[2] if best is not None else None


# a log viewer's or runtime's name column before every line (a container's or pod's name:
# ``server     self._initialize_kv_caches()``, ``server   File "/x/llm_engine.py", ...``)
_LABEL = re.compile(r"([A-Za-z][\w.\-]{0,40})(?: |$)")
_LEVEL_WORD = re.compile(_LEVEL_WORDS + r"|[DIWEF]", re.I)
# what a log's or a traceback's own line starts with
_KNOWN_LINE = re.compile(
    r'\s+File "|Traceback \(most recent call|\s+\S|[A-Za-z_][\w.]*(?:Error|Exception)\b'
)


def _known(line: str) -> bool:
    return _RECORD_LEAD.match(line) is not None or _KNOWN_LINE.match(line) is not None


def _label_gutter(lines: list[str], need: int) -> str | None:
    """One word before most lines, and the lines read as log or traceback lines once it
    is off (they did not before): the word, else None. A level word is never a label."""
    words = Counter(m.group(1) for m in map(_LABEL.match, lines) if m)
    if not words:
        return None
    word, n = words.most_common(1)[0]
    if n < need or _LEVEL_WORD.fullmatch(word):
        return None
    rest = [ln[len(word) + 1 :] for ln in lines if ln.startswith(word + " ")]
    if any(ln.lstrip()[:1] in _WRAPPER_END for ln in rest):
        return None  # a wrapper's own separator follows the word (compose's " | ")
    after = sum(1 for ln in rest if _known(ln))
    # lines a per-line wrapper (compose, journald, a stamp) already explains
    before = sum(1 for ln in lines if _known(ln) or unwrap_line(ln)[1] is not None)
    return word if after * 2 >= len(lines) and after > before else None


# stern's default output (stern/stern cmd/cmd.go generateTemplate, output "default":
# "{{color .PodColor .PodName}} {{color .ContainerColor .ContainerName}} {{.Message}}"; the
# same two columns as kubectl-style multi-pod tails): every line starts with its pod's name
# (a DNS-1123 subdomain; a generated one, so with a '-': ``<deployment>-<hash>-<id>``,
# ``<statefulset>-<n>``) and its container's name (a DNS-1123 label), the pods varying
_POD = r"[a-z0-9][a-z0-9.]{0,120}-[-a-z0-9.]{0,130}[a-z0-9]"
_POD_LINE = re.compile(
    r"(?P<pod>" + _POD + r") (?P<ctr>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)(?: |$)"
)


def _pod_prefix(ctr: str) -> re.Pattern[str]:
    """Any pod's name, then container ``ctr``'s, before a line."""
    return _compiled_prefix(_POD + " " + re.escape(ctr) + r"(?: |$)")


def _pod_gutter(lines: list[str], need: int) -> str | None:
    """A pod's and a container's name before most lines (stern's default output), the
    container one name, and the lines read as log or traceback lines once they are off
    (more than before): the container's name, else None."""
    found = [m for m in map(_POD_LINE.match, lines) if m]
    if len(found) < need:
        return None
    ctr, n = Counter(m.group("ctr") for m in found).most_common(1)[0]
    if n < need or _LEVEL_WORD.fullmatch(ctr):
        return None
    pattern = _pod_prefix(ctr)
    before = after = 0
    for ln in lines:
        m = pattern.match(ln)
        rest = ln[m.end() :] if m is not None else ln
        if m is not None and not rest.strip():
            continue  # the prefix before an empty line: neither way
        before += _starts_known(ln) or unwrap_line(ln)[1] is not None
        after += _starts_known(rest) or unwrap_line(rest)[1] is not None
    return ctr if after > before else None


def _bar_gutter(lines: list[str], need: int) -> bool:
    """Most lines start with a bare bar (``  | ``) that is no markdown table: a table row
    also ends with its bar, a gutter's line does not."""
    barred = [ln for ln in lines if _BAR_GUTTER.match(ln)]
    if len(barred) < need:
        return False
    table = sum(1 for ln in barred if ln.rstrip().endswith(("|", "│")))
    return table * 2 <= len(barred)


def _looks_like_data(lines: list[str]) -> bool:
    """A table of numbers (``12 | 3.4``) is not a gutter: the text after the gutter must
    not be mostly digits too."""
    rest = [_NUM_GUTTER.sub("", ln, count=1) for ln in lines]
    digity = sum(1 for r in rest if _NUMERIC.fullmatch(r))
    return digity * 2 > len(rest)


# ---------------------------------------------------------------------------
# lost newlines

# record starts (no look-behind, so the regex engine scans for their first characters)
_ENTRY_START = re.compile(
    r"(?P<sg>\[" + _D + r" " + _T + r"(?:" + TAGS_RE_SRC + r")?\] )"
    r"|(?P<vl>" + _LEVEL_WORDS + r" [0-9]{2}-[0-9]{2} " + _T + r"(?:\.[0-9]+)? )"
    r"|(?P<pp>\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]{1,9}"
    r"(?:,\s*ip=[\w.:\-]{1,80})?\) " + _LEVEL_WORDS + r" [0-9]{2}-[0-9]{2} )"
)
# a cheap test that a second record start may be there at all, looked for past the first
# record's own prefix (a stamp, a level and time, a process prefix: 26-40 characters)
_GLUE_HINT = re.compile(r"\[20[0-9]{2}-[0-9]{2}-[0-9]{2} |[OGRL] [01][0-9]-[0-3][0-9] [0-9]{2}:")
_GLUE_FROM = 24
_VLLM_FILE = re.compile(r"\[[\w./\-]{1,200}\.py:[0-9]{1,9}\] ")
_CUT_FILE = re.compile(r"\[?[\w./\-]{1,200}(?::[0-9]{0,9}\]?)?\s*")
# after a space, only a word or a closing mark may end the record before (never a
# wrapper's " - " / " | " / "]: " / ") ")
# what a wrapper's prefix ends with before a process prefix (journald "]: ", compose
# " | ", Python logging " - ", an outer Ray/vLLM prefix ") ", a quote "> ", a box border)
_WRAPPER_END = frozenset(":|-)>│┃║")
_SENTENCE_END = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.!'\"%")


def _is_cut(part: str, m: re.Match[str]) -> bool:
    i = m.start()
    prev = part[i - 1]
    if not prev.isspace():
        return m.lastgroup != "pp" or prev != "("
    if i < 2:
        return False
    if m.lastgroup == "pp":
        # a process prefix with its level and date after a space that ends a message (a
        # paste that turned newlines into spaces); never after a wrapper's "]: ", " | ",
        # " - " or an outer prefix's ")"
        return not part[i - 2].isspace() and (
            part[i - 2] not in _WRAPPER_END or _call_paren(part, i - 2)
        )
    if part[i - 2] not in _SENTENCE_END and not _call_closed(part, i - 2, m):
        return False
    end = m.end()
    if m.lastgroup == "sg":
        return part[end : end + 1].isupper()
    # a vLLM record, or the excerpt's last one cut inside its logger location
    # ("... Starting to load model X... INFO 08-28 15:53:05 weig")
    return _VLLM_FILE.match(part, end) is not None or _CUT_FILE.fullmatch(part, end) is not None


def _call_closed(part: str, j: int, m: re.Match[str]) -> bool:
    """``part[j]`` is a ')' that closes a call (a traceback's source line, ``raise
    X(code)``) before a vLLM record glued on with a space: a cut, unless the parenthesis
    closes a process prefix (``(VllmWorker pid=1) INFO 05-13 ...``: the record's own)."""
    if part[j] != ")" or m.lastgroup != "vl":
        return False
    open_at = part.rfind("(", 0, j)
    # (the coordinates parser's reading of a process prefix, whose match takes the space
    # after its ')')
    prefix = match_proc_prefix(part, open_at) if open_at >= 0 else None
    return prefix is None or prefix.end not in (j + 1, j + 2)


def _call_paren(part: str, j: int) -> bool:
    """``part[j]`` is a ')' that closes a call's arguments (``self.worker.load_model()``,
    ``WorkerProc(*args, **kwargs)``: a traceback's source line) right before a process
    prefix glued on with a space, not an outer process prefix (``(APIServer pid=1) ``) or
    a wrapper's own parenthesised word (``(raylet) ``): its '(' follows a name."""
    if part[j] != ")":
        return False
    depth = 0
    for k in range(j, max(j - 400, -1), -1):
        c = part[k]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return k > 0 and (part[k - 1].isalnum() or part[k - 1] in "_]")
    return False


# a per-line process prefix of Ray (``(RayWorkerWrapper pid=7, ip=10.0.0.2)``, any actor's
# name: ``(SGLangWorker pid=38138)``) or vLLM (``(VllmWorker rank=1 pid=12)``)
_PROC_PREFIX = re.compile(
    r"\((?:[A-Za-z][\w\-]{0,80}\s*)?(?:rank=[0-9]{1,9}\s*)?pid=[0-9]{1,9}"
    r"(?:,\s*ip=[\w.:\-]{1,80})?\)"
)
_PREFIX_REPEATS = 3


def _split_repeated_prefix(part: str) -> list[str] | None:
    """A line on which a process prefix recurs (Ray and vLLM put it before every line a
    process prints, so a paste that lost its newlines keeps it between the lines it
    joined, traceback frames included): cut before each prefix that recurs. None when no
    prefix recurs :data:`_PREFIX_REPEATS` times."""
    if part.count("pid=") < _PREFIX_REPEATS:
        return None
    found = list(_PROC_PREFIX.finditer(part))
    if len(found) < _PREFIX_REPEATS:
        return None
    counts = Counter(m.group(0) for m in found)
    if counts.most_common(1)[0][1] < _PREFIX_REPEATS:
        return None
    # every prefix that recurs: the processes of one paste take turns (an engine core's
    # traceback, then the API server's)
    return _cut_at(part, [m.start() for m in found if counts[m.group(0)] > 1 and m.start() > 0])


def _cut_at(part: str, cuts: list[int]) -> list[str]:
    """``part`` cut before each offset of ``cuts`` (ascending); a piece of only white
    space is left out, each piece but the last loses its trailing space."""
    out: list[str] = []
    prev = 0
    for c in cuts:
        piece = part[prev:c].rstrip()
        if piece:
            out.append(piece)
        prev = c
    out.append(part[prev:])
    return out


def split_glued(part: str) -> list[str]:
    """A physical line holding several records (a paste that lost its newlines) -> the
    records. A line with one record is returned as ``[part]``; a wrapper's own stamp at
    the start of the line (``2025-..Z INFO ...``) is never a cut. A process prefix that
    recurs on the line cuts it before each recurrence (:func:`_split_repeated_prefix`),
    and each piece is cut again before record starts."""
    pieces = _split_repeated_prefix(part) if len(part) >= 40 else None
    if pieces is not None:
        return [cut for piece in pieces for cut in _split_records(piece)]
    return _split_records(part)


def _split_records(part: str) -> list[str]:
    # (both of the hint's forms hold a '-': a cheaper test first)
    if len(part) < 40 or part.find("-", _GLUE_FROM) < 0 or (
        _GLUE_HINT.search(part, _GLUE_FROM) is None
    ):
        return [part]
    cuts = [m.start() for m in _ENTRY_START.finditer(part, 1) if _is_cut(part, m)]
    if not cuts:
        return [part]
    inner, w = unwrap_line(part)
    head = len(part) - len(inner) if w is not None and part.endswith(inner) else 0
    cuts = [c for c in cuts if c > head]
    if not cuts:
        return [part]
    return _cut_at(part, cuts)
