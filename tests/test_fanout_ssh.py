"""`diag snapshot --hosts` across real hosts: network namespaces joined by veth links, each
running its own sshd (Debian's openssh-server, a throw-away key) in its own pid namespace,
and one hung mini server whose real gloo ranks span two of them (TP0 and TP1 on the first
host wait in an all-reduce that TP2, on the second, never joins). Traffic stays inside the
namespaces; everything is torn down at the end. Skips with the reason where namespaces or
sshd are not available (run as root with iproute2 and openssh-server)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diag.collect.fanout import fold_ranks, parse_hosts
from diag.errors import InputError

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parent.parent
MINI = REPO / "tests" / "live" / "mini_server.py"
SSHD = "/usr/sbin/sshd"
VENV_BIN = str(Path(sys.executable).parent)


def test_parse_hosts(tmp_path: Path) -> None:
    assert parse_hosts("node0, node1,node0") == ["node0", "node1"]
    f = tmp_path / "hosts.txt"
    f.write_text("# the job\nnode0\n\nnode1  # the second\n")
    assert parse_hosts(f"@{f}") == ["node0", "node1"]
    for bad in ("", " , ", "-oProxyCommand=x", "a b"):
        with pytest.raises(InputError):
            parse_hosts(bad)


def test_fold_ranks() -> None:
    labels = [f"TP{i}@node0" for i in range(7)] + [f"TP{i}@node1" for i in range(8, 16)]
    assert fold_ranks(labels) == "TP[0-6]@node0, TP[8-15]@node1"
    assert fold_ranks(["TP3@a", "TP5@a", "TP4@b"]) == "TP[3,5]@a, TP4@b"
    assert fold_ranks(["pid 12"]) == "pid 12"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "iproute2 missing: apt-get install iproute2"
    if not Path(SSHD).exists() or shutil.which("ssh") is None or shutil.which("unshare") is None:
        return "openssh-server missing: apt-get install openssh-server"
    probe = f"diagprobe{os.getpid() % 10000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*argv: str) -> None:
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")


def _wait_port(addr: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((addr, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {addr}:{port} did not come up")


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        tag = f"{os.getpid() % 1000}"
        self.ns = [f"diag{tag}h{i}" for i in (1, 2, 3)]
        self.addr = [f"10.231.{i}.2" for i in (1, 2, 3)]
        self.links: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.key = tmp / "id_ed25519"

    def ssh_opts(self) -> list[str]:
        opts = [f"IdentityFile={self.key}", "StrictHostKeyChecking=no",
                "UserKnownHostsFile=/dev/null", "LogLevel=ERROR", "User=root"]
        return [x for o in opts for x in ("--ssh-opt", o)]

    def up(self) -> None:
        tag = self.ns[0][4:-2]
        for i, ns in enumerate(self.ns, start=1):
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            host_if = f"dg{tag}h{i}"
            _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0",
                 "netns", ns)
            self.links.append(host_if)
            _run("ip", "addr", "add", f"10.231.{i}.1/30", "dev", host_if)
            _run("ip", "link", "set", host_if, "up")
            _run("ip", "-n", ns, "addr", "add", f"10.231.{i}.2/30", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        # the job's own network between the first two hosts (gloo traffic)
        _run("ip", "link", "add", f"dm{tag}a", "type", "veth", "peer", "name", f"dm{tag}b")
        _run("ip", "link", "set", f"dm{tag}a", "netns", self.ns[0], "name", "mesh0")
        _run("ip", "link", "set", f"dm{tag}b", "netns", self.ns[1], "name", "mesh0")
        for ns, ip in ((self.ns[0], "10.232.0.1/24"), (self.ns[1], "10.232.0.2/24")):
            _run("ip", "-n", ns, "addr", "add", ip, "dev", "mesh0")
            _run("ip", "-n", ns, "link", "set", "mesh0", "up")
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        hostkey = self.tmp / "hostkey"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
        (self.tmp / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        Path("/run/sshd").mkdir(exist_ok=True)
        for i, (ns, addr) in enumerate(zip(self.ns, self.addr, strict=True), start=1):
            # the third host has no diag on its PATH
            path = "/usr/bin:/bin" if i == 3 else f"{VENV_BIN}:/usr/bin:/bin"
            cfg = self.tmp / f"sshd{i}.conf"
            cfg.write_text(
                f"ListenAddress {addr}\nPort 22\nHostKey {hostkey}\n"
                f"AuthorizedKeysFile {self.tmp / 'authorized_keys'}\nPermitRootLogin yes\n"
                f"StrictModes no\nUsePAM no\nPidFile {self.tmp / f'sshd{i}.pid'}\n"
                f"SetEnv PATH={path} PYTHONPATH={REPO}\n"
            )
            # its own host name too (node0, node1, ...), as separate machines have
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--mount-proc",
                 "--uts", "sh", "-c", f"hostname node{i - 1} && exec {SSHD} -D -e -f {cfg}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            ))
        for addr in self.addr:
            _wait_port(addr, 22)

    def ssh(self, host: str, command: str) -> subprocess.CompletedProcess[str]:
        opts = self.ssh_opts()
        argv = ["ssh", "-T"]
        for o in opts[1::2]:
            argv += ["-o", o]
        return subprocess.run([*argv, host, command], capture_output=True, text=True,
                              timeout=60)

    def down(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9)
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        for ns in self.ns:
            # every process left in the namespace (the ranks started over ssh)
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = _why_not()
    if why:
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.up()
        ready = c.tmp / "ready"
        ready.mkdir()
        master_port = 29611
        placement = {0: c.addr[0], 1: c.addr[0], 2: c.addr[1]}
        for rank, host in placement.items():
            cmd = (
                f"cd {REPO}; GLOO_SOCKET_IFNAME=mesh0 setsid nohup {sys.executable} {MINI} "
                f"rank --framework sglang --tp 3 --rank {rank} --mode collective "
                f"--master-port {master_port} --master-addr 10.232.0.1 --ready-dir {ready} "
                f"> {ready}/rank{rank}.log 2>&1 < /dev/null &"
            )
            r = c.ssh(host, cmd)
            assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 120
        while not all((ready / f"rank{r}").exists() for r in placement):
            if time.monotonic() > deadline:
                logs = {p.name: p.read_text()[-800:] for p in ready.glob("*.log")}
                raise RuntimeError(f"ranks not ready: {logs}")
            time.sleep(0.3)
        time.sleep(1.0)
        yield c
    finally:
        c.down()


def _diag(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def test_fanout_finds_the_outlier_on_the_remote_host(cluster: Cluster) -> None:
    hosts = ",".join(cluster.addr[:2])
    t0 = time.monotonic()
    r = _diag("snapshot", "--hosts", hosts, "--json", "--samples", "1",
              *cluster.ssh_opts())
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    view = json.loads(r.stdout)
    by_host = {h["host"]: h for h in view["hosts"]}
    assert all(h["ok"] for h in view["hosts"]), view["hosts"]
    ranks = {
        host: sorted(p["tp_rank"] for p in h["snapshot"]["processes"]
                     if p["role"] == "scheduler")
        for host, h in by_host.items()
    }
    assert ranks == {cluster.addr[0]: [0, 1], cluster.addr[1]: [2]}
    assert view["outliers"] == [f"TP2@{cluster.addr[1]}"], view["groups"]
    sites = {g["wait_site"]: g["ranks"] for g in view["groups"]}
    assert sorted(sites["stack.nccl_collective"]) == [f"TP0@{cluster.addr[0]}",
                                                      f"TP1@{cluster.addr[0]}"]
    for h in view["hosts"]:  # same machine: the offset is within its error bound + 50 ms
        assert abs(h["clock_offset_s"]) <= h["clock_error_s"] + 0.05, h
    assert view["elapsed_s"] < took and view["slowest_host_s"] <= view["elapsed_s"] + 0.01
    # the terminal view, as a user sees it
    r = _diag("snapshot", "--hosts", hosts, "--samples", "1", *cluster.ssh_opts())
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"TP2@{cluster.addr[1]}" in r.stdout and "odd ranks out" in r.stdout
    assert f"TP2@{cluster.addr[1]} parts from the majority after rank_main" in r.stdout, r.stdout
    assert view["odd_stack_diff"][0]["odd"][0].startswith("handle_first_request"), view


def test_fanout_partial_when_a_host_is_down_or_lacks_diag(cluster: Cluster) -> None:
    down = "ssh://root@10.231.1.2:2"  # nothing listens there: refused at once
    hosts = ",".join([cluster.addr[0], cluster.addr[2], down])
    r = _diag("snapshot", "--hosts", hosts, "--json", "--samples", "1", "--timeout", "5",
              *cluster.ssh_opts())
    assert r.returncode == 3, r.stderr[-2000:]
    view = json.loads(r.stdout)
    by_host = {h["host"]: h for h in view["hosts"]}
    assert by_host[cluster.addr[0]]["ok"]
    missing = by_host[cluster.addr[2]]
    assert not missing["ok"] and "not installed" in missing["error"], missing
    assert "pip install" in missing["remedy"]
    dead = by_host[down]
    assert not dead["ok"] and "unreachable" in dead["error"], dead
    assert "partial collection" in r.stderr


def _bundle_members(path: Path) -> dict[str, bytes]:
    from diag.bundle.read import read_bundle

    return dict(read_bundle(path).members)


def test_one_bundle_for_the_job(cluster: Cluster, tmp_path: Path) -> None:
    """--out writes ONE bundle: each host's own part (its manifest, env, snapshot, stacks,
    the logs its ranks write to) and the merged view; analyze/report of it is the job's."""
    a, b = cluster.addr[:2]
    out = tmp_path / "hang.tar.gz"
    r = _diag("snapshot", "--hosts", f"{a},{b}", "--samples", "1", "--out", str(out),
              *cluster.ssh_opts())
    assert r.returncode == 0, r.stderr[-2000:]
    assert "bundle written" in r.stderr and "2 hosts" in r.stderr
    assert not list(tmp_path.glob("hang-*.tar.gz"))  # one bundle, not one per host
    v = _diag("bundle", "verify", str(out))
    assert v.returncode == 0, v.stdout + v.stderr
    members = _bundle_members(out)
    for host in (a, b):
        for name in ("manifest.json", "env.json", "snapshot.json"):
            assert f"hosts/{host}/{name}" in members, sorted(members)
        assert any(m.startswith(f"hosts/{host}/stacks/") for m in members), sorted(members)
        part = json.loads(members[f"hosts/{host}/snapshot.json"])
        assert part["processes"], host
    # the logs the ranks write to (their stdout is a file) came with each host's part
    assert {m for m in members if m.startswith(f"logs/{a}/rank")} == {
        f"logs/{a}/rank0.log", f"logs/{a}/rank1.log"}, sorted(members)
    assert f"logs/{b}/rank2.log" in members, sorted(members)
    report = members["report.md"].decode()  # the logs and the job's snapshot, as one
    assert "Job of 2 hosts" in report and "weights_load" in report, report[:2000]
    job = json.loads(members["job.json"])
    assert job["outliers"] == [f"TP2@{b}"]
    assert [h["part"] for h in job["hosts"]] == [f"hosts/{a}/", f"hosts/{b}/"]
    assert all(isinstance(h["clock_error_s"], float) for h in job["hosts"])
    merged = json.loads(members["snapshot.json"])
    labels = sorted(p["rank"] for p in merged["processes"] if p["role"] == "scheduler")
    assert labels == [f"{a} TP0", f"{a} TP1", f"{b} TP2"], labels
    assert merged["outlier_tp_ranks"] == [2]
    assert merged["servers"][0].get("missing_tp_ranks") in (None, []), merged["servers"]
    # diag analyze of the one bundle: the job's view
    j = _diag("analyze", str(out), "--json")
    assert j.returncode in (0, 1), j.stderr[-2000:]
    view = json.loads(j.stdout)
    text = json.dumps(view)
    assert f"TP2@{b}" in text and f"{a} TP0" in text, text[:3000]
    # the logs are put on one clock with the offsets the fan-out measured
    assert f"clock of {b}: " in text and "(measured by the fan-out)" in text, text[:3000]
    md = _diag("report", str(out))
    assert md.returncode == 0, md.stderr[-2000:]
    assert f"TP2@{b}" in md.stdout and "Job of 2 hosts" in md.stdout


def test_analyze_merges_bundles_written_on_each_host(cluster: Cluster, tmp_path: Path) -> None:
    """`diag analyze hang-node0.tar.gz hang-node1.tar.gz`: bundles written on each host by
    plain `diag snapshot --out` are joined into one job view."""
    a, b = cluster.addr[:2]
    paths = []
    for host in (a, b):
        dest = tmp_path / f"hang-{host}.tar.gz"
        r = cluster.ssh(host, f"diag snapshot --samples 1 --out {dest} > /dev/null")
        assert r.returncode == 0, r.stderr[-2000:]
        paths.append(str(dest))
    j = _diag("analyze", *paths, "--json")
    assert j.returncode in (0, 1), j.stderr[-2000:]
    text = j.stdout
    assert "hosts' snapshots joined as one job" in text, text[:3000]
    assert "odd ranks out: TP2@" in text, text[:3000]
