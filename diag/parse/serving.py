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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
_BNUM = _NUM.encode()
_NUM_B = re.compile(_BNUM)
# ("Avg " may come before the label: it does not change the number read)
_RATE = re.compile(rb"Draft acceptance rate: (" + _BNUM + rb")(%?)")
_ACCEPTED = re.compile(rb"Accepted: ([0-9]{1,15}) tokens, Drafted: ([0-9]{1,15}) tokens")
_V0_COUNTS = re.compile(
    rb"Number of accepted tokens: ([0-9]{1,15}), Number of draft tokens: ([0-9]{1,15})"
)
_V0_STEPS = re.compile(rb"Number of speculative tokens: ([0-9]{1,6})")
_PER_POS = re.compile(rb"Per-position acceptance rate: ((?:" + _BNUM + rb"(?:, )?){1,64})")
_TRIGGERS = tuple(t.encode() for t in (
    "accept len", "gen throughput", "token usage", "running-req", "queue-req", "acceptance",
    "throughput", "Running: ", "Waiting: ", "KV cache usage", "Number of ", "Accepted: "))


def _figure_re(label: str) -> re.Pattern[bytes]:
    return re.compile(re.escape(label.encode()) + b"(" + _BNUM + b")")


_DENSE_RE = tuple((_figure_re(lab), attr, k) for lab, attr, k in _DENSE)
_SAMPLED_RE = tuple((_figure_re(lab), attr, k) for lab, attr, k in _SAMPLED)
_SPARSE_RE = tuple((_figure_re(lab), attr, k) for lab, attr, k in _SPARSE)


# vLLM V1's periodic line (vllm/v1/metrics/loggers.py), all five figures in one pass
_VLLM_THROUGHPUT = re.compile(
    rb"Avg prompt throughput: (" + _BNUM + rb") tokens/s, Avg generation throughput: ("
    + _BNUM + rb") tokens/s, Running: ([0-9]{1,12}) reqs, Waiting: ([0-9]{1,12}) reqs, "
    rb"GPU KV cache usage: (" + _BNUM + rb")%"
)
_VLLM_THROUGHPUT_FIGS = (
    ("Avg prompt throughput: ", "prompt_throughput", 1.0),
    ("Avg generation throughput: ", "gen_throughput", 1.0),
    ("Running: ", "running", 1.0),
    ("Waiting: ", "queued", 1.0),
    ("GPU KV cache usage: ", "kv_usage", 0.01),
)


def _add_column(f: Figure, col: Sequence[bytes], k: float = 1.0) -> None:
    vals = list(map(float, col))
    if k != 1.0:
        vals = [v * k for v in vals]
    f.add_many(len(vals), sum(vals), max(vals))


# ---------------------------------------------------------------------------
# line forms in columns: a fixed sequence of literals and numbers matched at many
# offsets at once (numpy), as a regex of that sequence matches there


class _Bytes:
    """A chunk's bytes for column reads: one byte, or the 8 bytes from an offset as one
    little-endian word (a strided view: no copy beyond one padded one of the chunk)."""

    def __init__(self, data: bytes | bytearray) -> None:
        import numpy as np

        self.data = data
        pad = np.zeros(len(data) + 16, dtype=np.uint8)
        pad[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.b = pad
        self.w = np.lib.stride_tricks.as_strided(
            pad, shape=(len(data) + 8, 8), strides=(1, 1), writeable=False
        ).view("<u8")[:, 0]
        self.end = len(data) + 8  # offsets from here on read as NUL bytes

    def at(self, pos: Any) -> Any:
        """The byte at each offset (NUL past the end)."""
        import numpy as np

        return self.b[np.minimum(pos, self.end)]

    def literal(self, pos: Any, lit: bytes) -> Any:
        """Rows where ``lit`` is at ``pos``."""
        import numpy as np

        ok = np.ones(len(pos), dtype=bool)
        for k in range(0, len(lit), 8):
            piece = lit[k : k + 8]
            want = np.uint64(int.from_bytes(piece, "little"))
            word = self.w[np.minimum(pos + k, self.end - 1)]
            if len(piece) < 8:
                word = word & np.uint64((1 << (8 * len(piece))) - 1)
            ok &= word == want
        return ok

    def digits(self, pos: Any, most: int) -> tuple[Any, Any]:
        """(the value of the run of at most ``most`` digits at ``pos``, its length)."""
        import numpy as np

        val = np.zeros(len(pos), dtype=np.int64)
        n = np.zeros(len(pos), dtype=np.int64)
        live = np.ones(len(pos), dtype=bool)
        for _ in range(most):
            d = self.at(pos + n).astype(np.int64) - 48
            live &= (d >= 0) & (d <= 9)
            if not live.any():
                break
            val = np.where(live, val * 10 + d, val)
            n += live
        return val, n

    def number(self, pos: Any, int_max: int = 12, frac_max: int = 8) -> tuple[Any, Any, Any]:
        """(matched, value, length) of ``[0-9]{1,int_max}(?:\\.[0-9]{1,frac_max})?`` at
        each offset (no fraction when ``frac_max`` is 0), as ``re`` matches it (greedy).
        The value is the digits as an integer over a power of ten: the correctly rounded
        value ``float()`` gives; a number of more than 15 digits goes through ``float()``."""
        import numpy as np

        ival, ilen = self.digits(pos, int_max)
        ok = ilen > 0
        value = ival.astype(np.float64)
        length = ilen.copy()
        big = ilen > 15
        if frac_max:
            at = pos + ilen
            nxt = self.at(at + 1).astype(np.int64) - 48
            dot = ok & (self.at(at) == 46) & (nxt >= 0) & (nxt <= 9)
            # (more than int_max digits: a digit at ``at``, no fraction, as in ``re``)
            if dot.any():
                fval, flen = self.digits(np.where(dot, at + 1, at), frac_max)
                flen = np.where(dot, flen, 0)
                fval = np.where(dot, fval, 0)
                mant = ival * (10 ** flen) + fval
                big |= ilen + flen > 15
                value = np.where(dot, mant.astype(np.float64) / np.power(10.0, flen), value)
                length = np.where(dot, ilen + 1 + flen, length)
        for i in np.flatnonzero(ok & big).tolist():
            s = int(pos[i])
            value[i] = float(self.data[s : s + int(length[i])])
        return ok, value, length


# a step of a line form: a literal, or a number ("num": with a fraction; "int" or
# ("int", digits): without), or "list": numbers separated by ", " (1 to 64; its value is
# how many)
_Step = bytes | str | tuple[str, int]


def _match_form(
    buf: _Bytes, q: Any, steps: Sequence[_Step]
) -> tuple[Any, list[Any]]:
    """Match ``steps`` at each offset ``q``: (rows matched, one value column per number
    step)."""
    import numpy as np

    n = len(q)
    ok = np.ones(n, dtype=bool)
    pos = q.astype(np.int64)
    out: list[Any] = []
    for step in steps:
        if isinstance(step, bytes):
            ok &= buf.literal(pos, step)
            pos = pos + len(step)
        elif step == "list":
            count = np.zeros(n, dtype=np.int64)
            live = ok.copy()
            for _ in range(64):
                hit, _, length = buf.number(pos)
                hit &= live
                count += hit
                pos = np.where(hit, pos + length, pos)
                nxt = buf.at(pos + 2).astype(np.int64) - 48
                more = hit & buf.literal(pos, b", ") & (nxt >= 0) & (nxt <= 9)
                pos = np.where(more, pos + 2, pos)
                live = more
                if not live.any():
                    break
            ok &= (count > 0) & ~live
            out.append(count)
        else:
            digits = step[1] if isinstance(step, tuple) else 12
            hit, value, length = buf.number(pos, int_max=digits,
                                            frac_max=8 if step == "num" else 0)
            ok &= hit
            pos = pos + np.where(hit, length, 0)
            out.append(value)
    return ok, out


def _marker_offsets(
    data: bytes | bytearray, marker: bytes, label_at: dict[str, Any] | None
) -> Any:
    """Offsets of ``marker`` in ``data``: from ``label_at`` when it has them."""
    at = label_at.get(marker.decode()) if label_at else None
    return at if at is not None else _offsets(data, marker)


def _offsets(data: bytes | bytearray, marker: bytes) -> Any:
    """Offsets of ``marker`` in ``data`` (a marker that cannot overlap itself)."""
    import numpy as np

    out: list[int] = []
    find, add, i, step = data.find, out.append, data.find(marker), len(marker)
    while i >= 0:
        add(i)
        i = find(marker, i + step)
    return np.array(out, dtype=np.int64)


def _sum_max(vals: Any) -> tuple[int, float, float | None]:
    """(n, sum added left to right as Python's sum() adds, max) of a float column."""
    import numpy as np

    if not len(vals):
        return 0, 0.0, None
    return len(vals), float(np.cumsum(vals)[-1]), float(vals.max())


# the same forms as steps of a line form (:func:`_match_form`), read in columns
_VLLM_THROUGHPUT_FORM: tuple[_Step, ...] = (
    b"Avg prompt throughput: ", "num", b" tokens/s, Avg generation throughput: ", "num",
    b" tokens/s, Running: ", "int", b" reqs, Waiting: ", "int", b" reqs, GPU KV cache usage: ",
    "num", b"%",
)
_VLLM_SPEC_FORM: tuple[_Step, ...] = (
    b"SpecDecoding metrics: ", b"Mean acceptance length: ", "num", b", Accepted throughput: ",
    "num", b" tokens/s, Drafted throughput: ", "num", b" tokens/s, Accepted: ", ("int", 15),
    b" tokens, Drafted: ", ("int", 15), b" tokens, Per-position acceptance rate: ", "list",
    b", Avg Draft acceptance rate: ", "num", b"%",
)


def _form_rows(
    data: bytes | bytearray, form: Sequence[_Step], buf: list[_Bytes],
    label_at: dict[str, Any] | None = None,
) -> list[Any] | None:
    """The value columns of ``form`` (its first step a literal that marks the line) over
    every occurrence of that literal in ``data``, or None when one occurrence does not
    have the whole form (the caller then reads the lines another way). ``buf``: the
    chunk's :class:`_Bytes`, made on first use and shared; ``label_at``: where labels
    occur, when the caller's scanner found them (else the marker is looked for here)."""
    marker = form[0]
    assert isinstance(marker, bytes)
    q = _marker_offsets(data, marker, label_at)
    if not len(q):
        return None
    from diag.parse import native

    nat = native.loaded()  # (compiled: loaded by the prefilter for large inputs)
    if nat is not None and isinstance(data, bytes | bytearray):
        return nat.form(data, q, form)
    if not buf:
        buf.append(_Bytes(data))
    ok, cols = _match_form(buf[0], q, form)
    return cols if bool(ok.all()) else None


def _vllm_throughput(
    fig: ServingFigures, data: bytes | bytearray, buf: list[_Bytes],
    label_at: dict[str, Any] | None = None,
) -> set[str]:
    """vLLM's throughput lines in columns when every one has the V1 form; returns the
    labels read (none: read them one by one)."""
    cols = _form_rows(data, _VLLM_THROUGHPUT_FORM, buf, label_at)
    if cols is None:
        return set()
    for col, (_, attr, k) in zip(cols, _VLLM_THROUGHPUT_FIGS, strict=True):
        getattr(fig, attr).add_many(*_sum_max(col * k if k != 1.0 else col))
    return {lab for lab, _, _ in _VLLM_THROUGHPUT_FIGS}


def _vllm_spec(
    fig: ServingFigures, data: bytes | bytearray, buf: list[_Bytes], older: bool,
    label_at: dict[str, Any] | None = None,
) -> bool:
    """vLLM's spec-decode lines in columns when all have that form (``older``: V0's
    ``Speculative metrics`` lines are in the text too); False: read them label by label."""
    if older:
        return False
    cols = _form_rows(data, _VLLM_SPEC_FORM, buf, label_at)
    if cols is None:
        return False
    lens, _, _, acc, drafted, steps, rates = cols  # (the throughputs are not figures)
    fig.accept_len.add_many(*_sum_max(lens))
    n, total, _ = _sum_max(rates / 100.0)
    fig.accept_rate.add_many(n, total, None)
    fig.accepted += int(acc.astype("int64").sum())
    fig.drafted += int(drafted.astype("int64").sum())
    fig.positions = max(fig.positions or 0, int(steps.max()))
    return True


def _accept_figures(
    fig: ServingFigures, data: bytes | bytearray, present: frozenset[str] | None = None,
    label_at: dict[str, Any] | None = None,
) -> int:
    """SGLang's ``accept len: L`` and ``accept rate: R`` (each label on its own, the
    number right after it), read in numpy (:func:`_label_numbers`; the labels' offsets
    from the caller's scanner when it has them: ``present``, ``label_at``). Returns the
    number of ``accept len`` figures read."""
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    labs = (b"accept len: ", b"accept rate: ")
    at: list[Any] | None = None
    if present is not None and label_at is not None:
        at = []
        for lab in labs:
            name = lab.decode()
            got = label_at.get(name) if name in present else np.empty(0, dtype=np.int64)
            if got is None:  # (more than the scanner keeps)
                at = None
                break
            # in the order _find_label gives them (by alignment, then offset): the sums
            # are the same to the bit whichever way the offsets were found ((speed) the
            # alignment as uint8: numpy's stable sort of bytes is a radix sort)
            at.append(got[np.argsort((got & 3).astype(np.uint8), kind="stable")])
    found = _label_numbers(arr, data, labs, at)
    for (_, attr, _), vals in zip(_DENSE, found, strict=True):
        if len(vals):
            getattr(fig, attr).add_many(len(vals), float(vals.sum()), float(vals.max()))
    return len(found[0])


def _read_re(
    rx: re.Pattern[bytes], data: bytes | bytearray, k: float
) -> tuple[int, float, float | None]:
    return _count_sum_max([float(m) * k for m in rx.findall(data)])


def _count_sum_max(vals: list[float]) -> tuple[int, float, float | None]:
    if not vals:
        return 0, 0.0, None
    return len(vals), sum(vals), max(vals)


_FORM_AT_LEAST = 32  # offsets from which _read_at reads the numbers in compiled code


def _read_at(
    data: bytes | bytearray, at: Any, skip: int, k: float
) -> tuple[int, float, float | None]:
    """As :func:`_read_re` with the label's pattern, reading the number right after each
    label at the offsets ``at`` (the label is ``skip`` bytes long). With diag's compiled
    scanner, when a number follows every label, the numbers are read as one line form
    (its "num" step reads what ``_NUM`` matches, each value as ``float()`` reads it) and
    summed in order as here."""
    if len(at) >= _FORM_AT_LEAST:
        from diag.parse import native

        nat = native.loaded()
        if nat is not None:
            import numpy as np

            cols = nat.form(data, np.asarray(at, dtype=np.int64) + skip, ["num"])
            if cols is not None:
                return _count_sum_max((cols[0] * k).tolist())
    match = _NUM_B.match
    return _count_sum_max(
        [float(m.group()) * k for m in (match(data, p + skip) for p in at.tolist()) if m]
    )


_FAMILY = ("Decode batch", "Prefill batch")  # SGLang's batch lines carry the _DENSE labels


def labels() -> tuple[str, ...]:
    """The labels a caller's one pass over a chunk should report the presence of (then
    :func:`present_labels` completes the set): the rare ones, and the markers of the
    lines that carry the frequent ones."""
    return tuple(dict.fromkeys((*(x[0] for x in _SPARSE), *SPEC_MARKERS, *_FAMILY,
                                "Draft acceptance rate", "Number of ", "Accepted: ",
                                "Per-position acceptance rate: ", "accept rate: ")))


def present_labels(chunk: bytes | bytearray, found: frozenset[str]) -> frozenset[str]:
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
    fig: ServingFigures, data: str | bytes | bytearray, source: str, line0: int,
    present: frozenset[str] | None = None, nl: Any = None,
    label_at: dict[str, Any] | None = None,
) -> None:
    """Add the serving figures of ``data`` (whole lines, as bytes or text; its first line
    is number ``line0 + 1`` of ``source``) to ``fig``. ``present``: which of
    :func:`labels` occur in it (found by the caller; else each is looked for here);
    ``nl``: the offsets of its newlines (a sorted numpy array), when the caller has them;
    ``label_at``: where labels occur (label -> start offsets), when the caller found them:
    a sparse figure is then read at those places, not by a regex over the whole chunk."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
        nl = None
    if present is None:
        if not any(t in data for t in _TRIGGERS):
            return
        raw = data

        def has(label: str) -> bool:
            return label.encode() in raw
    else:
        if not present:
            return
        seen = present

        def has(label: str) -> bool:
            return label in seen

    sg = _accept_figures(fig, data, present, label_at) if has("accept len: ") else 0
    i = max(data.rfind(b"Decode batch") if has("Decode batch") else -1,
            data.rfind(b"Prefill batch") if has("Prefill batch") else -1)
    if i >= 0:
        start, end = _line_at(data, i)
        line = data[start:end]
        for rx, attr, k in _SAMPLED_RE:
            getattr(fig, attr).add_many(*_read_re(rx, line, k))
    done: set[str] = set()
    buf: list[_Bytes] = []
    if has("Avg prompt throughput: "):
        done = _vllm_throughput(fig, data, buf, label_at)
    spec_done = False
    if has(SPEC_MARKERS[1]) and _vllm_spec(fig, data, buf, has(SPEC_MARKERS[2]), label_at):
        done.add("Mean acceptance length: ")
        spec_done = True
    for (label, attr, k), (rx, _, _) in zip(_SPARSE, _SPARSE_RE, strict=True):
        if label not in done and has(label):
            at = label_at.get(label) if label_at else None
            if at is not None:
                getattr(fig, attr).add_many(*_read_at(data, at, len(label), k))
            else:
                getattr(fig, attr).add_many(*_read_re(rx, data, k))
    markers = tuple(m.encode() for m in SPEC_MARKERS if (sg if m == SPEC_MARKERS[0] else has(m)))
    if markers:
        _spec_lines(fig, data, source, line0, sg, spec_done, nl, markers, label_at, present)


def _spec_lines(
    fig: ServingFigures, data: bytes | bytearray, source: str, line0: int, sg: int,
    read: bool,
    nl: Any, markers: tuple[bytes, ...], label_at: dict[str, Any] | None = None,
    present: frozenset[str] | None = None,
) -> None:
    known = label_at or {}
    vl = sum(len(known[m.decode()]) if m.decode() in known else data.count(m)
             for m in markers if m != _BMARKERS[0])
    fig.spec_reports += sg + vl
    if vl and not read:
        # vLLM's report lines (a few per minute): read one by one
        def find(rx: re.Pattern[bytes]) -> list[Any]:
            return _findall_at(rx, data, present, label_at)

        rates = [float(v) / 100.0 if pct else float(v) for v, pct in find(_RATE)]
        fig.accept_rate.add_many(len(rates), sum(rates), None)
        for rx in (_ACCEPTED, _V0_COUNTS):
            for a, d in find(rx):
                fig.accepted += int(a)
                fig.drafted += int(d)
        for s in find(_V0_STEPS):
            fig.positions = max(fig.positions or 0, int(s))
        for p in find(_PER_POS):
            n = len(_NUM_B.findall(p))
            fig.positions = max(fig.positions or 0, n)

    def number(start: int) -> int:
        if nl is not None:
            import numpy as np

            return line0 + int(np.searchsorted(nl, start, side="left")) + 1
        return line0 + data.count(b"\n", 0, start) + 1

    # evidence: the first two reports of the input and its last one
    offs = _marker_offsets_all(markers, label_at)
    if len(fig.first) < 2:
        pos = 0
        while len(fig.first) < 2:
            hits = _finds(data, markers, offs, pos)
            if not hits:
                break
            start, end = _line_at(data, min(hits))
            fig.first.append(SpecLine(source, number(start), _text(data[start:end])))
            pos = end + 1
    i = _rfind_last(data, markers, offs)
    start, end = _line_at(data, i)
    fig.last = SpecLine(source, number(start), _text(data[start:end]))


# the label every match of each report regex starts with (labels(): the scanner reports
# where they occur)
_REPORT_LABEL = {
    _RATE: "Draft acceptance rate", _ACCEPTED: "Accepted: ", _V0_COUNTS: "Number of ",
    _V0_STEPS: "Number of ", _PER_POS: "Per-position acceptance rate: ",
}


def _findall_at(
    rx: re.Pattern[bytes], data: bytes | bytearray, present: frozenset[str] | None,
    label_at: dict[str, Any] | None,
) -> list[Any]:
    """``rx.findall(data)``, from the offsets of the label its matches start with when
    the caller's scanner found them (``present``: the labels found; ``label_at``: their
    offsets): a match at each offset past the last match's end, as ``findall`` scans."""
    label = _REPORT_LABEL[rx]
    if present is None or label_at is None:
        return rx.findall(data)
    if label not in present:
        return []
    at = label_at.get(label)
    if at is None:  # (found more often than the scanner keeps offsets)
        return rx.findall(data)
    out: list[Any] = []
    end = 0
    many = rx.groups > 1
    match = rx.match
    for p in at.tolist():
        if p < end:
            continue
        m = match(data, p)
        if m is not None:
            out.append(m.groups() if many else m.group(1))
            end = m.end()
    return out


def _text(line: bytes | bytearray) -> str:
    from diag.parse.text import decode

    return decode(line)[0]


def _line_at(data: bytes | bytearray, i: int) -> tuple[int, int]:
    start = data.rfind(b"\n", 0, i) + 1
    end = data.find(b"\n", i)
    return start, len(data) if end < 0 else end


def spec_positions(chunk: bytes | bytearray, present: Iterable[str] = SPEC_MARKERS,
                   label_at: dict[str, Any] | None = None) -> list[int]:
    """Byte offsets in ``chunk`` of its first two and its last spec-decoding report line:
    the lines that can be evidence (the prefilter makes them records, as the line-by-line
    path does, so that their time stamps are settled alike). ``present``: the markers
    that occur in it (the others are not looked for); ``label_at``: where labels occur
    (label -> sorted start offsets), when the caller's scanner found them."""
    markers = [m.encode() for m in SPEC_MARKERS if m in present]
    out: list[int] = []
    if not markers:
        return out
    offs = _marker_offsets_all(markers, label_at)
    pos = 0
    for _ in range(2):
        hits = _finds(chunk, markers, offs, pos)
        if not hits:
            break
        i = min(hits)
        out.append(i)
        nl = chunk.find(b"\n", i)
        if nl < 0:
            break
        pos = nl + 1
    if out:
        out.append(_rfind_last(chunk, markers, offs))
    return out


def _marker_offsets_all(
    markers: Sequence[bytes], label_at: dict[str, Any] | None
) -> list[Any] | None:
    """(speed) Each marker's sorted offsets in the chunk, from the scanner's ``label_at``
    when it has them for every marker (else None: ``find`` / ``rfind`` over the chunk)."""
    if not label_at:
        return None
    out = []
    for m in markers:
        at = label_at.get(m.decode())
        if at is None or not len(at):
            return None
        out.append(at)
    return out


def _finds(
    data: bytes | bytearray, markers: Sequence[bytes], offs: list[Any] | None, pos: int
) -> list[int]:
    """The first offset at or past ``pos`` of each marker found there (``data.find``)."""
    if offs is None:
        return [i for i in (data.find(m, pos) for m in markers) if i >= 0]
    import numpy as np

    out = []
    for at in offs:
        k = int(np.searchsorted(at, pos, side="left"))
        if k < len(at):
            out.append(int(at[k]))
    return out


def _rfind_last(data: bytes | bytearray, markers: Sequence[bytes], offs: list[Any] | None) -> int:
    """The last offset of any of the markers (``max(data.rfind(m) ...)``)."""
    if offs is None:
        return max(data.rfind(m) for m in markers)
    return max(int(at[-1]) for at in offs)


# ---------------------------------------------------------------------------
# numbers after a label, in numpy

_BMARKERS = tuple(m.encode() for m in SPEC_MARKERS)
# (int digits, fraction digits) of the forms read in numpy; any other goes through ``re``
_FORMS = ((1, 2), (2, 2), (1, 1), (2, 1), (3, 2), (1, 3), (3, 1), (1, 0), (2, 0), (3, 0))


def _find_label(arr: Any, labels: Sequence[bytes]) -> list[Any]:
    """Offsets (unsorted) of each of ``labels`` (all with the same first 4 bytes) in the
    bytes ``arr`` (numpy uint8): one 4-byte-word compare per alignment, the rest of each
    label checked byte by byte at the hits."""
    import numpy as np

    size = len(arr)
    key = int.from_bytes(labels[0][:4], "little")
    hits = []
    for k in range(4):
        words = (size - k) // 4
        if words > 0:
            hits.append(np.flatnonzero(arr[k : k + 4 * words].view("<u4") == key) * 4 + k)
    both = np.concatenate(hits) if hits else np.empty(0, dtype=np.int64)
    out = []
    for lab in labels:
        p = both[both + len(lab) <= size]
        for j in range(4, len(lab)):
            p = p[arr[p + j] == lab[j]]
        out.append(p)
    return out


def _numbers_at(arr: Any, data: bytes | bytearray, q: Any) -> Any:
    """The numbers (``[0-9]{1,12}(\\.[0-9]{1,8})?``, as ``re`` reads them) starting at the
    offsets ``q``; NaN where there is none. The common forms in numpy (the value is the
    digits as an integer over a power of ten: the correctly rounded float, as float()
    gives), the rest through ``re``."""
    import numpy as np

    size = len(arr)
    out = np.full(len(q), np.nan)
    rest = np.arange(len(q))
    for a, b in _FORMS:
        if not len(rest):
            break
        qq = q[rest]
        width = a + (b + 1 if b else 0)
        # bytes at qq .. qq+width+1 (a byte past the end reads as a space)
        cols = []
        for j in range(width + 2):
            idx = qq + j
            inside = idx < size
            c = arr[np.minimum(idx, size - 1)].astype(np.int16) - 48
            cols.append(np.where(inside, c, -16))
        dig = [(c >= 0) & (c <= 9) for c in cols]
        m = np.ones(len(qq), dtype=bool)
        for j in range(a):
            m &= dig[j]
        if b:
            m &= cols[a] == -2  # "."
            for j in range(a + 1, width):
                m &= dig[j]
            m &= ~dig[width]
        else:
            # no fraction: the number ends here and no ".<digit>" follows
            m &= ~dig[a] & ~((cols[a] == -2) & dig[a + 1])
        if not m.any():
            continue
        mant = np.zeros(len(qq), dtype=np.int64)
        for j in range(width):
            if b and j == a:
                continue
            mant = mant * 10 + cols[j]
        vals = mant / float(10**b)
        out[rest[m]] = vals[m]
        rest = rest[~m]
    for i in rest.tolist():
        hit = _NUM_B.match(data, int(q[i]))
        if hit:
            out[i] = float(hit.group(0))
    return out


def _label_numbers(
    arr: Any, data: bytes | bytearray, labels: Sequence[bytes], at: list[Any] | None = None
) -> list[Any]:
    """For each label, the numbers right after its occurrences (NaN-free float64);
    ``at``: the labels' offsets, when the caller has them (in :func:`_find_label`'s order).
    With diag's compiled scanner, when a number follows every occurrence, the numbers are
    read as one line form (its "num" step reads what :func:`_numbers_at` reads, each
    value as ``float()`` reads it: the same column)."""
    import numpy as np

    from diag.parse import native

    nat = native.loaded()
    out = []
    for lab, pos in zip(labels, _find_label(arr, labels) if at is None else at, strict=True):
        if nat is not None and len(pos) >= _FORM_AT_LEAST:
            cols = nat.form(data, pos + len(lab), ["num"])
            if cols is not None:
                out.append(cols[0])
                continue
        vals = _numbers_at(arr, data, pos + len(lab))
        out.append(vals[~np.isnan(vals)])
    return out

