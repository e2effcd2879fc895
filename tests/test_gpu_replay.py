"""Replays of the GPU runs (fixtures/gpu/*), without a GPU.

Each fixture is what one device run saw of a real hang of ``tests/gpu/mini_server.py`` on
H200s: raw ``py-spy dump --native --json`` of every process, NVML readings, psutil facts,
the no-ptrace /proc tier, and what ``diag snapshot --json`` printed there and then.
These tests push the raw captures through today's analysis:

* the stacks alone (diag.stacks: parse, classify, merge, outliers);
* the GPU-side verdict of a collective hang: the ranks that joined spin their GPU at
  ~100%, the rank that never joined idles at 0%, so it is the odd one out;
* the CPU-side verdict of the story's hang: every GPU idle, high RSS, no port;
* the whole ``take_snapshot`` pipeline, fed the captures through its seams (a replaying
  Runner for py-spy, a replaying NVML, the saved /proc tree, the saved psutil facts);
* and what diag said live on the GPU host.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from diag.model import GpuSample, ProcessInfo, Snapshot, StackProcess
from diag.runner import RunResult
from diag.stacks.classify import apply_gpu_facts, classified
from diag.stacks.frames import rank_from_title
from diag.stacks.merge import group_stacks, outlier_tp_ranks
from diag.stacks.pyspy_json import parse_pyspy_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
GIB = 2**30
BUSY, IDLE = 90.0, 10.0


@dataclass(frozen=True)
class Scenario:
    run: str
    name: str
    path: Path
    meta: dict[str, Any]
    nvml: dict[str, Any]
    facts: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return f"{self.run}/{self.name}"

    @property
    def mode(self) -> str:
        return str(self.meta["mode"])

    @property
    def wait(self) -> str:
        return str(self.meta["wait"])

    @property
    def rank_pids(self) -> list[int]:
        return [int(p) for p in self.meta["pids"]["ranks"]]

    @property
    def outlier(self) -> int | None:
        return self.meta.get("outlier_rank") if self.mode == "collective" else None

    @property
    def gpus(self) -> list[dict[str, Any]]:
        return list(self.nvml["gpus"])

    def gpu_of(self, pid: int) -> dict[str, Any]:
        (gpu,) = [g for g in self.gpus if str(pid) in g.get("processes", {})]
        return gpu

    def shared_gpu(self, pid: int) -> bool:
        return sum(1 for p in self.rank_pids if str(p) in self.gpu_of(pid)["processes"]) > 1

    def util_of(self, pid: int) -> float:
        """The rank's GPU utilization: its GPU's, or, where ranks share a GPU, its own SM
        share from NVML's per-process samples (no sample in the window: it ran nothing)."""
        gpu = self.gpu_of(pid)
        per_proc = gpu.get("process_sm_util")
        if self.shared_gpu(pid) and isinstance(per_proc, dict):
            mine = per_proc.get(str(pid), [0])
            return sum(mine) / len(mine)
        return float(gpu["util_mean"])

    def fact(self, pid: int) -> dict[str, Any]:
        (f,) = [f for f in self.facts if f["pid"] == pid]
        return f

    def dump(self, role: str, kind: str = "native.json") -> Any:
        return json.loads((self.path / "pyspy" / f"{role}.{kind}").read_text())

    def rank_stacks(self) -> list[StackProcess]:
        out = []
        for r, pid in enumerate(self.rank_pids):
            title = f"sglang::scheduler_TP{r}"
            p = parse_pyspy_json(self.dump(f"rank{r}"), pid=pid, title=title, mode="native")
            out.append(replace(classified(p), rank=rank_from_title(title)))
        return out

    def live_snapshot(self) -> dict[str, Any]:
        data = json.loads((self.path / "snapshot-json.json").read_text())
        assert isinstance(data, dict)
        return data


def _scenario(run: Path, sc: Path) -> Scenario:
    return Scenario(
        run.name,
        sc.name,
        sc,
        json.loads((sc / "meta.json").read_text()),
        json.loads((sc / "nvml.json").read_text()),
        json.loads((sc / "facts.json").read_text()),
    )


def _load() -> list[Scenario]:
    runs = sorted(d for d in FIXTURES.iterdir() if (d / "env.json").is_file())
    return [
        _scenario(run, sc)
        for run in runs
        for sc in sorted(d for d in run.iterdir() if (d / "meta.json").is_file())
    ]


SCENARIOS = _load()
COLLECTIVE = [s for s in SCENARIOS if s.mode == "collective" and s.meta["backend"] == "nccl"]
CPU_SIDE = [s for s in SCENARIOS if s.mode == "cpu"]

def test_fixtures_present() -> None:
    assert COLLECTIVE, "no collective-hang fixture under fixtures/gpu"
    assert CPU_SIDE, "no CPU-side-hang fixture under fixtures/gpu"


# ---------------------------------------------------------------------------
# The physics, from NVML and psutil alone (no diag code): what the hangs look like.


@pytest.mark.parametrize("s", COLLECTIVE, ids=lambda s: s.id)
def test_collective_hang_gpu_physics(s: Scenario) -> None:
    for r, pid in enumerate(s.rank_pids):
        if r == s.outlier:
            assert s.util_of(pid) <= IDLE, (r, s.util_of(pid))
            assert s.fact(pid)["cpu_percent"] <= 10
        elif s.shared_gpu(pid) and len(s.rank_pids) > 2:
            # Several spinning ranks time-slice one GPU: NVML's per-process samples cover
            # only some of them in a window; the GPU reads 100% and the rank's CPU spins
            # in the CUDA sync.
            assert s.gpu_of(pid)["util_mean"] >= BUSY
            assert s.fact(pid)["cpu_percent"] >= 50, (r, s.fact(pid)["cpu_percent"])
        else:
            assert s.util_of(pid) >= BUSY, (r, s.util_of(pid))
        assert s.gpu_of(pid)["processes"][str(pid)] >= s.meta["weights_gb"] * GIB


@pytest.mark.parametrize("s", CPU_SIDE, ids=lambda s: s.id)
def test_cpu_side_hang_physics(s: Scenario) -> None:
    for g in s.gpus:
        assert max(g["util"]) <= IDLE, g["util"]
    for pid in s.rank_pids:
        f = s.fact(pid)
        assert f["rss_bytes"] >= 2 * GIB
        assert f["cpu_percent"] <= 10
        assert s.meta["port"] not in f["listening_ports"]
        assert s.gpu_of(pid)["processes"][str(pid)] >= s.meta["weights_gb"] * GIB


# ---------------------------------------------------------------------------
# The stacks, through diag.stacks.


@pytest.mark.parametrize("s", COLLECTIVE, ids=lambda s: s.id)
def test_collective_hang_wait_sites(s: Scenario) -> None:
    sites = {p.rank.tp: p.wait_site for p in s.rank_stacks() if p.rank is not None}
    for r, site in sites.items():
        if r == s.outlier:
            assert site == "stack.jit_compile"  # blocked on the JIT-cache file lock (flock)
        elif s.wait == "barrier":
            # barrier(): the CPU blocks inside torch's barrier, on the stream's sync
            assert site in ("stack.nccl_collective", "stack.cuda_sync"), (r, site)
        else:
            # From the CPU an NCCL hang is a CUDA sync (the all-reduce itself returned).
            assert site == "stack.cuda_sync", (r, site)


# Known misses, kept as strict xfails so that a fix shows up.
KNOWN_MISSES: dict[tuple[str, str], str] = {}


def _with_misses(scenarios: list[Scenario]) -> list[Any]:
    return [
        pytest.param(
            s,
            id=s.id,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[(s.run, s.name)])]
            if (s.run, s.name) in KNOWN_MISSES
            else [],
        )
        for s in scenarios
    ]


@pytest.mark.parametrize("s", _with_misses(COLLECTIVE))
def test_collective_hang_gpu_side_verdict_names_the_rank_that_never_joined(
    s: Scenario,
) -> None:
    stacks = s.rank_stacks()
    util = {pid: s.util_of(pid) for pid in s.rank_pids}
    joined = [p for p in stacks if p.rank is not None and p.rank.tp != s.outlier]
    if len(stacks) == 2 and {p.wait_site for p in joined} == {"stack.cuda_sync"}:
        # a CUDA sync vs a file lock, one rank each: the stacks alone cannot tell
        assert outlier_tp_ranks(stacks, group_stacks(stacks)) == ()
    stacks = apply_gpu_facts(stacks, util)
    for p in stacks:
        assert p.rank is not None
        if p.rank.tp == s.outlier:
            assert p.wait_site == "stack.jit_compile"
        elif util[p.pid] >= BUSY:  # its GPU spins while the outlier's idles: a collective
            assert p.wait_site == "stack.nccl_collective", (p.rank, p.wait_site)
    groups = group_stacks(stacks)
    assert outlier_tp_ranks(stacks, groups) == (s.outlier,)


@pytest.mark.parametrize("s", CPU_SIDE, ids=lambda s: s.id)
def test_cpu_side_hang_stacks(s: Scenario) -> None:
    stacks = s.rank_stacks()
    assert {p.wait_site for p in stacks} == {"stack.dist_init"}  # TCPStore wait
    for p in stacks:
        thread = next(t for t in p.threads if t.thread_id == p.wait_thread)
        names = [f.name for f in thread.frames]
        assert "c10d::TCPStore::doWait" in names  # the native wait site is visible
        assert "wait_for_peer_node" in names
    stacks = apply_gpu_facts(stacks, {pid: s.util_of(pid) for pid in s.rank_pids})
    groups = group_stacks(stacks)
    assert len(groups) == 1
    assert outlier_tp_ranks(stacks, groups) == ()


@pytest.mark.parametrize("s", CPU_SIDE, ids=lambda s: s.id)
def test_cpu_side_verdict(s: Scenario) -> None:
    from diag.report.snapshot_view import verdict_text
    from diag.rules import apply_snapshot_rules

    stacks = {p.pid: p for p in s.rank_stacks()}
    procs = []
    for r, pid in enumerate(s.rank_pids):
        f = s.fact(pid)
        procs.append(
            ProcessInfo(
                pid=pid,
                ppid=f["ppid"],
                role="scheduler",
                title=f"sglang::scheduler_TP{r}",
                cmdline=tuple(f["cmdline"]),
                framework="sglang",
                rank=stacks[pid].rank,
                rank_source="title",
                state="S",
                rss_bytes=f["rss_bytes"],
                cpu_percent=float(f["cpu_percent"]),
                threads=f["threads"],
                listening_ports=tuple(f["listening_ports"]),
                gpu_index=s.gpu_of(pid)["index"],
                gpu_memory_bytes=s.gpu_of(pid)["processes"][str(pid)],
                stack=stacks[pid],
            )
        )
    gpus = tuple(
        GpuSample(
            index=g["index"],
            name=g["name"],
            uuid=g["uuid"],
            util_percent_mean=float(g["util_mean"]),
            util_percent_max=float(max(g["util"])),
            memory_used_bytes=g["memory_used_bytes"],
            memory_total_bytes=g["memory_total_bytes"],
            samples=len(g["util"]),
            processes={int(k): v for k, v in g["processes"].items()},
        )
        for g in s.gpus
    )
    launcher = s.meta["pids"]["launcher"]
    snap = Snapshot(
        host="replay",
        taken_at=dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc),
        processes=tuple(procs),
        gpus=gpus,
        servers=(
            {
                "framework": "sglang",
                "launcher_pid": launcher,
                "port": s.meta["port"],
                "port_listening": False,
            },
        ),
    )
    verdict = verdict_text(dataclasses.replace(snap, findings=tuple(apply_snapshot_rules(snap))))
    assert f"port {s.meta['port']} is not listening" in verdict
    assert f"All {len(procs)} ranks wait at stack.dist_init" in verdict
    assert "blocked on the CPU side" in verdict


# ---------------------------------------------------------------------------
# The whole snapshot pipeline, replayed through its seams.


class ReplayRunner:
    """A Runner that answers ``py-spy dump`` with the dumps saved on the GPU host."""

    def __init__(self, s: Scenario) -> None:
        pids = s.meta["pids"]
        self.roles = {int(pids["launcher"]): "launcher"}
        self.roles |= {pid: f"rank{r}" for r, pid in enumerate(s.rank_pids)}
        if pids.get("detokenizer"):
            self.roles[int(pids["detokenizer"])] = "detokenizer"
        self.s = s
        self.calls: list[tuple[str, ...]] = []

    def which(self, program: str) -> str | None:
        return "/replay/py-spy" if program == "py-spy" else None

    def run(self, argv: Any, *, timeout: float, env: Any = None) -> RunResult:
        args = tuple(argv)
        self.calls.append(args)
        pid = int(args[args.index("--pid") + 1])
        role = self.roles.get(pid)
        if role is None:
            return RunResult(args, 1, "", f"Error: Failed to find process {pid}", 0.01)
        kind = "native.json" if "--native" in args else "python.json"
        return RunResult(args, 0, json.dumps(self.s.dump(role, kind)), "", 0.01)


class ReplayNVML:
    """The pynvml calls diag makes, answered from ``nvml.json``."""

    def __init__(self, s: Scenario) -> None:
        self.gpus = s.gpus
        self.reads = {g["index"]: 0 for g in self.gpus}

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return dict(self.gpus[i])

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:
        return str(h["uuid"])

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:
        return str(h["name"])

    def nvmlDeviceGetUtilizationRates(self, h: dict[str, Any]) -> Any:
        n = self.reads[h["index"]]
        self.reads[h["index"]] = n + 1
        return _Obj(gpu=h["util"][n % len(h["util"])], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> Any:
        used, total = h["memory_used_bytes"], h["memory_total_bytes"]
        return _Obj(used=used, total=total, free=total - used)

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict[str, Any]) -> list[Any]:
        return [_Obj(pid=int(p), usedGpuMemory=m) for p, m in h["processes"].items()]

    def nvmlErrorString(self, value: object) -> str:
        return str(value)


class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


_STATE = {"running": "R", "sleeping": "S", "disk-sleep": "D", "stopped": "T", "zombie": "Z"}


def _replay_snapshot(s: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Snapshot:
    import diag.collect.snapshot as snapmod
    from diag.collect.facts import ProcessFacts

    with tarfile.open(s.path / "proc.tar.gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(tmp_path)  # noqa: S202 - our own fixture

    def facts(pids: Any, **_: Any) -> dict[int, ProcessFacts]:
        out = {}
        for f in s.facts:
            if f["pid"] in pids:
                out[f["pid"]] = ProcessFacts(
                    pid=f["pid"],
                    state=_STATE.get(f["status"], f["status"]),
                    rss_bytes=f["rss_bytes"],
                    cpu_percent=float(f["cpu_percent"]),
                    threads=f["threads"],
                    listening_ports=tuple(f["listening_ports"]),
                    create_time=f["create_time"],
                    uptime_s=None,
                    children=(),
                )
        return out

    monkeypatch.setattr(snapmod, "collect_facts", facts)
    # The server's port is judged from the saved facts, not from this host's sockets.
    monkeypatch.setattr(snapmod, "port_open", lambda port, **_: False)
    nvml = ReplayNVML(s)
    options = snapmod.SnapshotOptions(
        pid=int(s.meta["pids"]["launcher"]),
        samples=2,
        interval_s=0.0,
        timeout_s=10.0,
        cpu_window_s=0.0,
        gpu_samples=len(s.gpus[0]["util"]),
        gpu_interval_s=0.0,
        ras=False,
        nvml=nvml,
    )
    runner = ReplayRunner(s)
    snap = snapmod.take_snapshot(options, runner=runner, proc_root=tmp_path / "proc")
    assert runner.calls, "take_snapshot never asked py-spy"
    return snap


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.id)
def test_replayed_snapshot_finds_every_rank_on_its_gpu(
    s: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = _replay_snapshot(s, tmp_path, monkeypatch)
    ranks = {p.rank.tp: p for p in snap.processes if p.rank is not None and p.rank.tp is not None}
    assert sorted(ranks) == list(range(len(s.rank_pids)))
    for r, p in ranks.items():
        assert p.pid == s.rank_pids[r]
        assert p.role == "scheduler"
        assert p.gpu_index == s.gpu_of(p.pid)["index"]
        assert p.gpu_memory_bytes is not None
        assert p.gpu_memory_bytes >= s.meta["weights_gb"] * GIB
        assert p.stack is not None and p.stack.outcome == "ok"
    roles = sorted(p.role for p in snap.processes if p.rank is None)
    assert "launcher" in roles and "detokenizer" in roles
    (server,) = snap.servers
    assert server["framework"] == "sglang"
    assert server["port"] == s.meta["port"]
    assert server["port_listening"] is False
    assert not any(p.state == "T" for p in snap.processes)


@pytest.mark.parametrize("s", CPU_SIDE, ids=lambda s: s.id)
def test_replayed_snapshot_cpu_side_verdict(
    s: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = _replay_snapshot(s, tmp_path, monkeypatch)
    assert snap.outlier_tp_ranks == ()
    assert "blocked on the CPU side" in snap.verdict
    sites = {p.stack.wait_site for p in snap.processes if p.rank is not None and p.stack}
    assert sites == {"stack.dist_init"}


@pytest.mark.parametrize("s", COLLECTIVE, ids=lambda s: s.id)
def test_replayed_snapshot_collective_verdict(
    s: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = _replay_snapshot(s, tmp_path, monkeypatch)
    assert "blocked on the CPU side" not in snap.verdict
    assert f"TP{s.outlier}: stack.jit_compile" in snap.verdict
    shared = any(s.shared_gpu(pid) for pid in s.rank_pids)
    if not shared or len(s.rank_pids) > 2:
        # one GPU per rank: the GPU facts settle it; more than two ranks: the majority does
        assert snap.outlier_tp_ranks == (s.outlier,)


# ---------------------------------------------------------------------------
# What diag said live on the GPU host (the code of that moment).


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.id)
def test_live_snapshot_output(s: Scenario) -> None:
    runs = json.loads((s.path / "snapshot-runs.json").read_text())
    assert runs["json"]["rc"] in (0, 1)
    snap = s.live_snapshot()
    assert snap["schema_version"] == 1
    workers = {p["tp_rank"]: p for p in snap["processes"] if p.get("tp_rank") is not None}
    assert sorted(workers) == list(range(len(s.rank_pids)))
    for r, p in workers.items():
        assert p["pid"] == s.rank_pids[r]
        assert p["gpu_index"] == s.gpu_of(p["pid"])["index"]
        assert p["gpu_memory_bytes"] >= s.meta["weights_gb"] * GIB
    assert [x["port_listening"] for x in snap["servers"]] == [False]
    summary = json.loads((s.path / "summary.json").read_text())
    assert all(st != "stopped" for st in summary["states_after_snapshot"].values())
    assert all(st != "stopped" for st in summary["states_after_all"].values())


@pytest.mark.parametrize("s", COLLECTIVE, ids=lambda s: s.id)
def test_live_nccl_ras_names_the_rank_behind(s: Scenario) -> None:
    ras = [e for e in s.live_snapshot()["collective_evidence"] if e.get("kind") == "nccl_ras"]
    assert ras, "NCCL RAS did not answer"
    text = ras[0]["text"]
    assert "MISMATCH" in text
    # "Rank 5 has launched up to operation 1 -- GPU 1 managed by process 1187 ..." names
    # a rank; "7 ranks have launched up to operation 2" counts the others.
    named = {
        int(m[1]): int(m[2])
        for m in re.finditer(r"Rank (\d+) has launched up to operation (\d+)", text)
    }
    counted = [
        int(m[1]) for m in re.finditer(r"\d+ ranks have launched up to operation (\d+)", text)
    ]
    assert named
    behind = min([*named.values(), *counted])
    assert behind not in counted
    assert [r for r, c in named.items() if c == behind] == [s.outlier]


# The 2-GPU run was taken with the stack analysis and GPU facts in place (the 1-GPU run
# before they landed): what diag said there and then is asserted as it was printed.
LIVE_ANALYSED = [s for s in SCENARIOS if s.run == "h200x2"]


@pytest.mark.parametrize("s", LIVE_ANALYSED, ids=lambda s: s.id)
def test_live_verdict_on_two_gpus(s: Scenario) -> None:
    snap = s.live_snapshot()
    verdict = snap["verdict"]
    ids = {f["id"] for f in snap["findings"]}
    assert "startup.no_listen_port" in ids
    if s.mode == "cpu":
        assert snap["outlier_tp_ranks"] == []
        assert "blocked on the CPU side" in verdict
        assert "startup.cpu_side_hang" in ids
        return
    assert snap["outlier_tp_ranks"] == [s.outlier]
    assert "blocked on the CPU side" not in verdict
    assert f"rank {s.outlier} (pid {s.rank_pids[s.outlier]}, TP{s.outlier})" in verdict  # RAS
    assert "rank.outlier" in ids
    if len(s.rank_pids) == 2:  # one rank per GPU: the GPU-side verdict
        assert "GPU0 100%, GPU1 0%" in verdict
        assert f"TP{s.outlier} never joined" in verdict
        assert "nccl.waiting_for_rank" in ids
