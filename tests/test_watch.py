"""`diag watch` and `diag probe`: the progress logic, the file follower, and whole runs
against real child programs (tests/live/watch_child.py: real processes and sockets that log
like SGLang and vLLM; tests/live/mini_server.py: real gloo ranks that really hang)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest

from diag.commands.watch import probe_log
from diag.errors import EXIT_STALLED, InputError
from diag.watch.follow import FileFollower
from diag.watch.progress import SERVER, Tracker, parse_budgets, parse_duration
from tests.live.harness import free_port, gate_reason

CHILD = Path(__file__).parent / "live" / "watch_child.py"
MINI = Path(__file__).parent / "live" / "mini_server.py"
DIAG = [sys.executable, "-m", "diag"]


# ----------------------------------------------------------------------------- pure logic


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("40m") == 2400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2.5s") == 2.5
    for bad in ("", "m", "forty", "1x", "²"):
        with pytest.raises(InputError):
            parse_duration(bad)


def test_budgets() -> None:
    b = parse_budgets(["weights_load=40m,cuda_graph=20m"])
    assert b["weights_load"] == 2400 and b["cuda_graph"] == 1200
    assert b["compile"] > 600  # defaults stay generous
    b = parse_budgets(["kv_cache=10s"], stall_after=5)
    assert b["weights_load"] == 5 and b["kv_cache"] == 10
    for bad in ("weights=1m", "serving=1m", "cuda_graph"):
        with pytest.raises(InputError):
            parse_budgets([bad])


def test_heartbeats_and_repeats_are_not_progress() -> None:
    t = Tracker({"launch": 10.0, "weights_load": 10.0}, start=0.0)
    assert t.line("TP0", "Load weight begin. avail mem=20.00 GB", 1.0)
    assert not t.line("TP0", "Waiting for the scheduler to be ready (5 s)", 2.0)
    assert not t.line("TP0", "Load weight begin. avail mem=19.00 GB", 3.0)  # same kind
    t.phase("TP0", "weights_load", None, 1.0)
    assert [s.key for s in t.stalled(12.0)] == ["TP0"]
    assert t.stalled(12.0)[0].why == "entered weights_load"
    assert t.stalled(10.5) == []


def test_progress_bars_count_only_while_they_grow() -> None:
    t = Tracker({"launch": 5.0, "weights_load": 5.0}, start=0.0)
    bar = "Loading safetensors checkpoint shards:  {}% Completed | {}/8 [00:01<00:05]"
    assert t.line(SERVER, bar.format(12, 1), 1.0)
    assert t.line(SERVER, bar.format(25, 2), 4.0)
    assert not t.line(SERVER, bar.format(25, 2), 8.0)  # redrawn, not advanced
    assert t.stalled(8.5) == []
    assert [s.key for s in t.stalled(9.5)] == [SERVER]


def test_shard_counts_and_phase_changes_are_progress() -> None:
    t = Tracker({"launch": 5.0, "weights_load": 5.0, "kv_cache": 5.0}, start=0.0)
    t.phase("TP0", "weights_load", (1, 64), 0.0)
    t.phase("TP0", "weights_load", (9, 64), 4.0)
    assert t.stalled(8.0) == []
    eta = t.eta_s("TP0")
    assert eta is not None and 25 < eta < 35  # 8 shards in 4 s -> 55 left at 2/s
    t.phase("TP0", "kv_cache", None, 8.5)
    assert t.stalled(13.0) == [] and t.stalled(14.0)[0].phase == "kv_cache"


def test_server_lines_stall_only_with_the_ranks() -> None:
    t = Tracker({"launch": 5.0, "weights_load": 5.0}, start=0.0)
    t.line(SERVER, "server_args=ServerArgs(tp_size=2)", 0.0)
    t.phase("TP0", "weights_load", (1, 10), 0.0)
    t.phase("TP0", "weights_load", (5, 10), 4.0)
    assert t.stalled(7.0) == []  # the launcher is quiet, but its rank progresses
    assert {s.key for s in t.stalled(10.0)} == {"TP0"}


# ----------------------------------------------------------------------------- follow mode


def test_follower_appends_rotation_truncation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    f = FileFollower(log)
    assert f.poll() == []  # not there yet: waits for it
    log.write_text("one\ntw")
    assert f.poll() == ["one"]  # the partial line waits for its newline
    with log.open("a") as fh:
        fh.write("o\nthree\n")
    assert f.poll() == ["two", "three"]
    # rotation: the old file moves away, a new one takes its place
    log.rename(tmp_path / "server.log.1")
    with (tmp_path / "server.log.1").open("a") as fh:
        fh.write("last of old\n")
    log.write_text("first of new\n")
    assert f.poll() == ["last of old", "first of new"]
    assert any("rotated" in n for n in f.notes)
    # truncation (copytruncate): the file shrinks, reading starts over
    with log.open("a") as fh:
        fh.write("x" * 200 + "\n")
    assert len(f.poll()) == 1
    log.write_text("after truncate\n")
    assert f.poll() == ["after truncate"]
    assert any("truncated" in n for n in f.notes)
    f.close()


# ----------------------------------------------------------------------------- probe


def _write_log(path: Path, lines: list[str], age_s: float) -> None:
    path.write_text("\n".join(lines) + "\n")
    t = time.time() - age_s
    os.utime(path, (t, t))


SG = "[2026-02-22 22:35:{:02d} TP{}] {}"


def test_probe_progressing_then_stalled(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    lines = [SG.format(1, r, "Load weight begin. avail mem=20.00 GB") for r in (0, 1)]
    lines += [SG.format(30, r, "Load weight end. type=X, dtype=torch.bfloat16") for r in (0, 1)]
    budgets = parse_budgets([], stall_after=120)
    _write_log(log, lines, age_s=10)
    code, msg = probe_log(log, port=None, budgets=budgets)
    assert code == 0 and msg.startswith("progressing"), msg
    _write_log(log, lines, age_s=600)
    code, msg = probe_log(log, port=None, budgets=budgets)
    assert code == EXIT_STALLED and "TP0" in msg and "TP1" in msg and "weights_load" in msg, msg


def test_probe_heartbeats_do_not_reset_the_clock(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    lines = [SG.format(0, 0, "Load weight end. type=X, dtype=torch.bfloat16")]
    lines += [SG.format(s, 0, "Waiting for the model to be ready") for s in range(5, 59, 5)]
    _write_log(log, lines, age_s=5)
    code, msg = probe_log(log, port=None, budgets=parse_budgets([], stall_after=30))
    assert code == EXIT_STALLED and "TP0" in msg, msg


def test_probe_ready_by_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, msg = probe_log(tmp_path / "absent.log", port=port, budgets=parse_budgets([]))
    assert code == 0 and "accepts" in msg


def test_probe_cli_errors(tmp_path: Path) -> None:
    r = subprocess.run([*DIAG, "probe", "--log", str(tmp_path / "nope.log")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([*DIAG, "probe", "--log", "x", "--budget", "weights=1m"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "PHASE=DURATION" in r.stderr


# ----------------------------------------------------------------------------- whole runs


def _events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _kill_tree(pid: int | None) -> None:
    if not pid:
        return
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def _watch(tmp_path: Path, child: list[str], *opts: str, timeout: float = 120,
           ) -> tuple[int, list[dict[str, object]], str]:
    argv = [*DIAG, "watch", "--json", "--out", str(tmp_path / "out"), *opts, "--", *child]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    events = _events(r.stdout)
    start = next((e for e in events if e["event"] == "start"), {})
    pid = start.get("pid")
    _kill_tree(pid if isinstance(pid, int) else None)
    return r.returncode, events, r.stderr


def _child(mode: str, port: int, framework: str = "sglang", *extra: str) -> list[str]:
    return [sys.executable, str(CHILD), "--framework", framework, "--mode", mode,
            "--port", str(port), *extra]


@pytest.mark.live
def test_watch_ready_exits_0_with_summary(tmp_path: Path) -> None:
    port = free_port()
    code, events, err = _watch(tmp_path, _child("ready", port))
    kinds = [e["event"] for e in events]
    assert code == 0, (kinds, err)
    ready = next(e for e in events if e["event"] == "ready")
    assert ready["port"] == port
    summary = next(e for e in events if e["event"] == "summary")
    ranks = summary["ranks"]
    assert isinstance(ranks, dict) and set(ranks) == {"TP0", "TP1"}
    assert "weights_load" in ranks["TP0"]
    assert "stall" not in kinds
    # the launched server's output went to a log under --out
    logs = list((tmp_path / "out").glob("server-*.log"))
    assert logs and "Uvicorn running" in logs[0].read_text()


@pytest.mark.live
def test_watch_crash_passes_the_exit_code(tmp_path: Path) -> None:
    code, events, err = _watch(tmp_path, _child("crash", free_port(), "vllm"))
    assert code == 3, err
    exit_event = next(e for e in events if e["event"] == "exit")
    assert exit_event["code"] == 3
    found = {e["id"] for e in events if e["event"] == "finding"}
    assert {"python.exception", "cuda.error"} <= found, found


@pytest.mark.live
def test_watch_slow_but_steady_is_not_a_stall(tmp_path: Path) -> None:
    # 10 shards, one every 1.2 s: 12 s of loading against a 3 s stall budget
    code, events, err = _watch(
        tmp_path, _child("slow", free_port(), "sglang", "--shard-s", "1.2"),
        "--stall-after", "3",
    )
    kinds = [e["event"] for e in events]
    assert code == 0, (kinds, err)
    assert "stall" not in kinds and "ready" in kinds


@pytest.mark.live
def test_watch_heartbeats_are_a_stall(tmp_path: Path) -> None:
    t0 = time.monotonic()
    term = tmp_path / "termination-log"
    term.write_text("")  # Kubernetes creates it; the watcher only writes an existing one
    code, events, err = _watch(
        tmp_path, _child("heartbeat", free_port()), "--stall-after", "3",
        "--exit-on-stall", "--no-snapshot", "--termination-log", str(term),
    )
    assert code == EXIT_STALLED, err
    stall = next(e for e in events if e["event"] == "stall")
    assert "TP0" in str(stall["ranks"]) and "weights_load" in str(stall["phases"])
    assert time.monotonic() - t0 < 60
    verdict = term.read_text()
    assert "TP0" in verdict and "weights_load" in verdict and len(verdict.encode()) <= 4096


@pytest.mark.live
def test_watch_real_ranks_stall_after_weights_bundle_and_stop(tmp_path: Path) -> None:
    why = gate_reason()
    if why:
        pytest.skip(why)
    port = free_port()
    ready_dir = tmp_path / "mini"
    ready_dir.mkdir()
    child = [sys.executable, str(MINI), "launcher", "--framework", "sglang", "--tp", "2",
             "--mode", "store", "--port", str(port), "--ready-dir", str(ready_dir)]
    t0 = time.monotonic()
    # 20 s: importing torch on a loaded 2-core machine takes seconds, and a rank that is
    # importing logs nothing and reads nothing from disk (page cache) while it does
    code, events, err = _watch(tmp_path, child, "--stall-after", "20", "--exit-on-stall",
                               timeout=240)
    assert code == EXIT_STALLED, ([e["event"] for e in events], err)
    stall = next(e for e in events if e["event"] == "stall")
    # the ranks that were past the budget at that moment: under load one rank's torch
    # import can end seconds after the other's, so it may still be inside its budget
    assert set(stall["ranks"]) and set(stall["ranks"]) <= {"TP0", "TP1"}  # type: ignore[arg-type]
    assert "weights_load" in str(stall["phases"])
    bundle = next(e for e in events if e["event"] == "bundle")
    verdict = str(bundle["verdict"])
    assert "TP0" in verdict and "weights_load" in verdict, verdict
    assert "stack.dist_init" in verdict, verdict  # both ranks in the TCPStore get
    path = Path(str(bundle["path"]))
    with tarfile.open(path) as tf:
        names = tf.getnames()
    assert "snapshot.json" in names and "analysis.json" in names
    assert time.monotonic() - t0 < 200
    start = next(e for e in events if e["event"] == "start")
    assert not psutil.pid_exists(int(str(start["pid"]))) or psutil.Process(
        int(str(start["pid"]))).status() == psutil.STATUS_ZOMBIE


@pytest.mark.live
def test_watch_sigterm_during_a_stall_writes_the_bundle_first(tmp_path: Path) -> None:
    port = free_port()
    argv = [*DIAG, "watch", "--json", "--out", str(tmp_path / "out"), "--stall-after", "2",
            "--no-snapshot", "--", *_child("hang", port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + 90
    for line in proc.stdout:
        if line.startswith("{"):
            seen.append(json.loads(line))
            if seen[-1]["event"] == "bundle":
                break
        if time.monotonic() > deadline:
            break
    assert any(e["event"] == "bundle" for e in seen), seen
    t_term = time.monotonic()
    wall_term = time.time()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    seen += _events(out)
    assert time.monotonic() - t_term < 15
    bundles = [e for e in seen if e["event"] == "bundle"]
    assert len(bundles) == 2, [e["event"] for e in seen]  # the stall's, then the last gasp
    last_gasp = Path(str(bundles[-1]["path"]))
    assert last_gasp.is_file() and "sigterm" in last_gasp.name
    assert last_gasp.stat().st_mtime - wall_term < 5.0  # written within 5 s of the SIGTERM
    assert proc.returncode != 0
    start = next(e for e in seen if e["event"] == "start")
    _kill_tree(int(str(start["pid"])))


def test_read_bytes_takes_ascii_digits_only(tmp_path: Path) -> None:
    from diag.watch.engine import _read_bytes

    cases = [(1, "4096", 4096), (2, "²", None), (3, "9" * 5000, None), (4, "-3", None)]
    for pid, value, want in cases:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "io").write_text(f"rchar: 1\nread_bytes: {value}\nwrite_bytes: 0\n")
        assert _read_bytes(pid, tmp_path) == want
    assert _read_bytes(99, tmp_path) is None
