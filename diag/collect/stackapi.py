"""The seam between the collector and the stack analysis of ``diag.stacks``.

The collector calls four functions of ``diag.stacks``: ``parse_pyspy_json``,
``classify_process``, ``group_stacks`` and ``outlier_tp_ranks``. They are looked up here,
once, so the rest of the collector does not depend on which submodule holds them. The
JSON-to-model mapping has a plain fallback (py-spy's ``--json`` fields map one to one
onto :class:`StackThread` / :class:`StackFrame`); analysis that is missing returns
nothing rather than a guess.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from diag.model import StackFrame, StackGroup, StackProcess, StackThread

__all__ = [
    "classify",
    "gpu_facts",
    "group",
    "outliers",
    "parse",
    "stacks_api_available",
]

_MODULES = (
    "diag.stacks.pyspy_json",
    "diag.stacks.classify",
    "diag.stacks.merge",
    "diag.stacks",
)


def _lookup(name: str) -> Callable[..., Any] | None:
    for mod_name in _MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        fn = getattr(mod, name, None)
        if callable(fn):
            return cast(Callable[..., Any], fn)
    return None


def stacks_api_available() -> dict[str, bool]:
    names = ("parse_pyspy_json", "classify_process", "group_stacks", "outlier_tp_ranks")
    return {n: _lookup(n) is not None for n in names}


def _fallback_parse(data: object, pid: int | None, title: str | None, mode: str) -> StackProcess:
    threads: list[StackThread] = []
    items = data if isinstance(data, list) else []
    for t in items:
        if not isinstance(t, dict):
            continue
        frames = []
        for f in t.get("frames") or []:
            if not isinstance(f, dict):
                continue
            filename = str(f.get("filename") or "")
            module = f.get("module")
            native = module is not None or filename.endswith(".so") or ".so." in filename
            line = f.get("line")
            frames.append(
                StackFrame(
                    name=str(f.get("name") or "?"),
                    filename=filename,
                    line=int(line) if isinstance(line, int) and line > 0 else None,
                    module=str(module) if module is not None else None,
                    native=native,
                )
            )
        tid = t.get("os_thread_id") or t.get("thread_id")
        active = t.get("active")
        gil = t.get("owns_gil")
        threads.append(
            StackThread(
                thread_id=int(tid) if isinstance(tid, int) else None,
                name=t.get("thread_name") if isinstance(t.get("thread_name"), str) else None,
                frames=tuple(frames),
                idle=(not active) if isinstance(active, bool) else None,
                owns_gil=gil if isinstance(gil, bool) else None,
            )
        )
    return StackProcess(pid=pid, title=title, threads=tuple(threads), mode=mode)


def parse(data: object, *, pid: int | None, title: str | None, mode: str) -> StackProcess:
    """py-spy ``--json`` output (already decoded) -> StackProcess."""
    fn = _lookup("parse_pyspy_json")
    if fn is not None:
        return cast(StackProcess, fn(data, pid=pid, title=title, mode=mode))
    return _fallback_parse(data, pid, title, mode)


def classify(p: StackProcess) -> StackProcess:
    """The same process with ``wait_site`` / ``wait_thread`` filled in where known."""
    whole = _lookup("classified")
    if whole is not None:
        return cast(StackProcess, whole(p))
    fn = _lookup("classify_process")
    if fn is None:
        return p
    out = fn(p)
    if isinstance(out, StackProcess):
        return out
    if isinstance(out, tuple) and len(out) == 2:
        site, tid = out
        return replace(p, wait_site=site, wait_thread=tid)
    if isinstance(out, str) or out is None:
        return replace(p, wait_site=out)
    return p


def gpu_facts(
    processes: Sequence[StackProcess], util_by_pid: Mapping[int, float]
) -> list[StackProcess]:
    """Let GPU utilisation settle what a stack alone cannot (a CUDA sync on a GPU spinning
    at 100% while a peer's GPU is idle is a collective the peer never joined)."""
    fn = _lookup("apply_gpu_facts")
    if fn is None:
        return list(processes)
    return list(fn(list(processes), dict(util_by_pid)))


def group(processes: Sequence[StackProcess]) -> tuple[StackGroup, ...]:
    fn = _lookup("group_stacks")
    return tuple(fn(list(processes))) if fn is not None else ()


def outliers(processes: Sequence[StackProcess], groups: Sequence[StackGroup]) -> tuple[int, ...]:
    fn = _lookup("outlier_tp_ranks")
    return tuple(fn(list(processes), list(groups))) if fn is not None else ()
