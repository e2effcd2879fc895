"""Property tests: no input makes the parser raise anything but a DiagError."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.analyze import analyze
from diag.errors import DiagError
from diag.parse.config import parse_config_message
from diag.parse.grammars import parse_line
from diag.parse.records import SourceParser, freeze, resolve_years
from diag.parse.text import split_physical, strip_ansi

FRAGMENTS = [
    "[2025-06-23 15:06:10 TP6] ", "[04:40:55 DP1 TP0 EP3] ",
    "INFO 06-22 02:54:47 [gpu_worker.py:232] ",
    "(VllmWorker rank=3 pid=1090) ", "(RayWorkerWrapper pid=1, ip=10.0.0.2) ", "ERROR ",
    "Traceback (most recent call last):", '  File "x.py", line 1, in f', "    recv (zmq.py:1)",
    "Process 187: sglang::scheduler_TP0", 'Thread 0x7F1B0C1FF640 (idle): "MainThread"',
    "Loading safetensors checkpoint shards:  50% Completed | 2/4 [02:56<02:57, 88.81s/it]",
    "server_args=ServerArgs(tp_size=", "non-default args: {'a': [", "\r", "\n", "\x1b[0;36m",
    "^[[0m", "[1;36m", "\x00", "\xff", "│ ", "bk;t=1 ", "2025-05-16T13:12:16.6Z ", "svc  | ",
    "node:1:1 [0] NCCL WARN x", "[rank0]:[E1130 16:18:44.1 x.cpp:1] ", "INFO:     ",
    "Load weight end.", "Capture cuda graph begin.", "Prefill batch. #new-seq: 1",
    "The server is fired up and ready to roll!", "12-31 23:59:59", "99-99 99:99:99",
]

log_like = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=60
).map(lambda parts: "".join(parts).encode("utf-8", errors="surrogatepass"))


def _analyze_bytes(data: bytes, prefilter: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "fuzz.log"
        p.write_bytes(data)
        try:
            a = analyze([p], prefilter=prefilter)
        except DiagError as exc:
            assert exc.message
            return
        assert a.records >= 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    _analyze_bytes(data, prefilter=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_like)
def test_log_like_bytes_never_raise_either_path(data: bytes) -> None:
    _analyze_bytes(data, prefilter=False)
    _analyze_bytes(data, prefilter=True)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_lines_never_raise(text: str) -> None:
    for piece in split_physical(strip_ansi(text)):
        p = parse_line(piece)
        assert isinstance(p.message, str)
    sp = SourceParser("x")
    for i, line in enumerate(text.split("\n"), start=1):
        sp.feed(i, line)
    resolve_years(sp.drafts, year=None, ref=None)
    for d in sp.drafts:
        freeze(d)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_config_never_raises(tail: str) -> None:
    for head in ("server_args=ServerArgs(", "server_args={", "non-default args: {",
                 "Initializing a V1 LLM engine (v0.1) with config: ", "args: Namespace("):
        raw, _ = parse_config_message(head + tail)
        assert isinstance(raw, dict)


def _summary(data: bytes, prefilter: bool) -> object:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "fuzz.log"
        p.write_bytes(data)
        try:
            a = analyze([p], prefilter=prefilter)
        except DiagError as exc:
            return ("error", type(exc).__name__)
        return (
            a.last_phase,
            [(t.rank.label, t.last_phase, t.last_ts) for t in a.ranks],
            a.log_end,
            sorted(f.id for f in a.findings),
        )


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_like)
def test_prefilter_and_full_parse_agree(data: bytes) -> None:
    assert _summary(data, prefilter=True) == _summary(data, prefilter=False)
