"""Sources in the terminal view are named by the shortest path that tells them apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from diag.report.terminal import short_names

EXAMPLE = Path(__file__).resolve().parents[1] / "diag" / "data" / "example.log"


def test_short_names_keep_the_folder_only_where_needed() -> None:
    got = short_names(["/a/node0/server.log", "/a/node1/server.log", "/a/x/other.log"])
    assert got == {
        "/a/node0/server.log": "node0/server.log",
        "/a/node1/server.log": "node1/server.log",
        "/a/x/other.log": "other.log",
    }
    assert short_names(["/same/a.log", "/same/a.log"]) == {"/same/a.log": "a.log"}
    assert short_names(["server.log", "/x/server.log"])["/x/server.log"] == "x/server.log"


def test_two_nodes_logs_are_told_apart_in_the_view(tmp_path: Path) -> None:
    logs = []
    for node in ("node0", "node1"):
        (tmp_path / node).mkdir()
        log = tmp_path / node / "server.log"
        log.write_bytes(EXAMPLE.read_bytes())
        logs.append(str(log))
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160"}
    proc = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", *logs],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert "node0/server.log" in proc.stdout and "node1/server.log" in proc.stdout, proc.stdout
