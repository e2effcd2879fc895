"""Traceback frames -> phases (LABELS.md's mapping), and the phase reached in event order."""

from __future__ import annotations

import datetime as dt

import pytest

from diag.analyze import analyze_text
from diag.frames import frame_events, frame_phase
from diag.model import Event, Record
from diag.timeline import advance, reached_phase, reaching_event

T0 = dt.datetime(2026, 2, 22, 22, 35, 0)


@pytest.mark.parametrize(
    ("path", "func", "phase"),
    [
        ("/x/torch/distributed/distributed_c10d.py", "init_process_group", "dist_init"),
        ("/x/torch/distributed/rendezvous.py", "_create_c10d_store", "dist_init"),
        ("/x/vllm/distributed/parallel_state.py", "init_distributed_environment", "dist_init"),
        ("/x/vllm/distributed/parallel_state.py", "initialize_model_parallel", "dist_init"),
        ("/x/vllm/distributed/parallel_state.py", "__init__", "dist_init"),
        ("/x/sglang/srt/distributed/parallel_state.py", "__init__", "dist_init"),
        ("/x/other/distributed/parallel_state.py", "__init__", None),
        ("/x/torch/distributed/distributed_c10d.py", "all_reduce", "dist_init"),
        ("/x/vllm/model_executor/model_loader/loader.py", "load_weights", "weights_load"),
        ("/x/vllm/model_executor/model_loader/__init__.py", "get_model", "weights_load"),
        ("/x/vllm/attention/selector.py", "get_attn_backend", "weights_load"),
        ("/x/vllm/v1/worker/gpu_worker.py", "determine_available_memory", "kv_cache"),
        ("/x/vllm/worker/model_runner.py", "profile_run", "kv_cache"),
        ("/x/sglang/srt/model_executor/model_runner.py", "init_memory_pool", "kv_cache"),
        ("/x/torch/_dynamo/eval_frame.py", "_fn", "compile"),
        ("/x/torch/_inductor/compile_fx.py", "compile_fx", "compile"),
        ("/x/vllm/v1/worker/gpu_model_runner.py", "capture_model", "cuda_graph"),
        ("/x/sglang/srt/model_executor/cuda_graph_runner.py", "capture", "cuda_graph"),
        ("/x/vllm/worker/worker.py", "init_device", "launch"),
        ("/x/torch/cuda/__init__.py", "set_device", "launch"),
        ("/x/sglang/srt/managers/scheduler.py", "event_loop_overlap", "serving"),
        ("/x/sglang/srt/entrypoints/http_server.py", "_wait_and_warmup", "warmup"),
        ("/x/vllm/entrypoints/openai/api_server.py", "run_server", None),
        ("/x/vllm/entrypoints/openai/serving_chat.py", "chat_completion_full_generator", "serving"),
        ("/x/sglang/srt/managers/tokenizer_manager.py", "_wait_one_response", "serving"),
        ("/x/vllm/model_executor/models/llama.py", "__init__", "weights_load"),
        ("/x/sglang/srt/layers/linear.py", "__init__", "weights_load"),
        ("/x/sglang/srt/layers/linear.py", "forward", "weights_load"),
        # a model's forward runs only once it was loaded (at least weights_load)
        ("/x/vllm/model_executor/models/qwen3_vl.py", "forward", "weights_load"),
        # an attention backend's forward: first run by the memory profile (at least kv_cache),
        # also in a platform plugin's copy of the backends
        ("/x/vllm/v1/attention/backends/flashinfer.py", "forward", "kv_cache"),
        ("/x/vllm/attention/backends/xformers.py", "forward", "kv_cache"),
        ("vllm_myhw/v1/attention/backends/myhw_attn.py", "forward", "kv_cache"),
        ("/x/vllm/v1/attention/backends/flashinfer.py", "build", None),
        # vLLM V1's KV sizing from the layers' specs (kv_cache_utils.py 0.10-0.34)
        ("/x/vllm/v1/core/kv_cache_utils.py", "get_kv_cache_groups", "kv_cache"),
        ("/x/vllm/v1/core/kv_cache_utils.py", "unify_kv_cache_spec_page_size", "kv_cache"),
        ("/x/vllm/v1/core/kv_cache_utils.py", "hash_block_tokens", None),  # per request
        # the graphs' memory estimated while the KV cache is sized (gpu_worker.py
        # determine_available_memory -> profile_cudagraph_memory, 0.19.1+): no capture
        ("/x/vllm/v1/worker/gpu_model_runner.py", "profile_cudagraph_memory", "kv_cache"),
        # vLLM's kernel warm-up (compile_or_warm_up_model -> kernel_warmup)
        ("/x/vllm/model_executor/warmup/deep_gemm_warmup.py", "_warmup", "compile"),
        ("/x/vllm/model_executor/warmup/jit_warmup.py", "kernel_launcher", None),
        ("/x/vllm/model_executor/models/registry.py", "inspect_model_cls", None),
        # SGLang 0.5.x graph backends and runners: capture per shape, and run_once, the
        # forward each capture calls; a replay is a batch served
        ("/x/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py", "capture_one", "cuda_graph"),  # noqa: E501
        ("/x/sglang/srt/speculative/eagle_draft_cuda_graph_runner.py", "run_once", "cuda_graph"),
        ("/x/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py", "replay", "serving"),  # noqa: E501
        ("/x/sglang/srt/managers/scheduler.py", "run_once", None),
        # vLLM V1's executor RPC: every worker had loaded its model
        ("/x/vllm/v1/executor/multiproc_executor.py", "get_response", "weights_load"),
        ("/x/vllm/v1/executor/multiproc_executor.py", "worker_busy_loop", "weights_load"),
        # support_torch_compile's wrapper runs every forward, compiled or not: the model
        # was built; torch.compile's own frames show a compile
        ("/x/vllm/compilation/decorators.py", "__call__", "weights_load"),
        ("/x/vllm/compilation/backends.py", "__call__", "compile"),
        # SGLang PD's KV managers come after the KV pool; the transfer worker serves
        ("/x/sglang/srt/disaggregation/mooncake/conn.py", "heartbeat_checker", "kv_cache"),
        ("/x/sglang/srt/disaggregation/nixl/conn.py", "transfer_worker", "serving"),
        # a KV connector is handed the allocated caches (initialize_kv_cache)
        ("/x/lmcache/integration/vllm/vllm_multi_process_adapter.py", "register_kv_caches", "kv_cache"),  # noqa: E501
        # a request's own coroutine and output queue in vLLM V1
        ("/x/vllm/v1/engine/output_processor.py", "get", "serving"),
        ("/x/vllm/v1/engine/async_llm.py", "generate", "serving"),
        ("/x/vllm/v1/engine/core.py", "_process_engine_step", "serving"),
        ("/x/vllm/worker/model_runner.py", "capture", "cuda_graph"),
        # the engine core's busy loop answering a utility call; SGLang's batch choice
        ("/x/vllm/v1/engine/core.py", "_handle_client_request", "serving"),
        # a relative path (an editable install, a trimmed paste) names its package all the same
        ("sglang/srt/managers/scheduler.py", "get_next_batch_to_run", "serving"),
        ("vllm/model_executor/model_loader/loader.py", "load_model", "weights_load"),
        # resolving the architecture from the config, outside the loader's own steps
        ("/x/sglang/srt/model_loader/utils.py", "get_model_architecture", "model_config"),
        # sleep mode: only a started engine sleeps or wakes up; time.sleep is no step
        ("/x/vllm/device_allocator/cumem.py", "wake_up", "warmup"),
        ("/x/sglang/srt/speculative/eagle_worker.py", "EAGLEWorker.__init__", "weights_load"),
        ("/x/sglang/srt/speculative/eagle_worker.py", "__init__", "weights_load"),
        ("/x/vllm/v1/engine/core.py", "sleep", "warmup"),
        ("/usr/lib/python3.12/asyncio/tasks.py", "sleep", None),
        ("/x/vllm/model_executor/model_loader/utils.py", "get_architecture_class_name", "model_config"),  # noqa: E501
        # Triton 3.x's per-backend compiler stages (ptxas under make_cubin)
        ("/x/triton/backends/nvidia/compiler.py", "make_cubin", "compile"),
        ("/x/triton/backends/amd/compiler.py", "make_hsaco", "compile"),
        # the async output of a scheduled step (V1 async scheduling): a request's step
        ("/x/vllm/v1/worker/gpu_model_runner.py", "get_output", "serving"),
        ("/x/vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner.execute_model", None),
    ],
)
def test_frame_phases_follow_labels(path: str, func: str, phase: str | None) -> None:
    assert frame_phase(path, func) == phase


def _tb(frames: list[tuple[str, str]], *, first: int = 10) -> Record:
    cont = []
    for path, func in frames:
        cont.append(f'  File "{path}", line 12, in {func}')
        cont.append("    call()")
    header = "Traceback (most recent call last):"
    return Record("log", first, header, ts=T0, continuation=tuple(cont))


def test_the_innermost_startup_step_decides_and_serving_yields_to_startup() -> None:
    # V1: the memory profile (kv_cache) runs the compiled forward (compile)
    rec = _tb(
        [
            ("/x/vllm/v1/engine/core.py", "_initialize_kv_caches"),
            ("/x/vllm/v1/worker/gpu_worker.py", "profile_run"),
            ("/x/torch/_dynamo/eval_frame.py", "_fn"),
        ]
    )
    (e,) = frame_events([rec])
    assert e.phase == "compile" and e.line == 10 + 5 and e.pattern == "frames._fn"
    # V0's profile_run runs execute_model: still kv_cache, not serving
    rec = _tb(
        [
            ("/x/vllm/worker/worker.py", "determine_num_available_blocks"),
            ("/x/vllm/worker/model_runner.py", "execute_model"),
            ("/x/vllm/worker/model_runner.py", "execute_model_async"),
        ]
    )
    assert [e.phase for e in frame_events([rec])] == ["kv_cache"]


def test_the_executor_rpc_is_a_lower_bound_that_serving_passes() -> None:
    """V1's worker_busy_loop answers start-up RPCs and serving's execute_model alike: it
    proves weights_load, and does not turn a serving traceback into a start-up one."""
    serving = _tb(  # the engine core's busy loop, its step's RPC to the workers failing
        [
            ("/x/vllm/v1/engine/core.py", "run_busy_loop"),
            ("/x/vllm/v1/engine/core.py", "step"),
            ("/x/vllm/v1/executor/multiproc_executor.py", "collective_rpc"),
            ("/x/vllm/v1/executor/multiproc_executor.py", "get_response"),
        ]
    )
    assert [e.phase for e in frame_events([serving])] == ["serving"]
    rpc = _tb(
        [
            ("/x/vllm/v1/executor/multiproc_executor.py", "collective_rpc"),
            ("/x/vllm/v1/executor/multiproc_executor.py", "get_response"),
        ]
    )
    assert [e.phase for e in frame_events([rpc])] == ["weights_load"]
    warm = _tb(
        [
            ("/x/vllm/v1/executor/multiproc_executor.py", "worker_busy_loop"),
            ("/x/vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model"),
        ]
    )
    assert [e.phase for e in frame_events([warm])] == ["compile"]


def test_a_models_forward_is_a_lower_bound_that_serving_passes() -> None:
    """A model's (or layer's) forward proves only that the model was loaded: a request's
    forward from the scheduler's loop is serving, the memory profile's is kv_cache."""
    serving = _tb(
        [
            ("/x/sglang/srt/disaggregation/decode.py", "event_loop_overlap_disagg_decode"),
            ("/x/sglang/srt/managers/scheduler.py", "run_batch"),
            ("/x/sglang/srt/model_executor/model_runner.py", "forward_decode"),
            ("/x/sglang/srt/models/qwen3.py", "forward"),
            ("/x/sglang/srt/layers/rotary_embedding.py", "forward"),
        ]
    )
    assert [e.phase for e in frame_events([serving])] == ["serving"]
    profile = _tb(
        [
            ("/x/vllm/v1/worker/gpu_worker.py", "determine_available_memory"),
            ("/x/vllm/v1/worker/gpu_model_runner.py", "_dummy_run"),
            ("/x/vllm/model_executor/models/llama.py", "forward"),
        ]
    )
    assert [e.phase for e in frame_events([profile])] == ["kv_cache"]
    alone = _tb([("/x/vllm/model_executor/models/llama.py", "forward")])
    assert [e.phase for e in frame_events([alone])] == ["weights_load"]


def test_the_call_under_the_innermost_frame_counts() -> None:
    """An excerpt cut right after `init_worker_distributed_environment(` still shows it."""
    rec = Record(
        "log",
        1,
        "Traceback (most recent call last):",
        continuation=(
            '  File "/x/vllm/worker/worker.py", line 132, in init_device',
            "    init_worker_distributed_environment(self.parallel_config, self.rank,",
        ),
    )
    assert [e.phase for e in frame_events([rec])] == ["dist_init"]


def test_faulthandler_dumps_read_innermost_first() -> None:
    rec = Record(
        "log",
        1,
        "Current thread 0x00007f01 (most recent call first):",
        continuation=(
            '  File "/x/torch/cuda/graphs.py", line 80 in capture_end',
            '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 300 in capture',
            '  File "/x/sglang/srt/managers/scheduler.py", line 90 in __init__',
        ),
    )
    assert [e.phase for e in frame_events([rec])] == ["cuda_graph"]


def test_an_unraisable_tracebacks_frames_mark_no_phase() -> None:
    """CPython's "Exception ignored in atexit callback" traceback is code run at exit: its
    frames (an inductor exit hook) prove no start-up step; the next traceback counts."""
    rec = Record(
        "log",
        1,
        "Exception ignored in atexit callback: <function cleanup_cache at 0x7f00>",
        continuation=(
            "Traceback (most recent call last):",
            '  File "/x/torch/_inductor/codegen/cuda/cutlass_utils.py", line 9, in cleanup_cache',
            "    if not os.path.exists(mod.CACHE):",
            "AttributeError: module 'mod' has no attribute 'CACHE'",
        ),
    )
    assert frame_events([rec]) == []
    later = Record(
        "log",
        6,
        "Traceback (most recent call last):",
        continuation=('  File "/x/torch/cuda/graphs.py", line 80, in capture_end',),
    )
    assert [e.phase for e in frame_events([rec, later])] == ["cuda_graph"]


def _ev(line: int, phase: str) -> Event:
    return Event("log", line, T0 + dt.timedelta(seconds=line), None, phase, "mark", "x", "")


def test_reached_phase_follows_the_order_of_events() -> None:
    # vLLM V1: the API server resolves the config, then the workers init torch.distributed
    assert reached_phase([_ev(1, "launch"), _ev(2, "model_config"), _ev(3, "dist_init")]) == (
        "dist_init"
    )
    # ... but once the workers got further, a late dist_init line does not take it back
    evs = [_ev(1, "model_config"), _ev(2, "weights_load"), _ev(3, "dist_init")]
    assert reached_phase(evs) == "weights_load"
    # no other backward move: a traceback frame of launch after weights_load
    assert advance("weights_load", "launch") == "weights_load"
    assert advance("compile", "kv_cache", {"compile"}) == "compile"


def test_a_failing_collective_proves_dist_init() -> None:
    text = (
        "[rank5]:[E1130 16:18:44.000693711 ProcessGroupNCCL.cpp:689] [Rank 5] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, "
        "NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) ran for 600015 milliseconds\n"
    )
    assert analyze_text(text).last_phase == "dist_init"


def test_access_lines_of_any_route_prove_listening() -> None:
    text = (
        "INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: 26.91 GiB\n"
        'INFO:     127.0.0.1:41950 - "GET /metrics HTTP/1.1" 200 OK\n'
    )
    assert analyze_text(text).last_phase == "listening"
    cut = 'INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: 26.91 GiB\n' + (
        'INFO:     172.27.0.4:56768 - "POST /v1\n'
    )
    assert analyze_text(cut).last_phase == "serving"


def test_negative_sizes_still_mark_their_phase() -> None:
    """A failed profile prints negative figures; the line still proves the step ran."""
    text = (
        "INFO 06-22 02:54:40 [gpu_model_runner.py:1800] Model loading took -0.27 GiB and "
        "3.1 seconds\n"
        "INFO 06-22 02:54:47 [gpu_worker.py:232] Available KV cache memory: -1.25 GiB\n"
    )
    assert analyze_text(text).last_phase == "kv_cache"


def test_registry_py_of_another_package_is_not_vllms_model_registry() -> None:
    other = "2025-01-01 10:00:00,000 - INFO - [registry.py:12] plugin registered\n"
    assert analyze_text(other).last_phase != "model_config"


def test_module_bodies_at_import_time_are_no_step() -> None:
    """An import chain through a loader package (SGLang 0.5.23's server_args resolution
    importing sglang/srt/model_loader/, then sgl_kernel) is not weight loading."""
    assert frame_phase("/x/sglang/srt/model_loader/loader.py", "<module>") is None
    assert frame_phase("/x/sglang/srt/model_loader/loader.py", "load_model") == "weights_load"


def _pev(line: int, phase: str, pattern: str) -> Event:
    return Event("log", line, T0 + dt.timedelta(seconds=line), None, phase, "mark", pattern, "")


def test_a_provisional_phase_gives_way_to_an_earlier_step_logged_after_it() -> None:
    v0_backend = "vllm.attention_backend_v0_worker"
    # V0 logs its backend choice when the worker is built, then init_device's dist init
    evs = [_pev(1, "launch", "a"), _pev(2, "weights_load", v0_backend), _pev(3, "dist_init", "b")]
    assert reached_phase(evs) == "dist_init"
    # alone, it is the phase LABELS.md gives it
    assert reached_phase(evs[:2]) == "weights_load"
    # a later step past it keeps the run further, whatever follows
    evs2 = [*evs[:2], _pev(3, "weights_load", "c"), _pev(4, "dist_init", "b")]
    assert reached_phase(evs2) == "weights_load"
    # any other entry of the same phase is no provisional one
    evs3 = [_pev(1, "launch", "a"), _pev(2, "weights_load", "c"), _pev(3, "dist_init", "b")]
    assert reached_phase(evs3) == "weights_load"


def test_the_event_that_set_the_phase_reached_is_the_line_that_proves_it() -> None:
    v0_backend = "vllm.attention_backend_v0_worker"
    evs = [_pev(1, "launch", "a"), _pev(2, "weights_load", "c"), _pev(3, "weights_load", "d"),
           _pev(4, "dist_init", "b")]
    assert reaching_event(evs) == ("weights_load", evs[1])  # the first: later ones repeat it
    assert reaching_event([]) == (None, None)
    # a provisional event proved by a later line of its phase: that line is the proof
    evs2 = [_pev(1, "launch", "a"), _pev(2, "weights_load", v0_backend),
            _pev(3, "weights_load", "c")]
    assert reaching_event(evs2) == ("weights_load", evs2[2])
    # ... and given way to an earlier step: that step's line
    evs3 = [_pev(1, "launch", "a"), _pev(2, "weights_load", v0_backend), _pev(3, "dist_init", "b")]
    assert reaching_event(evs3) == ("dist_init", evs3[2])


def test_v0_selector_lines_before_init_device_reach_dist_init_only() -> None:
    text = (
        "INFO 07-03 14:43:47 selector.py:51] Using XFormers backend.\n"
        "INFO 07-03 14:43:49 pynccl.py:63] vLLM is using nccl==2.20.5\n"
    )
    assert analyze_text(text).last_phase == "dist_init"
    # the same words from V1's platform module are the model being built (LABELS.md)
    v1 = (
        "INFO 07-03 14:43:49 [pynccl.py:63] vLLM is using nccl==2.20.5\n"
        "INFO 07-03 14:43:50 [cuda.py:221] Using XFormers backend.\n"
    )
    assert analyze_text(v1).last_phase == "weights_load"
    # V0 with the platform module's wording (0.7-0.8: ModelRunner.__init__ ->
    # platform.get_attn_backend_cls, logged from rocm.py / cuda.py before init_device):
    # the dist-init lines after it show where the worker was
    v0_platform = (
        "(VllmWorkerProcess pid=336) INFO 04-11 09:53:56 [rocm.py:154] Using ROCmFlashAttention backend.\n"  # noqa: E501
        "(VllmWorkerProcess pid=336) INFO 04-11 09:53:56 [pynccl.py:69] vLLM is using nccl==2.21.5\n"  # noqa: E501
    )
    assert analyze_text(v0_platform).last_phase == "dist_init"


def test_a_failed_first_cuda_init_after_a_v0_backend_line_reaches_launch_only() -> None:
    # torch's device_count_impl raises when cudaGetDeviceCount fails at the first CUDA
    # initialisation: the worker never got its device, so its V0 backend line (logged while
    # its ModelRunner was built) proves no model building
    text = (
        "INFO 02-10 08:00:01 cuda.py:230] Using Flash Attention backend.\n"
        "ERROR 02-10 08:00:01 engine.py:389] Unexpected error from cudaGetDeviceCount()."
        " Did you run some cuda functions before calling NumCudaDevices() that might have"
        " already set an error? Error 803: system has unsupported display driver / cuda"
        " driver combination\n"
    )
    out = analyze_text(text)
    assert out.last_phase == "launch"
    assert "cuda.error" in {f.id for f in out.findings}
    # past a step that needs the device, the run got that far whatever fails after it
    later = (
        "INFO 02-10 08:00:01 cuda.py:230] Using Flash Attention backend.\n"
        "INFO 02-10 08:00:02 model_runner.py:1110] Starting to load model m...\n"
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 999: unknown error\n"
    )
    assert analyze_text(later).last_phase == "weights_load"


def test_uvicorn_shutdown_lines_prove_it_had_listened() -> None:
    # uvicorn's Server._serve reaches the lifespan shutdown only past a successful start-up
    text = (
        "[06-17 13:46:56] Server warmup failed; aborting startup\n"
        "[2026-06-17 13:46:57] INFO:     Waiting for application shutdown.\n"
        "[2026-06-17 13:46:57] INFO:     Application shutdown complete.\n"
    )
    assert analyze_text(text).last_phase == "listening"


def test_a_warning_raised_in_the_request_dispatch_proves_listening() -> None:
    """At --log-level warning no uvicorn line is printed; a Python warning whose source
    line is starlette's / FastAPI's request dispatch was raised answering a request."""
    bar = "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00, 1.9it/s]\n"
    warn = (
        "/venv/lib/python3.11/site-packages/fastapi/routing.py:133: DeprecationWarning: "
        "SomeResponse is deprecated, use a response model instead\n"
        "  response = await f(request)\n"
    )
    assert analyze_text(bar + warn).last_phase == "listening"
    # the same warning raised where the app is built (an import, a route declared) is not
    built = warn.replace("  response = await f(request)", "  from myapp.responses import (")
    assert analyze_text(bar + built).last_phase == "weights_load"


def test_combined_format_access_lines() -> None:
    kv = "[2025-05-28 09:40:00] Memory pool end. avail mem=16.08 GB\n"
    stamp = "[2025-05-28 09:43:43] 127.0.0.1 [28/May/2025:09:43:43 +0000] "
    agent = ' "-" "python-requests/2.32.3"\n'
    health = stamp + '"GET /health HTTP/1.1" 200 2' + agent
    assert analyze_text(kv + health).last_phase == "listening"
    nginx = '10.0.0.7 - - [28/May/2025:09:43:43 +0000] "POST /v1/chat/completions HTTP/1.1" 200 6'
    assert analyze_text(kv + nginx + agent).last_phase == "serving"
    # SGLang's PD bootstrap server answers the decode side's receiver of a request
    route = stamp + '"GET /route?engine_rank=0 HTTP/1.1" 200 262' + agent
    assert analyze_text(kv + route).last_phase == "serving"
    # the prefill ranks registering at start-up serve nothing
    put = stamp + '"PUT /route HTTP/1.1" 200 153' + agent
    assert analyze_text(kv + put).last_phase == "listening"


def test_a_pasted_completion_response_proves_serving() -> None:
    text = (
        "INFO 07-10 00:48:30 api_server.py:177] Available routes are:\n"
        '{"id":"cmpl-fdce","object":"text_completion","created":1720568916,"model":"m",'
        '"choices":[{"index":0,"text":"hi","logprobs":null,"finish_reason":"length"}]}\n'
    )
    assert analyze_text(text).last_phase == "serving"


def test_a_call_under_a_tuple_assignment_names_its_step() -> None:
    """The source line under a frame names the call in progress also when it assigns a
    tuple (``model_class, _ = get_model_architecture(model_config)``): a headless fragment
    cut there shows the architecture being resolved (model_config); the same call under
    load_model stays weights_load."""
    cont = (
        '  File "/x/sglang/srt/eplb/expert_location.py", line 452, in from_model_config',
        "    model_class, _ = get_model_architecture(model_config)",
    )
    rec = Record("log", 1, cont[0], ts=T0, continuation=cont[1:])
    (e,) = frame_events([rec])
    assert (e.phase, e.fields["frame"]) == ("model_config", "get_model_architecture")
    (e,) = frame_events(
        [_tb([("/x/vllm/model_executor/model_loader/loader.py", "load_model"),
              ("/x/vllm/model_executor/model_loader/utils.py", "get_model_architecture")])]
    )
    assert e.phase == "weights_load"


def test_a_cut_traceback_names_the_call_its_last_source_line_makes() -> None:
    """A traceback the paste cut after a frame's source line: the call that line makes is
    the step in progress, whatever statement it sits in (return, with, for ... in)."""
    for code in (
        "    return self.model_runner.load_model()",
        "    with self.load_model():",
        "    for name, w in self.load_weights(ckpt):",
    ):
        cont = ('  File "/x/app/worker.py", line 10, in start', code)
        rec = Record("log", 1, "Traceback (most recent call last):", ts=T0, continuation=cont)
        (e,) = frame_events([rec])
        assert e.phase == "weights_load", code


def test_a_triton_jit_launch_that_compiles_its_kernel_is_compile() -> None:
    """Triton's JITFunction.run calling self._do_compile (triton/runtime/jit.py, 3.3+) is
    the kernel's JIT compile at its first launch, also where the compiler's own frames
    below it were cut off; its other calls (the cached kernel's launch) are no step."""
    cont = (
        '  File "/x/ops/rope.py", line 40, in apply_rope',
        "    rope_kernel[grid](x, cos, sin)",
        '  File "/x/triton/runtime/jit.py", line 733, in run',
        "    kernel = self._do_compile(key, signature, device, constexprs, options, attrs, warmup)",
    )
    rec = Record("log", 1, "Traceback (most recent call last):", ts=T0, continuation=cont)
    (e,) = frame_events([rec])
    assert e.phase == "compile"
    assert frame_phase("/x/triton/runtime/jit.py", "run") is None
    assert frame_phase("/x/myproj/jit.py", "_do_compile") is None


def test_a_signal_handlers_frame_dump_gives_its_phase() -> None:
    """The dumpstacks recipe's `File: "x", line N, in f` frames (outermost first) map to
    phases as a traceback's do."""
    rec = Record(
        "log", 1, "# Thread: MainThread(140236)", ts=T0,
        continuation=(
            'File: "/x/torch/_dynamo/convert_frame.py", line 569, in _compile',
            "  guarded_code = compile_inner(code, one_graph, hooks, transform)",
        ),
    )
    (e,) = frame_events([rec])
    assert (e.phase, e.fields["frame"]) == ("compile", "_compile")


def test_sample_tokens_over_the_executor_rpc_is_a_step_of_serving() -> None:
    """vLLM V1's Worker.sample_tokens (0.12+) is called only by the engine core's step over
    the executor RPC; a platform plugin's worker (vllm_<platform>/worker/) is the same."""
    assert frame_phase("/x/vllm_ascend/worker/worker.py", "sample_tokens") == "serving"
    assert frame_phase("/x/vllm/v1/worker/gpu_worker.py", "Worker.sample_tokens") == "serving"
    step = _tb(
        [
            ("/x/vllm/v1/executor/multiproc_executor.py", "worker_busy_loop"),
            ("/x/torch/utils/_contextlib.py", "decorate_context"),
            ("/x/vllm_plugin/worker/worker.py", "sample_tokens"),
        ]
    )
    assert [e.phase for e in frame_events([step])] == ["serving"]


def test_a_sleep_mode_call_answered_by_the_busy_loop_is_no_request_served() -> None:
    """EngineCore._handle_client_request answering wake_up / sleep: the engine finished its
    start-up (warmup), and an RL trainer wakes it before its first request."""
    wake = _tb(
        [
            ("/x/vllm/v1/engine/core.py", "_handle_client_request"),
            ("/x/vllm/v1/engine/core.py", "wake_up"),
            ("/x/vllm/executor/executor_base.py", "wake_up"),
        ]
    )
    assert [e.phase for e in frame_events([wake])] == ["warmup"]
    rpc = _tb(
        [
            ("/x/vllm/v1/engine/core.py", "_handle_client_request"),
            ("/x/vllm/executor/executor_base.py", "collective_rpc"),
        ]
    )
    assert [e.phase for e in frame_events([rpc])] == ["serving"]


def test_a_prefix_caches_eviction_is_a_batch_being_served() -> None:
    """SGLang's radix caches evict nodes only to free slots for a batch's tokens
    (mem_cache/common.py evict_from_tree_cache under alloc_token_slots): a traceback pasted
    from its eviction frames on, with no header, reached serving."""
    assert frame_phase("/x/sglang/srt/mem_cache/radix_cache.py", "RadixCache.evict") == "serving"
    assert frame_phase("/x/sglang/srt/mem_cache/swa_radix_cache.py", "_evict_leaf") == "serving"
    assert frame_phase("/x/other/mem_cache/radix_cache.py", "evict") is None
    cache = "/w/sglang/python/sglang/srt/mem_cache/mamba_radix_cache.py"
    cont = (
        f'  File "{cache}", line 90, in evict',
        "    self._evict_leaf(x)",
        f'  File "{cache}", line 70, in _evict_leaf',
        "    assert x.lock_ref == 0",
        "AssertionError",
    )
    rec = Record("log", 1, "    tree_cache.evict(params)", continuation=cont)
    assert [e.phase for e in frame_events([rec])] == ["serving"]


def test_a_kv_connectors_request_calls_are_serving_past_the_rpc_lower_bound() -> None:
    """vLLM's NIXL worker reading a request's blocks from the remote engine it names, and
    its topology look-ups of that engine (kv_connector/utils.py *_from_engine_id)."""
    utils = "/x/vllm/distributed/kv_transfer/kv_connector/utils.py"
    assert frame_phase(utils, "TpKVTopology.tp_ratio_from_engine_id") == "serving"
    nixl = "/x/vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py"
    assert frame_phase(nixl, "_read_blocks_for_req") == "serving"
    assert frame_phase(nixl, "register_kv_caches") == "kv_cache"
    rpc = _tb(
        [
            ("/x/vllm/v1/executor/multiproc_executor.py", "worker_busy_loop"),
            ("/x/vllm/v1/worker/gpu_worker.py", "execute_model"),
            (nixl, "start_load_kv"),
            (utils, "block_size_ratio_from_engine_id"),
        ]
    )
    assert [e.phase for e in frame_events([rpc])] == ["serving"]


def test_the_offline_llms_engine_loop_is_its_prompts_served() -> None:
    """LLM.generate adds its prompts, then _run_engine steps the engine built by
    LLM.__init__ until they finish (vllm/entrypoints/llm.py)."""
    llm = "/x/site-packages/vllm/entrypoints/llm.py"
    assert frame_phase(llm, "LLM._run_engine") == "serving"
    assert frame_phase(llm, "_validate_and_add_requests") == "serving"
    assert frame_phase("/x/other/llm.py", "_run_engine") is None


_METHOD_TB = [
    "(VllmWorkerProcess pid=71) ERROR 01-30 17:27:37 multiproc_worker_utils.py:240] Exception in "
    "worker VllmWorkerProcess while processing method determine_num_available_blocks.",
    "(VllmWorkerProcess pid=71) ERROR 01-30 17:27:37 multiproc_worker_utils.py:240] Traceback "
    "(most recent call last):",
    '(VllmWorkerProcess pid=71) ERROR 01-30 17:27:37 multiproc_worker_utils.py:240]   File "/x/v'
    'llm/worker/model_runner.py", line 1718, in execute_model',
    "(VllmWorkerProcess pid=71) ERROR 01-30 17:27:37 multiproc_worker_utils.py:240]     output = "
    "model_executable(",
    "(VllmWorkerProcess pid=71) ERROR 01-30 17:27:37 multiproc_worker_utils.py:240] RuntimeError: "
    "x",
]


@pytest.mark.parametrize("width", [None, 100])
def test_an_rpc_methods_traceback_is_that_steps_also_when_a_wrap_was_joined_back(
    width: int | None,
) -> None:
    # the method line, the header, then frames: two lines apart counted in logical lines (a
    # terminal's wrap at 100 columns makes each of these lines two)
    lines = _METHOD_TB if width is None else [
        ln[i : i + width] for ln in _METHOD_TB for i in range(0, len(ln), width)
    ]
    a = analyze_text("\n".join(lines))
    assert a.last_phase == "kv_cache"


def test_frames_under_the_configurations_build_show_model_config_at_most() -> None:
    # vLLM 0.7.3: EngineArgs.create_engine_config -> VllmConfig.__post_init__ ->
    # _get_quantization_config -> model_loader/weight_utils.py get_quant_config (the
    # checkpoint's quantization config read while the engine config is built)
    config = [
        ("/x/vllm/engine/arg_utils.py", "create_engine_config"),
        ("<string>", "__init__"),
        ("/x/vllm/config.py", "__post_init__"),
        ("/x/vllm/config.py", "_get_quantization_config"),
        ("/x/vllm/model_executor/model_loader/weight_utils.py", "get_quant_config"),
    ]
    assert [e.phase for e in frame_events([_tb(config)])] == ["model_config"]
    # the same helper under the worker's load_model is the weights' load
    load = [
        ("/x/vllm/worker/worker.py", "load_model"),
        ("/x/vllm/model_executor/model_loader/loader.py", "load_model"),
        ("/x/vllm/model_executor/model_loader/weight_utils.py", "get_quant_config"),
    ]
    assert [e.phase for e in frame_events([_tb(load)])] == ["weights_load"]


def test_sglangs_failed_warm_up_request_still_proves_listening() -> None:
    # srt/entrypoints/http_server.py _execute_server_warmup: the warm-up request went through
    # the HTTP server, which answered it 500: listening (LABELS.md: any access line), not
    # serving (no client was let in)
    log = (
        '[2025-11-30 05:12:25] INFO:     127.0.0.1:49006 - "POST /v1/chat/completions HTTP/1.1"'
        " 500 Internal Server Error\n"
        "[2025-11-30 05:12:25] Initialization failed. warmup error: Traceback (most recent "
        "call last):\n"
        '  File "/x/sglang/srt/entrypoints/http_server.py", line 1566, in _execute_server_warmup\n'
        '    assert res.status_code == 200, f"{res.text}"\n'
        'AssertionError: {"object":"error","message":"Internal server error"}\n'
    )
    assert analyze_text(log, "server.log", year=2025).last_phase == "listening"
