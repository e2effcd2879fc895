"""The scripted `diag snapshot --json` path (diag/commands/fast_snapshot.py).

Which command lines it takes (the rest go to the typer app, which validates them), that it
runs without typer and click (rich is imported, but beside the dumps, for the verdict's
renderer), and that what it prints, and its exit code, are the full CLI's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from diag.commands.fast_snapshot import parse_plain_snapshot


@pytest.mark.parametrize(
    ("argv", "opts"),
    [
        (["snapshot", "--json"], {}),
        (["snapshot", "--pid", "42", "--json"], {"pid": 42}),
        (["snapshot", "--json", "--pid=42", "--samples", "1"], {"pid": 42, "samples": 1}),
        (["snapshot", "--json", "--timeout", "2.5", "--no-native"],
         {"timeout_s": 2.5, "native": False}),
        (["snapshot", "--json", "--native-all", "--fr-dump", "--store-keys"],
         {"native_all": True, "fr_dump": True, "store_keys": True}),
        (["snapshot", "--json", "--no-log-phase"], {"log_phase": False}),
        (["snapshot", "--json", "--log-phase"], {"log_phase": True}),
    ],
)
def test_plain_forms_are_taken(argv: list[str], opts: dict[str, object]) -> None:
    assert parse_plain_snapshot(argv) == opts


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["analyze", "--json", "x.log"],
        ["snapshot"],  # text output: the full CLI (rich)
        ["snapshot", "--pid", "42"],
        ["snapshot", "--json", "--out", "x.tar.gz"],
        ["snapshot", "--json", "--hosts", "a,b"],
        ["snapshot", "--json", "--ray"],
        ["snapshot", "--json", "--k8s", "-n", "x", "-l", "a=b"],
        ["snapshot", "--json", "--help"],
        ["snapshot", "--json", "--pid"],  # a value missing
        ["snapshot", "--json", "--pid", "abc"],
        ["snapshot", "--json", "--pid", "0"],  # out of range: typer's / the command's error
        ["snapshot", "--json", "--pid", "-3"],
        ["snapshot", "--json", "--samples", "11"],
        ["snapshot", "--json", "--samples", "0"],
        ["snapshot", "--json", "--timeout", "0.1"],
        ["snapshot", "--json", "--timeout", "nan"],
        ["snapshot", "--json", "--timeout", "1e9"],
        ["snapshot", "--json", "extra-argument"],
    ],
)
def test_other_forms_go_to_the_full_cli(argv: list[str]) -> None:
    assert parse_plain_snapshot(argv) is None


_MAIN = "import sys\nfrom diag.cli import main\nsys.argv = ['diag', *sys.argv[1:]]\nmain()\n"


def _diag(*args: str) -> subprocess.CompletedProcess[str]:
    """diag run as a fresh process under ``-X importtime`` (the fast path ends with
    os._exit: what it imported is read from the import log, not asked at exit)."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _MAIN, *args], capture_output=True,
        text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )


def _heavy(stderr: str) -> list[str]:
    """typer or click, where the import log shows them imported."""
    names = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()
             if line.startswith("import time:")}
    return sorted(names & {"typer", "click"})


def _said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("import time:")]


@pytest.fixture()
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        time.sleep(0.2)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_runs_without_the_interactive_cli(sleeper: int) -> None:
    done = _diag("snapshot", "--json", "--pid", str(sleeper), "--no-native")
    assert _heavy(done.stderr) == [], _said(done.stderr)[-20:]
    doc = json.loads(done.stdout)
    assert done.returncode in (0, 3), done.stderr[-2000:]  # 3: py-spy refused (no ptrace)
    assert sleeper in [p["pid"] for p in doc["processes"]]
    assert doc["schema_version"] == 1


def test_an_error_reads_as_the_full_cli_reads_it() -> None:
    dead = 2**22 + 12345  # above any pid_max default: no such process
    fast = _diag("snapshot", "--json", "--pid", str(dead))
    full = _diag("snapshot", "--pid", str(dead))  # text form: through typer
    assert _heavy(fast.stderr) == []  # the error was reported without typer
    assert "typer" in _heavy(full.stderr)  # (the log does see the full CLI)
    assert fast.returncode == full.returncode == 2
    assert fast.stdout == full.stdout == ""
    strip = _said(fast.stderr)
    assert strip == _said(full.stderr)
    assert strip[0] == f"diag: error: no process {dead} on this host"
