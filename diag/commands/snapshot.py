"""`diag snapshot`: where is every worker of a live server stuck, right now.

Exit codes: 0 collected, 2 usage error, 3 partial collection (py-spy missing, ptrace
refused, a dump timed out) — the rest of the snapshot is still printed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from diag.errors import EXIT_PARTIAL, InputError
from diag.model import Snapshot

if TYPE_CHECKING:
    from diag.collect.fanout import JobView

__all__ = ["register", "write_snapshot_bundle"]


def write_snapshot_bundle(path: Path, snap: Snapshot, logs: Sequence[Path] = ()) -> str:
    """Keep the evidence: the bundle writer (``diag.bundle.write.write_bundle``) packs the
    snapshot, redacted, with the environment of its processes (and ``logs``). Returns a
    one-line summary."""
    from diag.bundle.write import write_bundle

    info = write_bundle(path, snapshot=snap, logs=logs, command_line=tuple(sys.argv))
    return f"bundle written: {info.path} ({info.size} bytes, {len(info.members)} members)"


def server_logs(snap: Snapshot, proc: Path = Path("/proc")) -> list[Path]:
    """The files the server's processes write their stdout and stderr to (``> server.log``),
    regular files only: the logs of this host's part of the job, as the remote side of
    ``--hosts --out`` packs them."""
    found: dict[Path, None] = {}
    for p in snap.processes:
        if p.role == "other":
            continue
        for fd in (1, 2):
            try:
                target = Path(os.readlink(proc / str(p.pid) / "fd" / str(fd)))
            except OSError:
                continue
            if target.is_absolute() and target.parts[1:2] not in (("dev",), ("proc",)):
                try:
                    if stat.S_ISREG(target.stat().st_mode):
                        found[target] = None
                except OSError:
                    continue
    return list(found)[:64]


def _bundle_to_stdout(snap: Snapshot, logs: Sequence[Path]) -> None:
    """``--out -``: the bundle's bytes on stdout and nothing else (what ``--hosts --out``
    reads back from every host)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="diag-out-") as tmp:
        path = Path(tmp) / "snapshot.tar.gz"
        write_snapshot_bundle(path, snap, logs)
        data = path.read_bytes()
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def register(app: typer.Typer) -> None:
    @app.command("snapshot")
    def snapshot(
        pid: Annotated[
            int | None,
            typer.Option("--pid", help="A process of the server (launcher or any rank)."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Also write a bundle (.tar.gz) of the evidence "
                         "(- : the bundle alone on stdout). With --hosts: one bundle for "
                         "the job, each host's part in it."),
        ] = None,
        with_logs: Annotated[
            bool,
            typer.Option("--logs", help="Pack into the bundle the files the server's "
                         "processes write stdout/stderr to (on by default with --hosts --out)."),
        ] = False,
        samples: Annotated[
            int,
            typer.Option(
                "--samples", min=1, max=10,
                help="Stack samples per process: the 2nd beside the native dumps, more ~1 s apart.",
            ),
        ] = 2,
        timeout: Annotated[
            float, typer.Option("--timeout", min=0.5, max=600, help="Deadline for all dumps (s).")
        ] = 10.0,
        no_native: Annotated[
            bool, typer.Option("--no-native", help="Python frames only (faster, no C++ wait site).")
        ] = False,
        native_all: Annotated[
            bool,
            typer.Option(
                "--native-all",
                help="--native for every process, launcher included (default: ranks and "
                "engine core only, one rank per group of identical Python stacks standing "
                "for the others).",
            ),
        ] = False,
        fr_dump: Annotated[
            bool,
            typer.Option(
                "--fr-dump",
                help="Ask each rank's PyTorch Flight Recorder for a fresh dump through its "
                "debug pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE) and wait up to 5 s for it.",
            ),
        ] = False,
        store_keys: Annotated[
            bool,
            typer.Option(
                "--store-keys",
                help="Also count the keys of each rendezvous store (TCPStore), read-only "
                "through torch's client: who registered and who did not. Needs torch.",
            ),
        ] = False,
        log_phase: Annotated[
            bool | None,
            typer.Option(
                "--log-phase/--no-log-phase",
                help="Read each rank's phase from the log file its output goes to "
                "(default: only when the evidence names ranks).",
            ),
        ] = None,
        hosts: Annotated[
            str | None,
            typer.Option("--hosts", help="Snapshot these hosts at once over ssh and merge: "
                         "node0,node1 or @hosts.txt."),
        ] = None,
        ssh_opt: Annotated[
            list[str] | None,
            typer.Option("--ssh-opt", help="An ssh -o option for --hosts (repeatable), "
                         "e.g. ProxyJump=bastion."),
        ] = None,
        remote_diag: Annotated[
            str, typer.Option("--remote-diag", help="The diag command on the remote hosts.")
        ] = "diag",
        ray: Annotated[
            bool,
            typer.Option("--ray", help="One snapshot task per alive node of the Ray cluster "
                         "(node-affinity scheduling), merged (pip install 'diag[ray]')."),
        ] = False,
        ray_address: Annotated[
            str | None,
            typer.Option("--ray-address", help="The Ray cluster to join (default: auto)."),
        ] = None,
        ray_record: Annotated[
            Path | None, typer.Option("--ray-record", hidden=True)
        ] = None,
        k8s: Annotated[
            bool,
            typer.Option("--k8s", help="The pods of one server (LeaderWorkerSet group, "
                         "StatefulSet) found by -n/-l, each snapshot through kubectl exec."),
        ] = False,
        namespace: Annotated[
            str | None, typer.Option("--namespace", "-n", help="--k8s: the namespace.")
        ] = None,
        selector: Annotated[
            str | None, typer.Option("--selector", "-l", help="--k8s: the pods' label selector.")
        ] = None,
        k8s_group: Annotated[
            str | None,
            typer.Option("--k8s-group", help="--k8s: which server where the selector matches "
                         "several (lws/NAME/GROUP, statefulset/NAME, or the group index)."),
        ] = None,
        container: Annotated[
            str | None, typer.Option("--container", "-c", help="--k8s: the server container.")
        ] = None,
        k8s_debug_image: Annotated[
            str | None,
            typer.Option("--k8s-debug-image", help="--k8s: also dump stacks with py-spy from an "
                         "ephemeral container of this image (kubectl debug --profile=general "
                         "--target=<container>); it stays in the pod until the pod is deleted."),
        ] = None,
        k8s_context: Annotated[
            str | None, typer.Option("--k8s-context", help="--k8s: the kubectl context.")
        ] = None,
    ) -> None:
        """Find SGLang / vLLM servers on this host and say where every rank is stuck."""
        if k8s:
            if hosts is not None or ray:
                raise InputError("--k8s with --hosts or --ray: pass one of them")
            if not namespace or not selector:
                raise InputError("--k8s needs -n NAMESPACE and -l SELECTOR",
                                 help_text="diag snapshot --k8s -n serving -l app=sglang")
            _k8s(namespace, selector, group=k8s_group, container=container,
                 debug_image=k8s_debug_image, context=k8s_context, samples=samples,
                 timeout=timeout, no_native=no_native, as_json=as_json, remote_diag=remote_diag)
            return
        if ray:
            if hosts is not None:
                raise InputError("--ray and --hosts: pass one of them")
            _ray(ray_address, samples=samples, timeout=timeout, no_native=no_native,
                 as_json=as_json, record=ray_record)
            return
        if hosts is not None:
            if out is not None and str(out) == "-":
                raise InputError("--hosts with --out -: the job bundle needs a file name",
                                 help_text="--out hang.tar.gz")
            _multi_host(hosts, ssh_opt or [], remote_diag, samples=samples, timeout=timeout,
                        no_native=no_native, as_json=as_json, out=out)
            return
        from diag.collect.snapshot import SnapshotOptions, take_snapshot
        from diag.report.snapshot_json import snapshot_to_dict
        from diag.report.snapshot_view import render_snapshot

        if pid is not None and pid <= 0:
            raise InputError(f"--pid {pid}: not a process id", help_text="Pass a positive pid.")
        snap = take_snapshot(
            SnapshotOptions(
                pid=pid,
                samples=samples,
                timeout_s=timeout,
                native=not no_native,
                native_all=native_all,
                fr_dump=fr_dump,
                store_keys=store_keys,
                log_phase=log_phase,
            )
        )
        console = Console(highlight=False)
        if not console.is_terminal:
            console = Console(highlight=False, width=160)
        logs = server_logs(snap) if with_logs else []
        if out is not None and str(out) == "-":
            _bundle_to_stdout(snap, logs)
        elif as_json:
            typer.echo(json.dumps(snapshot_to_dict(snap), indent=2))
        else:
            for part in render_snapshot(snap):
                console.print(part)
        if out is not None and str(out) != "-":
            summary = write_snapshot_bundle(out, snap, logs)
            Console(stderr=True, highlight=False).print(summary)
        if snap.partial:
            err = Console(stderr=True, highlight=False)
            for reason in snap.partial:
                err.print(f"[yellow]diag: partial collection:[/] {reason}", soft_wrap=True)
            raise typer.Exit(EXIT_PARTIAL)


def _multi_host(
    spec: str,
    ssh_opts: list[str],
    remote_diag: str,
    *,
    samples: int,
    timeout: float,
    no_native: bool,
    as_json: bool,
    out: Path | None,
) -> None:
    from diag.collect.fanout import parse_hosts, snapshot_hosts, view_to_dict

    hosts = parse_hosts(spec)
    remote = ["snapshot", "--samples", str(samples), "--timeout", str(timeout)]
    # with --out every host packs its own bundle (its env, stacks, logs, redacted there)
    remote += ["--out", "-", "--logs"] if out is not None else ["--json"]
    if no_native:
        remote.append("--no-native")
    view = snapshot_hosts(hosts, remote_args=remote, ssh_opts=ssh_opts,
                          timeout_s=timeout + 30.0, diag_cmd=remote_diag,
                          bundle_mode=out is not None)
    _show(view, as_json=as_json)
    if out is not None:
        from diag.bundle.job import write_job_bundle

        doc = view_to_dict(view)
        info = write_job_bundle(
            out,
            hosts=doc["hosts"],
            parts={h.host: h.bundle for h in view.hosts if h.ok and h.bundle is not None},
            job={k: v for k, v in doc.items() if k != "hosts"},
            command_line=("diag", "snapshot", "--hosts", spec),
        )
        Console(stderr=True, highlight=False).print(
            f"bundle written: {info.path} ({info.size} bytes, {len(info.hosts)} hosts, "
            f"{len(info.members)} members)", markup=False)
    _partial(view)


def _show(view: JobView, *, as_json: bool) -> None:
    """The merged view of several hosts (or Ray nodes), as JSON or as text."""
    from diag.collect.fanout import fold_ranks, view_to_dict
    from diag.report.sanitize import markup_safe
    from diag.report.sanitize import visible as sanitize

    if as_json:
        typer.echo(json.dumps(view_to_dict(view), indent=2))
    else:
        console = Console(highlight=False)
        console.print(f"[bold]{len(view.hosts)} hosts[/] in {view.elapsed_s:.2f} s "
                      f"(slowest host {view.slowest_host_s:.2f} s)")
        for h in view.hosts:
            if h.ok and h.snapshot is not None:
                ranks = [p for p in h.snapshot.processes if p.role in ("scheduler", "worker")]
                clock = (f", clock {h.offset_s:+.3f} s ± {h.offset_err_s:.3f}"
                         if h.offset_s is not None and h.offset_err_s is not None else "")
                verdict = sanitize(h.snapshot.verdict.splitlines()[0]) if h.snapshot.verdict else ""
                console.print(f"  {h.host}: {len(ranks)} ranks{clock}; {verdict}", markup=False)
            else:
                console.print(f"  {h.host}: [red]{markup_safe(h.error or 'failed')}[/]"
                              + (f" — {markup_safe(h.remedy)}" if h.remedy else ""))
        for site, members in view.groups:
            console.print(f"  {site}: {fold_ranks(list(members))}", markup=False)
        if view.outliers:
            console.print(f"[bold red]odd ranks out:[/] {fold_ranks(list(view.outliers))}")
            for line in _diff_lines(view):
                console.print(line, markup=False)
        for note in view.notes:
            console.print(f"[dim]{note}[/]")


def _ray(address: str | None, *, samples: int, timeout: float, no_native: bool,
         as_json: bool, record: Path | None) -> None:
    from diag.collect.ray_fanout import snapshot_ray

    remote = ["snapshot", "--json", "--samples", str(samples), "--timeout", str(timeout)]
    if no_native:
        remote.append("--no-native")
    view = snapshot_ray(address=address, remote_args=remote, timeout_s=timeout + 30.0,
                        record=record)
    _show(view, as_json=as_json)
    _partial(view)


def _partial(view: JobView) -> None:
    if view.partial:
        err = Console(stderr=True, highlight=False)
        for h in view.hosts:
            if not h.ok:
                err.print(f"diag: partial collection: {h.host}: {h.error}", markup=False)
        raise typer.Exit(EXIT_PARTIAL)


def _k8s(namespace: str, selector: str, *, group: str | None, container: str | None,
         debug_image: str | None, context: str | None, samples: int, timeout: float,
         no_native: bool, as_json: bool, remote_diag: str) -> None:
    from diag.collect.k8s_fanout import DEBUG_NOTE, snapshot_k8s

    remote = ["snapshot", "--json", "--samples", str(samples), "--timeout", str(timeout)]
    if no_native:
        remote.append("--no-native")
    view, _server = snapshot_k8s(namespace, selector, group=group, container=container,
                                 remote_args=remote, timeout_s=timeout + 30.0,
                                 debug_image=debug_image, context=context, diag_cmd=remote_diag)
    _show(view, as_json=as_json)
    if debug_image:
        Console(stderr=True, highlight=False).print(f"diag: note: {DEBUG_NOTE}", markup=False)
    _partial(view)


def _diff_lines(view: JobView) -> list[str]:
    """Each odd group's stack against the majority's: where the two part."""
    from diag.collect.fanout import odd_diffs
    from diag.report.sanitize import visible as sanitize

    out = []
    for d in odd_diffs(view):
        out.append(f"  {d['ranks']} parts from the majority after {d['shared']}:")
        out.append(f"    majority: {' -> '.join(d['majority']) or '(ends here)'}")
        out.append(f"    {d['ranks']}: {' -> '.join(d['odd']) or '(ends here)'}")
    return [sanitize(line) for line in out]
