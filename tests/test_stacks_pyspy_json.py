"""py-spy JSON -> StackProcess: the real format, and data of other shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.stacks.pyspy_json import parse_pyspy_json

LAB = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "lab"


def _d1_dumps() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (LAB / "gpu-h200x2-d1-nccl" / "nccl-json-dumps.json").read_text()
    )
    return data


def test_native_frames_and_thread_ids_from_a_real_dump() -> None:
    entry = _d1_dumps()["blocking-wait/rank0"]
    p = parse_pyspy_json(entry["data"], pid=entry["pid"], title="VLLM::Worker_TP0", mode="native")
    main = p.threads[0]
    assert main.name == "MainThread" and main.thread_id == entry["pid"]  # the OS thread id
    native = [f for f in main.frames if f.native]
    assert native and all(f.module for f in native)
    assert any(f.name == "c10d::ProcessGroupNCCL::WorkNCCL::wait" for f in native)
    python = [f for f in main.frames if not f.native]
    assert python[0].name == "worker" and python[0].line == 36
    assert python[0].filename.endswith("gpu_hangs.py")
    assert p.rank is not None and p.rank.tp == 0
    assert (p.mode, p.wait_site, p.wait_thread) == ("native", "stack.nccl_collective", p.pid)


def test_pid_from_the_data_when_not_given() -> None:
    entry = _d1_dumps()["lazy-init/rank1"]
    p = parse_pyspy_json(entry["data"], pid=None, title=None, mode="native")
    assert p.pid == entry["pid"] and p.rank is None


@pytest.mark.parametrize(
    "data",
    [{"threads": "x"}, "text", 3, [1, 2], [{"thread_id": 1}], [{"frames": [{"line": 3}]}]],
)
def test_other_shapes_are_a_value_error(data: object) -> None:
    with pytest.raises(ValueError):
        parse_pyspy_json(data, pid=1, title=None, mode="python")


def test_empty_list_is_a_process_with_no_threads() -> None:
    p = parse_pyspy_json([], pid=7, title=None, mode="python")
    assert p.threads == () and p.wait_site is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "frames",
                    "name",
                    "line",
                    "module",
                    "thread_name",
                    "os_thread_id",
                    "active",
                    "owns_gil",
                    "filename",
                    "short_filename",
                    "pid",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(JSON)
def test_arbitrary_json_gives_a_process_or_a_value_error(data: object) -> None:
    try:
        p = parse_pyspy_json(data, pid=None, title=None, mode="python")
    except ValueError:
        return
    assert isinstance(p.threads, tuple)


def _json_thread(tid: int, name: str, active: bool, gil: bool, *frames: tuple[str, str]) -> Any:
    return {
        "pid": 40,
        "thread_id": tid,
        "os_thread_id": tid,
        "thread_name": name,
        "active": active,
        "owns_gil": gil,
        "frames": [
            {
                "name": n,
                "filename": f"/venv/lib/python3.12/site-packages/{f}",
                "module": None,
                "short_filename": f,
                "line": 10,
                "locals": None,
            }
            for n, f in frames
        ],
    }


def test_json_thread_state_decides_where_frames_say_nothing() -> None:
    """`active`/`owns_gil` of py-spy's JSON: an active thread without the GIL in a model
    forward is in a native call (a CUDA sync); idle helpers alone are an idle loop."""
    forward = _json_thread(
        40,
        "MainThread",
        True,
        False,
        ("forward", "vllm/model_executor/models/llama.py"),
        ("execute_model", "vllm/v1/worker/gpu_model_runner.py"),
    )
    p = parse_pyspy_json([forward], pid=None, title="VLLM::Worker_TP0", mode="python")
    assert (p.threads[0].idle, p.threads[0].owns_gil) == (False, False)
    assert (p.wait_site, p.wait_thread) == ("stack.cuda_sync", 40)
    holding = _json_thread(
        40,
        "MainThread",
        True,
        True,
        *[
            (n, f)
            for n, f in (
                ("forward", "vllm/model_executor/models/llama.py"),
                ("execute_model", "vllm/v1/worker/gpu_model_runner.py"),
            )
        ],
    )
    assert parse_pyspy_json([holding], pid=None, title=None, mode="python").wait_site is None
    tqdm = _json_thread(
        41, "tqdm_monitor", False, False, ("wait", "threading.py"), ("run", "tqdm/_monitor.py")
    )
    idle = parse_pyspy_json([tqdm], pid=None, title=None, mode="python")
    assert (idle.pid, idle.wait_site, idle.wait_thread) == (40, "stack.idle_loop", None)
