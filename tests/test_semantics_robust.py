"""Semantics that do not hang on one wording: frames of several releases -> phases, a
traceback whose header and exception line both fell outside the excerpt, a last line the
excerpt cut mid-word."""

from __future__ import annotations

import pytest

from diag.analyze import analyze_text
from diag.frames import frame_phase


@pytest.mark.parametrize(
    ("path", "func", "phase"),
    [
        # SGLang 0.5.x DeepGEMM wrapper (sglang/srt/layers/deep_gemm_wrapper/compile_utils.py)
        ("/x/sglang/srt/layers/deep_gemm_wrapper/compile_utils.py",
         "_maybe_compile_deep_gemm_one_type_all", "compile"),
        ("/x/sglang/srt/layers/quantization/deep_gemm_wrapper/compile_utils.py",
         "deep_gemm_execution_hook", "compile"),
        ("/x/sglang/srt/compilation/backend.py", "compile", "compile"),
        ("/x/vllm/v1/worker/tpu_model_runner.py", "_precompile_backbone", "compile"),
        # any frame of the loaders' modules, any release
        ("/x/vllm/model_executor/model_loader/default_loader.py", "_get_weights_iterator",
         "weights_load"),
        ("/x/sglang/srt/model_loader/loader.py", "_load_weights", "weights_load"),
        ("/x/vllm/model_executor/layers/linear.py", "create_weights", "weights_load"),
        ("/x/vllm/v1/worker/gpu_model_runner.py", "_allocate_kv_cache_tensors", "kv_cache"),
        ("/x/sglang/srt/managers/tp_worker.py", "alloc_memory_pool", "kv_cache"),
        ("/x/vllm/v1/worker/gpu_model_runner.py", "_capture_cudagraphs", "cuda_graph"),
        ("/x/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
         "capture_one_shape", "cuda_graph"),
        ("/x/vllm/distributed/device_communicators/custom_all_reduce.py", "__init__",
         "dist_init"),
        ("/x/sglang/srt/distributed/parallel_state.py", "_create_global_tcp_store",
         "dist_init"),
    ],
)
def test_frames_of_several_releases(path: str, func: str, phase: str) -> None:
    assert frame_phase(path, func) == phase


def test_forward_frames_name_no_later_phase() -> None:
    # a model's or a layer's forward runs in the profile, the capture and serving alike:
    # it names none of them, only that the model was loaded (a lower bound, which later
    # frames pass)
    assert frame_phase("/x/vllm/model_executor/models/llama.py", "forward") == "weights_load"
    assert frame_phase("/x/sglang/srt/layers/linear.py", "forward") == "weights_load"
    assert frame_phase("/x/sglang/srt/layers/moe/moe_runner/deep_gemm.py", "run") is None


_SG = "/usr/lib/python3.12/site-packages/sglang/srt/layers/deep_gemm_wrapper/compile_utils.py"
FRAMES_ONLY = (
    f'  File "{_SG}", line 332, in deep_gemm_execution_hook\n'
    "    _maybe_compile_deep_gemm_one_type_all(kernel_type, n, k, num_groups)\n"
    f'  File "{_SG}", line 297, in _maybe_compile_deep_gemm_one_type_all\n'
    "    thread_map(compile_func, collected_configs, max_workers=4)\n"
    '  File "/usr/lib/tqdm/contrib/concurrent.py", line 69, in thread_map\n'
    "    return _executor_map(ThreadPoolExecutor, fn, *iterables, **tqdm_kwargs)\n"
)


def test_traceback_middle_only_is_a_cut_traceback() -> None:
    a = analyze_text(FRAMES_ONLY)
    assert a.last_phase == "compile"
    f = {x.id: x for x in a.findings}["python.exception"]
    assert f.evidence[0].line == 1


def test_traceback_cut_to_a_bare_prefix_at_the_end() -> None:
    text = "".join(
        f"(EngineCore_DP0 pid=2211) {ln}\n" for ln in FRAMES_ONLY.splitlines()
    ) + "(EngineCore_DP0 pid=221"
    assert "python.exception" in {x.id for x in analyze_text(text).findings}


def test_window_that_starts_on_a_caret_line_under_a_vllm_prefix() -> None:
    """The first line of the window is a traceback's caret marker (the frames below it are
    its continuation lines, one vLLM ERROR record): still a traceback cut off."""
    pre = "(RayWorkerWrapper pid=392) ERROR 03-02 04:57:41 worker_base.py:581] "
    body = [
        "                 ^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/x/vllm/model_executor/model_loader/__init__.py", line 14, in get_model',
        "    return loader.load_model(vllm_config=vllm_config)",
        '  File "/x/vllm/model_executor/model_loader/loader.py", line 125, in _initialize_model',
        "    return model_class(vllm_config=vllm_config, prefix=prefix)",
    ]
    a = analyze_text("".join(pre + ln + "\n" for ln in body))
    assert a.last_phase == "weights_load"
    assert "python.exception" in {x.id for x in a.findings}


def test_indented_lines_alone_are_no_traceback() -> None:
    text = "    some indented text\n    more of it\n"
    a = analyze_text("[2025-01-01 10:00:00] Load weight begin. avail mem=10 GB\n" + text)
    assert "python.exception" not in {x.id for x in a.findings}


_CAP = "Capture cuda graph"
MUSA = "\n".join([
    f"[2026-03-17 07:16:40 TP0] {_CAP} begin. This can take up to several minutes.",
    f"[2026-03-17 07:16:40 TP1] {_CAP} begin. This can take up to several minutes.",
    f"[2026-03-17 07:16:45 TP0] {_CAP} end. Time elapsed: 5.00 s. mem usage=0.50 GB.",
    f"[2026-03-17 07:16:45 TP1] {_CAP} end. Time elapsed: 5.00 s. mem usage=0.50 GB.",
    "[2026-03-17 07:16:51 TP0] Compiling a graph for dynamic shape takes 3.38 s",
    "[2026-03-17 07:16:51 TP1] Compiling a graph for dynamic shape ta",
])


def test_a_last_line_cut_mid_word_reads_as_the_other_ranks_whole_line() -> None:
    ids = {f.id for f in analyze_text(MUSA).findings}
    assert "startup.stalled" not in ids  # TP0's line says the step ended ("takes 3.38 s")
    assert "startup.cut_excerpt" in ids
    begun = MUSA.rsplit("\n", 1)[0] + "\n[2026-03-17 07:16:51 TP1] Compiling a graph for"
    assert "startup.stalled" not in {f.id for f in analyze_text(begun).findings}


def test_process_prefixed_records_glued_by_spaces_are_cut_again() -> None:
    from diag.parse.unwrap import split_glued

    a = "(EngineCore_0 pid=1399) INFO 08-19 14:58:40 [kv_cache_utils.py:853] Max concurrency: 2.1x"
    b = "(EngineCore_0 pid=1399) INFO 08-19 14:58:40 [core.py:215] init engine took 1.06 seconds"
    assert split_glued(f"{a} {b}") == [a, b]
    # never after a wrapper's "]: " (journald) or an outer prefix's ")" (Ray nested in vLLM)
    j = f"авг 18 14:15:04 llm python3[28059]: {b}"
    assert split_glued(j) == [j]
    nested = f"(EngineCore_DP0 pid=2557) {b}"
    assert split_glued(nested) == [nested]


@pytest.mark.parametrize(
    "line",
    [
        "EZ9999: [PID: 696742] 2025-10-31-21:35:03.992.057 The error from device(chipId:7)",
        "[gpu-node-1:12796:1:13303] Caught signal 11 (Segmentation fault: invalid permissions)",
    ],
)
def test_runtime_error_formats_are_log_lines(line: str) -> None:
    a = analyze_text(line + "\n==== backtrace (tid:  13303) ====\n 0  /x/libucs.so.0(+0x1)\n")
    assert a.records >= 1


def test_several_engine_stages_take_the_failing_stages_phase() -> None:
    w = "(Worker pid=22) [Stage-0]"
    text = "\n".join([
        f"{w} INFO 03-12 08:22:20 [parallel_state.py:1165] world_size=1 rank=0 local_rank=0 "
        "distributed_init_method=tcp://127.0.0.1:1 backend=nccl",
        f"{w} ERROR 03-12 08:22:28 [multiproc_executor.py:800] ValueError: Free memory on "
        "device cuda:0 (111.99/139.8 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 132.81 GiB).",
        "[Stage-1] INFO 03-12 08:22:28 [diffusion_model_runner.py:133] Model loading took "
        "26.4738 GiB and 13.178609 seconds",
    ])
    a = analyze_text(text)
    assert a.last_phase == "dist_init"  # stage 0's, not stage 1's weights_load
    assert any("stage 0" in n for n in a.notes)
    one = analyze_text(text.replace("[Stage-1]", "[Stage-0]"))
    assert one.last_phase == "weights_load"  # one engine: its furthest phase


def test_a_last_line_cut_inside_the_vllm_prefix_is_a_fragment() -> None:
    p = "(VllmWorkerProcess pid=563) ERROR 04-12 05:35:29 [multiproc_worker_utils.py:238]"
    text = "\n".join([
        f'{p}   File "/x/vllm/worker/worker.py", line 229, in determine_num_available_blocks',
        f"{p}     self.model_runner.profile_run()",
        f'{p}   File "/x/vllm/worker/model_runner.py", line 1243, in profile_run',
        f"{p}     self._dummy_run(max_num_batched_tokens, max_num_seqs)",
        "(VllmWorkerProcess pid=563) ERROR 0",
    ])
    a = analyze_text(text)
    assert a.last_phase == "kv_cache"
    f = {x.id: x for x in a.findings}["python.exception"]
    assert f.evidence[0].line == 1  # where the visible traceback starts


def test_an_engine_inside_another_program_that_is_ready_is_no_cut_startup() -> None:
    """vLLM's ready summary from a Ray actor of another program (an LLM instance in an RL
    trainer) with no API-server line: startup ended at warmup; no port was to be opened."""
    pre = "(LLMRayActor pid=123434) INFO 04-09 01:52:{:02d} [{}] {}\n"
    lines = [
        ("kv_cache_utils.py:566", "GPU KV cache size: 5,854,768 tokens"),
        ("gpu_model_runner.py:1534", "Graph capturing finished in 33 secs, took 1.27 GiB"),
        ("core.py:151", "init engine (profile, create kv cache, warmup model) took 47.83 seconds"),
    ]
    text = "".join(pre.format(i, f, m) for i, (f, m) in enumerate(lines))
    a = analyze_text(text)
    assert a.last_phase == "warmup"
    assert not {"startup.cut_excerpt", "startup.stalled", "startup.no_listen_port"} & {
        x.id for x in a.findings
    }
    # the same lines from vLLM's own engine-core process: a server cut before it listened
    own = analyze_text(text.replace("LLMRayActor", "EngineCore_DP0"))
    assert "startup.cut_excerpt" in {x.id for x in own.findings}


def _tb(frames: list[tuple[str, str]], exc: str) -> str:
    pre = "ERROR 05-23 09:31:47 [core.py:396] "
    out = [pre + "EngineCore failed to start.", pre + "Traceback (most recent call last):"]
    for path, func in frames:
        out += [pre + f'  File "/x/site-packages/{path}", line 1, in {func}', pre + "    call()"]
    return "\n".join([*out, pre + exc]) + "\n"


def test_a_traceback_inside_the_compiler_is_a_compile_error() -> None:
    compiling = [
        ("vllm/v1/worker/gpu_model_runner.py", "profile_run"),
        ("torch/_dynamo/eval_frame.py", "_fn"),
        ("vllm/compilation/backends.py", "call_module"),
        ("torch/fx/interpreter.py", "run_node"),
    ]
    a = analyze_text(_tb(compiling, "RuntimeError: something in a submodule"))
    assert a.last_phase == "compile"
    assert {"compile.error", "python.exception"} <= {f.id for f in a.findings}
    # the compiled model running (Dynamo's eval_frame wrapper only) is no compile failure
    running = [
        ("vllm/v1/worker/gpu_model_runner.py", "profile_run"),
        ("torch/_dynamo/eval_frame.py", "_fn"),
        ("vllm/model_executor/layers/linear.py", "forward"),
    ]
    b = analyze_text(_tb(running, "RuntimeError: something in a layer"))
    assert "compile.error" not in {f.id for f in b.findings}


def test_torch_distributed_gather_frame_proves_dist_init() -> None:
    assert frame_phase("/x/site-packages/torch/distributed/distributed_c10d.py", "gather") == (
        "dist_init"
    )
    assert frame_phase("/x/site-packages/vllm/model_executor/layers/sampler.py", "gather") is None


def test_records_glued_on_one_line_keep_their_own_events() -> None:
    """A paste that lost its newlines: the excerpt's cut last record shares its physical
    line with a 'Load weight begin' record; the step start is not the last line's."""
    text = (
        "[2025-03-07 20:46:29 TP0] Init torch distributed ends. mem usage=0.22 GB\n"
        "[2025-03-07 20:46:29 TP0] Load weight begin. avail mem=77.81 GB "
        "[2025-03-07 20:46:29 TP0] The following error message 'operation scheduled before "
        "its operands' can be ignored. [2025-03-07 20:46:29 TP1] The following\n"
    )
    ids = {f.id for f in analyze_text(text).findings}
    assert "startup.stalled" not in ids and "startup.cut_excerpt" in ids


# --- session 9 (gather s10): mechanisms, each with a case that must NOT change ----------


def test_traceback_cut_inside_the_next_lines_journald_head() -> None:
    """A window whose last line is only the start of the head every line carries
    (``Aug 19 1`` under ``Aug 19 18:34:30 host unit[pid]: ...``) is a cut line."""
    head = "Aug 19 18:34:30 host vllm[8707]: (APIServer pid=8707) "
    text = "".join(head + ln + "\n" for ln in FRAMES_ONLY.splitlines()) + "Aug 19 1"
    assert "python.exception" in {x.id for x in analyze_text(text).findings}
    # a short last line that the line before does not begin with is not that
    other = "".join(head + ln + "\n" for ln in FRAMES_ONLY.splitlines()) + "RuntimeError: boom"
    assert {x.id for x in analyze_text(other).findings} >= {"python.exception"}


def test_a_source_line_names_the_call_where_the_next_frame_was_cut() -> None:
    """`scheduler.event_loop_overlap()` under run_scheduler_process: the serving loop had
    started, though the paste cut the traceback before its frame."""
    text = (
        "[2025-10-29 11:00:44] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 2883, '
        "in run_scheduler_process\n"
        "    scheduler.event_loop_overlap()\n"
        '  File "venv/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 120, in '
        "decorate_context\n"
        "    return func(*args, **kwargs)\n"
    )
    assert analyze_text(text).last_phase == "serving"
    # the same traceback whose source line calls nothing a phase names stays at launch
    plain = text.replace("scheduler.event_loop_overlap()", "scheduler.something_else()")
    assert analyze_text(plain).last_phase == "launch"


@pytest.mark.parametrize(
    ("note", "stalled"),
    [
        ("....and no response anymore.", True),
        ("stuck here forever", True),
        ("it hangs here", True),
        ("nothing happens after this", True),
        ("Then I pressed enter.", False),
        ("RuntimeError: stuck", False),  # an exception line, not a note
        ("    hangs = 3", False),  # indented: code, not a note
        ("hang check passed", False),
    ],
)
def test_a_reporters_note_that_it_hung_is_a_reason(note: str, stalled: bool) -> None:
    """LABELS.md: the thread's own account decides where the log is silent; a note the
    reporter wrote under the pasted log is that account, in the text."""
    text = (
        "INFO 05-29 21:12:40 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with "
        "config: model='m', tokenizer='m'\n"
        "INFO 05-29 21:12:41 selector.py:27] Using FlashAttention-2 backend.\n"
        "\n"
        f"{note}\n"
    )
    ids = {x.id for x in analyze_text(text).findings}
    assert ("startup.stalled" in ids) is stalled


def test_python_warnings_lines_are_log_lines() -> None:
    """CPython's warnings.formatwarning form (`file.py:12: UserWarning: msg`): a text of
    them is a log, not 'not a log'."""
    text = (
        "/x/sglang/srt/layers/quantization/awq/awq.py:52: UserWarning: Only CUDA, HIP and XPU "
        "support AWQ currently.\n"
        '  warnings.warn(f"Only CUDA, HIP and XPU support AWQ currently.")\n'
        "/x/sglang/bench_one_batch.py:13: FutureWarning: `sglang.bench_one_batch` is deprecated\n"
        "  warnings.warn(\n"
    )
    a = analyze_text(text)
    assert a.last_phase == "launch"
    assert not [f for f in a.findings if f.severity == "error"]


def test_tab_separated_head_fields_read_as_spaces() -> None:
    line = "(APIServer\tpid=443)\tINFO 06-26 18:12:56\t[launcher.py:46]\tRoute: /v1/models, Methods: GET\n"  # noqa: E501
    assert analyze_text(line * 3).last_phase == "listening"


def test_shell_job_report_with_a_core_is_a_kill() -> None:
    text = (
        "INFO 05-29 21:12:41 selector.py:27] Using FlashAttention-2 backend.\n"
        "./start.sh: line 22:  5255 Aborted                    (core dumped) vllm serve m\n"
    )
    assert "process.killed" in {x.id for x in analyze_text(text).findings}


_HANDLER_TB = (
    "Traceback (most recent call last):\n"
    '  File "/x/sglang/srt/entrypoints/openai/serving_base.py", line 45, in handle_request\n'
    "    return await self._handle_non_streaming_request(\n"
    '  File "/x/sglang/srt/entrypoints/openai/serving_chat.py", line 785, in _build_chat_response\n'
    "    raise ValueError(\n"
    "ValueError: Expected 2 output messages (reasoning and final), but got 3.\n"
)


@pytest.mark.parametrize("stamp", ["", "2025-03-01T10:00:00.123456789Z stdout F "])
def test_a_request_handlers_logged_exception_does_not_end_the_run(stamp: str) -> None:
    """SGLang's serving_base.handle_request logs `Error in request: ...` with its traceback
    and answers that request with a 500; the server goes on (diag/data/handled_errors.tsv,
    from the sources' logger.exception calls in entrypoints/)."""
    text = "[2025-08-08 16:52:59] Error in request: Expected 2 output messages\n" + _HANDLER_TB
    text = "".join(stamp + ln + "\n" for ln in text.splitlines())
    assert "python.exception" not in {x.id for x in analyze_text(text).findings}
    crash = "[2025-08-08 16:52:59 TP0] Scheduler hit an exception: " + _HANDLER_TB
    assert "python.exception" in {x.id for x in analyze_text(crash).findings}


def test_the_handled_messages_are_generated_from_the_table() -> None:
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "gen_handled_errors", root / "tools" / "gen_handled_errors.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = (root / "diag" / "data" / "handled_errors.tsv").read_text(encoding="utf-8")
    assert data == mod.render(), "run tools/gen_handled_errors.py"
    assert "Error\\ in\\ request:" in data


def test_a_source_line_cut_inside_the_callee_name_at_the_end() -> None:
    text = (
        "[2026-04-23 07:32:10 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"  # noqa: E501
        '  File "/x/sglang/srt/managers/scheduler.py", line 3277, in run_scheduler_process\n'
        "    scheduler.eve"
    )
    assert analyze_text(text).last_phase == "serving"
    # the same cut in the middle of a paste names nothing
    assert analyze_text(text + "\nINFO: something else\n").last_phase == "launch"
