"""Writing bundles: layout, manifest, redaction of every member, atomic writes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

import diag.bundle.write as bundle_write
from diag.bundle.env import collect_env, package_versions, relevant_env
from diag.bundle.read import read_bundle
from diag.bundle.write import write_bundle
from diag.cli import main
from diag.errors import DiagError
from diag.model import ProcessInfo, Snapshot, Unavailable
from diag.redact import Redactor
from diag.runner import RunResult

ROOT = Path(__file__).resolve().parents[1]
LOG = (
    "[2026-02-22 22:35:01 TP0] Init torch distributed begin.\n"
    "[2026-02-22 22:35:02 TP0] connecting to gpu-node-3 at 10.2.3.4 with --api-key k-123456\n"
    "gpu-node-3:77:77 [0] NCCL INFO Bootstrap: Using eth0:10.2.3.4<0>\n"
)


class FakeRunner:
    """Stands in for SubprocessRunner: nvidia-smi present, answering topo -m."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def which(self, program: str) -> str | None:
        return f"/usr/bin/{program}"

    def run(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> RunResult:
        self.calls.append(tuple(argv))
        out = "\t\x1b[4mGPU0\tGPU1\x1b[0m\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
        return RunResult(tuple(argv), 0, out, "", 0.01)


def _snapshot(host: str = "gpu-node-3") -> Snapshot:
    proc = ProcessInfo(
        pid=4242,
        ppid=1,
        role="launcher",
        title="python",
        cmdline=("python", "-m", "sglang.launch_server", "--api-key", "snap-secret-1",
                 "--host", "gpu-node-3", "--dist-init-addr", "10.2.3.4:5000"),
        framework="sglang",
        rank=None,
        rank_source=None,
        state="S",
        rss_bytes=1 << 30,
        cpu_percent=1.0,
        threads=Unavailable("gone"),
        listening_ports=(),
        env={"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "snap-secret-2"},
    )
    return Snapshot(host=host, taken_at=dt.datetime(2026, 2, 22, 23, 0, tzinfo=dt.timezone.utc),
                    processes=(proc,), gpus=Unavailable("no NVML"))


def _members(path: Path) -> dict[str, bytes]:
    return dict(read_bundle(path).members)


def test_layout_and_manifest(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    out = tmp_path / "b.tar.gz"
    info = write_bundle(out, logs=[log], analysis=None, snapshot=_snapshot(),
                        command_line=["diag", "bundle", "--log", str(log), "--token", "cl-sec"],
                        raw_stacks={
                            "pid-4242.json": json.dumps([{"frames": [{"locals": [
                                {"name": "api_key", "repr": "'stack-local-secret'"}]}],
                                "token": "stack-secret"}]),
                            "pid-4243.txt": "Thread 1: load (x.py:3)\n  --token stack-text\n",
                        },
                        runner=FakeRunner())
    with tarfile.open(out, "r:gz") as tar:
        names = tar.getnames()
        assert all(m.isreg() and m.uname == "" and m.uid == 0 for m in tar.getmembers())
    assert names[0] == "manifest.json"
    # (report.md: with no analysis, the report is the snapshot's view alone)
    assert set(names) == {"manifest.json", "report.md", "snapshot.json", "stacks/pid-4242.json",
                          "stacks/pid-4243.txt", "env.json", "logs/server.log"}
    members = _members(out)
    manifest = json.loads(members["manifest.json"])
    assert manifest["format"] == "diag-bundle" and manifest["schema"] == 1
    assert manifest["command_line"][-2:] == ["--token", "<redacted:flag>"]
    assert manifest["snapshot"] is True
    for name, data in members.items():
        if name != "manifest.json":
            entry = manifest["members"][name]
            assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["logs"] == [{"member": "logs/server.log", "source": "server.log",
                                 "lines_total": 3, "lines_kept": 3,
                                 "bytes_kept": len(members["logs/server.log"]),
                                 "mode": "whole", "cut": False, "index": None}]
    assert manifest["redactions"] == info.redactions
    assert info.redactions["flag"] >= 2 and info.redactions["field"] >= 2
    everything = b"".join(members.values())
    for secret in (b"k-123456", b"snap-secret-1", b"snap-secret-2", b"cl-sec", b"stack-secret",
                   b"stack-local-secret", b"stack-text"):
        assert secret not in everything
    assert b"Thread 1: load (x.py:3)" in members["stacks/pid-4243.txt"]
    env = json.loads(members["env.json"])
    assert env["topology"].startswith("\tGPU0")
    assert env["processes"][0]["pid"] == 4242


def test_redact_hosts_is_consistent_across_members(tmp_path: Path) -> None:
    log = tmp_path / "gpu-node-3.log"
    log.write_text(LOG)
    out = tmp_path / "b.tar.gz"
    write_bundle(out, logs=[log], analysis=None, snapshot=_snapshot(), redact_hosts=True,
                 runner=FakeRunner())
    members = _members(out)
    everything = b"".join(members.values()) + "".join(members).encode()
    assert b"gpu-node-3" not in everything and b"10.2.3.4" not in everything
    manifest = json.loads(members["manifest.json"])
    (entry,) = manifest["logs"]
    mask = entry["source"].removesuffix(".log")
    assert mask.startswith("host-")
    assert entry["member"] == f"logs/{mask}.log"
    text = members[entry["member"]].decode()
    assert f"connecting to {mask} at ip-1" in text
    assert f"{mask}:77:77 [0] NCCL INFO Bootstrap: Using eth0:ip-1<0>" in text
    snap = members["snapshot.json"].decode()
    assert f'"host": "{mask}"' in snap
    assert manifest["redactions"]["hostname"] >= 3 and manifest["redactions"]["ip"] >= 2


def test_env_json(tmp_path: Path) -> None:
    r = Redactor()
    env = collect_env(r, runner=FakeRunner(), pids=[os.getpid()],
                      environ={"HF_TOKEN": "e-sec", "NCCL_DEBUG": "WARN", "HOME": "/root"})
    assert env["env"] == {"HF_TOKEN": "<redacted:env>", "NCCL_DEBUG": "WARN"}
    assert env["cpu_count"] == os.cpu_count()
    assert isinstance(env["python"], dict) and env["python"]["version"]
    packages = env["packages"]
    assert isinstance(packages, dict) and set(packages) >= {"torch", "sglang", "sgl-kernel",
                                                            "vllm", "flashinfer", "nccl"}
    gpus = env["gpus"]
    assert isinstance(gpus, dict) and ("devices" in gpus or "unavailable" in gpus)
    (me,) = env["processes"]  # type: ignore[misc]
    assert me["cmdline"][0] == sys.argv[0] or me["cmdline"]
    assert relevant_env({"VLLM_X": "1", "PATH": "/bin", "OMP_NUM_THREADS": "4"}) == {
        "OMP_NUM_THREADS": "4", "VLLM_X": "1"}
    assert "torch" in package_versions()


def test_env_probe_degrades(tmp_path: Path) -> None:
    class NoSmi(FakeRunner):
        def which(self, program: str) -> str | None:
            return None

    env = collect_env(Redactor(), runner=NoSmi(), pids=[999_999_999], proc=tmp_path)
    assert env["topology"] == {"unavailable": "nvidia-smi not found"}
    (gone,) = env["processes"]  # type: ignore[misc]
    assert "unavailable" in gone["cmdline"] and "unavailable" in gone["env"]


def test_interrupted_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG * 1000)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "hang.tar.gz"
    real_addfile = tarfile.TarFile.addfile
    calls = {"n": 0}

    def interrupted(self: tarfile.TarFile, *args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real_addfile(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tarfile.TarFile, "addfile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_bundle(out, logs=[log], analysis=None, snapshot=None, runner=FakeRunner())
    assert calls["n"] == 3
    assert list(out_dir.iterdir()) == []  # no bundle, no temporary file


def test_interrupted_write_keeps_the_old_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    out = tmp_path / "hang.tar.gz"
    write_bundle(out, logs=[log], analysis=None, snapshot=None, runner=FakeRunner())
    before = out.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundle_write.os, "fsync", disk_full)
    with pytest.raises(DiagError, match="No space left on device .nothing was written"):
        write_bundle(out, logs=[log], analysis=None, snapshot=None, runner=FakeRunner())
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hang.tar.gz", "server.log"]


KILLED_CHILD = """
import os, sys, time
from pathlib import Path
import diag.bundle.write as w

def hang(fd):
    sys.stdout.write("writing\\n"); sys.stdout.flush()
    time.sleep(60)

w.os.fsync = hang
w.write_bundle(Path(sys.argv[1]), logs=[Path(sys.argv[2])], analysis=None, snapshot=None)
"""


@pytest.mark.live
def test_killed_mid_write_leaves_no_bundle(tmp_path: Path) -> None:
    """A real process killed (SIGKILL) with every byte written but not yet renamed."""
    log = tmp_path / "server.log"
    log.write_text(LOG * 100)
    out = tmp_path / "out" / "hang.tar.gz"
    out.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(out), str(log)],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"writing\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert not out.exists()
    leftovers = list(out.parent.iterdir())  # only a hidden .partial file may remain
    assert all(p.name.startswith(".hang.tar.gz.") and p.name.endswith(".partial")
               for p in leftovers)


def test_cli_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (["bundle", "--no-snapshot"], "nothing to bundle"),
        (["bundle", "--no-snapshot", "--log", str(tmp_path / "nope.log")], "no such file"),
        (["bundle", "--no-snapshot", "--log", str(empty)], "folder holds no files"),
        (["bundle", "--no-snapshot", "--log", "/dev/null"], "not a file"),
        (["bundle", "verify", str(tmp_path / "nope.tar.gz")], "no such file"),
    ]
    log = tmp_path / "server.log"
    log.write_text(LOG)
    cases.append((["bundle", "--no-snapshot", "--log", str(log), "--out",
                   str(tmp_path / "no" / "dir" / "b.tar.gz")], "does not exist"))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((["bundle", "--no-snapshot", "--log", str(log), "--out",
                       str(locked / "b.tar.gz")], "Permission denied"))
    already = write_bundle(tmp_path / "old.tar.gz", logs=[log], analysis=None, snapshot=None,
                           runner=FakeRunner()).path
    cases.append((["bundle", "--no-snapshot", "--log", str(already)], "is already a diag bundle"))
    for argv, expected in cases:
        monkeypatch.setattr(sys, "argv", ["diag", *argv])
        with pytest.raises(SystemExit) as exc:
            main()
        err = capsys.readouterr().err
        assert exc.value.code == 2, (argv, err)
        assert expected in err.splitlines()[0] and "Traceback" not in err


def test_cli_writes_offline_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "server.log"
    log.write_text((ROOT / "fixtures" / "real" / "sglang" / "watchdog-timeout-sigquit-killed"
                    / "log.txt").read_text())
    out = tmp_path / "b.tar.gz"
    monkeypatch.setattr(sys, "argv", ["diag", "bundle", "--log", str(log), "--no-snapshot",
                                      "--out", str(out)])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    assert f"wrote {out}" in capsys.readouterr().out
    members = _members(out)
    assert {"report.md", "analysis.json", "env.json", "logs/server.log"} <= set(members)
    assert "snapshot.json" not in members
    assert "process.killed" in members["analysis.json"].decode()
    assert "process.killed" in members["report.md"].decode()
    summary = json.loads(members["manifest.json"])["summary"]
    assert summary["framework"] == "sglang" and "process.killed" in summary["findings"]
    monkeypatch.setattr(sys, "argv", ["diag", "bundle", "verify", str(out)])
    with pytest.raises(SystemExit):
        main()
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("analysis:")]
    assert line.startswith("analysis: sglang, last phase ") and "process.killed" in line


def test_cli_folder_of_logs_and_unanalysable_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder stands for its files; input the analyser rejects still gets bundled."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.bin").write_bytes(bytes(range(256)) * 4)
    (logs / ".hidden").write_text("skip me")
    out = tmp_path / "b.tar.gz"
    monkeypatch.setattr(sys, "argv", ["diag", "bundle", "--log", str(logs), "--no-snapshot",
                                      "--out", str(out)])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "note: no analysis:" in printed
    members = _members(out)
    assert "logs/a.bin" in members and "analysis.json" not in members
    assert not any(".hidden" in name for name in members)
    manifest = json.loads(members["manifest.json"])
    assert any(n.startswith("no analysis:") for n in manifest["notes"])


def test_unwritable_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)

    def refused(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(bundle_write.tempfile, "mkstemp", refused)
    monkeypatch.setattr(sys, "argv", ["diag", "bundle", "--no-snapshot", "--log", str(log),
                                      "--out", str(tmp_path / "b.tar.gz")])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[0].endswith("b.tar.gz: Permission denied")


def test_host_first_named_in_a_later_log_is_masked_in_earlier_ones(tmp_path: Path) -> None:
    first = tmp_path / "a.log"
    first.write_text("[2025] TP0 waiting for worker-node-9 to join\n")
    second = tmp_path / "b.log"
    second.write_text("worker-node-9:12:12 [1] NCCL INFO Bootstrap: Using eth0\n")
    out = tmp_path / "b.tar.gz"
    write_bundle(out, logs=[first, second], analysis=None, snapshot=None, redact_hosts=True,
                 runner=FakeRunner())
    members = _members(out)
    assert b"worker-node-9" not in b"".join(members.values())
    mask = members["logs/b.log"].split(b":", 1)[0].decode()
    assert mask.startswith("host-")
    assert members["logs/a.log"] == f"[2025] TP0 waiting for {mask} to join\n".encode()
