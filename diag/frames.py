"""Traceback frames -> phase events: the step a crash (or a dump) shows was running.

A Python traceback lists the calls that were in progress when it was raised, outermost
first; faulthandler dumps list them innermost first. The frames map to startup phases as
shared/corpus/LABELS.md states ("last_phase is what the visible text proves was
reached ... also a traceback's frames"):

- ``init_process_group``, ``rendezvous``, ``TCPStore``, ``init_distributed_environment``,
  ``initialize_model_parallel`` (and a collective: a failing collective proves at least
  dist_init) -> dist_init
- ``get_model``, ``load_model``, ``initialize_model``, ``load_weights``, ``weight_loader``,
  quantization-scheme and attention-backend selection while the model is built -> weights_load
- ``profile_run``, ``determine_available_memory``, ``determine_num_available_blocks``,
  ``_initialize_kv_caches``, ``init_memory_pool`` -> kv_cache
- ``torch._dynamo`` / Inductor / vLLM's compilation backend -> compile
- ``capture_model``, ``CudaGraphRunner.capture`` -> cuda_graph
- ``init_device`` / ``set_device`` -> launch (a worker that fails while starting its
  device has reached no further, unless another line says so)
- the schedulers' and engine cores' serving loops -> serving, but only in a stack with no
  startup frame (vLLM V0's ``profile_run`` runs ``execute_model``)

Each traceback (or dump thread) gives at most one event: the phase its frames reach,
walked from the outermost call inwards (:func:`diag.timeline.advance`), at the line of
the frame that decided it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from diag.frame_catalogue import catalogue_phase as _catalogue_phase
from diag.model import Event, RankId, Record, phase_index

__all__ = ["FRAME", "frame_events", "frame_phase"]

# `File "path", line N, in func` (traceback), `File "path", line N in func` (faulthandler),
# `File: "path", line N, in func` (a signal handler's sys._current_frames() dump)
FRAME = re.compile(
    r'File:? "(?P<path>[^"]{1,400})", line (?P<lineno>\d+)(?P<comma>,?) in (?P<func>[\w<>.]+)'
)

_DIST_FUNCS = frozenset(
    {
        "init_process_group", "rendezvous", "_create_c10d_store", "_tcp_rendezvous_handler",
        "_env_rendezvous_handler", "_store_based_barrier", "init_distributed_environment",
        "initialize_model_parallel", "ensure_model_parallel_initialized",
        "init_torch_distributed", "init_world_group", "init_model_parallel_group",
        "new_group", "_new_group_with_tag", "_new_process_group_helper",
        "init_distributed", "gpu_p2p_access_check", "can_actually_p2p",
        "init_worker_distributed_environment", "_init_distributed_environment",
        # sglang/srt/distributed/parallel_state.py (0.5.x), vllm/v1/engine/core.py (0.11+)
        "_create_global_tcp_store", "init_parallel_state", "reinitialize_distributed",
    }
)
# collectives (torch.distributed, vLLM/SGLang communicators): at least dist_init
_COLLECTIVES = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "barrier",
        "reduce_scatter", "reduce_scatter_tensor", "broadcast_object_list",
        "all_gather_object", "gather_object", "monitored_barrier", "send", "recv",
        "broadcast_tensor_dict", "_all_reduce_out_place", "custom_all_reduce",
        # torch/distributed/distributed_c10d.py's other collectives (vLLM 0.5's
        # GroupCoordinator.gather -> torch.distributed.gather for the logits)
        "gather", "scatter", "reduce", "all_to_all", "all_to_all_single", "isend", "irecv",
        "batch_isend_irecv", "scatter_object_list",
    }
)
_WEIGHT_FUNCS = frozenset(
    {
        "get_model", "load_model", "initialize_model", "_initialize_model", "load_weights",
        "weight_loader", "load_weights_and_postprocess", "safetensors_weights_iterator",
        "pt_weights_iterator", "download_weights_from_hf", "_prepare_weights",
        "load_model_weights", "_get_weights_iterator",
        # quantization scheme / attention backend chosen while the model is built
        "get_quant_method", "get_scheme", "_get_scheme_from_parts", "get_quant_config",
        "get_attn_backend", "_cached_get_attn_backend", "which_attn_to_use",
        "get_attn_backend_cls", "_get_quantization_config", "verify_quantization",
        "_verify_quantization",
        # layers' and quantization methods' weights, created while the model is built and
        # post-processed right after loading (vllm/model_executor/layers/*, sglang/srt/layers/*)
        "create_weights", "process_weights_after_loading", "load_model_cls_srt",
        "load_model_with_memory_saver", "load_weights_only", "do_load_weights",
        "multi_thread_safetensors_weights_iterator",
        "buffered_multi_thread_safetensors_weights_iterator",
        "fastsafetensors_weights_iterator", "runai_safetensors_weights_iterator",
        "np_cache_weights_iterator", "default_weight_loader",
    }
)
_KV_FUNCS = frozenset(
    {
        "profile_run", "determine_available_memory", "determine_num_available_blocks",
        "_initialize_kv_caches", "initialize_kv_cache", "init_memory_pool",
        "profile_max_num_token", "initialize_cache", "_init_cache_engine",
        "init_cache_engine", "get_kv_cache_config", "check_enough_kv_cache_memory",
        "get_kv_cache_configs", "initialize_from_config", "raise_if_cache_size_invalid",
        # vllm/v1/worker/gpu_model_runner.py, vllm/v1/core/kv_cache_utils.py,
        # vllm/worker/worker.py, sglang/srt/managers/tp_worker.py (0.8-0.20, 0.4-0.5)
        "initialize_kv_cache_tensors", "_allocate_kv_cache_tensors", "_reshape_kv_cache_tensors",
        "_check_enough_kv_cache_memory", "get_kv_cache_config_from_groups",
        "determine_available_kv_cache_memory", "alloc_memory_pool",
        "_init_minimal_kv_cache_for_profiling",
        # KV connectors (LMCache, NIXL, Mooncake, P2P) get the allocated caches from
        # gpu_model_runner.initialize_kv_cache (vllm/distributed/kv_transfer/kv_connector/
        # v1/base.py register_kv_caches, 0.9-0.34)
        "register_kv_caches",
        # sglang/srt/managers/scheduler.py (0.5.x) Scheduler.init_cache_with_memory_pool:
        # takes the model runner's allocated pools (get_memory_pool) and builds the prefix
        # cache (RadixCache, SWA/Mamba variants) over them
        "init_cache_with_memory_pool",
        # vllm/v1/core/kv_cache_utils.py (0.10-0.34): sizing the KV cache from the layers'
        # specs, called from the engine core's _initialize_kv_caches only
        "get_kv_cache_groups", "unify_kv_cache_spec_page_size", "unify_hybrid_kv_cache_specs",
        "unify_kv_cache_configs", "group_and_unify_kv_cache_specs", "get_uniform_page_size",
        "create_kv_cache_group_specs", "_get_kv_cache_groups_uniform_spec",
        "_get_kv_cache_groups_uniform_type", "_get_kv_cache_groups_uniform_page_size",
        "_get_kv_cache_groups_uniform_groups", "_get_kv_cache_config_uniform_type",
        "_get_kv_cache_config_uniform_page_size", "_get_kv_cache_config_attention_free",
        "generate_scheduler_kv_cache_config", "resolve_kv_cache_block_sizes",
        # vllm/v1/worker/gpu_model_runner.py (0.19.1-0.33.0) profile_cudagraph_memory: the
        # graphs' memory estimated while the KV cache is sized (gpu_worker.py
        # determine_available_memory calls it, before any capture), as the source-derived
        # catalogue and phase_map.yaml read it
        "profile_cudagraph_memory",
    }
)
_GRAPH_FUNCS = frozenset(
    {
        "capture_model", "init_cuda_graphs", "capture_one_batch_size", "init_device_graphs",
        # vllm/v1/worker/gpu_model_runner.py (0.9+), sglang/srt/model_executor/ (0.5.x:
        # model_runner.py, runner/*_cuda_graph_runner.py, cuda_graph_setup.py)
        "_capture_cudagraphs", "initialize_cudagraph_capture",
        "init_piecewise_cuda_graphs", "capture_one_shape", "capture_decode_graph",
        "capture_prefill_graph", "ensure_decode_cuda_graphs", "warmup_graphs",
    }
)
_ARCH_FUNCS = frozenset(
    {"get_model_architecture", "get_architecture_class_name", "_get_model_architecture"}
)
_LAUNCH_FUNCS = frozenset({"init_device", "set_device", "_lazy_init", "init_worker"})
_SERVING_FUNCS = frozenset(
    {
        "event_loop_normal", "event_loop_overlap", "event_loop_pp",
        "event_loop_normal_disagg_decode",
        "event_loop_overlap_disagg_decode", "event_loop_normal_disagg_prefill",
        "event_loop_overlap_disagg_prefill", "run_busy_loop", "step_async", "run_engine_loop",
        "engine_step", "process_batch_result", "run_batch", "execute_model_async",
        # SGLang's scheduler loop (0.5.x: run_event_loop -> dispatch_event_loop), its overlap
        # worker thread; vLLM V0's worker request loop
        "run_event_loop", "dispatch_event_loop", "forward_thread_func", "forward_thread_func_",
        "start_worker_execution_loop",
        # SGLang 0.1-0.3's router (sglang/srt/managers/router/model_rpc.py, then
        # managers/controller/tp_worker.py): the rpyc step over the running batch
        "exposed_step", "forward_decode_batch", "forward_fill_batch", "forward_prefill_batch",
        # vLLM V1's engine core steps (v1/engine/core.py 0.8-0.34: run_busy_loop ->
        # _process_engine_step -> step / step_with_batch_queue), SGLang's batch results
        # (managers/scheduler.py 0.4-0.5.x) and its idle-time self-check
        # (scheduler_runtime_checker_mixin.py, 0.5.x: run from the event loop when idle)
        # _handle_client_request: the engine core's busy loop answering the client's
        # utility calls (collective_rpc, add_lora, sleep ...), 0.8-0.34
        "_process_engine_step", "step_with_batch_queue", "_handle_client_request",
        "get_next_batch_to_run",
        "process_batch_result_decode",
        "process_batch_result_prefill", "self_check_during_idle",
    }
)
# SGLang's launcher sends its warm-up request after the port opened
# (python/sglang/srt/entrypoints/http_server.py, server.py before 0.4)
_WARMUP_FUNCS = frozenset({"_wait_and_warmup", "_execute_server_warmup"})
# The HTTP servers' request handlers: a frame there is a client's request being served
# (vllm/entrypoints/openai/serving_*.py and api_server.py's routes, 0.4-0.33; SGLang's
# tokenizer_manager.py request path, openai_api/adapter.py (0.3-0.4) and
# entrypoints/openai/serving_*.py (0.4.7+), http_server.py's generate routes)
_REQUEST_FILE = re.compile(
    r"/(?:vllm/entrypoints/openai/serving_\w+|sglang/srt/entrypoints/openai/serving_\w+|"
    r"sglang/srt/openai_api/adapter)\.py$"
)
_REQUEST_FUNCS = frozenset(
    {
        "create_chat_completion", "create_completion", "create_embedding",
        "generate_request", "_handle_batch_request", "_wait_one_response",
        "openai_v1_chat_completions", "openai_v1_completions", "v1_chat_completions",
        "v1_completions",
    }
)
# vLLM's KV connectors' per-request calls (frame_phase)
_KV_REQUEST_FUNCS = frozenset(
    {
        "get_num_new_matched_tokens", "update_state_after_alloc", "request_finished",
        "_nixl_handshake", "_background_nixl_handshake", "add_remote_agent",
        "_read_blocks_for_req", "_read_blocks",
    }
)
# the step names above with their phase (a cut callee name is looked up by its prefix)
_NAMED_STEPS: tuple[tuple[frozenset[str], str], ...] = (
    (_DIST_FUNCS, "dist_init"),
    (_WEIGHT_FUNCS, "weights_load"),
    (_KV_FUNCS, "kv_cache"),
    (_GRAPH_FUNCS, "cuda_graph"),
    (_SERVING_FUNCS, "serving"),
    (_WARMUP_FUNCS, "warmup"),
)
# A model's or a layer's own module (vllm/model_executor/models|layers/, sglang/srt/
# models|layers/): its constructor runs while the model is built (LABELS.md: weights_load);
# its forward runs in any later step, which the frames alone do not tell (a forward proves
# the model was loaded: at least weights_load)
_MODEL_CODE = re.compile(r"/(?:vllm/model_executor|sglang/srt)/(?:models|layers)/")
# vLLM's attention backends (attention/backends/ in V0, v1/attention/backends/ in V1) and a
# platform plugin's copies of them (vllm_<platform>/...)
_ATTN_BACKEND = re.compile(r"/vllm(?:_[a-z0-9]+)?/(?:v1/)?attention/backends/")
_SLEEP_MODE = frozenset({"wake_up", "sleep"})
# vLLM's package or a platform plugin's (vllm_ascend, vllm_gaudi, vllm_kunlun ...)
_VLLM_PKG = re.compile(r"/vllm(?:_[a-z0-9]+)?/")
_CONFIG_AT = phase_index("model_config")
_STARTUP = ("launch", "dist_init", "weights_load", "kv_cache", "compile", "cuda_graph")
# vLLM V1's executor RPC, sent and answered only once every worker is ready (below): a
# lower bound that start-up steps and serving alike run in
READY_RPC = frozenset({"collective_rpc", "get_response", "worker_busy_loop"})


def _config_build(path: str, func: str) -> bool:
    """A frame of the engine's configuration being built: vLLM's EngineArgs.create_*config
    (vllm/engine/arg_utils.py 0.4-0.34) and the config classes' constructors and checks
    (vllm/config.py, the vllm/config/ package since 0.10: __init__, __post_init__,
    verify_* / _verify_*), SGLang's ModelConfig (sglang/srt/configs/model_config.py:
    __init__, from_server_args). What such a frame calls runs while the configuration is
    built, before any weight: a loader helper it calls (vLLM's VllmConfig.
    _get_quantization_config -> model_loader/weight_utils.py get_quant_config, which reads
    the checkpoint's quantization config file) shows model_config, not the weights' load."""
    p = path.replace("\\", "/")
    name = func.rsplit(".", 1)[-1]
    if p.endswith("/vllm/engine/arg_utils.py"):
        return name.startswith("create_") and name.endswith("config")
    if p.endswith("/vllm/config.py") or "/vllm/config/" in p or p.endswith(
        "/sglang/srt/configs/model_config.py"
    ):
        return name in ("__init__", "__post_init__", "from_server_args") or name.startswith(
            ("verify_", "_verify_")
        )
    return False


def _lower_bound(path: str, func: str) -> bool:
    """A frame whose phase is only a lower bound, not the start-up step running: code that
    runs once start-up reached that far, in that step and at serving alike (vLLM V1's
    executor RPC, SGLang's PD KV managers, a model's forward: the profile run, capture,
    warm-up and requests all run it)."""
    p = path.replace("\\", "/")
    name = func.rsplit(".", 1)[-1]
    if name == "forward" and (_MODEL_CODE.search(p) or _ATTN_BACKEND.search(p)):
        return True  # a model's, a layer's or an attention backend's forward (frame_phase)
    return name in READY_RPC or "/sglang/srt/disaggregation/" in p


@functools.lru_cache(maxsize=1 << 14)  # (speed: the same frames recur in every rank's dump)
def frame_phase(path: str, func: str) -> str | None:
    """The phase one frame shows was running, or None."""
    p = path.replace("\\", "/")
    if not p.startswith("/"):
        p = "/" + p  # a relative path (an editable install, a trimmed paste): its package
    name = func.rsplit(".", 1)[-1]
    if name == "<module>":
        return None  # a module body running at import time: the file's path shows no step
    if p.endswith("/vllm/compilation/decorators.py"):
        # support_torch_compile's wrapper of a model class: built with the model, then run
        # on every forward, compiled or not (0.6.4-0.34); torch.compile's own frames under
        # it show a compile: the model was built (at least weights_load)
        return "weights_load"
    if (
        "/torch/_dynamo/" in p or "/torch/_inductor/" in p or "/vllm/compilation/" in p
        or "/sglang/srt/compilation/" in p
    ):
        return "compile"
    # TPU/XLA warm-up compiles each shape (vllm/v1/worker/tpu_model_runner.py _precompile_*)
    if name.startswith("_precompile_"):
        return "compile"
    # JIT builds: Triton's compiler (triton/compiler/; since Triton 3.0 each backend's own
    # stages, triton/backends/{nvidia,amd}/compiler.py: make_ttir ... make_cubin / make_hsaco),
    # FlashInfer's and DeepGEMM's JIT; vLLM's kernel warm-up
    # (vllm/model_executor/warmup/kernel_warmup.py, run by compile_or_warm_up_model)
    if (
        "/triton/compiler/" in p or "/triton/backends/" in p or "/flashinfer/jit/" in p
        or "/deep_gemm/jit" in p
    ):
        return "compile"
    # Triton's JIT launcher compiling a kernel at its first launch (a cache miss):
    # triton/runtime/jit.py JITFunction.run -> self._do_compile(key, signature, device, ...)
    # -> self.compile (Triton 3.3-3.5); the compiler's own frames (triton/compiler/) are
    # below it, where a paste that was cut still shows the call in progress
    if name == "_do_compile" and p.endswith("/triton/runtime/jit.py"):
        return "compile"
    if name in ("kernel_warmup", "compile_or_warm_up_model", "deep_gemm_warmup"):
        return "compile"
    # vllm/model_executor/warmup/kernel_warmup.py and deep_gemm_warmup.py (0.10-0.34): run
    # by kernel_warmup only (the folder's jit_warmup.py launches kernels at serving too)
    if p.endswith(("/model_executor/warmup/kernel_warmup.py", "/warmup/deep_gemm_warmup.py")):
        return "compile"
    # SGLang's DeepGEMM wrapper compiles its kernels at start-up
    # (srt/layers/quantization/deep_gemm_wrapper/compile_utils.py, 0.4.6.post3+:
    # deep_gemm_execution_hook -> _maybe_compile_deep_gemm_one_type_all)
    if "deep_gemm" in p and ("compile" in name or p.endswith("/compile_utils.py")):
        return "compile"
    if p.endswith("/torch/cuda/graphs.py") or (
        p.endswith("cuda_graph_runner.py") and name in ("capture", "__init__")
    ):
        return "cuda_graph"
    if name in _GRAPH_FUNCS:
        return "cuda_graph"
    # SGLang builds its attention backends over the KV pool it has allocated: in
    # ModelRunner.initialize right after init_memory_pool (model_executor/model_runner.py
    # 0.3.2-0.5.9), from the scheduler and the draft workers once every model runner has
    # its pool (init_attention_backends, 0.5.14-0.5.23)
    if name in ("init_attention_backend", "init_attention_backends") and "/sglang/srt/" in p:
        return "kv_cache"
    # SGLang's graph backends (0.5.x model_executor/runner_backend/*_backend.py, hardware_
    # backends' graph_runner/*_backend.py: capture_session / capture_one per shape), and the
    # graph runners' run_once, the forward each shape's capture (and its warm-up runs) calls
    # (model_executor/runner/*_cuda_graph_runner.py, speculative/*_cuda_graph_runner.py)
    graph_code = "/runner_backend/" in p or "/graph_runner/" in p or "cuda_graph_runner" in p
    if graph_code and name in ("capture_one", "capture_session", "run_once", "_capture_one_stream"):
        return "cuda_graph"
    # vLLM V0's CUDAGraphRunner.capture (worker/model_runner.py 0.4-0.10) and the attention
    # backends' capture-time metadata (sglang/srt/layers/attention/*_backend.py
    # init_forward_metadata_capture_cuda_graph, called only while graphs are captured)
    if (p.endswith("/vllm/worker/model_runner.py") and name == "capture") or (
        name == "init_forward_metadata_capture_cuda_graph"
    ):
        return "cuda_graph"
    if name in _KV_FUNCS:
        return "kv_cache"
    if name in _WEIGHT_FUNCS:
        return "weights_load"
    if name in _ARCH_FUNCS:
        # resolving the model's architecture class from its config (LABELS.md:
        # "architecture resolved" marks model_config): get_model_architecture
        # (vllm/model_executor/model_loader/utils.py 0.4-0.34, sglang/srt/model_loader/
        # utils.py 0.3-0.5.23), called before the weights by SGLang's expert-location
        # metadata (eplb/expert_location.py from_model_config, 0.4.7+) and vLLM's config
        # checks, and inside get_model, whose own frame then shows weights_load
        return "model_config"
    # the model loaders' own modules (vllm/model_executor/model_loader/, every release;
    # sglang/srt/model_loader/): any frame there is loading the model
    if "/model_loader/" in p and ("/vllm/" in p or "/sglang/" in p):
        return "weights_load"
    if name in _DIST_FUNCS or "TCPStore" in func or p.endswith("/rendezvous.py"):
        return "dist_init"
    if name in _COLLECTIVES and (
        "/torch/distributed/" in p or "/distributed/" in p or "communicator" in p
    ):
        return "dist_init"
    if name == "__init__" and "/device_communicators/" in p:
        return "dist_init"  # pynccl, custom all-reduce, shm broadcast set up their groups
    if p.endswith("/distributed/parallel_state.py") and ("/vllm/" in p or "/sglang/" in p):
        # vllm/distributed/parallel_state.py (0.4-0.33), sglang/srt/distributed/ (0.4+): the
        # groups' construction (GroupCoordinator.__init__) and their collectives; any frame
        # there proves a process group was being set up or used (at least dist_init)
        return "dist_init"
    if p.endswith("multiproc_executor.py") and name in READY_RPC:
        # vllm/v1/executor/multiproc_executor.py (0.8.5-0.34.0): a WorkerProc loads its
        # model (init_device, load_model) before it sends READY, and the executor sends RPCs
        # (collective_rpc, answered in worker_busy_loop) only once every worker is ready
        return "weights_load"
    if name == "__init__" and "/sglang/srt/speculative/" in p:
        # SGLang's draft workers (speculative/eagle_worker.py EAGLEWorker, eagle_worker_v2.py,
        # standalone_worker.py, multi_layer_eagle_worker.py, ngram_worker.py; 0.4-0.5.23):
        # the scheduler builds one after its target worker loaded its model, and the draft
        # worker's constructor builds and loads the draft model (its own pool and graphs
        # are deeper frames)
        return "weights_load"
    if name in _SLEEP_MODE and "/vllm/" in p:
        # vLLM's sleep mode (LLM.sleep / wake_up through the engine, executor, worker and
        # CuMemAllocator: vllm/entrypoints/llm.py, engine/llm_engine.py, executor/, worker/,
        # device_allocator/cumem.py, v1/engine/core.py, 0.7.3-0.34): only an engine that
        # finished its start-up is put to sleep or woken (at least warmup's end)
        return "warmup"
    if name in _LAUNCH_FUNCS:
        return "launch"
    if name in _SERVING_FUNCS:
        return "serving"
    if name in _WARMUP_FUNCS:
        return "warmup"
    if _REQUEST_FILE.search(p) or (
        name in _REQUEST_FUNCS and ("/vllm/" in p or "/sglang/" in p)
    ):
        return "serving"
    if (p.endswith("/vllm/v1/engine/async_llm.py") and name == "generate") or (
        p.endswith("/vllm/v1/engine/output_processor.py") and name in ("get", "get_nowait")
    ):
        # AsyncLLM.generate, a request's own coroutine, and the per-request output queue it
        # reads (RequestOutputCollector.get, 0.8-0.34): a request was being served
        return "serving"
    if name == "sample_tokens" and _VLLM_PKG.search(p):
        # Worker.sample_tokens / GPUModelRunner.sample_tokens (vllm/v1/worker/, 0.12-0.34,
        # and a platform plugin's worker, vllm_ascend/worker/): called only over the
        # executor RPC by the engine core's step (v1/engine/core.py EngineCore.step /
        # step_with_batch_queue: model_executor.sample_tokens(grammar_output)) for the
        # scheduler's requests; the start-up's profile and warm-up sample through
        # _dummy_sampler_run, never this method
        return "serving"
    if p.endswith("/vllm/v1/worker/gpu_model_runner.py") and name == "get_output":
        # AsyncGPUModelRunnerOutput / AsyncGPUPoolingModelRunnerOutput.get_output (0.11-0.34):
        # the async-scheduled output of a step execute_model / sample_tokens ran for the
        # scheduler's requests; the start-up's profile, capture and warm-up runs are
        # _dummy_run's and make none
        return "serving"
    if (
        name == "__init__"
        and _MODEL_CODE.search(p)
        and not p.endswith(("/models/registry.py", "/models/__init__.py"))
    ):
        return "weights_load"  # a model or layer being built (the registry: with the config)
    if name == "forward" and _ATTN_BACKEND.search(p):
        # an attention backend's forward (the layer's impl, given the KV cache): first run by
        # the memory profile, whose dummy forward reaches it with no metadata ("Profiling
        # run": vllm/v1/attention/backends/flash_attn.py FlashAttentionImpl.forward, 0.8-0.34;
        # V0's profile_run -> execute_model, 0.4-0.10), then by capture, warm-up and requests:
        # at least kv_cache. Hardware plugins (vllm_kunlun, vllm_gaudi ...) keep the layout
        return "kv_cache"
    if name == "forward" and _MODEL_CODE.search(p):
        # a model's or a layer's forward: the model was built and loaded (get_model returns
        # it loaded; the profile run, capture, warm-up and requests all come after, and a
        # layer run while the model is built is that step's): at least weights_load, a
        # lower bound that a capture's or a request's frames go past
        return "weights_load"
    if "/disaggregation/" in p and name == "transfer_worker":
        return "serving"  # SGLang's KV transfer threads run for live requests
    if "/sglang/srt/disaggregation/" in p:
        # the scheduler builds the PD KV managers (their bootstrap, heartbeat and receive
        # threads, mooncake/nixl/... conn.py) in init_disaggregation, after it sized and
        # allocated the KV pool (managers/scheduler.py __init__, 0.4.6-0.5.23)
        return "kv_cache"
    if ("graph_runner" in p or "/runner_backend/" in p) and name.lstrip("_").startswith("replay"):
        # a captured graph replayed for a batch (sglang/srt/model_executor/
        # cuda_graph_runner.py CudaGraphRunner.replay 0.3-0.5.23, the NPU and draft
        # runners' replay / _replay_update): a forward of requests, after capture
        return "serving"
    if p.endswith("/vllm/entrypoints/llm.py") and name in (
        "_run_engine", "_validate_and_add_requests", "_add_request", "_add_guided_params",
    ):
        # the offline LLM's requests (vllm/entrypoints/llm.py 0.2-0.34: generate / chat /
        # encode add their prompts, then _run_engine steps the engine until they finish):
        # LLM.__init__ built the engine before; the prompts are its requests being served
        return "serving"
    if "/kv_transfer/" in p and _VLLM_PKG.search(p) and (
        name in _KV_REQUEST_FUNCS or name.endswith("_from_engine_id")
    ):
        # vLLM's KV connectors at a request: the scheduler side's calls for a request
        # (KVConnectorBase_V1 get_num_new_matched_tokens / update_state_after_alloc /
        # request_finished, kv_connector/v1/base.py 0.9-0.34, called from the scheduler's
        # schedule / _free_request), and the NIXL worker's transfers from the remote engine
        # a request names (nixl_connector.py _nixl_handshake / add_remote_agent /
        # _read_blocks_for_req / _read_blocks, 0.9-0.34; kv_connector/utils.py TpKVTopology's
        # *_from_engine_id look-ups of that engine's handshake data): requests were served
        return "serving"
    if "/sglang/srt/mem_cache/" in p and (
        name in ("evict", "evict_from_tree_cache") or name.startswith("_evict_")
    ):
        # SGLang's prefix caches evicting their nodes (mem_cache/radix_cache.py, hiradix_
        # cache.py, swa_/mamba_/hi_mamba_radix_cache.py ... evict and their _evict_* steps,
        # 0.2-0.5.23): called only to free slots for a batch's tokens (common.py /
        # allocation.py evict_from_tree_cache under alloc_token_slots and the extend /
        # decode allocations of ScheduleBatch, 0.4-0.5.23; the PD decode side's
        # pre-allocation and a retracted request's resume): the scheduler was running
        # requests. (The source-derived catalogue keeps no row for RadixCache.evict: its
        # name-level call graph reaches the method from start-up code as well)
        return "serving"
    # no rule names it: the step the sources' call graph says alone reaches it
    # (diag/data/frame_phases.tsv, tools/frame_catalogue.py)
    return _catalogue_phase(p, func)


@dataclass(slots=True)
class _Stack:
    source: str
    rank: RankId | None
    ts: object
    first_line: int
    # (line, path, func) in the order printed
    frames: list[tuple[int, str, str]]
    innermost_first: bool
    rec: Record
    # the source lines printed under frames (the call each was making): (frame index, line,
    # text); a traceback cut before its next frame still names the call in progress
    codes: list[tuple[int, int, str]] = field(default_factory=list)
    # the first frame is the RPC method an executor named on the line before (_METHOD)
    method: bool = False


# (an assignment's targets may be a tuple: `model_class, _ = get_model_architecture(...)`)
_TARGETS = r"(?:[\w.\[\]()]+(?:\s*,\s*[\w.\[\]()]+)*\s*=\s*)?"
# (or follow a statement's keyword: `return self.model_runner.load_model()`, `with
# self.capture():`, `for batch in self.iterate(...)`, `yield from self.run(...)`)
_LEAD = (
    r"(?:(?:return|yield(?:\s+from)?|(?:async\s+)?with|if|elif|while|assert|not|"
    r"(?:async\s+)?for\s+[\w, ()]+?\s+in)\s+)?"
)
_CALL = re.compile(r"^\s*" + _LEAD + _TARGETS + r"(?:await\s+)?(?:[\w.]+\.)?(\w+)\(")
# a source line the paste cut inside the callee's name (`    scheduler.eve`): its prefix
_CUT_CALL = re.compile(
    r"^\s*" + _LEAD + _TARGETS + r"(?:await\s+)?(?:[\w.]+\.)?(\w{3,})$"
)


def _cut_call_phase(prefix: str) -> tuple[str, str] | None:
    """(name, phase) for a callee name the paste cut: the one phase every step name that
    begins so maps to (``eve`` -> the event loops -> serving); None when they disagree."""
    names = [
        (name, phase)
        for names, phase in _NAMED_STEPS
        for name in names
        if name.startswith(prefix)
    ]
    phases = {phase for _, phase in names}
    return (names[0][0], names[0][1]) if len(phases) == 1 else None
_TB_START = re.compile(r"Traceback \(most recent call last\)|\(most recent call first\)")
# the worker's RPC the traceback below it ran in: vLLM's executors log the method's name
# before the traceback (vllm/executor/multiproc_worker_utils.py 0.4.3-0.10.2 "Exception in
# worker {} while processing method {}."; worker_base.py / v1/worker/worker_base.py /
# v1/executor/ray_utils.py 0.4.3-0.25.1 "Error executing method {}. This might cause
# deadlock in distributed execution."): the method is the traceback's outermost step
# (V0's determine_num_available_blocks runs execute_model for its profile run)
_METHOD = re.compile(r"(?:while processing method|Error executing method) '?(\w+)'?[.:]")
_UNRAISABLE = re.compile(r"^Exception ignored (?:in\b|on calling\b|while\b)")


def _stacks(records: Sequence[Record]) -> Iterator[_Stack]:
    """Tracebacks and dump threads: frames grouped per (source, rank, pid), a new group at
    each "Traceback (most recent call last)" / "Thread ... (most recent call first)"."""
    open_: dict[tuple[str, RankId | None, int | None], _Stack] = {}
    # the executor's "while processing method M" line last seen per stream: (line, M, its
    # place among the logical lines of its source: a hard wrap the reader joined back
    # leaves gaps in the physical line numbers)
    method: dict[tuple[str, RankId | None, int | None], tuple[int, str, int]] = {}
    logical: dict[str, int] = {}  # per source, the logical lines before this record
    # CPython's unraisable hook (Python/errors.c PyErr_WriteUnraisable: "Exception ignored in
    # atexit callback: <function ...>", "Exception ignored in: <obj>") prints the traceback of
    # code run at exit or by the garbage collector, not a start-up step: the streams whose
    # current traceback it announced (the line that announced it, per stream)
    ignored: dict[tuple[str, RankId | None, int | None], int] = {}
    unraisable: set[tuple[str, RankId | None, int | None]] = set()
    for rec in records:
        key = (rec.source, rec.rank, rec.pid)
        # the record's lines, numbered from its own (a tuple: cheaper than a generator)
        texts = (rec.message, *rec.continuation) if rec.continuation else (rec.message,)
        base = logical.get(rec.source, 0) - rec.line
        logical[rec.source] = base + rec.line + len(texts)
        for line, text in enumerate(texts, rec.line):
            if "File \"" not in text and "File: \"" not in text:
                if "method" in text and (mm := _METHOD.search(text)) is not None:
                    method[key] = (line, mm.group(1), base + line)
                    continue
                if "Exception ignored" in text and _UNRAISABLE.match(text.strip()):
                    ignored[key] = line
                # (speed: both of _TB_START's forms hold the literal)
                if "most recent call" in text and _TB_START.search(text):
                    st = open_.pop(key, None)
                    if st is not None and st.frames:
                        yield st
                    # (the header follows the notice; a notice a paste wrapped and the
                    # reader re-joined keeps its first line's number)
                    if 0 <= line - ignored.get(key, -9) <= 4:
                        unraisable.add(key)
                    else:
                        unraisable.discard(key)
                    continue
                st = open_.get(key)
                if st is not None and st.frames and 0 < line - st.frames[-1][0] <= 2:
                    # the frame's source line, or the one after it where lines of two
                    # workers interleave (Ray's log deduplication, two streams in one
                    # paste): the later call line wins
                    st.codes.append((len(st.frames) - 1, line, text))
                continue
            m = FRAME.search(text)
            if m is None or key in unraisable:
                continue
            st = open_.get(key)
            if st is None:
                st = _Stack(rec.source, rec.rank, rec.ts, line, [], m.group("comma") == "", rec)
                open_[key] = st
                named = method.pop(key, None)
                if (
                    named is not None and not st.innermost_first
                    and 0 < base + line - named[2] <= 2
                ):
                    # the method line, then (at most) the traceback's header, then frames
                    st.frames.append((named[0], "", named[1]))
                    st.method = True
            st.frames.append((line, m.group("path"), m.group("func")))
    for st in open_.values():
        if st.frames:
            yield st


def frame_events(
    records: Sequence[Record], in_startup_method: set[tuple[str, int]] | None = None
) -> list[Event]:
    """One phase event per traceback or dump thread whose frames map to a phase.

    ``in_startup_method`` collects (source, line) of the records whose traceback ran in a
    start-up RPC an executor named (``while processing method determine_num_available_
    blocks``): their serving frames (``execute_model``) are that step's, not serving."""
    from diag.timeline import advance

    out: list[Event] = []
    last_line: dict[str, int] = {}
    for r in records:
        end = r.line + len(r.continuation)
        if end > last_line.get(r.source, 0):
            last_line[r.source] = end
    for st in _stacks(records):
        if st.innermost_first:
            frames = list(reversed(st.frames))
        else:
            # each frame, then the call its source line shows it making
            # (`init_worker_distributed_environment(`, `scheduler.event_loop_overlap()`): the
            # next frame's function, or, where the paste cut the traceback, the only sign of it
            calls: dict[int, tuple[int, str]] = {}
            for i, line, text in st.codes:
                call = _CALL.search(text)
                if call is not None:
                    calls[i] = (line, call.group(1))
                elif (
                    i == len(st.frames) - 1
                    and line == last_line.get(st.source)
                    and (cut := _CUT_CALL.match(text)) is not None
                ):
                    # the window ends inside the last call's name
                    named = _cut_call_phase(cut.group(1))
                    if named is not None:
                        calls[i] = (line, named[0])
            frames = []
            for i, (line, path, func) in enumerate(st.frames):
                frames.append((line, path, func))
                if i in calls:
                    frames.append((calls[i][0], path, calls[i][1]))
        looked = [(line, path, func, frame_phase(path, func)) for line, path, func in frames]
        outer = next(
            (i for i, (_, path, func, _) in enumerate(looked) if _config_build(path, func)), None
        )
        if outer is not None:
            # the frames under the configuration's build ran while it was built (at most
            # model_config; _config_build)
            looked = looked[: outer + 1] + [
                (line, path, func, "model_config" if ph and phase_index(ph) > _CONFIG_AT else ph)
                for line, path, func, ph in looked[outer + 1 :]
            ]
        mapped = [(line, func, ph) for line, _, func, ph in looked if ph]
        if not mapped:
            continue
        if any(ph in _STARTUP and not _lower_bound(path, func) for _, path, func, ph in looked):
            mapped = [m for m in mapped if m[2] != "serving"]
            if st.method and in_startup_method is not None and mapped[0][1] == st.frames[0][2]:
                in_startup_method.add((st.source, st.rec.line))
        if any(ph == "warmup" and f.rsplit(".", 1)[-1] in _SLEEP_MODE for _, _, f, ph in looked):
            # a sleep-mode call (wake_up / sleep) the engine core's busy loop answers
            # (_handle_client_request): RL trainers (verl, OpenRLHF) put the engine to sleep
            # right after its start-up and wake it for each rollout, the first one before
            # any request; the busy loop's frames do not prove a request was served
            mapped = [m for m in mapped if m[2] != "serving"] or mapped
        phase: str | None = None
        where = mapped[0]
        for m in mapped:
            nxt = advance(phase, m[2], seen=())
            if nxt != phase:
                phase, where = nxt, m
        if phase is None:
            continue
        line, func, _ = where
        rec = st.rec
        out.append(
            Event(
                source=st.source,
                line=line,
                ts=rec.ts,
                rank=st.rank,
                phase=phase,
                kind="mark",
                pattern=f"frames.{func}",
                message=f"traceback frame in {func} (phase {phase})",
                fields={"frame": func},
            )
        )
    out.sort(key=lambda e: (e.source, e.line, phase_index(e.phase)))
    return out
