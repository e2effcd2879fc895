"""with_python_frames: a --native dump whose unwinder lost the Python frames gets them back."""

from __future__ import annotations

from diag.collect.pyspy import with_python_frames
from diag.model import StackFrame, StackProcess, StackThread

WAIT = StackFrame("c10d::Work::wait", native=True)
COND = StackFrame("pthread_cond_wait", native=True)
BARRIER = StackFrame("barrier", "torch/distributed/distributed_c10d.py", 4800)
AFTER_LOAD = StackFrame("dist_barrier_after_load", "sglang/srt/model_executor/model_runner.py", 900)
LOAD = StackFrame("load_model", "sglang/srt/model_executor/model_runner.py", 700)


FULL = ["pthread_cond_wait", "c10d::Work::wait", "barrier", "dist_barrier_after_load", "load_model"]


def proc(*threads: tuple[int, tuple[StackFrame, ...]], mode: str) -> StackProcess:
    return StackProcess(
        pid=7,
        title="t",
        threads=tuple(StackThread(thread_id=tid, name=None, frames=f) for tid, f in threads),
        mode=mode,
    )


def names(sp: StackProcess) -> list[list[str]]:
    return [[f.name for f in t.frames] for t in sp.threads]


def test_native_only_thread_gets_the_python_frames_on_its_outer_end() -> None:
    native = proc((1, (COND, WAIT)), mode="native")
    python = proc((1, (BARRIER, AFTER_LOAD, LOAD)), mode="python")
    got = with_python_frames(native, python)
    assert names(got) == [FULL]
    assert got.mode == "native"


def test_a_truncated_unwind_keeps_its_frames_and_gains_the_outer_ones() -> None:
    native = proc((1, (COND, WAIT, BARRIER)), mode="native")
    python = proc((1, (BARRIER, AFTER_LOAD, LOAD)), mode="python")
    assert names(with_python_frames(native, python)) == [FULL]


def test_a_complete_native_dump_is_left_alone() -> None:
    native = proc((1, (COND, WAIT, BARRIER, AFTER_LOAD, LOAD)), mode="native")
    python = proc((1, (BARRIER, AFTER_LOAD, LOAD)), mode="python")
    assert with_python_frames(native, python) is native


def test_a_thread_that_moved_between_the_dumps_is_not_spliced() -> None:
    other = StackFrame("forward", "vllm/model.py", 10)
    native = proc((1, (COND, WAIT, other)), mode="native")
    python = proc((1, (BARRIER, AFTER_LOAD, LOAD)), mode="python")
    assert with_python_frames(native, python) is native


def test_threads_are_matched_by_id_not_by_position() -> None:
    native = proc((2, (COND,)), (1, (COND, WAIT)), mode="native")
    python = proc((1, (BARRIER, LOAD)), (2, ()), mode="python")
    assert names(with_python_frames(native, python)) == [
        ["pthread_cond_wait"],
        ["pthread_cond_wait", "c10d::Work::wait", "barrier", "load_model"],
    ]
    assert with_python_frames(native, None) is native
