"""The phase catalogue: schema, sources cited, and real messages mapped to the right phase."""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

import pytest

from diag.errors import DiagError
from diag.model import PHASES, Record
from diag.phases import Catalogue, load_catalogue, parse_catalogue


def test_catalogue_is_valid_and_cites_sources() -> None:
    cat = load_catalogue()
    assert len(cat.entries) >= 40
    assert {e.phase for e in cat.entries} == set(PHASES)
    for e in cat.entries:
        assert e.source and e.version, e.id
        assert e.framework in ("sglang", "vllm", "any")


@pytest.mark.parametrize(
    "bad",
    [
        "entries: [{id: a, phase: nope, kind: mark, regex: x, framework: any, source: s, version: v}]",
        "entries: [{id: a, phase: launch, kind: sometimes, regex: x, framework: any, source: s, version: v}]",
        "entries: [{id: a, phase: launch, kind: mark, regex: '(', framework: any, source: s, version: v}]",
        "entries: [{id: a, phase: launch, kind: mark, regex: x, framework: any, source: s}]",
        "entries: [{id: a, phase: launch, kind: mark, regex: x, framework: any, source: s, version: v, extra: 1}]",
        "entries: [{id: a, phase: launch, kind: mark, regex: x, framework: any, source: s, version: v, position: maybe}]",
        "just a string",
    ],
)
def test_bad_catalogue_is_rejected(bad: str) -> None:
    with pytest.raises(DiagError):
        parse_catalogue(bad)


MESSAGES = [
    ("server_args=ServerArgs(model_path='x', tp_size=8)", "launch", "sglang.server_args"),
    ("server_args={'model_path': 'x', 'tp_size': 2}", "launch", "sglang.server_args"),
    ("non-default args: {'model': 'x'}", "launch", "vllm.non_default_args"),
    ("Initializing a V1 LLM engine (v0.32.0) with config: model='x'", "launch", "vllm.engine_config"),
    ("Automatically detected platform cuda.", "platform", "vllm.platform_detected"),
    ("Init torch distributed begin.", "dist_init", "sglang.dist_begin"),
    ("Init torch distributed ends. mem usage=1.12 GB", "dist_init", "sglang.dist_end"),
    ("world_size=16 rank=4 local_rank=4 distributed_init_method=tcp://1.2.3.4:29501 backend=nccl", "dist_init", "vllm.world_size"),
    ("NCCL INFO comm 0xd3f8480 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId cb000 - Init COMPLETE", "dist_init", "any.nccl_info"),
    ("Resolved architecture: Qwen3ForCausalLM", "model_config", "vllm.resolved_arch"),
    # vllm/config.py _get_and_verify_dtype "Casting {} to {}." (0.1-0.9.2, then config/)
    ("Casting torch.bfloat16 to torch.float16.", "model_config", "vllm.config_resolved"),
    # vllm/transformers_utils/tokenizer.py get_tokenizer: the tokenizer is being loaded
    ("Using a slow tokenizer. This might cause a significant slowdown. Consider using a fast tokenizer instead.", "model_config", "vllm.tokenizer_notice"),
    ("For some LLaMA V1 models, initializing the fast tokenizer may take a long time. To reduce the initialization time, consider using 'hf-internal-testing/llama-tokenizer' instead of the original tokenizer.", "model_config", "vllm.tokenizer_notice"),
    ("Load weight begin. avail mem=78.81 GB", "weights_load", "sglang.load_weight_begin"),
    ("Starting to load model deepseek-ai/DeepSeek-Coder-V2-Instruct...", "weights_load", "vllm.starting_to_load"),
    ("Model loading took 15.2 GiB and 4.1 seconds", "weights_load", "vllm.model_loading_took"),
    # vllm-spyre's SpyreWorker.load_model print (vllm_spyre/worker/spyre_worker.py)
    ("[SpyreWorker] load model...", "weights_load", "vllm.spyre_load_model"),
    ("Loading safetensors checkpoint shards:  26% Completed | 22/85 [09:23<29:54, 28.49s/it]", "weights_load", "any.shard_progress"),
    ("Multi-thread loading shards:  69% Completed | 65/94 [00:31<00:14,  2.0it/s]", "weights_load", "any.shard_progress"),
    ("KV Cache is allocated. #tokens: 21456, K size: 1.64 GB, V size: 1.64 GB", "kv_cache", "sglang.kv_allocated"),
    ("Memory pool end. avail mem=3.36 GB", "kv_cache", "sglang.memory_pool_end"),
    ("Available KV cache memory: 26.91 GiB", "kv_cache", "vllm.kv_memory"),
    ("# GPU blocks: 1478, # CPU blocks: 2048", "kv_cache", "vllm.kv_memory"),
    # V0 0.7.3-0.11.0 executor_base.py names the platform's device: "# %s blocks"
    ("# cuda blocks: 1478, # CPU blocks: 2048", "kv_cache", "vllm.kv_memory"),
    ("# hpu blocks: 6144, # CPU blocks: 1024", "kv_cache", "vllm.kv_memory"),
    ("# CPU blocks: 2048", "kv_cache", "vllm.kv_memory"),
    ("WeightLoader: Will load layers 0 to 35", "weights_load", "sglang_jax.weights"),
    ("Qwen3 weights loaded successfully!", "weights_load", "sglang_jax.weights"),
    ("torch.compile takes 59.90 s in total", "compile", "vllm.torch_compile"),
    ("Running FlashInfer autotune with cache: /x.json", "compile", "sglang.jit_warmup"),
    # Rebellions' rebel-compiler (RBLN SDK) compiling a graph for the NPU (vllm-rbln)
    ("[rebel-compiler] Export done. Elapsed time: 0:00:05", "compile", "rbln.rebel_compile"),
    ("[rebel-compiler] RBLN SDK compiler version: 0.11.0", "compile", "rbln.rebel_compile"),
    ("[rebel-compiler] |Compile(#3), mod_name=a1b2c3, input_info_index=1|", "compile", "rbln.rebel_compile"),
    ("Capture cuda graph begin. This can take up to several minutes. avail mem=2.85 GB", "cuda_graph", "sglang.capture_begin"),
    ("Capture cuda graph end. Time elapsed: 12.80 s. mem usage=4.69 GB. avail mem=20.31 GB.", "cuda_graph", "sglang.capture_end"),
    ("Capturing batches (bs=16 avail_mem=13.56 GB):  17%|█▋        | 1/6 [00:16<01:22, 16.57s/it]", "cuda_graph", "sglang.capture_progress"),
    ("Graph capturing finished in 32 secs.", "cuda_graph", "vllm.capture_end"),
    ("Capturing ACL graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/9 [00:00<?, ?it/s]", "cuda_graph", "vllm.capture"),
    ("The server is fired up and ready to roll!", "warmup", "sglang.fired_up"),
    ("Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", "listening", "any.uvicorn_running"),
    ("Starting vLLM API server 0 on http://0.0.0.0:8000", "listening", "vllm.api_server_start"),
    ("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0", "serving", "sglang.batch"),
    ("Decode batch, #running-req: 3, #token: 1200, token usage: 0.01, accept len: 2.17", "serving", "sglang.batch"),
    ("Engine 000: Avg prompt throughput: 1436.3 tokens/s, Avg generation throughput: 93.9 tokens/s", "serving", "vllm.throughput"),
    ('192.168.1.108:39394 - "POST /v1/chat/completions HTTP/1.1" 200 OK', "serving", "any.http_request"),
    ("Generated response chatcmpl-9f2: output: 'Paris', output_token_ids: [3], finish_reason: stop", "serving", "vllm.throughput"),
    ("Finished request cmpl-4e1b7.", "serving", "vllm.throughput"),
    # LMCache's cache engine storing / loading a request's KV (0.3.x, then behind its req_id)
    ("Stored 256 out of total 512 tokens. size: 0.0312 gb, cost 9.1 ms, throughput: 3.4 GB/s", "serving", "any.lmcache_request"),
    ("Retrieved 256 out of 300 out of total 812 tokens", "serving", "any.lmcache_request"),
    ("[req_id=cmpl-77] Retrieved 0 out of 64 required tokens (from 90 total tokens). size: 0.0000 gb", "serving", "any.lmcache_request"),
    ("Receive: obj=GenerateReqInput(text='The capital city of France is', input_ids=None)", "serving", "sglang.request_log"),
    ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "serving", "sglang.watchdog"),
    # vLLM's engine-core monitor, started once every engine core reported ready
    ("[shutdown] MPClient: engine core exited unexpectedly; starting cleanup", "serving", "vllm.engine_core_monitor_died"),
    ("Engine core proc EngineCore_DP1 died unexpectedly, shutting down client.", "serving", "vllm.engine_core_monitor_died"),
    # the executors' worker monitors, started once every worker loaded its model
    ("Worker proc VllmWorker-2 died unexpectedly, shutting down executor.", "weights_load", "vllm.v1_worker_monitor_died"),
    ("RayWorkerProc rank=5 died unexpectedly, shutting down executor.", "weights_load", "vllm.v1_worker_monitor_died"),
    # SGLang's multimodal processor registry, imported once the config says multimodal
    ("Ignore import error when loading sglang.srt.multimodal.processors.janus_pro: No module named 'x'", "model_config", "sglang.mm_processor_import"),
    # vLLM-Omni's AsyncOmni.generate and its per-request output loop
    ("[AsyncOmni] Request chatcmpl-77a1 failed (input error): stage 1 gave no output", "serving", "vllm.omni_request"),
    ("[AsyncOmni] Orchestrator error for req=chatcmpl-77a1 stage-1: worker crashed", "serving", "vllm.omni_request"),
]


@pytest.mark.parametrize(("message", "phase", "entry"), MESSAGES)
def test_real_messages(message: str, phase: str, entry: str) -> None:
    ev = load_catalogue().match(Record(source="x", line=1, message=message))
    assert ev is not None
    assert (ev.phase, ev.pattern) == (phase, entry)


def test_shard_fields() -> None:
    ev = load_catalogue().match(
        Record("x", 1, "Loading safetensors checkpoint shards:  26% Completed | 22/85 [09:23<29:54, 28.49s/it]")
    )
    assert ev is not None
    assert ev.fields["done"] == 22.0 and ev.fields["total"] == 85.0
    assert ev.fields["rate"] == 28.49 and ev.fields["unit"] == "s/it"


def test_traceback_frames_tell_the_crash_phase_but_not_startup_frames_for_serving() -> None:
    cat = load_catalogue()
    serving = Record("x", 1, "Traceback (most recent call last):", continuation=(
        '  File "/v/vllm/v1/engine/core.py", line 518, in run_busy_loop',
        '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 997, in execute_model',
    ))
    ev = cat.match(serving)
    assert ev is not None and ev.phase == "serving"
    profiling = Record("x", 1, "Traceback (most recent call last):", continuation=(
        '  File "/v/vllm/worker/worker.py", line 1, in determine_num_available_blocks',
        '  File "/v/vllm/worker/model_runner.py", line 2, in profile_run',
        '  File "/v/vllm/worker/model_runner.py", line 3, in execute_model',
    ))
    ev = cat.match(profiling)
    assert ev is None or ev.phase != "serving"


@pytest.mark.parametrize(
    "message",
    ["Initialization failed. warmup error: Traceback", "MLA optimization is turned on.",
     "Using default HuggingFace chat template", "Ignore import error when loading sglang.srt.models.glmasr"],
)
def test_messages_that_mark_no_phase(message: str) -> None:
    assert load_catalogue().match(Record("x", 1, message)) is None


def test_position_key_and_file_default() -> None:
    text = "entries: [{id: a, phase: launch, kind: mark, regex: x, framework: any, source: s, version: v}]"
    assert parse_catalogue(text).entries[0].position
    assert not parse_catalogue(text, position=False).entries[0].position
    both = text.replace("version: v", "version: v, position: true")
    assert parse_catalogue(both, position=False).entries[0].position
    assert parse_catalogue(text, position=False).notices == frozenset({"a"})


def test_ascend_hccl_watchdog_proves_dist_init() -> None:
    """torch_npu's ProcessGroupHCCL.cpp, Ascend's copy of the c10d watchdog."""
    for message in (
        "[Rank 3] HCCL watchdog thread terminated with exception:",
        "[Rank 1] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE, Timeout(ms)=3600000) ran for 3600185 milliseconds before timing out.",
    ):
        ev = load_catalogue().match(Record(source="x", line=1, message=message))
        assert ev is not None and ev.phase == "dist_init", message


@pytest.mark.parametrize(
    "message",
    [
        "PC: @     0x7f7e7ba49b8a  (unknown)  addProxyOpIfNeeded()",
        "#4  0x00007f3a1c2b3d4e in ncclProxyService (args=0x0) at proxy.cc:1520",
        "frame #6: ncclCommInitRank + 0x4d (0x7f00 in /usr/lib/libnccl.so.2)",
    ],
)
def test_native_nccl_frames_prove_dist_init(message: str) -> None:
    ev = load_catalogue().match(Record(source="x", line=1, message=message))
    assert ev is not None and ev.phase == "dist_init", message


def test_world_size_line_without_the_init_method_field() -> None:
    """vLLM-XPU 0.25's init_distributed_environment line prints no distributed_init_method."""
    for message in (
        "world_size=2 rank=1 local_rank=1 backend=xccl",
        "world_size=8 rank=3 local_rank=3 distributed_init_method=tcp://10.0.0.1:29500 backend=nccl",
    ):
        ev = load_catalogue().match(Record(source="x", line=1, message=message))
        assert ev is not None and ev.phase == "dist_init" and ev.fields["backend"], message


@pytest.mark.parametrize(
    ("message", "phase"),
    [
        ('INFO:     10.0.0.2:38372 - "POST /update_weights_from_tensor HTTP/1.1" 200 OK', "listening"),
        ('INFO:     127.0.0.1:5000 - "POST /sleep?level=1 HTTP/1.1" 200 OK', "listening"),
        ('INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK', "serving"),
        ('INFO:     127.0.0.1:5000 - "POST /v1/rerank HTTP/1.1" 200 OK', "serving"),
        ('INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK', "listening"),
    ],
)
def test_a_post_to_a_control_route_is_no_request_served(message: str, phase: str) -> None:
    ev = load_catalogue().match(Record(source="x", line=1, message=message))
    assert ev is not None and ev.phase == phase, message


def test_a_notice_applies_to_lines_of_the_files_it_cites() -> None:
    """A generated notice cites its source file; a line that names another logger file is
    another module's message (the same words may be another step)."""
    text = (
        "entries: [{id: n, phase: platform, kind: progress, regex: '^Failed to import from',"
        " framework: any, source: 'vllm/platforms/rocm.py (<module>)', version: '0.6.6'}]"
    )
    cat = parse_catalogue(text, position=False)
    msg = "Failed to import from vllm._C with ImportError('libcuda.so.1')"
    assert cat.match(Record("x", 1, msg, logger_file="rocm.py")) is not None
    assert cat.match(Record("x", 1, msg)) is not None  # no file named: the words decide
    assert cat.match(Record("x", 1, msg, logger_file="_custom_ops.py")) is None
    # hand-written entries (position markers) are not restricted to the files they cite
    assert parse_catalogue(text).match(Record("x", 1, msg, logger_file="_custom_ops.py"))


def test_registering_graph_addresses_right_after_graph_memory_profiling_is_no_capture() -> None:
    """custom_all_reduce.py logs "Registering N cuda graph addresses" when any
    graph_capture() context closes: after a capture, and in vLLM 0.20+ after the
    graph-memory profiling of KV sizing (gpu_model_runner.py profile_cudagraph_memory)."""
    from diag.analyze import analyze_text

    head = "(Worker_TP0 pid=1440) INFO 06-22 11:17:44 [gpu_model_runner.py:6471] "
    ar = "(Worker_TP0 pid=1440) INFO 06-22 11:18:30 [custom_all_reduce.py:211] "
    profiled = (
        f"{head}Profiling CUDA graph memory: PIECEWISE=41 (largest=384), FULL=25 (largest=192)\n"
        f"{ar}Registering 0 cuda graph addresses\n"
    )
    assert analyze_text(profiled).last_phase == "kv_cache"
    captured = (
        "INFO 06-22 11:17:44 model_runner.py:1100] Capturing the model for CUDA graphs. This "
        "may lead to unexpected consequences if the model is not static.\n"
        "INFO 06-22 11:18:30 custom_all_reduce.py:211] Registering 2275 cuda graph addresses\n"
    )
    assert analyze_text(captured).last_phase == "cuda_graph"


@pytest.mark.parametrize(
    "line",
    [
        "Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a "
        "greater mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600'",
        "Request 8f3a waiting_timeout",
        "Transfer for room 1234 failed due to node failure",
        "Lost connection with prefill instance (bootstrap_addr: 10.0.0.2:8998), 3 requests affected",
    ],
)
def test_pd_kv_transfer_failures_of_requests_are_serving(line: str) -> None:
    ev = load_catalogue().match(Record(source="x", line=1, message=line))
    assert ev is not None and (ev.phase, ev.pattern) == ("serving", "sglang.pd_request_failed")


def test_a_message_seen_again_gives_the_same_events_as_a_fresh_catalogue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catalogue remembers what it found per message (speed): a message seen before,
    from the same or another file, on another line and rank, gives the event a catalogue
    that never saw it gives; the memory is bounded."""
    import diag.phases as phases
    from diag.model import RankId

    lines = [
        ("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16", None),
        ("Failed to import from vllm._C with ImportError('libcuda.so.1')", "rocm.py"),
        ("Failed to import from vllm._C with ImportError('libcuda.so.1')", "_custom_ops.py"),
        ("Capture cuda graph begin. This can take up to several minutes.", None),
        ("no phase in these words", None),
    ]
    monkeypatch.setattr(phases, "_MEMO_MAX", 3)
    warm = load_catalogue()
    for rep in range(3):
        for i, (msg, where) in enumerate(lines * 2):
            rec = Record("x", 10 * rep + i, msg, logger_file=where, rank=RankId(tp=i % 3))
            fresh = parse_catalogue_from_files()
            assert warm.match(rec) == fresh.match(rec), (rep, msg, where)
            assert warm.framework_of(msg) == fresh.framework_of(msg)
            assert len(warm.memo.message) <= 3 and len(warm.memo.gated) <= 3


def parse_catalogue_from_files() -> Catalogue:
    """The built-in catalogue, built anew (its own, empty memory)."""
    import diag.phases as phases

    cat = phases.load_catalogue()
    return phases.Catalogue(
        entries=cat.entries,
        any_message_pattern=cat.any_message_pattern,
        any_text_pattern=cat.any_text_pattern,
        literal_index=cat.literal_index,
        unguarded=cat.unguarded,
        notices=cat.notices,
    )
