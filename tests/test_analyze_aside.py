"""The finish's stacks worked out in a forked child (diag.aside): the same answer as the
serial path, and every failure of the child answered by computing here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import diag.analyze as analyze_mod
from diag.aside import Aside, can_fork
from diag.report.json_out import render_json

needs_fork = pytest.mark.skipif(not can_fork(), reason="no fork here (not Linux, or threads)")

STACKS = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "corpus"
LAB = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "lab"
FILLER = "".join(
    f"[2026-01-29 13:{i // 60 % 60:02d}:{i % 60:02d} TP0] Decode batch. #running-req: 1, "
    f"#token: {i}, gen throughput (token/s): 41.2\n"
    for i in range(200)
)
TRACEBACK = (
    "[2026-01-29 14:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2406, in run\n'
    "    scheduler.event_loop_overlap()\n"
    '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", '
    "line 2050, in all_reduce\n"
    "    work = group.allreduce([tensor], opts)\n"
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "unhandled cuda error\n"
)


def _square(n: int) -> int:
    return n * n


def _boom() -> int:
    raise ValueError("boom")


@needs_fork
def test_the_child_answers() -> None:
    job = Aside(lambda: (_square(12), "x" * 200_000))  # more than a pipe's buffer
    assert job.forked
    assert job.result() == (144, "x" * 200_000)
    assert not job.forked


def test_without_fork_it_is_computed_here() -> None:
    job = Aside(lambda: _square(3), fork=False)
    assert not job.forked
    assert job.result() == 9


@needs_fork
def test_an_exception_in_the_child_is_raised_here() -> None:
    job = Aside(_boom)
    assert job.forked
    with pytest.raises(ValueError, match="boom"):
        job.result()


@needs_fork
def test_an_answer_that_does_not_pickle_is_computed_here() -> None:
    here = os.getpid()
    job = Aside(lambda: (lambda: here))  # a lambda does not pickle
    assert job.forked
    got = job.result()
    assert got() == here


@needs_fork
def test_close_kills_and_reaps_a_child_not_waited_for() -> None:
    job = Aside(lambda: [_square(n) for n in range(10)])
    pid = job._pid
    assert pid is not None
    job.close()
    assert not job.forked
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    job.close()  # twice: nothing


def _logs(tmp_path: Path) -> list[Path]:
    out = []
    for i, case in enumerate(sorted(p for p in STACKS.iterdir() if p.is_dir())):
        log = tmp_path / f"{i}.log"
        log.write_text(FILLER + (case / "dump.txt").read_text() + FILLER)
        out.append(log)
    tb = tmp_path / "traceback.log"
    tb.write_text(FILLER + TRACEBACK + FILLER)
    out.append(tb)
    out.append(LAB / "gpu-h200x2-flight-recorder" / "stdout.txt")
    return out


@needs_fork
@pytest.mark.parametrize("prefilter", [False, True], ids=["lines", "prefilter"])
def test_forked_stacks_give_the_serial_answer(
    prefilter: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forks: list[bool] = []
    start = Aside._start

    def counted(self: Aside[object]) -> None:
        start(self)
        forks.append(self.forked)

    monkeypatch.setattr(Aside, "_start", counted)
    logs = _logs(tmp_path)
    for log in logs:
        monkeypatch.setattr(analyze_mod, "ASIDE_MIN_RECORDS", 10**9)
        serial = analyze_mod.analyze([log], prefilter=prefilter)
        monkeypatch.setattr(analyze_mod, "ASIDE_MIN_RECORDS", 0)
        forked = analyze_mod.analyze([log], prefilter=prefilter)
        assert forked == serial
        assert render_json(forked) == render_json(serial)
    assert forks == [True] * len(logs)
    assert any(analyze_mod.analyze([log]).stack_processes for log in logs)
