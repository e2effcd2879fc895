"""Each line grammar, with lines taken from real SGLang / vLLM logs (bug reports, lab runs)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import datetime as dt

import pytest

from diag.model import RankId
from diag.parse.grammars import parse_line
from diag.parse.text import split_physical, strip_ansi

# (line, grammar, rank label or None, level, message starts with, extra checks)
CASES = [
    # SGLang: time + rank tags in any subset/order
    (
        "[2025-06-23 15:06:10 TP6] Load weight begin. avail mem=78.81 GB",
        "sglang", "TP6", None, "Load weight begin.", {"ts": dt.datetime(2025, 6, 23, 15, 6, 10)},
    ),
    (
        "[2026-05-07 05:56:32 DP3 TP3 EP3] Capture cuda graph begin. This can take up to "
        "several minutes. avail mem=13.56 GB",
        "sglang", "DP3 TP3 EP3", None, "Capture cuda graph begin.", {},
    ),
    ("[2025-07-02 07:41:58 DP0 TP0] Load weight end.", "sglang", "DP0 TP0", None, "Load", {}),
    ("[2025-03-01 10:00:00 TP2 PP0] Init torch distributed begin.", "sglang", "PP0 TP2", None,
     "Init torch", {}),
    ("[2025-03-01 10:00:00 DP4 PP0 TP4] Memory pool end.", "sglang", "DP4 PP0 TP4", None,
     "Memory pool end", {}),
    ("[2026-06-20 11:33:56 PP1] Scheduler hit an exception: Traceback (most recent call last):",
     "sglang", "PP1", None, "Scheduler hit an exception", {}),
    ("[2025-01-01 00:00:00 NP1 TP9] Init torch distributed begin.", "sglang", "node1 TP9", None,
     "Init", {}),
    # no rank tag (launcher / single rank)
    ("[2025-06-16 16:07:35] Load weight end. type=MistralForCausalLM, dtype=torch.bfloat16",
     "sglang", None, None, "Load weight end.", {}),
    # 2024 time-only form
    ("[04:40:55 TP0] Decode batch. #running-req: 1, #token: 75", "sglang", "TP0", None,
     "Decode batch.", {"dateless": True}),
    # newer: level and file after the time
    ("[2025-12-18 07:58:50] INFO trace.py:52: opentelemetry package is not installed, tracing "
     "disabled", "sglang", None, "INFO", "opentelemetry", {"logger_file": "trace.py"}),
    # paste lost the leading '['
    ("2026-06-20 11:33:56 PP1] Running FlashInfer autotune with cache: /data/x.json",
     "sglang", "PP1", None, "Running FlashInfer autotune", {}),
    # vLLM new (bracketed file) and old
    ("INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: 26.91 GiB",
     "vllm", None, "INFO", "Available KV cache memory", {"logger_file": "gpu_worker.py"}),
    ("INFO 07-08 11:50:03 custom_all_reduce_utils.py:202] generating GPU P2P access cache in "
     "/root/.config/vllm/gpu_p2p_access_cache_for_0,1.json",
     "vllm", None, "INFO", "generating GPU P2P", {"yearless": True}),
    ("DEBUG 08-09 21:13:56 [compilation/decorators.py:221] Start compiling function",
     "vllm", None, "DEBUG", "Start compiling", {"logger_file": "compilation/decorators.py"}),
    # a markdown view escaped each `]` and the paste kept it as `[]`
    ("(EngineCore_DP0 pid=7) ERROR 11-02 08:15:31 [scheduler.py:412[] Dumping scheduler "
     "output for model execution: x", "vllm", None, "ERROR", "Dumping scheduler output",
     {"logger_file": "scheduler.py", "pid": 7}),
    # vLLM process prefixes
    ("(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] "
     "RuntimeError: CUDA error: out of memory",
     "vllm", "TP3", "ERROR", "RuntimeError: CUDA error", {"pid": 1090, "process": "VllmWorker"}),
    # vLLM 0.10.1's worker prefix: the name, a space, its PP/TP tags
    ("(VllmWorker TP1 pid=812) INFO 08-20 10:04:11 [gpu_worker.py:276] Available KV cache "
     "memory: 30.1 GiB", "vllm", "TP1", "INFO", "Available KV cache", {"pid": 812}),
    ("(VllmWorker PP1_TP0 pid=813) WARNING 08-20 10:04:11 [utils.py:1] w", "vllm", "PP1 TP0",
     "WARNING", "w", {"process": "VllmWorker PP1_TP0"}),
    ("(Worker_TP0 pid=1700) INFO 08-14 12:59:46 [gpu_model_runner.py:2592] Model loading took "
     "15.2 GiB and 4.1 seconds", "vllm", "TP0", "INFO", "Model loading took", {}),
    ("(Worker_DP1_TP0_EP2 pid=44) INFO 08-14 12:59:46 [core.py:1] x", "vllm", "DP1 TP0 EP2",
     "INFO", "x", {}),
    ("(Worker_PP0 pid=23220) ERROR 07-15 21:01:01 [multiproc_executor.py:1007] torch."
     "AcceleratorError: CUDA error: an illegal memory access was encountered",
     "vllm", "PP0", "ERROR", "torch.AcceleratorError", {}),
    ("(EngineCore_0 pid=5839) INFO 03-10 16:19:26 [core.py:58] Initializing a V1 LLM engine",
     "vllm", None, "INFO", "Initializing a V1", {"process": "EngineCore_0", "pid": 5839}),
    ("(APIServer pid=34165) INFO 03-10 16:19:26 [api_server.py:1] vLLM API server version 0.9.1",
     "vllm", None, "INFO", "vLLM API server version", {"process": "APIServer"}),
    ("(VllmWorkerProcess pid=3773) INFO 07-10 03:56:15 pynccl.py:63] vLLM is using nccl==2.20.5",
     "vllm", None, "INFO", "vLLM is using nccl", {"process": "VllmWorkerProcess", "pid": 3773}),
    # Ray
    ("(RayWorkerWrapper pid=24524, ip=10.0.128.18) INFO 07-28 13:55:33 model_runner.py:680] "
     "Starting to load model deepseek-ai/DeepSeek-Coder-V2-Instruct...",
     "vllm", None, "INFO", "Starting to load model", {"host": "10.0.128.18", "pid": 24524}),
    ("(RayWorkerWrapper pid=880) ERROR 04-16 01:01:44 [worker_base.py:620] Error executing method "
     "'init_device'. This might cause deadlock in distributed execution. [repeated 6x across "
     "cluster]", "vllm", None, "ERROR", "Error executing method 'init_device'", {}),
    ("(EngineCore_DP0 pid=2557) (RayWorkerWrapper pid=4194) WARNING 05-01 10:00:00 [ray.py:1] w",
     "vllm", None, "WARNING", "w", {"pid": 4194, "process": "RayWorkerWrapper"}),
    ("2024-04-13 10:17:27,901 INFO worker.py:1752 -- Started a local Ray instance.",
     "ray", None, "INFO", "Started a local Ray instance", {}),
    # uvicorn
    ("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", "uvicorn", None,
     "INFO", "Uvicorn running on", {}),
    ('(APIServer pid=1) INFO:     192.168.1.108:39394 - "POST /v1/chat/completions HTTP/1.1" '
     "200 OK", "uvicorn", None, "INFO", "192.168.1.108", {"pid": 1}),
    # NCCL
    ("hd03-gpu2-0031:14133:14133 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect "
     "to 169.254.20.10<43369> failed : Software caused connection abort",
     "nccl", None, "WARNING", "NCCL WARN socketStartConnect", {"pid": 14133}),
    ("node-0:270:270 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>", "nccl", None, "INFO",
     "NCCL INFO Bootstrap", {"host": "node-0"}),
    # torch c10d / glog
    ("[rank0]:[E1130 16:18:44.000693711 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE)",
     "glog", "TP0", "ERROR", "[Rank 0] Watchdog caught", {"logger_file": "ProcessGroupNCCL.cpp"}),
    ("I0820 02:41:20.446154 710 transfer_engine.cpp:422] Metrics reporting is disabled",
     "glog", None, "INFO", "Metrics reporting", {"pid": 710}),
    # LMCache's own logger in an engine's process (its level padded, its place in parentheses)
    ("(VllmWorker TP2 pid=90) [2025-08-11 09:00:01,204] LMCache WARN : Local cpu memory under "
     "pressure (cache_engine.py:140:lmcache.v1.cache_engine)", "lmcache", "TP2", "WARNING",
     "Local cpu memory under pressure", {"logger_file": "cache_engine.py", "pid": 90}),
    ("[2025-08-11 09:00:01,204] LMCache INFO: Creating LMCacheEngine with config: x",
     "lmcache", None, "INFO", "Creating LMCacheEngine", {}),
    # other Python loggers
    ("2025-03-27 21:33:31,320 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT "
     "backend", "pylog", None, "INFO", "Prebuilt kernels not found", {}),
    ("2026-01-17 10:49:37 | warnings | 140592998728832 | WARNING : /ws/python/sglang/srt/layers/"
     "quantization/gguf.py:47: UserWarning: Only CUDA support GGUF quantization currently.",
     "pylog", None, "WARNING", "/ws/python/sglang", {}),
    ("2025-04-13 14:53:38 INFO 511 [pynccl.py:78] sglang is using nccl==2.25.1", "pylog", None,
     "INFO", "sglang is using nccl", {"pid": 511}),
    ("2025-03-18 10:24:40,134 - __main__ - WARNING - Attempt 56: Please wait for sglang server "
     "to become ready...", "pylog", None, "WARNING", "Attempt 56", {}),
    # wrappers around the real line
    ("2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Init torch "
     "distributed begin.", "sglang", "TP0", None, "Init torch distributed begin.", {}),
    ("sglang-kimi-k2  | [2025-12-02 18:40:16 TP0] Prefill batch, #new-seq: 1", "sglang", "TP0",
     None, "Prefill batch,", {}),
    ("eap-llm-server-on-arc  | ERROR 11-08 11:01:30 [core.py:502] EngineCore encountered a fatal "
     "error.", "vllm", None, "ERROR", "EngineCore encountered", {}),
    ("2025-05-16T13:12:16.645427617Z DEBUG 05-16 13:12:16 [core_client.py:425] x", "vllm", None,
     "DEBUG", "x", {}),
    ("авг 18 14:15:04 llm python3[28059]: (EngineCore pid=28059) INFO 08-18 14:15:04 "
     "[core.py:1] ready", "vllm", None, "INFO", "ready", {"host": "llm", "pid": 28059}),
    ("bk;t=1785725275247 (Worker_TP0 pid=1519) INFO 08-03 10:00:00 [gpu_worker.py:1] hi",
     "vllm", "TP0", "INFO", "hi", {}),
    ("│ INFO 04-23 14:48:26 [config.py:1768] Defaulting to use mp for distributed inference │",
     "vllm", None, "INFO", "Defaulting to use mp", {}),
    ("2024-09-13T22:26:20,874 [INFO ] W-9000-model_1.0-stdout MODEL_LOG - INFO 09-13 22:26:20 "
     "model_runner.py:1428] Graph capturing finished in 32 secs.", "vllm", None, "INFO",
     "Graph capturing finished", {}),
    ("2024-04-13 10:17:32 | INFO | stdout | (pid=10414) INFO 04-13 10:17:31 pynccl.py:58] "
     "Loading nccl from library libnccl.so.2", "vllm", None, "INFO", "Loading nccl",
     {"pid": 10414}),
    ('<font color="#2AA1B3"><b>(APIServer pid=128291)</b></font> INFO 11-11 12:22:01 '
     "[api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000", "vllm", None,
     "INFO", "Starting vLLM API server", {"pid": 128291}),
    ("2025-11-05T01:56:54.281615Z  INFO model_runner.init_device_graphs: Capture cuda graph end. "
     "Time elapsed: 12.80 s.   ", "tracing", None, "INFO", "Capture cuda graph end.",
     {"logger_file": "model_runner.init_device_graphs"}),
    # progress bars, stack dumps, tracebacks
    ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [02:56<02:57, 88.81s/it]",
     "progress", None, None, "Loading safetensors", {}),
    ("Capturing batches (bs=16 avail_mem=13.56 GB):  17%|█▋        | 1/6 [00:16<01:22, 16.57s/it]",
     "progress", None, None, "Capturing batches", {}),
    ("Process 88693: sglang::scheduler_PP2_TP1", "pyspy", None, None, "Process 88693", {}),
    ('Thread 0x7F1B0C1FF640 (idle): "MainThread"', "pyspy", None, None, "Thread 0x7F1B", {}),
    ("Thread 0x00007f71b9fff640 (most recent call first):", "faulthandler", None, None, "Thread",
     {}),
    ("Fatal Python error: Aborted", "faulthandler", None, None, "Fatal Python error", {}),
    ("Traceback (most recent call last):", "traceback", None, None, "Traceback", {}),
    ("Killed", "plain", None, None, "Killed", {}),
    # SGLang's prefix trimmed by the reporter to its rank tags (no time stamp)
    ("[TP2] Scheduler watchdog timeout (self.watchdog_timeout=120, self.soft=False)", "sglang",
     "TP2", None, "Scheduler watchdog timeout", {"ts": None}),
    ("[DP1 TP5 EP5] Decode batch, #running-req: 3", "sglang", "DP1 TP5 EP5", None, "Decode batch",
     {}),
    # ... but not a bracketed word or a tag with no rank in it
    ("[INFO] server started", "plain", None, None, "[INFO] server", {}),
    ("[GPU3] memory 80 GB", "plain", None, None, "[GPU3] memory", {}),
    ("[TP1]no space", "plain", None, None, "[TP1]no space", {}),
]


@pytest.mark.parametrize(("line", "grammar", "rank", "level", "msg", "extra"), CASES)
def test_grammar(
    line: str, grammar: str, rank: str | None, level: str | None, msg: str, extra: dict[str, object]
) -> None:
    p = parse_line(strip_ansi(line))
    assert p.grammar == grammar
    assert (p.rank.label if p.rank else None) == rank
    if rank is not None:
        assert p.rank_reason
    assert p.level == level
    assert p.message.startswith(msg), p.message
    for key, want in extra.items():
        assert getattr(p, key) == want, key


def test_sglang_coordinates_are_numbers() -> None:
    p = parse_line("[2025-01-01 00:00:00 DP1 PP2 TP3 EP4] x")
    assert p.rank == RankId(dp=1, pp=2, tp=3, ep=4)


def test_ray_dedup_suffix_is_counted_and_cut() -> None:
    p = parse_line(
        "(RayWorkerWrapper pid=25062, ip=10.0.128.18) INFO 07-28 13:55:28 selector.py:151] "
        "Cannot use FlashAttention-2 backend for Volta and Turing GPUs. [repeated 14x across "
        "cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log "
        "deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/"
        "configure-logging.html#log-deduplication for more options.)"
    )
    assert p.repeated == 14
    assert p.message.endswith("Turing GPUs.")


@pytest.mark.parametrize(
    "line",
    [
        "\x1b[0;36m(APIServer pid=31)\x1b[0;0m INFO 02-03 19:00:05 [api_server.py:946] Starting",
        "^[[0;36m(APIServer pid=31)^[[0;0m INFO 02-03 19:00:05 [api_server.py:946] Starting",
        "[1;36m(APIServer pid=31)[0;0m INFO 02-03 19:00:05 [api_server.py:946] Starting",
        # `cat -v` / less of a CRLF file: the carriage return in caret notation as well
        "^[[0;36m(APIServer pid=31)^[[0;0m INFO 02-03 19:00:05 [api_server.py:946] Starting^M",
    ],
)
def test_colour_codes_real_caret_and_stripped(line: str) -> None:
    p = parse_line(strip_ansi(line))
    assert p.grammar == "vllm"
    assert p.process == "APIServer"
    assert p.message == "Starting"


def test_tqdm_carriage_returns_are_separate_updates() -> None:
    line = (
        "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\r"
        "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:03,  1.0it/s]\r"
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:02<00:02,  1.0it/s]\r\n"
    )
    parts = split_physical(line)
    assert len(parts) == 3
    assert parts[-1].startswith("Loading safetensors checkpoint shards:  50%")


def test_bar_glued_to_next_line_is_split() -> None:
    line = (
        "Capturing batches (avail_mem=7.08 GB):   0%|          | 0/17 [00:00<?, ?it/s]"
        "2025-06-25 11:25:59,453 - INFO - flashinfer.jit: Loading JIT ops: batch_prefill"
    )
    parts = split_physical(line)
    assert len(parts) == 2
    assert parse_line(parts[0]).grammar == "progress"
    second = parse_line(parts[1])
    assert second.grammar == "pylog"
    assert second.message.startswith("Loading JIT ops")


def test_crlf_and_nul_are_dropped() -> None:
    assert split_physical("[2025-01-01 00:00:00 TP0] a\x00b\r") == ["[2025-01-01 00:00:00 TP0] ab"]


@pytest.mark.parametrize(
    "line",
    ["", " ", "[", "[]", "(", "(pid=)", "INFO", "INFO 99-99 99:99:99 [x.py:1] bad date",
     "[2025-13-45 25:61:61 TP0] bad", "\x1b[", "│", "a" * 10_000],
)
def test_odd_lines_never_raise(line: str) -> None:
    p = parse_line(line)
    assert isinstance(p.message, str)


def test_entries_glued_by_a_paste_are_split() -> None:
    line = (
        "[2025-03-14 06:56:42 TP1] Load weight end. type=DeepseekV3ForCausalLM."
        "[2025-03-14 06:56:46 TP0] Memory pool end. avail mem=16.08 GB"
        "INFO 03-14 06:56:47 [gpu_worker.py:1] next"
    )
    parts = split_physical(line)
    assert [parse_line(p).grammar for p in parts] == ["sglang", "sglang", "vllm"]
    assert parse_line(parts[1]).message == "Memory pool end. avail mem=16.08 GB"


@pytest.mark.parametrize(
    "line",
    [
        "2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Init torch distributed begin.",
        "(VllmWorker rank=3 pid=1090) INFO 06-05 06:18:13 [gpu_worker.py:1] x",
        "2025-05-16T13:12:16.645427617Z DEBUG 05-16 13:12:16 [core_client.py:425] x",
        "sglang-kimi-k2  | [2025-12-02 18:40:16 TP0] Prefill batch, #new-seq: 1",
    ],
)
def test_wrappers_are_not_mistaken_for_glued_entries(line: str) -> None:
    assert split_physical(line) == [line]


def test_tensorflow_xla_cpp_log_line() -> None:
    """tsl/platform/default/logging.cc's format (TensorFlow, XLA, JAX)."""
    from diag.parse.grammars import parse_line

    p = parse_line(
        "2025-11-14 12:47:54.577428: E external/local_xla/xla/stream_executor/cuda/"
        "cuda_dnn.cc:9261] Unable to register cuDNN factory: Attempting to register factory"
    )
    assert p.grammar == "tsl" and p.level == "ERROR" and p.ts is not None
    assert p.logger_file is not None and p.logger_file.endswith("cuda_dnn.cc")
    assert p.message.startswith("Unable to register cuDNN factory")


def test_a_log_of_tensorflow_lines_only_is_a_log_and_its_e_lines_no_crash() -> None:
    from diag.analyze import analyze_text

    text = (
        "2025-11-14 12:47:54.547347: I tensorflow/core/util/port.cc:113] oneDNN custom "
        "operations are on.\n"
        "2025-11-14 12:47:54.577454: E external/local_xla/xla/stream_executor/cuda/"
        "cuda_fft.cc:607] Unable to register cuFFT factory: Attempting to register factory\n"
    )
    a = analyze_text(text)
    assert a.last_phase == "launch" and not [f for f in a.findings if f.severity == "error"]


def test_sglang_stamp_then_level_colon_leaves_the_text() -> None:
    from diag.parse.grammars import parse_line as parse

    p = parse("[2026-02-26 15:56:59] ERROR:   File \"/x/configuration_auto.py\", line 1048, in __getitem__")
    assert p.level == "ERROR"
    assert p.message == '  File "/x/configuration_auto.py", line 1048, in __getitem__'
    p = parse("[2026-02-26 15:56:59] ERROR: KeyError: 'glm_moe_dsa'")
    assert (p.level, p.message) == ("ERROR", "KeyError: 'glm_moe_dsa'")


def test_python_basic_format_and_a_dated_vllm_format() -> None:
    from diag.parse.grammars import parse_line

    p = parse_line("INFO:sglang.srt.model_executor.model_runner:Load weight begin. avail mem=70 GB")
    assert (p.grammar, p.level) == ("pylog", "INFO")
    assert p.logger_file == "sglang.srt.model_executor.model_runner"
    assert p.message == "Load weight begin. avail mem=70 GB"
    # uvicorn's own "INFO:     ..." is not it (no logger name right after the colon)
    assert parse_line('INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK').grammar == "uvicorn"
    q = parse_line("INFO 2025-03-01 10:00:00 [model_runner.py:200] Load weight begin.")
    assert q.grammar == "vllm" and q.ts is not None and q.ts.year == 2025 and not q.yearless


def test_torchs_own_logger_prints_the_month_unpadded() -> None:
    """torch's c10 logger (without glog) writes ``[E207 01:29:36.73 file.cpp:616]`` for
    February 7: the line keeps its time, so the silence before it is measured."""
    from diag.analyze import analyze_text

    text = (
        "[2025-02-07 01:19:47 TP0] Load weight end. type=DeepseekV3ForCausalLM, "
        "avail mem=30.1 GB\n"
        "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran for 600000 "
        "milliseconds before timing out.\n"
    )
    a = analyze_text(text, year=2025)
    assert a.log_end is not None
    assert (a.log_end.month, a.log_end.day, a.log_end.hour, a.log_end.minute) == (2, 7, 1, 29)
    assert not any("matched no known log format" in n for n in a.notes)


@pytest.mark.parametrize(
    ("line", "level", "file", "message"),
    [
        # a logging config's bracketed fields after the time ("[%(asctime)s][%(filename)s:
        # %(lineno)d][%(levelname)s]: %(message)s")
        ("[2026-04-15 17:13:02][http_server.py:1991][INFO]: The server is fired up and ready to roll!",
         "INFO", "http_server.py", "The server is fired up and ready to roll!"),
        ("[2026-04-15 17:13:02][WARNING]: Watchdog timeout", "WARNING", None, "Watchdog timeout"),
        # a bracket that is no level stays in the message
        ("[2026-04-15 17:13:02 TP0] [x] hello", None, None, "[x] hello"),
    ],
)
def test_bracketed_level_and_file_after_the_time(
    line: str, level: str | None, file: str | None, message: str
) -> None:
    p = parse_line(line)
    assert (p.grammar, p.level, p.logger_file, p.message) == ("sglang", level, file, message)
    assert p.ts == dt.datetime(2026, 4, 15, 17, 13, 2)


def test_strip_ansi_guard_equals_the_plain_test() -> None:
    """strip_ansi's literal tests before its hint regex change nothing (random text of the
    characters the codes are made of)."""
    import random

    from diag.parse.text import _ANSI_HINT, ANSI_RE

    def plain(s: str) -> str:
        return s if _ANSI_HINT.search(s) is None else ANSI_RE.sub("", s)

    alphabet = ["\x1b", "^", "[", "m", "M", "0", "1", ";", "]", " ", "a", "\n", "(", "B", "?"]
    rnd = random.Random(11)
    for _ in range(20_000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14)))
        assert strip_ansi(s) == plain(s), repr(s)
