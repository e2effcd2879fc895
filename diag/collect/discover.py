"""Find SGLang / vLLM servers on this host and name the role and rank of each process.

Servers are found by command line (``python -m sglang.launch_server``, ``vllm serve``,
``vllm.entrypoints...``) and by the process titles the frameworks set with setproctitle:
SGLang ``sglang::scheduler_TP3``, ``sglang::scheduler_DP0_TP3_EP3``, ``sglang::detokenizer``
(``scheduler.py``/``detokenizer_manager.py``: ``setproctitle(f"sglang::scheduler{prefix}")``
with the prefix's spaces turned into ``_``); vLLM ``VLLM::EngineCore``, ``VLLM::Worker_TP0``
(``vllm/utils`` ``set_process_title``: ``f"{VLLM_PROCESS_NAME_PREFIX}::{name}_{suffix}"``);
Ray's ``ray::RayWorkerWrapper``. The tree is walked from each launcher. Rank coordinates
come from the title, else from the environment (RANK / LOCAL_RANK), else they are unknown,
and ``rank_source`` says which.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from diag.collect.procfs import list_pids, read_cmdline, read_environ, read_stat
from diag.errors import InputError
from diag.limits import ascii_int
from diag.model import RankId, Unavailable
from diag.parse.coords import parse_name

__all__ = [
    "DEFAULT_PORTS",
    "Discovery",
    "FoundProcess",
    "FoundServer",
    "PP_OPTIONS",
    "TP_OPTIONS",
    "classify",
    "discover",
    "int_option",
    "launcher_framework",
    "port_from_cmdline",
    "rank_from_title",
]

DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}

_SGLANG_ROLES = (
    ("scheduler", "scheduler"),
    ("semi_pd_scheduler", "scheduler"),
    ("gpu_worker", "worker"),
    ("detokenizer", "detokenizer"),
    ("tokenizer", "tokenizer"),
    ("data_parallel_controller", "other"),
)
_VLLM_ROLES = (
    ("EngineCore", "engine_core"),
    ("Worker", "worker"),
    ("APIServer", "api_server"),
)


@dataclass(frozen=True, slots=True)
class FoundProcess:
    pid: int
    ppid: int | None
    role: str
    title: str
    cmdline: tuple[str, ...]
    framework: str | None
    rank: RankId | None
    rank_source: str | None  # "title" | "env:RANK" | "env:LOCAL_RANK" | None
    starttime_ticks: int
    state: str
    children: tuple[int, ...]
    server: int  # index into Discovery.servers


@dataclass(frozen=True, slots=True)
class FoundServer:
    framework: str
    launcher_pid: int  # the launcher, or (launcher=False) the first process of the group
    port: int | None
    port_source: str  # "cmdline" | "default" | "none" (no launcher) | "unknown"
    launcher: bool = True  # False: titled processes with no launcher above them (Ray)


@dataclass(frozen=True, slots=True)
class Discovery:
    servers: tuple[FoundServer, ...]
    processes: tuple[FoundProcess, ...]
    notes: tuple[str, ...] = ()


def rank_from_title(title: str) -> RankId | None:
    """``sglang::scheduler_DP0_TP3_EP3`` -> RankId(dp=0, tp=3, ep=3); None without coords
    (:func:`diag.parse.coords.parse_name`; ``VLLM::EngineCore_DP1`` is its DP replica)."""
    c = parse_name(title)
    if c is None:
        return None
    if c.replica:
        return RankId(dp=c.dp)
    return c.rank()


def classify(title: str) -> tuple[str, str] | None:
    """(framework, role) of a framework-set process title, or None."""
    if title.startswith("sglang::"):
        kind = title[len("sglang::") :]
        for prefix, role in _SGLANG_ROLES:
            if kind.startswith(prefix):
                return "sglang", role
        return "sglang", "other"
    if title.startswith("VLLM::") or title.startswith("vllm::"):
        kind = title.split("::", 1)[1]
        for prefix, role in _VLLM_ROLES:
            if kind.startswith(prefix):
                return "vllm", role
        return "vllm", "other"
    if title.startswith("ray::RayWorkerWrapper"):
        return "vllm", "worker"
    return None


# Interpreter options that come before ``-m MODULE`` / the script (``python -u -X dev -m``)
_PY_FLAGS = frozenset({"-u", "-O", "-OO", "-B", "-s", "-S", "-E", "-I", "-b", "-bb", "-q"})
_PY_FLAGS_WITH_VALUE = frozenset({"-X", "-W"})
_SGLANG_MODULES = ("sglang.launch_server", "sglang.srt.entrypoints")
_VLLM_MODULES = ("vllm.entrypoints",)


def _framework_of_entry(entry: str, rest: Sequence[str]) -> str | None:
    """``entry`` is what the interpreter runs: a module (after ``-m``), a script, or the
    frameworks' console script; ``rest`` the arguments after it."""
    name = entry.rsplit("/", 1)[-1]
    sub = rest[0] if rest else ""
    if entry.startswith(_SGLANG_MODULES) or (name in ("sglang", "sglang.py") and sub == "serve"):
        return "sglang"
    if entry.endswith(("sglang/launch_server.py", "sglang/launch_server")):
        return "sglang"
    if entry.startswith(_VLLM_MODULES) or (name in ("vllm", "vllm.py") and sub == "serve"):
        return "vllm"
    if "/vllm/entrypoints/" in entry:
        return "vllm"
    return None


def launcher_framework(cmdline: Sequence[str]) -> str | None:
    """The framework a launcher command line starts, or None. A server is a process that
    *is* one: its program (``vllm serve``, ``sglang serve``) or the module or script its
    Python interpreter runs (``python -m sglang.launch_server``) -- not a process whose
    arguments merely mention one (an editor, ``grep``, a wrapper script's argument)."""
    if not cmdline:
        return None
    exe = cmdline[0].rsplit("/", 1)[-1]
    if exe in ("vllm", "sglang"):
        return exe if len(cmdline) > 1 and cmdline[1] == "serve" else None
    if not exe.startswith("python"):
        return None
    i = 1
    while i < len(cmdline) and i < 6:
        arg = cmdline[i]
        if arg in _PY_FLAGS_WITH_VALUE:
            i += 2
            continue
        if arg in _PY_FLAGS:
            i += 1
            continue
        if arg == "-m" and i + 1 < len(cmdline):
            return _framework_of_entry(cmdline[i + 1], cmdline[i + 2 :])
        if arg.startswith("-m") and len(arg) > 2:  # python -msglang.launch_server
            return _framework_of_entry(arg[2:], cmdline[i + 1 :])
        if arg.startswith("-"):
            return None  # -c CODE and the like: a program that is not a server
        return _framework_of_entry(arg, cmdline[i + 1 :])
    return None


def int_option(cmdline: Sequence[str], names: Sequence[str]) -> int | None:
    """The integer value of the first of ``names`` given as ``--x N`` or ``--x=N``."""
    for i, arg in enumerate(cmdline):
        value: str | None = None
        for name in names:
            if arg == name and i + 1 < len(cmdline):
                value = cmdline[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
        number = ascii_int(value, max_digits=9) if value is not None else None
        if number is not None and number >= 0:  # (not `--port ²`, not 5000 digits)
            return number
    return None


# SGLang's server_args / vLLM's engine args spell the tensor-parallel size these ways.
TP_OPTIONS = ("--tp", "--tp-size", "--tensor-parallel-size", "-tp")
PP_OPTIONS = ("--pp", "--pp-size", "--pipeline-parallel-size", "-pp")


def port_from_cmdline(cmdline: Sequence[str], framework: str | None) -> tuple[int | None, str]:
    """The HTTP port a launcher was given (``--port N`` / ``--port=N``), else the default."""
    port = int_option(cmdline, ("--port",))
    if port is not None:
        return port, "cmdline"
    if framework in DEFAULT_PORTS:
        return DEFAULT_PORTS[framework], "default"
    return None, "unknown"


@dataclass(frozen=True, slots=True)
class _Raw:
    pid: int
    ppid: int
    comm: str
    state: str
    starttime: int
    cmdline: tuple[str, ...]

    @property
    def title(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else self.comm


def _scan(proc_root: Path) -> dict[int, _Raw]:
    out: dict[int, _Raw] = {}
    for pid in list_pids(proc_root):
        st = read_stat(pid, proc_root)
        if st is None:
            continue
        out[pid] = _Raw(
            pid, st.ppid, st.comm, st.state, st.starttime_ticks, read_cmdline(pid, proc_root)
        )
    return out


def _is_pyspy(raw: _Raw) -> bool:
    return raw.comm == "py-spy" or (bool(raw.cmdline) and raw.cmdline[0].endswith("py-spy"))


def _interesting(raw: _Raw) -> bool:
    return classify(raw.title) is not None or launcher_framework(raw.cmdline) is not None


def _rank_from_env(pid: int, proc_root: Path) -> tuple[RankId | None, str | None]:
    env = read_environ(pid, proc_root, ("RANK", "LOCAL_RANK"))
    if isinstance(env, Unavailable):
        return None, None
    for key in ("RANK", "LOCAL_RANK"):
        number = ascii_int(env.get(key, ""), max_digits=6)
        if number is not None and number >= 0:
            return RankId(tp=number), f"env:{key}"
    return None, None


def discover(proc_root: Path = Path("/proc"), *, pid: int | None = None) -> Discovery:
    """Servers and their processes. With ``pid``: the server that process belongs to
    (or, if it is in none, the process and its descendants)."""
    procs = _scan(proc_root)
    children: dict[int, list[int]] = {}
    for raw in procs.values():
        children.setdefault(raw.ppid, []).append(raw.pid)
    me = os.getpid()
    notes: list[str] = []

    def climb(start: int) -> int:
        top = start
        cur = procs[start].ppid
        while cur in procs and cur > 1:
            if _interesting(procs[cur]):
                top = cur
            cur = procs[cur].ppid
        return top

    roots: list[int] = []
    if pid is not None:
        if pid not in procs:
            raise InputError(
                f"no process {pid} on this host",
                help_text="Check the pid with `ps -ef | grep -E 'sglang|vllm'`, or run "
                "`diag snapshot` with no --pid to find servers by itself.",
            )
        roots.append(climb(pid))
    else:
        for raw in procs.values():
            if raw.pid != me and _interesting(raw):
                top = climb(raw.pid)
                if top not in roots:
                    roots.append(top)

    # A launcher and its tree make one server. Titled processes with no launcher above
    # them (Ray's ``ray::RayWorkerWrapper`` actors live under the raylet, not under
    # ``vllm serve``; a launcher that died) are grouped by their common parent.
    clusters: list[list[int]] = []
    orphans: dict[int, list[int]] = {}
    for root in sorted(roots):
        if launcher_framework(procs[root].cmdline) is not None or pid is not None:
            clusters.append([root])
        else:
            orphans.setdefault(procs[root].ppid, []).append(root)
    clusters += list(orphans.values())

    servers: list[FoundServer] = []
    found: list[FoundProcess] = []
    seen: set[int] = set()
    for cluster in clusters:
        members: list[int] = []
        for root in cluster:
            stack = [root]
            while stack:
                cur = stack.pop()
                if cur in seen or cur == me or _is_pyspy(procs[cur]):
                    continue
                seen.add(cur)
                members.append(cur)
                stack.extend(sorted(children.get(cur, []), reverse=True))
        if not members:
            continue
        root = cluster[0]
        framework = launcher_framework(procs[root].cmdline)
        launched = framework is not None
        if framework is None:
            frameworks = [c[0] for m in members if (c := classify(procs[m].title)) is not None]
            framework = frameworks[0] if frameworks else "unknown"
        if launched:
            port, port_source = port_from_cmdline(procs[root].cmdline, framework)
        else:  # no launcher: no HTTP port to expect unless the command line names one
            given = int_option(procs[root].cmdline, ("--port",))
            port, port_source = (given, "cmdline") if given is not None else (None, "none")
        index = len(servers)
        servers.append(
            FoundServer(
                framework,
                root,
                port,
                port_source,
                # with --pid, the top of an untitled tree (a torchrun job) stands as launcher
                launcher=launched or (pid is not None and classify(procs[root].title) is None),
            )
        )
        for m in members:
            raw = procs[m]
            c = classify(raw.title)
            if m == root and c is None:
                role = "launcher"
            elif c is not None:
                role = c[1]
            else:
                role = "other"
            rank: RankId | None = None
            rank_source: str | None = None
            if c is not None:
                rank = rank_from_title(raw.title)
                rank_source = "title" if rank is not None else None
            if rank is None and role in ("worker", "scheduler", "other"):
                rank, rank_source = _rank_from_env(m, proc_root)
                if rank is not None and role == "other":
                    role = "worker"
            found.append(
                FoundProcess(
                    pid=m,
                    ppid=raw.ppid,
                    role=role,
                    title=raw.title,
                    cmdline=raw.cmdline,
                    framework=c[0] if c is not None else (framework if m == root else None),
                    rank=rank,
                    rank_source=rank_source,
                    starttime_ticks=raw.starttime,
                    state=raw.state,
                    children=tuple(sorted(children.get(m, []))),
                    server=index,
                )
            )
    if not servers:
        notes.append(
            "no SGLang or vLLM server found (looked for sglang.launch_server / vllm serve "
            "command lines and sglang:: / VLLM:: process titles)"
        )
    return Discovery(tuple(servers), tuple(found), tuple(notes))
