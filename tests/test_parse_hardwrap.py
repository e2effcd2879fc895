"""Hard-wrapped pastes are joined back (diag.parse.unwrap.detect_wrap + SourceParser), and
lines dated only by a wrapper's stamp are put on the framework's clock
(diag.parse.records.align_wrapper_clock)."""

from __future__ import annotations

import datetime as dt

import pytest

from diag.analyze import analyze_text
from diag.parse.records import SourceParser, _starts_or_bar, align_wrapper_clock
from diag.parse.unwrap import detect_wrap, wrap_breaks

SG = [
    "[2025-06-23 15:06:10 TP0] Init torch distributed begin.",
    "[2025-06-23 15:06:12 TP0] Init torch distributed ends. mem usage=0.35 GB, elapsed=2.1 s",
    "[2025-06-23 15:06:13 TP0] Load weight begin. avail mem=78.50 GiB",
    "[2025-06-23 15:07:40 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
    "avail mem=61.20 GB, mem usage=17.30 GB, elapsed=87.0 s",
    "[2025-06-23 15:07:41 TP0] KV Cache is allocated. #tokens: 412345, K size: 23.50 GB, "
    "V size: 23.50 GB",
    "[2025-06-23 15:07:41 TP0] Memory pool end. avail mem=13.20 GB",
    "[2025-06-23 15:07:42 TP0] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=13.10 GB",
    "[2025-06-23 15:08:30 TP0] Capture cuda graph end. Time elapsed: 48.12 s. mem usage=1.20 GB. "
    "avail mem=11.90 GB.",
    "[2025-06-23 15:08:31 TP0] max_total_num_tokens=412345, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=4096, context_len=40960",
]


def _hard_wrap(lines: list[str], width: int) -> list[str]:
    out: list[str] = []
    for ln in lines:
        out.extend([ln[i : i + width] for i in range(0, len(ln), width)] or [""])
    return out


def _parsed(lines: list[str]) -> SourceParser:
    sp = SourceParser("x.log")
    for i, ln in enumerate(lines, 1):
        sp.feed(i, ln)
    return sp


def _messages(lines: list[str]) -> list[str]:
    return [d.p.message for d in _parsed(lines).drafts]


@pytest.mark.parametrize("width", [60, 80, 100])
def test_hard_wrapped_lines_are_joined_back(width: int) -> None:
    assert _messages(_hard_wrap(SG, width)) == _messages(SG)


def test_joined_record_keeps_the_first_physical_line_number() -> None:
    wrapped = _hard_wrap(SG, 80)
    sp = SourceParser("x.log")
    for i, ln in enumerate(wrapped, 1):
        sp.feed(i, ln)
    starts = [i for i, ln in enumerate(wrapped, 1) if ln.startswith("[2025")]
    assert [d.line for d in sp.drafts] == starts


def test_quoted_after_wrapping_is_joined_too() -> None:
    quoted = [f"> {ln}" for ln in _hard_wrap(SG, 80)]
    assert _messages(quoted) == _messages(SG)


def test_longest_lines_followed_by_indented_details_are_no_wrap() -> None:
    # a message and its indented detail line, many times: the longest lines are all one
    # width, but what follows them is indented, not the middle of a word
    lines = []
    for i in range(30):
        lines.append(
            f"[2026-02-23 01:00:{i % 60:02d} TP0] WARNING x.py:1: queue is long ({i + 10})"
        )
        lines.append(f"    detail line {i}")
    assert _messages(lines) == [f"queue is long ({i + 10})" for i in range(30)]


def test_a_block_pasted_twice_is_no_wrap_at_its_longest_line() -> None:
    # a short paste that holds vLLM's plugin notice twice: its longest line, a sentence
    # ended, comes twice before a sentence that starts, at a width no terminal has
    block = [
        "Available plugins for group vllm.platform_plugins:",
        "- ascend -> vllm_ascend:register",
        "All plugins in this group will be loaded. Set `VLLM_PLUGINS` to control which plugins "
        "to load.",
        "Platform plugin ascend is activated",
    ]
    assert detect_wrap(block * 2, _starts_or_bar) is None
    assert analyze_text("\n".join(block * 2)).last_phase == "platform"
    # the same at a terminal's width is still read as a wrap
    wide = [*block[:2], block[2].ljust(99) + ".", block[3]]
    assert detect_wrap(wide * 2, _starts_or_bar) is not None


def test_lines_padded_to_the_terminal_width_are_no_wrap() -> None:
    lines = [ln[:78].ljust(100) for ln in SG] + ["  File \"a.py\", line 1, in f".ljust(100)]
    assert detect_wrap(lines, _starts_or_bar) is None


def test_a_wider_line_later_turns_joining_off() -> None:
    wrapped = _hard_wrap(SG, 60) * 5  # more than the 60 lines the wrap is decided on
    full = "x" * 60
    later = [SG[3], full, "plain text after a full-width line"]
    msgs = _messages(wrapped + later)
    assert msgs[: len(SG)] == _messages(SG)
    assert msgs[-3:] == [_messages([SG[3]])[0], full, "plain text after a full-width line"]


def test_fold_s_breaks_at_spaces_are_joined_back() -> None:
    out: list[str] = []
    for ln in SG:
        while len(ln) > 70:
            cut = ln.rfind(" ", 0, 70) + 1
            out.append(ln[:cut])
            ln = ln[cut:]
        out.append(ln)
    assert _messages(out) == _messages(SG)


def test_wrap_breaks() -> None:
    assert wrap_breaks("x" * 80, (80, False))
    assert not wrap_breaks("x" * 78 + "  ", (80, False))
    assert not wrap_breaks("x" * 70 + " ", (80, False))
    assert wrap_breaks("x" * 70 + " ", (80, True))


def test_wrapped_log_gives_the_clean_answer() -> None:
    clean = analyze_text("\n".join(SG) + "\n")
    wrapped = analyze_text("\n".join(_hard_wrap(SG, 80)) + "\n")
    assert wrapped.last_phase == clean.last_phase == "cuda_graph"
    assert {f.id for f in wrapped.findings} == {f.id for f in clean.findings}


# -- wrapper clocks ------------------------------------------------------------------------


def _stamped(offset_h: int) -> list[str]:
    """kubectl --timestamps in UTC around SGLang lines in local time (UTC+offset)."""
    out = []
    for ln in SG:
        local = dt.datetime.fromisoformat(ln[1:20])
        out.append(f"{local - dt.timedelta(hours=offset_h):%Y-%m-%dT%H:%M:%S}.123456789Z {ln}")
    last = dt.datetime.fromisoformat(SG[-1][1:20]) - dt.timedelta(hours=offset_h)
    out.append(f"{last:%Y-%m-%dT%H:%M:%S}.500000000Z some uncatalogued line of the runtime")
    return out


def test_wrapper_only_lines_move_onto_the_framework_clock() -> None:
    sp = SourceParser("x.log")
    for i, ln in enumerate(_stamped(8), 1):
        sp.feed(i, ln)
    note = align_wrapper_clock(sp.drafts)
    assert note is not None and "+8 h" in note
    last = sp.drafts[-1].p.ts
    assert last is not None and last.hour == 15  # the framework's 15:08, not UTC 07:08


def test_a_wrapper_clock_hours_off_is_no_silence() -> None:
    clean = analyze_text("\n".join(SG) + "\n")
    stamped = analyze_text("\n".join(_stamped(-5)) + "\n")
    assert {f.id for f in stamped.findings} == {f.id for f in clean.findings}


def test_unrelated_clocks_are_left_alone() -> None:
    sp = SourceParser("x.log")
    for i, ln in enumerate(SG, 1):
        sp.feed(i, f"2019-01-0{1 + i % 3}T00:00:{i:02d}.0Z {ln}")  # no common offset
    assert align_wrapper_clock(sp.drafts) is None


# -- per-line wrappers that a wrap or a partial paste left half-there ------------------------


def test_box_border_without_its_closing_half() -> None:
    from diag.parse.unwrap import unwrap_line

    text, w = unwrap_line("│ INFO 03-21 20:19:24 [launcher.py:34] Route: /version, Methods: GET")
    assert text.startswith("INFO 03-21") and w is not None and w.kinds == ["border"]
    # a bare "|" needs both borders (a table row, a compose prefix are something else)
    assert unwrap_line("| INFO 03-21 20:19:24 [launcher.py:34] Route")[1] is None


def test_a_quote_before_a_record_goes_where_few_lines_are_quoted() -> None:
    lines = [
        "The server prints this and stops:",
        "> [2025-07-11 17:40:04 TP0] Load weight begin. avail mem=70.00 GB",
        "after that nothing happens, and the second node shows:",
        "some more prose",
        "> [2025-07-11 17:41:04 TP0] Load weight end. type=X, avail mem=50.00 GB",
        "any idea?",
    ]
    msgs = _messages(lines)
    assert "Load weight begin. avail mem=70.00 GB" in msgs
    assert "Load weight end. type=X, avail mem=50.00 GB" in msgs
    assert "> just a quoted sentence" in _messages(["> just a quoted sentence", "x", "y"])


def test_a_log_copied_with_its_html_entities() -> None:
    clean = [
        "[2025-03-14 06:55:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 3, in load_model',
        "    raise ValueError(\"can't load <weights>\")",
        "ValueError: can't load <weights>",
    ]
    esc = [
        ln.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
        .replace(">", "&gt;").replace("'", "&#39;")
        for ln in clean
    ]
    sp_c, sp_e = SourceParser("c"), SourceParser("e")
    for i, (a, b) in enumerate(zip(clean, esc, strict=True), 1):
        sp_c.feed(i, a)
        sp_e.feed(i, b)
    assert [(d.p.message, d.continuation) for d in sp_e.drafts] == [
        (d.p.message, d.continuation) for d in sp_c.drafts
    ]
    from diag.parse.unwrap import unescape_entities

    assert unescape_entities("GET /x?a=1&copy=2;") == "GET /x?a=1&copy=2;"


def test_a_traceback_that_lost_its_indentation_stays_one_record() -> None:
    lines = [
        "[2025-03-14 06:55:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        'File "/x/sglang/srt/managers/scheduler.py", line 10, in run_scheduler_process',
        "scheduler.event_loop_normal()",
        'File "/x/sglang/srt/managers/scheduler.py", line 20, in event_loop_normal',
        "result = self.run_batch(batch)",
        "^^^^^^^^^^^^^^^^^^^^^",
        "RuntimeError: CUDA error: out of memory",
    ]
    sp = _parsed(lines)
    assert len(sp.drafts) == 1
    assert sp.drafts[0].continuation[-1] == "RuntimeError: CUDA error: out of memory"


def test_one_full_line_that_ends_a_statement_before_a_sentence_is_no_wrap() -> None:
    """One line exactly a terminal's width (256) is weak evidence: where it ends a
    statement and the next line starts a sentence of its own, they are two lines
    (SGLang 0.2: a CUDA error line, then "Exception in ModelTpServer:")."""
    head = "CUDA Error: no kernel image is available for execution on the device (209) "
    tail = " at function cudaLaunchKernel((void*)kernel, nblks, nthrs, args, smem_size, stream)"
    first = head + "/tmp/build/" + "x" * (256 - len(head) - len(tail) - 11) + tail
    assert len(first) == 256
    lines = [first, "Exception in ModelTpServer:", "Traceback (most recent call last):"]
    assert detect_wrap(lines, _starts_or_bar) is None
    # the same width with the next line starting mid-text is one wrapped line
    cut = [first[:-1], first[-1] + "and the rest of it", "Traceback (most recent call last):"]
    cut[0] = cut[0] + "x"
    assert detect_wrap(cut, _starts_or_bar) == (256, False)


def test_one_message_repeated_as_the_longest_line_is_no_wrap() -> None:
    """CUTLASS prints "Error: Failed to initialize the TMA descriptor 801" and then the
    descriptor's fields, once per failed call: the same line is the longest each time, and
    the field after it is no rest of it. Narrower than any terminal, one repeated line is
    no wrap; the same message wrapped at a terminal's width still is."""
    block = ["Error: Failed to initialize the TMA descriptor 801",
             "TMA Desc Addr:   0xfffe8d7f6a80", "format         9", "dim            4"]
    assert detect_wrap(block * 4, _starts_or_bar) is None
    long = "Error: Failed to initialize the TMA descriptor 801 " + "x" * 60 + " tail"
    wrapped = [piece for _ in range(4) for piece in (long[:80], long[80:])] + ["end"]
    assert detect_wrap(wrapped, _starts_or_bar) == (80, False)


@pytest.mark.parametrize(("first", "rest"), [
    # fold -s: broken after the last space that fits, the space kept on the first piece
    ('  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/model_executor/model_runner.py",'
     " line 99, in ", "__init__"),
    # ... or stripped by the paste
    ('  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/model_executor/model_runner.py",'
     " line 99, in", "__init__"),
    # a hard wrap mid-path
    ('  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/model_execu',
     'tor/model_runner.py", line 99, in __init__'),
    ('  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/model_executor/model_runner.py", ',
     "line 99, in __init__"),
    # broken right after "File" (a long prefix before it)
    ("  File ", '"/opt/venv/lib/python3.10/site-packages/sglang/srt/model_executor/'
     'model_runner.py", line 99, in __init__'),
])
def test_a_frame_line_a_wrap_broke_is_joined_back(first: str, rest: str) -> None:
    """A frame line broken by a wrap is whole again when its two pieces make one frame
    line by the grammar (``File "...", line N, in name``), even where the paste has too
    few wrapped lines for the wrap to be detected: the frames then give the phase."""
    lines = [
        "[2024-08-27 23:31:19 TP2] Exception in run_tp_server:",
        "Traceback (most recent call last):",
        '  File "/sgl/srt/managers/tp_worker.py", line 99, in __init__',
        "    self.model_runner = ModelRunner(",
        first,
        rest,
        "    self.load_model()",
    ]
    sp = _parsed(lines)
    d = sp.drafts[-1]  # the traceback's record
    assert d.p.message.startswith("Traceback") and len(d.continuation) == 4
    assert d.continuation[2].endswith('model_runner.py", line 99, in __init__')
    assert analyze_text("\n".join(lines), "x.log").last_phase == "weights_load"


def test_a_whole_frame_line_takes_no_line_after_it() -> None:
    """Only a frame line the grammar shows broken takes the next line: a whole one, and
    a line that only looks like a piece, are left alone."""
    lines = [
        "[2024-08-27 23:31:19 TP2] Exception in run_tp_server:",
        "Traceback (most recent call last):",
        '  File "/x/tp_worker.py", line 99, in __init__',
        "load_model",
        '  File "/x/model_runner.py", line 7, in',
        "RuntimeError: boom",
    ]
    sp = _parsed(lines)
    texts = [t for d in sp.drafts for t in (d.p.message, *d.continuation)]
    assert "load_model" in texts and '  File "/x/tp_worker.py", line 99, in __init__' in texts
    assert not any("in RuntimeError" in t for t in texts)


def test_a_fold_s_break_right_after_an_indentation_is_joined_back() -> None:
    """fold -s breaks after the last space that fits: under a long prefix, that can be the
    last space of a caret line's or source line's indentation. The piece then ends in
    several spaces; the next line (a word too long to have fitted) is its rest."""
    prefix = "(EngineCore_0 pid=1284) ERROR 10-14 17:48:53 [core.py:700] "
    clean = [
        prefix + "EngineCore failed to start.",
        prefix + "Traceback (most recent call last):",
        prefix + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
        "line 691, in run_engine_core",
        prefix + "    engine_core = EngineCoreProc(*args, **kwargs)",
        prefix + "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        prefix + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
        "line 492, in __init__",
        prefix + "    super().__init__(vllm_config, executor_class, log_stats,",
        prefix + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
        "line 89, in __init__",
        prefix + "    self._initialize_kv_caches(vllm_config)",
        prefix + "RuntimeError: boom",
    ]
    folded: list[str] = []
    for ln in clean:  # fold -s -w 100
        while len(ln) > 100:
            cut = ln.rfind(" ", 0, 100)
            cut = 100 if cut <= 0 else cut + 1
            folded.append(ln[:cut])
            ln = ln[cut:]
        folded.append(ln)
    assert any(p.endswith("  ") and p.strip() for p in folded)  # a break after indentation
    assert _messages(folded) == _messages(clean)
    assert analyze_text("\n".join(folded), "x.log").last_phase == "kv_cache"
