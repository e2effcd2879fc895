"""The snapshot's JSON contract, terminal view, who-is-missing evidence (Flight Recorder,
NCCL RAS) and the command's exit codes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from diag.cli import app
from diag.collect import collective
from diag.collect import snapshot as snapshot_mod
from diag.model import (
    Finding,
    GpuSample,
    ProcessInfo,
    RankId,
    Snapshot,
    StackFrame,
    StackGroup,
    StackProcess,
    StackThread,
    Unavailable,
)
from diag.report.snapshot_json import SCHEMA_VERSION, snapshot_to_dict
from diag.report.snapshot_view import render_snapshot, verdict_text
from diag.runner import RunResult

FR = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot" / "flight_recorder"

COLLECTIVE = (
    StackFrame("pthread_cond_wait", "/lib/libc.so.6", None, "/lib/libc.so.6", native=True),
    StackFrame("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
    StackFrame("worker", "probe.py", 56),
)
COMPILE = (StackFrame("jit_compile_kernel", "probe.py", 30), StackFrame("worker", "probe.py", 60))



def verdict(snap: Snapshot) -> str:
    """The verdict as the collector renders it: from the snapshot rules' findings."""
    from diag.rules import apply_snapshot_rules

    return verdict_text(dataclasses.replace(snap, findings=tuple(apply_snapshot_rules(snap))))

def _proc(
    pid: int, tp: int | None, frames: tuple[StackFrame, ...], site: str | None, **kw: object
) -> ProcessInfo:
    stack = StackProcess(
        pid=pid,
        title=f"sglang::scheduler_TP{tp}",
        threads=(StackThread(pid, "MainThread", frames, idle=False),),
        wait_site=site,
        wait_thread=pid,
        mode="native",
    )
    base: dict[str, object] = {
        "pid": pid,
        "ppid": 10,
        "role": "scheduler" if tp is not None else "launcher",
        "title": f"sglang::scheduler_TP{tp}"
        if tp is not None
        else "python -m sglang.launch_server --port 30000",
        "cmdline": ("python", "-m", "sglang.launch_server", "--port", "30000")
        if tp is None
        else (),
        "framework": "sglang",
        "rank": RankId(tp=tp) if tp is not None else None,
        "rank_source": "title" if tp is not None else None,
        "state": "S",
        "rss_bytes": 226 << 30,
        "cpu_percent": 1.0,
        "threads": 49,
        "listening_ports": (),
        "gpu_index": tp,
        "gpu_memory_bytes": 10 << 30 if tp is not None else None,
        "stack": stack,
    }
    base.update(kw)
    return ProcessInfo(**base)  # type: ignore[arg-type]


def story_snapshot() -> Snapshot:
    procs = (
        _proc(10, None, (StackFrame("wait4", "", None, None, True),), "stack.ipc_wait"),
        _proc(11, 0, COLLECTIVE, "stack.nccl_collective"),
        _proc(12, 1, COMPILE, "stack.jit_compile", cpu_percent=Unavailable("process exited")),
    )
    gpus = (
        GpuSample(0, "NVIDIA H200", "GPU-0", 100.0, 100.0, 10 << 30, 141 << 30, 5, {11: 10 << 30}),
        GpuSample(1, "NVIDIA H200", "GPU-1", 0.0, 0.0, 10 << 30, 141 << 30, 5, {12: 10 << 30}),
    )
    snap = Snapshot(
        host="h",
        taken_at=dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc),
        processes=procs,
        gpus=gpus,
        servers=(
            {"framework": "sglang", "launcher_pid": 10, "port": 30000, "port_listening": False},
        ),
        groups=(
            StackGroup("stack.nccl_collective", ("TP0",), COLLECTIVE, (11,)),
            StackGroup("stack.jit_compile", ("TP1",), COMPILE, (12,)),
        ),
        outlier_tp_ranks=(1,),
        findings=(
            Finding("startup.no_listen_port", "error", "no port", "port 30000 is not listening"),
        ),
    )
    return snap


def test_json_contract() -> None:
    doc = snapshot_to_dict(story_snapshot())
    json.dumps(doc)
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    for key in (
        "host",
        "servers",
        "processes",
        "gpus",
        "groups",
        "outlier_tp_ranks",
        "verdict",
        "findings",
    ):
        assert key in doc
    assert doc["servers"][0] == {
        "framework": "sglang",
        "launcher_pid": 10,
        "port": 30000,
        "port_listening": False,
    }
    p = {x["pid"]: x for x in doc["processes"]}
    for key in (
        "pid",
        "role",
        "title",
        "tp_rank",
        "dp_rank",
        "pp_rank",
        "ep_rank",
        "state",
        "rss_bytes",
        "cpu_percent",
        "listening_ports",
        "gpu_index",
        "gpu_memory_bytes",
        "wait_site",
        "stack",
    ):
        assert key in p[11]
    assert (p[11]["tp_rank"], p[11]["dp_rank"], p[11]["wait_site"]) == (
        0,
        None,
        "stack.nccl_collective",
    )
    assert p[11]["rss_bytes"] == 226 << 30 and p[11]["listening_ports"] == []
    assert p[10]["tp_rank"] is None and p[10]["role"] == "launcher"
    # an unreadable fact is null, with its reason
    assert p[12]["cpu_percent"] is None and p[12]["unavailable"] == {
        "cpu_percent": "process exited"
    }
    assert p[11]["stack"]["threads"][0]["frames"][0] == {
        "name": "pthread_cond_wait",
        "filename": "/lib/libc.so.6",
        "line": None,
        "module": "/lib/libc.so.6",
        "native": True,
    }
    assert doc["groups"][1] == {
        "wait_site": "stack.jit_compile",
        "ranks": ["TP1"],
        "tp_ranks": [1],
        "pids": [12],
        "frames": [
            {
                "name": "jit_compile_kernel",
                "filename": "probe.py",
                "line": 30,
                "module": None,
                "native": False,
            },
            {"name": "worker", "filename": "probe.py", "line": 60, "module": None, "native": False},
        ],
    }
    assert doc["outlier_tp_ranks"] == [1]
    assert [g["util_percent_mean"] for g in doc["gpus"]] == [100.0, 0.0]
    assert doc["gpus"][0]["processes"] == [{"pid": 11, "memory_bytes": 10 << 30}]
    assert doc["findings"][0]["id"] == "startup.no_listen_port"


def test_json_without_gpus() -> None:
    import dataclasses

    snap = dataclasses.replace(story_snapshot(), gpus=Unavailable("NVML Shared Library Not Found"))
    doc = snapshot_to_dict(snap)
    assert doc["gpus"] == [] and "NVML" in doc["gpus_unavailable"]


def test_verdict_names_the_odd_rank_and_the_idle_gpu() -> None:
    v = verdict(story_snapshot())
    assert "port 30000 is not listening" in v
    assert "TP1: stack.jit_compile" in v
    assert "TP1 differ from the other ranks (waiting at stack.jit_compile)" in v  # rank.outlier
    # nccl.waiting_for_rank, from the stack groups and the GPU readings
    assert "1 ranks wait inside an NCCL collective for TP1, which is elsewhere" in v
    assert "GPU0 100%" in v and "GPU1 0%" in v
    assert "the GPUs of TP0 spin at ~100%" in v and "TP1 never joined" in v
    # every judgment is a finding's: no sentence of the verdict is the collector's own
    snap = story_snapshot()
    assert verdict_text(snap).count(".") < v.count(".")  # (no findings: fewer sentences)
    assert "never joined" not in verdict_text(snap) and "differ" not in verdict_text(snap)


def test_verdict_cpu_side_hang() -> None:
    import dataclasses

    snap = story_snapshot()
    idle = tuple(dataclasses.replace(g, util_percent_mean=2.0) for g in snap.gpus)  # type: ignore[union-attr]
    assert "blocked on the CPU side" in verdict(dataclasses.replace(snap, gpus=idle))


def test_terminal_view_verdict_first_then_table_then_groups() -> None:
    snap = story_snapshot()
    snap = snap.__class__(
        **{**{f: getattr(snap, f) for f in snap.__dataclass_fields__}, "verdict": "VERDICT-TEXT"}
    )
    console = Console(width=160, record=True, color_system=None)
    for part in render_snapshot(snap):
        console.print(part)
    text = console.export_text()
    # the verdict panel renders the findings; a stored verdict text is not the view's
    assert "VERDICT-TEXT" not in text
    head = text.index("launcher pid 10: port 30000 is not listening")
    assert head < text.index("scheduler") < text.index("stack groups")
    row = next(line for line in text.splitlines() if " 12 " in line and "scheduler" in line)
    assert "TP1 *" in row and "stack.jit_compile" in row and "0%" in row
    row0 = next(line for line in text.splitlines() if " 11 " in line)
    assert "100%" in row0 and "226.0 GiB" in row0 and "pthread_cond_wait [libc.so.6]" in row0
    assert "startup.no_listen_port" in text


# ----------------------------------------------------------------- Flight Recorder / RAS


def test_flight_recorder_dumps_say_who_is_missing() -> None:
    d0 = collective.load_fr_dump(FR / "trace_0")
    d1 = collective.load_fr_dump(FR / "trace_1")
    assert not isinstance(d0, Unavailable) and not isinstance(d1, Unavailable)
    s = collective.summarise_fr({0: d0, 1: d1})
    assert s["behind"] == {"0": [1]}
    rows = {r["rank"]: r for r in s["ranks"]}  # type: ignore[union-attr, index]
    assert (rows[0]["last_seq"], rows[0]["last_state"]) == (4, "scheduled")
    assert rows[0]["last_collective"] == "nccl:all_reduce"
    assert rows[1]["last_seq"] == 3


def test_flight_recorder_found_through_the_environment(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"trace_{r}").write_bytes((FR / f"trace_{r}").read_bytes())
    env = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{tmp_path}/trace_",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{tmp_path}/pipe_",
    }
    ev = collective.flight_recorder_evidence([(602, 0, env), (603, 1, env), (604, 2, env)])
    assert ev is not None
    assert ev["behind"] == {"0": [1]}
    assert ev["no_dump_from_ranks"] == [2]
    assert f"{tmp_path}/pipe_0.pipe" in str(ev["hint"])
    assert collective.flight_recorder_evidence([(1, 0, {"RANK": "0"})]) is None


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pwned",))


def test_flight_recorder_loader_runs_no_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "trace_0"
    bad.write_bytes(pickle.dumps({"entries": [_Evil()]}))
    out = collective.load_fr_dump(bad)
    assert isinstance(out, Unavailable) and "refusing" in out.reason
    assert "pwned" not in capsys.readouterr().out


@pytest.fixture
def ras_server() -> Iterator[int]:
    """A local stand-in speaking the RAS client protocol of NCCL's ncclras."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            f = conn.makefile("rb")
            seen.append(f.readline())
            conn.sendall(b"SERVER PROTOCOL 2\n")
            seen.append(f.readline())
            conn.sendall(b"OK\n")
            seen.append(f.readline())
            conn.sendall(b"Collective operations: rank 1 (pid 603, GPU 1) is missing 1 operation\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield port
    t.join(5)
    srv.close()
    assert seen == [b"CLIENT PROTOCOL 2\n", b"TIMEOUT 2\n", b"VERBOSE STATUS\n"]


def test_ras_query(ras_server: int) -> None:
    out = collective.ras_query("127.0.0.1", ras_server, timeout_s=2.0)
    assert not isinstance(out, Unavailable)
    assert "rank 1 (pid 603, GPU 1) is missing" in str(out["text"])


def test_ras_not_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert isinstance(collective.ras_query("127.0.0.1", port, timeout_s=0.5), Unavailable)


# ----------------------------------------------------------------- the command


@pytest.fixture
def titled_child() -> Iterator[int]:
    code = (
        "import setproctitle, time\n"
        "setproctitle.setproctitle('sglang::scheduler_TP0')\n"
        "open(__import__('sys').argv[1], 'w').close()\n"
        "time.sleep(60)\n"
    )
    ready = Path(f"/tmp/diag-test-ready-{time.time_ns()}")
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)], start_new_session=True)
    try:
        for _ in range(200):
            if ready.exists():
                break
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        ready.unlink(missing_ok=True)


def test_cli_unknown_pid_exit_2() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "diag", "snapshot", "--pid", "2147483646"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "no process 2147483646" in res.stderr and "Traceback" not in res.stderr


def test_cli_without_pyspy_exit_3_and_still_reports(
    titled_child: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("setproctitle")
    monkeypatch.setattr(snapshot_mod, "find_pyspy", lambda runner: None)
    res = CliRunner().invoke(app, ["snapshot", "--pid", str(titled_child), "--json"])
    assert res.exit_code == 3
    doc = json.loads(res.stdout[: res.stdout.rindex("}") + 1])
    (p,) = doc["processes"]
    assert p["role"] == "scheduler" and p["tp_rank"] == 0 and p["state"] in ("S", "R")
    assert p["dump"]["outcome"] == "no_pyspy"
    assert any("py-spy" in r for r in doc["partial"])


def test_cli_ptrace_refused_exit_3_with_the_fix(
    titled_child: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("setproctitle")

    class Refused:
        def which(self, program: str) -> str | None:
            return "/usr/bin/py-spy"

        def run(self, argv: object, *, timeout: float, env: object = None) -> RunResult:
            return RunResult(
                tuple(argv), 1, "", "Error: Operation not permitted (os error 1)", 0.01
            )  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot_mod, "SubprocessRunner", Refused)
    res = CliRunner().invoke(app, ["snapshot", "--pid", str(titled_child)])
    assert res.exit_code == 3
    out = res.stdout + (res.stderr if res.stderr_bytes is not None else "")
    assert "SYS_PTRACE" in out and "ptrace_scope" in out


def test_cli_out_writes_a_bundle_with_the_snapshot(titled_child: int, tmp_path: Path) -> None:
    import tarfile

    out = tmp_path / "snap.tar.gz"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "diag",
            "snapshot",
            "--pid",
            str(titled_child),
            "--samples",
            "1",
            "--no-native",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "bundle written" in res.stderr
    with tarfile.open(out) as tar:
        names = tar.getnames()
        member = next(n for n in names if "snapshot" in n and n.endswith(".json"))
        f = tar.extractfile(member)
        assert f is not None
        doc = json.loads(f.read())
    text = json.dumps(doc)
    assert str(titled_child) in text and "sglang::scheduler_TP0" in text


def test_verdict_makes_no_gpu_claim_when_ranks_share_a_gpu() -> None:
    import dataclasses

    snap = story_snapshot()
    shared = tuple(dataclasses.replace(p, gpu_index=0) for p in snap.processes)
    assert "never joined" not in verdict(dataclasses.replace(snap, processes=shared))


def test_verdict_without_stacks_uses_the_proc_tier() -> None:
    import dataclasses

    snap = story_snapshot()
    blind = tuple(
        dataclasses.replace(
            p,
            stack=None,
            wchan="futex_wait_queue",
            syscall="futex",
            thread_names={"python3": 1, "gloo_tcp_loop": 1, "pt_nccl_watchdg": 1},
        )
        for p in snap.processes
    )
    v = verdict(dataclasses.replace(snap, processes=blind, groups=(), outlier_tp_ranks=()))
    assert "No stack for 2 rank(s)" in v
    assert (
        "TP0 state S, wchan futex_wait_queue, in futex(), threads gloo_tcp_loop, pt_nccl_watchdg"
        in v
    )


def test_missing_tp_ranks_from_the_launcher_command_line() -> None:
    import dataclasses

    from diag.collect.discover import FoundProcess, FoundServer, int_option
    from diag.collect.snapshot import _expected_ranks

    assert int_option(["x", "--tp", "4"], ("--tp", "--tensor-parallel-size")) == 4
    assert int_option(["x", "--tensor-parallel-size=8"], ("--tp", "--tensor-parallel-size")) == 8
    assert int_option(["x", "--tp", "four"], ("--tp",)) is None
    snap = story_snapshot()
    launcher = dataclasses.replace(
        snap.processes[0], cmdline=("python", "-m", "sglang.launch_server", "--tp", "4")
    )
    procs = (launcher, *snap.processes[1:])
    found = [
        FoundProcess(
            p.pid,
            p.ppid,
            p.role,
            p.title,
            p.cmdline,
            p.framework,
            p.rank,
            p.rank_source,
            0,
            "S",
            (),
            0,
        )
        for p in procs
    ]
    server = FoundServer("sglang", 10, 30000, "cmdline")
    assert _expected_ranks(server, procs, 0, found) == {"tp_size": 4, "missing_tp_ranks": [2, 3]}
    srv = {**snap.servers[0], "tp_size": 4, "missing_tp_ranks": [2, 3]}
    v = verdict(dataclasses.replace(snap, servers=(srv,)))
    assert "No process for TP2, TP3 of tp_size 4" in v


def test_take_snapshot_maps_gpu_memory_to_ranks_through_nvml(titled_child: int) -> None:
    pytest.importorskip("setproctitle")
    import dataclasses

    from test_snapshot_collect import FakeNvml

    from diag.collect.snapshot import SnapshotOptions, take_snapshot

    nvml = FakeNvml({0: [0] * 3, 1: [100] * 3}, {1: [(titled_child, 5 << 30)]})
    opts = SnapshotOptions(pid=titled_child, samples=1, native=False, nvml=nvml, gpu_samples=3)
    snap = take_snapshot(opts)
    (p,) = snap.processes
    assert (p.gpu_index, p.gpu_memory_bytes) == (1, 5 << 30)
    assert "GPU1 100%" in snap.verdict
    doc = snapshot_to_dict(snap)
    assert doc["processes"][0]["gpu_index"] == 1
    assert [g["util_percent_mean"] for g in doc["gpus"]] == [0.0, 100.0]

    # NVML's pids are not ours (another pid namespace): said, not guessed
    nvml = FakeNvml({0: [0] * 3}, {0: [(4194000, 1 << 30)]})
    snap = take_snapshot(dataclasses.replace(opts, nvml=nvml))
    assert snap.processes[0].gpu_index is None
    assert any("pid namespace" in n for n in snap.notes)


RAS = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot" / "ras"


def test_ras_status_of_a_real_nccl_hang_names_the_rank_behind() -> None:
    text = (RAS / "verbose_status_mismatch.txt").read_text()
    (mm,) = collective.parse_ras_status(text)
    assert mm["operation"] == "AllReduce" and mm["status"] == "MISMATCH"
    assert mm["max_count"] == 2
    assert mm["behind"] == [{"rank": 1, "count": 1, "pid": 470, "gpu": "0"}]


def test_ras_status_group_lines_and_ranks_with_no_operation() -> None:
    text = (
        "Warnings\n========\n\n#0-0 (78db921d1c117b4a) MISMATCH\n"
        "  Communicator ranks have different AllReduce operation counts\n"
        "  7 ranks have launched up to operation 64\n"
        "  Rank 7 has launched up to operation 60 -- GPU 3 managed by process 1650386 on node n1\n"
        "#1-0 (aa) MISMATCH\n"
        "  Communicator ranks have different Broadcast operation counts\n"
        "  Rank 0 has launched up to operation 3 -- GPU 0, process 11, node 10.0.0.8\n"
        "  Rank 1 has not launched any operations -- GPU 1 managed by process 12 on node h\n"
    )
    a, b = collective.parse_ras_status(text)
    assert (a["max_count"], a["behind"]) == (
        64,
        [{"rank": 7, "count": 60, "pid": 1650386, "gpu": "3"}],
    )
    assert b["operation"] == "Broadcast"
    assert b["behind"] == [{"rank": 1, "count": 0, "pid": 12, "gpu": "1"}]
    assert collective.parse_ras_status("Job summary\n===\nall fine\n") == []


def test_verdict_reports_the_ras_mismatch_beside_the_stacks() -> None:
    import dataclasses

    text = (RAS / "verbose_status_mismatch.txt").read_text()
    ev = {"kind": "nccl_ras", "mismatches": collective.parse_ras_status(text), "text": text}
    snap = story_snapshot()
    procs = tuple(dataclasses.replace(p, pid=p.pid + 458) if p.rank else p for p in snap.processes)
    v = verdict(dataclasses.replace(snap, processes=procs, collective_evidence=(ev,)))
    assert (
        "NCCL RAS: communicator ranks have different AllReduce operation counts: "
        "rank 1 (pid 470, TP1) launched fewer operations than rank 0" in v
    )


def test_non_root_user_gets_the_proc_tier_and_exit_3(titled_child: int) -> None:
    """A user who may not ptrace the server: no stacks, but /proc facts, a verdict, the
    fix, and exit code 3 (run as `nobody` against a root-owned process)."""
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run diag as another user")
    res = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "diag",
            "snapshot",
            "--pid",
            str(titled_child),
            "--json",
            "--samples",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout)
    (p,) = doc["processes"]
    assert (p["role"], p["tp_rank"], p["state"]) == ("scheduler", 0, "S")
    assert p["dump"]["outcome"] == "permission_denied"
    assert isinstance(p["rss_bytes"], int) and p["rss_bytes"] > 0
    assert "No stack for 1 rank(s); /proc says: TP0 state S" in doc["verdict"]
    assert "SYS_PTRACE" in res.stderr and "ptrace_scope" in res.stderr


def test_pipeline_on_a_fake_proc_tree_with_flight_recorder_from_the_launcher_env(
    tmp_path: Path,
) -> None:
    """take_snapshot end to end through its seams (a /proc tree, a scripted py-spy, a
    fake NVML): ranks whose environ setproctitle overwrote take the launcher's Flight
    Recorder settings; the FR dumps then say who the collective waits for."""
    from test_snapshot_collect import FakeNvml, ScriptedRunner, add_proc, ok

    from diag.collect.snapshot import SnapshotOptions, take_snapshot

    base = 4_190_000  # pids no real process has here (psutil then says "exited")
    root = tmp_path / "proc"
    root.mkdir()
    root.joinpath("stat").write_text("btime 1700000000\n")
    (root / "net").mkdir()
    for name in ("tcp", "tcp6"):
        (root / "net" / name).write_text("header\n")
    fr = tmp_path / "fr"
    fr.mkdir()
    for r in (0, 1):
        (fr / f"trace_{r}").write_bytes((FR / f"trace_{r}").read_bytes())
    add_proc(root, 1, ppid=0, argv=["/sbin/init"])
    add_proc(
        root,
        base,
        ppid=1,
        argv=["python3", "-m", "sglang.launch_server", "--tp", "2", "--port", "30000"],
        env={
            "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{fr}/trace_",
        },
    )
    add_proc(root, base + 1, ppid=base, argv="sglang::scheduler_TP0", env={})
    add_proc(root, base + 2, ppid=base, argv="sglang::scheduler_TP1", env={})
    runner = ScriptedRunner(lambda a, mode, pid: ok(a, pid, native=mode == "native"))
    nvml = FakeNvml(
        {0: [100] * 2, 1: [0] * 2}, {0: [(base + 1, 5 << 30)], 1: [(base + 2, 5 << 30)]}
    )
    snap = take_snapshot(
        SnapshotOptions(samples=1, nvml=nvml, gpu_samples=2, cpu_window_s=0.0, ras=False),
        runner=runner,
        proc_root=root,
    )
    by = {p.pid: p for p in snap.processes}
    assert [by[base + r].rank.tp for r in (1, 2)] == [0, 1]  # type: ignore[union-attr]
    assert (by[base + 1].gpu_index, by[base + 2].gpu_index) == (0, 1)
    # same Python stack: one native dump, by whichever rank's Python dump came in first
    # (it stands for the group at once); the other names it as its native peer
    peers = {by[base + 1].native_peer, by[base + 2].native_peer}
    assert peers in ({None, base + 1}, {None, base + 2})
    assert by[base + 1].native_peer != base + 1 and by[base + 2].native_peer != base + 2
    (ev,) = [e for e in snap.collective_evidence if e.get("kind") == "flight_recorder"]
    assert ev["behind"] == {"0": [1]}
    assert "Flight Recorder: process group 0 waits for rank(s) [1]" in snap.verdict
    assert "the GPUs of TP0 spin at ~100%" in snap.verdict and "TP1 never joined" in snap.verdict
    wait = next(f for f in snap.findings if f.id == "nccl.waiting_for_rank")
    assert wait.ranks == ("TP1",)
    assert isinstance(by[base + 1].rss_bytes, Unavailable)  # no such real process
    doc = snapshot_to_dict(snap)
    assert doc["collective_evidence"][0]["behind"] == {"0": [1]}


def test_two_servers_on_one_host_are_compared_separately(tmp_path: Path) -> None:
    from test_snapshot_collect import ScriptedRunner, add_proc, ok

    from diag.collect.snapshot import SnapshotOptions, take_snapshot

    base = 4_180_000
    root = tmp_path / "proc"
    root.mkdir()
    root.joinpath("stat").write_text("btime 1700000000\n")
    (root / "net").mkdir()
    for name in ("tcp", "tcp6"):
        (root / "net" / name).write_text("header\n")
    add_proc(root, 1, ppid=0, argv=["/sbin/init"])
    for k, port in ((0, 31000), (10, 32000)):
        add_proc(
            root,
            base + k,
            ppid=1,
            argv=["python3", "-m", "sglang.launch_server", "--tp", "2", "--port", str(port)],
        )
        for r in (0, 1):
            add_proc(root, base + k + 1 + r, ppid=base + k, argv=f"sglang::scheduler_TP{r}")
    odd = base + 2  # server A's TP1 sleeps elsewhere; server B's ranks agree

    def answer(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        res = ok(a, pid, native=mode == "native")
        if pid == odd:
            data = json.loads(res.stdout)
            data[0]["frames"] = [
                {"name": "handle_request", "filename": "/x/srv.py", "module": None, "line": 5}
            ]
            return RunResult(a, 0, json.dumps(data), "", 0.01)
        return res

    snap = take_snapshot(
        SnapshotOptions(samples=1, nvml=_NoNvml(), cpu_window_s=0.0, ras=False),
        runner=ScriptedRunner(answer),
        proc_root=root,
    )
    a, b = snap.servers
    assert (a["port"], a["outlier_tp_ranks"]) == (31000, [1])
    assert (b["port"], b["outlier_tp_ranks"]) == (32000, [])
    assert snap.outlier_tp_ranks == (1,)
    v = snap.verdict
    first, second = v.index("port 31000"), v.index("port 32000")
    assert first < v.index("TP1 differ from the other ranks") < second
    assert "All 2 ranks wait at stack.nccl_collective" in v[second:]


class _NoNvml:
    def nvmlInit(self) -> None:  # noqa: N802
        raise RuntimeError("NVML Shared Library Not Found")


def test_json_output_validates_against_the_published_schema(tmp_path: Path) -> None:
    import jsonschema

    from diag.report.snapshot_json import SNAPSHOT_SCHEMA

    jsonschema.Draft202012Validator.check_schema(SNAPSHOT_SCHEMA)
    validator = jsonschema.Draft202012Validator(SNAPSHOT_SCHEMA)
    doc = snapshot_to_dict(story_snapshot())
    validator.validate(doc)
    # the real GPU runs' snapshots (saved by the GPU work) satisfy it as well
    gpu = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
    for path in sorted(gpu.glob("*/*/snapshot-json.json")):
        validator.validate(json.loads(path.read_text()))
    bad = json.loads(json.dumps(doc))
    bad["processes"][0]["wait_site"] = "nccl"  # not a stack.* id
    assert list(validator.iter_errors(bad))
    del bad["outlier_tp_ranks"]
    assert any("outlier_tp_ranks" in e.message for e in validator.iter_errors(bad))


def test_fr_dump_request_through_the_debug_pipe(tmp_path: Path) -> None:
    """--fr-dump writes to each rank's debug pipe the way torch expects and waits for
    the dump files. Rank 0's pipe has a reader that dumps (what ProcessGroupNCCL does);
    rank 1's reader never dumps (a rank holding the GIL); rank 2 has no reader at all."""
    import os

    for r in (0, 1, 2):
        os.mkfifo(tmp_path / f"pipe_{r}.pipe")
    got: list[bytes] = []

    def reader(rank: int, dumps: bool) -> None:
        with open(tmp_path / f"pipe_{rank}.pipe", "rb") as f:
            got.append(f.readline())
        if dumps:
            (tmp_path / f"trace_{rank}").write_bytes((FR / f"trace_{rank}").read_bytes())

    threads = [
        threading.Thread(target=reader, args=(0, True), daemon=True),
        threading.Thread(target=reader, args=(1, False), daemon=True),
    ]
    for t in threads:
        t.start()
    time.sleep(0.2)  # both readers blocked in open()
    env = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{tmp_path}/trace_",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{tmp_path}/pipe_",
    }
    ev = collective.flight_recorder_evidence(
        [(10, 0, env), (11, 1, env), (12, 2, env)], request=True, wait_s=1.0
    )
    for t in threads:
        t.join(5)
    assert got == [b"1\n", b"1\n"]
    assert ev is not None
    req = ev["requested"]
    assert isinstance(req, dict)
    assert (req["asked"], req["answered"], req["silent"]) == ([0, 1], [0], [1])
    assert "2" in req["problems"]  # no reader on rank 2's pipe
    assert ev["files"]["0"] == str(tmp_path / "trace_0")  # type: ignore[index]
    assert "hint" not in ev
    import dataclasses

    v = verdict(dataclasses.replace(story_snapshot(), collective_evidence=(ev,)))
    assert "rank(s) [1] did not answer a dump request" in v
