"""Text stack dumps: the shapes they arrive in, damaged and interleaved."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from diag.model import RankId, Record
from diag.stacks.frames import make_frame, split_pyspy_frame
from diag.stacks.textdump import extract_stack_processes, parse_stack_text, records_from_text

FAULTHANDLER_RANK = """\
Thread 0x00007f71b9fff640 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/threading.py", line 607 in wait
  File "/usr/local/lib/python3.10/dist-packages/tqdm/_monitor.py", line 60 in run

Current thread 0x00007f7285a4a480 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line {line} in {fn}
  File "/workspace/vllm/model_executor/layers/linear.py", line 548 in forward
  File "/workspace/vllm/worker/worker.py", line 100 in execute_model
  File "<string>", line 1 in <module>
"""


def test_interleaved_faulthandler_dumps_come_apart_by_rank_prefix() -> None:
    a = FAULTHANDLER_RANK.format(line=2050, fn="all_reduce").splitlines()
    b = FAULTHANDLER_RANK.format(line=1900, fn="barrier").splitlines()
    lines = []
    for la, lb in zip(a, b, strict=True):  # line by line, as two processes writing one stderr
        lines += [f"[rank0]: {la}", f"[rank1]: {lb}"]
    procs = parse_stack_text("\n".join(lines))
    assert [(p.rank, p.mode) for p in procs] == [
        (RankId(tp=0), "faulthandler"),
        (RankId(tp=1), "faulthandler"),
    ]
    for p, fn in zip(procs, ("all_reduce", "barrier"), strict=True):
        assert len(p.threads) == 2
        current = p.threads[1]
        assert current.thread_id == 0x00007F7285A4A480
        assert [f.name for f in current.frames][:2] == [fn, "forward"]
        assert p.wait_site == "stack.nccl_collective" and p.wait_thread == current.thread_id


def test_second_faulthandler_dump_of_the_same_thread_is_a_new_process() -> None:
    one = FAULTHANDLER_RANK.format(line=2050, fn="all_reduce")
    procs = parse_stack_text(one + "\nsome log line\n" + one)
    assert len(procs) == 2


VLLM_TRACEBACK = """\
(VllmWorker rank=1 pid=4242) Traceback (most recent call last):
(VllmWorker rank=1 pid=4242)   File "C:\\env\\Lib\\site-packages\\vllm\\worker.py", line 88, in run
(VllmWorker rank=1 pid=4242)     self.loop()
(VllmWorker rank=1 pid=4242)     ~~~~~~~~~^^
(VllmWorker rank=0 pid=4241) INFO 03-10 16:19:26 [worker.py:12] unrelated line of rank 0
(VllmWorker rank=1 pid=4242)   File "C:\\env\\Lib\\site-packages\\zmq\\socket.py", line 812, in recv
(VllmWorker rank=1 pid=4242)     return super().recv(flags)
(VllmWorker rank=1 pid=4242)            ^^^^^^^^^^^^^^^^^^^
(VllmWorker rank=1 pid=4242) KeyboardInterrupt
"""


def test_ctrl_c_traceback_with_vllm_prefix_py313_carets_and_windows_paths() -> None:
    (proc,) = parse_stack_text(VLLM_TRACEBACK)
    assert proc.mode == "traceback"
    assert proc.rank == RankId(tp=1) and proc.title == "VllmWorker rank=1"
    names = [f.name for f in proc.threads[0].frames]
    assert names == ["recv", "run"]  # innermost first
    assert proc.threads[0].frames[0].filename.endswith("site-packages/zmq/socket.py")
    assert proc.wait_site == "stack.ipc_wait"


def test_error_tracebacks_are_not_stack_dumps() -> None:
    text = VLLM_TRACEBACK.replace("KeyboardInterrupt", "RuntimeError: NCCL error")
    assert parse_stack_text(text) == []
    cut = "\n".join(VLLM_TRACEBACK.splitlines()[:-1])  # never ends
    assert parse_stack_text(cut) == []


SGLANG_LOG = """\
[2026-02-22 22:35:21 DP0 TP3 EP3] Load weight end. type=DeepseekV3ForCausalLM
[2026-02-22 22:40:21 DP0 TP3 EP3] Scheduler watchdog timeout (self.watchdog_timeout=300)
[2026-02-22 22:40:21 DP0 TP3 EP3] Pyspy dump for PID 5151 (py-spy dump --native --pid 5151):
Process 5151: sglang::scheduler
Python v3.12.3 (/usr/bin/python3.12)

Thread 5151 (idle): "MainThread"
    0x7f1398316d71 (libc.so.6)
    pthread_cond_wait (libc.so.6)
    c10d::TCPStore::doWait (libtorch_cpu.so)
    {interleaved}
    init_process_group (torch/distributed/distributed_c10d.py:1700)
    init_distributed_environment (sglang/srt/distributed/parallel_state.py:1200)
Thread 5200 (idle): "tqdm_monitor"
    wait (threading.py:359)
    run (tqdm/_monitor.py:60)

[2026-02-22 22:40:22 DP0 TP3 EP3] Received sigquit from a child process.
"""


def test_sglang_watchdog_dump_rank_from_the_log_prefix() -> None:
    text = SGLANG_LOG.format(interleaved="c10d::PrefixStore::wait (libtorch_cpu.so)")
    (proc,) = parse_stack_text(text, source="server.log")
    assert (proc.pid, proc.title) == (5151, "sglang::scheduler")
    assert proc.rank == RankId(dp=0, tp=3, ep=3)  # the title names none; the prefix does
    assert proc.wait_site == "stack.dist_init" and proc.wait_thread == 5151
    assert (proc.source, proc.line) == ("server.log", 4)
    assert [t.name for t in proc.threads] == ["MainThread", "tqdm_monitor"]


def test_a_foreign_line_inside_a_dump_does_not_split_it() -> None:
    text = SGLANG_LOG.format(interleaved="[2026-02-22 22:40:21 TP0] another process logs here")
    (proc,) = parse_stack_text(text)
    names = [f.name for f in proc.threads[0].frames]
    assert names[-1] == "init_distributed_environment" and len(proc.threads) == 2


def test_sglang_dump_records_as_a_log_parser_gives_them() -> None:
    """Header record (prefix stripped into message, rank parsed) + continuation lines."""
    lines = SGLANG_LOG.format(interleaved="c10d::PrefixStore::wait (libtorch_cpu.so)").splitlines()
    head = Record(
        source="s.log",
        line=3,
        message="Pyspy dump for PID 5151 (py-spy dump --native --pid 5151):",
        raw="",
        rank=RankId(dp=0, tp=3, ep=3),
        continuation=tuple(lines[3:-2]),
    )
    (proc,) = extract_stack_processes([head])
    assert proc.rank == RankId(dp=0, tp=3, ep=3) and proc.wait_site == "stack.dist_init"
    assert proc.line == 4


LOCALS = """\
Process 9083: /usr/bin/python3 -u hang.py
Python v3.11.7 (/usr/local/bin/python3.11)

Thread 9083 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
        Arguments:
            tensor: <Tensor at 0x7fbb3249dbd0>
        Locals:
            relevant_args: (<Tensor at 0x7fbb3249dbd0>)
            opts: f (x)
    work (hang.py:8)
        Arguments:
            rank: 0
    <module> (hang.py:23)
"""


def test_locals_are_not_frames() -> None:
    (proc,) = parse_stack_text(LOCALS)
    assert [f.name for f in proc.threads[0].frames] == ["all_reduce", "work", "<module>"]


def test_same_pid_dumped_twice_is_one_process_with_two_samples() -> None:
    moved = LOCALS.replace("hang.py:8", "hang.py:9")
    (proc,) = parse_stack_text(LOCALS + "\n# wall: 0.1 s\n" + moved)
    assert proc.samples == 2 and proc.moving is False  # the leaf (all_reduce:3252) held
    leaf_moved = LOCALS.replace("distributed_c10d.py:3252", "distributed_c10d.py:3260")
    (proc,) = parse_stack_text(LOCALS + "\n" + leaf_moved)
    assert proc.moving is True


def test_native_frame_names_and_places_with_parentheses() -> None:
    long_name = (
        "pybind11::cpp_function::initialize<bool, c10d::Work, std::chrono::duration<long, "
        "std::ratio<(long)1, (long)1000> >, pybind11::name>::{lambda(c10d::Work*)#1}::_FUN"
    )
    assert split_pyspy_frame(f"    {long_name} (libtorch_python.so)") == (
        long_name,
        "libtorch_python.so",
    )
    where = "torch/_functorch/_aot_autograd/subclass_codegen.py:codegen(runtime_wrapper):8"
    assert split_pyspy_frame(f"    _runtime_wrapper ({where})") == ("_runtime_wrapper", where)
    frame = make_frame("_runtime_wrapper", where)
    assert (frame.line, frame.native) == (8, False)
    assert make_frame("shm_allreduce", "shm.cpp:838").native is True
    assert make_frame("<module>", "torchrun:8").native is False
    assert make_frame("0x7f259f401d71", "libc.so.6").native is True
    assert split_pyspy_frame("    buf = self._recv_bytes(maxlength)") is None


def test_pystack_dump() -> None:
    text = """\
Traceback for thread 602 (python3) [] (most recent call last):
    (Python) File "<string>", line 1, in <module>
    (Python) File "/lab/frras.py", line 67, in worker
        capture_cuda_graphs_allreduce(x)
    (Python) File "/opt/venv/site-packages/torch/cuda/__init__.py", line 1162, in synchronize
        return torch._C._cuda_synchronize()
    (C) File "???", line 0, in cudaDeviceSynchronize (/opt/venv/nvidia/cu13/lib/libcudart.so.13)
    (C) File "/usr/lib/libcuda.so.1", line 0, in ??? (/usr/lib/libcuda.so.1)
"""
    (proc,) = parse_stack_text(text)
    frames = proc.threads[0].frames
    assert [f.name for f in frames] == [
        "cudaDeviceSynchronize",
        "synchronize",
        "worker",
        "<module>",
    ]
    assert frames[0].native and not frames[1].native
    assert proc.wait_site == "stack.cuda_sync" and proc.wait_thread == 602


def test_a_backtrace_of_symbols_only() -> None:
    # eu-stack's or gdb's frames pasted without their addresses and places (nccl#2353's
    # report has this shape), innermost first from #0
    text = """\
#0  __sched_yield
#1  ncclLocalOpAppend(ncclComm*, ncclProxyConnector*, ncclProxyOp*)
#2  SaveProxy(ncclComm*, ncclChannel*, int, int, ncclProxyOp*, int, bool*)
#3  ncclGroupEnd
"""
    (proc,) = parse_stack_text(text)
    names = [f.name for f in proc.threads[0].frames]
    assert names[1:3] == ["ncclLocalOpAppend", "SaveProxy"] and names[-1] == "ncclGroupEnd"
    assert proc.wait_site == "stack.nccl_collective"
    # a markdown heading or an issue reference is not one
    assert parse_stack_text("#0 is the first issue\n#1 the next\n") == []


def test_nccls_stream_helper_leaves_the_wait_to_its_caller() -> None:
    # NCCL src/misc/strongstream.cc: ncclStrongStreamSynchronize waits on a CUDA stream for
    # its caller, which is no collective: under ncclCommAbort's teardown or a communicator's
    # set-up (devCommSetup) the thread waits for the device
    def dump(callers: str) -> str:
        return (
            "Thread 58 (Thread 0x15535d20d700 (LWP 1823817)):\n"
            "#0  0x000015551cd02434 in ?? () from /lib64/libcuda.so.1\n"
            "#1  0x000015551e63c2e8 in cudaStreamSynchronize () from /x/libcudart.so.11.0\n"
            "#2  0x00001554fb47f4d2 in ncclStrongStreamSynchronize (ss=0x5555bf9ef060) at "
            "misc/strongstream.cc:270\n" + callers
        )

    teardown = (
        "#3  0x00001554fb45aa8c in commDestroySync (job_=0x15535d20b9d0) at init.cc:1313\n"
        "#4  0x00001554fb45b9a1 in commReclaim (comm=0x5555bf9ec710) at init.cc:1451\n"
        "#5  0x00001554fb45beef in ncclCommAbort (comm=0x5555bf9ec710) at init.cc:1508\n"
    )
    setup = (
        "#3  0x00001554fb45aa8c in devCommSetup (comm=0x5555bf9ec710) at init.cc:480\n"
        "#4  0x00001554fb45b9a1 in initTransportsRank (comm=0x5555bf9ec710) at init.cc:1100\n"
    )
    assert [p.wait_site for p in parse_stack_text(dump(teardown))] == ["stack.cuda_sync"]
    assert [p.wait_site for p in parse_stack_text(dump(setup))] == ["stack.cuda_sync"]


def test_nothing_in_a_plain_log() -> None:
    log = "\n".join(
        [
            "INFO 03-10 16:19:26 [llm_engine.py:123] Initializing (something (nested))",
            "[2026-02-22 22:35:21 TP4] Load weight begin. avail mem=70.1 GB",
            "Loading safetensors checkpoint shards:  38% Completed | 62/163 [00:17<00:30]",
        ]
    )
    assert parse_stack_text(log) == []
    assert parse_stack_text("") == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                *LOCALS.splitlines(),
                *SGLANG_LOG.splitlines(),
                *VLLM_TRACEBACK.splitlines(),
                *FAULTHANDLER_RANK.splitlines(),
                "[",
                "]",
                "  {",
                "random text (x:1)",
                "",
            ]
        ),
        max_size=40,
    )
)
def test_shuffled_dump_lines_never_raise(lines: list[str]) -> None:
    for proc in parse_stack_text("\n".join(lines)):
        assert proc.threads and any(t.frames for t in proc.threads)


def test_a_multi_line_process_title_does_not_end_the_dump() -> None:
    """`python -c` with a program of several lines: py-spy prints it all as the title."""
    code = "\n".join(f"x{i} = {i}" for i in range(8))
    text = (
        f"Process 7450: /usr/bin/python -c {code}\n"
        "Python v3.11.7 (/usr/bin/python3.11)\n\n"
        'Thread 7450 (idle): "MainThread"\n'
        "    Condition.wait (threading.py:327)\n"
        "    Queue.get (queue.py:171)\n"
        "    <module> (<string>:10)\n"
    )
    (proc,) = parse_stack_text(text)
    assert proc.pid == 7450 and proc.title == "/usr/bin/python -c x0 = 0"
    assert proc.wait_site == "stack.ipc_wait"


def test_a_watchdog_header_whose_dump_never_came_expires() -> None:
    text = "\n".join(
        [
            "[2026-07-07 07:21:06 TP1] Pyspy dump for PID 10 (py-spy dump --native --pid 10):",
            "[2026-07-07 07:21:06 TP1] Pyspy failed (py-spy dump --pid 10). Error: gone",
            "[2026-07-07 07:21:07 TP1] Decode batch. #running-req: 1",
            "[2026-07-07 07:21:08 TP1] Decode batch. #running-req: 1",
            "    all_reduce (torch/distributed/distributed_c10d.py:3252)",
            "    <module> (<string>:1)",
        ]
    )
    failed, proc = parse_stack_text(text)
    # the failure is kept (no stack, the error, TP1 from the log prefix) ...
    assert (failed.pid, failed.rank, failed.threads) == (10, RankId(tp=1), ())
    assert (failed.outcome, failed.error) == ("partial", "gone")
    # ... and the later frames are not taken for PID 10 of TP1
    assert proc.pid is None and proc.rank is None
    assert proc.wait_site == "stack.nccl_collective"


def test_a_failed_pyspy_dump_after_its_header() -> None:
    text = """\
Process 27617: VLLM::Worker_TP1
Python v3.11.7 (/usr/local/bin/python3.11)

Error: Failed to get stack traces

Caused by:
    0: Failed to suspend process
    1: unexpected waitpid result PtraceEvent(Pid(27617), SIGSTOP, 128) to 27617
"""
    (proc,) = parse_stack_text(text)
    assert (proc.pid, proc.rank, proc.threads, proc.outcome) == (27617, RankId(tp=1), (), "partial")
    assert proc.error == "Failed to get stack traces; Failed to suspend process; " + (
        "unexpected waitpid result PtraceEvent(Pid(27617), SIGSTOP, 128) to 27617"
    )
    ok = text.split("Error:")[0] + 'Thread 27617 (idle): "MainThread"\n    f (x.py:1)\n'
    (merged,) = parse_stack_text(text + ok)  # a later dump of the pid that worked wins
    assert merged.outcome == "ok" and merged.samples == 2 and merged.threads


def test_faulthandler_thread_names_of_python_314() -> None:
    text = """\
Thread 0x00007f71b9fff640 [pt_nccl_watchdg] (most recent call first):
  File "/usr/lib/python3.14/threading.py", line 324 in wait

Current thread 0x00007f7285a4a480 [python3] (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2050 in barrier
  File "<string>", line 1 in <module>
"""
    (proc,) = parse_stack_text(text)
    assert [t.name for t in proc.threads] == ["pt_nccl_watchdg", "python3"]
    assert proc.wait_site == "stack.nccl_collective" and proc.wait_thread == 0x00007F7285A4A480


def test_a_dump_never_runs_on_into_the_next_file() -> None:
    tail_of_a = records_from_text(
        "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n    work (hang.py:8)",
        source="a.txt",
    )
    head_of_b = records_from_text(
        "    Socket.recv_pyobj (zmq/sugar/socket.py:1033)\n    <module> (<string>:1)",
        source="b.txt",
    )
    a, b = extract_stack_processes([*tail_of_a, *head_of_b])
    assert (a.source, a.wait_site) == ("a.txt", "stack.nccl_collective")
    assert (b.source, b.wait_site) == ("b.txt", "stack.ipc_wait")


def test_torch_report_frames_without_their_header_are_a_c10d_report() -> None:
    """torch's `#N f from file:line` frames, the `Stack trace of the failed collective:`
    header cut off (and here the innermost frames too): still torch's report of a
    collective, innermost first."""
    text = (
        "#56 forward from /w/sglang/python/sglang/srt/models/deepseek_v2.py:2083\n"
        "#57 _call_impl from /usr/lib/python3/dist-packages/torch/nn/modules/module.py:1784\n"
        "#58 forward_extend from /w/sglang/python/sglang/srt/model_executor/model_runner.py:1698\n"
        "#59 run_batch from /w/sglang/python/sglang/srt/managers/scheduler.py:1801\n"
    )
    (proc,) = parse_stack_text(text)
    assert proc.mode == "c10d" and proc.pid is None
    assert [f.name for f in proc.threads[0].frames] == [
        "forward",
        "_call_impl",
        "forward_extend",
        "run_batch",
    ]
    assert proc.threads[0].frames[0].line == 2083
    assert proc.wait_site == "stack.nccl_collective"


def test_gdb_py_bt_whose_header_was_cut_is_still_read() -> None:
    # CPython's libpython.py prints `Waiting for the GIL` for a frame in take_gil and
    # `<built-in method f of T object at remote 0x..>` for a C function: gdb's own words
    text = (
        "  Waiting for the GIL\n"
        "  <built-in method _invoke_rpc_python_udf of PyCapsule object at remote 0x7f91>\n"
        '  File "/opt/lib/python3.9/site-packages/torch/distributed/rpc/api.py", line 719, in _invoke_rpc\n'  # noqa: E501
        "    fut = _invoke_rpc_python_udf(\n"
        '  File "/opt/lib/python3.9/site-packages/torch/distributed/rpc/api.py", line 902, in rpc_async\n'  # noqa: E501
        "    fut = _invoke_rpc(to, func, RPCExecMode.ASYNC, args, kwargs, timeout)\n"
    )
    (proc,) = parse_stack_text(text)
    frames = proc.threads[0].frames
    assert [f.name for f in frames] == ["take_gil", "_invoke_rpc_python_udf", "_invoke_rpc", "rpc_async"]  # noqa: E501
    assert proc.wait_site == "stack.gil_or_lock"
    # without gdb's words the source lines still prove the order (rpc_async's line calls
    # _invoke_rpc, printed above it): innermost first, a stack
    plain = "\n".join(text.splitlines()[2:]) + "\n"
    (proc,) = parse_stack_text(plain)
    assert [f.name for f in proc.threads[0].frames] == ["_invoke_rpc", "rpc_async"]
    # without those either, frames and no exception line are a cut traceback, not a dump
    bare = "\n".join(text.splitlines()[2::2]) + "\n"
    assert parse_stack_text(bare) == []


def test_gdb_frames_whose_thread_header_was_cut_are_a_backtrace() -> None:
    text = (
        "#8  0x00007f5178571f92 in cuMemcpyDtoHAsync_v2 () from /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"  # noqa: E501
        "#9  0x00007f517d0984bf in ?? ()\n"
        "   from /opt/torch/lib/libcudart-f7fdd8d7.so.9.0\n"
        "#11 0x00007f517d0aed86 in cudaMemcpyAsync ()\n"
        "   from /opt/torch/lib/libcudart-f7fdd8d7.so.9.0\n"
    )
    (proc,) = parse_stack_text(text)
    assert proc.mode == "gdb" and proc.pid is None
    assert [f.name for f in proc.threads[0].frames][:1] == ["cuMemcpyDtoHAsync_v2"]
    assert proc.wait_site == "stack.cuda_sync"


def test_gdb_frames_without_an_address_begin_a_cut_backtrace() -> None:
    # gdb prints no address for a frame whose pc starts a source line (a syscall wrapper's
    # frame #0, an inlined frame): with its `(args)` and its place it still begins one
    text = (
        "#0  __lll_lock_wait (futex=0x5d1e40, private=0) at ./nptl/lowlevellock.c:49\n"
        "#1  0x00007f11aa02 in pthread_mutex_lock (mutex=0x5d1e40) at ./nptl/mutex.c:93\n"
        "#2  0x00007f22bb03 in c10d::ProcessGroupNCCL::allgather(std::vector<at::Tensor>&) ()"
        " from /x/libtorch_cuda.so\n"
    )
    (proc,) = parse_stack_text(text)
    assert [f.name for f in proc.threads[0].frames] == [
        "__lll_lock_wait",
        "pthread_mutex_lock",
        "c10d::ProcessGroupNCCL::allgather",
    ]
    assert proc.threads[0].frames[0].filename.endswith("lowlevellock.c")
    # torch's failed-collective report (`#3 f from file:line`) is not read as gdb's
    assert parse_stack_text("#3 all_reduce from dist.py:12\n#4 forward from m.py:3\n")[0].mode == (
        "c10d"
    )


def test_gdb_wrapped_frame_takes_its_place_from_the_next_line() -> None:
    # gdb breaks a long frame before its place: `    at file:line` / `   from /x/lib.so`
    text = (
        'Thread 1 (Thread 0x7f33 (LWP 2175) "python3"):\n'
        "#0  0x00007f11aa00 in __GI___pthread_mutex_lock (mutex=0x7f2 <getFreeMutex()::m>)\n"
        "    at ../nptl/pthread_mutex_lock.c:80\n"
        "#1  0x00007f11ab00 in ?? ()\n"
        "   from /usr/lib/libnccl.so.2\n"
    )
    (proc,) = parse_stack_text(text)
    got = [(f.name, f.filename, f.line) for f in proc.threads[0].frames]
    assert got == [
        ("__pthread_mutex_lock", "../nptl/pthread_mutex_lock.c", 80),
        ("0x00007f11ab00", "/usr/lib/libnccl.so.2", None),
    ]


def test_gdb_py_bt_is_read_innermost_first() -> None:
    text = (
        "Traceback (most recent call first):\n"
        "  <built-in method masked_select of type object at remote 0x7557b515be80>\n"
        '  File "/x/site-packages/torch/_tensor_str.py", line 145, in __init__\n'
        "    nonzero_finite_vals = torch.masked_select(\n"
        '  File "/x/site-packages/torch/_tensor_str.py", line ?, in _str_intern\n'
        "    (failed to get frame line number)\n"
        '  File "/vllm/v1/worker/gpu_model_runner.py", line 952, in execute_model\n'
        '    print("hidden_states", hidden_states)\n'
    )
    (proc,) = parse_stack_text(text)
    frames = proc.threads[0].frames
    assert proc.mode == "faulthandler"
    # the C function py-bt names (`<built-in method masked_select ...>`) is a native frame
    assert [f.name for f in frames] == ["masked_select", "__init__", "_str_intern", "execute_model"]
    assert frames[0].native and not frames[1].native
    assert (frames[1].line, frames[2].line) == (145, None)
    # printing a GPU tensor copies it to the host: the kernel leaf names a CUDA sync
    assert proc.wait_site == "stack.cuda_sync"
    # a Python traceback (most recent call LAST) is still an error, not a dump
    assert parse_stack_text(text.replace("call first", "call last")) == []


def test_vllm_trace_function_tail_gives_the_open_calls() -> None:
    """VLLM_TRACE_FUNCTION's per-thread call log: the calls that never returned are
    where the thread sits (here a stream sync inside PyNccl's init)."""
    text = (
        "2024-06-03 16:53:30.700000 Call to init_worker_distributed_environment in "
        "/x/vllm/worker/worker.py:300 from init_device in /x/vllm/worker/worker.py:120\n"
        "2024-06-03 16:53:30.740000 Call to __init__ in "
        "/x/vllm/distributed/device_communicators/pynccl.py:40 from init_model_parallel_group "
        "in /x/vllm/distributed/parallel_state.py:700\n"
        "2024-06-03 16:53:30.741000 Call to all_reduce in "
        "/x/vllm/distributed/device_communicators/pynccl.py:110 from __init__ in "
        "/x/vllm/distributed/device_communicators/pynccl.py:98\n"
        "2024-06-03 16:53:30.742000 Return from all_reduce in "
        "/x/vllm/distributed/device_communicators/pynccl.py:130 to __init__ in "
        "/x/vllm/distributed/device_communicators/pynccl.py:98\n"
        "2024-06-03 16:53:30.748291 Call to synchronize in /x/torch/cuda/streams.py:93 from "
        "__init__ in /x/vllm/distributed/device_communicators/pynccl.py:101\n"
    )
    (proc,) = parse_stack_text(text)
    assert proc.mode == "trace"
    names = [f.name for f in proc.threads[0].frames]
    assert names == [
        "synchronize",
        "__init__",
        "init_worker_distributed_environment",
        "init_device",
    ]
    assert proc.wait_site == "stack.cuda_sync"  # torch.cuda Stream.synchronize
    # a trace whose calls all returned leaves nothing open: no process
    done = text.replace(
        "Call to synchronize in /x/torch/cuda/streams.py:93 from",
        "Return from synchronize in /x/torch/cuda/streams.py:95 to",
    )
    assert [p.mode for p in parse_stack_text(done)] == ["trace"]  # still inside __init__


def test_torch_fatal_signal_printer_is_read_innermost_first_as_native() -> None:
    text = (
        "!!!!!!! Segfault encountered !!!!!!!\n"
        '  File "<unknown>", line 0, in pthread_kill\n'
        '  File "<unknown>", line 0, in gsignal\n'
        '  File "<unknown>", line 0, in cuMemcpyBatchAsync_v2\n'
        '  File "<unknown>", line 0, in cudaMemcpyBatchAsync\n'
        '  File "<unknown>", line 0, in transfer_kv_impl(at::Tensor const&, long)\n'
    )
    (p,) = parse_stack_text(text)
    frames = p.threads[0].frames
    assert [f.name for f in frames][:3] == ["pthread_kill", "gsignal", "cuMemcpyBatchAsync_v2"]
    assert all(f.native for f in frames)
    assert p.wait_site == "stack.cuda_sync"


def test_pystack_gil_bracket_is_the_thread_state() -> None:
    text = (
        "Traceback for thread 31 (python) [Has the GIL] (most recent call last):\n"
        '    (Python) File "/x/threading.py", line 1002, in _bootstrap\n'
        '    (Python) File "/x/spin.py", line 5, in spin\n'
        "\n"
        "Traceback for thread 30 (python) [] (most recent call last):\n"
        '    (Python) File "/x/spin.py", line 9, in <module>\n'
    )
    (p,) = parse_stack_text(text)
    by_id = {t.thread_id: t for t in p.threads}
    assert (by_id[31].idle, by_id[31].owns_gil) == (False, True)
    assert (by_id[30].idle, by_id[30].owns_gil) == (None, None)


def test_a_flattened_dump_is_cut_into_its_lines_again() -> None:
    text = (
        "Process 12: VLLM::EngineCore Python v3.12.3 (/usr/bin/python3.12) Thread 12 (idle): "
        '"MainThread" poll (zmq/sugar/poll.py:106) recv (vllm/distributed/device_communicators/'
        "shm_broadcast.py:802) get_response (vllm/v1/executor/multiproc_executor.py:387)"
    )
    (p,) = parse_stack_text(text)
    assert (p.pid, p.title, p.wait_site) == (12, "VLLM::EngineCore", "stack.ipc_wait")
    assert [f.name for f in p.threads[0].frames] == ["poll", "recv", "get_response"]
    # a log line naming one place is not a dump
    assert parse_stack_text("INFO loaded (model.py:12) in 3 s: ok (x)") == []


def test_a_flattened_gdb_backtrace_is_cut_at_its_headers_and_inlined_frames() -> None:
    lines = [
        'Thread 9 (Thread 0x7ff5dd789700 (LWP 4987) "cuda-EvtHandlr"):',
        "#0  0x00007ffa29e34ddd in poll () from /usr/lib64/libc.so.6",
        "#1  0x00007ff995abc1ef in ?? () from /usr/lib64/libcuda.so.1",
        "#2  0x00007ffa2a81fea5 in start_thread () from /usr/lib64/libpthread.so.0",
        'Thread 8 (Thread 0x7ff63e823700 (LWP 4986) "worker"):',
        "#0  0x00007ffa2a821017 in pthread_join () from /usr/lib64/libpthread.so.0",
        "#1  0x00007ff9c5a48dc7 in commFree (comm=0x84dc290) at init.cc:183",
        "#2  commCleanup (comm=0x84dc290) at init.cc:1950",
        "#3  0x00007ff9c5a4c867 in ncclCommAbort (comm=0x84dc290) at init.cc:2149",
    ]
    for glue in (" ", ""):
        (p,) = parse_stack_text(glue.join(lines))
        names = [[f.name for f in t.frames] for t in p.threads]
        assert [t.name for t in p.threads] == ["cuda-EvtHandlr", "worker"], glue
        assert names[1] == ["pthread_join", "commFree", "commCleanup", "ncclCommAbort"], glue


def test_gdb_thread_apply_all_bt() -> None:
    text = (
        'Thread 2 (Thread 0x7f33519ff6c0 (LWP 2236) "pt_nccl_watchdg"):\n'
        "#0  __futex_abstimed_wait_common64 (private=0, cancel=true) at ./nptl/futex.c:57\n"
        "#1  0x00007f33569f812f in ?? () from /usr/lib/libstdc++.so.6\n"
        "\n"
        'Thread 1 (Thread 0x7f337001eb80 (LWP 2175) "VLLM::Worker_TP1"):\n'
        "#0  0x00007f336f91a26f in __GI___poll (fds=0x7fff, nfds=1, timeout=300000) at "
        "../sysdeps/unix/sysv/linux/poll.c:29\n"
        "#1  0x00007f335f142d35 in c10d::TCPStore::doWait(c10::ArrayRef<std::string>, "
        "std::chrono::duration<long, std::ratio<1l, 1000l> >) () from /x/libtorch_cpu.so\n"
        "#2  0x00007f336fafd9c3 in _PyEval_EvalFrameDefault (tstate=<optimized out>) at "
        "Python/ceval.c:4769\n"
    )
    (p,) = parse_stack_text(text)
    assert (p.pid, p.title, p.mode, p.wait_site, p.wait_thread) == (
        2175,
        "VLLM::Worker_TP1",
        "gdb",
        "stack.dist_init",
        2175,
    )
    main = p.threads[1]
    assert [f.name for f in main.frames] == [
        "__poll",
        "c10d::TCPStore::doWait",
        "_PyEval_EvalFrameDefault",
    ]
    assert all(f.native for f in main.frames)
    assert p.threads[0].frames[1].name == "0x00007f33569f812f"  # `??`: its address


PARKED = """\
Thread 0x00007fbc4bfff640 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/threading.py", line 607 in wait
  File "/usr/local/lib/python3.10/dist-packages/tqdm/_monitor.py", line 60 in run
  File "/usr/lib/python3.10/threading.py", line 1016 in _bootstrap_inner

Thread 0x00007fbc5ffff640 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 320 in wait
  File "/x/sglang/srt/disaggregation/common/utils.py", line 24 in get
"""
MAIN_IN_ALL_REDUCE = """
Current thread 0x00007fbc70000000 (most recent call first):
  File "/x/torch/distributed/distributed_c10d.py", line 2050 in all_reduce
  File "/workspace/x/train.py", line 12 in <module>
"""


def test_a_faulthandler_dump_of_parked_workers_only_is_an_idle_loop() -> None:
    """A queue worker parked in Condition.wait inside a queue's get (SGLang's FastQueue)
    is an idle helper in a dump without thread states; with a main thread at work it is
    that thread that counts."""
    (p,) = parse_stack_text(PARKED)
    assert p.wait_site == "stack.idle_loop"
    (p,) = parse_stack_text(PARKED + MAIN_IN_ALL_REDUCE)
    assert p.wait_site == "stack.nccl_collective"


def test_parked_threads_without_the_main_thread_are_an_idle_loop() -> None:
    """pytest-timeout's signal method dumps every thread but the main one: threads parked
    in generic waits, no main thread in sight -> stack.idle_loop; the main thread in the
    same wait is a thread waiting on a lock."""
    block = (
        "~~~~~~~~~~~~~~~~~~~ Stack of {name} (1397520) ~~~~~~~~~~~~~~~~~~~~\n"
        '  File "/usr/lib/python3.12/threading.py", line 1012, in run\n'
        "    self._target(*self._args, **self._kwargs)\n"
        '  File "/srv/app/poller.py", line 40, in serve\n'
        "    self.stop.wait()\n"
        '  File "/usr/lib/python3.12/threading.py", line 655, in wait\n'
        "    signaled = self._cond.wait(timeout)\n"
        '  File "/usr/lib/python3.12/threading.py", line 355, in wait\n'
        "    waiter.acquire()\n"
    )
    (p,) = parse_stack_text(block.format(name="Thread-3 (serve)"))
    assert (p.mode, p.wait_site) == ("pytest_timeout", "stack.idle_loop")
    (p,) = parse_stack_text(block.format(name="MainThread"))
    assert p.wait_site == "stack.gil_or_lock"


# --- paste damage at the edges of an excerpt (session 4) ---------------------------------

_C10D_TAIL = """\
#3 all_reduce from /usr/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py:2810
#4 wrapper from /usr/local/lib/python3.12/dist-packages/torch/distributed/c10d_logger.py:81
#5 forward_extend from /sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py:1698
"""


def test_torch_report_frames_behind_a_compose_or_container_prefix_are_read() -> None:
    for prefix in ("sglang-1  | ", "2025-03-01T10:00:00.123456789Z ", "(Worker pid=12) "):
        text = "\n".join(prefix + ln for ln in _C10D_TAIL.splitlines())
        procs = parse_stack_text(text)
        assert [(p.mode, p.wait_site) for p in procs] == [("c10d", "stack.nccl_collective")]


def test_no_break_space_indentation_is_indentation() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '\xa0\xa0File "/x/multiprocessing/connection.py", line 395, in _recv\n'
        "\xa0\xa0\xa0\xa0chunk = read(handle, remaining)\n"
        "KeyboardInterrupt\n"
    )
    procs = parse_stack_text(text)
    assert [(p.mode, p.wait_site) for p in procs] == [("traceback", "stack.ipc_wait")]


def test_pystack_frames_whose_thread_header_was_cut_off() -> None:
    text = (
        '    (Python) File "/usr/lib/python3.10/threading.py", line 973, in _bootstrap\n'
        "        self._bootstrap_inner()\n"
        '    (Python) File "/x/vllm/worker/worker.py", line 300, in execute_model\n'
        '    (Python) File "/x/torch/distributed/distributed_c10d.py", line 2050, in all_reduce\n'
        "        work = group.allreduce([tensor], opts)\n"
    )
    procs = parse_stack_text(text)
    assert [(p.mode, p.wait_site) for p in procs] == [("pystack", "stack.nccl_collective")]
    assert procs[0].threads[0].frames[0].name == "all_reduce"  # innermost first


def test_a_faulthandler_frame_cut_at_the_excerpts_start_keeps_its_path_tail() -> None:
    text = (
        'es/torch/distributed/distributed_c10d.py", line 3000 in barrier\n'
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 500 in init_torch_dist\n'
        '  File "<string>", line 1 in <module>\n'
    )
    procs = parse_stack_text(text)
    assert [(p.mode, p.wait_site) for p in procs] == [("faulthandler", "stack.nccl_collective")]
    assert procs[0].threads[0].frames[0].filename == "es/torch/distributed/distributed_c10d.py"


def test_torch_signal_printer_frames_without_their_banner_are_innermost_first() -> None:
    text = (
        '  File "<unknown>", line 0, in pthread_kill\n'
        '  File "<unknown>", line 0, in cudaStreamSynchronize\n'
        '  File "<unknown>", line 0, in at::native::_local_scalar_dense_cuda(at::Tensor const&)\n'
    )
    procs = parse_stack_text(text)
    assert [(p.mode, p.wait_site) for p in procs] == [("faulthandler", "stack.cuda_sync")]
    assert procs[0].threads[0].frames[0].name == "pthread_kill"


def test_a_paste_of_py_spy_frames_alone_is_analysed_not_refused() -> None:
    from diag.analyze import analyze_text

    text = (
        "    wait (threading.py:359)\n"
        "    get (queue.py:180)\n"
        "    _process_input_queue (vllm/v1/engine/core.py:668)\n"
        "    run_busy_loop (vllm/v1/engine/core.py:650)\n"
    )
    sites = [p.wait_site for p in analyze_text(text).stack_processes]
    assert sites == ["stack.idle_loop"]


def test_a_fatal_signals_current_thread_is_the_thread_that_matters() -> None:
    # SIGSEGV is delivered to the thread that faulted: faulthandler names it `Current
    # thread`; the main thread's collective is not where this process stopped
    text = (
        "Fatal Python error: Segmentation fault\n\n"
        "Thread 0x00007f1 (most recent call first):\n"
        '  File "/x/torch/distributed/distributed_c10d.py", line 2050 in all_reduce\n'
        '  File "/x/vllm/worker/worker.py", line 300 in execute_model\n'
        '  File "<string>", line 1 in <module>\n\n'
        "Current thread 0x00007f2 (most recent call first):\n"
        '  File "/x/zmq/sugar/socket.py", line 700 in recv_pyobj\n'
        '  File "/x/vllm/engine/output_proc.py", line 30 in handle_requests\n'
        '  File "/usr/lib/python3.10/threading.py", line 953 in run\n'
    )
    (p,) = parse_stack_text(text)
    assert [t.current for t in p.threads] == [False, True]
    assert (p.wait_site, p.wait_thread) == ("stack.ipc_wait", 0x7F2)


def test_a_lone_current_thread_keeps_its_header() -> None:
    text = (
        "Fatal Python error: Aborted\n\n"
        "Current thread 0x00007f4858f86740 (most recent call first):\n"
        '  File "/x/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 351'
        " in ncclCommInitRank\n"
    )
    (p,) = parse_stack_text(text)
    assert p.threads[0].thread_id == 0x00007F4858F86740 and p.threads[0].current
    assert p.wait_site == "stack.dist_init"


PY314_CRASH = """\
Fatal Python error: Segmentation fault

Current thread 0x00007f4858f86740 [python3] (most recent call first):
  File "/usr/lib/python3.14/site-packages/vllm/distributed/parallel_state.py", line 500 in {fn}
  File "<string>", line 1 in <module>

Current thread's C stack trace (most recent call first):
  Binary file "/usr/bin/python3.14", at _Py_DumpStack+0x42 [0x5b27f7d7147e]
  Binary file "/usr/bin/python3.14", at +0x32dcbd [0x5b27f7d85cbd]
  Binary file "/usr/lib/x86_64-linux-gnu/libc.so.6", at +0x3def0 [0x77b73226bef0]
  Binary file "/usr/lib/python3.14/torch/lib/libtorch_cpu.so", at {sym}+0x1a [0x7f0003]
  Binary file "/usr/lib/x86_64-linux-gnu/libc.so.6", at __libc_start_main+0x80 [0x7f0004]
  <truncated rest of calls>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_python_314s_c_stack_is_the_current_threads_innermost_frames() -> None:
    # Python/traceback.c (3.14) _Py_DumpStack: dladdr's symbols, C++ ones mangled
    sym = "_ZN4c10d8TCPStore6doWaitEN3c108ArrayRefINSt7__cxx1112basic_stringIcEEEE"
    (p,) = parse_stack_text(PY314_CRASH.format(fn="helper", sym=sym))
    frames = p.threads[0].frames
    # faulthandler's own frames and the signal trampoline are cut; the rest leads
    assert [f.name for f in frames[:3]] == ["c10d::TCPStore::doWait", "__libc_start_main", "helper"]
    assert frames[0].native and frames[0].filename.endswith("libtorch_cpu.so")
    assert p.wait_site == "stack.dist_init"


def test_a_frame_line_a_word_wrap_broke_is_joined_again() -> None:
    # a paste wrapped at spaces: faulthandler's and pystack's frame lines in two or three
    # pieces; the dump parser joins them where the log reader's hard-wrap join cannot
    text = (
        "Current thread 0x00007f2ea0870640 (most recent call first):\n"
        '  File "/usr/local/lib/python3.10/dist-\n'
        'packages/torch/distributed/distributed_c10d.py", line 2501 in\n'
        "all_reduce\n"
        '  File "/x/sglang/srt/distributed/parallel_state.py", line 400 in all_reduce\n'
    )
    (p,) = parse_stack_text(text)
    names = [(f.name, f.line) for f in p.threads[0].frames]
    assert names == [("all_reduce", 2501), ("all_reduce", 400)]
    path = p.threads[0].frames[0].filename
    assert path.endswith("dist-packages/torch/distributed/distributed_c10d.py")
    assert p.wait_site == "stack.nccl_collective"
    pystack = (
        "Traceback for thread 14797 (python) [] (most recent call last):\n"
        '    (Python) File "<string>", line 13, in <module>\n'
        "    (Python) File \n"
        '"/usr/lib/python3.11/multiprocessing/queues.py", line \n'
        "103, in get\n"
        "        res = self._recv_bytes()\n"
    )
    (q,) = parse_stack_text(pystack)
    assert [f.name for f in q.threads[0].frames] == ["get", "<module>"]
    # a line that only looks like a frame's start is fed as it came
    (r,) = parse_stack_text('  File "x.py" not found\n' + text)
    assert r.wait_site == "stack.nccl_collective"



UCX_DUMP = """[node1:25036:0:25645] Caught signal 11 (Segmentation fault: address not mapped)
==== backtrace (tid:  25645) ====
 0 0x0000000000042520 __sigaction()  ???:0
 1 0x000000000006a920 SaveProxy()  /src/proxy.cc:518
 2 0x000000000006ca3a ncclProxySaveOp()  /src/proxy.cc:546
=================================
==== backtrace (tid:  25700) ====
 0 0x0000000000042520 __sigaction()  ???:0
 1 0x000000000004e991 ncclAllGather()  /src/collectives.cc:88
=================================
"""


def test_ucx_backtraces_take_the_signal_lines_pid_once() -> None:
    """UCX's (ucs/debug) signal backtraces: frames innermost first, names without '()',
    and the 'Caught signal' line's pid goes to the dump after it only."""
    first, second = parse_stack_text(UCX_DUMP)
    assert (first.pid, second.pid) == (25036, None)
    names = [f.name for f in first.threads[0].frames]
    assert names == ["__sigaction", "SaveProxy", "ncclProxySaveOp"]
    assert (first.threads[0].frames[1].filename, first.threads[0].frames[1].line) == (
        "/src/proxy.cc",
        518,
    )
    assert first.wait_site == second.wait_site == "stack.nccl_collective"


def test_a_bare_error_traceback_is_where_its_thread_was() -> None:
    """Through the log reader (levels read): a text that is only a traceback ending in an
    error, or cut before its exception, gives its innermost frames as the thread's place;
    the same traceback inside a log is also where its thread was when the error surfaced."""
    from diag.analyze import analyze_text

    bare = (
        "  File \"/sgl/python/sglang/srt/managers/scheduler.py\", line 1098, in pop_and_process\n"
        "    self.process_batch_result(tmp_batch, tmp_result)\n"
        "  File \"/sgl/python/sglang/srt/managers/scheduler.py\", line 2425, in process_batch_result\n"  # noqa: E501
        "    result.copy_done.synchronize()\n"
        "  File \"/venv/lib/python3.12/site-packages/torch/cuda/streams.py\", line 231, in synchronize\n"  # noqa: E501
        "    super().synchronize()\n"
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    )
    (proc,) = analyze_text(bare).stack_processes
    assert proc.mode == "traceback" and proc.wait_site == "stack.cuda_sync"
    assert [f.name for f in proc.threads[0].frames][:2] == ["synchronize", "process_batch_result"]
    # the indentation lost: the source lines are still the frames' own
    flat = "\n".join(line.strip() for line in bare.splitlines()) + "\n"
    assert [p.wait_site for p in analyze_text(flat).stack_processes] == ["stack.cuda_sync"]
    # cut before the exception line: the same place
    cut = "\n".join(bare.splitlines()[:-1]) + "\n"
    assert [p.wait_site for p in analyze_text(cut).stack_processes] == ["stack.cuda_sync"]
    # inside a log, the traceback is the log's error and also where its thread was
    logged = "[2026-04-22 08:39:14 TP0] Decode batch. #running-req: 1\n" + bare
    (proc,) = analyze_text(logged).stack_processes
    assert proc.mode == "traceback" and proc.wait_site == "stack.cuda_sync"
    # and never through the plain dump reader, which reads no levels
    assert parse_stack_text(bare) == []


def test_tracebacks_in_a_log_are_no_collective_wait() -> None:
    """Two ranks' tracebacks in one log, one raised inside a collective and one elsewhere,
    each at its own moment: they are where the errors surfaced, not a dump of ranks waiting
    for one another, so nccl.waiting_for_rank does not fire; two dumps of the same frames
    do."""
    from diag.analyze import analyze_text

    def tb(rank: int, inner: str, exc: str) -> str:
        return (
            f"[2026-04-22 08:39:1{rank} TP{rank}] Scheduler hit an exception: Traceback (most recent call last):\n"  # noqa: E501
            f'  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1098, in event_loop\n'
            f"    self.run_batch(batch)\n"
            f"{inner}"
            f"{exc}\n"
        )

    coll = (
        '  File "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce\n'  # noqa: E501
        "    work = group.allreduce([tensor], opts)\n"
    )
    sync = (
        '  File "/venv/lib/python3.12/site-packages/torch/cuda/streams.py", line 231, in synchronize\n'  # noqa: E501
        "    super().synchronize()\n"
    )
    a = analyze_text(
        tb(0, coll, "torch.distributed.DistBackendError: NCCL error")
        + tb(1, sync, "torch.AcceleratorError: CUDA error: an illegal memory access")
    )
    assert sorted(p.wait_site or "" for p in a.stack_processes) == [
        "stack.cuda_sync",
        "stack.nccl_collective",
    ]
    assert all(p.mode == "traceback" for p in a.stack_processes)
    assert "nccl.waiting_for_rank" not in {f.id for f in a.findings}


def test_a_traceback_reads_the_call_its_innermost_frame_prints() -> None:
    """A C function raises with no Python frame of its own: the source line under the
    innermost frame names it (`.tolist()` is a device sync), kept as the frame's call and
    in the JSON; a traceback no frame or call names a site of takes its start-up step."""
    from diag.analyze import analyze_text
    from diag.report.json_out import analysis_from_dict, analysis_to_dict

    def tb(inner: str, call: str) -> str:
        return (
            "Traceback (most recent call last):\n"
            '  File "/opt/engine/model_agent.py", line 57, in model_forward\n'
            "    context = ctx_mgr.build_context(inputs)\n"
            f'  File "/opt/engine/backends/op_backend.py", line 117, in {inner}\n'
            f"    {call}\n"
            "RuntimeError: stream synchronize failed, error code:507048\n"
        )

    (proc,) = analyze_text(tb("update_step_context", "q = ctx.q_seqlens.tolist()")).stack_processes
    assert proc.wait_site == "stack.cuda_sync"
    inner = proc.threads[0].frames[0]
    assert (inner.name, inner.call) == ("update_step_context", "q = ctx.q_seqlens.tolist()")
    assert all(f.call is None for f in proc.threads[0].frames[1:])
    back = analysis_from_dict(analysis_to_dict(analyze_text(tb("f", "x.tolist()"))))
    assert back.stack_processes[0].threads[0].frames[0].call == "x.tolist()"
    # a call that is no primitive: no site from it
    (proc,) = analyze_text(tb("update_step_context", "q = ctx.lengths(3)")).stack_processes
    assert proc.wait_site is None
    # the model loader's frames, no wait named: the start-up step's site (weights I/O)
    loading = (
        "Traceback (most recent call last):\n"
        '  File "/w/worker/gpu_worker.py", line 160, in load_model\n'
        "    self.model_runner.load_model()\n"
        '  File "/w/worker/gpu_model_runner.py", line 725, in load_model\n'
        "    self.model = get_model_from_loader(fd_config=self.fd_config)\n"
        "ValueError: SafeTensorError::MetadataIncompleteBuffer\n"
    )
    (proc,) = analyze_text(loading).stack_processes
    assert proc.wait_site == "stack.weights_io"
    # vLLM V1's executor RPC proves the weights were loaded; it is no weights I/O
    rpc = (
        "Traceback (most recent call last):\n"
        '  File "/v/vllm/v1/executor/multiproc_executor.py", line 927, in worker_busy_loop\n'
        "    output = func(*args, **kwargs)\n"
        '  File "/v/plugin/worker.py", line 88, in add_adapter\n'
        "    raise ValueError(msg)\n"
        "ValueError: no adapter found\n"
    )
    (proc,) = analyze_text(rpc).stack_processes
    assert proc.wait_site is None


def test_torch_c10_frames_under_a_raised_exception_are_its_innermost_native_frames() -> None:
    """c10::Error's "Exception raised from F at FILE:N (most recent call first):" and its
    "frame #N:" lines are the C++ stack of the thread that raised, inside its innermost
    Python frame: a barrier() that raised from TCPStore::doGet waited in the store."""
    text = (
        '  File "/env/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 72, '
        "in wrapper\n"
        "    return func(*args, **kwargs)\n"
        '  File "/env/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", '
        "line 3439, in barrier\n"
        "    work = default_pg.barrier(opts=opts)\n"
        "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got "
        "error: Socket Timeout\n"
        "Exception raised from doWait at ../torch/csrc/distributed/c10d/TCPStore.cpp:550 "
        "(most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 "
        "(0x7f63740f4d87 in /env/lib/python3.10/site-packages/torch/lib/libc10.so)\n"
        "frame #1: <unknown function> + 0x15c0e0b (0x7f604e191e0b in "
        "/env/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so)\n"
        "frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f6052460b32 in "
        "/env/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so)\n"
    )
    from diag.analyze import analyze_text

    (proc,) = analyze_text(text).stack_processes
    names = [f.name for f in proc.threads[0].frames]
    assert names[:3] == ["c10::Error::Error", "0x7f604e191e0b", "c10d::TCPStore::doGet"]
    assert names[3:] == ["barrier", "wrapper"]
    assert all(f.native for f in proc.threads[0].frames[:3])
    assert proc.wait_site == "stack.dist_init"
    # without the C++ frames the Python call alone reads as the collective it is
    bare = text.split("Exception raised from")[0]
    assert analyze_text(bare).stack_processes[0].wait_site == "stack.nccl_collective"


def test_torch_c10_frames_on_their_own_are_a_native_thread() -> None:
    """A C++ thread's c10::Error (ProcessGroupNCCL's watchdog) has no Python traceback
    above it: its list is a thread of its own, the header's raising function first (the
    list often names it only "<unknown function>"). A window of "frame #N:" lines alone,
    its header cut, is read the same; a line of text between two lists ends the first."""
    from diag.analyze import analyze_text

    lib = "/env/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"
    text = (
        "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1902 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f57929785e8 "
        "in /env/lib/python3.12/site-packages/torch/lib/libc10.so)\n"
        f"frame #1: <unknown function> + 0xcc7a4e (0x7f572266da4e in {lib})\n"
        "frame #2: clone + 0x44 (0x7f5814233a04 in /lib/x86_64-linux-gnu/libc.so.6)\n"
    )
    (proc,) = analyze_text(text).stack_processes
    names = [f.name for f in proc.threads[0].frames]
    assert names[:2] == ["ncclCommWatchdog", "c10::Error::Error"]
    assert all(f.native for f in proc.threads[0].frames)
    assert proc.wait_site == "stack.nccl_collective"
    window = (
        "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::isCompleted() + 0x90 "
        f"(0x7f4583bdf370 in {lib})\n"
        f"frame #4: c10d::ProcessGroupNCCL::watchdogHandler() + 0x9de (0x7f4583be29de in {lib})\n"
    )
    (proc,) = analyze_text(window).stack_processes
    assert [f.name for f in proc.threads[0].frames] == [
        "c10d::ProcessGroupNCCL::WorkNCCL::isCompleted", "c10d::ProcessGroupNCCL::watchdogHandler"]
    assert proc.wait_site == "stack.nccl_collective"


def test_glibc_backtrace_symbols_are_a_native_stack() -> None:
    """glibc's backtrace_symbols_fd lines as Ray's crash handler prints them after an
    abort (innermost first, the demangled name after the address where known)."""
    p = "(RayWorkerWrapper pid=2667395) "
    text = (
        f"{p}/lib/x86_64-linux-gnu/libstdc++.so.6(+0xae1fe) [0x7fdb876201fe]\n"
        f"{p}/x/torch/lib/libtorch_cuda.so(+0xe427c9) [0x7fd15b3007c9] "
        "c10d::ProcessGroupNCCL::ncclCommWatchdog()\n"
        f"{p}/lib/x86_64-linux-gnu/libstdc++.so.6(+0xdc253) [0x7fdb8764e253]\n"
        f"{p}/lib/x86_64-linux-gnu/libc.so.6(+0x94ac3) [0x7fdb899c4ac3]\n"
    )
    (proc,) = parse_stack_text(text)
    names = [f.name for f in proc.threads[0].frames]
    assert names[:2] == ["0x7fdb876201fe", "c10d::ProcessGroupNCCL::ncclCommWatchdog"]
    assert all(f.native for f in proc.threads[0].frames)
    assert proc.wait_site == "stack.nccl_collective"


def test_a_frame_line_drawn_over_by_a_progress_bar_keeps_its_function_name() -> None:
    """A terminal's progress bars written over a traceback leave their residue after the
    frame's function; the name ends at the space, the call under it still names the wait."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/v1/engine/core_client.py", line 444, in __init__  | 0.00/4.92G '
        "[00:00<?, ?B/s]\n"
        "    if not sync_input_socket.poll(timeout=600_000):            | 0.00/4.98G\n"
        "KeyboardInterrupt\n"
    )
    from diag.analyze import analyze_text

    (proc,) = analyze_text(text).stack_processes
    assert proc.threads[0].frames[0].name == "__init__"
    assert proc.wait_site == "stack.ipc_wait"


def test_a_trace_whose_calls_all_returned_sits_in_the_caller_they_returned_to() -> None:
    """VLLM_TRACE_FUNCTION: when every call of the window returned, the last return names
    the caller that runs on (PyNcclCommunicator.__init__ at pynccl.py:208): communicator
    set-up, dist_init. vLLM 0.4.0-0.4.1's lines name no caller: open calls only."""
    from diag.analyze import analyze_text

    c10d = "/x/torch/distributed/distributed_c10d.py"
    text = (
        f"2024-04-23 05:48:36.169350 Call to WORLD in {c10d}:583 from is_initialized in "
        f"{c10d}:950\n"
        f"2024-04-23 05:48:36.169463 Call to default_pg in {c10d}:453 from WORLD in {c10d}:585\n"
        f"2024-04-23 05:48:36.169599 Return from default_pg in {c10d}:461 to WORLD in "
        f"{c10d}:585\n"
        f"2024-04-23 05:48:36.169905 Return from WORLD in {c10d}:585 to is_initialized in "
        f"{c10d}:950\n"
        f"2024-04-23 05:48:36.170247 Return from is_initialized in {c10d}:950 to __init__ in "
        "/x/vllm/distributed/device_communicators/pynccl.py:208\n"
    )
    (proc,) = analyze_text(text).stack_processes
    assert [f.name for f in proc.threads[0].frames] == ["__init__"]
    assert proc.wait_site == "stack.dist_init"
    w = "/x/ray/_private/worker.py"
    short = (
        f"2024-04-23 11:07:10.120781 Call to get_serialization_context in {w}:660\n"
        f"2024-04-23 11:07:10.120801 Call to current_job_id in {w}:491\n"
        f"2024-04-23 11:07:10.120820 Return from current_job_id in {w}:494\n"
        f"2024-04-23 11:07:10.120844 Return from get_serialization_context in {w}:672\n"
        "2024-04-23 11:07:10.120863 Call to serialize in /x/ray/_private/serialization.py:482\n"
    )
    (proc,) = analyze_text(short).stack_processes
    assert [f.name for f in proc.threads[0].frames] == ["serialize"]


def test_a_worker_spinning_for_its_next_message_is_idle() -> None:
    """vLLM's MessageQueue polls with sched_yield (distributed/utils.py): a generic spin
    whose caller, the worker's busy loop waiting for its next RPC, decides."""
    text = (
        'Thread 100 (active): "MainThread"\n'
        "    sched_yield (vllm/distributed/utils.py:48)\n"
        "    wait (vllm/distributed/device_communicators/shm_broadcast.py:196)\n"
        "    acquire_read (vllm/distributed/device_communicators/shm_broadcast.py:698)\n"
        "    dequeue (vllm/distributed/device_communicators/shm_broadcast.py:779)\n"
        "    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:987)\n"
    )
    (proc,) = parse_stack_text(text)
    assert proc.wait_site == "stack.idle_loop"


def test_a_line_split_again_from_memory_is_the_line_split_anew() -> None:
    """The extractor remembers each line's prefixes by its text (a dump's lines recur in
    every rank): a line met again, in another record, at another offset, with or without
    the record's rank, reads as the same line split anew."""
    from diag.stacks.textdump import _line_of

    texts = [
        '  File "/x/scheduler.py", line 12, in event_loop',
        "[2026-02-22 22:35:21 TP3] Thread 0x7f00 (most recent call first):",
        "(VllmWorker rank=2 pid=310) INFO 03-10 16:19:20 Thread 0x7f01 (idle): \"MainThread\"",
        "[rank5]:   File \"/y/distributed_c10d.py\", line 3, in barrier",
        "\x1b[36m(RayWorkerWrapper pid=7)\x1b[0m   wait (threading.py:320)",
        "  wait (threading.py:320) [repeated 7x across cluster]",
        "\xa0\xa0File \"/z.py\", line 1, in f",
        "Thread 0x7f02 (most recent call first):",
    ]
    seen: dict[str, tuple[str, str, RankId | None, str | None]] = {}
    for rep in range(3):
        for i, text in enumerate(texts):
            for rank in (None, RankId(tp=rep)):
                rec = Record("a.log" if rep % 2 else "b.log", 100 * rep + i, "m", rank=rank)
                for offset in (0, 2):
                    assert _line_of(rec, text, offset, seen) == _line_of(rec, text, offset)
    assert len(seen) == len(texts)


# the dumpstacks recipe (a SIGINT/SIGUSR1 handler printing sys._current_frames() through
# traceback.extract_stack: outermost first, the source line under each frame)
DUMPSTACKS = """\
# Thread: MainThread(140236)
File: "/srv/app/main.py", line 40, in serve
  self.generate(prompt)
File: "/usr/lib/python3.10/site-packages/torch/_dynamo/convert_frame.py", line 569, in _compile
  guarded_code = compile_inner(code, one_graph, hooks, transform)

# Thread: Thread-2 (poll)(140111)
File: "/usr/lib/python3.10/threading.py", line 1016, in _bootstrap_inner
  self.run()
File: "/usr/lib/python3.10/threading.py", line 320, in wait
  waiter.acquire()
"""


def test_a_signal_handlers_current_frames_dump() -> None:
    """`# Thread: NAME(ID)` headers and `File: "x", line N, in f` frames, outermost first:
    one process, a thread each, innermost frame first; the same frames without their
    headers (an excerpt from the middle) still make a thread."""
    (p,) = parse_stack_text(DUMPSTACKS)
    assert p.mode == "dumpstacks"
    assert [(t.thread_id, t.name) for t in p.threads] == [
        (140236, "MainThread"), (140111, "Thread-2 (poll)")
    ]
    assert [f.name for f in p.threads[0].frames] == ["_compile", "serve"]
    assert p.wait_site == "stack.jit_compile"
    headless = "\n".join(ln for ln in DUMPSTACKS.splitlines()[1:5])
    (p,) = parse_stack_text(headless)
    assert [f.name for f in p.threads[0].frames] == ["_compile", "serve"]


def test_a_traceback_cut_beside_ctrl_c_tracebacks_is_one_more_process() -> None:
    """Ctrl-C reaches every process of the group; each prints a traceback ending in
    KeyboardInterrupt. A traceback the paste cut before its last line, in the same text,
    is one more of them (where that process was); alone, it stays an error's traceback."""
    interrupted = (
        "Traceback (most recent call last):\n"
        '  File "/x/torch/_tensor.py", line 1088, in __len__\n'
        "    if torch._C._get_tracing_state():\n"
        "KeyboardInterrupt\n"
    )
    cut = (
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/detokenizer_manager.py", line 107, in event_loop\n'
        "    recv_obj = self.recv_from_scheduler.recv_pyobj()\n"
        '  File "/x/zmq/sugar/socket.py", line 972, in recv_pyobj\n'
        "    msg = self.recv(flags)\n"
    )
    procs = parse_stack_text(interrupted + cut)
    assert [p.threads[0].frames[0].name for p in procs] == ["__len__", "recv_pyobj"]
    assert parse_stack_text(cut) == []


def test_the_header_precheck_lists_every_pattern_the_header_chain_tries() -> None:
    """``_ANY_HEADER`` (one alternation, tried first) must hold every pattern
    ``_Channel._feed_header`` tries with ``match``: a line it rejects skips them all."""
    import inspect
    import re

    from diag.stacks import textdump

    tried = set(re.findall(r"\b(_[A-Z0-9_]+)\.match\(stripped\)",
                           inspect.getsource(textdump._Channel._feed_header)))
    tried.discard("_ANY_HEADER")
    listed = {name for name, value in vars(textdump).items()
              if any(value is p for p in textdump._HEADER_PATTERNS)}
    assert tried and tried == listed
    for p in textdump._HEADER_PATTERNS:
        assert p.flags == re.compile("").flags  # (the alternation is compiled with these)


def test_headerless_frames_innermost_first_by_their_calls_are_a_stack() -> None:
    """gdb py-bt frames whose header was cut: each frame's source line calls the frame printed
    above it, so the run is innermost first, a thread's stack (not a cut traceback)."""
    text = (
        'most ranks are at:\n'
        '  File "/venv/torch/cuda/streams.py", line 231, in synchronize\n'
        '    super().synchronize()\n'
        '  File "/app/vllm/v1/worker/gpu_model_runner.py", line 4046, in _to_list\n'
        '    self.transfer_event.synchronize()\n'
        'and that is all\n'
    )
    procs = extract_stack_processes(records_from_text(text), tracebacks=True)
    assert [(p.mode, p.wait_site) for p in procs] == [("faulthandler", "stack.cuda_sync")]
    assert [f.name for f in procs[0].threads[0].frames] == ["synchronize", "_to_list"]


def test_headerless_frames_outermost_first_stay_a_traceback() -> None:
    """The same two frames in a traceback's order (the outer frame's line calls the inner
    one): a cut traceback, innermost frame last, as before."""
    text = (
        '  File "/app/vllm/v1/worker/gpu_model_runner.py", line 4046, in _to_list\n'
        '    self.transfer_event.synchronize()\n'
        '  File "/venv/torch/cuda/streams.py", line 231, in synchronize\n'
        '    super().synchronize()\n'
        'and that is all\n'
    )
    procs = extract_stack_processes(records_from_text(text), tracebacks=True)
    assert [p.mode for p in procs] == ["traceback"]
    assert [f.name for f in procs[0].threads[0].frames] == ["synchronize", "_to_list"]


def test_retyped_faulthandler_frames_under_their_header() -> None:
    """A faulthandler stack a reporter retyped without `File "..."` quoting, a note after each
    frame: read under the `Stack (most recent call first):` header, innermost first."""
    text = (
        "Windows fatal exception: access violation\n\n"
        "Stack (most recent call first):\n```\n"
        "torch/storage.py line 471 in __getitem__ (UntypedStorage.__getitem__)\n"
        "comfy/utils.py line 136 in load_torch_file  (f.get_tensor(k))\n"
        "```\n"
    )
    procs = parse_stack_text(text)
    assert [f.name for p in procs for t in p.threads for f in t.frames] == [
        "__getitem__", "load_torch_file"
    ]
    # outside a faulthandler header the same words are prose, not frames
    assert parse_stack_text("see torch/storage.py line 471 in __getitem__ for why\n") == []


def test_trailing_blanks_are_no_word_wrap() -> None:
    """A paste whose lines end in blanks (an editor's trailing spaces) is no `fold -s` wrap:
    fold moves a word down only when it does not fit, so a short piece before a short line
    (the dump's header before its code fence) was not broken there."""
    from diag.analyze import analyze_text

    lines = [
        "The process crashes with `Windows fatal exception: access violation` when it loads "
        "a large safetensors text encoder in a long-running server.",
        "",
        "Stack (most recent call first):",
        "```",
        "torch/storage.py line 471 in __getitem__ (UntypedStorage.__getitem__)",
        "comfy/utils.py line 136 in load_torch_file  (f.get_tensor(k))",
        "comfy/sd.py line 1454 in load_clip",
        "comfy/nodes.py line 1015 in load_clip (CLIPLoader node)",
        "```",
    ]
    text = "\n".join(ln + " " if ln else ln for ln in lines)
    (proc,) = analyze_text(text, name="dump.txt").stack_processes
    names = [f.name for t in proc.threads for f in t.frames]
    assert names[:2] == ["__getitem__", "load_torch_file"]


def test_pyspy_frames_that_lost_their_header_and_indentation() -> None:
    """A paste of py-spy frames alone, each at the line's start (the columns aligned, a
    note after one of them): two such lines in a row are a dump of one thread; one alone,
    or such lines in a log, are not."""
    dump = "\n".join(
        [
            "recv            (zmq/sugar/socket.py:812)",
            "recv_pyobj      (zmq/sugar/socket.py:1006)   <- blocks here",
            "event_loop      (sglang/srt/managers/detokenizer_manager.py:97)",
        ]
    )
    (p,) = parse_stack_text(dump)
    (t,) = p.threads
    assert [f.name for f in t.frames] == ["recv", "recv_pyobj", "event_loop"]
    assert t.frames[1].line == 1006
    assert parse_stack_text("recv            (zmq/sugar/socket.py:812)") == []
    log = "\n".join(
        [
            "INFO 03-10 16:19:26 [llm_engine.py:123] one",
            "recv (zmq/sugar/socket.py:812)",
            "INFO 03-10 16:19:27 [llm_engine.py:123] two",
        ]
    )
    assert parse_stack_text(log) == []


def test_a_note_after_an_indented_pyspy_frame_is_left_out() -> None:
    dump = "\n".join(
        [
            'Thread 0x7F01 (active): "MainThread"',
            "    synchronize (torch/cuda/__init__.py:985)  # spins here",
            "    step (vllm/v1/engine/core.py:290)",
        ]
    )
    (p,) = parse_stack_text(dump)
    assert [f.name for f in p.threads[0].frames] == ["synchronize", "step"]


def test_bare_pyspy_frames_behind_a_process_prefix_keep_its_process() -> None:
    dump = "\n".join(
        [
            "(VllmWorker TP1 pid=4242) recv            (zmq/sugar/socket.py:812)",
            "(VllmWorker TP1 pid=4242) worker_busy_loop (vllm/v1/executor/multiproc_executor.py:6)",
        ]
    )
    (p,) = parse_stack_text(dump)
    assert [f.name for f in p.threads[0].frames] == ["recv", "worker_busy_loop"]
    assert p.rank == RankId(tp=1)


def test_a_markdown_code_fence_bounds_a_pasted_dump() -> None:
    """A reporter's paste in a code fence, a line of prose before it: the fence is where the
    text begins (a `frame #N:` window whose header was cut is read after it, as at the
    text's start), and the closing fence ends what is open as the text's end does (a
    traceback cut before its exception line, under a Ctrl-C, is one more interrupted
    process)."""
    from diag.analyze import analyze_text

    lib = "/env/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so"
    window = (
        f"frame #3: c10d::TCPStore::doWait(std::vector<std::string>) + 0x20 (0x7f1 in {lib})\n"
        f"frame #4: c10d::TCPStore::check(std::vector<std::string>) + 0x2a (0x7f2 in {lib})\n"
    )
    (clean,) = analyze_text(window).stack_processes
    fenced = f"The worker hangs, its stack:\n\n```text\n{window}```\nAny idea?\n"
    (proc,) = analyze_text(fenced).stack_processes
    assert proc.wait_site == clean.wait_site == "stack.dist_init"
    interrupted = (
        "Traceback (most recent call last):\n"
        '  File "/x/torch/_tensor.py", line 1088, in __len__\n'
        "    if torch._C._get_tracing_state():\n"
        "KeyboardInterrupt\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/detokenizer_manager.py", line 107, in event_loop\n'
        "    recv_obj = self.recv_from_scheduler.recv_pyobj()\n"
        '  File "/x/zmq/sugar/socket.py", line 972, in recv_pyobj\n'
        "    msg = self.recv(flags)\n"
    )
    sites = sorted(map(str, (p.wait_site for p in analyze_text(interrupted).stack_processes)))
    in_fence = analyze_text(f"Ctrl-C gave:\n```\n{interrupted}```\nthanks\n").stack_processes
    assert sorted(map(str, (p.wait_site for p in in_fence))) == sites
    assert len(sites) == 2


def test_lost_newlines_around_pyspy_headers_and_native_interpreter_frames() -> None:
    """A chat app's lost newlines: py-spy's process header glued after SGLang's watchdog
    line, a thread header glued after a line of prose or an old `ray stack` title, and two
    frames glued where one is a native frame in the interpreter (`(python3.12)`, no
    `.so`): each is cut apart again, and the rank and title of the watchdog's line stay."""
    from diag.analyze import analyze_text
    from diag.stacks.textdump import split_glued_dump

    assert split_glued_dump(
        "    PyThread_acquire_lock_timed (python3.12)     _shutdown (threading.py:1622)"
    ) == ["PyThread_acquire_lock_timed (python3.12)", "_shutdown (threading.py:1622)"]
    assert split_glued_dump(
        "the hung worker's stack: Thread 59633 (active): \"MainThread\""
    )[-1] == 'Thread 59633 (active): "MainThread"'
    # a process prefix before a header is the line's own, never cut off
    line = '(LLMRayActor pid=12) Thread 0x000078c75b7fe640 (most recent call first):'
    assert split_glued_dump(line) == [line]
    assert split_glued_dump(f"[rank3]: {line[21:]}") == [f"[rank3]: {line[21:]}"]
    text = (
        "[2026-07-14 08:34:44 TP6] Pyspy dump for PID 187 (py-spy dump --native --pid 187): "
        "Process 187: sglang::scheduler_TP6 Python v3.12.3 (/usr/bin/python3.12)\n"
        'Thread 187 (idle): "MainThread"     0x7f1398316d71 (libc.so.6)\n'
        "    PyThread_acquire_lock_timed (python3.12)     lock_wait (threading.py:1622)\n"
        "    _main (multiprocessing/spawn.py:135)\n"
    )
    (proc,) = analyze_text(text).stack_processes
    assert (proc.pid, proc.title, proc.rank and proc.rank.tp) == (187, "sglang::scheduler_TP6", 6)
    assert [f.name for f in proc.threads[0].frames][1:3] == [
        "PyThread_acquire_lock_timed", "lock_wait"]


def test_lost_newlines_in_gdb_frames_without_an_address() -> None:
    """gdb prints frame #0 of a syscall wrapper without its address (`#0  __lll_lock_wait
    () at lowlevellock.S:135`): glued before frame #1 the line is still cut into both."""
    from diag.analyze import analyze_text

    lib = "/x/torch/lib/libtorch_cuda.so"
    lines = [
        "#0  __lll_lock_wait () at ../sysdeps/unix/sysv/linux/x86_64/lowlevellock.S:135",
        "#1  0x00007f4a62042025 in __GI___pthread_mutex_lock (mutex=0x7f49f25b9140) at "
        "../nptl/pthread_mutex_lock.c:80",
        f"#2  0x00007f49f33cd8fa in c10d::ProcessGroupNCCL::broadcast(std::vector<at::Tensor>&) "
        f"() from {lib}",
    ]
    clean = analyze_text("\n".join(lines) + "\n").stack_processes
    glued = analyze_text(" ".join(lines[:2]) + "\n" + lines[2] + "\n").stack_processes
    assert [p.wait_site for p in glued] == [p.wait_site for p in clean] == ["stack.gil_or_lock"]
    assert [f.name for f in glued[0].threads[0].frames] == [
        f.name for f in clean[0].threads[0].frames]


def test_lost_newlines_in_a_c10_frame_list() -> None:
    """torch's `frame #N: symbol + 0xoff (0xaddr in lib.so)` lines with their newlines
    lost (a space left, or nothing) are cut apart again: the place in parentheses holds a
    space, so each `frame #N:` is what marks a frame."""
    from diag.analyze import analyze_text

    lib = "/env/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so"
    lines = [
        "Exception raised from doWait at /pytorch/torch/csrc/distributed/c10d/TCPStore.cpp:550 "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f5 in "
        "/env/lib/python3.12/site-packages/torch/lib/libc10.so)",
        f"frame #1: c10d::TCPStore::doWait(c10::ArrayRef<std::string>) + 0x1a (0x7f6 in {lib})",
        f"frame #2: c10d::TCPStore::check(std::vector<std::string> const&) + 0x2a (0x7f7 in {lib})",
    ]
    clean = analyze_text("\n".join(lines) + "\n").stack_processes
    assert [p.wait_site for p in clean] == ["stack.dist_init"]
    for sep in (" ", ""):
        got = analyze_text(sep.join(lines) + "\n").stack_processes
        assert [p.wait_site for p in got] == ["stack.dist_init"], repr(sep)
        assert [f.name for f in got[0].threads[0].frames] == [
            f.name for f in clean[0].threads[0].frames], repr(sep)


def test_faulthandler_threads_with_no_python_frame_are_a_process_of_native_threads() -> None:
    # CPython Python/traceback.c dump_traceback (3.3-3.14) writes `<no Python frame>` for a
    # thread that runs no Python, `<tstate is freed>` for a freed one, and 3.13+'s
    # _Py_DumpTracebackThreads `Garbage-collecting` under the current thread's header
    text = (
        "Fatal Python error: none_dealloc: deallocating None\n"
        "Python runtime state: initialized\n\n"
        "Thread 0x00007fd0e57fe640 (most recent call first):\n"
        "  <no Python frame>\n\n"
        "Thread 0x00007fd0e5fff640 (most recent call first):\n"
        "  <tstate is freed>\n"
    )
    (p,) = parse_stack_text(text)
    assert p.mode == "faulthandler" and len(p.threads) == 2
    assert all(not t.frames for t in p.threads)
    assert p.wait_site == "stack.idle_loop"
    # with a log collector's time stamp before every line
    stamped = "\n".join(f"2025-06-22 03:09:55  {x}" for x in text.splitlines())
    (q,) = parse_stack_text(stamped)
    assert q.wait_site == "stack.idle_loop" and len(q.threads) == 2


def test_faulthandler_headers_without_any_marker_or_frame_are_no_process() -> None:
    # a thread header whose frames the paste lost says nothing: no process is made of it
    text = (
        "Thread 0x00007fd0e57fe640 (most recent call first):\n\n"
        "Thread 0x00007fd0e5fff640 (most recent call first):\n"
    )
    assert parse_stack_text(text) == []


def test_faulthandler_garbage_collecting_line_is_not_a_frame() -> None:
    text = (
        "Current thread 0x00007f10 (most recent call first):\n"
        "  Garbage-collecting\n"
        '  File "/x/torch/cuda/__init__.py", line 985 in synchronize\n'
        '  File "/x/train.py", line 12 in step\n'
    )
    (p,) = parse_stack_text(text)
    assert [f.name for f in p.threads[0].frames] == ["synchronize", "step"]
    assert p.wait_site == "stack.cuda_sync"


def test_pyspy_thread_header_retyped_with_the_name_before_the_state() -> None:
    # py-spy prints `Thread 0x7F.. (active): "name"`; a re-typed header puts the quoted
    # name first and drops the id: `Thread "name" (active):`
    text = (
        'Thread "engine-0" (active):\n'
        "    _serialize (app/cache/store.py:737)\n"
        "    step (app/scheduler.py:120)\n\n"
        'Thread "writer" (idle):\n'
        "    wait (threading.py:363)\n"
        "    get (queue.py:210)\n"
    )
    (p,) = parse_stack_text(text)
    assert [(t.name, t.idle) for t in p.threads] == [("engine-0", False), ("writer", True)]


def test_an_elided_faulthandler_thread_is_not_read_as_a_parked_helper() -> None:
    # CPython's dump_traceback writes `  ...` after 100 frames; a reporter writes `...` where
    # they cut: the thread's outer frames (main thread or helper) are out of sight
    head = "Timeout (0:25:00)!\nThread 0x0000712058fcc640 (most recent call first):\n"
    frame = '  File "/usr/lib/python3.12/threading.py", line 359 in wait\n'
    (whole,) = parse_stack_text(head + frame)
    assert whole.wait_site == "stack.idle_loop"  # a parked thread, no main thread in sight
    (cut,) = parse_stack_text(head + frame + "  ...\n")
    assert cut.threads[0].elided and len(cut.threads[0].frames) == 1
    assert cut.wait_site == "stack.gil_or_lock"  # the Condition's lock, whoever waits in it


def test_lldb_backtrace_of_every_thread() -> None:
    # lldb's `bt all` (thread-stop-format and frame-format of lldb 10-19), its process line
    text = (
        "(lldb) process attach --pid 4242\n"
        "Process 4242 stopped\n"
        "* thread #1, name = 'python3', stop reason = signal SIGSTOP\n"
        "  * frame #0: 0x00007f3c5a4a3117 libc.so.6`__futex_abstimed_wait_common + 199\n"
        "    frame #1: 0x00007f3b9c4e2b1b libcuda.so.1`___lldb_unnamed_symbol1234 + 91\n"
        "    frame #2: 0x00007f3c1a2b3c4d libcudart.so.12`cudaStreamSynchronize + 301\n"
        "    frame #3: 0x00007f3c2a3b4c5d libtorch_cuda.so`"
        "c10::cuda::stream_synchronize(CUstream_st*) + 61\n"
        "  thread #2, name = 'pt_nccl_watchdg'\n"
        "    frame #0: 0x00007f3c5a4a3117 libc.so.6`__futex_abstimed_wait_common + 199\n"
        "    frame #1: 0x000100003f2c a.out`main(argc=1, argv=0x7ff7) at main.c:10:5\n"
        "(lldb) detach\n"
    )
    (p,) = parse_stack_text(text)
    assert (p.pid, p.mode, len(p.threads)) == (4242, "lldb", 2)
    main = p.threads[0]
    assert main.name == "MainThread"
    assert [f.name for f in main.frames] == [
        "__futex_abstimed_wait_common", "0x00007f3b9c4e2b1b", "cudaStreamSynchronize",
        "c10::cuda::stream_synchronize",
    ]
    assert all(f.native for f in main.frames)
    assert p.threads[1].name == "pt_nccl_watchdg" and p.threads[1].frames[1].name == "main"
    assert p.wait_site == "stack.cuda_sync"
    # `thread list`'s form of the header: the tid after the index
    (q,) = parse_stack_text(
        "* thread #1: tid = 0x1a2b, 0x00007f3c5a4a3117 libc.so.6`__futex + 199, "
        "name = 'python3', stop reason = signal SIGSTOP\n"
        "  * frame #0: 0x00007f3c5a4a3117 libc.so.6`pthread_mutex_lock + 9\n"
    )
    assert q.threads[0].thread_id == 0x1A2B and q.wait_site == "stack.gil_or_lock"


def test_gdb_thread_apply_all_py_bt_is_one_process_of_its_threads() -> None:
    # CPython's gdb extension (Tools/gdb/libpython.py py-bt) under `thread apply all`: each
    # gdb thread header, then its Python stack innermost first
    text = (
        "(gdb) thread apply all py-bt\n\n"
        'Thread 2 (Thread 0x7f33aa7fc640 (LWP 2618) "python3"):\n'
        "Traceback (most recent call first):\n"
        '  File "/usr/lib/python3.10/threading.py", line 320, in wait\n'
        "    waiter.acquire()\n"
        '  File "/usr/lib/python3.10/queue.py", line 171, in get\n\n'
        'Thread 1 (Thread 0x7f33b2b2f740 (LWP 2600) "python3"):\n'
        "Traceback (most recent call first):\n"
        "  <built-in method _cuda_synchronize of module object at remote 0x7f33a1b2c3d0>\n"
        '  File "/x/torch/cuda/__init__.py", line 985, in synchronize\n'
        '  File "/app/train.py", line 40, in step\n'
    )
    (p,) = parse_stack_text(text)
    assert p.pid == 2600 and [t.thread_id for t in p.threads] == [2618, 2600]
    assert [f.name for f in p.threads[0].frames] == ["wait", "get"]
    assert p.threads[1].name == "MainThread" and p.wait_site == "stack.cuda_sync"


def test_a_collectors_stamp_that_begins_inside_a_dump_is_taken_off() -> None:
    # a collector that stamps the lines after its own start: the header bare, the frames
    # stamped (`2025-06-22 03:09:55  ` + the frame's own indentation), once or twice
    text = (
        'Thread 432919 (idle): "MainThread"\n'
        "    0x155555277197 (libc.so.6)\n"
        "2025-06-22 03:09:22      pthread_cond_wait (libc.so.6)\n"
        "2025-06-22 03:09:22,120 2025-06-22 03:09:22      torch::autograd::ReadyQueue::pop "
        "(libtorch_cpu.so)\n"
        "2025-06-22T03:09:22Z      backward (torch/autograd/__init__.py:200)\n"
    )
    (p,) = parse_stack_text(text)
    assert [f.name for f in p.threads[0].frames] == [
        "0x155555277197", "pthread_cond_wait", "torch::autograd::ReadyQueue::pop", "backward",
    ]
    assert p.wait_site == "stack.gil_or_lock"


def test_macos_sample_call_graph_heaviest_path_of_each_thread() -> None:
    # macOS `sample PID`: each thread's call tree outermost first, the heaviest child first
    text = (
        "Analysis of sampling python3.12 (pid 4242) every 1 millisecond\n"
        "Call graph:\n"
        "    2630 Thread_6245862   DispatchQueue_1: com.apple.main-thread  (serial)\n"
        "    + 2630 start  (in dyld) + 1942  [0x18a6a60e0]\n"
        "    +   2630 main  (in python3.12) + 104  [0x1024f3f4c]\n"
        "    +     2600 mlx::core::eval(std::vector<mlx::core::array>)  (in libmlx.dylib) + 72"
        "  [0x3000]\n"
        "    +     ! 2600 __psynch_cvwait  (in libsystem_kernel.dylib) + 8  [0x18a9ed5cc]\n"
        "    +     30 ???  (in <unknown binary>)  [0x600002b3c000]\n"
        "    2630 Thread_6245900\n"
        "    + 2630 thread_start  (in libsystem_pthread.dylib) + 8  [0x18aa2bb80]\n"
        "    +   2630 __semwait_signal  (in libsystem_kernel.dylib) + 8  [0x18a9ed000]\n"
        "\n"
        "Total number in stack (recursive counted multiple, when >=5):\n"
        "        5       __psynch_cvwait  (in libsystem_kernel.dylib) + 0  [0x18a9ed5c4]\n"
    )
    (p,) = parse_stack_text(text)
    assert p.mode == "sample" and [t.thread_id for t in p.threads] == [6245862, 6245900]
    main = p.threads[0]
    assert main.name == "MainThread"
    assert [f.name for f in main.frames] == ["__psynch_cvwait", "mlx::core::eval", "main", "start"]
    assert p.wait_site == "stack.cuda_sync"  # MLX's eval waits for the Metal stream
    assert [f.name for f in p.threads[1].frames] == ["__semwait_signal", "thread_start"]
