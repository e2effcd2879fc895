"""`diag snapshot --json` without the interactive CLI: the scripted snapshot, started fast.

A snapshot runs beside a hung server, often from a script or another tool (``--hosts``
runs it on every node), and its answer is wanted in about a second: typer, click and rich
(~0.1 s of imports, more on a slow file system) are not needed to print JSON. The plain
form ``diag snapshot --json`` with only the collection options below is run here; any
other form (text output, ``--out``, ``--hosts``/``--ray``/``--k8s``, ``--help``, an option
value out of range) returns None and goes through the typer app, which validates and
prints exactly what it always prints.

Errors raised while collecting are reported here as the full CLI reports them (one line,
its hint, its exit code): the snapshot is never taken twice. Once all is written the
process ends at once (``exit_now``): the interpreter's teardown of the modules the
snapshot imported (psutil, the rules, the stack analysis) is some 30 ms of nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["exit_now", "parse_plain_snapshot", "run_fast_snapshot"]

_FLAGS = {
    "--json": ("as_json", True),
    "--no-native": ("native", False),
    "--native-all": ("native_all", True),
    "--fr-dump": ("fr_dump", True),
    "--store-keys": ("store_keys", True),
    "--log-phase": ("log_phase", True),
    "--no-log-phase": ("log_phase", False),
}
# option -> (field, type, lowest, highest): the bounds of the typer options in snapshot.py
_VALUES: dict[str, tuple[str, type, float, float]] = {
    "--pid": ("pid", int, 1, 2**31 - 1),
    "--samples": ("samples", int, 1, 10),
    "--timeout": ("timeout_s", float, 0.5, 600),
}


def parse_plain_snapshot(argv: Sequence[str]) -> dict[str, Any] | None:
    """The SnapshotOptions fields of a plain ``snapshot --json`` command line, else None."""
    if not argv or argv[0] != "snapshot":
        return None
    opts: dict[str, Any] = {}
    args = list(argv[1:])
    while args:
        a = args.pop(0)
        name, eq, inline = a.partition("=")
        if a in _FLAGS:
            field, value = _FLAGS[a]
            opts[field] = value
        elif name in _VALUES:
            if eq:
                raw = inline
            elif args:
                raw = args.pop(0)
            else:
                return None
            field, kind, low, high = _VALUES[name]
            try:
                value = kind(raw)
            except ValueError:
                return None
            if not low <= value <= high or value != value:  # (NaN)
                return None
            opts[field] = value
        else:
            return None  # anything else: the full CLI
    if not opts.pop("as_json", False):
        return None
    return opts


def _styled(text: str, code: str, stream: Any) -> str:
    """``text`` in an SGR colour where ``stream`` is a terminal (and NO_COLOR is unset)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty or os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


def run_fast_snapshot(argv: Sequence[str]) -> int | None:
    """Run the plain ``snapshot --json`` form; its exit code, or None (not this form)."""
    opts = parse_plain_snapshot(argv)
    if opts is None:
        return None
    import json

    from diag.collect.snapshot import SnapshotOptions, take_snapshot
    from diag.commands.fast import write_stdout
    from diag.errors import EXIT_PARTIAL, DiagError

    err = sys.stderr
    # The snapshot's threads mostly wait on py-spy, one imports the analysis beside them:
    # a short switch interval lets a thread whose py-spy is done (its next dump, above all
    # the --native one, is the critical path) take the interpreter at once, not after 5 ms.
    sys.setswitchinterval(0.0005)
    # A process of about a second that allocates a bounded amount: no cyclic collector
    # (a full collection of the analysis's objects is ~10 ms at the end).
    import gc

    gc.disable()
    try:
        snap = take_snapshot(SnapshotOptions(**opts))
    except DiagError as exc:
        from diag.report.sanitize import visible

        err.write(f"{_styled('diag: error:', '1;31', err)} {visible(exc.message)}\n")
        if exc.help_text:
            err.write(_styled(f"hint: {visible(exc.help_text)}", "2", err) + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        err.write("diag: interrupted\n")
        return 130
    from diag.report.snapshot_json import snapshot_to_dict

    write_stdout(json.dumps(snapshot_to_dict(snap), indent=2) + "\n")
    if snap.partial:
        from diag.report.sanitize import visible

        for reason in snap.partial:
            err.write(f"{_styled('diag: partial collection:', '33', err)} {visible(reason)}\n")
        return EXIT_PARTIAL
    return 0


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once stdout and stderr are flushed, without the
    interpreter's teardown (no atexit work is pending after a snapshot: its threads are
    joined, it leaves no temporary files)."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # a reader gone: nothing more to say
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(code)
