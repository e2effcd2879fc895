"""The collector's probes on a fake /proc tree, a fake NVML and a scripted py-spy runner
(fast, no live server): discovery, the no-ptrace tier, GPU sampling, the dump tiers."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from diag.collect.discover import discover, launcher_framework, port_from_cmdline, rank_from_title
from diag.collect.gpu import parse_visible_devices, query_gpus
from diag.collect.procfs import read_proc_tier, read_stat
from diag.collect.pyspy import DumpTarget, dump_all
from diag.errors import InputError
from diag.model import ProcessInfo, RankId, Unavailable
from diag.runner import RunResult

# ----------------------------------------------------------------- a fake /proc


def _stat(pid: int, comm: str, state: str, ppid: int, start: int = 1000, threads: int = 1) -> str:
    # fields after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime
    rest = (
        [state, str(ppid)]
        + ["0"] * 9
        + ["5", "7", "0", "0", "20", "0", str(threads), "0", str(start)]
    )
    return f"{pid} ({comm}) " + " ".join(rest) + " 0 0\n"


def add_proc(
    root: Path,
    pid: int,
    *,
    ppid: int,
    argv: Sequence[str] | str,
    comm: str = "python3",
    state: str = "S",
    env: Mapping[str, str] | None = None,
    threads: Sequence[tuple[int, str, str, str]] = (),
    sockets: Sequence[int] = (),
    start: int = 1000,
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    d.joinpath("stat").write_text(_stat(pid, comm, state, ppid, start, max(1, len(threads))))
    if isinstance(argv, str):  # a setproctitle title: one string padded with spaces
        d.joinpath("cmdline").write_bytes(argv.encode() + b" " * 20 + b"\0")
    else:
        d.joinpath("cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    d.joinpath("environ").write_bytes(
        b"\0".join(f"{k}={v}".encode() for k, v in (env or {"HOME": "/root"}).items()) + b"\0"
    )
    d.joinpath("wchan").write_text("futex_wait_queue")
    d.joinpath("syscall").write_text("202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f\n")
    task = d / "task"
    for tid, tcomm, tstate, wchan in threads or [(pid, comm, state, "futex_wait_queue")]:
        t = task / str(tid)
        t.mkdir(parents=True)
        t.joinpath("stat").write_text(_stat(tid, tcomm, tstate, ppid, start))
        t.joinpath("wchan").write_text(wchan)
    fd = d / "fd"
    fd.mkdir()
    for i, inode in enumerate(sockets):
        os.symlink(f"socket:[{inode}]", fd / str(10 + i))
    os.symlink("/dev/null", fd / "0")


def fake_proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    root.joinpath("stat").write_text("cpu  1 2 3\nbtime 1700000000\n")
    net = root / "net"
    net.mkdir()
    header = "  sl  local_address rem_address st tx_queue rx_queue tr tm->when uid inode\n"
    tail = " 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n"
    # 0x7918 = 31000 listening (0A) with inode 555; an established socket with inode 556
    net.joinpath("tcp").write_text(
        header
        + "   0: 0100007F:7918 00000000:0000 0A"
        + tail.format(inode=555)
        + "   1: 0100007F:9C40 0100007F:7918 01"
        + tail.format(inode=556)
    )
    net.joinpath("tcp6").write_text(header)
    add_proc(root, 1, ppid=0, argv=["/sbin/init"], comm="init")
    add_proc(root, 50, ppid=1, argv=["bash"], comm="bash")
    add_proc(
        root,
        100,
        ppid=50,
        argv=[
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "m",
            "--tp",
            "2",
            "--port",
            "31000",
        ],
        sockets=[555],
    )
    add_proc(
        root,
        101,
        ppid=100,
        argv="sglang::scheduler_DP0_TP0_EP0",
        threads=[
            (101, "sglang::schedul", "S", "futex_wait_queue"),
            (105, "gloo_tcp_loop", "S", "do_epoll_wait"),
        ],
    )
    add_proc(root, 102, ppid=100, argv="sglang::scheduler_DP0_TP1_EP1", state="T")
    add_proc(root, 103, ppid=100, argv="sglang::detokenizer")
    add_proc(
        root,
        104,
        ppid=100,
        argv=["python3", "-c", "from multiprocessing.resource_tracker import main"],
    )
    # a vLLM server: launcher -> EngineCore -> workers; one worker untitled, ranked by env
    add_proc(
        root, 200, ppid=50, argv=["/usr/bin/python3", "/usr/bin/vllm", "serve", "m", "--port=8100"]
    )
    add_proc(root, 201, ppid=200, argv="VLLM::EngineCore")
    add_proc(root, 202, ppid=201, argv="VLLM::Worker_TP0")
    add_proc(
        root, 203, ppid=201, argv=["python3", "-c", "worker"], env={"RANK": "1", "LOCAL_RANK": "1"}
    )
    # unrelated
    add_proc(root, 300, ppid=1, argv=["sleep", "100"], comm="sleep")
    return root


# ----------------------------------------------------------------- discovery


@pytest.mark.parametrize(
    ("title", "rank"),
    [
        ("sglang::scheduler_TP3", RankId(tp=3)),
        ("sglang::scheduler_DP0_TP3_EP3", RankId(dp=0, tp=3, ep=3)),
        ("sglang::scheduler_PP1_TP0", RankId(pp=1, tp=0)),
        ("VLLM::Worker_TP1", RankId(tp=1)),
        ("VLLM::Worker_DP1_PP0_TP2", RankId(dp=1, pp=0, tp=2)),
        ("sglang::detokenizer", None),
        ("VLLM::EngineCore", None),
    ],
)
def test_rank_from_title(title: str, rank: RankId | None) -> None:
    assert rank_from_title(title) == rank


@pytest.mark.parametrize(
    ("argv", "framework"),
    [
        (["python3", "-m", "sglang.launch_server", "--port", "1"], "sglang"),
        (["/opt/v/bin/python3", "/opt/v/bin/vllm", "serve", "m"], "vllm"),
        (["vllm", "serve", "m", "--port", "8000"], "vllm"),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
        (["bash", "-c", "vllm serve m"], None),
        (["grep", "sglang.launch_server"], None),
        (["python3", "train.py"], None),
    ],
)
def test_launcher_framework(argv: list[str], framework: str | None) -> None:
    assert launcher_framework(argv) == framework


def test_port_from_cmdline() -> None:
    assert port_from_cmdline(["x", "--port", "31000"], "sglang") == (31000, "cmdline")
    assert port_from_cmdline(["x", "--port=8100"], "vllm") == (8100, "cmdline")
    assert port_from_cmdline(["x"], "sglang") == (30000, "default")
    assert port_from_cmdline(["x"], "vllm") == (8000, "default")


def test_discover_finds_both_servers_with_roles_and_ranks(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    d = discover(root)
    assert [(s.framework, s.launcher_pid, s.port, s.port_source) for s in d.servers] == [
        ("sglang", 100, 31000, "cmdline"),
        ("vllm", 200, 8100, "cmdline"),
    ]
    by = {p.pid: p for p in d.processes}
    assert 300 not in by and 50 not in by and 1 not in by
    assert by[100].role == "launcher"
    assert (by[101].role, by[101].rank, by[101].rank_source) == (
        "scheduler",
        RankId(dp=0, tp=0, ep=0),
        "title",
    )
    assert by[102].rank == RankId(dp=0, tp=1, ep=1) and by[102].state == "T"
    assert by[103].role == "detokenizer" and by[103].rank is None
    assert by[104].role == "other"
    assert by[201].role == "engine_core"
    assert (by[202].role, by[202].rank, by[202].rank_source) == ("worker", RankId(tp=0), "title")
    # no title: the rank comes from the environment, and says so
    assert (by[203].role, by[203].rank, by[203].rank_source) == ("worker", RankId(tp=1), "env:RANK")
    assert by[101].server == 0 and by[203].server == 1


def test_ray_workers_without_a_launcher_are_one_group(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    add_proc(
        root, 400, ppid=1, argv=["/opt/ray/raylet", "--node_ip_address=10.0.0.2"], comm="raylet"
    )
    add_proc(root, 401, ppid=400, argv="ray::RayWorkerWrapper", env={"RANK": "0"})
    add_proc(root, 402, ppid=400, argv="ray::RayWorkerWrapper", env={"RANK": "1"})
    d = discover(root)
    (ray,) = [s for s in d.servers if not s.launcher]
    assert (ray.framework, ray.port, ray.port_source) == ("vllm", None, "none")
    members = sorted(
        (p.pid, p.role, p.rank, p.rank_source)
        for p in d.processes
        if p.server == d.servers.index(ray)
    )
    assert members == [
        (401, "worker", RankId(tp=0), "env:RANK"),
        (402, "worker", RankId(tp=1), "env:RANK"),
    ]
    assert all(s.launcher for s in d.servers if s is not ray)


def test_discover_from_any_pid_of_the_server(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    d = discover(root, pid=202)  # a worker: climbs to the vllm launcher
    assert [s.launcher_pid for s in d.servers] == [200]
    assert sorted(p.pid for p in d.processes) == [200, 201, 202, 203]


def test_discover_unknown_pid_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no process 999"):
        discover(fake_proc(tmp_path), pid=999)


def test_discover_nothing(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    add_proc(root, 1, ppid=0, argv=["/sbin/init"])
    d = discover(root)
    assert d.servers == () and d.processes == ()
    assert "no SGLang or vLLM server found" in d.notes[0]


# ----------------------------------------------------------------- the /proc tier


def test_proc_tier(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    tier = read_proc_tier(101, root)
    assert not isinstance(tier, Unavailable)
    assert tier.state == "S"
    assert tier.wchan == "futex_wait_queue"
    if platform.machine() == "x86_64":
        assert tier.syscall == "futex"
    assert tier.thread_names == {"sglang::schedul": 1, "gloo_tcp_loop": 1}
    assert tier.thread_wchans == {"futex_wait_queue": 1, "do_epoll_wait": 1}
    assert tier.listening_ports == ()
    launcher = read_proc_tier(100, root)
    assert not isinstance(launcher, Unavailable)
    assert launcher.listening_ports == (31000,)
    assert launcher.sockets == 1
    worker = read_proc_tier(203, root)
    assert not isinstance(worker, Unavailable)
    assert worker.environ == {"RANK": "1", "LOCAL_RANK": "1"}
    assert isinstance(read_proc_tier(4242, root), Unavailable)


def test_stat_with_spaces_and_parens_in_comm(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    add_proc(root, 7, ppid=1, argv=["x"], comm="a) b (c")
    st = read_stat(7, root)
    assert st is not None and st.comm == "a) b (c" and st.ppid == 1 and st.starttime_ticks == 1000


# ----------------------------------------------------------------- GPUs (fake NVML)


class FakeNvml:
    """The few pynvml calls diag makes, over scripted readings."""

    def __init__(
        self, utils: dict[int, list[int]], procs: dict[int, list[tuple[int, int]]]
    ) -> None:
        self.utils = {i: list(v) for i, v in utils.items()}
        self.procs = procs
        self.shutdown = False

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.utils)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-{h:04d}-uuid"

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
        return b"NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=self.utils[h].pop(0))

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(used=10 << 30, total=141 << 30)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:  # noqa: N802
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.procs.get(h, [])]


def test_gpu_utilization_is_sampled_and_processes_mapped() -> None:
    nvml = FakeNvml(
        {0: [100, 100, 98, 100], 1: [0, 0, 0, 4]}, {0: [(602, 1541406720)], 1: [(603, 1 << 30)]}
    )
    q = query_gpus(samples=4, interval_s=0.0, nvml=nvml, use_env=False)
    assert not isinstance(q, Unavailable)
    g0, g1 = q.gpus
    assert (g0.util_percent_mean, g0.util_percent_max, g0.samples) == (99.5, 100.0, 4)
    assert (g1.util_percent_mean, g1.util_percent_max) == (1.0, 4.0)
    assert g0.processes == {602: 1541406720} and g1.processes == {603: 1 << 30}
    assert g0.name == "NVIDIA H200" and g0.memory_total_bytes == 141 << 30
    assert nvml.shutdown


def test_gpu_respects_cuda_visible_devices() -> None:
    nvml = FakeNvml({0: [1], 1: [2], 2: [3]}, {})
    q = query_gpus(samples=1, nvml=nvml, visible_devices="2,0")
    assert not isinstance(q, Unavailable)
    assert [g.index for g in q.gpus] == [0, 2]
    q = query_gpus(samples=1, nvml=FakeNvml({0: [1], 1: [2]}, {}), visible_devices="GPU-0001")
    assert not isinstance(q, Unavailable) and [g.index for g in q.gpus] == [1]
    assert parse_visible_devices("0,-1,2") == ["0"]
    assert parse_visible_devices(None) is None


def test_no_nvml_is_unavailable_not_an_error() -> None:
    class Broken(FakeNvml):
        def nvmlInit(self) -> None:  # noqa: N802
            raise RuntimeError("NVML Shared Library Not Found")

    q = query_gpus(nvml=Broken({}, {}), use_env=False)
    assert isinstance(q, Unavailable) and "NVML" in q.reason


def test_inventory_goes_through_the_same_nvml_door() -> None:
    from diag.bundle.env import _gpus
    from diag.collect.gpu import gpu_inventory

    class Inventory(FakeNvml):
        def nvmlSystemGetDriverVersion(self) -> bytes:  # noqa: N802
            return b"570.86.15"

        def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
            return 12080

        def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:  # noqa: N802
            if h == 1:
                raise RuntimeError("Not Supported")
            return (9, 0)

    nvml = Inventory({0: [0], 1: [0]}, {})
    inv = gpu_inventory(nvml=nvml)
    assert not isinstance(inv, Unavailable) and nvml.shutdown
    assert (inv["driver"], inv["cuda_driver"]) == ("570.86.15", "12.8")
    d0, d1 = inv["devices"]  # type: ignore[misc]
    assert d0 == {"index": 0, "name": "NVIDIA H200", "memory_total_bytes": 141 << 30,
                  "compute_capability": "9.0"}
    assert d1["compute_capability"] == Unavailable("Not Supported")

    class Broken(FakeNvml):
        def nvmlInit(self) -> None:  # noqa: N802
            raise RuntimeError("NVML Shared Library Not Found")

    # one "unavailable" shape: the same reason from the snapshot's query and the inventory
    a, b = gpu_inventory(nvml=Broken({}, {})), query_gpus(nvml=Broken({}, {}), use_env=False)
    assert isinstance(a, Unavailable) and a == b
    # env.json writes it as {"unavailable": reason} (on this host: no NVML, or a real one)
    got = _gpus()
    assert isinstance(got, dict) and ("unavailable" in got or "devices" in got)


# ----------------------------------------------------------------- py-spy tiers


PYSPY_JSON = [
    {
        "pid": 0,
        "thread_id": 1,
        "thread_name": "MainThread",
        "os_thread_id": 0,
        "active": False,
        "owns_gil": False,
        "frames": [
            {
                "name": "pthread_cond_wait",
                "filename": "/lib/libc.so.6",
                "module": "/lib/libc.so.6",
                "line": 0,
            },
            {
                "name": "all_reduce",
                "filename": "/x/torch/distributed/distributed_c10d.py",
                "module": None,
                "line": 3252,
            },
            {"name": "main", "filename": "/x/mini.py", "module": None, "line": 9},
        ],
    }
]


class ScriptedRunner:
    """Answers py-spy calls from a script: mode -> RunResult (or a callable)."""

    def __init__(self, answer: Any, which: str | None = "/usr/bin/py-spy") -> None:
        self.answer = answer
        self.calls: list[tuple[str, ...]] = []
        self._which = which

    def which(self, program: str) -> str | None:
        return self._which

    def run(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> RunResult:
        self.calls.append(tuple(argv))
        mode = (
            "native"
            if "--native" in argv
            else "nonblocking"
            if "--nonblocking" in argv
            else "python"
        )
        pid = int(argv[argv.index("--pid") + 1])
        return self.answer(tuple(argv), mode, pid)  # type: ignore[no-any-return]


def ok(argv: tuple[str, ...], pid: int, native: bool = True) -> RunResult:
    frames = PYSPY_JSON[0]["frames"] if native else PYSPY_JSON[0]["frames"][1:]  # type: ignore[index]
    data = [dict(PYSPY_JSON[0], pid=pid, os_thread_id=pid, frames=frames)]
    return RunResult(argv, 0, json.dumps(data), "", 0.01)


def targets(root: Path, pids: Sequence[int]) -> list[DumpTarget]:
    out = []
    for pid in pids:
        st = read_stat(pid, root)
        assert st is not None
        out.append(DumpTarget(pid, st.starttime_ticks, f"sglang::scheduler_TP{pid}"))
    return out


def test_one_native_dump_per_group_of_identical_python_stacks(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    runner = ScriptedRunner(lambda a, mode, pid: ok(a, pid, native=mode == "native"))
    res = dump_all(targets(root, [101, 103, 104]), runner=runner, proc_root=root, samples=1)
    natives = [c for c in runner.calls if "--native" in c]
    assert len(natives) == 1
    rep = int(natives[0][natives[0].index("--pid") + 1])
    assert res[rep].stack is not None and res[rep].stack.mode == "native"
    for pid in {101, 103, 104} - {rep}:
        assert res[pid].native_peer == rep and res[pid].outcome == "ok"
    runner = ScriptedRunner(lambda a, mode, pid: ok(a, pid, native=mode == "native"))
    dump_all(
        targets(root, [101, 103, 104]), runner=runner, proc_root=root, samples=1, native_all=True
    )
    assert len([c for c in runner.calls if "--native" in c]) == 3


def test_the_lead_is_dumped_natively_at_once_and_stands_for_its_group(tmp_path: Path) -> None:
    """The lead's --native dump starts beside its Python-only dump (not after it); the lead
    stands for its group even when a peer's Python-only dump is in first, so no more native
    dumps are taken than without a lead; it gets one more look after its native dump."""
    root = fake_proc(tmp_path)
    times: dict[tuple[int, str], list[tuple[float, float]]] = {}

    def answer(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        t0 = time.monotonic()
        if pid == 104 and mode == "python" and (104, "python") not in times:
            time.sleep(0.2)  # the lead's first dump comes in last
        times.setdefault((pid, mode), []).append((t0, time.monotonic()))
        return ok(a, pid, native=mode == "native")

    res = dump_all(
        targets(root, [101, 103, 104]), runner=ScriptedRunner(answer), proc_root=root,
        samples=2, min_gap_s=0.01, lead=104,
    )  # fmt: skip
    assert [k for k in times if k[1] == "native"] == [(104, "native")]
    (native_start, _), = times[(104, "native")]
    first_python_end = times[(104, "python")][0][1]
    assert native_start < first_python_end  # beside its Python-only dump
    assert len(times[(104, "python")]) == 2  # and one more look after the native dump
    assert times[(104, "python")][1][0] >= times[(104, "native")][0][1]
    assert res[101].native_peer == res[103].native_peer == 104
    assert res[104].stack is not None and res[104].stack.mode == "native"
    assert res[104].stack.samples == 3 and res[104].moving is False
    assert [a.mode for a in res[104].attempts] == ["python", "native"]


def test_a_lead_native_dump_refused_beside_its_python_dump_is_taken_again(
    tmp_path: Path,
) -> None:
    root = fake_proc(tmp_path)
    refused: list[int] = []

    def answer(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        if mode == "native" and not refused:  # the Python-only dump held the target
            refused.append(pid)
            return RunResult(a, 1, "", "Error: Failed to suspend process: EPERM", 0.01)
        return ok(a, pid, native=mode == "native")

    res = dump_all(
        targets(root, [101, 103]), runner=ScriptedRunner(answer), proc_root=root,
        samples=1, lead=101,
    )  # fmt: skip
    assert refused == [101]
    assert [(a.mode, a.outcome) for a in res[101].attempts] == [
        ("python", "ok"), ("native", "permission_denied"), ("native", "ok")
    ]
    assert res[101].outcome == "ok" and res[101].stack is not None
    assert res[101].stack.mode == "native" and res[103].native_peer == 101


def test_the_lead_is_the_lowest_rank_of_the_largest_set_waiting_alike(tmp_path: Path) -> None:
    from diag.collect.snapshot import _lead, _targets

    root = fake_proc(tmp_path)
    found = discover(root).processes
    tiers = {p.pid: read_proc_tier(p.pid, root) for p in found}
    tiers = {pid: t for pid, t in tiers.items() if not isinstance(t, Unavailable)}
    ranks = {p.pid: p.rank for p in found if p.role in ("scheduler", "worker")}
    assert {101, 102, 202, 203} <= set(ranks)
    # 102 (TP1) is stopped: never first; of the others all wait alike: TP0, lowest pid
    assert _lead(found, tiers, _targets(found, True)) == 101
    assert _lead(found, tiers, _targets(found, False)) is None  # --no-native


def test_stopped_target_gets_only_nonblocking(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)  # 102 is in state T in the fake tree
    runner = ScriptedRunner(lambda a, mode, pid: ok(a, pid, native=False))
    res = dump_all(targets(root, [102]), runner=runner, proc_root=root, samples=1)
    assert [c[-1] for c in runner.calls] == ["--nonblocking"]
    assert res[102].was_stopped and res[102].outcome == "ok" and not res[102].resumed


def test_outcomes_recorded(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)

    def denied(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        return RunResult(a, 1, "", "Error: Permission Denied (os error 13)", 0.01)

    res = dump_all(targets(root, [101]), runner=ScriptedRunner(denied), proc_root=root, samples=1)
    assert res[101].outcome == "permission_denied" and "Permission" in (res[101].error or "")

    def slow(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        return RunResult(a, None, "", "", 5.0, timed_out=True)

    res = dump_all(targets(root, [101]), runner=ScriptedRunner(slow), proc_root=root, samples=1)
    assert res[101].outcome == "timeout"

    res = dump_all(
        targets(root, [101]), runner=ScriptedRunner(slow, which=None), proc_root=root, pyspy=None
    )
    # no py-spy anywhere (the scripted runner finds none; the venv's may exist)
    assert res[101].outcome in ("no_pyspy", "timeout")

    def not_python(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        return RunResult(a, 1, "", "Error: Failed to find python version from target process", 0.01)

    res = dump_all(
        targets(root, [101]), runner=ScriptedRunner(not_python), proc_root=root, samples=1
    )
    assert res[101].outcome == "not_python"


def test_reused_pid_is_never_dumped(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    runner = ScriptedRunner(lambda a, mode, pid: ok(a, pid))
    res = dump_all([DumpTarget(101, 999999, "x")], runner=runner, proc_root=root)
    assert res[101].outcome == "not_found" and runner.calls == []


def _state(pid: int) -> str:
    st = read_stat(pid, Path("/proc"))
    assert st is not None
    return st.state


def _child() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    time.sleep(0.2)
    return proc


def test_a_dump_that_leaves_the_target_stopped_is_continued() -> None:
    child = _child()
    try:

        def stops_it(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
            os.kill(pid, signal.SIGSTOP)  # what a py-spy killed mid-attach can leave behind
            for _ in range(100):
                if _state(pid) == "T":
                    break
                time.sleep(0.01)
            return ok(a, pid, native=mode == "native")

        st = read_stat(child.pid, Path("/proc"))
        assert st is not None
        res = dump_all(
            [DumpTarget(child.pid, st.starttime_ticks, "t")],
            runner=ScriptedRunner(stops_it),
            samples=1,
        )
        assert res[child.pid].resumed is True
        assert _state(child.pid) != "T"
    finally:
        child.kill()
        child.wait()


def test_a_process_stopped_before_is_left_stopped() -> None:
    child = _child()
    try:
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(100):
            if _state(child.pid) == "T":
                break
            time.sleep(0.01)
        st = read_stat(child.pid, Path("/proc"))
        assert st is not None
        runner = ScriptedRunner(lambda a, mode, pid: ok(a, pid, native=False))
        res = dump_all([DumpTarget(child.pid, st.starttime_ticks, "t")], runner=runner, samples=1)
        assert res[child.pid].was_stopped and not res[child.pid].resumed
        assert _state(child.pid) == "T"
        assert all("--nonblocking" in c for c in runner.calls)
    finally:
        child.kill()
        child.wait()


def test_samples_tell_stuck_from_slow(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    seen: dict[int, int] = {}

    def answer(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        seen[pid] = seen.get(pid, 0) + 1
        res = ok(a, pid, native=mode == "native")
        if pid == 103 and mode == "python":  # a busy rank: a different line each sample
            data = json.loads(res.stdout)
            data[0]["frames"][-1]["line"] = 100 + seen[pid]
            return RunResult(a, 0, json.dumps(data), "", 0.01)
        return res

    res = dump_all(
        targets(root, [101, 103]),
        runner=ScriptedRunner(answer),
        proc_root=root,
        samples=3,
        interval_s=0.05,
    )
    assert res[101].moving is False and res[103].moving is True
    # python, then native (its second look), then one more Python-only sample
    assert res[101].stack is not None and res[101].stack.samples == 3
    assert len(res[103].samples) == 1


def test_the_second_look_waits_for_no_interval(tmp_path: Path) -> None:
    """Two samples: the peers' second look runs beside the native dump, not interval_s later.

    (With interval_s far past the deadline the old design took no second sample at all.)
    """
    root = fake_proc(tmp_path)
    calls: list[tuple[int, str]] = []

    def answer(a: tuple[str, ...], mode: str, pid: int) -> RunResult:
        calls.append((pid, mode))
        return ok(a, pid, native=mode == "native")

    res = dump_all(
        targets(root, [101, 103, 104]),
        runner=ScriptedRunner(answer),
        proc_root=root,
        samples=2,
        interval_s=60.0,
        min_gap_s=0.01,
        timeout_s=10.0,
    )
    assert all(r.moving is False for r in res.values()), res
    rep = next(p for p in (101, 103, 104) if (p, "native") in calls)
    assert sorted(calls) == sorted(
        [(p, "python") for p in (101, 103, 104)]
        + [(rep, "native")]
        + [(p, "python") for p in (101, 103, 104) if p != rep]
    )
    peers = [r for p, r in res.items() if p != rep]
    assert all(r.native_peer == rep and len(r.samples) == 1 for r in peers)


def test_facts_of_real_processes() -> None:
    import socket

    from diag.collect.facts import collect_facts

    child = _child()
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            facts = collect_facts([os.getpid(), child.pid, 2**22 + 12345], window_s=0.1)
        me, kid, gone = facts[os.getpid()], facts[child.pid], facts[2**22 + 12345]
        if os.geteuid() == 0:  # mapping sockets to pids needs root
            assert port in me.listening_ports  # type: ignore[operator]
        assert isinstance(me.rss_bytes, int) and me.rss_bytes > 1 << 20
        assert isinstance(me.cpu_percent, float) and isinstance(me.threads, int)
        assert kid.state == "S" and kid.uptime_s is not None and kid.uptime_s >= 0
        assert child.pid in me.children
        assert isinstance(gone.rss_bytes, Unavailable) and "exited" in gone.rss_bytes.reason
    finally:
        child.kill()
        child.wait()


def test_the_cpu_window_can_start_at_the_proc_tier() -> None:
    """A first reading taken from /proc (the tier's utime + stime) starts the window: a
    busy process reads ~100%, a sleeping one ~0%, and the window ends window_s after
    that reading, not after psutil's import."""
    from diag.collect.facts import collect_facts

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = _child()
    try:
        time.sleep(0.2)
        tick = os.sysconf("SC_CLK_TCK")
        since = {}
        for pid in (busy.pid, idle.pid):
            read = read_proc_tier(pid, Path("/proc"))
            assert not isinstance(read, Unavailable) and read.cpu_ticks is not None
            since[pid] = (time.monotonic(), read.cpu_ticks / tick)
        time.sleep(0.2)  # (psutil's import, in the snapshot)
        t0 = time.monotonic()
        facts = collect_facts([busy.pid, idle.pid], window_s=0.5, since=since)
        assert 0.25 < time.monotonic() - t0 < 0.45  # the window's rest, not all of it
        hot, cold = facts[busy.pid].cpu_percent, facts[idle.pid].cpu_percent
        assert isinstance(hot, float) and isinstance(cold, float)
        # (a busy process on a loaded 2-core box may get a third of a core: the reading
        # must tell the two apart, not measure the box)
        assert hot > 20 and cold < 10 and hot > cold + 15
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()


def _proc(pid: int, tp: int, state: str, server: int = 0) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        ppid=1,
        role="worker",
        title=f"VLLM::Worker_TP{tp}",
        cmdline=(f"VLLM::Worker_TP{tp}",),
        framework="vllm",
        rank=RankId(tp=tp),
        rank_source="title",
        state=state,
        rss_bytes=1,
        cpu_percent=0.0,
        threads=1,
        listening_ports=(),
        server=server,
    )


def test_a_stopped_rank_is_odd_one_out_whatever_its_stack() -> None:
    from diag.collect.snapshot import _halted_ranks

    # the real vLLM hang: TP0 waits at a handshake, TP1 is stopped; stacks tie 1-1
    assert _halted_ranks([_proc(10, 0, "S"), _proc(11, 1, "T")]) == (1,)
    # every rank stopped: nobody is the odd one out
    assert _halted_ranks([_proc(10, 0, "T"), _proc(11, 1, "T")]) == ()
    assert _halted_ranks([_proc(10, 0, "S"), _proc(11, 1, "R")]) == ()
