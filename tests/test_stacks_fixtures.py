"""The labelled stack dumps (fixtures/stacks/corpus) and the lab's real dumps
(fixtures/stacks/lab): each names where the stuck thread waits."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from diag.model import RankId, Record, StackProcess
from diag.stacks.classify import apply_gpu_facts, classify_frames
from diag.stacks.merge import group_stacks, outlier_tp_ranks, outliers
from diag.stacks.textdump import extract_stack_processes, parse_stack_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "stacks"
CASES = sorted(p.name for p in (FIX / "corpus").iterdir() if p.is_dir())
LAB = FIX / "lab"


def _dump(case: str) -> list[StackProcess]:
    path = FIX / "corpus" / case / "dump.txt"
    return parse_stack_text(path.read_text(), source=str(path))


def _lab(name: str) -> list[StackProcess]:
    path = LAB / name
    return parse_stack_text(path.read_text(errors="replace"), source=str(path))


def _by_pid(procs: list[StackProcess]) -> dict[int, StackProcess]:
    return {p.pid: p for p in procs if p.pid is not None}


def test_all_seven_corpus_cases_are_present() -> None:
    assert len(CASES) == 7


@pytest.mark.parametrize("case", CASES)
def test_corpus_wait_site(case: str) -> None:
    want = tomllib.loads((FIX / "corpus" / case / "case.toml").read_text())["wait_site"]
    procs = _dump(case)
    assert want in {p.wait_site for p in procs}, [(p.pid, p.wait_site) for p in procs]


def test_dsv32_the_gloo_recv_is_pp2_tp1_and_the_fragment_is_not_classified() -> None:
    procs = _dump("dsv32-pp-gloo-recv-hang")
    fragment, rank = procs
    # The headerless tail of another rank's dump: only helper threads (tqdm, watchdog).
    assert fragment.pid is None and fragment.wait_site is None
    assert [t.name for t in fragment.threads] == [None, "Thread-2 (_watchdog_thread)"]
    assert rank.pid == 88693 and rank.rank == RankId(pp=2, tp=1)
    assert rank.wait_site == "stack.nccl_collective" and rank.wait_thread == 88693
    assert rank.threads[0].frames[2].name == "gloo::transport::tcp::UnboundBuffer::waitRecv"


def test_glm45_the_forward_thread_not_the_cut_main_thread() -> None:
    (proc,) = _dump("glm45-gb200-nccl-window-register-forward-thread")
    assert proc.wait_site == "stack.nccl_collective"
    assert proc.wait_thread == 4113894  # "Thread-2 (forward_thread_func)"
    chosen = next(t for t in proc.threads if t.thread_id == proc.wait_thread)
    assert chosen.frames[0].name == "ncclCommWindowRegister"


def test_glm52_main_thread_in_shutdown_lock_with_rank_from_title() -> None:
    (proc,) = _dump("glm52-pd-specdec-scheduler-shutdown-lock")
    assert (proc.pid, proc.title, proc.rank) == (187, "sglang::scheduler_TP6", RankId(tp=6))
    assert proc.wait_site == "stack.gil_or_lock" and proc.wait_thread == 187
    assert [t.name for t in proc.threads] == ["MainThread", "tqdm_monitor", "InductorSubproc"]


def test_p2p_ctrl_c_traceback_is_innermost_first() -> None:
    (proc,) = _dump("vllm-p2p-cache-probe-pipe-wait")
    assert proc.mode == "traceback" and proc.rank == RankId(tp=0)
    names = [f.name for f in proc.threads[0].frames]
    assert names == ["_recv", "_recv_bytes", "recv_bytes"]
    assert proc.threads[0].frames[0].line == 395


def test_faulthandler_without_header() -> None:
    (proc,) = _dump("vllm-v0-tp-allreduce-faulthandler")
    frames = proc.threads[0].frames
    assert proc.mode == "faulthandler"
    assert (frames[0].name, frames[0].line) == ("all_reduce", 2050)
    assert frames[0].filename.endswith("torch/distributed/distributed_c10d.py")


@pytest.mark.parametrize("case", CASES)
def test_corpus_through_log_shaped_records(case: str) -> None:
    """The same dumps as a log parser hands them over: one record whose continuation
    carries the following lines (here: the whole dump after its first line)."""
    text = (FIX / "corpus" / case / "dump.txt").read_text().splitlines()
    record = Record(
        source="x.log", line=1, message=text[0], raw=text[0], continuation=tuple(text[1:])
    )
    plain = [(p.pid, p.wait_site, p.wait_thread) for p in _dump(case)]
    assert [(p.pid, p.wait_site, p.wait_thread) for p in extract_stack_processes([record])] == plain


# ---------------------------------------------------------------------------------------
# The lab's real dumps


def test_gloo_hang_ranks_0_to_2_in_collective_rank_3_outlier() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/gloo-hang-pyspy.txt"))
    assert set(procs) == {9041, 9083, 9084, 9085, 9086}
    # torchrun starts local ranks in order: pids 9083..9086 are ranks 0..3.
    ranks = [replace(procs[9083 + r], rank=RankId(tp=r)) for r in range(4)]
    assert [p.wait_site for p in ranks[:3]] == ["stack.nccl_collective"] * 3
    assert ranks[3].wait_site != "stack.nccl_collective"
    # 9083 was dumped four times by py-spy (python, native, locals, subprocesses) and once
    # by gdb's `thread apply all bt 8`, and never moved.
    assert procs[9083].samples == 5 and procs[9083].moving is False
    assert any(f.name == "c10d::Work::wait" for f in procs[9083].threads[0].frames)
    groups = group_stacks(ranks)
    assert [g.members for g in groups] == [("TP0", "TP1", "TP2"), ("TP3",)]
    assert outliers(groups) == ["TP3"]
    assert outlier_tp_ranks(ranks, groups) == (3,)
    # torchrun's elastic agent polls its workers (SimpleElasticAgent._invoke_run): idle
    assert procs[9041].wait_site == "stack.idle_loop"
    # The launcher in the same groups changes nothing for the TP ranks.
    everyone = [*ranks, procs[9041]]
    assert outlier_tp_ranks(everyone, group_stacks(everyone)) == (3,)


def test_gloo_hang_embedded_json_dump_is_read() -> None:
    text = (LAB / "cpu-vllm-sglang/gloo-hang-pyspy.txt").read_text()
    start = text.index("=================== py-spy dump --json --pid 9086")
    end = text.index("=================== /proc state")
    (proc,) = parse_stack_text(text[start:end])
    assert proc.pid == 9086 and proc.mode == "json"
    assert [f.name for f in proc.threads[0].frames] == ["main", "<module>"]
    assert proc.threads[0].frames[0].filename == "/tmp/gloo/hang.py"


def test_vllm_hang_a_tp0_spins_in_shm_allreduce_enginecore_dequeue() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/vllm-cpu-hang-sigstop-pyspy.txt"))
    tp0, tp1, core = procs[27616], procs[27617], procs[26900]
    assert (tp0.rank, tp1.rank) == (RankId(tp=0), RankId(tp=1))
    assert tp0.wait_site == "stack.nccl_collective"
    assert any(f.name == "shm_allreduce" and f.native for f in tp0.threads[0].frames)
    assert core.wait_site == "stack.ipc_wait"
    core_main = next(t for t in core.threads if t.thread_id == core.wait_thread)
    assert any("MessageQueue.dequeue" in f.name for f in core_main.frames)
    # The stopped rank sat in an Inductor file lock (NOTES.md).
    assert tp1.wait_site == "stack.jit_compile"
    groups = group_stacks([tp0, tp1])
    assert outliers(groups) == ["TP1"]  # 2 ranks, 2 stacks: the one not in the collective


def test_vllm_hang_b_tp0_waits_until_ready() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/vllm-cpu-hang2-eager-setsid-pyspy.txt"))
    tp0 = procs[6333]
    assert tp0.wait_site == "stack.ipc_wait"
    names = [f.name for t in tp0.threads if t.thread_id == tp0.wait_thread for f in t.frames]
    assert "MessageQueue.wait_until_ready" in names


def test_vllm_serving_idle_engine_core_is_idle_not_its_helper_threads() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/vllm-cpu-pyspy.txt"))
    assert procs[22019].wait_site == "stack.idle_loop"
    assert procs[22019].wait_thread == 22019
    assert procs[21948].wait_site == "stack.idle_loop"  # launcher: uvloop Runner.run
    # the workers wait in worker_busy_loop's MessageQueue.dequeue for the next command
    assert procs[22148].wait_site == procs[22149].wait_site == "stack.idle_loop"


def test_vllm_compile_both_workers_in_jit() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/vllm-cpu-pyspy-during-compile.txt"))
    assert procs[22148].wait_site == procs[22149].wait_site == "stack.jit_compile"


def test_sglang_hang_tp0_in_gloo_broadcast_from_broadcast_pyobj() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/sglang-cpu-hang-sigstop-pyspy.txt"))
    tp0 = procs[2221]
    assert tp0.rank == RankId(tp=0) and tp0.wait_site == "stack.nccl_collective"
    names = [f.name for f in tp0.threads[0].frames]
    assert names.index("broadcast") < names.index("broadcast_pyobj")
    assert "c10d::Work::wait" in names  # the latest native dump was kept
    assert tp0.samples == 6 and tp0.moving is True  # 3 snapshots minutes apart
    # the detokenizer waits in its event loop's zmq recv_pyobj for the scheduler's next
    # output, every thread idle: an idle loop (LABELS.md), not an IPC wait of a call
    assert procs[2223].wait_site == "stack.idle_loop"


def test_sglang_idle_scheduler_on_idle() -> None:
    procs = _by_pid(_lab("cpu-vllm-sglang/sglang-cpu-pyspy.txt"))
    sched = procs[32718]
    assert sched.title == "sglang::scheduler" and sched.rank is None
    assert sched.wait_site == "stack.idle_loop"
    # the detokenizer in its event loop's recv, the resource tracker in its read loop
    assert procs[32719].wait_site == procs[32717].wait_site == "stack.idle_loop"
    # The TP=2 schedulers were busy in freeze_gc (active+gil): no wait site is claimed.
    assert procs[707].wait_site is None and procs[707].threads[0].owns_gil is True


def test_gpu_lab_nccl_rank0_sync_becomes_collective_with_gpu_facts() -> None:
    rank0 = _lab("gpu-h200x2-nccl-hang/nccl-rank0-native.txt")[0]
    rank1 = _lab("gpu-h200x2-nccl-hang/nccl-rank1-native.txt")[0]
    assert rank0.wait_site == "stack.cuda_sync"  # the stack alone
    assert rank0.threads[0].frames[9].name == "cuCtxSynchronize_v2"
    ranks = [replace(rank0, rank=RankId(tp=0)), replace(rank1, rank=RankId(tp=1))]
    # Measured: GPU0 100% (NCCL kernel spinning), GPU1 0% (README.md).
    ranks = apply_gpu_facts(ranks, {603: 100.0, 604: 0.0})
    assert [p.wait_site for p in ranks] == ["stack.nccl_collective", rank1.wait_site]
    assert outlier_tp_ranks(ranks, group_stacks(ranks)) == (1,)
    # Both GPUs idle: no reason to call it a collective.
    same = apply_gpu_facts([rank0, rank1], {603: 0.0, 604: 0.0})
    assert same[0].wait_site == "stack.cuda_sync"


def test_gpu_lab_cpu_hang_both_ranks_in_store_wait_one_group() -> None:
    native = [_lab(f"gpu-h200x2-nccl-hang/cpu-rank{r}-native.txt")[0] for r in (0, 1)]
    assert [p.wait_site for p in native] == ["stack.dist_init"] * 2
    ranks = [replace(p, rank=RankId(tp=r)) for r, p in enumerate(native)]
    groups = group_stacks(ranks)
    assert len(groups) == 1 and outliers(groups) == []
    # Python-only view: the wait inside C++ is invisible, and no site is invented.
    python = _lab("gpu-h200x2-nccl-hang/cpu-rank0-py.txt")[0]
    assert python.wait_site is None


def test_flight_recorder_dumps_pystack_and_pyspy_agree() -> None:
    procs = _lab("gpu-h200x2-flight-recorder/dumps.txt")
    pystack = [p for p in procs if p.mode == "pystack"]
    assert pystack, "pystack dumps were not read"
    rank0 = [p for p in pystack if p.threads[0].thread_id == 602]
    assert {p.wait_site for p in rank0} == {"stack.cuda_sync"}
    native_tail = rank0[-1].threads[0].frames
    assert any(f.name == "cuCtxSynchronize_v2" and f.native for f in native_tail)
    assert _by_pid(procs)[602].wait_site == "stack.cuda_sync"


def test_public_npu_scheduler_blocked_in_a_device_copy() -> None:
    path = FIX / "public" / "sglang-npu-watchdog-to-device.txt"
    proc, failed = parse_stack_text(path.read_text())
    assert (proc.pid, proc.rank) == (163685, RankId(tp=0))
    assert proc.wait_site == "stack.cuda_sync" and proc.wait_thread == 163685
    # helper threads (Inductor reader, tqdm, watchdog, queue feeder) were skipped
    assert len(proc.threads) == 6
    # the watchdog's two failed attempts on the next pid: one process, no stack, the error
    assert (failed.pid, failed.threads, failed.wait_site) == (163686, (), None)
    assert failed.outcome == "not_found" and failed.samples == 2
    assert failed.error is not None and "Failed to get process executable name" in failed.error
    assert [g.members for g in group_stacks([proc, failed])] == [("TP0",)]


def test_public_sglang_scheduler_in_a_kernel_op_behind_the_op_dispatcher() -> None:
    """sglang#24588: the innermost frame is torch's generic OpOverload.__call__; the
    sgl-kernel wrapper that called it names the wait (and py-spy shows the thread active
    without the GIL, in a native call)."""
    path = FIX / "public" / "sglang-eagle-extend-sgl-kernel-quant-active.txt"
    (proc,) = parse_stack_text(path.read_text())
    (thread,) = proc.threads
    assert (thread.idle, thread.owns_gil) == (False, False)
    assert thread.frames[0].name == "__call__" and thread.frames[1].filename.startswith(
        "sgl_kernel"
    )
    assert proc.wait_site == "stack.cuda_sync" and proc.wait_thread == 2897
    site, rule = classify_frames(thread.frames)  # the frames alone already say it
    assert (site, rule and rule.id) == ("stack.cuda_sync", "gpu-kernel-leaf")


# ---------------------------------------------------------------------------------------
# D1's own GPU lab run (2x H200, torch 2.11 + NCCL, py-spy 0.4.3; gpu_hangs.py beside it):
# rank 1 never joins; each file has both ranks' --native and Python-only text dumps and
# the GPUs' utilisation; nccl-json-dumps.json has their --native --json dumps.
D1 = LAB / "gpu-h200x2-d1-nccl"


def _gpu_util(text: str) -> dict[int, float]:
    """GPU index -> mean utilisation, from the `# nvidia-smi index, util%:` line."""
    line = next(ln for ln in text.splitlines() if ln.startswith("# nvidia-smi"))
    readings: dict[int, list[float]] = {}
    for sample in line.split(":", 1)[1].split("|"):
        for pair in sample.split(";"):
            idx, util = (int(v) for v in pair.split(","))
            readings.setdefault(idx, []).append(util)
    return {i: sum(v) / len(v) for i, v in readings.items()}


@pytest.mark.parametrize(
    ("scenario", "site0", "util0"),
    [
        ("lazy-init", "stack.dist_init", 0.0),  # communicator bootstrap: GPUs idle
        ("item", "stack.cuda_sync", 100.0),  # a launch behind the spinning NCCL kernel
        ("blocking-wait", "stack.nccl_collective", 100.0),  # WorkNCCL::wait
    ],
)
def test_d1_gpu_lab_rank0_waits_rank1_is_the_odd_one(
    scenario: str, site0: str, util0: float
) -> None:
    text = (D1 / f"nccl-{scenario}.txt").read_text()
    rank0, rank1 = (replace(p, rank=RankId(tp=r)) for r, p in enumerate(parse_stack_text(text)))
    assert rank0.samples == rank1.samples == 2  # a --native and a Python-only dump each
    assert rank0.wait_site == site0
    util = _gpu_util(text)
    assert (util[0], util[1]) == (util0, 0.0)
    ranks = apply_gpu_facts([rank0, rank1], {rank0.pid: util[0], rank1.pid: util[1]})
    if util0 == 100.0:
        assert ranks[0].wait_site == "stack.nccl_collective"  # what the GPUs add
    else:
        assert ranks[0].wait_site == site0  # all GPUs idle: a CPU-side wait stays one
    assert outlier_tp_ranks(ranks, group_stacks(ranks)) == (1,)


def test_d1_gpu_lab_json_dumps_agree_with_the_text_dumps() -> None:
    import json

    from diag.stacks.pyspy_json import parse_pyspy_json

    dumps = json.loads((D1 / "nccl-json-dumps.json").read_text())
    for key, entry in dumps.items():
        scenario, rank = key.split("/")
        proc = parse_pyspy_json(entry["data"], pid=entry["pid"], title=None, mode="native")
        (text,) = [
            p
            for p in parse_stack_text((D1 / f"nccl-{scenario}.txt").read_text())
            if p.pid == entry["pid"]
        ]
        assert proc.wait_site == text.wait_site, key


def test_torch_failed_collective_report_after_a_timeout() -> None:
    """torch's own `Stack trace of the failed collective:` (frames without rank prefix)."""
    procs = _lab("gpu-h200x2-flight-recorder/stdout.txt")
    (report,) = [p for p in procs if p.mode == "c10d"]
    assert report.rank == RankId(tp=0) and report.line == 56
    assert report.wait_site == "stack.nccl_collective"
    names = [f.name for f in report.threads[0].frames]
    assert names[:3] == ["all_reduce", "wrapper", "capture_cuda_graphs_allreduce"]
    assert names[-1] == "<module>" and report.threads[0].frames[0].line == 3068
