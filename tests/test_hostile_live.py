"""Live faults: a hostile py-spy on PATH (floods its output, leaves a child holding the
pipe, prints JSON of odd shapes), a target in state D, processes whose argv mentions a
server or carries ``--port ²`` (issue 12). Real processes throughout; the fake py-spy is
a real program too, and every process started here is reaped."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live.harness import ready_child

from diag.collect import discover as disc
from diag.collect.procfs import read_stat
from diag.collect.pyspy import DumpTarget, dump_all
from diag.runner import SubprocessRunner

FRAME = {
    "name": "wait", "filename": "/x/sync.py", "module": None, "short_filename": "sync.py",
    "line": 12, "locals": None, "is_entry": True,
}  # fmt: skip


def _thread(pid: int) -> dict[str, object]:
    return {
        "pid": pid, "thread_id": pid, "thread_name": "MainThread", "os_thread_id": pid,
        "active": False, "owns_gil": False, "frames": [FRAME],
    }  # fmt: skip


def _fake_pyspy(tmp_path: Path, body: str) -> str:
    """A program called py-spy: ``body`` runs with ``args`` (its argv) and ``pid``."""
    path = tmp_path / "py-spy"
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, subprocess, sys, time\n"
        "args = sys.argv[1:]\n"
        "pid = int(args[args.index('--pid') + 1]) if '--pid' in args else 0\n" + body
    )
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    """A sleeping Python process, yielded once its interpreter has run code: py-spy
    attached before that finds no interpreter yet ('not_python'; CI caught it under load)."""
    with ready_child(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"]
    ) as proc:
        yield proc


def _dump(exe: str, pid: int, *, proc_root: Path = Path("/proc"), timeout_s: float = 3.0):  # type: ignore[no-untyped-def]
    st = read_stat(pid, Path("/proc"))
    assert st is not None
    t = DumpTarget(pid=pid, starttime_ticks=st.starttime_ticks, native=False)
    t0 = time.monotonic()
    res = dump_all([t], runner=SubprocessRunner(), pyspy=exe, timeout_s=timeout_s, samples=1,
                   proc_root=proc_root)  # fmt: skip
    return res[pid], time.monotonic() - t0


def test_flooding_pyspy_is_cut_and_killed(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    exe = _fake_pyspy(
        tmp_path, "chunk = b'x' * (1 << 20)\nwhile True:\n    sys.stdout.buffer.write(chunk)\n"
    )
    runner = SubprocessRunner()
    runner.max_stdout = 8 << 20
    t0 = time.monotonic()
    res = runner.run([exe, "dump", "--pid", str(target.pid)], timeout=30)
    assert res.truncated and len(res.stdout) <= 8 << 20
    assert time.monotonic() - t0 < 10  # not the 30 s deadline: cut at the cap


def test_flooding_pyspy_gives_a_partial_dump(tmp_path: Path, target: subprocess.Popen[bytes],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SubprocessRunner, "max_stdout", 4 << 20)
    exe = _fake_pyspy(tmp_path, "while True:\n    sys.stdout.write('[' * 4096)\n")
    result, elapsed = _dump(exe, target.pid, timeout_s=20)
    assert result.outcome == "partial"
    assert any("MiB: cut" in (a.error or "") for a in result.attempts)
    assert elapsed < 15


def test_grandchild_holding_the_pipe_does_not_stretch_the_deadline(tmp_path: Path) -> None:
    """py-spy leaves a child in a new session (out of its group) with the pipe open."""
    pidfile = tmp_path / "grandchild.pid"
    exe = _fake_pyspy(
        tmp_path,
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'],"
        " start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(g.pid))\n"
        "time.sleep(30)\n",
    )
    t0 = time.monotonic()
    try:
        res = SubprocessRunner().run([exe, "dump"], timeout=1.5)
        assert res.timed_out
        assert time.monotonic() - t0 < 6  # was: until the grandchild let go of the pipe
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pidfile.read_text()), 9)  # the one grandchild started here


def test_exited_pyspy_with_a_lingering_child_returns_promptly(tmp_path: Path) -> None:
    exe = _fake_pyspy(
        tmp_path,
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)'])\n"
        "print('[]')\n",
    )
    t0 = time.monotonic()
    res = SubprocessRunner().run([exe, "dump"], timeout=20)
    assert res.returncode == 0 and res.stdout.strip() == "[]"
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    "printed",
    [
        "'[' * 100000 + ']' * 100000",
        "json.dumps({'threads': 1})",
        "json.dumps([1, 'a', None])",
        "json.dumps([{'frames': 'x'}])",
        "json.dumps([{'thread_id': '9' * 5000, 'frames': [{'line': '²'}]}])",
        "'{\"unterminated'",
    ],
)
def test_odd_pyspy_json_is_a_partial_dump(
    tmp_path: Path, target: subprocess.Popen[bytes], printed: str
) -> None:
    exe = _fake_pyspy(tmp_path, f"sys.stdout.write({printed})\n")
    result, _elapsed = _dump(exe, target.pid)
    assert result.outcome in ("partial", "ok")
    if result.outcome == "partial":
        assert result.error


def _fake_proc_with_state(tmp_path: Path, pid: int, state: str) -> Path:
    """A /proc copy for one real pid whose stat says ``state`` (a real D-state process
    cannot be made on demand); the start time stays the real one."""
    root = tmp_path / "proc"
    (root / str(pid)).mkdir(parents=True)
    stat = Path(f"/proc/{pid}/stat").read_text()
    head, tail = stat.rsplit(")", 1)
    fields = tail.split()
    fields[0] = state
    (root / str(pid) / "stat").write_text(head + ") " + " ".join(fields) + "\n")
    return root


def test_d_state_target_gets_a_nonblocking_dump_first(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    # a pausing dump of a D-state process waits until it leaves D: here, forever
    thread = {k: v for k, v in _thread(0).items() if k not in ("pid", "thread_id", "os_thread_id")}
    exe = _fake_pyspy(
        tmp_path,
        "if '--nonblocking' not in args:\n    time.sleep(60)\n"
        f"t = json.loads({json.dumps(json.dumps(thread))})\n"
        "t.update(pid=pid, thread_id=pid, os_thread_id=pid)\n"
        "print(json.dumps([t]))\n",
    )
    root = _fake_proc_with_state(tmp_path, target.pid, "D")
    result, elapsed = _dump(exe, target.pid, proc_root=root, timeout_s=8)
    assert result.outcome == "ok"
    assert [a.mode for a in result.attempts] == ["nonblocking"]
    assert elapsed < 4  # not the 8 s deadline


def test_d_state_pausing_dump_has_its_own_share(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    exe = _fake_pyspy(tmp_path, "if '--nonblocking' in args:\n    sys.exit(1)\ntime.sleep(60)\n")
    root = _fake_proc_with_state(tmp_path, target.pid, "D")
    result, elapsed = _dump(exe, target.pid, proc_root=root, timeout_s=8)
    assert result.outcome == "timeout"
    assert [a.mode for a in result.attempts] == ["nonblocking", "python"]
    assert elapsed < 5  # a quarter of the deadline, not all of it


@pytest.mark.parametrize(
    ("argv", "framework"),
    [
        (["python3", "-m", "sglang.launch_server", "--port", "²"], "sglang"),
        (["python3", "-u", "-X", "dev", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
        (["python3", "/opt/sglang/launch_server.py"], "sglang"),
        (["python3", "-c", "import sglang.launch_server"], None),
        (["python3", "tool.py", "--help-for", "sglang.launch_server"], None),
        (["python3", "watch.py", "vllm", "serve", "m"], None),
        (["python3", "-m", "pytest", "tests/test_vllm.entrypoints.py"], None),
        (["vim", "sglang/launch_server.py"], None),
        (["vllm", "bench", "serve"], None),
    ],
)
def test_a_server_is_a_process_that_is_one(argv: list[str], framework: str | None) -> None:
    assert disc.launcher_framework(argv) == framework


@pytest.mark.parametrize("value", ["²", "٣", "9" * 5000, "-1", "0x10", ""])
def test_port_option_never_reaches_int(value: str) -> None:
    assert disc.port_from_cmdline(["python3", "-m", "sglang.launch_server", "--port", value],
                                  "sglang") == (30000, "default")  # fmt: skip
    assert disc.int_option([f"--tp={value}"], ("--tp",)) is None


def test_live_process_with_unicode_port_and_a_mention(tmp_path: Path) -> None:
    """Unprivileged processes whose argv says `--port ²` and mentions a launcher: the
    scan neither crashes nor takes them for servers."""
    script = tmp_path / "mention.py"
    script.write_text("import sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    procs = [
        subprocess.Popen([sys.executable, str(script), "sglang.launch_server", "--port", "²"],
                         stdout=subprocess.PIPE),
        subprocess.Popen([sys.executable, str(script), "vllm", "serve", "--port", "9" * 5000],
                         stdout=subprocess.PIPE),
    ]  # fmt: skip
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        found = disc.discover()
        pids = {p.pid for p in found.processes}
        assert not pids & {p.pid for p in procs}
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
            if p.stdout is not None:
                p.stdout.close()


def test_pyspy_real_on_a_real_target_still_works(target: subprocess.Popen[bytes]) -> None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(exe):
        pytest.skip("py-spy is not installed")
    result, _ = _dump(exe, target.pid, timeout_s=10)
    assert result.outcome in ("ok", "permission_denied")


def test_target_exiting_mid_dump_makes_the_snapshot_partial(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    """A target that exits while py-spy reads it: the snapshot is partial (exit 3), not 0."""
    from diag.collect.snapshot import _partial_reasons

    exe = _fake_pyspy(tmp_path, "os.kill(pid, 9)\ntime.sleep(0.2)\nsys.exit(1)\n")
    result, _elapsed = _dump(exe, target.pid)
    assert result.outcome == "not_found"
    reasons = _partial_reasons({target.pid: result})
    assert any("exited during the snapshot" in r for r in reasons)
