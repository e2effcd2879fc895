"""The wait-site rules table: one example stack per rule, thread choice, GPU facts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.model import STACK_SITES, StackFrame, StackProcess, StackThread
from diag.stacks.classify import (
    C10D_REPORT_RULE,
    NATIVE_CALL_RULE,
    RULES,
    apply_gpu_facts,
    classified,
    classify_frames,
    classify_process,
    classify_thread_rule,
    classify_wchan,
    is_helper_thread,
    is_pass_through,
    pick_thread,
)
from diag.stacks.frames import make_frame, rank_from_title, split_pyspy_frame


def frames(*lines: str) -> tuple[StackFrame, ...]:
    """py-spy text frame lines, innermost first."""
    out = []
    for line in lines:
        parts = split_pyspy_frame(line)
        assert parts is not None, line
        out.append(make_frame(*parts))
    return tuple(out)


# (expected rule id, expected site, frames innermost first). Every rule has one.
EXAMPLES: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "nccl-comm-init",
        "stack.dist_init",
        (
            "ncclCommInitRankConfig (libnccl.so.2)",
            "c10d::ProcessGroupNCCL::initNCCLComm (libtorch_cuda.so)",
        ),
    ),
    (
        "nccl-bootstrap",
        "stack.dist_init",
        (
            "poll (libc.so.6)",
            "ncclSocketPollConnect (libnccl.so.2)",
            "ncclSocketConnect (libnccl.so.2)",
            "bootstrapInit (libnccl.so.2)",
            "ncclCommInitRankFunc (libnccl.so.2)",
        ),
    ),
    (
        "c10d-nccl-comm-init",
        "stack.dist_init",
        ("0x7f00aa (libc.so.6)", "c10d::ProcessGroupNCCL::getNCCLComm (libtorch_cuda.so)"),
    ),
    (
        "c10d-store",
        "stack.dist_init",
        (
            "poll (libc.so.6)",
            "c10d::detail::SocketImpl::waitForInput (libtorch_cpu.so)",
            "c10d::TCPStore::doWait (libtorch_cpu.so)",
            "worker (gpu_probe.py:56)",
        ),
    ),
    (
        "c10d-init-py",
        "stack.dist_init",
        (
            "_store_based_barrier (torch/distributed/distributed_c10d.py:4512)",
            "init_process_group (torch/distributed/distributed_c10d.py:1700)",
        ),
    ),
    (
        "inductor-pipe",
        "stack.ipc_wait",
        ("_recv_msg (torch/_inductor/compile_worker/subproc_pool.py:75)",),
    ),
    (
        "device-mesh-init",
        "stack.dist_init",
        (
            "DeviceMesh._init_process_groups (torch/distributed/device_mesh.py:800)",
            "init_device_mesh (torch/distributed/device_mesh.py:1200)",
        ),
    ),
    (
        "stateless-group-store",
        "stack.dist_init",
        (
            "StatelessProcessGroup.broadcast_obj (vllm/distributed/utils.py:160)",
            "PyNcclCommunicator.__init__ (vllm/distributed/device_communicators/pynccl.py:99)",
        ),
    ),
    (
        "torch-rendezvous",
        "stack.dist_init",
        (
            "_create_c10d_store (torch/distributed/rendezvous.py:189)",
            "_env_rendezvous_handler (torch/distributed/rendezvous.py:274)",
        ),
    ),
    (
        "framework-dist-init",
        "stack.dist_init",
        (
            "ModelRunner.init_torch_distributed (model_runner.py:620)",
            "ModelRunner.__init__ (model_runner.py:499)",
        ),
    ),
    (
        "nccl-native",
        "stack.nccl_collective",
        ("ncclGroupEnd (libnccl.so.2)", "0x7f00aa (libtorch_cuda.so)"),
    ),
    (
        "vendor-ccl-native",
        "stack.nccl_collective",
        (
            "HcclAllReduce (libhccl.so)",
            "c10d_npu::ProcessGroupHCCL::allreduce (libtorch_npu.so)",
        ),
    ),
    (
        "vendor-ccl-native",
        "stack.nccl_collective",
        (
            "ccl_executor::wait(ccl_request const*) (libccl.so.1)",
            "ccl_coll_create(ccl_coll_param&, ccl_coll_attr const&) (libccl.so.1)",
            "ccl_allgather_impl (libccl.so.1)",
        ),
    ),
    (
        "c10d-process-group",
        "stack.nccl_collective",
        (
            "0x7fbb512a3f16 (libc.so.6)",
            "pthread_cond_wait (libc.so.6)",
            "std::condition_variable::wait (libstdc++.so.6.0.30)",
            "c10d::Work::wait (libtorch_cpu.so)",
            "all_reduce (torch/distributed/distributed_c10d.py:3252)",
        ),
    ),
    (
        "gloo",
        "stack.nccl_collective",
        (
            "pthread_cond_timedwait (libc.so.6)",
            "gloo::transport::tcp::UnboundBuffer::waitRecv (libtorch_cpu.so)",
        ),
    ),
    (
        "nccl-teardown",
        "stack.gil_or_lock",
        (
            "pthread_join (libc.so.6)",
            "commFree (libnccl.so.2)",
            "ncclCommAbort (libnccl.so.2)",
            "c10d::ProcessGroupNCCL::abortCommsFromMap (libtorch_cuda.so)",
        ),
    ),
    (
        "native-collective-class",
        "stack.nccl_collective",
        (
            "cudaStreamSynchronize (libcudart.so.12)",
            "tensorrt_llm::plugins::AllgatherPlugin::enqueue (libnvinfer_plugin_tensorrt_llm.so)",
        ),
    ),
    (
        "shm-allreduce",
        "stack.nccl_collective",
        (
            "get_curr_stamp (shm.cpp:130)",
            "wait_for_all<bool (&)(char, char, char, char)> (shm.cpp:171)",
            "shm_allreduce (shm.cpp:838)",
            "OpOverload.__call__ (torch/_ops.py:875)",
        ),
    ),
    (
        "c10d-collective-py",
        "stack.nccl_collective",
        (
            "broadcast (torch/distributed/distributed_c10d.py:3787)",
            "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
            "broadcast_pyobj (utils/common.py:2715)",
        ),
    ),
    (
        "functional-collectives",
        "stack.nccl_collective",
        ("wait_tensor (torch/distributed/_functional_collectives.py:144)",),
    ),
    (
        "framework-comm-module",
        "stack.nccl_collective",
        (
            "CustomAllreduce.all_reduce"
            " (vllm/distributed/device_communicators/custom_all_reduce.py:300)",
        ),
    ),
    (
        "pynccl-wrapper",
        "stack.nccl_collective",
        (
            "ncclCommWindowRegister (pynccl_wrapper.py:540)",
            "register_comm_window_raw (pynccl.py:308)",
        ),
    ),
    (
        "framework-group-collective",
        "stack.nccl_collective",
        (
            "GroupCoordinator.recv_tensor_dict (sglang/srt/distributed/parallel_state.py:1299)",
            "Scheduler._pp_recv_proxy_tensors (scheduler_pp_mixin.py:941)",
        ),
    ),
    (
        "kernel-lib-comm",
        "stack.nccl_collective",
        (
            "trtllm_allreduce_fusion (flashinfer/comm/trtllm_ar.py:900)",
            "FlashInferAllReduce.all_reduce (x.py:1)",
        ),
    ),
    (
        "custom-ops-allreduce",
        "stack.nccl_collective",
        (
            "all_reduce (vllm/_custom_ops.py:1800)",
            "CustomAllreduce.custom_all_reduce (x.py:1)",
        ),
    ),
    (
        "dp-attention-collective",
        "stack.nccl_collective",
        (
            "dp_reduce_scatter_tensor (layers/dp_attention.py:480)",
            "LayerCommunicator.postprocess_layer (layers/communicator.py:300)",
        ),
    ),
    (
        "ep-all-to-all",
        "stack.nccl_collective",
        (
            "Buffer.low_latency_dispatch (deep_ep/buffer.py:600)",
            "DeepEPDispatcher.dispatch (layers/moe/token_dispatcher/deepep.py:500)",
        ),
    ),
    (
        # SGLang disaggregation/utils.py poll_and_all_reduce behind torch's logging wrapper
        "framework-collective-name",
        "stack.nccl_collective",
        (
            "wrapper (torch/distributed/c10d_logger.py:81)",
            "poll_and_all_reduce (sglang/srt/disaggregation/utils.py:55)",
            "process_disagg_prefill_inflight_queue (sglang/srt/disaggregation/prefill.py:490)",
        ),
    ),
    (
        # a collective library's connection set-up at worker init (MSCCL++)
        "communicator-setup",
        "stack.dist_init",
        (
            "make_connection (mscclpp/comm.py:104)",
            "init_mscclpp_comm (vllm/worker/worker.py:141)",
            "init_model (vllm/worker/worker.py:93)",
        ),
    ),
    (
        # a dump cut above torch's logging wrapper, the caller names nothing
        "c10d-api-wrapper",
        "stack.nccl_collective",
        (
            "wrapper (torch/distributed/c10d_logger.py:81)",
            "step (my_trainer.py:55)",
        ),
    ),
    (
        "sglang-pyobj",
        "stack.nccl_collective",
        (
            "point_to_point_pyobj (utils/common.py:1364)",
            "Scheduler.recv_requests (scheduler.py:1200)",
        ),
    ),
    (
        "cuda-graph-native",
        "stack.cuda_graph_capture",
        (
            "cudaStreamEndCapture (libcudart.so.12)",
            "at::cuda::CUDAGraph::capture_end (libtorch_cuda.so)",
        ),
    ),
    (
        "cuda-graph-replay",
        "stack.cuda_sync",
        (
            "CUDAGraph.replay (torch/cuda/graphs.py:88)",
            "CudaGraphRunner.replay (cuda_graph_runner.py:700)",
            "ModelRunner.forward_decode (model_runner.py:1500)",
        ),
    ),
    (
        "torch-cuda-graphs",
        "stack.cuda_graph_capture",
        (
            "CUDAGraph.capture_end (torch/cuda/graphs.py:99)",
            "graph.__exit__ (torch/cuda/graphs.py:206)",
        ),
    ),
    (
        "framework-graph-capture",
        "stack.cuda_graph_capture",
        (
            "LlamaForCausalLM.forward (llama.py:400)",
            "CudaGraphRunner.capture_one_batch_size (cuda_graph_runner.py:612)",
            "CudaGraphRunner.capture (cuda_graph_runner.py:500)",
        ),
    ),
    (
        "framework-graph-run-once",
        "stack.cuda_graph_capture",
        (
            "LlamaForCausalLM.forward (llama.py:400)",
            "EAGLEDraftCudaGraphRunner.capture_one_batch_size.<locals>.run_once (eagle_draft_cuda_graph_runner.py:446)",  # noqa: E501
        ),
    ),
    (
        "graph-or-trace-capture-name",
        "stack.cuda_graph_capture",
        (
            "Generator._capture_decode_trace_text (generator.py:642)",
            "Generator._decode_forward_trace_text (generator.py:658)",
        ),
    ),
    (
        "cuda-sync-native",
        "stack.cuda_sync",
        (
            "0x7f466ee14820 (libcuda.so.580.159.04)",
            "cuCtxSynchronize_v2 (libcuda.so.580.159.04)",
            "cudaDeviceSynchronize (libcudart.so.13)",
            "synchronize (torch/cuda/__init__.py:1162)",
        ),
    ),
    (
        "cuda-launch-native",
        "stack.cuda_sync",
        (
            "0x7feeea4cc5f5 (libcuda.so.580.159.04)",
            "cuLaunchKernel (libcuda.so.580.159.04)",
            "cudaLaunchKernel (libcudart.so.13)",
            "at::native::structured_sum_out::impl (libtorch_cpu.so)",
        ),
    ),
    (
        "device-copy-native",
        "stack.cuda_sync",
        (
            "read (libc.so.6)",
            "eventfd_read (libc.so.6)",
            "c10_npu::NPUStream::stream (libtorch_npu.so)",
            "at::_ops::copy_::call (libtorch_cpu.so)",
            "torch::autograd::THPVariable_to (libtorch_python.so)",
            "decorated (torch_npu/contrib/transfer_to_npu.py:182)",
        ),
    ),
    (
        "cumem-allocator",
        "stack.cuda_sync",
        (
            "unmap_and_release (vllm/device_allocator/cumem.py:82)",
            "sleep (vllm/device_allocator/cumem.py:251)",
        ),
    ),
    (
        "torch-cuda-sync",
        "stack.cuda_sync",
        ("synchronize (torch/cuda/__init__.py:1162)", "worker (gpu_probe.py:51)"),
    ),
    (
        "accelerator-sync-py",
        "stack.cuda_sync",
        (
            "wait_device_ops (torch_xla/core/xla_model.py:1100)",
            "TPUModelRunner.execute_model (vllm/v1/worker/tpu_model_runner.py:900)",
        ),
    ),
    (
        "jax-host-transfer",
        "stack.cuda_sync",
        (
            "_value (jax/_src/array.py:642)",
            "wrapper (jax/_src/profiler.py:420)",
            "__float__ (jax/_src/array.py:300)",
            "main (train.py:392)",
        ),
    ),
    (
        "cuda-free-sync",
        "stack.cuda_sync",
        (
            "empty_cache (torch/cuda/memory.py:222)",
            "ModelRunner.profile_max_num_token (model_runner.py:900)",
        ),
    ),
    (
        "flashinfer-module-getter",
        "stack.jit_compile",
        (
            "get_batch_prefill_module (flashinfer/prefill.py:374)",
            "plan (flashinfer/decode.py:1031)",
        ),
    ),
    (
        "gpu-kernel-leaf",
        "stack.cuda_sync",
        (
            "top_k_top_p_sampling_from_logits (flashinfer/sampling.py:1548)",
            "flashinfer_sample (vllm/v1/sample/ops/topk_topp_sampler.py:508)",
            "compile_or_warm_up_model (vllm/v1/worker/gpu_worker.py:866)",
        ),
    ),
    (
        "inductor-compile",
        "stack.jit_compile",
        (
            "VecISA.check_build (torch/_inductor/cpu_vec_isa.py:189)",
            "compile_fx (torch/_inductor/compile_fx.py:2782)",
        ),
    ),
    (
        "inductor-autotune",
        "stack.jit_compile",
        (
            "Benchmarker.benchmark_gpu (torch/_inductor/runtime/benchmarking.py:95)",
            "CachingAutotuner.bench (torch/_inductor/runtime/triton_heuristics.py:999)",
            "CachingAutotuner.benchmark_all_configs"
            " (torch/_inductor/runtime/triton_heuristics.py:1139)",
        ),
    ),
    (
        "inductor-subproc-wait",
        "stack.jit_compile",
        ("SubprocPool.submit (torch/_inductor/compile_worker/subproc_pool.py:230)",),
    ),
    (
        "dynamo-compile",
        "stack.jit_compile",
        ("InstructionTranslator.run (torch/_dynamo/symbolic_convert.py:1200)",),
    ),
    (
        "dynamo-aot-compile",
        "stack.jit_compile",
        ("aot_compile_fullgraph (torch/_dynamo/aot_compile.py:396)",),
    ),
    (
        "aot-autograd-compile",
        "stack.jit_compile",
        ("aot_stage2_compile (torch/_functorch/_aot_autograd/graph_compile.py:364)",),
    ),
    (
        "fx-symbolic-compile",
        "stack.jit_compile",
        (
            "ShapeEnv.evaluate_expr (torch/fx/experimental/symbolic_shapes.py:7000)",
            "InstructionTranslatorBase.step (torch/_dynamo/symbolic_convert.py:1300)",
        ),
    ),
    (
        "vllm-compilation",
        "stack.jit_compile",
        ("VllmBackend.__call__ (vllm/compilation/backends.py:600)",),
    ),
    (
        "vllm-compile-wrapper",
        "stack.jit_compile",
        ("TorchCompileWithNoGuardsWrapper.aot_compile (vllm/compilation/wrapper.py:185)",),
    ),
    (
        "triton-driver-build",
        "stack.jit_compile",
        (
            "create_module (<frozen importlib._bootstrap_external>:1320)",
            "compile_module_from_src (triton/backends/nvidia/driver.py:71)",
            "__init__ (triton/backends/nvidia/driver.py:500)",
        ),
    ),
    (
        "xla-compile",
        "stack.jit_compile",
        (
            "backend_compile (jax/_src/compiler.py:267)",
            "wrapper (jax/_src/profiler.py:334)",
            "compile_or_get_cached (jax/_src/compiler.py:490)",
        ),
    ),
    (
        "xla-compile-native",
        "stack.jit_compile",
        (
            "_Unwind_Backtrace (libgcc_s.so.1)",
            "xla::gpu::GpuCompiler::RunBackend (xla_cuda_plugin.so)",
        ),
    ),
    (
        "mpi-collective-native",
        "stack.nccl_collective",
        (
            "MPIDI_CH3I_Progress (libmpi.so.12)",
            "MPIC_Recv (libmpi.so.12)",
            "MPIR_Bcast_intra_binomial (libmpi.so.12)",
            "PMPI_Bcast (libmpi.so.12)",
        ),
    ),
    (
        "triton-compile",
        "stack.jit_compile",
        (
            "compile (triton/compiler/compiler.py:300)",
            "JITFunction.run (triton/runtime/jit.py:590)",
        ),
    ),
    ("kernel-jit", "stack.jit_compile", ("_run_ninja_build (torch/utils/cpp_extension.py:2300)",)),
    ("nvcc-native", "stack.jit_compile", ("nvrtcCompileProgram (libnvrtc.so.12)",)),
    ("safetensors", "stack.weights_io", ("safe_open.get_tensor (safetensors/torch.py:300)",)),
    (
        "weight-utils",
        "stack.weights_io",
        ("safetensors_weights_iterator (vllm/model_executor/model_loader/weight_utils.py:470)",),
    ),
    (
        "model-loader",
        "stack.weights_io",
        (
            "Condition.wait (threading.py:339)",
            "Semaphore.acquire (threading.py:479)",
            "ThreadPoolExecutor.submit (concurrent/futures/thread.py:176)",
            "DefaultModelLoader._get_all_weights (model_loader/loader.py:766)",
        ),
    ),
    ("model-load-weights", "stack.weights_io", ("LlamaForCausalLM.load_weights (llama.py:706)",)),
    (
        "weights-readers",
        "stack.weights_io",
        ("GGUFReader._build_tensors (gguf/gguf_reader.py:300)",),
    ),
    ("torch-load", "stack.weights_io", ("load (torch/serialization.py:1300)",)),
    (
        "checkpoint-file-loader",
        "stack.weights_io",
        ("__getitem__ (torch/storage.py:471)", "load_torch_file (comfy/utils.py:136)",
         "load_clip (comfy/sd.py:1454)"),
    ),
    (
        "hf-state-dict-loader",
        "stack.weights_io",
        ("load_state_dict (transformers/modeling_utils.py:560)",
         "_load_pretrained_model (transformers/modeling_utils.py:4800)"),
    ),
    (
        "hf-download",
        "stack.weights_io",
        ("SocketIO.readinto (socket.py:706)", "http_get (huggingface_hub/file_download.py:400)"),
    ),
    ("zmq", "stack.ipc_wait", ("Socket.recv_pyobj (zmq/sugar/socket.py:1033)", "f (x.py:1)")),
    (
        "zmq-wrapper",
        "stack.ipc_wait",
        (
            "Socket.recv_pyobj (zmq/sugar/socket.py:1033)",
            "sock_recv (io_struct.py:2742)",
            "f (x.py:1)",
        ),
    ),
    (
        "zmq-native",
        "stack.ipc_wait",
        ("poll (libc.so.6)", "zmq_msg_recv (libzmq-2f02442c.so.5.2.5)"),
    ),
    (
        "shm-broadcast",
        "stack.ipc_wait",
        (
            "MessageQueue.dequeue (vllm/distributed/device_communicators/shm_broadcast.py:971)",
            "f (x.py:1)",
        ),
    ),
    (
        "sched-yield-spin",
        "stack.ipc_wait",
        ("sched_yield (vllm/distributed/utils.py:48)", "f (x.py:1)"),
    ),
    (
        "pynccl-communicator-init",
        "stack.dist_init",
        (
            "__init__ (vllm/distributed/device_communicators/pynccl.py:208)",
            "__init__ (vllm/distributed/parallel_state.py:240)",
        ),
    ),
    ("mp-connection", "stack.ipc_wait", ("Connection._recv (multiprocessing/connection.py:395)",)),
    (
        "framework-wait-peer",
        "stack.ipc_wait",
        (
            "_PollLikeSelector.select (selectors.py:415)",
            "_wait_for_scheduler_ready (engine.py:2025)",
        ),
    ),
    (
        "p2p-probe",
        "stack.ipc_wait",
        (
            "Connection._recv (multiprocessing/connection.py:395)",
            "gpu_p2p_access_check"
            " (vllm/distributed/device_communicators/custom_all_reduce_utils.py:230)",
            "CustomAllreduce.__init__"
            " (vllm/distributed/device_communicators/custom_all_reduce.py:120)",
            "ensure_model_parallel_initialized (vllm/distributed/parallel_state.py:1100)",
        ),
    ),
    ("ray-get", "stack.ipc_wait", ("get (ray/_private/worker.py:2700)",)),
    (
        "future-result",
        "stack.ipc_wait",
        (
            "Condition.wait (threading.py:327)",
            "Future.result (concurrent/futures/_base.py:451)",
            "main (x.py:3)",
        ),
    ),
    (
        "sglang-idle",
        "stack.idle_loop",
        ("Scheduler.is_fully_idle (scheduler.py:5355)", "Scheduler.on_idle (scheduler.py:5254)"),
    ),
    (
        "serving-loop-wait",
        "stack.idle_loop",
        (
            "poll (zmq/sugar/poll.py:106)",
            "wait (vllm/distributed/device_communicators/shm_broadcast.py:198)",
            "acquire_read (vllm/distributed/device_communicators/shm_broadcast.py:698)",
            "dequeue (vllm/distributed/device_communicators/shm_broadcast.py:779)",
            "worker_busy_loop (vllm/v1/executor/multiproc_executor.py:973)",
            "worker_main (vllm/v1/executor/multiproc_executor.py:879)",
        ),
    ),
    (
        "named-loop-wait",
        "stack.idle_loop",
        (
            "poll (zmq/sugar/poll.py:106)",
            "MessageQueueClient._main_loop (kvcache/mq.py:240)",
            "Thread.run (threading.py:1012)",
        ),
    ),
    (
        "helper-process-loop",
        "stack.idle_loop",
        ("main (multiprocessing/resource_tracker.py:227)", "<module> (<string>:1)"),
    ),
    (
        "asyncio-loop",
        "stack.idle_loop",
        ("select (selectors.py:468)", "BaseEventLoop._run_once (asyncio/base_events.py:1898)"),
    ),
    (
        "pool-worker-idle",
        "stack.idle_loop",
        ("_worker (concurrent/futures/thread.py:81)", "Thread.run (threading.py:982)"),
    ),
    (
        "kv-transfer",
        "stack.ipc_wait",
        (
            "KVManager.wait_for_transfer (disaggregation/mooncake/conn.py:700)",
            "SchedulerDisaggregationPrefillMixin.process_disagg_prefill_inflight_queue"
            " (disaggregation/prefill.py:400)",
        ),
    ),
    ("gil-wait", "stack.gil_or_lock", ("take_gil (libpython3.11.so.1.0)",)),
    (
        "filelock",
        "stack.jit_compile",
        ("BaseFileLock.acquire (filelock/_api.py:330)", "cached_build (mylib/cache.py:12)"),
    ),
    ("flock-native", "stack.jit_compile", ("flock (libc.so.6)", "lock (mylib/cache.py:12)")),
    (
        "queue-get",
        "stack.ipc_wait",
        ("Condition.wait (threading.py:327)", "Queue.get (queue.py:171)", "<module> (tgt.py:10)"),
    ),
    ("selectors", "stack.ipc_wait", ("_PollLikeSelector.select (selectors.py:415)", "f (x.py:1)")),
    ("socket-py", "stack.ipc_wait", ("SocketIO.readinto (socket.py:706)", "f (x.py:1)")),
    (
        "subprocess-wait",
        "stack.ipc_wait",
        ("Popen._wait (subprocess.py:2000)", "Popen.wait (subprocess.py:1264)", "f (x.py:1)"),
    ),
    ("ray-any", "stack.ipc_wait", ("wait (ray/util/queue.py:90)", "f (x.py:1)")),
    (
        "io-native",
        "stack.ipc_wait",
        ("read (libc.so.6)", "os_read (libpython3.11.so.1.0)", "f (x.py:1)"),
    ),
    (
        "gpu-runtime-unsymbolised",
        "stack.cuda_sync",
        (
            "0x7f364e814833 (libcuda.so.580.159.04)",
            "0x7f364e5d36c3 (libcuda.so.580.159.04)",
            "worker (frras.py:67)",
        ),
    ),
    (
        "nccl-unsymbolised",
        "stack.nccl_collective",
        ("0x7f00aa12 (libnccl.so.2)", "f (x.py:1)"),
    ),
    ("sleep", "stack.idle_loop", ("clock_nanosleep (libc.so.6)", "main (hang.py:18)")),
    (
        "threading-py",
        "stack.gil_or_lock",
        (
            "PyThread_acquire_lock_timed (python3.12)",
            "_shutdown (threading.py:1622)",
            "_bootstrap (multiprocessing/process.py:332)",
        ),
    ),
    (
        "mp-synchronize",
        "stack.gil_or_lock",
        ("Lock.__enter__ (multiprocessing/synchronize.py:95)",),
    ),
    ("mutex-native", "stack.gil_or_lock", ("pthread_mutex_lock (libc.so.6)", "f (x.py:1)")),
    (
        "lock-native",
        "stack.gil_or_lock",
        ("pthread_cond_wait (libc.so.6)", "Runtime::poll (libfoo.so)", "f (x.py:1)"),
    ),
]


@pytest.mark.parametrize(("rule_id", "site", "lines"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_rule_example(rule_id: str, site: str, lines: tuple[str, ...]) -> None:
    got, rule = classify_frames(frames(*lines))
    assert rule is not None and (rule.id, got) == (rule_id, site)


def test_every_rule_pattern_compiles() -> None:
    """At import only the sites are checked; the patterns compile on first use."""
    from diag.stacks import classify

    classify._CACHE.clear()
    classify._check_table(compile_patterns=True)
    assert len(classify._CACHE) > 100


def test_every_rule_and_every_site_has_an_example() -> None:
    assert {r.id for r in RULES} == {e[0] for e in EXAMPLES}
    assert len({r.id for r in RULES}) == len(RULES)
    assert set(STACK_SITES) <= {e[1] for e in EXAMPLES}


@pytest.mark.parametrize(
    "lines",
    [
        # running compiled code is not compiling it
        (
            "OpOverload.__call__ (torch/_ops.py:875)",
            "CompiledFxGraph.__call__ (torch/_inductor/output_code.py:763)",
            "AOTCompiledFunction.__call__ (torch/_dynamo/aot_compile.py:244)",
        ),
        # busy Python inside the serving loop: not an idle loop
        (
            "gc_object_counts (utils/common.py:4357)",
            "Scheduler.event_loop_overlap (scheduler.py:2078)",
            "Runner.run (asyncio/runners.py:118)",
        ),
        # a user function named like a compile is not one
        ("jit_compile_kernel (frras.py:39)", "worker (frras.py:69)"),
        # a Python-only dump of a C++ wait shows only its caller
        ("worker (gpu_probe.py:56)", "<module> (<string>:1)"),
        # model construction importing modules: not a weights read
        (
            "get_tensor_method (torch/_dynamo/trace_rules.py:3113)",
            "BaseModelLoader.create_model (model_loader/base_loader.py:58)",
            "BaseModelLoader.load_model (model_loader/base_loader.py:76)",
        ),
    ],
)
def test_no_site_is_invented(lines: tuple[str, ...]) -> None:
    assert classify_frames(frames(*lines)) == (None, None)


def test_message_queue_by_its_caller_rpc_idle_worker_or_group_broadcast() -> None:
    """The same MessageQueue wait is an RPC (the engine waiting for a worker's reply),
    an idle worker (waiting for its next command: "healthy idle worker parked waiting for
    the next batch over shm-broadcast") or a collective (a GroupCoordinator broadcast)."""
    mq = (
        "Poller.poll (zmq/sugar/poll.py:106)",
        "SpinCondition.wait (vllm/distributed/device_communicators/shm_broadcast.py:210)",
        "MessageQueue.acquire_read (vllm/distributed/device_communicators/shm_broadcast.py:864)",
        "MessageQueue.dequeue (vllm/distributed/device_communicators/shm_broadcast.py:971)",
    )
    rpc = (*mq, "MultiprocExecutor.get_response (vllm/v1/executor/multiproc_executor.py:387)")
    idle = (*mq, "WorkerProc.worker_busy_loop (vllm/v1/executor/multiproc_executor.py:1041)")
    group = (
        *mq,
        "GroupCoordinator.broadcast_object (vllm/distributed/parallel_state.py:640)",
        "GroupCoordinator.broadcast_tensor_dict (vllm/distributed/parallel_state.py:700)",
    )
    assert classify_frames(frames(*rpc))[0] == "stack.ipc_wait"
    assert classify_frames(frames(*idle))[0] == "stack.idle_loop"
    assert classify_frames(frames(*group))[0] == "stack.nccl_collective"
    # a serving loop's own work is not its idle wait: the leaf rule needs a wait inside
    busy = (
        "Scheduler.get_next_batch_to_run (scheduler.py:1500)",
        "Scheduler.event_loop (scheduler.py:900)",
    )
    assert classify_frames(frames(*busy)) == (None, None)


def test_innermost_strong_wins_over_outer_context() -> None:
    # an all-reduce during CUDA-graph capture: the collective is where it waits
    lines = (
        "all_reduce (torch/distributed/distributed_c10d.py:3252)",
        "CudaGraphRunner.capture (cuda_graph_runner.py:500)",
    )
    assert classify_frames(frames(*lines))[0] == "stack.nccl_collective"
    # a file lock inside Inductor is a compile wait, inside a HF download a weights one
    lock = "BaseFileLock.acquire (filelock/_api.py:330)"
    hf = "hf_hub_download (huggingface_hub/file_download.py:900)"
    assert classify_frames(frames(lock, hf))[0] == "stack.weights_io"
    # waiting for DeepGEMM compile futures is a compile wait (sglang#7387's stack)
    deep_gemm = (
        "Condition.wait (threading.py:355)",
        "_result_or_cancel (concurrent/futures/_base.py:317)",
        "result_iterator (concurrent/futures/_base.py:619)",
        "tqdm.__iter__ (tqdm/std.py:1181)",
        "_executor_map (tqdm/contrib/concurrent.py:51)",
        "thread_map (tqdm/contrib/concurrent.py:69)",
        "_maybe_compile_deep_gemm_one_type_all (deep_gemm_wrapper/compile_utils.py:297)",
    )
    assert classify_frames(frames(*deep_gemm))[0] == "stack.jit_compile"


def _thread(tid: int, name: str | None, *lines: str) -> StackThread:
    return StackThread(thread_id=tid, name=name, frames=frames(*lines), idle=True)


def test_helper_threads_are_recognised() -> None:
    tqdm = _thread(
        2, "tqdm_monitor", "Condition.wait (threading.py:331)", "TMonitor.run (tqdm/_monitor.py:69)"
    )
    reader = _thread(
        3,
        "Thread-1 (_read_thread)",
        "_recv_msg (torch/_inductor/compile_worker/subproc_pool.py:61)",
        "_read_thread (torch/_inductor/compile_worker/subproc_pool.py:195)",
    )
    anon_tqdm = _thread(4, None, "wait (threading.py:359)", "run (tqdm/_monitor.py:60)")
    main = _thread(1, "MainThread", "TMonitor.run (tqdm/_monitor.py:69)")
    assert [is_helper_thread(t) for t in (tqdm, reader, anon_tqdm, main)] == [
        True,
        True,
        True,
        False,
    ]


def _native(tid: int, name: str | None, *frames_: tuple[str, str]) -> StackThread:
    """A gdb thread: (function, library) innermost first."""
    return StackThread(
        thread_id=tid,
        name=name,
        frames=tuple(StackFrame(name=n, filename=lib, native=True) for n, lib in frames_),
    )


def test_driver_and_runtime_threads_are_helpers_torch_main_thread_is_not() -> None:
    poll = [
        ("poll", "/usr/lib64/libc.so.6"),
        ("0x00007ff995abc1ef", "/usr/lib64/libcuda.so.1"),
        ("start_thread", "/usr/lib64/libpthread.so.0"),
        ("clone", "/usr/lib64/libc.so.6"),
    ]
    # named by the CUDA driver, or unnamed with only libcuda / libevent+PMIx frames
    assert is_helper_thread(_native(9, "cuda-EvtHandlr", *poll))
    assert is_helper_thread(_native(9, None, *poll))
    assert is_helper_thread(_native(9, "cuda00006000019", ("poll", "/lib64/libc.so.6")))
    assert is_helper_thread(
        _native(
            3,
            "executor_server",
            ("epoll_wait", "/lib64/libc.so.6"),
            ("event_base_loop", "/lib64/libevent_core-2.1.so.6"),
            ("0x00007fd0ac7f9276", "/lib64/libpmix.so.2"),
            ("start_thread", "/lib64/libpthread.so.0"),
        )
    )
    # torch names its main thread pt_main_thread: not one of its pt_* helpers
    assert not is_helper_thread(_native(8, "pt_main_thread", ("pthread_join", "libpthread.so.0")))
    assert is_helper_thread(_native(8, "pt_nccl_watchdg", ("pthread_join", "libpthread.so.0")))
    # a library thread that runs torch's code, or the main thread (no start_thread), is not
    assert not is_helper_thread(
        _native(5, None, ("0x1", "/usr/lib64/libcuda.so.1"), ("f", "/x/libtorch_cuda.so"),
                ("start_thread", "libpthread.so.0"))
    )
    assert not is_helper_thread(
        _native(1, None, ("0x1", "/usr/lib64/libcuda.so.1"), ("__libc_start_main", "libc.so.6"))
    )


def test_main_thread_stands_unless_another_is_held_harder() -> None:
    main_ipc = _thread(
        10,
        "MainThread",
        "Condition.wait (threading.py:327)",
        "Queue.get (queue.py:171)",
        "Scheduler.event_loop_overlap (scheduler.py:1)",
    )
    forward = _thread(
        11,
        "Thread-2 (forward_thread_func)",
        "all_reduce (torch/distributed/distributed_c10d.py:3252)",
    )
    p = StackProcess(pid=10, title=None, threads=(main_ipc, forward))
    assert classify_process(p) == ("stack.nccl_collective", 11)
    # an idle main thread and a non-helper thread in a plain lock: the main thread
    signal = _thread(
        12,
        "signal-callback",
        "Condition.wait (threading.py:327)",
        "Event.wait (threading.py:629)",
        "SignalCallback._run (utils.py:395)",
    )
    idle = _thread(
        10,
        "MainThread",
        "Condition.wait (threading.py:327)",
        "Queue.get (queue.py:171)",
        "EngineCoreProc._process_input_queue (vllm/v1/engine/core.py:1588)",
    )
    assert classify_process(StackProcess(pid=10, title=None, threads=(signal, idle))) == (
        "stack.idle_loop",
        10,
    )
    # only idle helper threads: no thread that matters, and the process idles
    tqdm = _thread(2, "tqdm_monitor", "Condition.wait (threading.py:331)")
    assert pick_thread(StackProcess(pid=None, title=None, threads=(tqdm,))) == (
        None,
        "stack.idle_loop",
    )


def test_apply_gpu_facts_needs_a_busy_gpu_and_an_idle_peer() -> None:
    sync = StackProcess(pid=1, title=None, threads=(), wait_site="stack.cuda_sync")
    peer = StackProcess(pid=2, title=None, threads=(), wait_site=None)
    out = apply_gpu_facts([sync, peer], {1: 99.0, 2: 3.0})
    assert [p.wait_site for p in out] == ["stack.nccl_collective", None]
    assert apply_gpu_facts([sync, peer], {1: 40.0, 2: 3.0})[0].wait_site == "stack.cuda_sync"
    assert apply_gpu_facts([sync], {1: 100.0})[0].wait_site == "stack.cuda_sync"


@pytest.mark.parametrize(
    ("title", "label"),
    [
        ("sglang::scheduler_TP3", "TP3"),
        ("sglang::scheduler_DP0_TP3_EP3", "DP0 TP3 EP3"),
        ("sglang::scheduler_PP2_TP1", "PP2 TP1"),
        ("sglang::scheduler_DP0_PP1_TP2_EP0", "DP0 PP1 TP2 EP0"),
        ("VLLM::Worker_TP1", "TP1"),
        ("VLLM::Worker_PP1_TP0", "PP1 TP0"),
        ("VllmWorker rank=3", "TP3"),
        ("sglang::scheduler_NP1_TP2", "node1 TP2"),
    ],
)
def test_rank_from_title(title: str, label: str) -> None:
    rank = rank_from_title(title)
    assert rank is not None and rank.label == label


@pytest.mark.parametrize(
    "title",
    [
        "sglang::scheduler",
        "sglang::detokenizer",
        "VLLM::EngineCore",
        "/usr/bin/python3 -u hang.py",
        None,
        "ray::RayWorkerWrapper",
    ],
)
def test_rank_from_title_none(title: str | None) -> None:
    assert rank_from_title(title) is None


@pytest.mark.parametrize(
    ("wchan", "site"),
    [
        # seen in shared/lab (gloo hang, SGLang and vLLM hangs): /proc/<pid>/task/*/wchan
        ("futex_do_wait", "stack.gil_or_lock"),
        ("hrtimer_nanosleep", "stack.idle_loop"),
        ("do_epoll_wait", "stack.ipc_wait"),
        ("poll_schedule_timeout.constprop.0", "stack.ipc_wait"),
        ("anon_pipe_read", "stack.ipc_wait"),
        ("do_signal_stop", None),  # stopped: a state, not a wait site
        ("flock_lock_inode_wait", "stack.jit_compile"),
        ("folio_wait_bit_common", "stack.weights_io"),
        ("0", None),
        ("", None),
        (None, None),
        ("some_new_kernel_function", None),
    ],
)
def test_classify_wchan(wchan: str | None, site: str | None) -> None:
    assert classify_wchan(wchan) == site


# ---------------------------------------------------------------------------------------
# Thread state (py-spy's active / idle / holds the GIL) and the calling frames


def _state_thread(
    lines: tuple[str, ...], *, idle: bool | None, gil: bool | None, tid: int = 1
) -> StackThread:
    return StackThread(
        thread_id=tid, name="MainThread", frames=frames(*lines), idle=idle, owns_gil=gil
    )


# An SGLang scheduler in its decode bookkeeping (a `.tolist()` of the sampled ids) and a
# vLLM worker in the model forward: Python frames only, nothing a frame rule names.
SCHEDULER_TOLIST = (
    "Scheduler.process_batch_result_decode (scheduler_output_processor_mixin.py:250)",
    "Scheduler.process_batch_result (scheduler.py:1800)",
    "Scheduler.event_loop_normal (scheduler.py:960)",
    "run_scheduler_process (scheduler.py:2769)",
)
WORKER_FORWARD = (
    "_wrapped_call_impl (torch/nn/modules/module.py:1773)",
    "LlamaModel.forward (vllm/model_executor/models/llama.py:380)",
    "GPUModelRunner.execute_model (vllm/v1/worker/gpu_model_runner.py:1500)",
    "Worker.execute_model (vllm/v1/worker/gpu_worker.py:300)",
    "WorkerProc.worker_busy_loop (vllm/v1/executor/multiproc_executor.py:1041)",
)


@pytest.mark.parametrize("lines", [SCHEDULER_TOLIST, WORKER_FORWARD], ids=["sglang", "vllm"])
def test_active_without_the_gil_in_a_serving_worker_is_a_cuda_sync(lines: tuple[str, ...]) -> None:
    assert classify_frames(frames(*lines)) == (None, None)  # the frames alone say nothing
    site, rule = classify_thread_rule(_state_thread(lines, idle=False, gil=False))
    assert (site, rule) == ("stack.cuda_sync", NATIVE_CALL_RULE)
    # running Python (holds the GIL) or blocked in a syscall (idle): no site is invented
    assert classify_thread_rule(_state_thread(lines, idle=False, gil=True)) == (None, None)
    assert classify_thread_rule(_state_thread(lines, idle=True, gil=False)) == (None, None)
    # no state: a faulthandler/pystack dump, or py-spy frames whose thread header (and its
    # state) the paste cut, show where it sits; a traceback does not
    unknown = _state_thread(lines, idle=None, gil=None)
    assert classify_thread_rule(unknown, "faulthandler")[0] == "stack.cuda_sync"
    assert classify_thread_rule(unknown, "text")[0] == "stack.cuda_sync"
    assert classify_thread_rule(unknown, "traceback") == (None, None)


def test_active_without_the_gil_outside_a_serving_worker_or_with_native_frames() -> None:
    # a user script's native call: not a serving worker, no site
    script = ("worker (gpu_probe.py:56)", "<module> (<string>:1)")
    assert classify_thread_rule(_state_thread(script, idle=False, gil=False)) == (None, None)
    # --native frames are shown: they decide (here nothing names them), not the state
    native = ("at::native::foo (libtorch_cpu.so)", *SCHEDULER_TOLIST)
    assert classify_thread_rule(_state_thread(native, idle=False, gil=False)) == (None, None)
    # unsymbolised frames (a --native dump py-spy could not name) count as none
    addresses = ("0x7f259f401d71 (libc.so.6)", *SCHEDULER_TOLIST)
    got = classify_thread_rule(_state_thread(addresses, idle=False, gil=False))
    assert got == ("stack.cuda_sync", NATIVE_CALL_RULE)
    # a frame rule decides before the state does
    queue_wait = ("Queue.get (queue.py:171)", *SCHEDULER_TOLIST)
    got = classify_thread_rule(_state_thread(queue_wait, idle=False, gil=False))
    assert got[0] == "stack.ipc_wait" and got[1] is not NATIVE_CALL_RULE


def test_overlap_forward_thread_in_a_native_call_outranks_the_waiting_main_thread() -> None:
    main = StackThread(
        thread_id=10,
        name="MainThread",
        frames=frames(
            "Condition.wait (threading.py:327)",
            "Queue.get (queue.py:171)",
            "Scheduler.event_loop_overlap (scheduler.py:1)",
        ),
        idle=True,
        owns_gil=False,
    )
    forward = StackThread(
        thread_id=11,
        name="Thread-2 (forward_thread_func)",
        frames=frames(
            "ModelRunner.forward_decode (model_runner.py:1700)",
            "TpModelWorker.forward_batch_generation (tp_worker.py:251)",
            "TpModelWorkerClient.forward_thread_func_ (tp_worker_overlap_thread.py:140)",
        ),
        idle=False,
        owns_gil=False,
    )
    assert classify_process(StackProcess(pid=10, title=None, threads=(main, forward))) == (
        "stack.cuda_sync",
        11,
    )


def _helper(tid: int, name: str, idle: bool | None = True) -> StackThread:
    return StackThread(
        thread_id=tid,
        name=name,
        frames=frames("Condition.wait (threading.py:331)", "TMonitor.run (tqdm/_monitor.py:69)"),
        idle=idle,
        owns_gil=False,
    )


def test_a_dump_of_idle_helper_threads_is_an_idle_loop() -> None:
    empty_main = StackThread(thread_id=7, name="MainThread", frames=(), idle=True, owns_gil=False)
    whole = StackProcess(
        pid=7, title="sglang::scheduler", threads=(empty_main, _helper(8, "tqdm_monitor"))
    )
    assert classify_process(whole) == ("stack.idle_loop", None)
    assert classified(whole).wait_site == "stack.idle_loop"
    # a dump whose Process header was cut: the visible threads decide (LABELS.md)
    fragment = StackProcess(pid=None, title=None, threads=(_helper(8, "tqdm_monitor"),))
    assert classify_process(fragment) == ("stack.idle_loop", None)
    # a helper that py-spy shows active is doing something: no idle claim
    busy = StackProcess(pid=7, title=None, threads=(_helper(8, "tqdm_monitor", idle=False),))
    assert classify_process(busy) == (None, None)
    # states unknown (faulthandler): no idle claim either
    unknown = StackProcess(pid=7, title=None, threads=(_helper(8, "tqdm_monitor", idle=None),))
    assert classify_process(unknown) == (None, None)


@pytest.mark.parametrize(
    ("site", "lines"),
    [
        # a generic wait inside a collective: the collective names it
        (
            "stack.nccl_collective",
            (
                "wait (threading.py:359)",
                "barrier (torch/distributed/distributed_c10d.py:4800)",
                "GroupCoordinator.barrier (vllm/distributed/parallel_state.py:1000)",
            ),
        ),
        (
            "stack.nccl_collective",
            (
                "recv (zmq/sugar/socket.py:800)",
                "broadcast_object_list (torch/distributed/distributed_c10d.py:3400)",
            ),
        ),
        # a zmq recv inside vLLM's MessageQueue with no serving loop around it: IPC
        (
            "stack.ipc_wait",
            (
                "recv (zmq/sugar/socket.py:800)",
                "recv (vllm/distributed/device_communicators/shm_broadcast.py:802)",
                "dequeue (vllm/distributed/device_communicators/shm_broadcast.py:794)",
                "collective_rpc (x.py:1)",
            ),
        ),
        # a poll under an Inductor or Triton compile, or a C++ extension build
        (
            "stack.jit_compile",
            (
                "_PollLikeSelector.select (selectors.py:415)",
                "Popen._communicate (subprocess.py:2115)",
                "run (subprocess.py:550)",
                "_build (triton/runtime/build.py:80)",
            ),
        ),
        (
            "stack.jit_compile",
            ("poll (libc.so.6)", "AsyncCompile.wait (torch/_inductor/async_compile.py:400)"),
        ),
        # a generic op dispatch in front of a kernel wrapper: the wrapper decides
        (
            "stack.cuda_sync",
            (
                "OpOverload.__call__ (torch/_ops.py:875)",
                "moe_align_block_size (sgl_kernel/moe.py:40)",
                "fused_experts (layers/moe/fused_moe.py:900)",
            ),
        ),
        # the Ray worker waiting for tasks vs the driver waiting for results
        (
            "stack.idle_loop",
            ("main_loop (ray/_private/worker.py:900)", "<module> (default_worker.py:1)"),
        ),
        ("stack.ipc_wait", ("get (ray/_private/worker.py:2700)", "_run_workers (x.py:1)")),
        # a KV store client's own service loop idles; a call into the store waits on it
        (
            "stack.idle_loop",
            ("poll (zmq/sugar/poll.py:106)", "MQClient._main_loop (lmcache/v1/mq.py:240)"),
        ),
        (
            "stack.ipc_wait",
            (
                "poll (zmq/sugar/poll.py:106)",
                "MQClient.retrieve (lmcache/v1/mq.py:300)",
                "LMCacheConnector.start_load_kv (x.py:1)",
            ),
        ),
        # a multiprocessing pipe says "another process"; the caller says what for
        (
            "stack.idle_loop",
            (
                "Connection.recv_bytes (multiprocessing/connection.py:216)",
                "Queue.get (multiprocessing/queues.py:103)",
                "worker (multiprocessing/pool.py:114)",
            ),
        ),
        (
            "stack.jit_compile",
            (
                "Connection.recv (multiprocessing/connection.py:250)",
                "SubprocPool.submit (torch/_inductor/compile_worker/subproc_pool.py:230)",
            ),
        ),
        # the P2P probe's child process: a subprocess wait, not a collective
        (
            "stack.ipc_wait",
            (
                "Popen.communicate (subprocess.py:1209)",
                "run (subprocess.py:550)",
                "gpu_p2p_access_check"
                " (vllm/distributed/device_communicators/custom_all_reduce_utils.py:240)",
            ),
        ),
    ],
)
def test_the_caller_decides_where_the_innermost_frame_is_generic(
    site: str, lines: tuple[str, ...]
) -> None:
    assert classify_frames(frames(*lines))[0] == site


def test_pass_through_wrappers_keep_a_leaf_rule_in_charge() -> None:
    wrapped = frames(
        "OpOverload.__call__ (torch/_ops.py:875)",
        "decorate_context (torch/utils/_contextlib.py:120)",
        "sample (sgl_kernel/sampling.py:80)",
    )
    assert [is_pass_through(f) for f in wrapped] == [True, True, False]
    assert classify_frames(wrapped)[0] == "stack.cuda_sync"
    # a frame of real work in between closes the chain: the kernel wrapper is not a leaf
    work = frames("Sampler.forward (layers/sampler.py:90)", "sample (sgl_kernel/sampling.py:80)")
    assert classify_frames(work) == (None, None)


def test_unsymbolised_frames_count_only_in_gpu_libraries() -> None:
    libc = frames("0x7f259f401d71 (libc.so.6)", "worker (probe.py:5)")
    assert classify_frames(libc) == (None, None)
    cuda = frames(
        "0x7f259f401d71 (libcuda.so.1)", "0x7f00112233 (libcuda.so.1)", "worker (probe.py:5)"
    )
    got, rule = classify_frames(cuda)
    assert (got, rule and rule.id) == ("stack.cuda_sync", "gpu-runtime-unsymbolised")
    # a named frame further out still decides (a strong rule)
    store = frames("0x7f259f401d71 (libcuda.so.1)", "c10d::TCPStore::doWait (libtorch_cpu.so)")
    assert classify_frames(store)[0] == "stack.dist_init"
    # the serving-worker rule needs Python frames only: an unsymbolised frame is native
    t = StackThread(thread_id=1, name="MainThread", frames=libc, idle=False, owns_gil=False)
    assert classify_thread_rule(t) == (None, None)


@pytest.mark.parametrize(
    "mutex",
    [
        "pthread_mutex_lock (libc.so.6)",
        "__lll_lock_wait (lowlevellock.c:49)",  # glibc's futex wait under it
        "lll_mutex_lock_optimized (pthread_mutex_lock.c:48)",  # glibc 2.34+'s inline
        "___pthread_mutex_lock (pthread_mutex_lock.c:93)",  # glibc 2.34+'s versioned name
        "std::mutex::lock (libstdc++.so.6)",
    ],
)
def test_a_mutex_inside_a_collective_is_a_lock_wait(mutex: str) -> None:
    # the thread takes a mutex of its own process before the collective reaches its peers
    got, rule = classify_frames(
        frames(
            mutex,
            "at::cuda::nccl::GroupGuard::GroupGuard (libtorch_cuda.so)",
            "c10d::ProcessGroupNCCL::allgather (libtorch_cuda.so)",
            "all_gather (torch/distributed/distributed_c10d.py:2800)",
        )
    )
    assert (got, rule and rule.id) == ("stack.gil_or_lock", "mutex-in-collective")


def test_a_condition_wait_inside_a_collective_stays_the_collective() -> None:
    # a collective waits for its peers in a condition wait (gloo's recv, Work::wait): not
    # a lock of the process
    for wait in ("pthread_cond_wait (libc.so.6)", "pthread_cond_timedwait (libc.so.6)"):
        got, _ = classify_frames(
            frames(
                wait,
                "gloo::transport::tcp::Pair::recv (libtorch_cpu.so)",
                "c10d::ProcessGroupGloo::RecvWork::wait (libtorch_cpu.so)",
            )
        )
        assert got == "stack.nccl_collective"


def test_a_mutex_behind_python_code_is_not_read_into_an_outer_collective() -> None:
    # a Python frame between them closes the wait chain: the collective's frame decides
    got, _ = classify_frames(
        frames(
            "pthread_mutex_lock (libc.so.6)",
            "Stats.record (mylib/stats.py:10)",
            "c10d::ProcessGroupNCCL::allreduce (libtorch_cuda.so)",
        )
    )
    assert got == "stack.nccl_collective"


def test_nccl_profiling_twins_are_nccl() -> None:
    # NCCL_API defines every API function twice (src/include/core.h, PROFAPI): `pncclX`
    # is the symbol a debugger may print for ncclX
    got, rule = classify_frames(frames("pncclAllReduce (libnccl.so.2)", "f (x.py:1)"))
    assert (got, rule and rule.id) == ("stack.nccl_collective", "nccl-native")
    got, rule = classify_frames(
        frames("pthread_join (libc.so.6)", "pncclCommDestroy (libnccl.so.2)")
    )
    assert (got, rule and rule.id) == ("stack.gil_or_lock", "nccl-teardown")


def test_a_teardown_inside_the_gpu_driver_waits_for_the_device() -> None:
    # ncclCommAbort/Destroy free the communicator's streams and buffers: unsymbolised
    # driver frames innermost are that driver call, not a join of another thread
    got, rule = classify_frames(
        frames(
            "0x7f11aa00 (libcuda.so.1)",
            "0x7f11aa80 (libcuda.so.1)",
            "0x7f22bb00 (libnccl.so.2)",
            "pncclCommAbort (libnccl.so.2)",
        )
    )
    assert (got, rule and rule.id) == ("stack.cuda_sync", "gpu-runtime-unsymbolised")
    # the same driver frames inside a collective wait for that collective
    got, _ = classify_frames(
        frames("0x7f11aa00 (libcuda.so.1)", "0x7f22bb00 (libnccl.so.2)", "ncclAllGather (x.so)")
    )
    assert got == "stack.nccl_collective"


def test_a_c10d_failed_collective_report_is_a_collective_even_when_cut() -> None:
    # torch's report lists the Python stack that issued the collective; a paste may lose
    # its innermost frames (the collective itself): the report still names a collective
    cut = _state_thread(WORKER_FORWARD, idle=None, gil=None)
    assert classify_thread_rule(cut, "c10d") == ("stack.nccl_collective", C10D_REPORT_RULE)
    # the same frames as py-spy's with their thread header cut: a worker in a native call
    assert classify_thread_rule(cut, "text") == ("stack.cuda_sync", NATIVE_CALL_RULE)
    assert classify_thread_rule(cut, "traceback") == (None, None)


def test_a_main_thread_that_names_no_site_gives_way_to_a_waiting_thread() -> None:
    busy_main = StackThread(
        thread_id=1,
        name="MainThread",
        frames=frames("gc_object_counts (utils/common.py:4357)", "<module> (x.py:1)"),
        idle=False,
        owns_gil=True,
    )
    warmup = StackThread(
        thread_id=2,
        name="Thread-1 (_wait_and_warmup)",
        frames=frames("SocketIO.readinto (socket.py:706)", "_wait_and_warmup (http_server.py:1)"),
        idle=True,
        owns_gil=False,
    )
    assert classify_process(StackProcess(pid=1, title=None, threads=(busy_main, warmup))) == (
        "stack.ipc_wait",
        2,
    )
    # a main thread that names a site, even an idle loop, stands
    idle_main = replace_frames(
        busy_main,
        ("select (selectors.py:468)", "BaseEventLoop._run_once (asyncio/base_events.py:1898)"),
    )
    assert classify_process(StackProcess(pid=1, title=None, threads=(idle_main, warmup))) == (
        "stack.idle_loop",
        1,
    )


def replace_frames(t: StackThread, lines: tuple[str, ...]) -> StackThread:
    return StackThread(
        thread_id=t.thread_id, name=t.name, frames=frames(*lines), idle=t.idle, owns_gil=t.owns_gil
    )


PASS_THROUGH_LINES = (
    "OpOverload.__call__ (torch/_ops.py:875)",
    "Module._call_impl (torch/nn/modules/module.py:1747)",
    "decorate_context (torch/utils/_contextlib.py:120)",
    "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
    "sync_wrapper (vllm/tracing/otel.py:178)",
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(EXAMPLES),
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(PASS_THROUGH_LINES)), max_size=4),
)
def test_pass_through_frames_never_change_a_site(
    example: tuple[str, str, tuple[str, ...]], inserts: list[tuple[int, str]]
) -> None:
    _, site, lines = example
    stack = list(lines)
    for pos, line in inserts:
        stack.insert(min(pos, len(stack)), line)
    assert classify_frames(frames(*stack))[0] == site


def test_an_idle_thread_at_a_plain_python_frame_while_another_holds_the_gil() -> None:
    waiting = StackThread(
        thread_id=1,
        name="MainThread",
        frames=frames("Scheduler.get_next_batch_to_run (scheduler.py:1500)", "<module> (x.py:1)"),
        idle=True,
        owns_gil=False,
    )
    hog = StackThread(
        thread_id=2,
        name="Thread-1 (process_input_sockets)",
        frames=frames("OrderedDict.popitem (cache.py:80)", "process_input_sockets (core.py:1)"),
        idle=False,
        owns_gil=True,
    )
    p = StackProcess(pid=1, title=None, threads=(waiting, hog))
    assert classify_process(p) == ("stack.gil_or_lock", 1)
    # nobody holds the GIL (the hog idles too): no claim
    calm = StackThread(thread_id=2, name=hog.name, frames=hog.frames, idle=True, owns_gil=False)
    assert classify_process(StackProcess(pid=1, title=None, threads=(waiting, calm))) == (
        None,
        None,
    )
    # frames that name a wait keep it (an idle loop is not GIL contention)
    loop = replace_frames(
        waiting,
        (
            "Queue.get (queue.py:171)",
            "EngineCoreProc._process_input_queue (vllm/v1/engine/core.py:1)",
        ),
    )
    assert (
        classify_process(StackProcess(pid=1, title=None, threads=(loop, hog)))[0]
        == "stack.idle_loop"
    )


def test_a_serving_worker_title_makes_any_native_call_a_cuda_sync() -> None:
    """A cut dump whose frames name no serving code: the process title (a vLLM worker,
    an SGLang scheduler) says it is one."""
    cut = _state_thread(
        ("forward (linear.py:500)", "_call_impl (module.py:1)"), idle=False, gil=False
    )
    for title in ("VLLM::Worker_TP1", "sglang::scheduler_TP0", "ray::RayWorkerWrapper"):
        p = StackProcess(pid=1, title=title, threads=(cut,))
        assert classify_process(p) == ("stack.cuda_sync", 1), title
    assert classify_process(StackProcess(pid=1, title="python app.py", threads=(cut,))) == (
        None,
        None,
    )


def test_a_main_thread_syncing_on_its_gpu_gives_way_to_a_thread_in_a_collective() -> None:
    """SGLang's overlap scheduler: the main thread syncs on copy_done while the forward
    thread sits in an NCCL all-reduce; the device's queue waits on that collective."""
    main = _thread(
        10,
        "MainThread",
        "synchronize (torch/cuda/streams.py:231)",
        "resolve_last_batch_result (sglang/srt/managers/tp_worker_overlap_thread.py:180)",
        "Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:800)",
    )
    forward = _thread(
        11,
        "Thread-2 (forward_thread_func)",
        "all_reduce (sglang/srt/distributed/device_communicators/pynccl.py:140)",
        "forward_thread_func_ (sglang/srt/managers/tp_worker_overlap_thread.py:150)",
    )
    p = StackProcess(pid=10, title=None, threads=(main, forward))
    assert classify_process(p) == ("stack.nccl_collective", 11)
    # the same main thread beside a thread that only compiles: its own sync stands
    jit = _thread(12, "Thread-3", "compile (triton/compiler/compiler.py:300)")
    assert classify_process(StackProcess(pid=10, title=None, threads=(main, jit))) == (
        "stack.cuda_sync",
        10,
    )


def test_a_fatal_signal_in_a_thread_outranks_the_main_threads_wait() -> None:
    main = replace(
        _thread(10, "MainThread", "all_reduce (torch/distributed/distributed_c10d.py:3252)"),
        idle=None,
    )
    crashed = replace(
        _thread(11, None, "recv_pyobj (zmq/sugar/socket.py:700)", "run (threading.py:953)"),
        idle=None,
        current=True,
    )
    p = StackProcess(pid=10, title=None, threads=(main, crashed), mode="faulthandler")
    assert classify_process(p) == ("stack.ipc_wait", 11)
    # a current thread whose frames name nothing does not decide
    silent = replace(crashed, frames=frames("encode (tokenizers/implementations.py:10)"))
    p = StackProcess(pid=10, title=None, threads=(main, silent), mode="faulthandler")
    assert classify_process(p) == ("stack.nccl_collective", 10)


@pytest.mark.parametrize(
    ("frame", "site"),
    [
        # barriers named as such, with nothing but a native wait inside
        ("DPEngineCoreProc.barrier (vllm/v1/engine/core.py:1500)", "stack.nccl_collective"),
        (
            "dist_barrier_after_load (sglang/srt/model_executor/model_runner_components/"
            "load_model_utils.py:40)",
            "stack.nccl_collective",
        ),
        (
            "StatelessGroupCoordinator.recv_object (vllm/distributed/stateless_coordinator.py:300)",
            "stack.nccl_collective",
        ),
        ("Handle.wait (vllm/distributed/parallel_state.py:200)", "stack.nccl_collective"),
        (
            "RayPPCommunicator.recv (vllm/distributed/device_communicators/ray_communicator.py:90)",
            "stack.nccl_collective",
        ),
        ("StatelessProcessGroup.recv (vllm/distributed/utils.py:200)", "stack.dist_init"),
        ("_wait_until_pg_ready (vllm/v1/executor/ray_utils.py:300)", "stack.ipc_wait"),
        ("RayWorkerProc.wait_for_init (vllm/v1/executor/ray_executor_v2.py:80)", "stack.ipc_wait"),
        ("_wait_and_warmup (sglang/srt/entrypoints/http_server.py:1300)", "stack.ipc_wait"),
        (
            "_wait_for_tasks_completion (vllm/executor/ray_distributed_executor.py:600)",
            "stack.ipc_wait",
        ),
        ("_wait_for_server_rpc (vllm/engine/multiprocessing/client.py:300)", "stack.ipc_wait"),
    ],
)
def test_framework_waits_named_in_the_sources(frame: str, site: str) -> None:
    """Functions of vLLM 0.32 / SGLang 0.5.23 that wait on peers, as the innermost Python
    frame of a dump (the call inside them has no Python frame)."""
    assert classify_frames(frames(frame, "<module> (serve.py:1)"))[0] == site


def test_a_triton_kernel_launch_is_a_gpu_wait_even_where_the_stack_was_cut() -> None:
    # triton 3.x launches through its backend driver's launcher (CudaLauncher.__call__)
    cut = frames(
        "CudaLauncher.__call__ (triton/backends/nvidia/driver.py:529)",
        "JITFunction.run (triton/runtime/jit.py:591)",
    )
    assert classify_frames(cut)[0] == "stack.cuda_sync"
    # building the launcher on first use compiles (its frames inside say so)
    build = frames(
        "_build (triton/runtime/build.py:80)",
        "compile_module_from_src (triton/backends/nvidia/driver.py:60)",
    )
    assert classify_frames(build)[0] == "stack.jit_compile"


def test_a_process_classified_again_from_memory_reads_as_classified_anew() -> None:
    """classified() remembers the site it read by threads, dump kind, title and pid (the
    same stacks recur in every rank): each corpus dump's processes, classified again under
    another rank, source and line, read as classified with nothing remembered."""
    from pathlib import Path

    import diag.stacks.classify as classify
    from diag.model import RankId
    from diag.stacks.primitives import primitive_in_line
    from diag.stacks.textdump import parse_stack_text

    root = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "stacks"
    dumps = sorted(root.glob("*/dump.txt"))[:40]
    assert dumps
    seen = 0
    for dump in dumps:
        for p in parse_stack_text(dump.read_text(encoding="utf-8", errors="replace")):
            bare = replace(p, wait_site=None, wait_thread=None)
            classify._SITE_CACHE.clear()
            primitive_in_line.cache_clear()
            fresh = classify.classified(bare)
            again = replace(bare, rank=RankId(tp=7), source="other.log", line=(p.line or 0) + 9)
            for q in (bare, again):
                got = classify.classified(q)
                assert (got.wait_site, got.wait_thread) == (fresh.wait_site, fresh.wait_thread)
                assert replace(got, wait_site=None, wait_thread=None) == q
            seen += 1
    assert seen > 20


# A training step's gradient partition (DeepSpeed ZeRO-3) and a diffusion job's tiled
# decode: framework Python over torch, nothing a frame rule names.
TRAINING_STEP = (
    "partition_grads (deepspeed/runtime/zero/stage3.py:1500)",
    "wrapped_fn (deepspeed/utils/nvtx.py:18)",
    "decorate_context (torch/utils/_contextlib.py:116)",
    "backward (torch/autograd/__init__.py:289)",
)
TILED_DECODE = (
    "tiled_scale (utils.py:73)",
    "decorate_context (torch\\utils\\_contextlib.py:115)",
    "decode_tiled (sd.py:468)",
    "run (concurrent\\futures\\thread.py:52)",
)


# An MLX server's generation step (mlx-lm's generate.py; a server built on it), its arrays
# evaluated lazily: the thread waits for the Metal stream where it reads or saves them
MLX_STEP = (
    "_step (mlx_lm/generate.py:1052)",
    "next (mlx_lm/generate.py:1210)",
    "_generate (mlx_lm/server.py:640)",
)


@pytest.mark.parametrize(
    "lines", [TRAINING_STEP, TILED_DECODE, MLX_STEP], ids=["deepspeed", "windows", "mlx"]
)
def test_active_without_the_gil_over_torch_is_a_cuda_sync(lines: tuple[str, ...]) -> None:
    assert classify_frames(frames(*lines)) == (None, None)
    got = classify_thread_rule(_state_thread(lines, idle=False, gil=False))
    assert got == ("stack.cuda_sync", NATIVE_CALL_RULE)
    # only py-spy's own "active" says so: a stateless dump of a non-serving stack does not
    unknown = _state_thread(lines, idle=None, gil=None)
    assert classify_thread_rule(unknown, "faulthandler") == (None, None)
    assert classify_thread_rule(_state_thread(lines, idle=True, gil=False)) == (None, None)


def test_a_running_pool_worker_outranks_the_main_thread_joining_the_pool() -> None:
    main = StackThread(
        thread_id=1,
        name="MainThread",
        frames=frames("_wait_for_tstate_lock (threading.py:1105)", "join (threading.py:1089)",
                      "shutdown (concurrent/futures/thread.py:229)", "<module> (bridge.py:83)"),
        idle=True,
        owns_gil=False,
    )
    job = replace(_state_thread(TILED_DECODE, idle=False, gil=False),
                  thread_id=2, name="ThreadPoolExecutor-0_0")
    thread, site = pick_thread(StackProcess(pid=None, title=None, threads=(main, job)))
    assert (thread.thread_id if thread else None, site) == (2, "stack.cuda_sync")
    # the same pool thread parked in the pool's queue is a helper, not the job
    pool_wait = frames("get (queue.py:171)", "_worker (concurrent/futures/thread.py:77)")
    parked = replace(job, idle=True, frames=pool_wait)
    thread, site = pick_thread(StackProcess(pid=None, title=None, threads=(main, parked)))
    assert thread is not None and thread.thread_id == 1


def test_a_cuda_sync_a_collective_issued_is_that_collectives_wait() -> None:
    """TensorRT-LLM's all-gather plugin polls cudaStreamQuery until the NCCL all-gather on
    its stream finished: the thread waits for the collective, not for its own kernels."""
    from diag.model import StackFrame
    from diag.stacks.classify import classify_frames

    sync = StackFrame("cudaStreamSynchronize", "libcudart.so.12", native=True)
    plugin = StackFrame(
        "tensorrt_llm::plugins::AllgatherPlugin::enqueue", "libnvinfer_plugin.so", native=True
    )
    other = StackFrame("tensorrt_llm::kernels::invokeSampling", "libtensorrt_llm.so", native=True)
    assert classify_frames([sync, plugin])[0] == "stack.nccl_collective"
    # the same sync under a kernel launcher of no collective stays a CUDA sync
    assert classify_frames([sync, other])[0] == "stack.cuda_sync"


def test_lldb_frames_are_read_by_their_symbol() -> None:
    """lldb's `bt` numbers frames as c10's report does (`frame #2: 0x.. lib.so`symbol(args)
    + 725`): the symbol and its module, not the whole line."""
    from diag.stacks.textdump import parse_stack_text

    text = (
        "  thread #16, name = 'python', stop reason = signal SIGSTOP\n"
        "    frame #0: 0x00007fb0b7f0792d libc.so.6`syscall + 29\n"
        "    frame #1: 0x00007fb090db0b85 libtorch_cuda.so`c10d::ProcessGroupNCCL::"
        "waitForFutureOrTimeout(std::future<bool>&) + 725\n"
        "    frame #2: 0x00007fb090db1068 libtorch_cuda.so`c10d::ProcessGroupNCCL::abort() + 664\n"
    )
    (proc,) = parse_stack_text(text)
    frames = proc.threads[0].frames
    assert [(f.name, f.filename) for f in frames] == [
        ("syscall", "libc.so.6"),
        ("c10d::ProcessGroupNCCL::waitForFutureOrTimeout", "libtorch_cuda.so"),
        ("c10d::ProcessGroupNCCL::abort", "libtorch_cuda.so"),
    ]
    assert proc.wait_site == "stack.gil_or_lock"


def test_the_overlap_schedulers_result_queue_is_a_wait_on_its_own_thread() -> None:
    """SGLang's tp_worker_overlap_thread.py: resolve_last_batch_result's queue.get waits for
    the process's own forward thread (a threading condition), not another process; in a
    faulthandler dump that thread is the scheduler's, not a pool worker parked idle."""
    from diag.stacks.classify import OVERLAP_QUEUE_RULE

    def f(name: str, path: str) -> StackFrame:
        return StackFrame(name=name, filename=path, line=1)

    scheduler = (
        f("wait", "/usr/lib/python3.11/threading.py"),
        f("get", "/usr/lib/python3.11/queue.py"),
        f("resolve_last_batch_result", "/x/sglang/srt/managers/tp_worker_overlap_thread.py"),
        f("event_loop_overlap", "/x/sglang/srt/managers/scheduler.py"),
    )
    assert classify_frames(scheduler) == ("stack.gil_or_lock", OVERLAP_QUEUE_RULE)
    elsewhere = (scheduler[0], scheduler[1], f("fetch_result", "/x/app/client.py"))
    assert classify_frames(elsewhere)[0] == "stack.ipc_wait"
    tqdm = StackThread(
        thread_id=1, name=None, frames=(f("run", "/x/tqdm/_monitor.py"),)
    )
    p = StackProcess(
        pid=None, title=None, mode="faulthandler",
        threads=(tqdm, StackThread(thread_id=2, name=None, frames=scheduler)),
    )
    assert pick_thread(p)[1] == "stack.gil_or_lock"


def test_idle_in_the_tokenizers_pool_is_a_lock_wait() -> None:
    """py-spy idle inside Hugging Face tokenizers' batch encode (rayon's pool, the GIL
    released): waiting for the pool; running there (active) is CPU work, no wait."""
    from diag.stacks.classify import IDLE_IN_POOL_RULE

    lines = (
        "_batch_encode_plus (transformers/tokenization_utils_fast.py:452)",
        "batch_encode_plus (transformers/tokenization_utils_base.py:2879)",
        "__call__ (transformers/tokenization_utils_base.py:2602)",
        "rerank (app/rerank.py:40)",
    )
    assert classify_frames(frames(*lines)) == (None, None)
    idle = _state_thread(lines, idle=True, gil=False)
    assert classify_thread_rule(idle) == ("stack.gil_or_lock", IDLE_IN_POOL_RULE)
    assert classify_thread_rule(_state_thread(lines, idle=False, gil=False)) == (None, None)
    assert classify_thread_rule(_state_thread(lines, idle=None, gil=None), "faulthandler") == (
        None, None)


def _native_thread(tid: int, *frames_in: tuple[str, str]) -> StackThread:
    return StackThread(
        thread_id=tid,
        name=None,
        frames=tuple(StackFrame(name=n, filename=f, native=True) for n, f in frames_in),
    )


def test_nccl_internal_threads_and_glibc_source_places_are_helpers() -> None:
    """NCCL's own poll threads (unsymbolised libnccl between libc frames, glibc itself
    unsymbolised) and libcuda's threads whose libc frames gdb names by glibc's source
    place (`at ../sysdeps/...`) are helpers: the main thread's driver wait decides."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    nccl = _native_thread(
        2, ("poll", libc), ("0x00007fb29b7d2172", "/usr/lib/libnccl.so.2"),
        ("0x00007fb34a09caa4", libc), ("0x00007fb34a129c3c", libc),
    )
    cuda = _native_thread(
        3, ("accept4", "../sysdeps/unix/sysv/linux/accept4.c"),
        ("0x00007f55a959e4a6", "/usr/lib64/libcuda.so.1"),
        ("start_thread", "/opt/glibc/lib/libpthread.so.0"),
        ("clone", "../sysdeps/unix/sysv/linux/x86_64/clone.S"),
    )
    assert is_helper_thread(nccl) and is_helper_thread(cuda)
    main = replace(
        _native_thread(1, *[(f"0x00007fb24f84fe8{i}", "/usr/local/cuda/compat/libcuda.so.1")
                            for i in range(3)]),
        name="MainThread",
    )
    p = StackProcess(pid=1, title=None, threads=(nccl, cuda, main), mode="gdb")
    thread, site = pick_thread(p)
    assert thread is main and site == "stack.cuda_sync"
    # a thread of the program's own code calling NCCL is no helper
    caller = _native_thread(
        4, ("0x00007fb29b7d2172", "/usr/lib/libnccl.so.2"),
        ("c10d::ProcessGroupNCCL::allreduce", "/x/libtorch_cuda.so"), ("start_thread", libc),
    )
    assert not is_helper_thread(caller)


def test_a_frame_injected_to_print_the_stack_is_not_where_it_waits() -> None:
    """traceback.print_stack() run inside the stuck process (pyrasite, gdb's
    PyRun_SimpleString): its `<string>` <module> frame is innermost; as the outermost frame
    (spawn's, `python -c`) it stays."""
    stack = (
        StackFrame(name="<module>", filename="<string>", line=1),
        *frames(
            "all_reduce_multigpu (torch/distributed/__init__.py:306)",
            "reduction_fn_nccl (torch/nn/parallel/distributed.py:341)",
            "backward (torch/autograd/__init__.py:90)",
        ),
    )
    assert classify_frames(stack)[0] == "stack.nccl_collective"
    assert classify_frames(stack[:1]) == (None, None)


@pytest.mark.parametrize("name", ["cudaFree", "cuMemFree_v2", "cudaFreeHost", "hipFree"])
def test_a_free_the_cuda_guide_makes_a_synchronisation_is_a_cuda_sync(name: str) -> None:
    stack = (StackFrame(name=name, filename="libcudart.so.12", native=True),
             *frames("empty_cache (torch/cuda/memory.py:192)", "step (train.py:40)"))
    assert classify_frames(stack)[0] == "stack.cuda_sync"
    alloc = (StackFrame(name="cudaMalloc", filename="libcudart.so.12", native=True),)
    assert classify_frames(alloc) == (None, None)  # a device allocation waits for no work
