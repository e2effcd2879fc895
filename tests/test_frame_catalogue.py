"""The source-derived frame -> phase catalogue (diag/data/frame_phases.tsv, written by
tools/frame_catalogue.py) and its use as diag.frames' fallback."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import diag.frames
from diag.frame_catalogue import catalogue_phase
from diag.frames import frame_phase

ROOT = Path(__file__).resolve().parent.parent
TSV = ROOT / "diag" / "data" / "frame_phases.tsv"
PHASES = {"dist_init", "weights_load", "kv_cache", "compile", "cuda_graph", "serving"}


def _rows() -> dict[tuple[str, str], tuple[str, str]]:
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for row in TSV.read_text(encoding="utf-8").splitlines():
        if row.startswith("#") or row.startswith("framework\t"):
            continue
        fw, path, qual, phase, releases = row.split("\t")
        assert fw in ("vllm", "sglang") and path.startswith(f"{fw}/"), row
        assert phase in PHASES, row
        assert releases, row
        out[(path, qual)] = (phase, releases)
    return out


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "frame_catalogue_tool", ROOT / "tools" / "frame_catalogue.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("path", "qual", "phase"),
    [
        # vLLM V1's KV sizing (engine core's _initialize_kv_caches -> kv_cache_utils)
        ("vllm/v1/core/kv_cache_utils.py", "get_max_concurrency_for_kv_cache_config", "kv_cache"),
        ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner.initialize_kv_cache_tensors",
         "kv_cache"),
        # capture helpers
        ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._capture_cudagraphs",
         "cuda_graph"),
        ("sglang/srt/model_executor/cuda_graph_runner.py",
         "CudaGraphRunner.capture_one_batch_size", "cuda_graph"),
        # the API server's output loop, run once the engine is ready
        ("vllm/v1/engine/core_client.py", "AsyncMPClient.get_output_async", "serving"),
    ],
)
def test_known_rows(path: str, qual: str, phase: str) -> None:
    assert _rows()[(path, qual)][0] == phase


@pytest.mark.parametrize(
    ("path", "qual"),
    [
        # reached from serving and from every start-up step: no phase
        ("vllm/distributed/parallel_state.py", "get_tp_group"),
        # the dummy forward that profile_run, capture_model and compile warm-up all run
        ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._dummy_run"),
    ],
)
def test_shared_functions_have_no_row(path: str, qual: str) -> None:
    assert (path, qual) not in _rows()


def test_lookup_by_frame_path() -> None:
    name = "get_max_concurrency_for_kv_cache_config"
    for path in (
        "/usr/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py",
        "/home/me/vllm/vllm/v1/core/kv_cache_utils.py",  # a checkout named vllm
        "/vllm/v1/core/kv_cache_utils.py",  # a relative path, as frames.py passes it
    ):
        assert catalogue_phase(path, name) == "kv_cache", path
    assert catalogue_phase("/x/other/v1/core/kv_cache_utils.py", name) is None
    assert catalogue_phase("/x/vllm/v1/core/kv_cache_utils.py", "no_such_function") is None
    assert catalogue_phase("/x/vllm/distributed/parallel_state.py", "get_tp_group") is None


def test_frames_fallback_only_after_the_rules() -> None:
    # no hand-written rule names these: the catalogue's phase
    core_client = "/x/vllm/v1/engine/core_client.py"
    assert frame_phase(core_client, "get_output_async") == "serving"
    # (is_kv_cache_spec_uniform, the example until 2026-12-06, has no row since vLLM 0.31.0
    # was read: its caller chain there starts at get_kv_cache_spec, a name the spec-decode
    # proposer's load_model calls on a layer the graph cannot resolve)
    assert frame_phase(
        "vllm/v1/core/kv_cache_utils.py", "generate_scheduler_kv_cache_config"
    ) == "kv_cache"
    # a rule's phase wins over the catalogue's (any frame of sglang/srt/compilation/ is
    # compile; the catalogue reads patch_model as the graph capture's, its caller)
    patch = "/x/sglang/srt/compilation/torch_compile_decoration.py"
    assert catalogue_phase(patch, "patch_model") == "cuda_graph"
    assert frame_phase(patch, "patch_model") == "compile"
    assert frame_phase("/x/vllm/v1/core/kv_cache_utils.py", "<module>") is None


def test_fallback_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diag.frames, "_catalogue_phase", lambda path, func: None)
    frame_phase.cache_clear()  # (answers remembered with the fallback on)
    try:
        assert frame_phase("/x/vllm/v1/engine/core_client.py", "get_output_async") is None
    finally:
        frame_phase.cache_clear()


def test_tool_phases_on_a_small_package(tmp_path: Path) -> None:
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "worker.py").write_text(
        textwrap.dedent(
            """
            def shared_helper():
                return 1

            def only_loading():
                return shared_helper()

            class Worker:
                def load_model(self):
                    only_loading()
                    self._read()

                def _read(self):
                    return 2

                def profile_run(self):
                    self.load_model()  # another step's root: not walked into
                    return shared_helper() + self._size()

                def _size(self):
                    return 3

            def run_busy_loop():
                while True:
                    shared_helper()
            """
        )
    )
    rows = {(r[2], r[3]) for r in _tool().build([("vllm", "0.0.1", tmp_path)])}
    assert ("only_loading", "weights_load") in rows
    assert ("Worker._read", "weights_load") in rows
    assert ("Worker._size", "kv_cache") in rows
    assert ("run_busy_loop", "serving") in rows
    assert not {q for q, _ in rows} & {"shared_helper"}  # serving and start-up both
