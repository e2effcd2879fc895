"""The rules on real error output captured on an H200 host (fixtures/rules_gpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyze import analyze

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "rules_gpu"

# file -> (the root finding, text its message must hold, the cascades that must follow it)
EXPECTED = {
    "cuda-oom.log": ("cuda.oom", "Tried to allocate 372.53 GiB", {"python.exception"}),
    # the kernel's own assertion, printed first, names the kernel and the condition
    "cuda-device-assert.log": ("cuda.error", "index out of bounds", {"python.exception"}),
    "cuda-invalid-ordinal.log": ("cuda.no_device", "invalid device ordinal", {"python.exception"}),
    "cuda-no-gpu.log": ("cuda.no_device", "No CUDA GPUs are available", {"python.exception"}),
    "cuda-graph-capture-sync.log": (
        "cuda.error",
        "operation not permitted when stream is capturing",
        {"python.exception"},
    ),
    "nccl-watchdog-timeout.log": (
        "nccl.timeout",
        "OpType=ALLREDUCE",
        {"process.killed", "python.exception"},
    ),
    "nccl-duplicate-gpu.log": ("nccl.error", "Duplicate GPU detected", {"python.exception"}),
    "nccl-bad-ifname.log": ("nccl.error", "no socket interface found", {"python.exception"}),
    "gloo-recv-timeout.log": (
        "nccl.timeout",
        "Timed out waiting 5000ms for recv operation",
        {"python.exception"},
    ),
    "dist-store-port-in-use.log": ("dist.port_in_use", "EADDRINUSE", {"python.exception"}),
    "dist-store-refused.log": (
        "dist.connect_failed",
        "timed out after 8000ms while trying to connect",
        {"python.exception"},
    ),
    "inductor-no-cc.log": ("compile.error", "'/nonexistent/gcc'", {"python.exception"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_captured_error_gives_one_root_and_its_cascades(name: str) -> None:
    root_id, text, cascades = EXPECTED[name]
    path = CAPTURED / name
    findings = {f.id: f for f in analyze([path]).findings}
    root = findings[root_id]
    assert root.role == "root" and root.severity == "error"
    assert text in root.message
    for cid in cascades:
        assert findings[cid].role == "cascade", cid
        assert findings[cid].cascade_of == root_id
    roots = [f.id for f in findings.values() if f.role == "root"]
    assert roots == [root_id], f"one root expected, got {roots}"
    lines = path.read_text().splitlines()
    for ev in root.evidence:
        assert ev.text.strip()[:40] in lines[ev.line - 1], (ev.line, ev.text)


def test_every_capture_is_covered() -> None:
    assert {p.name for p in CAPTURED.glob("*.log")} == set(EXPECTED)
