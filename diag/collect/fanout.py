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
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from diag.bundle.read import Bundle
from diag.errors import DiagError, InputError
from diag.model import Snapshot

__all__ = [
    "HostResult",
    "Transport",
    "view_to_dict",
    "JobView",
    "fold_ranks",
    "merge",
    "odd_diffs",
    "parse_hosts",
    "snapshot_hosts",
]

MISSING = "__DIAG_NOT_INSTALLED__"
MAX_OUTPUT = 64 << 20  # bytes of one host's JSON read at most
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
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
    bundle: Bundle | None = None  # the host's own bundle (``--out``), read and checked


@dataclass(frozen=True, slots=True)
class Transport:
    """How a remote command is run: ssh (default) or ``kubectl exec``."""

    name: str
    argv: Callable[[str, str], list[str]]  # (host, remote shell command) -> argv
    install: str = "apt-get install openssh-client"
    missing_remedy: str = "ssh {host} pip install diag (or pass --remote-diag /path/to/diag)"
    unreachable_remedy: str = "ssh {host} true  (keys, known_hosts, ProxyJump)"
    unreachable_codes: tuple[int, ...] = (255,)


@dataclass(frozen=True, slots=True)
class JobView:
    """The merged picture: every host's part, groups and odd ranks across all hosts."""

    hosts: tuple[HostResult, ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (wait site, ranks "TP3@node1")
    outliers: tuple[str, ...]
    elapsed_s: float
    slowest_host_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    snapshot: Snapshot | None = None  # the job's snapshot (every host's ranks, node-tagged)

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
    bundle_mode: bool = False,
    transport: Transport | None = None,
) -> HostResult:
    t_start = time.monotonic()
    how = transport or Transport("ssh", lambda h, r: _ssh_argv(h, r, ssh_opts, timeout_s))
    diag = shlex.join([diag_cmd, *remote_args])
    remote = (
        f"{_CLOCK}; command -v {shlex.quote(diag_cmd)} >/dev/null 2>&1 || "
        f"{{ echo {MISSING}; exit 127; }}; exec {diag}"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            *how.argv(host, remote),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        return HostResult(host, False, error=f"no {how.name} client on this host",
                          remedy=how.install)
    async def talk() -> tuple[bytes, bytes, int, float | None, float | None]:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        # stderr is drained all along (a chatty remote must not block on a full pipe)
        err_task = asyncio.ensure_future(proc.stderr.read(1 << 16))
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
        stderr = await err_task
        while await proc.stderr.read(1 << 16):
            pass
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
    if (MISSING in text[:200] and not out.startswith(b"\x1f\x8b")) or code == 127:
        return HostResult(
            host, False, error="diag is not installed there (or not on its PATH)",
            remedy=how.missing_remedy.format(host=host),
            exit_code=code, elapsed_s=elapsed, offset_s=offset, offset_err_s=err,
        )
    if code in how.unreachable_codes and not text.strip():
        why = err_text[-1] if err_text else f"{how.name} failed"
        return HostResult(host, False, error=f"unreachable: {why}",
                          remedy=how.unreachable_remedy.format(host=host),
                          exit_code=code, elapsed_s=elapsed)
    if bundle_mode and out[:2] == b"\x1f\x8b":
        return _from_bundle(host, out, code=code, elapsed=elapsed, offset=offset, err=err)
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


def _from_bundle(
    host: str, data: bytes, *, code: int, elapsed: float, offset: float | None, err: float | None
) -> HostResult:
    """A host's answer in bundle mode: its own bundle (``diag snapshot --out -``), read
    with every check a stranger's bundle gets (caps, names, checksums)."""
    import tempfile

    from diag.bundle.read import read_bundle
    from diag.report.snapshot_read import snapshot_from_dict

    with tempfile.TemporaryDirectory(prefix="diag-fanout-") as tmp:
        path = Path(tmp) / f"{_SAFE_NAME.sub('_', host)}.tar.gz"
        path.write_bytes(data)
        try:
            bundle = read_bundle(path)
            raw = bundle.json("snapshot.json")
            snap = snapshot_from_dict(raw)
        except DiagError as exc:
            return HostResult(host, False, error=f"unreadable bundle: {exc.message}",
                              exit_code=code, elapsed_s=elapsed)
    bundle = Bundle(path=Path(f"{host}.tar.gz"), manifest=bundle.manifest,
                    members=bundle.members)
    return HostResult(host, True, snapshot=snap, raw=raw, exit_code=code, elapsed_s=elapsed,
                      offset_s=offset, offset_err_s=err, bundle=bundle)


_BUNDLE_ARGS = ("--out", "-", "--logs")


async def _one_or_json(host: str, remote_args: Sequence[str], **kw: Any) -> HostResult:
    """A host whose diag predates ``--out -`` (a usage error, exit 2) is asked again for
    its ``--json`` snapshot alone: its part of the job bundle is then that snapshot."""
    first = await _one(host, remote_args, **kw)
    if first.ok or not kw.get("bundle_mode") or first.exit_code != 2:
        return first
    args = list(remote_args)
    for i in range(len(args) - len(_BUNDLE_ARGS) + 1):
        if tuple(args[i:i + len(_BUNDLE_ARGS)]) == _BUNDLE_ARGS:
            args[i:i + len(_BUNDLE_ARGS)] = ["--json"]
            break
    else:
        return first
    again = await _one(host, args, **{**kw, "bundle_mode": False})
    if not again.ok:
        return first
    return replace(again, remedy="its diag cannot send a bundle (--out -): upgrade it for "
                   "its env, stacks and logs in the job bundle")


async def _all(hosts: Sequence[str], remote_args: Sequence[str], **kw: Any) -> list[HostResult]:
    return list(await asyncio.gather(*(_one_or_json(h, remote_args, **kw) for h in hosts)))


def snapshot_hosts(
    hosts: Sequence[str],
    *,
    remote_args: Sequence[str] = ("snapshot", "--json"),
    ssh_opts: Sequence[str] = (),
    timeout_s: float = 60.0,
    diag_cmd: str = "diag",
    bundle_mode: bool = False,
    transport: Transport | None = None,
) -> JobView:
    """Every host at once. ``bundle_mode``: the remote args make each host write its own
    bundle to stdout (``diag snapshot --out -``); each comes back read and checked."""
    t0 = time.monotonic()
    results = asyncio.run(
        _all(hosts, remote_args, ssh_opts=ssh_opts, timeout_s=timeout_s, diag_cmd=diag_cmd,
             bundle_mode=bundle_mode, transport=transport)
    )
    return merge(results, elapsed_s=time.monotonic() - t0)


def merge(results: Sequence[HostResult], *, elapsed_s: float = 0.0) -> JobView:
    """Groups and odd ranks across every host, as LLNL's STAT does across a job (the
    job's snapshot of :func:`diag.bundle.job.job_view`)."""
    from diag.bundle.job import HostPart, job_view

    parts = [
        HostPart(h.host, h.snapshot, h.offset_s, h.offset_err_s)
        for h in results
        if h.ok and h.snapshot is not None
    ]
    failed = [(h.host, h.error or "not collected") for h in results if not h.ok]
    job, odd = job_view(parts, failed=failed) if parts else (None, ())
    named = [
        (g.wait_site or "unknown", tuple(_member(m) for m in g.members))
        for g in (job.groups if job is not None else ())
    ]
    notes: list[str] = []
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
        outliers=tuple(_member(m) for m in odd),
        elapsed_s=elapsed_s,
        slowest_host_s=max((h.elapsed_s for h in results), default=0.0),
        notes=tuple(notes),
        snapshot=job,
    )


def _member(label: str) -> str:
    """A group member of a host-tagged rank (``node TP3``) as ``TP3@node``."""
    from diag.bundle.job import at_host

    return at_host(label)


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


def odd_diffs(view: JobView) -> list[dict[str, Any]]:
    """Each odd group's stack against the majority group's (the group with no odd rank):
    the last frame they share, then the next frames of each (``frame_diff``)."""
    from diag.bundle.job import at_host, frame_diff

    snap = view.snapshot
    if snap is None or len(snap.groups) < 2 or not view.outliers:
        return []
    odd = set(view.outliers)
    groups = [g for g in snap.groups if g.frames]
    ref = next((g for g in groups if not {at_host(m) for m in g.members} & odd), None)
    if ref is None:
        return []
    out: list[dict[str, Any]] = []
    for g in groups:
        if g is ref or not {at_host(m) for m in g.members} & odd:
            continue
        shared, mine, theirs = frame_diff(ref, g)
        out.append({"ranks": fold_ranks([at_host(m) for m in g.members]), "shared": shared,
                    "majority": list(mine), "odd": list(theirs)})
    return out


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
        "odd_stack_diff": odd_diffs(view),
        "elapsed_s": round(view.elapsed_s, 3),
        "slowest_host_s": round(view.slowest_host_s, 3),
        "notes": list(view.notes),
    }
