"""Serving lines as columns: the figures the rules want, read from every line of a chunk.

A serving log is millions of lines of one or two kinds (SGLang's ``Decode batch`` line,
vLLM's periodic ``Avg prompt throughput`` and ``SpecDecoding metrics`` lines). They are
not records: :func:`scan_chunk` reads their numbers straight out of each chunk of text
and adds them to one :class:`ServingFigures` for the whole input, whichever way the lines
are then parsed (line by line, or only the prefilter's candidates). The same chunks go
through the same code on both paths, so the figures, and the spec-decode findings made
from them, do not depend on the path.

Figures (the number right after a fixed label, as the frameworks print it):

- SGLang ``Decode batch``: ``accept len: 2.17``, ``accept rate: 0.54`` (spec decoding),
  ``gen throughput (token/s): 812.3``, ``token usage: 0.41`` (KV cache), ``#running-req: 12``,
  ``#queue-req: 0`` (python/sglang/srt/managers/scheduler_metrics_mixin.py, 0.4.6+);
- vLLM ``SpecDecoding metrics`` / ``Speculative metrics`` (vllm/v1/spec_decode/metrics.py,
  vllm/spec_decode/metrics.py V0): ``Mean acceptance length``, ``(Avg) Draft acceptance
  rate`` (a fraction, or a percentage), ``Accepted: N tokens, Drafted: M tokens``,
  ``Per-position acceptance rate: a, b, c`` (the number of draft steps), and V0's
  ``Number of speculative tokens`` / ``Number of accepted tokens: A, Number of draft tokens: D``;
- vLLM ``Avg prompt throughput`` (vllm/v1/metrics/loggers.py): prompt and generation
  throughput, ``Running: N reqs``, ``Waiting: N reqs``, ``GPU KV cache usage: 4.1%``.

SGLang's spec-decoding figures are read from every line (``re`` over the chunk: about
0.25 s per 64 MiB of decode lines on the 2-core benchmark box). Its throughput, KV and
queue figures are printed on every decode line too; reading four more numbers from every
line would cost four times that, so they are sampled: the last decode line of each 8 MiB
chunk (the same chunks on both paths, so the same lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "SPEC_MARKERS",
    "Figure",
    "ServingFigures",
    "SpecLine",
    "labels",
    "scan_chunk",
    "spec_positions",
]

# A line holding one of these is a spec-decoding report.
SPEC_MARKERS = ("accept len: ", "SpecDecoding metrics: ", "Speculative metrics: ")

_NUM = r"[0-9]{1,12}(?:\.[0-9]{1,8})?"
_NUM_RE = re.compile(_NUM)


@dataclass(slots=True)
class Figure:
    """Count, sum and maximum of one number over the log (the mean is ``total / n``)."""

    n: int = 0
    total: float = 0.0
    max: float | None = None

    def add_many(self, n: int, total: float, mx: float | None) -> None:
        if n <= 0:
            return
        self.n += n
        self.total += total
        if mx is not None and (self.max is None or mx > self.max):
            self.max = mx

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass(frozen=True, slots=True)
class SpecLine:
    """One spec-decoding report line kept as evidence (the first two and the last)."""

    source: str
    line: int
    text: str


@dataclass(slots=True)
class ServingFigures:
    """The serving figures of the whole input (every line of every source)."""

    spec_reports: int = 0  # lines with a spec-decoding marker
    accept_len: Figure = field(default_factory=Figure)  # tokens per step, bonus included
    accept_rate: Figure = field(default_factory=Figure)  # accepted / drafted, 0..1
    accepted: int = 0
    drafted: int = 0
    positions: int | None = None  # draft steps, from per-position rates or V0's count
    gen_throughput: Figure = field(default_factory=Figure)  # tokens/s
    prompt_throughput: Figure = field(default_factory=Figure)  # tokens/s (vLLM)
    kv_usage: Figure = field(default_factory=Figure)  # fraction of the KV cache in use
    running: Figure = field(default_factory=Figure)  # requests running
    queued: Figure = field(default_factory=Figure)  # requests waiting
    first: list[SpecLine] = field(default_factory=list)  # the first two reports
    last: SpecLine | None = None

    def as_dict(self) -> dict[str, object]:
        """The figures as plain data (for tests and reports)."""

        def fig(f: Figure) -> dict[str, object]:
            return {"n": f.n, "mean": f.mean, "max": f.max}

        return {
            "spec_reports": self.spec_reports,
            "accept_len": fig(self.accept_len),
            "accept_rate": fig(self.accept_rate),
            "accepted": self.accepted,
            "drafted": self.drafted,
            "positions": self.positions,
            "gen_throughput": fig(self.gen_throughput),
            "prompt_throughput": fig(self.prompt_throughput),
            "kv_usage": fig(self.kv_usage),
            "running": fig(self.running),
            "queued": fig(self.queued),
            "first": [(s.source, s.line, s.text) for s in self.first],
            "last": (self.last.source, self.last.line, self.last.text) if self.last else None,
        }


# (label, figure attribute, scale): the number right after the label, on every line
_DENSE: tuple[tuple[str, str, float], ...] = (
    ("accept len: ", "accept_len", 1.0),
    ("accept rate: ", "accept_rate", 1.0),
)
# SGLang's decode-line figures, read from the chunk's last decode line
_SAMPLED: tuple[tuple[str, str, float], ...] = (
    ("gen throughput (token/s): ", "gen_throughput", 1.0),
    (" token usage: ", "kv_usage", 1.0),
    ("#running-req: ", "running", 1.0),
    ("#queue-req: ", "queued", 1.0),
)
# vLLM's periodic lines: a few per minute, read with ``re`` always
_SPARSE: tuple[tuple[str, str, float], ...] = (
    ("Mean acceptance length: ", "accept_len", 1.0),
    ("Avg prompt throughput: ", "prompt_throughput", 1.0),
    ("Avg generation throughput: ", "gen_throughput", 1.0),
    ("Running: ", "running", 1.0),
    ("Waiting: ", "queued", 1.0),
    ("GPU KV cache usage: ", "kv_usage", 0.01),
)
_RATE = re.compile(r"(?:Avg )?Draft acceptance rate: (" + _NUM + r")(%?)")
_ACCEPTED = re.compile(r"Accepted: ([0-9]{1,15}) tokens, Drafted: ([0-9]{1,15}) tokens")
_V0_COUNTS = re.compile(
    r"Number of accepted tokens: ([0-9]{1,15}), Number of draft tokens: ([0-9]{1,15})"
)
_V0_STEPS = re.compile(r"Number of speculative tokens: ([0-9]{1,6})")
_PER_POS = re.compile(r"Per-position acceptance rate: ((?:" + _NUM + r"(?:, )?){1,64})")
_TRIGGERS = ("accept len", "gen throughput", "token usage", "running-req", "queue-req",
             "acceptance", "throughput", "Running: ", "Waiting: ", "KV cache usage",
             "Number of ", "Accepted: ")


def _figure_re(label: str) -> re.Pattern[str]:
    return re.compile(re.escape(label) + "(" + _NUM + ")")


_DENSE_RE = tuple((_figure_re(lab), attr, k) for lab, attr, k in _DENSE)
_SAMPLED_RE = tuple((_figure_re(lab), attr, k) for lab, attr, k in _SAMPLED)
_SPARSE_RE = tuple((_figure_re(lab), attr, k) for lab, attr, k in _SPARSE)


# vLLM V1's periodic line (vllm/v1/metrics/loggers.py), all five figures in one pass
_VLLM_THROUGHPUT = re.compile(
    r"Avg prompt throughput: (" + _NUM + r") tokens/s, Avg generation throughput: (" + _NUM
    + r") tokens/s, Running: ([0-9]{1,12}) reqs, Waiting: ([0-9]{1,12}) reqs, "
    r"GPU KV cache usage: (" + _NUM + r")%"
)
_VLLM_THROUGHPUT_FIGS = (
    ("Avg prompt throughput: ", "prompt_throughput", 1.0),
    ("Avg generation throughput: ", "gen_throughput", 1.0),
    ("Running: ", "running", 1.0),
    ("Waiting: ", "queued", 1.0),
    ("GPU KV cache usage: ", "kv_usage", 0.01),
)


def _vllm_throughput(fig: ServingFigures, text: str) -> set[str]:
    """vLLM's throughput lines in one pass when every one has the V1 form; returns the
    labels read (none: read them one by one)."""
    found = _VLLM_THROUGHPUT.findall(text)
    n = len(found)
    if not n or text.count("Avg prompt throughput: ") != n:
        return set()
    for j, (_, attr, k) in enumerate(_VLLM_THROUGHPUT_FIGS):
        vals = [float(row[j]) * k for row in found]
        getattr(fig, attr).add_many(n, sum(vals), max(vals))
    return {lab for lab, _, _ in _VLLM_THROUGHPUT_FIGS}


# vLLM V1's spec-decode line of 2025/26 (vllm/v1/spec_decode/metrics.py), in one pass
_VLLM_SPEC = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (" + _NUM + r"), Accepted throughput: "
    + _NUM + r" tokens/s, Drafted throughput: " + _NUM + r" tokens/s, Accepted: ([0-9]{1,15}) "
    r"tokens, Drafted: ([0-9]{1,15}) tokens, Per-position acceptance rate: ((?:" + _NUM
    + r"(?:, )?){1,64}), Avg Draft acceptance rate: (" + _NUM + r")%"
)


def _vllm_spec(fig: ServingFigures, text: str) -> bool:
    """vLLM's spec-decode lines in one pass when all have that form (no older form in
    the text); False: read them label by label."""
    found = _VLLM_SPEC.findall(text)
    n = len(found)
    # every report line has this form (the older forms: read label by label)
    if not n or text.count("SpecDecoding metrics: ") != n or "Speculative metrics: " in text:
        return False
    lens = [float(row[0]) for row in found]
    fig.accept_len.add_many(n, sum(lens), max(lens))
    rates = [float(row[4]) / 100.0 for row in found]
    fig.accept_rate.add_many(n, sum(rates), None)
    fig.accepted += sum(int(row[1]) for row in found)
    fig.drafted += sum(int(row[2]) for row in found)
    # "0.150, 0.000, 0.000, " (each rate followed by ", ", as the regex reads them)
    steps = max(row[3].count(", ") + (0 if row[3].endswith(", ") else 1) for row in found)
    fig.positions = max(fig.positions or 0, steps)
    return True


_SG_PAIR = re.compile(r"accept len: (" + _NUM + r"), accept rate: (" + _NUM + ")")


def _accept_figures(fig: ServingFigures, text: str) -> int:
    """SGLang's ``accept len: L, accept rate: R`` (one pass for both when every length
    comes with its rate, as SGLang prints them; else each label on its own). Returns the
    number of ``accept len`` labels."""
    n = text.count("accept len: ")
    pairs = _SG_PAIR.findall(text)
    if len(pairs) == n:
        if n:
            lens = list(map(float, [a for a, _ in pairs]))
            rates = list(map(float, [b for _, b in pairs]))
            fig.accept_len.add_many(n, sum(lens), max(lens))
            fig.accept_rate.add_many(n, sum(rates), max(rates))
        return n
    for rx, attr, k in _DENSE_RE:
        getattr(fig, attr).add_many(*_read_re(rx, text, k))
    return n


def _read_re(rx: re.Pattern[str], text: str, k: float) -> tuple[int, float, float | None]:
    vals = [float(m) * k for m in rx.findall(text)]
    if not vals:
        return 0, 0.0, None
    return len(vals), sum(vals), max(vals)


_FAMILY = ("Decode batch", "Prefill batch")  # SGLang's batch lines carry the _DENSE labels


def labels() -> tuple[str, ...]:
    """The labels a caller's one pass over a chunk should report the presence of (then
    :func:`present_labels` completes the set): the rare ones, and the markers of the
    lines that carry the frequent ones."""
    return tuple(dict.fromkeys((*(x[0] for x in _SPARSE), *SPEC_MARKERS, *_FAMILY,
                                "Draft acceptance rate", "Number of ", "Accepted: ")))


def present_labels(chunk: bytes, found: frozenset[str]) -> frozenset[str]:
    """``found`` (which of :func:`labels` occur in ``chunk``) plus the frequent labels of
    SGLang's batch lines, looked for only where such lines are."""
    if not any(f in found for f in _FAMILY):
        return found
    reported = set(labels())
    more = set()
    for lab, _, _ in _DENSE:
        if lab in reported:
            continue
        if lab == "accept rate: " and "accept len: " not in found:
            continue  # SGLang prints both or neither
        if lab.encode() in chunk:
            more.add(lab)
    return found | more


def scan_chunk(
    fig: ServingFigures, text: str, source: str, line0: int,
    present: frozenset[str] | None = None,
) -> None:
    """Add the serving figures of ``text`` (whole lines; its first line is number
    ``line0 + 1`` of ``source``) to ``fig``. ``present``: which of :func:`labels` occur
    in ``text`` (found by the caller; else each is looked for here)."""
    seen: frozenset[str] | str = present if present is not None else text

    def has(label: str) -> bool:
        return label in seen

    if not (present if present is not None else any(t in text for t in _TRIGGERS)):
        return
    sg = _accept_figures(fig, text) if has("accept len: ") else 0
    i = max(text.rfind("Decode batch") if has("Decode batch") else -1,
            text.rfind("Prefill batch") if has("Prefill batch") else -1)
    if i >= 0:
        start, end = _line_at(text, i)
        line = text[start:end]
        for rx, attr, k in _SAMPLED_RE:
            getattr(fig, attr).add_many(*_read_re(rx, line, k))
    done: set[str] = set()
    if has("Avg prompt throughput: "):
        done = _vllm_throughput(fig, text)
    spec_done = False
    if has(SPEC_MARKERS[1]) and _vllm_spec(fig, text):
        done.add("Mean acceptance length: ")
        spec_done = True
    for (label, attr, k), (rx, _, _) in zip(_SPARSE, _SPARSE_RE, strict=True):
        if label not in done and has(label):
            getattr(fig, attr).add_many(*_read_re(rx, text, k))
    if sg or has(SPEC_MARKERS[1]) or has(SPEC_MARKERS[2]):
        _spec_lines(fig, text, source, line0, sg, spec_done)


def _spec_lines(
    fig: ServingFigures, text: str, source: str, line0: int, sg: int, read: bool = False
) -> None:
    vl = sum(text.count(m) for m in SPEC_MARKERS[1:] if m in text)
    fig.spec_reports += sg + vl
    if vl and not read:
        # vLLM's report lines (a few per minute): read one by one
        for m in _RATE.finditer(text):
            v = float(m.group(1))
            fig.accept_rate.add_many(1, v / 100.0 if m.group(2) else v, None)
        for rx in (_ACCEPTED, _V0_COUNTS):
            for a, d in rx.findall(text):
                fig.accepted += int(a)
                fig.drafted += int(d)
        for s in _V0_STEPS.findall(text):
            fig.positions = max(fig.positions or 0, int(s))
        for p in _PER_POS.findall(text):
            n = len(_NUM_RE.findall(p))
            fig.positions = max(fig.positions or 0, n)
    # evidence: the first two reports of the input and its last one
    if len(fig.first) < 2:
        pos = 0
        while len(fig.first) < 2:
            hits = [i for i in (text.find(m, pos) for m in SPEC_MARKERS) if i >= 0]
            if not hits:
                break
            start, end = _line_at(text, min(hits))
            fig.first.append(SpecLine(source, line0 + text.count("\n", 0, start) + 1,
                                      text[start:end]))
            pos = end + 1
    i = max(text.rfind(m) for m in SPEC_MARKERS)
    start, end = _line_at(text, i)
    fig.last = SpecLine(source, line0 + text.count("\n", 0, start) + 1, text[start:end])


def _line_at(text: str, i: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, i) + 1
    end = text.find("\n", i)
    return start, len(text) if end < 0 else end


def spec_positions(chunk: bytes) -> list[int]:
    """Byte offsets in ``chunk`` of its first two and its last spec-decoding report line:
    the lines that can be evidence (the prefilter makes them records, as the line-by-line
    path does, so that their time stamps are settled alike)."""
    out: list[int] = []
    bmarkers = [m.encode() for m in SPEC_MARKERS]
    pos = 0
    for _ in range(2):
        hits = [i for i in (chunk.find(m, pos) for m in bmarkers) if i >= 0]
        if not hits:
            break
        i = min(hits)
        out.append(i)
        nl = chunk.find(b"\n", i)
        if nl < 0:
            break
        pos = nl + 1
    if out:
        out.append(max(chunk.rfind(m) for m in bmarkers))
    return out
