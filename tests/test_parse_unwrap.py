"""The one unwrapping layer: every wrapper form, once each, and the properties that make it
safe to run on every line (idempotent, clean lines untouched, wrapped = clean records)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.model import RankId
from diag.parse.grammars import parse_line
from diag.parse.records import SourceParser, freeze
from diag.parse.text import split_physical
from diag.parse.unwrap import SourceUnwrapper, detect_gutters, split_glued, unwrap_line
from diag.stacks.textdump import parse_stack_text

SG = "[2025-06-23 15:06:10 TP6] Load weight begin. avail mem=78.81 GB"
VL = "INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: 26.91 GiB"
VW = "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: out of memory"


@pytest.mark.parametrize(
    ("wrapped", "inner", "kind", "check"),
    [
        # GitHub Actions / kubectl --timestamps / docker -t
        (f"2024-01-01T00:00:00.1234567Z {SG}", SG, "timestamp",
         {"ts": dt.datetime(2024, 1, 1, 0, 0, 0, 123456)}),
        (f"2025-05-16T13:12:16.645427617Z {VL}", VL, "timestamp", {}),
        # the CRI log format (containerd / CRI-O files under /var/log/pods)
        (f"2025-01-01T00:00:00.123456789Z stdout F {VL}", VL, "timestamp", {}),
        (f"2025-01-01T00:00:00.123456789+00:00 stderr P {SG}", SG, "timestamp", {}),
        # GitLab's timestamped job log: stream tag after the stamp
        (f"2024-03-01T10:00:00.000000Z 01O {SG}", SG, "timestamp", {}),
        (f"[2024-01-01T00:00:05.123Z] {VW}", VW, "timestamp", {"ts": dt.datetime(2024, 1, 1, 0, 0, 5, 123000)}),
        ("bk;t=1785725275247 (Worker_TP0 pid=1519) INFO 08-14 12:59:46 [gpu_model_runner.py:2592] x",
         "(Worker_TP0 pid=1519) INFO 08-14 12:59:46 [gpu_model_runner.py:2592] x", "buildkite", {}),
        (f"\x1b_bk;t=1785725275247\x07{VL}", VL, "buildkite", {}),
        ("section_start:1700000000:step_script", "", "gitlab", {}),
        (f"##[group]{SG}", SG, "github-actions", {}),
        (f"sglang-kimi-k2  | {SG}", SG, "compose", {"process": "sglang-kimi-k2"}),
        (f"vllm-1  | {VW}", VW, "compose", {}),
        ("авг 18 14:15:04 llm python3[28059]: (EngineCore pid=28059) INFO 08-18 14:15:04 [core.py:1] x",
         "(EngineCore pid=28059) INFO 08-18 14:15:04 [core.py:1] x", "journald",
         {"host": "llm", "pid": 28059}),
        (f"2025-08-18T14:15:04+0300 gpu-node python3[28059]: {VL}", VL, "journald", {}),
        (f"│ {VL} │", VL, "border", {}),
        (f"2024-09-13T22:26:20,870 [INFO ] W-9000-model_1.0-stdout MODEL_LOG - {VW}", VW, "timestamp", {}),
        (f"2024-04-13 10:17:32 | INFO | stdout | {VW}", VW, "fastchat", {}),
        ('<font color="#2AA1B3"><b>(APIServer pid=128291)</b></font> INFO 03-10 16:19:26 [api_server.py:1] a &lt;b&gt;',
         "(APIServer pid=128291) INFO 03-10 16:19:26 [api_server.py:1] a <b>", "html", {}),
        ("2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Init torch distributed begin.",
         "[2025-03-07 23:50:27 TP0] Init torch distributed begin.", "python-logging", {}),
        (f"[default3]:{SG}", SG, "torchrun", {"coords": RankId(tp=3)}),
        (f"[launcher] {SG}", SG, "launcher", {}),
        (f"[1,3]<stdout>: {VL}", VL, "mpirun", {"coords": RankId(tp=3)}),
        # Google Cloud Logging's export: severity, RFC 3339 stamp
        (f"ERROR 2026-06-15T14:10:59.392125190Z {SG}", SG, "cloud-logging",
         {"ts": dt.datetime(2026, 6, 15, 14, 10, 59, 392125)}),
        ("ERROR 2026-06-15T14:10:59.392125190Z AssertionError: Committed KV cache already freed",
         "AssertionError: Committed KV cache already freed", "cloud-logging", {}),
        # nested: a compose prefix around a container stamp
        (f"svc-1  | 2025-05-16T13:12:16.645427617Z {VL}", VL, "compose", {}),
    ],
)
def test_each_wrapper(wrapped: str, inner: str, kind: str, check: dict[str, object]) -> None:
    text, w = unwrap_line(split_physical(wrapped)[0] if "\x1b" not in wrapped else wrapped)
    assert text == inner
    assert w is not None and kind in w.kinds
    for k, v in check.items():
        got = w.coords.rank() if k == "coords" and w.coords is not None else getattr(w, k)
        assert got == v, k


@pytest.mark.parametrize(
    "line",
    [
        SG, VL, VW,
        "[2025-06-16 16:07:35] Load weight end. type=MistralForCausalLM, dtype=torch.bfloat16",
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [02:56<02:57, 88.81s/it]",
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 2/2 [00:01<00:00,  1.9it/s]",
        "node-0:270:270 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>",
        "[rank1]:[W423 08:47:07.223722142 ProcessGroupGloo.cpp:727] Warning: Unable to resolve hostname",
        "I0820 02:41:20.446154 710 transfer_engine.cpp:422] Metrics reporting is disabled",
        "2026-01-17 10:49:37 | warnings | 140592998728832 | WARNING : msg",
        "2025-03-27 21:33:31,320 - INFO - flashinfer.jit: Prebuilt kernels not found",
        "2024-04-13 10:17:27,901 INFO worker.py:1752 -- Started a local Ray instance.",
        "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "INFO 2024-01-01 10:00:00 a level and a date with no T is no cloud export",
        "WARNING 12-05 10:00:00 [config.py:1] a vLLM line",
        '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
        "Thread 0x7F5E8D9FF640 (active): \"MainThread\"",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "Killed",
        "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0",
        "x",
        "",
    ],
)
def test_clean_lines_pass_through_unchanged(line: str) -> None:
    assert unwrap_line(line) == (line, None)
    assert SourceUnwrapper([line] * 5).gutters == ()


def test_source_gutters_need_most_lines() -> None:
    quoted = [f"> {SG}", f"> {VL}", "> ", f"> > {VW}"]
    assert detect_gutters(quoted) == ("quote",)
    assert detect_gutters([SG, VL, f"> {VW}", SG, VL]) == ()  # one quoted line is a message
    numbered = [f"  {i} | {x}" for i, x in enumerate([SG, VL, VW, SG], start=120)]
    assert detect_gutters(numbered) == ("line-numbers",)
    assert detect_gutters(["12 | 3.4", "13 | 5.6", "14 | 7.8"]) == ()  # a table of numbers
    labelled = [f"{i % 2}: {SG}" for i in range(6)]
    assert detect_gutters(labelled) == ("srun",)


def test_srun_labels_give_a_rank() -> None:
    sp = SourceParser("x")
    for i, r in enumerate([0, 1, 0, 1], start=1):
        sp.feed(i, f"{r}: INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: 26.91 GiB")
    assert [d.rank for d in sp.drafts] == [RankId(tp=0), RankId(tp=1)] * 2
    assert any("srun" in n for n in sp.unwrap_notes())


@pytest.mark.parametrize(
    ("glued", "parts"),
    [
        ("[2025-03-14 06:56:42 TP1] Load weight end. type=DeepseekV3ForCausalLM.[2025-03-14 06:56:46 TP0] Memory pool end.",
         2),
        # newlines turned into spaces (a paste outside a code block)
        ("[2025-03-14 06:56:42 TP1] Load weight end. [2025-03-14 06:56:46 TP0] Memory pool end. avail mem=16.08 GB",
         2),
        ("INFO 03-14 06:56:47 [gpu_worker.py:1] a INFO 03-14 06:56:48 [gpu_worker.py:2] b", 2),
        ("(VllmWorker rank=0 pid=1) INFO 03-14 06:56:47 [a.py:1] done.(VllmWorker rank=1 pid=2) INFO 03-14 06:56:47 [a.py:1] done.",
         2),
        # a traceback's source line ends in the ')' of a call, the next record glued on
        ("ERROR 06-14 21:52:16 [core.py:515]     raise CalledProcessError(retcode, cmd) "
         "ERROR 06-14 21:52:16 [core.py:515] torch._inductor.exc.InductorError: x", 2),
        # wrappers are not cuts
        ("2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Init torch distributed begin.", 1),
        # ... nor a process prefix's own ')' before its record
        ("(VllmWorker rank=1 pid=12) INFO 05-13 23:43:20 [x.py:1] hello, a message long enough", 1),
        ("(EngineCore_DP0 pid=7) ERROR 05-13 23:43:20 [core.py:1] EngineCore failed to start.", 1),
        ("(VllmWorker TP3 pid=12) INFO 05-13 23:43:20 [x.py:1] hello, a message long enough", 1),
        ("2025-05-16T13:12:16.645427617Z DEBUG 05-16 13:12:16 [core_client.py:425] x", 1),
        ("svc  | [2025-12-02 18:40:16 TP0] Prefill batch, #new-seq: 1", 1),
        ("the log said [2025-01-01 00:00:00 TP0] - quoted inside a message", 1),
    ],
)
def test_lost_newlines(glued: str, parts: int) -> None:
    got = split_glued(glued)
    assert len(got) == parts
    assert all(parse_line(p).grammar in ("sglang", "vllm", "pylog", "plain") for p in got)
    if parts > 1:
        assert {parse_line(p).grammar for p in got} <= {"sglang", "vllm"}


def test_compose_prefixes_inside_a_pyspy_dump_and_no_header() -> None:
    dump = (
        'Thread 0x7F5E8D9FF640 (active+gil): "MainThread"\n'
        "    synchronize (torch/cuda/__init__.py:985)\n"
        "    event_loop_normal (sglang/srt/managers/scheduler.py:900)\n"
        'Thread 0x7F5E8D9FF641 (idle): "Thread-1"\n'
        "    wait (threading.py:324)\n"
    )
    for text in (dump, "".join(f"sglang-1  | {ln}\n" for ln in dump.splitlines()),
                 "".join(f"> {ln}\n" for ln in dump.splitlines())):
        (proc,) = parse_stack_text(text)
        assert proc.pid is None  # the Process header is missing
        assert [(t.name, t.idle, t.owns_gil) for t in proc.threads] == [
            ("MainThread", False, True), ("Thread-1", True, False)
        ]
        assert proc.threads[0].frames[0].name == "synchronize"


# ---------------------------------------------------------------------------
# properties

CLEAN_LOG = [
    "[2025-06-23 15:06:10] server_args=ServerArgs(model_path='m', tp_size=2)",
    "[2025-06-23 15:06:11 TP0] Init torch distributed begin.",
    "[2025-06-23 15:06:11 TP1] Init torch distributed begin.",
    "node-0:270:270 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>",
    "[2025-06-23 15:06:20 TP0] Load weight begin. avail mem=78.81 GB",
    "Loading safetensors checkpoint shards:  50% Completed | 2/4 [02:56<02:57, 88.81s/it]",
    "[2025-06-23 15:07:20 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4170, in run_scheduler_process',
    "    scheduler = Scheduler(",
    "RuntimeError: CUDA error: out of memory",
    "(VllmWorker rank=1 pid=1090) INFO 06-05 06:18:13 [gpu_worker.py:1] Loading weights took 3.1 seconds",
    "(VllmWorker rank=1 pid=1090) ERROR 06-05 06:18:14 [multiproc_executor.py:470] Traceback (most recent call last):",
    '(VllmWorker rank=1 pid=1090) ERROR 06-05 06:18:14 [multiproc_executor.py:470]   File "/x/worker.py", line 1, in f',
    "INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: 26.91 GiB",
    "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
]

WRAPPERS = [
    lambda i, s: f"2024-01-01T00:00:{i % 60:02d}.1234567Z {s}",
    lambda i, s: f"2025-01-01T00:00:{i % 60:02d}.123456789Z stdout F {s}",
    lambda i, s: f"sglang-1  | {s}",
    lambda i, s: f"> {s}",
    lambda i, s: f"> > {s}",
    lambda i, s: f"{i + 100:>6} | {s}",
    lambda i, s: f"bk;t={1785725275247 + i} {s}",
    lambda i, s: f"│ {s} │",
    lambda i, s: f"авг 18 14:15:{i % 60:02d} llm python3[28059]: {s}",
    lambda i, s: f"[2024-01-01T00:00:{i % 60:02d}.123Z] {s}",
]


def _records(lines: list[str]) -> list[tuple[object, ...]]:
    sp = SourceParser("x")
    for i, ln in enumerate(lines, start=1):
        sp.feed(i, ln)
    out = []
    for d in sp.drafts:
        r = freeze(d)
        out.append((r.line, r.grammar, r.message, r.rank, r.level, r.continuation,
                    r.ts if r.grammar in ("sglang", "vllm") else None))
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(CLEAN_LOG), min_size=3, max_size=30),
    st.sampled_from(range(len(WRAPPERS))),
)
def test_a_wrapped_log_parses_to_the_same_records(lines: list[str], which: int) -> None:
    wrap = WRAPPERS[which]
    wrapped = [wrap(i, ln) for i, ln in enumerate(lines)]
    assert _records(wrapped) == _records(lines)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(CLEAN_LOG), min_size=1, max_size=30))
def test_a_clean_log_passes_through_unchanged(lines: list[str]) -> None:
    u = SourceUnwrapper(lines)
    assert u.gutters == ()
    for ln in lines:
        assert u.unwrap(ln) == (ln, None)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.builds(lambda w, i, s: WRAPPERS[w](i, s), st.sampled_from(range(len(WRAPPERS))),
                  st.integers(0, 10**6), st.sampled_from(CLEAN_LOG)),
    )
)
def test_unwrap_is_idempotent_and_never_raises(s: str) -> None:
    once, _ = unwrap_line(s)
    assert unwrap_line(once)[0] == once
    split_glued(s)
    detect_gutters([s, s, s])


def test_dump_banners_and_id_less_thread_headers() -> None:
    text = (
        "===== py-spy dump --pid 12\n"
        "Process 12: sglang::scheduler_TP0\n"
        "Python v3.10.12 (/usr/bin/python3.10)\n"
        "\n"
        'Thread (idle) "MainThread"\n'
        "    wait (threading.py:324)\n"
        "----- pid 13 (vllm) -----\n"
        "Process 13: VLLM::Worker_TP1\n"
        'Thread (active): "MainThread"\n'
        "    synchronize (torch/cuda/__init__.py:985)\n"
        "################# user@host #################\n"
    )
    procs = parse_stack_text(text)
    assert [(p.pid, p.rank) for p in procs] == [(12, RankId(tp=0)), (13, RankId(tp=1))]
    assert [(t.thread_id, t.name, t.idle) for p in procs for t in p.threads] == [
        (None, "MainThread", True), (None, "MainThread", False)
    ]


@pytest.mark.parametrize("digits", ["9" * 5000, "²³", "٣٤", "0" * 20])
def test_garbled_numbers_never_raise_through_the_whole_analysis(digits: str) -> None:
    from diag.analyze import analyze_text

    lines = [
        "[2025-06-23 15:06:10 TP0] Load weight begin. avail mem=78.81 GB",
        "Loading safetensors checkpoint shards:  38% Completed | 62/163 [00:17<00:30, ..14it/s]",
        f"Loading safetensors checkpoint shards:  38% Completed | {digits}/163 [00:17<00:30, {digits}it/s]",
        f"[2025-06-23 15:06:10 TP{digits} ATTN_CP{digits}] x",
        f"(VllmWorker rank={digits} pid={digits}) INFO 06-05 06:18:13 [gpu_worker.py:{digits}] x",
        f"node-0:{digits}:{digits} [{digits}] NCCL INFO x",
        f"[rank{digits}]:[W1222 15:01:54.{digits} ProcessGroupNCCL.cpp:1] x",
        f"2024-01-01T00:00:00.{digits}Z sglang-1  | bk;t={digits} [1,{digits}]<stdout>: x",
        f"{digits}: srun label [default{digits}]: x",
        f"Process {digits}: sglang::scheduler_TP{digits}",
        f'Thread 0x{digits} (active): "MainThread"',
        f"    forward (model.py:{digits})",
        f"Thread {digits} (idle)",
        f"[repeated {digits}x across cluster]",
    ]
    a = analyze_text("\n".join(lines))
    assert a.records


def test_a_source_says_when_most_lines_carry_a_per_line_wrapper() -> None:
    assert SourceUnwrapper([f"2024-01-01T00:00:00.1234567Z {SG}"] * 10).wrapped
    assert SourceUnwrapper([f"> sglang-1  | {SG}"] * 10).wrapped
    assert not SourceUnwrapper([SG, VL, VW] * 3 + [f"svc  | {SG}"]).wrapped
    u = SourceUnwrapper([f"> {SG}"] * 10)
    assert u.gutters == ("quote",) and not u.wrapped and not u.counts


def test_a_paste_indented_as_a_whole_loses_its_indentation() -> None:
    from diag.parse.unwrap import SourceUnwrapper, paste_indent

    lines = [
        ' (SGLangEngine pid=12589) [2026-03-25 16:16:10] INFO:     10.0.0.2:38372 - "POST /x HTTP/1.1" 200 OK',
        " (RolloutActor pid=1) ",
        " Update weights:  94%|#########4| 108/115 [01:20<00:05,  1.37it/s]",
        ' (SGLangEngine pid=12589) [2026-03-25 16:16:11] INFO:     10.0.0.2:38376 - "POST /x HTTP/1.1" 200 OK',
    ]
    assert paste_indent(lines) == " "
    u = SourceUnwrapper(lines)
    assert u.gutters[0] == "indent"
    assert u.strip_gutters(lines[0])[0].startswith("(SGLangEngine pid=12589) [2026")
    # a traceback's body is indented by itself: no paste indentation
    body = ['  File "/x/a.py", line 1, in f', "    g()", '  File "/x/b.py", line 2, in g', "    h()"]
    assert paste_indent(body) == ""
    assert paste_indent(["  (EngineCore pid=1) INFO 01-01 00:00:00 x", "no indent"]) == ""


def test_a_paste_of_one_indented_line_loses_its_indentation() -> None:
    from diag.analyze import analyze_text
    from diag.parse.unwrap import paste_indent

    # one line continues nothing: indented, it is indented as a whole (a list item's code)
    line = "  [TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    assert paste_indent([line]) == "  "
    assert analyze_text(line).last_phase == "serving"
    # a traceback's source line alone is no record: its indentation is its own
    assert paste_indent(["    self.load_model()"]) == ""


def test_an_indented_paste_under_a_quote_or_a_per_line_stamp() -> None:
    from diag.analyze import analyze_text

    body = [
        ' (SGLangEngine pid=1) [2026-03-25 16:16:10] INFO:     10.0.0.2:38372 - "GET /health HTTP/1.1" 200 OK',
        " (RolloutActor pid=2) ",
        ' (SGLangEngine pid=1) [2026-03-25 16:16:11] INFO:     10.0.0.2:38376 - "GET /health HTTP/1.1" 200 OK',
    ]
    quoted = "".join(f">{ln}\n" for ln in body) + ">\n"
    stamped = "".join(f"2026-03-25T16:16:1{i}.000000000Z {ln}\n" for i, ln in enumerate(body))
    for text in (quoted, stamped):
        assert analyze_text(text).last_phase == "listening", text


def test_a_glued_vllm_record_cut_inside_its_logger_location_is_cut_off() -> None:
    from diag.parse.unwrap import split_glued

    line = (
        "INFO 08-28 15:53:05 model_runner.py:906] Starting to load model TinyLlama/"
        "TinyLlama-1.1B-Chat-v1.0... INFO 08-28 15:53:05 weig"
    )
    assert split_glued(line)[-1] == "INFO 08-28 15:53:05 weig"


def test_a_recurring_process_prefix_cuts_a_flattened_traceback() -> None:
    # a Ray actor's traceback whose newlines were lost: each of its lines kept the prefix
    p = "(SGLangWorker pid=38138)"
    line = (
        f'38) ^^^^ {p} File "/x/model_runner.py", line 314, in initialize {p} '
        f"self.init_cuda_graphs() {p} Exception: Capture cuda graph failed {p} {p} Possible"
    )
    parts = split_glued(line)
    assert parts[0] == "38) ^^^^"
    assert parts[1] == f'{p} File "/x/model_runner.py", line 314, in initialize'
    assert f"{p} Exception: Capture cuda graph failed" in parts
    # two processes taking turns: both prefixes cut
    q = "(APIServer pid=2)"
    line = f"{p} a {p} b {p} c {q} Traceback (most recent call last): {q} File x"
    assert split_glued(line) == [f"{p} a", f"{p} b", f"{p} c", f"{q} Traceback (most recent call last):", f"{q} File x"]
    # one prefix named twice in a message is no lost newline
    once = f"{VW} (RayWorkerWrapper pid=7) and (RayWorkerWrapper pid=7) died"
    assert split_glued(once) == [once]


def test_a_name_column_before_every_line_is_a_gutter() -> None:
    body = [
        "Traceback (most recent call last):",
        '  File "/v/vllm/engine/llm_engine.py", line 422, in _initialize_kv_caches',
        "    self.model_executor.determine_num_available_blocks())",
        '  File "/v/vllm/worker/worker.py", line 249, in determine_num_available_blocks',
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    ]
    labelled = [f"server {ln}" for ln in body]
    assert detect_gutters(labelled) == ("label:server",)
    u = SourceUnwrapper(labelled)
    assert [u.unwrap(ln)[0] for ln in labelled] == body
    # never a level word, never a wrapper's own column (compose's "svc  | "), never a
    # word before lines that already read as log lines
    assert detect_gutters([f"INFO {ln}" for ln in body]) == ()
    assert detect_gutters([f"vllm-1  | {VL}"] * 4) == ()
    assert detect_gutters([VW, VW, VW]) == ()


def test_sterns_pod_and_container_columns_are_a_gutter() -> None:
    # stern's default output: "<pod> <container> <message>", two pods of one deployment,
    # empty lines keeping their columns
    from diag.analyze import analyze_text

    body = [
        "(APIServer pid=7) Traceback (most recent call last):",
        '(APIServer pid=7)   File "/usr/bin/vllm", line 8, in <module>',
        "(APIServer pid=7)     sys.exit(main())",
        '(APIServer pid=7)   File "/v/vllm/entrypoints/cli/main.py", line 54, in main',
    ]
    lines = [
        "decode-7f9c6d-abcde server ",
        "decode-7f9c6d-abcde server some library's error text",
        "decode-7f9c6d-abcde server ",
        *(f"decode-7f9c6d-xyz12 server {ln}" for ln in body),
    ]
    assert detect_gutters(lines) == ("pod:server",)
    u = SourceUnwrapper(lines)
    assert [u.unwrap(ln)[0] for ln in lines[3:]] == body
    a = analyze_text("\n".join(lines) + "\n")
    assert "python.exception" in {f.id for f in a.findings}
    assert detect_gutters([f"my-pod-0 vllm {VW}"] * 4) == ("pod:vllm",)
    # never a name with no '-' (no generated pod name), never a level word as the
    # container, never where the lines read as log lines without the columns
    from diag.parse.unwrap import _pod_gutter

    assert _pod_gutter([f"worker vllm {b}" for b in body], 3) is None
    assert _pod_gutter([f"my-pod-0 info {b}" for b in body], 3) is None
    assert _pod_gutter([f"my-pod-0 vllm {b}" for b in body], 3) == "vllm"
    assert _pod_gutter(["set-up done in 3 s", "re-run with NCCL_DEBUG=INFO"], 2) is None


def test_a_call_glued_before_a_process_prefix_is_a_lost_newline() -> None:
    # a flattened traceback: a frame's source line ends in a call, the next line's process
    # prefix follows after a space (the prefix occurs only twice, so the recurrence cut
    # does not apply)
    p = "(Worker_TP1 pid=4242) ERROR 01-02 10:00:00 [multiproc_executor.py:600]"
    line = f'{p} File "/v/x.py", line 3, in f {p} self.worker.init_x() {p} File "/v/y.py", line 9'
    parts = split_glued(line)
    assert parts[-2:] == [f"{p} self.worker.init_x()", f'{p} File "/v/y.py", line 9']
    # an outer process prefix, a wrapper's parenthesised word: never a cut
    nested = f"(APIServer pid=1) {p} hello there"
    assert split_glued(nested) == [nested]
    raylet = f"(raylet) {p} hello there"
    assert split_glued(raylet) == [raylet]


def test_a_gutter_inside_a_per_line_wrapper_comes_off() -> None:
    # a Buildkite view's bar gutter ("  | ") copied, then wrapped again by journald
    from diag.analyze import analyze_text

    stamp = "Mar 14 06:00:00 gpu-node-3 python3[28059]:   | "
    body = [
        "(EngineCore_DP0 pid=6804) ERROR 11-10 01:02:03 [core.py:700] EngineCore failed to start.",
        "(EngineCore_DP0 pid=6804) ERROR 11-10 01:02:03 [core.py:700] Traceback (most recent call"
        " last):",
        '(EngineCore_DP0 pid=6804) ERROR 11-10 01:02:03 [core.py:700]   File "/x/vllm/v1/engine/'
        'core.py", line 254, in _initialize_kv_caches',
        "(EngineCore_DP0 pid=6804) ERROR 11-10 01:02:03 [core.py:700] ValueError: No available "
        "memory for the cache blocks.",
    ]
    a = analyze_text("".join(stamp + b + "\n" for b in body))
    assert a.last_phase == "kv_cache"
    assert "python.exception" in {f.id for f in a.findings}


# --- a launcher's own prefix, learned per source ------------------------------------------

_VLLM_LINES = [
    "INFO 05-12 10:11:12 [__init__.py:239] Automatically detected platform cuda.",
    "INFO 05-12 10:11:14 [api_server.py:1043] vLLM API server version 0.8.5",
    "Traceback (most recent call last):",
    '  File "/x/vllm/v1/engine/core.py", line 390, in run_engine_core',
    "    engine_core = EngineCoreProc(*args, **kwargs)",
    "RuntimeError: boom",
]


@pytest.mark.parametrize(
    "make",
    [
        lambda i: "vLLM STDOUT: ",
        lambda i: "worker-1 >> ",
        lambda i: f"2025-03-01 10:00:{i:02d}.123  >> ",
    ],
)
def test_a_launchers_prefix_of_one_shape_is_a_gutter(make: Callable[[int], str]) -> None:
    lines = [make(i) + ln for i, ln in enumerate(_VLLM_LINES)]
    u = SourceUnwrapper(lines)
    assert [g for g in u.gutters if g.startswith("prefix:")]
    assert [u.strip_gutters(ln)[0] for ln in lines] == _VLLM_LINES


@pytest.mark.parametrize(
    "lines",
    [
        _VLLM_LINES,  # no prefix at all
        # progress bars share their label: it is no prefix
        [f"Loading safetensors checkpoint shards:  {p}% Completed | {p}/100 [00:01<00:02]"
         for p in range(10, 90, 10)] + _VLLM_LINES[:2],
        # a process or rank prefix is the framework's own attribution
        [f"(VllmWorker TP{i % 2} pid=12{i}) {ln}" for i, ln in enumerate(_VLLM_LINES)],
        [f"[rank{i % 2}]: {ln}" for i, ln in enumerate(_VLLM_LINES)],
    ],
)
def test_no_prefix_gutter_where_none_was_added(lines: list[str]) -> None:
    assert not [g for g in SourceUnwrapper(lines).gutters if g.startswith("prefix:")]


_HIP_MESSAGE = [
    "torch.AcceleratorError: HIP error: no kernel image is available for execution on the device",
    "HIP kernel errors might be asynchronously reported at some other API call",
    "For debugging consider passing AMD_SERIALIZE_KERNEL=3",
    "Compile with `TORCH_USE_HIP_DSA` to enable device-side assertions.",
]


def test_the_same_prefix_before_every_line_is_a_gutter_when_little_else_is_known() -> None:
    # an error's message lines under a launcher's prefix: one line of four reads as an
    # exception once it is off; the prefix on every line makes it the wrapper's
    lines = ["vLLM STDOUT: " + ln for ln in _HIP_MESSAGE]
    u = SourceUnwrapper(lines)
    assert [u.strip_gutters(ln)[0] for ln in lines] == _HIP_MESSAGE
    # the same on all but one line, with so little known after it, is no gutter
    mixed = [*lines[:3], _HIP_MESSAGE[3]]
    assert not [g for g in SourceUnwrapper(mixed).gutters if g.startswith("prefix:")]
    # and a prefix after which nothing reads better is none either
    prose = ["Note: " + ln for ln in _HIP_MESSAGE[1:]]
    assert not [g for g in SourceUnwrapper(prose).gutters if g.startswith("prefix:")]


# a short paste's lines in formats _FRAMEWORK_HEAD does not spell out, that the grammars
# read: SGLang 0.1-0.3's time-only stamp, Python logging's default (flashinfer's JIT
# logger), glog (Mooncake, NIXL)
_OTHER_HEADS = [
    "[23:17:01 TP7] Memory pool end. avail mem=18.66 GB",
    "[23:17:01 TP3] Capture cuda graph begin. This can take up to several minutes.",
    "2025-06-25 11:25:58,633 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT",
    "I0625 11:25:58.633210 12345 transfer_engine.cpp:86] Transfer Engine starting",
]


@pytest.mark.parametrize("prefix", ["job-7 STDOUT: ", "worker-1 >> "])
def test_a_launchers_prefix_before_lines_the_grammars_read_is_a_gutter(prefix: str) -> None:
    # a few lines: the prefix is learned from what the grammars read after it, not only
    # from the heads of the frameworks' newest formats
    lines = [prefix + ln for ln in _OTHER_HEADS]
    u = SourceUnwrapper(lines)
    assert [u.strip_gutters(ln)[0] for ln in lines] == _OTHER_HEADS
    # a launcher's own ISO stamp before them is its prefix (a generic stamp is no head)
    stamped = [f"2025-03-01 10:00:{i:02d}.123 >> " + ln for i, ln in enumerate(_OTHER_HEADS)]
    u = SourceUnwrapper(stamped)
    assert [u.strip_gutters(ln)[0] for ln in stamped] == _OTHER_HEADS


def test_markdown_escaped_pipes_are_unescaped() -> None:
    # a log pasted into a markdown table cell: every "|" written "\\|"
    line = "Loading safetensors checkpoint shards:  59% Completed \\| 10/17 [00:59<00:43,  6.20s/it]"
    out, w = unwrap_line(line)
    assert out == "Loading safetensors checkpoint shards:  59% Completed | 10/17 [00:59<00:43,  6.20s/it]"
    assert w is not None and "markdown-escape" in w.kinds


@pytest.mark.parametrize(
    ("line", "inner"),
    [
        # LocalAI's backend output: a logfmt record whose line= field is the child's line
        ('Jul 22 17:17:15 DEBUG GRPC stderr id="gemma-127.0.0.1:41633" line="OSError: Could not '
         'load this library: /v/torchcodec/libtorchcodec_core4.so" caller={caller.file="/b/process.go"  caller.L=219 } ',
         "OSError: Could not load this library: /v/torchcodec/libtorchcodec_core4.so"),
        ('Jul 22 17:17:15 DEBUG GRPC stderr id="x" line="  File \\"/v/torch/_ops.py\\", line 1505, in load_library"',
         '  File "/v/torch/_ops.py", line 1505, in load_library'),
        # slog / logrus: time=... level=... msg="..."
        ('time=2025-01-01T00:00:00Z level=INFO msg="INFO 01-01 10:00:00 [api_server.py:1] up"',
         "INFO 01-01 10:00:00 [api_server.py:1] up"),
    ],
)
def test_a_logfmt_records_line_field_is_the_line(line: str, inner: str) -> None:
    out, w = unwrap_line(line)
    assert out == inner and w is not None and "logfmt" in w.kinds


def test_a_msg_field_in_a_framework_line_is_no_wrapper() -> None:
    line = 'INFO 05-12 10:11:12 [serving.py:1] request failed msg="bad input"'
    assert unwrap_line(line) == (line, None)


def test_a_retyped_paste_reads_as_the_ascii_it_stands_for() -> None:
    """No-break spaces and typographic quotes (a rendered page, a chat app's auto-correct)
    are read as the spaces and quotes the log printed: frames stay frames."""
    from diag.analyze import analyze_text

    clean = "\n".join(
        [
            "ERROR 06-05 06:18:13 [core.py:700] EngineCore failed to start.",
            "ERROR 06-05 06:18:13 [core.py:700] Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 210, in load_model',
            "    self.model_runner.load_model(eep_scale_up=eep_scale_up)",
            "RuntimeError: can't load 'model.safetensors'",
        ]
    )
    retyped = (
        clean.replace('"/', "\u201c/").replace('",', "\u201d,").replace("'", "\u2019")
        .replace("  File", "\u00a0\u00a0File").replace("    self", "\u00a0\u00a0\u00a0\u00a0self")
    )
    assert retyped != clean
    a, b = analyze_text(clean), analyze_text(retyped)
    assert a.last_phase == b.last_phase == "weights_load"
    assert sorted(f.id for f in a.findings) == sorted(f.id for f in b.findings)
    assert "python.exception" in {f.id for f in b.findings}
    # each of them one character for one: offsets and wrap widths stay
    from diag.parse.text import fold_typography

    assert fold_typography(retyped) == clean
    assert fold_typography("\u201cx\u201d\u00a0") == "\"x\" "


def test_a_launcher_tag_under_the_paste_indentation_is_found_under_a_second_wrapper() -> None:
    """A faulthandler window whose every line carries a launcher's tag after the paste's
    indentation (``  [srv]   File "..."``) loses indentation and tag the same way when the
    paste also went through a per-line wrapper (a CI stamp, a compose prefix) or a quote:
    the indentation is taken only where such a gutter follows it, so the frames keep their
    own."""
    from diag.analyze import analyze_text

    frames = [
        '  [srv]   File "/x/site-packages/torch/cuda/__init__.py", line 954 in synchronize',
        '  [srv]   File "/x/vllm/v1/worker/gpu_model_runner.py", line 2210 in execute_model',
        '  [srv]   File "/x/vllm/v1/worker/gpu_worker.py", line 388 in execute_model',
        '  [srv]   File "/x/vllm/v1/executor/multiproc_executor.py", line 601 in worker_busy_loop',
    ]
    clean = analyze_text("\n".join(frames) + "\n").stack_processes
    assert [p.wait_site for p in clean] == ["stack.cuda_sync"]
    wrapped = {
        "compose": [f"vllm-1  | {ln}" for ln in frames],
        "stamp": [f"2025-03-01T10:00:0{i}.1234567Z {ln}" for i, ln in enumerate(frames)],
        "quote": [f"> {ln}" for ln in frames],
    }
    for how, lines in wrapped.items():
        got = analyze_text("\n".join(lines) + "\n").stack_processes
        assert [p.wait_site for p in got] == ["stack.cuda_sync"], how
        assert [f.name for f in got[0].threads[0].frames] == [
            f.name for f in clean[0].threads[0].frames], how
    # an indented block under a wrapper with no gutter after the indentation keeps it
    u = SourceUnwrapper([f"vllm-1  |   File \"/x/a.py\", line {i} in f" for i in range(6)])
    assert u.unwrap('vllm-1  |   File "/x/a.py", line 1 in f')[0] == '  File "/x/a.py", line 1 in f'


def test_numbers_on_lines_of_their_own_are_a_gutter() -> None:
    # a code viewer's copy: each line's number on a line of its own before it; a blank
    # text line leaves two numbers in a row
    log = [
        "[2025-06-25 11:25:58] Load weight begin. avail mem=70.1 GB",
        "[2025-06-25 11:26:40] Load weight end. type=LlamaForCausalLM, mem usage=15.0 GB",
        "",
        "[2025-06-25 11:26:41] KV Cache is allocated. #tokens: 400000",
        "[2025-06-25 11:26:50] Capture cuda graph begin. This can take up to several minutes.",
    ]
    copied = [part for i, ln in enumerate(log) for part in (str(120 + i), ln)]
    u = SourceUnwrapper(copied)
    assert "number-lines" in u.gutters
    assert [t for t in (u.unwrap(x)[0] for x in copied) if t] == [x for x in log if x]
    # a bare count or two among the lines is the log's own text, not a gutter
    counted = ["Number of GPUs:", "8", "Ranks started:", "8", *log]
    assert "number-lines" not in detect_gutters([x for x in counted if x])
    # numbers that do not count up by one are data
    data = [part for i, ln in enumerate(log) if ln for part in (str(7 * i + 3), ln)]
    assert "number-lines" not in detect_gutters(data)


def test_terminal_panes_side_by_side_and_a_records_margin() -> None:
    # k9s / a tmux split copied: two panes' borders meet as '││' between their texts
    left = "INFO 06-24 23:08:54 [__init__.py:239] Automatically detected platform cpu."
    assert split_physical(f" {left}      \u2502\u2502 Stream closed EOF for x (vllm) ") == [
        f" {left}",
        "Stream closed EOF for x (vllm) ",
    ]
    # one box border is a rich traceback's or a table's, not two panes
    assert split_physical("\u2502 /x/vllm/worker.py:12 in f \u2502") == [
        "\u2502 /x/vllm/worker.py:12 in f \u2502"
    ]
    # one space before a record's head: the record, at its margin
    p = parse_line(f" {left}")
    assert p.grammar == "vllm" and p.message == "Automatically detected platform cpu."
    # more: a continuation or an indented paste (its gutter is the source's to take off)
    assert parse_line(f"    {left}").grammar == "plain"
    assert parse_line(f"  {left}").grammar == "plain"
