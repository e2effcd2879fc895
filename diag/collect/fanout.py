"""``diag snapshot --hosts``: the same snapshot on every node at the same moment, over the
system's own OpenSSH client, merged into one picture of the job.

Each host runs ``diag snapshot --json`` through ``ssh`` (so ``~/.ssh/config``, agents,
ProxyJump, ControlMaster and known_hosts work exactly as for the user's own ``ssh``), all
hosts in parallel under asyncio, with ``BatchMode=yes`` (nothing prompts) and a deadline
per host. In the same session the remote clock is read Cristian-style: the remote side
says it is ready, we send one byte and it answers with its time, so the offset is the
remote time minus the midpoint of that round trip and the error bound is half of it.

A host that cannot be reached, or that has no diag, is reported with what to do; the
others are still merged (the command exits 3). Nothing but the snapshot's JSON comes back;
no credential is read or copied.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from diag.errors import InputError
from diag.model import ProcessInfo, Snapshot, StackProcess

__all__ = [
    "HostResult",
    "view_to_dict",
    "JobView",
    "fold_ranks",
    "merge",
    "parse_hosts",
    "snapshot_hosts",
]

MISSING = "__DIAG_NOT_INSTALLED__"
MAX_OUTPUT = 64 << 20  # bytes of one host's JSON read at most
_CLOCK = (
    "python3 -c 'import sys,time; print(\"__DIAG_CLOCK_READY__\", flush=True); "
    "sys.stdin.readline(); print(repr(time.time()), flush=True)'"
)


@dataclass(frozen=True, slots=True)
class HostResult:
    host: str
    ok: bool
    snapshot: Snapshot | None = None
    raw: Mapping[str, Any] | None = None
    error: str | None = None
    remedy: str | None = None
    exit_code: int | None = None
    elapsed_s: float = 0.0
    offset_s: float | None = None  # remote clock minus ours
    offset_err_s: float | None = None


@dataclass(frozen=True, slots=True)
class JobView:
    """The merged picture: every host's part, groups and odd ranks across all hosts."""

    hosts: tuple[HostResult, ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (wait site, ranks "TP3@node1")
    outliers: tuple[str, ...]
    elapsed_s: float
    slowest_host_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def partial(self) -> bool:
        return any(not h.ok for h in self.hosts)


def parse_hosts(spec: str) -> list[str]:
    """``node0,node1`` or ``@hosts.txt`` (one host per line, ``#`` comments)."""
    if spec.startswith("@"):
        path = Path(spec[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"--hosts {spec}: {exc.strerror}") from None
        items = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    else:
        items = [h.strip() for h in spec.split(",")]
    hosts = [h for h in items if h]
    bad = [h for h in hosts if h.startswith("-") or any(c.isspace() for c in h)]
    if bad or not hosts:
        raise InputError(
            f"--hosts {spec}: {'no host' if not hosts else 'not a host name: ' + bad[0]}",
            help_text="--hosts node0,node1 or --hosts @hosts.txt",
        )
    if len(hosts) > 1024:
        raise InputError(f"--hosts: {len(hosts)} hosts; at most 1024")
    return list(dict.fromkeys(hosts))


def _ssh_argv(host: str, remote: str, ssh_opts: Sequence[str], timeout_s: float) -> list[str]:
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout_s))}"]
    for opt in ssh_opts:
        argv += ["-o", opt]
    return [*argv, "--", host, remote]


async def _one(
    host: str,
    remote_args: Sequence[str],
    *,
    ssh_opts: Sequence[str],
    timeout_s: float,
    diag_cmd: str,
) -> HostResult:
    t_start = time.monotonic()
    diag = shlex.join([diag_cmd, *remote_args])
    remote = (
        f"{_CLOCK}; command -v {shlex.quote(diag_cmd)} >/dev/null 2>&1 || "
        f"{{ echo {MISSING}; exit 127; }}; exec {diag}"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            *_ssh_argv(host, remote, ssh_opts, timeout_s),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        return HostResult(host, False, error="no ssh client on this host",
                          remedy="apt-get install openssh-client")
    async def talk() -> tuple[bytes, bytes, int, float | None, float | None]:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        offset = err = None
        out = b""
        line = await proc.stdout.readline()
        if line.strip() == b"__DIAG_CLOCK_READY__":
            t0 = time.time()
            proc.stdin.write(b"\n")
            await proc.stdin.drain()
            reply = await proc.stdout.readline()
            t1 = time.time()
            try:
                remote_now = float(reply.strip())
                offset, err = remote_now - (t0 + t1) / 2, (t1 - t0) / 2
            except ValueError:
                out = reply
        else:
            out = line
        proc.stdin.close()
        out += await proc.stdout.read(MAX_OUTPUT)
        stderr = await proc.stderr.read(1 << 16)
        code = await proc.wait()
        return out, stderr, code, offset, err

    try:
        out, stderr, code, offset, err = await asyncio.wait_for(talk(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return HostResult(host, False, error=f"no answer within {timeout_s:.0f} s",
                          remedy="check the host is up; raise --timeout for slow hosts",
                          elapsed_s=time.monotonic() - t_start)
    elapsed = time.monotonic() - t_start
    text = out.decode("utf-8", "replace")
    err_text = stderr.decode("utf-8", "replace").strip().splitlines()
    if MISSING in text or code == 127:
        return HostResult(
            host, False, error="diag is not installed there (or not on its PATH)",
            remedy=f"ssh {host} pip install diag (or pass --remote-diag /path/to/diag)",
            exit_code=code, elapsed_s=elapsed, offset_s=offset, offset_err_s=err,
        )
    if code == 255 and not text.strip():
        why = err_text[-1] if err_text else "ssh failed"
        return HostResult(host, False, error=f"unreachable: {why}",
                          remedy=f"ssh {host} true  (keys, known_hosts, ProxyJump)",
                          exit_code=code, elapsed_s=elapsed)
    try:
        raw = json.loads(text)
    except ValueError:
        last = err_text[-1] if err_text else text.strip()[-200:]
        return HostResult(host, False, error=f"no snapshot (exit {code}): {last}",
                          exit_code=code, elapsed_s=elapsed, offset_s=offset, offset_err_s=err)
    if not isinstance(raw, dict):
        return HostResult(host, False, error="the snapshot is not a JSON object",
                          exit_code=code, elapsed_s=elapsed)
    from diag.report.snapshot_read import snapshot_from_dict

    try:
        snap = snapshot_from_dict(raw)
    except Exception as exc:  # a remote diag of another version, or damage on the way
        return HostResult(host, False, error=f"unreadable snapshot: {exc}", exit_code=code,
                          elapsed_s=elapsed)
    return HostResult(host, True, snapshot=snap, raw=raw, exit_code=code, elapsed_s=elapsed,
                      offset_s=offset, offset_err_s=err)


async def _all(hosts: Sequence[str], remote_args: Sequence[str], **kw: Any) -> list[HostResult]:
    return list(await asyncio.gather(*(_one(h, remote_args, **kw) for h in hosts)))


def snapshot_hosts(
    hosts: Sequence[str],
    *,
    remote_args: Sequence[str] = ("snapshot", "--json"),
    ssh_opts: Sequence[str] = (),
    timeout_s: float = 60.0,
    diag_cmd: str = "diag",
) -> JobView:
    t0 = time.monotonic()
    results = asyncio.run(
        _all(hosts, remote_args, ssh_opts=ssh_opts, timeout_s=timeout_s, diag_cmd=diag_cmd)
    )
    return merge(results, elapsed_s=time.monotonic() - t0)


def _tagged(p: ProcessInfo, host: str) -> ProcessInfo:
    rank = p.rank if p.rank is not None else None
    if rank is not None and rank.node is None:
        rank = replace(rank, node=host)
    stack = replace(p.stack, rank=rank) if p.stack is not None else None
    return replace(p, rank=rank, stack=stack)


def merge(results: Sequence[HostResult], *, elapsed_s: float = 0.0) -> JobView:
    """Groups and odd ranks across every host, as LLNL's STAT does across a job."""
    from diag.collect import stackapi

    ranked: list[StackProcess] = []
    notes: list[str] = []
    for h in results:
        if not h.ok or h.snapshot is None:
            continue
        ranked.extend(
            _tagged(p, h.host).stack  # type: ignore[misc]
            for p in h.snapshot.processes
            if p.role in ("scheduler", "worker") and p.stack is not None
        )
    groups = stackapi.group(ranked) if ranked else ()
    named = [(g.wait_site or "unknown", tuple(_member(m) for m in g.members)) for g in groups]
    outliers: tuple[str, ...] = ()
    if len(named) > 1:
        # the majority waits together; a tie goes to the group at a rendezvous (a
        # collective or a store wait): the odd ranks out are the others
        rendezvous = ("stack.nccl_collective", "stack.dist_init")
        best = max(named, key=lambda g: (len(g[1]), g[0] in rendezvous))
        ties = [g for g in named if len(g[1]) == len(best[1])]
        if len(ties) == 1 or sum(g[0] in rendezvous for g in ties) == 1:
            outliers = tuple(m for g in named if g is not best for m in g[1])
    errs = [h.offset_err_s for h in results if h.offset_err_s is not None]
    if errs:
        notes.append(
            "clock offsets measured (remote minus local, ± half the round trip): "
            + ", ".join(f"{h.host} {h.offset_s:+.3f} s ± {h.offset_err_s:.3f}"
                        for h in results if h.offset_s is not None and h.offset_err_s is not None)
        )
    return JobView(
        hosts=tuple(results),
        groups=tuple(named),
        outliers=outliers,
        elapsed_s=elapsed_s,
        slowest_host_s=max((h.elapsed_s for h in results), default=0.0),
        notes=tuple(notes),
    )


def _member(label: str) -> str:
    """A group member of a host-tagged rank (``node TP3``) as ``TP3@node``."""
    node, sep, rest = label.partition(" ")
    return f"{rest}@{node}" if sep and rest else label


def fold_ranks(labels: Sequence[str]) -> str:
    """``TP0@a, TP1@a, TP2@b`` -> ``TP[0-1]@a, TP2@b`` (runs of numbers folded per host)."""
    by_host: dict[tuple[str, str], list[int]] = {}
    other: list[str] = []
    for label in labels:
        name, _, host = label.partition("@")
        if name.startswith("TP") and name[2:].isdigit() and " " not in name:
            by_host.setdefault(("TP", host), []).append(int(name[2:]))
        else:
            other.append(label)
    parts = []
    for (kind, host), nums in by_host.items():
        nums = sorted(set(nums))
        runs: list[str] = []
        start = prev = nums[0]
        for n in nums[1:] + [-10]:
            if n == prev + 1:
                prev = n
                continue
            runs.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = n
        body = runs[0] if len(runs) == 1 and "-" not in runs[0] else f"[{','.join(runs)}]"
        parts.append(f"{kind}{body}" + (f"@{host}" if host else ""))
    return ", ".join(parts + other)


def view_to_dict(view: JobView) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "hosts": [
            {
                "host": h.host,
                "ok": h.ok,
                "error": h.error,
                "remedy": h.remedy,
                "exit_code": h.exit_code,
                "elapsed_s": round(h.elapsed_s, 3),
                "clock_offset_s": None if h.offset_s is None else round(h.offset_s, 6),
                "clock_error_s": None if h.offset_err_s is None else round(h.offset_err_s, 6),
                "snapshot": h.raw,
            }
            for h in view.hosts
        ],
        "groups": [{"wait_site": site, "ranks": list(ranks)} for site, ranks in view.groups],
        "outliers": list(view.outliers),
        "elapsed_s": round(view.elapsed_s, 3),
        "slowest_host_s": round(view.slowest_host_s, 3),
        "notes": list(view.notes),
    }
