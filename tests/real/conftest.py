"""Fixtures for the real-server tests: a tiny local model and real vLLM servers.

The machinery is in ``realserver.py``; see its docstring for the environment it needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from realserver import (
    VllmServer,
    VllmStarter,
    build_tiny_model,
    find_vllm_python,
    starter_for,
)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The real-server venv's python (DIAG_VLLM_PYTHON), or a skip saying how to get one."""
    return find_vllm_python()


@pytest.fixture(scope="session")
def tiny_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with a tokenizer trained here, in 7 safetensors shards."""
    out = tmp_path_factory.mktemp("tiny-llama")
    summary = build_tiny_model(vllm_python, out)
    assert isinstance(summary["shards"], list)
    assert len(summary["shards"]) > 1, summary
    return out


@pytest.fixture
def vllm_starter(
    vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmStarter]:
    """Start real servers in a test; every one is killed at its end."""
    yield from starter_for(vllm_python, tiny_model, tmp_path_factory, "vllm-run")


@pytest.fixture(scope="module")
def healthy_vllm(
    vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    """One eager TP=2 server, ready, shared by a module's tests."""
    for starter in starter_for(vllm_python, tiny_model, tmp_path_factory, "vllm-healthy"):
        server = starter.start("vllm-cpu-tp2-eager-healthy")
        server.wait_ready()
        yield server
