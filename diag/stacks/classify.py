"""Where is a process waiting? Map its stack to a wait-site id of shared/corpus/LABELS.md.

The rules are data: :data:`RULES` is an ordered table of (frame name regex, file regex,
native-only?) -> site. A thread's frames are read innermost first:

1. *strong* rules name a wait by what it is for (``c10d::TCPStore::doWait``,
   ``all_reduce`` in torch.distributed, ``get_response`` of an RPC, a safetensors read). The
   innermost frame that matches a strong rule decides. Some strong rules are *leaf* rules
   (an asyncio loop, an idle thread-pool worker, a GPU-kernel wrapper): they only count
   where the frames inside them are native or generic waits, i.e. where the thread sits in
   that frame itself rather than in code it called.
2. *weak* rules name a generic primitive or channel (a lock, ``pthread_cond_wait``,
   ``select``, ``queue.get``, zmq, vLLM's MessageQueue, a future, a file lock,
   ``time.sleep``): what it waits *for* is said by a caller, if any (a GroupCoordinator
   broadcast over a MessageQueue is a collective). They decide only when no strong rule
   matches, and then the outermost weak frame of the innermost wait chain wins (the
   ``queue.get`` around the ``Condition.wait``, the ``_shutdown`` around the lock).
   A frame that no rule names (a generic ``wait``, ``recv``, ``forward``) decides
   nothing: its callers do. Pass-through wrappers (``OpOverload.__call__``,
   ``Module._call_impl``, ``decorate_context``, a decorator's ``wrapper``) do not even
   close the wait chain, so a leaf rule behind them still counts.
3. the thread's state, where the frames say nothing (:func:`classify_thread_rule`):
   py-spy shows it active without the GIL and its innermost frame is Python (no native
   frames): it sits in a native call that released the GIL, and in a GPU serving worker
   (model forward, sampler, scheduler or worker loop) that is a CUDA sync
   (:data:`NATIVE_CALL_RULE`; a faulthandler or pystack dump, which has no state, is read
   the same way). A torch c10d report of a failed collective is that collective's stack
   (:data:`C10D_REPORT_RULE`), even where its innermost frames were cut. A thread idle at
   a Python frame that names nothing, while another thread runs holding the GIL, waits
   for the GIL (:data:`GIL_CONTENTION_RULE`).

The thread that matters (:func:`pick_thread`) is, in a fatal signal's faulthandler dump,
its ``Current thread`` (the signal went to the thread that faulted) where its frames name a
site; otherwise the main thread unless another
non-helper thread waits at a hard site (:data:`HARD_SITES`: a collective, a store, the
GPU, a compile, the disk) while the main thread does not (the SGLang overlap scheduler's
forward thread in an NCCL call while the main thread waits on it), or the main thread's
frames name no site while another thread's do; helper threads (tqdm
monitor, watchdogs, Inductor's pipe reader, queue feeders) are never chosen. A py-spy
dump whose threads are all idle helpers is an idle loop (:data:`IDLE_PROCESS_RULE`); in
a dump without thread states (faulthandler, pystack, pytest-timeout) a helper parked in a
generic wait counts as idle; helper threads whose state is unknown otherwise (frames whose
thread header was cut) give no wait site.

:func:`apply_gpu_facts` (live) and :func:`classify_wchan` (no ptrace) add what a stack
cannot say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Literal

from diag import cache
from diag.model import STACK_SITES, StackFrame, StackProcess, StackThread
from diag.regex_codes import CodeTable
from diag.stacks.frames import is_address, normalise_path, short_path
from diag.stacks.primitives import primitive_in_line

__all__ = [
    "C10D_REPORT_RULE",
    "GIL_CONTENTION_RULE",
    "HARD_SITES",
    "IDLE_IN_POOL_RULE",
    "IDLE_PROCESS_RULE",
    "MUTEX_IN_CALL_RULE",
    "OVERLAP_QUEUE_RULE",
    "NATIVE_CALL_RULE",
    "RULES",
    "SiteRule",
    "WCHAN_RULES",
    "CATALOGUE_WHY",
    "apply_gpu_facts",
    "catalogue_rule",
    "classified",
    "classify_frames",
    "classify_process",
    "classify_thread",
    "classify_thread_rule",
    "classify_wchan",
    "in_native_call",
    "is_helper_thread",
    "is_main_thread",
    "is_pass_through",
    "is_gpu_compute_stack",
    "is_serving_worker_stack",
    "pick_thread",
    "site_priority",
]

Strength = Literal["strong", "weak"]


@dataclass(frozen=True, slots=True)
class SiteRule:
    """One row of the table: a frame matches when every given regex searches its text."""

    id: str
    site: str
    name: str | None = None  # regex searched in the frame's function name
    file: str | None = None  # regex searched in the frame's normalised filename
    native: bool | None = None  # True: native frames only; False: Python frames only
    strength: Strength = "strong"
    leaf: bool = False  # only where everything inside it is native or a generic wait
    # True: matches only native frames py-spy could not symbolise (``0x7f..``), by their
    # shared object (``file``); every other rule skips those frames
    unsymbolised: bool = False
    # True: only where every frame inside it is a pass-through wrapper (the dump was cut
    # above it, or these are its innermost frames): the frame stands for the call it wraps
    cut: bool = False
    # True: where the frames inside it are the GPU driver's or runtime's (an unsymbolised
    # libcuda frame, a weak CUDA-sync match), the thread waits for the device, not for
    # what the rule names (a communicator's teardown blocked in a driver call)
    device_inside: bool = False
    why: str = ""

    def matches(self, frame: StackFrame) -> bool:
        if self.unsymbolised != (frame.native and is_address(frame.name)):
            return False
        if self.native is not None and frame.native != self.native:
            return False
        if self.name is not None and not _compiled(self.name).search(frame.name):
            return False
        if self.file is not None:
            return bool(_compiled(self.file).search(normalise_path(frame.filename)))
        return True


_CACHE: dict[str, re.Pattern[str]] = {}
_CODES: list[CodeTable] = []  # (speed) the table's patterns, compiled from cached codes


def _compiled(pattern: str) -> re.Pattern[str]:
    rx = _CACHE.get(pattern)
    if rx is None:
        if not _CODES:
            key = cache.content_key(_table_patterns())
            _CODES.append(CodeTable("stack-rx", key, _table_patterns))
        rx = _CACHE[pattern] = _CODES[0].compile(pattern)
    return rx


_NCCL = "stack.nccl_collective"
_INIT = "stack.dist_init"
_SYNC = "stack.cuda_sync"
_GRAPH = "stack.cuda_graph_capture"
_JIT = "stack.jit_compile"
_WEIGHTS = "stack.weights_io"
_IPC = "stack.ipc_wait"
_IDLE = "stack.idle_loop"
_LOCK = "stack.gil_or_lock"

_C10D_PY = r"torch/distributed/distributed_c10d\.py$"
_COLLECTIVE_NAMES = (
    r"(^|\.)(all_reduce|all_reduce_coalesced|all_gather|all_gather_into_tensor|"
    r"all_gather_object|all_gather_coalesced|_all_gather_base|broadcast|"
    r"broadcast_object_list|barrier|monitored_barrier|reduce|reduce_scatter|"
    r"reduce_scatter_tensor|_reduce_scatter_base|gather|gather_object|scatter|"
    r"scatter_object_list|all_to_all|all_to_all_single|send|recv|isend|irecv|"
    r"send_object_list|recv_object_list|batch_isend_irecv|wait|all_gather_single|"
    r"reduce_scatter_single|_coalescing_manager)$"
)
_FRAMEWORK_COLLECTIVE = (
    r"(all_reduce|all_gather|gather|broadcast|barrier|reduce_scatter|all_to_all|"
    r"send|recv|_pyobj|tensor_dict|recv_object|send_object)"
)

# The table. Order matters within one frame (first row that matches wins), so the
# specific rows of a family come before its general ones.
RULES: tuple[SiteRule, ...] = (
    # --- distributed init: communicator creation and store waits ----------------------
    SiteRule(
        "nccl-comm-init",
        _INIT,
        name=r"^(nccl|pynccl)?.*(CommInitRank|GetUniqueId|CommSplit)",
        why="NCCL communicator creation waits for every rank (bootstrap)",
    ),
    SiteRule(
        "nccl-bootstrap",
        _INIT,
        native=True,
        name=r"^(bootstrap[A-Z]\w*|ncclSocket\w*|ncclBootstrap\w*|initTransportsRank|"
        r"ncclTransportP2pSetup|ncclTransportRingConnect|"
        # NCCL src/init.cc and misc/cudawrap.cc (2.18-2.2x): the library's and a
        # communicator's set-up (ncclInit, ncclCudaLibraryInit, ncclCommInitRankDev/Func)
        r"ncclInit\b|ncclCudaLibraryInit|p?ncclCommInitRank\w*|p?ncclCommInitAll|commAlloc\b|"
        r"devCommSetup|ncclInitKernelsForDevice)",
        why="NCCL's bootstrap/transport setup (inside communicator creation): ranks meeting",
    ),
    SiteRule(
        "c10d-nccl-comm-init",
        _INIT,
        name=r"ProcessGroupNCCL::(getNCCLComm|initNCCLComm|initializeNCCLComm|"
        r"broadcastUniqueNCCLID|eagerConnectSingleDevice|ProcessGroupNCCL\b)",
        native=True,
        why="ProcessGroupNCCL creating its communicator",
    ),
    SiteRule(
        "c10d-store",
        _INIT,
        name=r"^c10d::(TCPStore|detail::TCPClient|.*Store::(doWait|doGet|wait|get|"
        r"compareSet|add))|^c10d::rendezvous|TCPStoreMasterDaemon",
        native=True,
        why="a c10d store get/wait: ranks meeting through the TCPStore",
    ),
    SiteRule(
        "c10d-init-py",
        _INIT,
        file=_C10D_PY,
        name=r"(^|\.)(init_process_group|_new_process_group_helper|new_group|"
        r"_new_group_with_tag|_store_based_barrier|new_subgroups\w*|split_group|"
        r"_create_process_group_wrapper|init_device_mesh|_new_group_via_split_group|"
        r"_find_or_create_pg_by_ranks_and_tag|shrink_group|_create_shrunk_process_group)$",
        why="torch.distributed's group creation (distributed_c10d.py, torch 2.x-2.13: "
        "init_process_group, new_group, split_group, shrink_group and their helpers)",
    ),
    SiteRule(
        "device-mesh-init",
        _INIT,
        native=False,
        file=r"torch/distributed/device_mesh\.py$",
        name=r"(^|\.)(init_device_mesh|_init_process_groups|_get_or_create_default_group|"
        r"__init__|_setup_world_group_and_device)$",
        why="torch.distributed.device_mesh building its process groups (init_device_mesh)",
    ),
    SiteRule(
        "stateless-group-store",
        _INIT,
        native=False,
        file=r"(^|/)distributed/utils\.py$",
        name=r"(^|\.)(barrier|broadcast_obj|all_gather_obj|recv_obj|send_obj|recv|send|create)$",
        why="vLLM's StatelessProcessGroup (vllm/distributed/utils.py, also ported to "
        "sglang/srt/distributed/utils.py): TCPStore get/wait between ranks while a "
        "communicator or a DP group is set up",
    ),
    SiteRule(
        "torch-rendezvous",
        _INIT,
        file=r"torch/distributed/(rendezvous\.py|"
        r"elastic/rendezvous/|elastic/utils/store\.py)",
    ),
    SiteRule(
        "framework-dist-init",
        _INIT,
        native=False,
        name=r"(^|\.)_?(init_distributed_environment|initialize_model_parallel|"
        r"init_model_parallel_group|ensure_model_parallel_initialized|init_world_group|"
        r"init_torch_distributed|init_worker_distributed_environment|"
        r"init_test_distributed_environment|init_process_group|"
        r"stateless_init_torch_distributed_process_group|StatelessProcessGroup\.create)$",
        why="the frameworks' distributed set-up: vLLM parallel_state.py "
        "init_distributed_environment / initialize_model_parallel (0.4+; "
        "model_executor/parallel_utils/parallel_state.py before), worker.py "
        "_init_distributed_environment (0.2-0.3) and init_worker_distributed_environment "
        "(0.4+, v1/worker/gpu_worker.py), SGLang ModelRunner.init_torch_distributed, "
        "vLLM 0.2-0.3's cupy NCCL init_process_group (parallel_utils/cupy_utils.py)",
    ),
    SiteRule(
        "communicator-setup",
        _INIT,
        native=False,
        name=r"(^|\.)_?(init_\w*(comm|communicator|nccl|cupy|mscclpp)\w*|"
        r"make_connection|connect_\w*(peers|ranks|comm)\w*|setup_\w*(comm|nccl)\w*|"
        r"create_communicator\w*)$",
        why="a communicator being built: "
        "init_*_comm set-ups of collective libraries (MSCCL++ comm.make_connection), "
        "GroupCoordinator communicator creation: every rank must arrive",
    ),
    # --- collectives (NCCL, gloo, custom all-reduce, CPU shm all-reduce) ---------------
    SiteRule(
        "mpi-collective-native",
        _NCCL,
        native=True,
        name=r"^P?MPI[RC]?_\w*(?:Bcast|Allreduce|Reduce|Allgather|Alltoall|Barrier|Gather|"
        r"Scatter|Reduce_scatter)",
        why="an MPI collective (MPICH/Open MPI MPIR_Bcast_*, PMPI_Allreduce): the MPI "
        "peer of a torch.distributed collective, waiting for every rank of the communicator",
    ),
    SiteRule(
        "nccl-teardown",
        _LOCK,
        native=True,
        # (`pncclCommAbort`: NCCL's API symbols have a `p` twin, src/include/core.h's
        # NCCL_API macro under PROFAPI, and a debugger may print either)
        name=r"^(p?ncclCommAbort|p?ncclCommDestroy|p?ncclCommFinalize|commReclaim|commFree|"
        r"c10d::ProcessGroupNCCL::(abort\w*|shutdown|waitForFutureOrTimeout|"
        r"abortCommsFromMap|destroyProcessGroup))\b",
        device_inside=True,
        why="a communicator's teardown (NCCL init.cc ncclCommAbort/ncclCommDestroy -> "
        "commReclaim/commFree joining the proxy and service threads; torch "
        "ProcessGroupNCCL::abort/shutdown waiting on its abort future, "
        "waitForFutureOrTimeout): the thread waits for another thread to finish, no "
        "collective is running; where the frames inside it are the CUDA driver's "
        "(commFree's stream synchronisations and frees), it waits for the device "
        "(stack.cuda_sync)",
    ),
    SiteRule(
        "nccl-native",
        _NCCL,
        # (not NCCL's own stream helpers, src/misc/strongstream.cc 2.12+:
        # ncclStrongStreamSynchronize and its kin wait on a CUDA stream for whichever caller
        # is outside them: commDestroySync in a teardown, devCommSetup in a communicator's
        # set-up, the group launch of a collective; that caller decides)
        name=r"^p?nccl(?!StrongStream)|^ncclKernel|^ncclDevKernel|^rccl",
        native=True,
        why="inside an NCCL (or ROCm RCCL) call (`pncclAllReduce`: the `p` twin NCCL's "
        "NCCL_API macro defines for every API function under PROFAPI, src/include/core.h)",
    ),
    SiteRule(
        "vendor-ccl-native",
        _NCCL,
        native=True,
        name=r"^(Hccl\w+|hccl::|HcclComm\w*|c10d_npu::ProcessGroupHCCL|ccl::|oneccl\w*|"
        # oneCCL's own C++ (libccl.so, 2021.x: src/exec ccl_executor::wait, src/coll
        # ccl_coll_create / ccl_allgather_impl, src/comm ccl_comm::allgather ...)
        r"ccl_(?:executor::|coll_|comm::|(?:allgather|allreduce|alltoall|barrier|bcast|"
        r"broadcast|reduce|reduce_scatter|recv|send)\w*)|"
        r"c10d::ProcessGroupXCCL|c10d::ProcessGroupCCL|mscclpp::)",
        why="a collective of Ascend HCCL, Intel oneCCL or MSCCL++ (torch_npu, XPU, "
        "vLLM/SGLang's pymscclpp)",
    ),
    SiteRule(
        "c10d-process-group",
        _NCCL,
        name=r"^c10d::(ProcessGroup(NCCL|Gloo|MPI|UCC|Wrapper)|.*Work\w*::(wait|synchronize)"
        r"|Work::wait|.*[Aa]ll[Rr]educe|.*[Aa]ll[Gg]ather|.*[Bb]roadcast|.*[Bb]arrier)",
        native=True,
        why="a c10d collective (or its Work::wait)",
    ),
    SiteRule("gloo", _NCCL, name=r"^gloo::", native=True, why="inside a gloo collective"),
    SiteRule(
        "native-collective-class",
        _NCCL,
        native=True,
        name=r"::\w*(All[Gg]ather|All[Rr]educe|Reduce[Ss]catter|All[Tt]o[Aa]ll|Broadcast)\w*::",
        why="a C++ method of a class named for a collective (TensorRT-LLM's "
        "plugins::AllgatherPlugin::enqueue, AllreduceOp, ...): the engine's collective op",
    ),
    SiteRule(
        "shm-allreduce",
        _NCCL,
        native=True,
        name=r"shm_allreduce|shm_all_gather|shm_cc_|all_reduce_sum_impl|custom_ar|"
        r"CustomAllreduce|cross_device_reduce|quickreduce",
        why="vLLM/SGLang CPU shared-memory or custom all-reduce spinning on peers",
    ),
    SiteRule("c10d-collective-py", _NCCL, file=_C10D_PY, name=_COLLECTIVE_NAMES),
    SiteRule(
        "functional-collectives", _NCCL, file=r"torch/distributed/_functional_collectives\.py$"
    ),
    SiteRule(
        "pynccl-communicator-init",
        _INIT,
        name=r"^(?:PyNcclCommunicator\.)?__init__$",
        file=r"device_communicators/pynccl\.py$",
        why="vLLM's PyNcclCommunicator constructor (pynccl.py __init__, 0.4-0.34): it gets "
        "the NCCL unique id, broadcasts it over the process group and creates the "
        "communicator (ncclCommInitRank): process-group set-up, not a collective of data",
    ),
    SiteRule(
        "framework-comm-module",
        _NCCL,
        # (not pynccl_wrapper.py's NCCL_CHECK: it checks the result of the call around it)
        name=r"^(?!NCCL_CHECK$)",
        file=r"(device_communicators/(custom_all_reduce(?!_utils)|pynccl|cpu_communicator|"
        r"quick_all_reduce|symm_mem|cuda_communicator|all2all|base_device_communicator|"
        r"pymscclpp|custom_all_reduce_ops|ray_communicator|mnnvl_compat|xpu_communicator|"
        r"hpu_communicator|tpu_communicator|npu_communicator)\w*\.py|"
        r"parallel_utils/communication_op\.py|distributed/communication_op\.py|"
        r"distributed/eplb/eplb_communicator\.py)$",
        why="vLLM/SGLang device communicators (not custom_all_reduce_utils.py, whose P2P "
        "probe waits on a child process)",
    ),
    SiteRule("pynccl-wrapper", _NCCL, file=r"pynccl\w*\.py$", name=r"^nccl|comm_window"),
    SiteRule(
        "framework-group-collective",
        _NCCL,
        file=r"(^|/)(parallel_state|group_coordinator|stateless_coordinator)\.py$",
        name=_FRAMEWORK_COLLECTIVE + r"|(^|\.)Handle\.wait$",
        why="the frameworks' GroupCoordinator collectives (vllm/sglang distributed/"
        "parallel_state.py, vLLM's stateless_coordinator.py, SGLang multimodal_gen's "
        "group_coordinator.py) and the handle of an async one",
    ),
    SiteRule(
        "kernel-lib-comm",
        _NCCL,
        native=False,
        file=r"flashinfer/comm/|(^|/)sgl_kernel/allreduce\.py$|(^|/)trtllm_ar\.py$",
        why="the all-reduce kernels of FlashInfer (flashinfer/comm/: TRT-LLM and MNNVL "
        "all-reduce, their workspaces) and sgl-kernel's custom all-reduce: peers meet there",
    ),
    SiteRule(
        "custom-ops-allreduce",
        _NCCL,
        native=False,
        file=r"(^|/)vllm/_custom_ops\.py$",
        name=r"(^|\.)(all_reduce|qr_all_reduce|init_custom_ar|register_buffer|"
        r"register_graph_buffers|\w*allreduce\w*)$",
        why="vLLM's custom all-reduce ops (vllm/_custom_ops.py) spin until every peer arrives",
    ),
    SiteRule(
        "dp-attention-collective",
        _NCCL,
        native=False,
        file=r"(^|/)dp_attention\.py$",
        name=r"(^|\.)_?(dp_gather\w*|dp_scatter\w*|dp_reduce_scatter\w*|"
        r"attn_(tp|cp)_\w*(gather|scatter|reduce)\w*)$",
        why="SGLang's DP-attention gathers/scatters (srt/layers/dp_attention.py, 0.4.4+): "
        "collectives over the attention TP/DP groups",
    ),
    SiteRule(
        "ep-all-to-all",
        _NCCL,
        native=False,
        file=r"(^|/)(deep_ep|pplx_kernels|mori|uccl_ep)/",
        why="expert-parallel all-to-all libraries (DeepEP, pplx-kernels, MORI): dispatch "
        "and combine wait for every peer",
    ),
    SiteRule(
        "framework-collective-name",
        _NCCL,
        leaf=True,
        native=False,
        name=r"(^|[._])(all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all|"
        r"alltoall|broadcast)(_\w+)?$|(^|[._])\w*barrier(_\w+)?$",
        why="a framework function named for a collective (SGLang disaggregation/utils.py "
        "poll_and_all_reduce, tensor_model_parallel_all_reduce, ..._all_gather) or a "
        "barrier (vLLM DPEngineCoreProc.barrier and StatelessGroupCoordinator.barrier, "
        "SGLang dist_barrier_after_load, NaiveDistributed.barrier, "
        "PreshardedModelLoader._world_barrier) with only wrappers, native or generic frames "
        "inside: the thread is in that collective",
    ),
    SiteRule(
        "sglang-pyobj",
        _NCCL,
        name=r"(^|\.)(broadcast_pyobj|point_to_point_pyobj|"
        r"all_gather_pyobj|broadcast_recv_input)$",
        native=False,
    ),
    # --- CUDA graph capture ---------------------------------------------------------------
    SiteRule(
        "cuda-graph-native",
        _GRAPH,
        name=r"^(cudaStreamBeginCapture|cudaStreamEndCapture|cudaGraphInstantiate|"
        r"cuStreamBeginCapture|cuStreamEndCapture|cuGraphInstantiate|"
        r"hipStreamBeginCapture|hipStreamEndCapture|hipGraphInstantiate|"
        r"at::cuda::CUDAGraph::capture)",
        native=True,
    ),
    SiteRule(
        "cuda-graph-replay",
        _SYNC,
        native=False,
        file=r"(torch/cuda/graphs|cuda_graph\w*|cudagraph\w*|graph_runner)\.py$",
        name=r"(^|\.)replay\w*$",
        why="replaying a captured CUDA graph (torch.cuda.CUDAGraph.replay, SGLang "
        "CudaGraphRunner.replay, vLLM's CUDA-graph wrappers): a launch that waits for the "
        "device, not a capture",
    ),
    SiteRule("torch-cuda-graphs", _GRAPH, file=r"torch/cuda/graphs\.py$"),
    SiteRule(
        "framework-graph-capture",
        _GRAPH,
        native=False,
        file=r"(cuda_graph|cudagraph|model_runner|graph_runner)\w*\.py$",
        name=r"(^|[._])_?capture(_model|_cudagraphs?|_graphs?|_one_batch_size|_one_graph|"
        r"_one_shape|_one|_session)?$",
    ),
    SiteRule(
        "framework-graph-run-once",
        _GRAPH,
        native=False,
        file=r"cuda_graph_runner\.py$",
        name=r"(^|\.)run_once$",
        why="SGLang's graph runners (model_executor/cuda_graph_runner.py, runner/*_cuda_graph_"
        "runner.py, speculative/*_cuda_graph_runner.py) define run_once inside the capture of "
        "one batch size: the forward being captured (and its warm-up runs)",
    ),
    SiteRule(
        "graph-or-trace-capture-name",
        _GRAPH,
        native=False,
        name=r"(^|[._])_?(?:begin_|end_)?capture_\w*(?:graph|trace)\w*$|"
        r"(^|[._])\w*(?:graph|trace)_capture\w*$",
        why="a function named for capturing a graph or a device trace, in any framework "
        "(vLLM/SGLang forks, tt-metal's begin/end_trace_capture and its generators' "
        "_capture_*_trace): the analogue of CUDA-graph capture",
    ),
    # --- CUDA synchronisation --------------------------------------------------------------
    SiteRule(
        "cuda-sync-native",
        _SYNC,
        native=True,
        name=r"^(cuCtxSynchronize|cuStreamSynchronize|cuEventSynchronize|cudaDeviceSynchronize|"
        r"cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy(?!Async)|"
        r"cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?$|c10::cuda::(device_synchronize|"
        r"memcpy_and_sync|stream_synchronize)|at::native::_local_scalar_dense|"
        r"c10_npu::.*[Ss]ynchron|aclrtSynchronize\w*|"
        r"hipDeviceSynchronize|hipStreamSynchronize|hipEventSynchronize|hipMemcpy(?!Async)|"
        r"hsa_signal_wait\w*|rocr::core::\w*Signal::Wait\w*|"
        r"sycl::.*(queue|event)::wait\w*|zeEventHostSynchronize|zeCommandQueueSynchronize|"
        r"zeFenceHostSynchronize|urQueueFinish|urEventWait|"
        # Apple MLX (ml-explore/mlx mlx/transforms.cpp eval / async_eval, array.cpp item,
        # synchronize since 0.16): the host waits for the Metal stream's work
        r"mlx::core::(eval|synchronize|array::item|array::eval|array::wait)$|"
        # the CUDA Programming Guide's implicit synchronisation (device and page-locked
        # host allocation and free: cudaFree waits for the device's work, CUDA 8-13)
        r"cudaFree(Host|Async)?$|cuMemFree(Host)?(_v2)?$|cudaMallocHost$|cudaHostAlloc$|"
        r"cuMemAllocHost(_v2)?$|cuMemHostAlloc$|hipFree(Host)?$|hipHostFree$|hipHostMalloc$)",
        why="a device synchronisation (CUDA, ROCm HIP/HSA, Ascend ACL, Intel SYCL/Level "
        "Zero, Apple MLX's eval on Metal), or an allocation or free the CUDA Programming "
        "Guide lists as an implicit synchronisation (cudaFree, page-locked host memory "
        "alloc and free)",
    ),
    SiteRule(
        "cuda-launch-native",
        _SYNC,
        native=True,
        name=r"^(cuLaunchKernel\w*|cudaLaunchKernel\w*|cuLaunchCooperativeKernel\w*|"
        r"cudaMemcpyAsync|cuMemcpy\w*Async\w*|cudaStreamWaitEvent|cuStreamWaitEvent|"
        r"hipLaunchKernel\w*|hipModuleLaunchKernel\w*|hipExtModuleLaunchKernel\w*|"
        r"hipMemcpyAsync|hipMemcpy\w*Async|hipStreamWaitEvent)$",
        why="a kernel launch or async copy that does not return: the CUDA runtime waits for "
        "the device (a queue behind a kernel that never ends, e.g. a collective)",
    ),
    SiteRule(
        "device-copy-native",
        _SYNC,
        native=True,
        name=r"^(at::_ops::(copy_|_to_copy|to_device|to_dtype_layout|_local_scalar_dense|item)::"
        r"(call|redispatch)|at::native::(copy_|_to_copy|to)$|"
        r"torch::autograd::THPVariable_(to|cpu|item|tolist|numpy|cuda)$)",
        why="inside a tensor copy/.to()/.item() (native frames are shown only while the "
        "thread is in them): a device<->host copy waits for the device's queue",
    ),
    SiteRule(
        "cumem-allocator",
        _SYNC,
        native=False,
        file=r"(^|/)(vllm/device_allocator/cumem|sglang/srt/\w+/torch_memory_saver\w*)\.py$",
        name=r"(^|\.)(unmap_and_release|create_and_map|sleep|wake_up|pause|resume)$",
        why="vLLM's sleep-mode allocator (device_allocator/cumem.py, 0.7.3+) and SGLang's "
        "memory saver map and release GPU memory through the CUDA driver (cuMemUnmap / "
        "cuMemRelease / cuMemMap), which wait for the device's queue",
    ),
    SiteRule(
        "torch-cuda-sync",
        _SYNC,
        file=r"(torch/(cuda|npu|xpu|mps)|torch_npu/npu)/(__init__|streams|utils)\.py$",
        name=r"(^|\.)(synchronize|wait|query|wait_event|wait_stream)$",
        why="torch.cuda/xpu/npu synchronize and Stream/Event waits (torch_npu keeps them "
        "in torch_npu/npu/utils.py and streams.py)",
    ),
    SiteRule(
        "accelerator-sync-py",
        _SYNC,
        native=False,
        file=r"(^|/)(torch_xla|jax|jaxlib|habana_frameworks/torch)/",
        name=r"(^|\.)(mark_step|wait_device_ops|synchronize|block_until_ready|device_get|"
        r"_xla_sync\w*|sync)$",
        why="device syncs of the other accelerators vLLM/SGLang run on: TPU (torch_xla "
        "mark_step / wait_device_ops, JAX block_until_ready) and Gaudi (habana_frameworks)",
    ),
    SiteRule(
        "jax-host-transfer",
        _SYNC,
        native=False,
        file=r"(^|/)jax/_src/array\.py$",
        name=r"(^|\.)(_value|__array__|__float__|__int__|__bool__|__index__|__complex__|"
        r"item|tolist|_single_device_array_to_np_array\w*)$",
        why="a JAX array read on the host (jax/_src/array.py ArrayImpl._value and the "
        "conversions that call it, float() / int() / np.asarray / .item(), 0.4-0.7): the "
        "device-to-host copy waits for the computation that makes the array",
    ),
    SiteRule(
        "cuda-free-sync",
        _SYNC,
        leaf=True,
        native=False,
        file=r"(torch/(cuda|npu|xpu)|torch_npu/npu)/memory\.py$",
        name=r"(^|\.)(empty_cache|mem_get_info|reset_peak_memory_stats|memory_stats)$",
        why="the caching allocator releasing memory (cudaFree synchronises the device) or "
        "asking the driver for free memory: the thread waits for the GPU",
    ),
    SiteRule(
        "flashinfer-module-getter",
        _JIT,
        file=r"flashinfer/(?!jit/)\w+\.py$",
        name=r"(^|\.)(get_\w+_module|gen_\w+_module|load_cuda_ops|build_and_load)$",
        why="FlashInfer's kernel-module getters (flashinfer/prefill.py "
        "get_batch_prefill_module, decode.py get_batch_decode_module, 0.2-0.5) build the "
        "module with its JIT, or load the built one, on first use",
    ),
    SiteRule(
        "gpu-kernel-leaf",
        _SYNC,
        leaf=True,
        native=False,
        file=r"(flashinfer/(?!jit/|autotuner\.py$)|sgl_kernel/|vllm/_custom_ops\.py$|"
        r"deep_gemm/(?!jit/)|flash_attn/|vllm_flash_attn/|flash_mla/|sgl_kernel_npu/|"
        r"aiter/(?!jit/)|triton_kernels/|triton/runtime/jit\.py$|torch/_tensor_str\.py$|"
        r"triton/backends/\w+/driver\.py$)",
        why="the innermost Python frame is a GPU-kernel wrapper: a thread stuck there is "
        "blocked in the CUDA runtime (a full launch queue or an implicit sync)",
    ),
    # --- JIT compilation -------------------------------------------------------------------
    SiteRule(
        "inductor-compile",
        _JIT,
        native=False,
        file=r"torch/_inductor/(?!output_code\.py|runtime/|compile_worker/subproc_pool\.py)",
    ),
    SiteRule(
        "inductor-autotune",
        _JIT,
        native=False,
        file=r"torch/_inductor/runtime/(triton_heuristics|benchmarking|autotune_cache)\.py$",
        name=r"(bench|autotune|precompile|_make_launchers)",
        why="Inductor benchmarking its Triton configs on first run: part of compilation",
    ),
    SiteRule(
        "inductor-subproc-wait",
        _JIT,
        file=r"torch/_inductor/compile_worker/",
        name=r"submit|wait|result|_send",
    ),
    SiteRule(
        "dynamo-compile",
        _JIT,
        file=r"torch/_dynamo/(convert_frame|symbolic_convert|output_graph|variables/|"
        r"guards|backends/)",
    ),
    SiteRule("dynamo-aot-compile", _JIT, file=r"torch/_dynamo/", name=r"aot_compile"),
    SiteRule(
        "aot-autograd-compile",
        _JIT,
        file=r"torch/_functorch/(_aot_autograd/(?!runtime_wrappers|subclass_utils|utils\.py)|"
        r"aot_autograd\.py$)",
        why="AOTAutograd tracing and compiling a graph (not its runtime wrappers)",
    ),
    SiteRule(
        "fx-symbolic-compile",
        _JIT,
        native=False,
        file=r"torch/fx/experimental/(symbolic_shapes|proxy_tensor)\.py$|torch/fx/passes/|"
        r"torch/_subclasses/fake_tensor\.py$|(^|/)sympy/",
        why="shape reasoning and fake-tensor tracing: these run only while Dynamo/AOT "
        "compile a graph",
    ),
    SiteRule(
        "vllm-compilation",
        _JIT,
        file=r"vllm/compilation/(backends|compiler_interface|inductor_pass|pass_manager|"
        r"vllm_inductor_pass|fix_functionalization|noop_elimination|sequence_parallelism|"
        r"post_cleanup|\w*fusion\w*|passes/\w+)\.py$|"
        r"srt/compilation/(backend|compiler_interface|inductor_pass|pass_manager|"
        r"\w*fusion\w*|compile)\.py$",
        why="vLLM's torch.compile backend and Inductor passes (vllm/compilation/, 0.6+); "
        "SGLang's piecewise compile backend (sglang/srt/compilation/)",
    ),
    SiteRule("vllm-compile-wrapper", _JIT, file=r"vllm/compilation/wrapper\.py$", name=r"compile"),
    SiteRule(
        "triton-compile",
        _JIT,
        file=r"triton/(compiler/|backends/.*compiler\.py$|runtime/build\.py$|"
        r"runtime/autotuner\.py$|testing\.py$)",
    ),
    SiteRule(
        "triton-driver-build",
        _JIT,
        file=r"triton/backends/\w+/driver\.py$",
        name=r"(^|\.)(compile_module_from_src|_build|build)$",
        why="Triton's driver building and loading its C launcher module with the host "
        "compiler (triton/backends/nvidia/driver.py compile_module_from_src, 3.x)",
    ),
    SiteRule(
        "xla-compile",
        _JIT,
        file=r"jax/_src/(dispatch|compiler|interpreters/pxla)\.py$",
        name=r"(^|\.)(backend_compile\w*|compile_or_get_cached|_cached_compilation|"
        r"from_xla_computation|compile_with_cache)$",
        why="JAX handing a computation to XLA to compile (jax/_src/compiler.py "
        "backend_compile, dispatch.py in older JAX): the JIT of JAX/TPU serving "
        "(tpu-inference, sglang-jax)",
    ),
    SiteRule(
        "xla-compile-native",
        _JIT,
        native=True,
        name=r"^xla::(?:\w+::)*\w*Compil\w*::(?:RunBackend|RunHloPasses|Compile\w*)|"
        r"^xla::\w*(?:Client|Executable)\w*::Compile\b",
        why="XLA's compiler (GpuCompiler::RunBackend / RunHloPasses, a PjRt client's Compile)",
    ),
    SiteRule(
        "kernel-jit",
        _JIT,
        file=r"(deep_gemm/jit|flashinfer/jit/|flashinfer/autotuner\.py$|tilelang/(jit|engine)/|"
        r"tvm_ffi/|torch/utils/cpp_extension\.py$|compile_utils\.py$|jit_kernel/|aiter/jit/|"
        r"warmup/deep_gemm_warmup\.py$|cutlass/cute/.*compile|cuda/bindings/nvrtc)",
        why="a kernel library building or autotuning its kernels: DeepGEMM and FlashInfer "
        "JIT, vLLM's DeepGEMM warm-up (model_executor/warmup/deep_gemm_warmup.py, JITs "
        "every shape), FlashInfer's autotuner, AITER, TileLang, torch cpp_extension",
    ),
    SiteRule(
        "nvcc-native",
        _JIT,
        native=True,
        name=r"^(nvrtc|__nvrtc|nvJitLink|cuModuleLoad|"
        r"cuLibraryLoad|cuLinkComplete|hiprtc\w*|hipModuleLoad\w*|amd_comgr\w*)",
    ),
    # --- weights ---------------------------------------------------------------------------
    SiteRule("safetensors", _WEIGHTS, file=r"safetensors"),
    SiteRule("weight-utils", _WEIGHTS, file=r"(^|/)weight_utils\.py$"),
    SiteRule(
        "model-loader",
        _WEIGHTS,
        file=r"model_loader/",
        name=r"(load_weights|_get_all_weights|_get_weights_iterator|"
        r"download_model|_prepare_weights|weights_iterator)",
    ),
    SiteRule("model-load-weights", _WEIGHTS, native=False, name=r"(^|\.)load_weights$"),
    SiteRule("torch-load", _WEIGHTS, file=r"torch/serialization\.py$"),
    SiteRule("hf-download", _WEIGHTS, file=r"huggingface_hub/|modelscope/hub/"),
    SiteRule(
        "checkpoint-file-loader",
        _WEIGHTS,
        native=False,
        name=r"(^|\.)load_torch_file$",
        why="ComfyUI's checkpoint reader (comfy/utils.py load_torch_file, 2023-2026: "
        "safetensors safe_open / get_tensor or torch.load of one file), copied by its forks "
        "(Forge's ldm_patched/modules/utils.py) and custom nodes under the same name",
    ),
    SiteRule(
        "hf-state-dict-loader",
        _WEIGHTS,
        native=False,
        file=r"(^|/)(transformers/modeling_utils|accelerate/utils/modeling|"
        r"diffusers/models/(model_loading_utils|modeling_utils))\.py$",
        name=r"(^|\.)(load_state_dict|_load_state_dict_into_meta_model|load_shard_file|"
        r"_load_pretrained_model|"
        r"load_checkpoint_in_model|load_model_dict_into_meta|_load_shard_file)$",
        why="Hugging Face's checkpoint readers: transformers' modeling_utils.py "
        "load_state_dict (4.x) / _load_state_dict_into_meta_model (4.20+) / load_shard_file "
        "(4.51+) under _load_pretrained_model, accelerate's utils/modeling.py load_state_dict and "
        "load_checkpoint_in_model, diffusers' models/model_loading_utils.py load_state_dict "
        "and load_model_dict_into_meta (models/modeling_utils.py before 0.23): reading a "
        "checkpoint shard (safetensors or torch.load) into the model",
    ),
    SiteRule(
        "weights-readers",
        _WEIGHTS,
        native=False,
        file=r"(^|/)(fastsafetensors|runai_model_streamer|gguf|tensorizer|instanttensor)/",
        why="other checkpoint readers vLLM/SGLang load with (fastsafetensors, Run:ai "
        "streamer, GGUF, tensorizer)",
    ),
    # --- IPC ---------------------------------------------------------------------------------
    SiteRule(
        "mp-connection",
        _IPC,
        strength="weak",
        # not a Manager's own server loop (managers.py Server.serve_forever: the manager
        # process idle between its clients' calls; named-loop-wait says so)
        name=r"^(?!(?:\w+\.)?serve_forever$)",
        file=r"multiprocessing/(connection|queues|managers|popen_\w+|reduction)\.py$",
        why="a multiprocessing pipe, queue or child wait: another process, but what for is "
        "said by the caller (a compile pool is a compile, an executor's wait_for_ready an "
        "RPC, a pool worker between tasks an idle loop)",
    ),
    SiteRule(
        "framework-wait-peer",
        _IPC,
        native=False,
        name=r"(^|\.)(get_response|_?wait_for_response|_?wait_for_ready|wait_until_ready|"
        r"_?wait_for_engine_startup|_?wait_for_scheduler_ready|get_output|"
        r"_?wait_for_\w*_ready|_?wait_for_\w*(startup|handshake|response|workers?)|"
        r"_perform_handshakes?|startup_handshake|recv_requests_from_\w+|wait_for_init|"
        r"_?wait_until_\w*ready|_wait_for_zmq_addrs|_wait_and_warmup|_wait_weights_ready|"
        r"wait_port_available|_wait_one_response|_send_to_scheduler_and_wait_for_response|"
        r"_wait_for_tasks_completion|_await_ack|_wait_for_server_rpc|wait_for_server|"
        r"wait_for_kv_layer_from_connector)$",
        why="a framework call waiting for a peer process to answer: vLLM's executor "
        "get_response / _wait_for_response (v1/executor/multiproc_executor.py), "
        "WorkerProc.wait_for_ready, MessageQueue.wait_until_ready, the front end's "
        "wait_for_engine_startup (v1/engine/utils.py; MPClient._wait_for_engine_startup in "
        "core_client.py of 0.7-0.8), EngineCoreProc._perform_handshake(s) / "
        "startup_handshake (v1/engine/core.py), SyncMPClient.get_output, the Ray executors' "
        "wait_for_init and _wait_until_pg_ready; SGLang's _wait_for_scheduler_ready "
        "(entrypoints/engine.py), the launcher's _wait_and_warmup / _wait_weights_ready "
        "polling its own server (entrypoints/http_server.py), wait_port_available, "
        "TokenizerManager._wait_one_response, sglang/utils.py wait_for_server; vLLM V0's "
        "executors' _wait_for_tasks_completion, MQLLMEngineClient._await_ack / "
        "_wait_for_server_rpc (engine/multiprocessing/client.py, 0.6-0.10), "
        "wait_for_kv_layer_from_connector (attention/layer.py)",
    ),
    SiteRule(
        "p2p-probe",
        _IPC,
        native=False,
        file=r"(^|/)custom_all_reduce_utils\.py$",
        name=r"(^|\.)(gpu_p2p_access_check|can_actually_p2p|_can_p2p|producer|consumer)$",
        why="vLLM's GPU P2P probe (device_communicators/custom_all_reduce_utils.py, "
        "0.4-0.6) runs in child processes and waits for them over a pipe or subprocess",
    ),
    SiteRule("ray-get", _IPC, file=r"ray/_private/worker\.py$", name=r"(^|\.)(get|wait)$"),
    # --- idle loops -------------------------------------------------------------------------
    SiteRule(
        "sglang-idle",
        _IDLE,
        native=False,
        name=r"(^|\.)(on_idle|is_fully_idle|self_check_during_idle|check_tree_cache|"
        r"_process_input_queue|wait_for_work|_idle_wait)$",
        why="the serving loop's own idle path",
    ),
    SiteRule(
        "serving-loop-wait",
        _IDLE,
        leaf=True,
        native=False,
        name=r"(^|\.)(worker_busy_loop|run_busy_loop|_run_worker_process|run_engine_loop|"
        r"wait_for_new_input|run_startup_loop|process_input_socket|recv_requests|event_loop|"
        r"handle_loop|maybe_sleep|forward_thread_func_?)$",
        why="a serving loop waiting for its next input, with only a generic wait inside "
        "(zmq/queue/MessageQueue): vLLM's WorkerProc.worker_busy_loop and "
        "EngineCoreProc.run_busy_loop (v1/executor/multiproc_executor.py, "
        "v1/engine/core.py, 0.6-0.2x), the V0 multiproc worker's _run_worker_process and "
        "MQLLMEngine.run_engine_loop; SGLang's Scheduler.recv_requests, "
        "DetokenizerManager.event_loop, DataParallelController.event_loop, "
        "TokenizerManager.handle_loop, IdleSleeper.maybe_sleep (--sleep-on-idle) and the "
        "overlap worker's forward_thread_func_ waiting on its input queue "
        "(managers/tp_worker_overlap_thread.py); vLLM's DPCoordinatorProc."
        "process_input_socket (v1/engine/coordinator.py)",
    ),
    SiteRule(
        "named-loop-wait",
        _IDLE,
        leaf=True,
        native=False,
        name=r"(^|\.)\w*([lL]oop|_forever)(_\w+)?$",
        why="any function named as a loop (``*_loop``, ``serve_forever``) whose only "
        "frames inside are a generic wait (queue, zmq, select, sleep, a lock): one idle "
        "turn of a service loop; a loop doing work has other frames inside",
    ),
    SiteRule(
        "helper-process-loop",
        _IDLE,
        leaf=True,
        native=False,
        file=r"(multiprocessing/(resource_tracker|forkserver|pool)\.py$|(^|/)socketserver\.py$|"
        r"concurrent/futures/process\.py$|ray/_private/(worker|workers/default_worker)\.py$|"
        r"torch/distributed/elastic/agent/server/api\.py$|"
        r"torch/_inductor/compile_worker/subproc_pool\.py$)",
        name=r"(^|\.)(main|serve_forever|main_loop|run_task_loop|worker|_process_worker|"
        r"_invoke_run)$",
        why="a helper process or actor waiting for work: multiprocessing's resource "
        "tracker, fork server and pool workers, a process-pool worker, a socketserver, an "
        "idle Ray worker's main_loop, torchrun's elastic agent polling its workers, "
        "Inductor's compile sidecar (compile_worker/subproc_pool.py SubprocMain.main) "
        "reading its next job",
    ),
    SiteRule(
        "asyncio-loop",
        _IDLE,
        leaf=True,
        native=False,
        file=r"(asyncio/(base_events|runners|events|selector_events|unix_events|"
        r"windows_events|proactor_events)\.py$|uvloop/|uvicorn/server\.py$|"
        r"tornado/ioloop\.py$)",
    ),
    SiteRule(
        "pool-worker-idle",
        _IDLE,
        leaf=True,
        native=False,
        file=r"concurrent/futures/thread\.py$",
        name=r"(^|\.)_worker$",
    ),
    SiteRule(
        "kv-transfer",
        _IPC,
        native=False,
        file=r"(^|/)(mooncake|nixl|lmcache)/|(^|/)kv_transfer/|"
        r"disaggregation/(mooncake|nixl|ascend|mori|common)/",
        why="a KV-cache transfer or remote KV store (Mooncake, NIXL, LMCache; vLLM's "
        "distributed/kv_transfer/, SGLang's disaggregation/<backend>/): the other engine "
        "or the store answers; after the idle-loop rules, so their own service loops idle",
    ),
    # --- GIL and locks -------------------------------------------------------------------------
    SiteRule(
        "gil-wait",
        _LOCK,
        native=True,
        name=r"^(take_gil|_PyEval_EvalFrame.*take_gil|_PyEval_TakeGIL|"
        r"PyEval_AcquireLock|PyEval_AcquireThread|PyEval_RestoreThread|PyGILState_Ensure|"
        r"drop_gil)$",
        why="waiting for the GIL: take_gil, reached from PyEval_RestoreThread when a native "
        "call returns or PyGILState_Ensure when a C thread calls into Python",
    ),
    # --- weak: generic primitives and channels ---------------------------------------------
    SiteRule(
        "c10d-api-wrapper",
        _NCCL,
        strength="weak",
        native=False,
        cut=True,
        file=r"torch/distributed/c10d_logger\.py$",
        why="torch.distributed's logging decorators (c10d_logger.py _exception_logger / "
        "_time_logger, torch 2.1+) wrap every collective and init_process_group / "
        "new_group: a dump cut above this frame is inside one; a collective unless a "
        "caller names the init",
    ),
    SiteRule(
        "filelock",
        _JIT,
        strength="weak",
        file=r"(^|/)filelock/|torch/utils/_filelock\.py$",
        why="a file lock, usually a compile/cache directory shared by ranks",
    ),
    SiteRule(
        "flock-native", _JIT, strength="weak", native=True, name=r"^(flock|__flock|fcntl|lockf)$"
    ),
    SiteRule(
        "zmq",
        _IPC,
        strength="weak",
        file=r"(^|/)zmq/",
        why="a ZeroMQ receive or poll; weak so that a collective built on it (vLLM's "
        "GroupCoordinator over a MessageQueue) is named by its caller",
    ),
    SiteRule("zmq-native", _IPC, strength="weak", native=True, name=r"^zmq::|^zmq_"),
    SiteRule(
        "inductor-pipe",
        _IPC,
        strength="weak",
        native=False,
        file=r"torch/_inductor/compile_worker/subproc_pool\.py$",
        name=r"(^|\.)(_recv_msg|_send_msg)$",
        why="Inductor's compile-worker pipe (torch 2.4+ subproc_pool.py): generic, its "
        "caller says whose turn it is (the sidecar's main loop idles, a submit compiles)",
    ),
    SiteRule(
        "zmq-wrapper",
        _IPC,
        strength="weak",
        native=False,
        name=r"(^|\.)(sock_recv|recv_pyobj|recv_multipart|recv_json|recv_string|"
        r"_recv_msg_from_socket)$",
        why="a framework's thin wrapper around a ZeroMQ receive (SGLang's sock_recv in "
        "managers/io_struct.py): generic, its caller says what it waits for",
    ),
    SiteRule(
        "sched-yield-spin",
        _IPC,
        strength="weak",
        name=r"(^|\.)sched_yield$",
        why="a spin-wait's yield (vllm/distributed/utils.py sched_yield, called by the "
        "shared-memory MessageQueue while it polls for a message): generic, its caller "
        "says what it waits for",
    ),
    SiteRule(
        "shm-broadcast",
        _IPC,
        strength="weak",
        file=r"shm_broadcast\.py$",
        why="vLLM's shared-memory MessageQueue: engine <-> workers RPC (IPC), or a "
        "GroupCoordinator broadcast (a collective, named by the caller's frame)",
    ),
    SiteRule(
        "queue-get", _IPC, strength="weak", file=r"(^|/)queue\.py$", name=r"(^|\.)(get|put|join)$"
    ),
    SiteRule("selectors", _IPC, strength="weak", file=r"(^|/)selectors\.py$"),
    SiteRule(
        "socket-py",
        _IPC,
        strength="weak",
        file=r"(^|/)(socket|ssl)\.py$|http/client\.py$|urllib3/|requests/|httpx/|httpcore/",
    ),
    SiteRule(
        "future-result",
        _IPC,
        strength="weak",
        file=r"concurrent/futures/_base\.py$",
        name=r"(^|\.)(result|wait|as_completed|_result_or_cancel|result_iterator)$",
        why="waiting for a future: what the pool works on (compile, weights) says more",
    ),
    SiteRule("subprocess-wait", _IPC, strength="weak", file=r"(^|/)subprocess\.py$"),
    SiteRule("ray-any", _IPC, strength="weak", file=r"(^|/)ray/"),
    SiteRule(
        "io-native",
        _IPC,
        strength="weak",
        native=True,
        name=r"^(__)?(read|recv|recvfrom|recvmsg|poll|ppoll|epoll_wait|epoll_pwait|select|"
        r"pselect\d*|accept4?|eventfd_read|__libc_read|__libc_recv|"
        # Darwin's libsystem_kernel (macOS `sample`, lldb): kqueue and socket waits
        r"kevent(64|_qos|_id)?|__select(_nocancel)?|__recvfrom(_nocancel)?|"
        r"__read_nocancel|__poll_nocancel|__accept)$",
    ),
    SiteRule(
        "gpu-runtime-unsymbolised",
        _SYNC,
        strength="weak",
        unsymbolised=True,
        file=r"(^|/)(libcuda|libcudart|libamdhip64|libhsa-runtime64|libascendcl|libze_loader|"
        r"libur_adapter_level_zero|libsycl)\.so",
        why="an unsymbolised frame inside the GPU driver or runtime: the thread is in a "
        "CUDA/HIP/ACL call (a sync, a launch behind a full queue); named frames or a "
        "caller say more",
    ),
    SiteRule(
        "nccl-unsymbolised",
        _NCCL,
        strength="weak",
        unsymbolised=True,
        file=r"(^|/)(libnccl|librccl|libhccl)\.so",
        why="an unsymbolised frame inside NCCL/RCCL/HCCL",
    ),
    SiteRule(
        "sleep",
        _IDLE,
        strength="weak",
        native=True,
        name=r"^(clock_nanosleep|nanosleep|__clock_nanosleep|time_sleep|usleep|pysleep|"
        r"__semwait_signal(_nocancel)?)$",
    ),
    SiteRule(
        "threading-py",
        _LOCK,
        strength="weak",
        file=r"(^|/)threading\.py$",
        name=r"(^|\.)(acquire|wait|join|_wait_for_tstate_lock|_shutdown|wait_for)$",
    ),
    SiteRule("mp-synchronize", _LOCK, strength="weak", file=r"multiprocessing/synchronize\.py$"),
    SiteRule(
        "mutex-native",
        _LOCK,
        strength="weak",
        native=True,
        # glibc's names of it: pthread_mutex_lock, __pthread_mutex_lock (before 2.34, gdb's
        # __GI_ prefix dropped), ___pthread_mutex_lock and its inline
        # lll_mutex_lock_optimized (2.34+, nptl/pthread_mutex_lock.c), __lll_lock_wait
        # (nptl/lowlevellock.c; __lll_lock_wait_private); libstdc++'s std::mutex::lock
        name=r"^(_{0,3}pthread_mutex_(timed|clock)?lock\w*|_{0,2}lll_lock_wait\w*|"
        r"lll_mutex_lock\w*|__gthread_mutex_lock|std::(recursive_|timed_)?mutex::lock)",
        why="taking a mutex (pthread_mutex_lock / __lll_lock_wait): a lock of this "
        "process, owned by another of its threads; inside a collective's native frames "
        "it is the wait (MUTEX_IN_CALL_RULE)",
    ),
    SiteRule(
        "lock-native",
        _LOCK,
        strength="weak",
        native=True,
        name=r"^(PyThread_acquire_lock\w*|lock_PyThread_acquire_lock|rlock_acquire|"
        r"acquire_timed|"
        r"pthread_cond_wait|pthread_cond_timedwait|__pthread_cond_wait\w*|"
        r"__futex_abstimed_wait\w*|futex_wait|do_futex_wait\w*|sem_wait|sem_timedwait|"
        r"std::condition_variable::wait\w*|std::__condvar::wait\w*|"
        # Darwin's (libsystem_kernel / libsystem_pthread): condition variables, mutexes,
        # os_unfair_lock and dispatch semaphores
        r"__psynch_cvwait|__psynch_mutexwait|_pthread_cond_wait|__ulock_wait2?|"
        r"semaphore_wait_trap|semaphore_timedwait_trap|_dispatch_sema4_wait|"
        r"std::__1::condition_variable::wait\w*)",
    ),
)

# Sites where a thread is held by something outside it (another rank, the GPU, the disk);
# ranked above a plain IPC or lock wait when choosing the thread that matters.
HARD_SITES: frozenset[str] = frozenset({_NCCL, _INIT, _SYNC, _GRAPH, _JIT, _WEIGHTS})

_HELPER_NAME = re.compile(
    r"^(tqdm_monitor|subprocess-watchdog|uvloop_\d+|ThreadPoolExecutor-\S+|InductorSubproc|"
    r"DeathPipeMonitor|MultiprocWorkerMonitor|MPClientEngineMonitor|QueueFeederThread|"
    r"signal-callback|pt_(?!main_thread$)\w+|"
    # the CUDA driver's own threads (libcuda names them: its event handler, and
    # "cuda" + hex digits for its poll loops)
    r"cuda-EvtHandlr|cuda[0-9a-f]{8,}|"
    r"Thread-\d+ \((_watchdog_thread|_read_thread|_monitor_loop|_handle_workers|_handle_tasks|"
    r"_handle_results|_feed|monitor\w*|process_input_sockets?|process_output_sockets?|"
    r"_serve|_check_alive|run_watchdog|watchdog_thread)\))$"
)
_HELPER_FRAME = re.compile(
    r"tqdm/_monitor\.py|utils/watchdog\.py|compile_worker/subproc_pool\.py:(\w+\.)?_read_thread|"
    r"multiprocessing/queues\.py:(\w+\.)?_feed|multiprocessing/pool\.py:(\w+\.)?_handle_|"
    r"(monitor_death_pipe|start_worker_monitor|_monitor_loop|process_input_sockets?|"
    r"process_output_sockets?|_?watchdog_thread|pyspy_dump_schedulers|monitor_workers|"
    r"monitor_engine_cores|_report_usage_worker|_report_continu?ous_usage)|"
    # SGLang PD disaggregation's listener threads (sglang/srt/disaggregation/{mooncake,nixl,
    # common}/conn.py 0.4.6-0.5.23: bootstrap_thread, decode_thread, heartbeat_checker):
    # each loops on a zmq recv or a sleep for the peer's status messages
    r"disaggregation/\w+/conn\.py:(\w+\.)?(bootstrap_thread\w*|decode_thread|"
    r"decode_listener_thread|heartbeat_checker)$"
)
# A thread the process never started from Python: a native thread (its outermost frame
# pthread's start_thread or clone) whose every frame outside libc is in a driver's or an
# MPI runtime's own library: the CUDA driver's and its debugger backend's poll threads,
# libevent/PMIx progress loops. It waits for that library's events, not for the model.
_NATIVE_START = frozenset({"start_thread", "clone", "clone3", "__clone", "__clone3"})
# libc's frames: by their library, or, where gdb has glibc's debug info, by its source
# place as gdb prints it (`accept4 () at ../sysdeps/unix/sysv/linux/accept4.c:38`, `clone
# () at ../sysdeps/unix/sysv/linux/x86_64/clone.S:115`, `__lll_lock_wait () at
# ../nptl/sysdeps/...`): paths relative to glibc's build folder, its top-level source folders
_LIBC = re.compile(
    r"(^|/)(libc|libpthread|ld-linux[\w-]*)[.-]|"
    r"^\.\./(sysdeps|nptl|misc|io|posix|socket|signal|stdlib|string|libio|malloc|elf|"
    r"time|csu)/"
)
# NCCL's (RCCL's) own threads are such threads too: its proxy service and progress
# threads, the bootstrap root and the IB async-event thread (src/proxy.cc ncclProxyService /
# ncclProxyProgress, bootstrap.cc, transport/net_ib.cc ncclIbAsyncThreadMain, 2.x), which
# poll their sockets for the life of a communicator; a collective runs on the thread that
# called it (its frames are the caller's: libtorch, libpython), not on these.
_HELPER_LIB = re.compile(
    r"(^|/)(libcuda|libcudadebugger|libevent(_core|_pthreads)?(-[\d.]+)?|libpmix|libnccl|"
    r"librccl)\.so"
)
# the frames threading.py puts under every thread's own code: a thread the paste cut to
# these shows nothing of what it runs
_THREAD_START = frozenset({"_bootstrap", "_bootstrap_inner", "run"})

# Pass-through frames: decorators and dispatch wrappers between a wait and the code that
# asked for it (``OpOverload.__call__``, ``Module._call_impl``, ``decorate_context``, a
# logging ``wrapper``). They neither decide a site nor hide a leaf rule behind them: the
# frame outside them does.
_PASS_THROUGH_FILE = re.compile(
    r"torch/_ops\.py$|torch/nn/modules/module\.py$|torch/utils/_contextlib\.py$|"
    r"torch/_compile\.py$|torch/_library/|torch/distributed/c10d_logger\.py$|"
    r"torch/_dynamo/eval_frame\.py$|(^|/)contextlib\.py$|(^|/)functools\.py$|"
    r"flashinfer/api_logging\.py$|vllm/tracing/|utils/nvtx_utils\.py$"
)
_PASS_THROUGH_NAME = re.compile(
    r"(^|\.)(wrapper|_wrapper|inner|_fn|wrapped|wrapped_fn|decorate_context|sync_wrapper|"
    r"_auto_dump_wrapper)$"
)


_PASS_THROUGH_SEEN: dict[tuple[str, str], bool] = {}
_PASS_THROUGH_MAX = 50_000


def is_pass_through(frame: StackFrame) -> bool:
    """A decorator or dispatch wrapper frame: in a torch or library wrapper module
    (``_PASS_THROUGH_FILE``), or named like a decorator's wrapper (``_PASS_THROUGH_NAME``).
    (Remembered per name and file: the same frames recur in every thread and rank.)"""
    if frame.native:
        return False
    key = (frame.name, frame.filename)
    found = _PASS_THROUGH_SEEN.get(key)
    if found is None:
        found = bool(
            _PASS_THROUGH_NAME.search(frame.name)
            or _PASS_THROUGH_FILE.search(normalise_path(frame.filename))
        )
        if len(_PASS_THROUGH_SEEN) >= _PASS_THROUGH_MAX:
            _PASS_THROUGH_SEEN.clear()
        _PASS_THROUGH_SEEN[key] = found
    return found


def site_priority(site: str | None) -> int:
    """3 for a hard wait, 2 for an IPC or lock wait, 1 for an idle loop, 0 for none."""
    if site is None:
        return 0
    if site in HARD_SITES:
        return 3
    if site == _IDLE:
        return 1
    return 2


_MATCH_CACHE: dict[tuple[str, str, bool], tuple[SiteRule | None, SiteRule | None]] = {}
_MATCH_CACHE_MAX = 50_000


def _first_matches(frame: StackFrame) -> tuple[SiteRule | None, SiteRule | None]:
    """(first rule matching the frame, first non-leaf rule matching it), memoised: the
    same frames recur in every thread and every rank (an unsymbolised frame by its shared
    object alone: its address differs in every process)."""
    unsymbolised = frame.native and is_address(frame.name)
    key = ("0x" if unsymbolised else frame.name, frame.filename, frame.native)
    cached = _MATCH_CACHE.get(key)
    if cached is not None:
        return cached
    first: SiteRule | None = None
    first_not_leaf: SiteRule | None = None
    for rule in RULES:
        if rule.matches(frame):
            if first is None:
                first = rule
            if not rule.leaf:
                first_not_leaf = rule
                break
    if len(_MATCH_CACHE) >= _MATCH_CACHE_MAX:
        _MATCH_CACHE.clear()
    _MATCH_CACHE[key] = (first, first_not_leaf)
    return first, first_not_leaf


# --- the wait-site catalogue from the sources (tools/stack_catalogue.py) -----------------
_CATALOGUE_PATH = Path(__file__).with_name("wait_catalogue.tsv")
_FRAMEWORK_DIR = re.compile(r"(?:^|/)(?=(?:vllm|sglang)/)")


@dataclass(frozen=True, slots=True)
class _Entry:
    site: str
    lines: frozenset[int]  # call lines of the primitive, over every version read
    spans: tuple[tuple[int, int], ...] = ()  # the function's first and last line per version


@lru_cache(maxsize=1)
def _catalogue() -> dict[tuple[str, str], tuple[tuple[str, ...], ...]]:
    """(package-relative path, qualified name) -> the rows of its blocking calls, as read
    (split into fields, parsed by :func:`_entries` when a frame asks); also keyed by the
    bare function name (py-spy before Python 3.11 shows no class)."""
    out: dict[tuple[str, str], list[tuple[str, ...]]] = {}
    try:
        text = _CATALOGUE_PATH.read_text(encoding="utf-8")
    except OSError:
        return {}
    for row in text.splitlines():
        if not row or row.startswith("#") or row.startswith("framework\t"):
            continue
        parts = tuple(row.split("\t"))
        if len(parts) not in (6, 7) or parts[3] not in STACK_SITES:
            continue
        rel, qual = parts[1], parts[2]
        out.setdefault((rel, qual), []).append(parts)
        bare = qual.rsplit(".", 1)[-1]
        if bare != qual:
            out.setdefault((rel, bare), []).append(parts)
    return {k: tuple(v) for k, v in out.items()}


_ENTRIES: dict[tuple[str, str], tuple[_Entry, ...]] = {}


def _entries(key: tuple[str, str]) -> tuple[_Entry, ...]:
    """The catalogue's entries for (package-relative path, function name), parsed from
    their rows on first use (a run asks for a few dozen of the ~6,700 keys)."""
    got = _ENTRIES.get(key)
    if got is None:
        got = _ENTRIES[key] = tuple(_entry(parts) for parts in _catalogue().get(key, ()))
    return got


def _entry(parts: tuple[str, ...]) -> _Entry:
    site, per = parts[3], parts[5]
    lines = frozenset(
        int(n) for chunk in per.split(";") for n in chunk.partition(":")[2].split(",") if n
    )
    spans = []
    for chunk in parts[6].split(";") if len(parts) == 7 else ():
        a, _, b = chunk.partition(":")[2].partition("-")
        if a.isdigit() and b.isdigit():
            spans.append((int(a), int(b)))
    return _Entry(site, lines, tuple(spans))


_CATALOGUE_RULES: dict[tuple[str, str], SiteRule] = {}


def catalogue_rule(frame: StackFrame) -> SiteRule | None:
    """The catalogue's word on a Python frame of vLLM or SGLang: the frame sits on a line
    where the function calls a primitive that has no Python frame of its own (``.item()``,
    a ZeroMQ ``recv``, ``TCPStore.get``, ``fcntl.flock``, ``get_tensor``), in some release
    read (:data:`CATALOGUE_WHY`)."""
    if frame.native or frame.line is None:
        return None
    path = normalise_path(frame.filename)
    if not path.endswith(".py") or ("vllm/" not in path and "sglang/" not in path):
        return None
    cat = _catalogue()
    entries: tuple[_Entry, ...] = ()
    # a source checkout nests the package (/workspace/vllm/vllm/..., sglang/python/sglang/):
    # try every package directory in the path, outermost first
    for m in _FRAMEWORK_DIR.finditer(path):
        key = (path[m.end() :], frame.name)
        if key in cat:
            entries = _entries(key)
            break
    if not entries:
        return None
    line = frame.line
    rule_id = "catalogue"
    sites = {e.site for e in entries if line in e.lines}
    # No call line of a release read. Inside the function in one of them: elsewhere than
    # its calls, says nothing. Inside it in none: a release not read (they come every few
    # weeks), where the function's calls, if they agree, say the site.
    if (
        not sites
        and all(e.spans for e in entries)
        and not any(a <= line <= b for e in entries for a, b in e.spans)
    ):
        sites = {e.site for e in entries}
        rule_id = "catalogue-other-release"
    if len(sites) != 1:
        return None
    site = sites.pop()
    rule = _CATALOGUE_RULES.get((rule_id, site))
    if rule is None:
        why = CATALOGUE_WHY if rule_id == "catalogue" else CATALOGUE_OTHER_RELEASE_WHY
        rule = _CATALOGUE_RULES[(rule_id, site)] = SiteRule(rule_id, site, leaf=True, why=why)
    return rule


# The calls into C that have no Python frame of their own (tools/stack_catalogue.py's
# PRIMITIVES, as a traceback prints the call): where a traceback's innermost frame raised
_CALL_RULES: dict[str, SiteRule] = {}
CALL_WHY = (
    "the call a traceback prints under its innermost frame is one into C with no Python "
    "frame of its own (diag/stacks/primitives.py: {label}): the thread raised "
    "inside it"
)


def call_rule(frame: StackFrame) -> SiteRule | None:
    """A traceback's innermost frame, by the call its printed source line makes."""
    if frame.call is None:
        return None
    got = primitive_in_line(frame.call)
    if got is None:
        return None
    site, label = got
    rule = _CALL_RULES.get(label)
    if rule is None:
        why = CALL_WHY.format(label=label)
        rule = _CALL_RULES[label] = SiteRule("traceback-call", site, leaf=True, why=why)
    return rule


CATALOGUE_WHY = (
    "the wait-site catalogue (diag/stacks/wait_catalogue.tsv, written by "
    "tools/stack_catalogue.py from the vLLM 0.2.7-0.32 and SGLang 0.3.6-0.5.23 sources): "
    "the frame's line is a call of that function into C with no Python frame of its own "
    "(tensor.item()/.tolist()/.cpu() -> cuda_sync, zmq socket.recv -> ipc_wait, "
    "store.get/wait -> dist_init, fcntl.flock -> jit_compile, safetensors get_tensor -> "
    "weights_io, lock.acquire -> gil_or_lock), and only native or generic frames are "
    "inside it"
)
CATALOGUE_OTHER_RELEASE_WHY = (
    "the wait-site catalogue, for a release it did not read: the frame's line lies inside "
    "the function in none of the releases read (a release between or after them), and "
    "every blocking call the function makes in those releases is of this one site"
)


# Code run inside the stuck process to print its stack (a pyrasite payload, gdb's `call
# PyRun_SimpleString("import traceback; traceback.print_stack()")`, a debugger's exec):
# compiled from a string, its frame is `File "<string>", line 1, in <module>` (or
# `<stdin>`) INSIDE the frames it interrupted; the thread waited in the frame outside it.
# (As the outermost frame it is a `python -c` program or multiprocessing's spawn: kept.)
_INJECTED_FILE = frozenset({"<string>", "<stdin>"})


def _injected(frame: StackFrame) -> bool:
    return not frame.native and frame.name == "<module>" and frame.filename in _INJECTED_FILE


def classify_frames(frames: Sequence[StackFrame]) -> tuple[str | None, SiteRule | None]:
    """The wait site of one stack (innermost frame first) and the rule that decided it.

    A frame no rule names (a generic ``wait``/``recv``/``forward``) does not decide: the
    frames that called it do. The innermost strong match wins; a leaf rule counts only
    while every frame inside it is native, a weak (generic) wait or a pass-through
    wrapper; else the outermost weak frame of the innermost wait chain. Where the strong
    frame has generic waits inside it, their innermost primitive may say more: a mutex
    inside a collective (:data:`MUTEX_IN_CALL_RULE`), the GPU driver inside a teardown
    (``device_inside``)."""
    if len(frames) > 1 and _injected(frames[0]):
        frames = frames[1:]
    chain_open = True  # every frame so far is native, a generic wait or a wrapper
    only_wrappers = True  # every frame so far is a pass-through wrapper
    weak: SiteRule | None = None
    inner: SiteRule | None = None  # the innermost weak frame's rule: the primitive waited in
    closer: StackFrame | None = None
    for at, frame in enumerate(frames):
        first, first_not_leaf = _first_matches(frame)
        hit = first if chain_open else first_not_leaf
        if hit is not None and hit.cut:
            if not only_wrappers:
                continue  # a wrapper (pass-through) with a known wait inside it
        elif frame.native or not is_pass_through(frame):
            only_wrappers = False
        if hit is None and chain_open and weak is None:
            hit = catalogue_rule(frame) or call_rule(frame)
        if hit is not None and hit.strength == "strong":
            if hit.site == _SYNC:
                outer = _collective_around(frames[at + 1 :])
                if outer is not None:
                    return outer.site, outer
            if inner is not None and chain_open:
                if hit.site == _NCCL and inner.id == "mutex-native":
                    return MUTEX_IN_CALL_RULE.site, MUTEX_IN_CALL_RULE
                if hit.device_inside and inner.site == _SYNC:
                    return inner.site, inner
            return hit.site, hit
        if hit is not None:
            if chain_open:
                weak = hit
                inner = inner or hit
        elif not frame.native and not is_pass_through(frame):
            if chain_open:
                closer = frame  # the frame that called the innermost wait chain
            chain_open = False
    if weak is not None:
        if weak.id == "queue-get" and closer is not None and OVERLAP_QUEUE_RULE.matches(closer):
            return OVERLAP_QUEUE_RULE.site, OVERLAP_QUEUE_RULE
        return weak.site, weak
    return None, None


def _collective_around(outer: Sequence[StackFrame]) -> SiteRule | None:
    """A CUDA sync that a collective's own code issued (a plugin polling cudaStreamQuery
    until its all-gather finished, WorkNCCL waiting on its stream) waits for that
    collective: the collective rule of the frame that called it (``outer``: the frames
    outside the sync, innermost first), looking out past native or generic frames only."""
    seen = 0
    for frame in outer:
        if is_pass_through(frame):
            continue
        first, _ = _first_matches(frame)
        if first is not None and first.site == _NCCL and frame.native:
            return first
        seen += 1
        if seen == 3 or not frame.native or first is not None:
            return None
    return None


MUTEX_IN_CALL_RULE = SiteRule(
    "mutex-in-collective",
    _LOCK,
    why="the innermost frames take a mutex (pthread_mutex_lock / __lll_lock_wait, a lock "
    "of this process owned by another of its threads) inside a collective's frames "
    "(ProcessGroupNCCL's broadcast taking the CUDA free mutex in its AutoNcclGroup guard, "
    "its watchdog's checkForNCCLErrorsInternal taking the communicator's mutex): the call "
    "waits for that thread, not for its peers (a collective waiting for peers sits in a "
    "condition wait, a spin or a device sync instead)",
)

# Thread-state rules: what py-spy's thread state adds where the frames alone say nothing.
NATIVE_CALL_RULE = SiteRule(
    "released-gil-native-call",
    _SYNC,
    why="py-spy shows the thread active but not holding the GIL, and its innermost frame "
    "is Python: it sits in a native call that released the GIL (py-spy without --native "
    "does not show it). In a serving worker's model forward, sampler or scheduler loop "
    "that is a CUDA sync (.item(), .tolist(), .cpu(), a launch behind a full queue) "
    "(shared/corpus/LABELS.md, Conventions). Measured in shared/lab (H200, py-spy 0.4.3): "
    "a rank in .item()/synchronize behind a spinning kernel and one in NCCL's bootstrap "
    "show 'active'; a TCPStore wait shows 'idle' (a blocking poll), so idle threads are "
    "not read this way. Unsymbolised native frames (no names) count as none",
)
C10D_REPORT_RULE = SiteRule(
    "c10d-failed-collective-report",
    _NCCL,
    why="torch c10d's report of a timed-out collective (`Stack trace of the failed "
    "collective:` / `#N func from file:line`, ProcessGroupNCCL.cpp, torch 2.4+) is the "
    "Python stack that issued that collective, whatever its visible frames",
)
# Calls that hand work to a native thread pool with the GIL released and wait for it: an
# idle thread there (py-spy: off the CPU) waits for the pool, not for a device or a peer.
# Hugging Face tokenizers' batch encode (PyTokenizer.encode_batch, bindings/python/src/
# tokenizer.rs, py.allow_threads over rayon's par_iter; the fast tokenizer's
# _batch_encode_plus in transformers' tokenization_utils_fast.py calls it): the pool's
# known deadlock is a fork after it was used (utils/parallelism.rs warns 'The current
# process just got forked, after parallelism has already been used').
IDLE_IN_POOL_RULE = SiteRule(
    "idle-in-native-pool",
    _LOCK,
    native=False,
    file=r"(^|/)(transformers/tokenization_utils_fast|tokenizers/implementations/"
    r"base_tokenizer)\.py$",
    name=r"(^|\.)(_batch_encode_plus|encode_batch|encode_batch_fast)$",
    why="py-spy shows the thread idle (off the CPU, the GIL released) in Hugging Face "
    "tokenizers' batch encode (transformers tokenization_utils_fast.py _batch_encode_plus, "
    "tokenizers encode_batch): the Rust encoder runs on rayon's thread pool and this "
    "thread waits for it; idle, the pool is not working (after a fork the pool is "
    "deadlocked, utils/parallelism.rs): a lock wait (LABELS.md stack.gil_or_lock)",
)
GIL_CONTENTION_RULE = SiteRule(
    "gil-contention",
    _LOCK,
    why="the thread that matters is idle at a Python frame that names no wait, while "
    "another thread of the process runs holding the GIL (py-spy `active+gil`): it is "
    "waiting to take the GIL back (GIL contention, LABELS.md stack.gil_or_lock)",
)
# SGLang's overlap scheduler (managers/tp_worker_overlap_thread.py, 0.4-0.5.x): the
# scheduler's thread reads each batch's result from output_queue, a queue.Queue that the
# worker's own forward thread (forward_thread_func_) fills; a queue.get right inside
# resolve_last_batch_result / resolve_batch_result waits on another thread of the same
# process, not on another process (LABELS.md: ipc_wait is a wait on another process)
OVERLAP_QUEUE_RULE = SiteRule(
    "overlap-result-queue",
    _LOCK,
    native=False,
    file=r"(^|/)tp_worker_overlap_thread\.py$",
    name=r"(^|\.)resolve_(last_)?batch_result$",
    why="SGLang's overlap scheduler waiting in queue.get inside resolve_last_batch_result "
    "/ resolve_batch_result (managers/tp_worker_overlap_thread.py, 0.4-0.5.x): the queue is "
    "filled by its own forward thread, a wait on another thread of the process (a "
    "threading condition), not on another process",
)
IDLE_PROCESS_RULE = SiteRule(
    "idle-helpers-only",
    _IDLE,
    why="a dump in which every thread shown is idle and is a helper (progress bar, "
    "watchdog, pipe reader, pool worker): no thread does work (LABELS.md, Conventions). "
    "py-spy says idle; in a dump without states (faulthandler, pystack, pytest-timeout) "
    "a helper parked in a generic wait (Event/Condition wait, queue get, select, sleep) "
    "counts as idle",
)

# Frames of a GPU serving worker: model forward, sampler, the scheduler/worker loops,
# memory profiling and KV-cache set-up, CUDA-graph capture (vLLM v1/worker/*.py,
# v1/executor/*.py, worker/model_runner.py of V0; SGLang managers/scheduler.py,
# tp_worker*.py, model_executor/*.py, speculative/eagle_worker*.py, layers/sampler.py).
_SERVING_NAME = re.compile(
    r"(^|\.)(event_loop_\w+|run_batch|forward_batch_generation|forward_batch_speculative\w*|"
    r"forward_extend|forward_decode|forward_idle|_forward_raw|forward_thread_func\w*|"
    r"process_batch_result\w*|resolve_last_batch_result|run_scheduler_process|"
    r"init_memory_pool|execute_model|_execute_model\w*|sample_tokens|execute_dummy_batch|"
    r"_dummy_run|_dummy_sampler_run|profile_run|determine_available_memory|"
    r"determine_num_available_blocks|compile_or_warm_up_model|capture_model|"
    r"_initialize_kv_caches|initialize_kv_cache|worker_busy_loop|start_worker_execution_loop|"
    r"_preprocess|_prepare_inputs|_bookkeeping_sync|_sample|verify|worker_main|"
    r"propose|load_model|init_device)$"
)
_SERVING_FILE = re.compile(
    r"(^|/)(model_runner|gpu_model_runner|model_runner_base|tp_worker|tp_worker_overlap_thread|"
    r"gpu_worker|cuda_graph_runner|eagle_worker\w*|logits_processor|sampling_batch_info|"
    r"forward_batch_info|eagle_info)\.py$|"
    r"(^|/)(model_executor/models|srt/models|v1/sample|v1/worker|srt/layers|model_executor/layers|"
    r"v1/spec_decode|spec_decode|v1/attention|attention/backends|srt/speculative|speculative|"
    r"srt/mem_cache|srt/model_executor|srt/managers|penaltylib)/"
)


def is_serving_worker_stack(frames: Sequence[StackFrame]) -> bool:
    """The stack runs in a GPU serving worker: a frame of model forward, the sampler, the
    scheduler or worker loop, KV-cache set-up or graph capture (``_SERVING_NAME`` /
    ``_SERVING_FILE``)."""
    for f in frames:
        if f.native:
            continue
        if _SERVING_NAME.search(f.name) or _SERVING_FILE.search(normalise_path(f.filename)):
            return True
    return False


# Python packages whose frames run GPU work through torch: torch itself (autograd, the
# nn modules, the no-grad decorator that wraps a model call), DeepSpeed's and Megatron's
# training engines; and through Apple's MLX, whose arrays are lazy (an mx.eval, .item(),
# .tolist() or a save of arrays waits for the Metal stream): mlx itself, ml-explore's
# mlx-lm and mlx-vlm (generate.py, server.py) and the servers built on them (jundot/omlx:
# omlx/scheduler.py, engine_core.py)
_GPU_COMPUTE_PATH = re.compile(r"(^|/)(torch|deepspeed|megatron|mlx|mlx_lm|mlx_vlm|omlx)/")


def is_gpu_compute_stack(frames: Sequence[StackFrame]) -> bool:
    """The stack calls into GPU work through torch (:data:`_GPU_COMPUTE_PATH`) outside a
    serving framework (a training step, a diffusion pipeline's decode): py-spy showing
    such a thread active without the GIL puts it in a native call of torch's, which on a
    GPU host is a CUDA sync as in a serving worker (LABELS.md: an active thread in
    framework Python with no native frames)."""
    return any(
        not f.native and _GPU_COMPUTE_PATH.search(short_path(f.filename)) for f in frames
    )


# Dump kinds that show a thread where it sits without saying whether it runs: a
# faulthandler dump (a timeout's or a signal's) and pystack print every thread's Python
# frames as they are; a thread of a hung worker whose innermost frame is framework Python
# is in a native call there; so does a frame list a reporter wrote down (loose.py). (A
# Ctrl-C traceback is not: the interrupt lands between bytecodes, after any native call
# returned.)
_STATELESS_DUMPS = frozenset(
    {"faulthandler", "pystack", "trace", "pytest_timeout", "gdb", "lldb", "sample", "dumpstacks",
     "list"}
)


def in_native_call(thread: StackThread, mode: str | None = None) -> bool:
    """The thread sits in a native call: py-spy shows it active without the GIL, or the
    dump kind shows frames without a state (:data:`_STATELESS_DUMPS`, and py-spy's frames
    whose thread header, the only place of its state, the paste cut off)."""
    if thread.idle is False and thread.owns_gil is False:
        return True
    return thread.idle is None and thread.owns_gil is None and (
        mode in _STATELESS_DUMPS or mode == "text"
    )


# Process titles of GPU serving workers (vLLM's Worker_TPn / VllmWorker / Ray worker
# actors, SGLang's schedulers): every thread of theirs runs in a serving worker.
_SERVING_TITLE = re.compile(
    r"^(VLLM::Worker|VllmWorker|Worker_TP|ray::RayWorkerWrapper|sglang::scheduler)"
)


def classify_thread_rule(
    thread: StackThread, mode: str | None = None, *, serving: bool = False
) -> tuple[str | None, SiteRule | None]:
    """The wait site of one thread and the rule that decided it: the frames first
    (:func:`classify_frames`), then its state (:data:`NATIVE_CALL_RULE`); ``mode`` is the
    dump kind (``StackProcess.mode``); ``serving``: the process title names a GPU serving
    worker, whatever its frames."""
    site, rule = classify_frames(thread.frames)
    if mode == "c10d" and thread.frames and site not in (_NCCL, _INIT):
        # torch's report is the stack that issued the collective: what its visible frames
        # might otherwise suggest (a sync inside a model's forward) is not where it waits
        return C10D_REPORT_RULE.site, C10D_REPORT_RULE
    if site is not None:
        return site, rule
    if thread.idle is True and thread.frames and not thread.frames[0].native and (
        IDLE_IN_POOL_RULE.matches(thread.frames[0])
    ):
        return IDLE_IN_POOL_RULE.site, IDLE_IN_POOL_RULE
    if (
        in_native_call(thread, mode)
        and thread.frames
        and not any(f.native and not is_address(f.name) for f in thread.frames)
        and (
            serving
            or is_serving_worker_stack(thread.frames)
            or (thread.idle is False and is_gpu_compute_stack(thread.frames))
        )
    ):
        return NATIVE_CALL_RULE.site, NATIVE_CALL_RULE
    return None, None


def classify_thread(thread: StackThread, mode: str | None = None) -> str | None:
    return classify_thread_rule(thread, mode)[0]


def is_main_thread(thread: StackThread, pid: int | None) -> bool:
    if thread.name == "MainThread":
        return True
    if pid is not None and thread.thread_id == pid:
        return True
    if thread.name is None and thread.frames:
        python = [f for f in thread.frames if not f.native]
        return bool(python) and python[-1].name == "<module>"
    return False


def is_helper_thread(thread: StackThread) -> bool:
    """A background thread of a library or framework (progress bars, watchdogs, pipe
    readers, idle pools): never the thread that explains a hang."""
    if thread.name == "MainThread":
        return False
    if thread.name and _HELPER_NAME.match(thread.name) and not (
        # a pool's worker that py-spy shows running is doing the pool's job (a diffusion
        # job's decode, a loader's read), not idling in the pool
        thread.idle is False and thread.name.startswith("ThreadPoolExecutor-")
    ):
        return True
    for frame in thread.frames:
        if _HELPER_FRAME.search(f"{normalise_path(frame.filename)}:{frame.name}"):
            return True
    return _native_library_thread(thread)


def _native_library_thread(thread: StackThread) -> bool:
    """A native thread of a driver or runtime library (:data:`_HELPER_LIB`): started by
    pthread (its outermost frame start_thread or clone, or libc's unsymbolised), every
    frame outside libc in such a library, at least one of them."""
    frames = thread.frames
    if not frames:
        return False
    start = frames[-1]
    if start.name not in _NATIVE_START and not (
        # glibc without symbols (gdb's `?? () from libc.so.6`): its start_thread / clone3
        start.native and is_address(start.name) and _LIBC.search(start.filename or "")
    ):
        return False
    own = [f for f in frames if not _LIBC.search(f.filename or "")]
    return bool(own) and all(f.native and _HELPER_LIB.search(f.filename or "") for f in own)


def _all_idle_helpers(p: StackProcess) -> bool:
    """Every thread shown is an idle helper (or an idle thread without a frame): py-spy's
    state must say idle for each. A dump whose header was cut counts as well: the
    convention reads the visible threads (no main thread doing work in sight)."""
    if not p.threads:
        return False
    # a faulthandler process without a frame is one whose every thread said `<no Python
    # frame>` (textdump keeps no other): native threads only, nothing doing Python work
    return (any(t.frames for t in p.threads) or p.mode == "faulthandler") and all(
        _parked_worker(t, p)
        or ((t.idle is True or _parked(t, p.mode)) and (is_helper_thread(t) or not t.frames))
        # a listener helper (a pipe or socket reader's loop) in a dump without thread
        # states: waiting for its next message is its idle state
        or (p.mode in _STATELESS_DUMPS and t.idle is None and is_helper_thread(t)
            and classify_frames(t.frames)[0] == _IPC)
        # faulthandler's "<no Python frame>": a native thread that runs no Python, and a
        # thread the paste cut to threading.py's start frames: nothing of it in sight
        or (p.mode in _STATELESS_DUMPS and t.idle is None and _nothing_shown(t))
        for t in p.threads
    )


def _nothing_shown(t: StackThread) -> bool:
    """No frame, or only threading.py's frames that start every thread (cut by the paste)."""
    return all(
        _THREAD_WAIT_PY.search(normalise_path(f.filename)) and f.name in _THREAD_START
        for f in t.frames
    )


# generic in-process waits: a parked thread, not one waiting on another process
_PARKING_RULES = frozenset(
    {"threading-py", "queue-get", "selectors", "sleep", "future-result", "mp-synchronize"}
)


def _parked_without_main(p: StackProcess) -> bool:
    """A dump without thread states whose threads are all parked in a generic in-process
    wait (an Event/Condition wait, a queue get, a select, a sleep) and none of which is the
    main thread (pytest-timeout's signal method leaves it out, a cut paste loses it): no
    thread in sight does work (LABELS.md, Conventions: stack.idle_loop)."""
    if p.mode not in _STATELESS_DUMPS or not p.threads:
        return False
    seen = False
    for t in p.threads:
        if not t.frames:
            continue
        if t.idle is not None or t.elided or is_main_thread(t, p.pid):
            return False  # (an elided thread may be the main thread: its outer frames are out)
        site, rule = classify_frames(t.frames)
        if rule is None or not (site == _IDLE or rule.id in _PARKING_RULES or _parked_worker(t, p)):
            return False
        seen = True
    return seen


_THREAD_WAIT_PY = re.compile(r"(^|/)threading\.py$")
_QUEUE_GET_NAME = re.compile(r"(^|\.)_?(get|get_nowait|pop|take|get_batch|next_item)$")


def _parked_worker(thread: StackThread, p: StackProcess) -> bool:
    """In a dump without thread states, a thread that is not the main one, parked in a
    Condition/Event wait right inside a queue's ``get`` (queue.Queue.get, SGLang's
    FastQueue.get in disaggregation/common/utils.py): a worker thread waiting for its
    next item, i.e. an idle helper."""
    if p.mode not in _STATELESS_DUMPS or thread.idle is not None or not thread.frames:
        return False
    if is_main_thread(thread, p.pid):
        return False
    if classify_frames(thread.frames)[1] is OVERLAP_QUEUE_RULE:
        return False  # the scheduler waiting for its forward thread's result, no pool worker
    python = [f for f in thread.frames if not f.native]
    if len(python) < 2 or not _THREAD_WAIT_PY.search(normalise_path(python[0].filename)):
        return False
    rest = [f for f in python[1:] if not _THREAD_WAIT_PY.search(normalise_path(f.filename))]
    return bool(rest) and bool(_QUEUE_GET_NAME.search(rest[0].name))


def _parked(thread: StackThread, mode: str | None) -> bool:
    """A thread of a dump without thread states (faulthandler, pystack, pytest-timeout)
    whose innermost frames are a generic wait (an Event/Condition wait, a queue get, a
    select, a sleep): it is parked, as py-spy would show it idle."""
    if thread.idle is not None or mode not in _STATELESS_DUMPS or not thread.frames:
        return False
    site, rule = classify_frames(thread.frames)
    if rule is None:
        # a helper's own loop innermost (vLLM's usage reporter in _report_continous_usage,
        # usage/usage_lib.py): the C call it waits in (a sleep) is below what the dump shows
        inner = thread.frames[0]
        return bool(_HELPER_FRAME.search(f"{normalise_path(inner.filename)}:{inner.name}"))
    return rule.strength == "weak" or site == _IDLE


def pick_thread(p: StackProcess) -> tuple[StackThread | None, str | None]:
    """The thread that matters and its wait site (see the module docstring); a dump of
    idle helper threads only is an idle loop with no thread that matters."""
    if not p.threads:
        return None, None
    serving = bool(p.title and _SERVING_TITLE.match(p.title))
    sites = [classify_thread_rule(t, p.mode, serving=serving)[0] for t in p.threads]
    candidates = [
        i
        for i, t in enumerate(p.threads)
        if t.frames and not is_helper_thread(t) and not _parked_worker(t, p)
        and not (p.mode in _STATELESS_DUMPS and _nothing_shown(t))
    ]
    if not candidates or _parked_without_main(p):
        return None, (
            IDLE_PROCESS_RULE.site if (_all_idle_helpers(p) or _parked_without_main(p)) else None
        )
    mains = [i for i in candidates if is_main_thread(p.threads[i], p.pid)]

    def key(i: int) -> tuple[int, int, int]:
        return (site_priority(sites[i]), 1 if i in mains else 0, -i)

    current = [i for i in candidates if p.threads[i].current and sites[i] is not None]
    if current:
        # a fatal signal's dump: the thread it was delivered to (faulthandler's `Current
        # thread`; SIGSEGV/SIGBUS/SIGFPE/SIGABRT go to the thread that faulted) is where
        # the process stopped, whatever its other threads wait for
        return p.threads[current[0]], sites[current[0]]
    if mains:
        main = mains[0]
        best = max(candidates, key=key)
        # The main thread stands unless another thread is held by something outside the
        # process (a hard site) while the main thread is not, or the main thread's frames
        # say nothing (busy in Python, or cut) while another thread waits somewhere.
        hard = site_priority(sites[best]) == 3 and site_priority(sites[main]) < 3
        silent = sites[main] is None and sites[best] is not None
        chosen = best if hard or silent else main
        if sites[main] == _SYNC:
            # the main thread waits on its GPU while another thread is in a collective or
            # a communicator's set-up: the device's queue waits on that thread's call
            # (SGLang's overlap scheduler syncing on copy_done while its forward thread
            # sits in NCCL), so the collective is where the process is held
            peers = [i for i in candidates if i != main and sites[i] in (_NCCL, _INIT)]
            if peers:
                chosen = peers[0]
    else:
        chosen = max(candidates, key=key)
    thread = p.threads[chosen]
    if sites[chosen] is None and _waits_for_the_gil(thread, p.threads):
        return thread, GIL_CONTENTION_RULE.site
    return thread, sites[chosen]


def _waits_for_the_gil(thread: StackThread, threads: Sequence[StackThread]) -> bool:
    """py-spy shows the thread idle at a Python frame (no named native frame) while
    another thread of the process runs holding the GIL (:data:`GIL_CONTENTION_RULE`)."""
    if thread.idle is not True or thread.owns_gil is not False:
        return False
    if any(f.native and not is_address(f.name) for f in thread.frames):
        return False
    return any(o is not thread and o.owns_gil is True and o.idle is False for o in threads)


def classify_process(p: StackProcess) -> tuple[str | None, int | None]:
    """(wait site id, thread id it was read from); (None, None) when no thread says, and
    (stack.idle_loop, None) for a dump of idle helper threads only."""
    thread, site = pick_thread(p)
    if site is None:
        return None, None
    return site, thread.thread_id if thread is not None else None


# (threads, mode, title, pid) -> (wait site, thread id): what classified() read from a
# process; the same stacks recur (every rank prints the same traceback, a watchdog dumps
# the same threads again)
_SITE_CACHE: dict[
    tuple[tuple[StackThread, ...], str | None, str | None, int | None],
    tuple[str | None, int | None],
] = {}
_SITE_CACHE_MAX = 10_000


def classified(p: StackProcess) -> StackProcess:
    """The process with ``wait_site`` and ``wait_thread`` set by :func:`classify_process`
    (a traceback no frame names a site of: by the start-up step its frames show).
    Memoised: they depend on the threads, the dump kind, the title and the pid alone."""
    key = (p.threads, p.mode, p.title, p.pid)
    got = _SITE_CACHE.get(key)
    if got is None:
        site, tid = classify_process(p)
        if site is None and p.mode == "traceback" and p.threads:
            site = step_site(p.threads[0].frames)
        if len(_SITE_CACHE) >= _SITE_CACHE_MAX:
            _SITE_CACHE.clear()
        got = _SITE_CACHE[key] = (site, tid)
    return replace(p, wait_site=got[0], wait_thread=got[1])


# the start-up steps (diag.frames, LABELS.md's frame map) whose frames say where a thread
# was: the site of each
_STEP_SITES = {
    "dist_init": _INIT,
    "weights_load": _WEIGHTS,
    "compile": _JIT,
    "cuda_graph": _GRAPH,
}


def step_site(frames: Sequence[StackFrame]) -> str | None:
    """Where a traceback's thread was when no frame names a wait: the start-up step of its
    innermost frame that shows one (``init_process_group`` -> dist_init, the model loader
    -> weights I/O, Inductor -> JIT compile, graph capture). A model's constructor
    (``__init__`` in its own module) builds layers: no step of I/O, so not read."""
    from diag.frames import READY_RPC, frame_phase

    for f in frames:
        name = f.name.rsplit(".", 1)[-1]
        if f.native or name == "__init__" or name in READY_RPC:
            continue  # (vLLM V1's executor RPC proves weights were loaded, not I/O)
        site = _STEP_SITES.get(frame_phase(f.filename, f.name) or "")
        if site is not None:
            return site
    return None


def apply_gpu_facts(
    processes: Iterable[StackProcess],
    util_by_pid: Mapping[int, float],
    *,
    busy_percent: float = 90.0,
    idle_percent: float = 10.0,
) -> list[StackProcess]:
    """Use GPU utilisation where the stack alone cannot tell (shared/lab/gpu-h200x2-*):
    a rank blocked in a CUDA sync whose GPU spins at ~100% while a peer rank's GPU is
    idle is waiting on a collective kernel that the idle peer never launched, so its wait
    site becomes stack.nccl_collective. Other processes are returned unchanged."""
    procs = list(processes)
    utils = {p.pid: util_by_pid[p.pid] for p in procs if p.pid is not None and p.pid in util_by_pid}
    out: list[StackProcess] = []
    for p in procs:
        mine = utils.get(p.pid) if p.pid is not None else None
        peers_idle = any(u <= idle_percent for pid, u in utils.items() if pid != p.pid)
        if p.wait_site == _SYNC and mine is not None and mine >= busy_percent and peers_idle:
            out.append(replace(p, wait_site=_NCCL))
        else:
            out.append(p)
    return out


# Kernel wait channels (/proc/<pid>/task/<tid>/wchan) -> the coarse wait site they
# suggest: the tier that needs no ptrace. A wchan says how a thread sleeps, not why, so
# this is only a hint where no stack could be read (a futex is any lock or condition).
WCHAN_RULES: tuple[tuple[str, str], ...] = (
    (r"^(flock_lock_inode_wait|locks_lock_inode_wait|fcntl_setlk|posix_lock)", _JIT),
    (
        r"^(folio_wait_bit|wait_on_page_bit|io_schedule|blk_mq_get_tag|"
        r"wait_on_buffer|jbd2_|nfs_|fuse_)",
        _WEIGHTS,
    ),
    (r"^(nv_|nvidia_|uvm_|os_delay|_nv\d)", _SYNC),
    (
        r"^(do_epoll_wait|ep_poll|poll_schedule_timeout|do_select|do_sys_poll|"
        r"anon_pipe_read|pipe_read|pipe_wait|unix_stream_read_generic|unix_stream_data_wait|"
        r"sk_wait_data|inet_csk_accept|wait_woken|do_wait|sock_recvmsg)",
        _IPC,
    ),
    (r"^(hrtimer_nanosleep|do_nanosleep|clock_nanosleep)", _IDLE),
    (r"^(futex_wait\w*|futex_do_wait|do_futex|futex_wait_queue\w*|rwsem_down|mutex_lock)", _LOCK),
)


def classify_wchan(wchan: str | None) -> str | None:
    """The coarse wait site a kernel wait channel suggests (see :data:`WCHAN_RULES`);
    None for a running thread (``0``/``-``/empty) or a wchan no rule knows."""
    if not wchan or wchan in ("0", "-"):
        return None
    for pattern, site in WCHAN_RULES:
        if _compiled(pattern).search(wchan):
            return site
    return None


def _table_patterns() -> list[str]:
    """Every pattern of the rules and the wchan rules."""
    rules = (*RULES, NATIVE_CALL_RULE, C10D_REPORT_RULE, GIL_CONTENTION_RULE,
             IDLE_PROCESS_RULE, MUTEX_IN_CALL_RULE, IDLE_IN_POOL_RULE)
    found = [p for rule in rules for p in (rule.name, rule.file) if p is not None]
    return found + [pattern for pattern, _ in WCHAN_RULES]


def _check_table(*, compile_patterns: bool = False) -> None:
    """Every rule names a known site; with ``compile_patterns`` (the tests), every
    pattern compiles (at import they are compiled on first use: speed, about 140)."""
    for rule in (
        *RULES,
        NATIVE_CALL_RULE,
        C10D_REPORT_RULE,
        GIL_CONTENTION_RULE,
        IDLE_PROCESS_RULE,
        MUTEX_IN_CALL_RULE,
        IDLE_IN_POOL_RULE,
    ):
        if rule.site not in STACK_SITES:
            raise ValueError(f"rule {rule.id}: unknown site {rule.site}")
        if rule.unsymbolised and (rule.name is not None or rule.file is None):
            raise ValueError(f"rule {rule.id}: an unsymbolised frame has only its library")
        for pattern in (rule.name, rule.file):
            if pattern is not None and compile_patterns:
                _compiled(pattern)
    for pattern, site in WCHAN_RULES:
        if site not in STACK_SITES:
            raise ValueError(f"wchan rule {pattern}: unknown site {site}")
        if compile_patterns:
            _compiled(pattern)


_check_table()
