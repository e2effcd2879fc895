"""py-spy's ``dump --json [--native]`` output -> :class:`StackProcess`.

The format (py-spy 0.4.3): a list of threads, each ``{"pid", "thread_id",
"thread_name", "os_thread_id", "active", "owns_gil", "frames": [{"name", "filename",
"module", "short_filename", "line", "locals", "is_entry", "is_shim_entry"}],
"process_info"}``, frames innermost first. Native frames carry ``module`` (the shared
object's path) and ``line`` 0; Python frames have ``module`` null. A thread's id in the
model is its OS thread id (what ``py-spy dump`` prints and ``/proc/<pid>/task`` lists),
falling back to the pthread id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diag.model import StackFrame, StackProcess, StackThread
from diag.stacks.frames import make_frame, rank_from_title

__all__ = ["parse_pyspy_json"]


def _frame(raw: Mapping[str, Any]) -> StackFrame:
    name = raw.get("name")
    if not isinstance(name, str):
        raise ValueError("py-spy JSON frame without a name")
    module = raw.get("module")
    module = module if isinstance(module, str) and module else None
    short = raw.get("short_filename")
    filename = raw.get("filename")
    line = raw.get("line")
    line = line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None
    if module is not None:
        where = short if isinstance(short, str) and short else module.rsplit("/", 1)[-1]
    else:
        where = filename if isinstance(filename, str) and filename else (short or "")
    frame = make_frame(name, f"{where}:{line}" if line is not None else where, module=module)
    return frame


def _thread(raw: Mapping[str, Any]) -> StackThread:
    frames = raw.get("frames")
    if not isinstance(frames, list):
        raise ValueError("py-spy JSON thread without a frames list")
    tid = raw.get("os_thread_id")
    if not isinstance(tid, int):
        tid = raw.get("thread_id") if isinstance(raw.get("thread_id"), int) else None
    name = raw.get("thread_name")
    active = raw.get("active")
    gil = raw.get("owns_gil")
    return StackThread(
        thread_id=tid,
        name=name if isinstance(name, str) else None,
        frames=tuple(_frame(f) for f in frames if isinstance(f, Mapping)),
        idle=(not active) if isinstance(active, bool) else None,
        owns_gil=gil if isinstance(gil, bool) else None,
    )


def parse_pyspy_json(
    data: object, *, pid: int | None, title: str | None, mode: str
) -> StackProcess:
    """One process from py-spy's JSON; ``wait_site``/``wait_thread`` set by the classifier,
    the rank read from ``title``. Raises ValueError (a one-line reason) for data of another
    shape; the caller turns it into its own error."""
    if isinstance(data, Mapping) and isinstance(data.get("threads"), list):
        data = data["threads"]
    if not isinstance(data, list):
        raise ValueError(f"py-spy JSON: expected a list of threads, got {type(data).__name__}")
    threads = []
    for item in data:
        if not isinstance(item, Mapping):
            raise ValueError("py-spy JSON: a thread entry is not an object")
        threads.append(_thread(item))
        if pid is None and isinstance(item.get("pid"), int):
            pid = item["pid"]
    # py-spy lists threads in no useful order: put the main thread first.
    threads.sort(key=lambda t: t.name != "MainThread" and t.thread_id != pid)
    from diag.stacks.classify import classified  # (speed) imported when a dump is read

    return classified(
        StackProcess(
            pid=pid, title=title, threads=tuple(threads), rank=rank_from_title(title), mode=mode
        )
    )
