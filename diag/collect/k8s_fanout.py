"""``diag snapshot --k8s -n NS -l SELECTOR``: the pods of one server, snapshot through
``kubectl exec``, merged like ``--hosts``.

The pods come from ``kubectl get pods -n NS -l SELECTOR -o json``. A server is one
LeaderWorkerSet group (labels ``leaderworkerset.sigs.k8s.io/name`` and ``/group-index``;
the leader is ``/worker-index`` 0, the group's size is the ``leaderworkerset.sigs.k8s.io/size``
annotation), one StatefulSet (its ``ownerReferences``; the ordinal is the
``apps.kubernetes.io/pod-index`` label or the name's ``-N`` suffix), or else the pods the
selector names. Where the selector matches several servers (the groups of an LWS with
``replicas: 2``), ``--k8s-group`` picks one; the others are named. Pods are ordered by
their index (the leader first); a pod that is not running is reported with its state
(``Pending``, ``CrashLoopBackOff``) and an index the LWS size expects but no pod holds is
named as missing.

In each pod ``diag snapshot --json`` runs through ``kubectl exec -i`` in the server's
container (``--container``, else the pod's ``kubectl.kubernetes.io/default-container``
annotation, else its first container): the no-ptrace tier (``/proc``: states, wait
channels, sockets, environment) wherever py-spy cannot attach, as containers without
``SYS_PTRACE`` refuse it. Stacks from py-spy need ``--k8s-debug-image IMAGE``: then, per
pod, ``kubectl debug --profile=general --target=<container>`` starts an ephemeral
container of that image (it must hold py-spy) sharing the server's process namespace,
which dumps the ranks the snapshot found. Kubernetes cannot remove an ephemeral container:
it stays in the pod (stopped) until the pod is deleted; diag says so when it does this.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from diag.collect.fanout import HostResult, JobView, Transport, merge, snapshot_hosts
from diag.errors import DiagError, InputError

__all__ = [
    "DEBUG_NOTE",
    "Pod",
    "Server",
    "debug_argv",
    "exec_argv",
    "pods_from_json",
    "select_server",
    "snapshot_k8s",
]

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
POD_INDEX = "apps.kubernetes.io/pod-index"
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
DEBUG_NOTE = (
    "kubectl debug added an ephemeral container (diag-pyspy-*) to each pod dumped; "
    "Kubernetes cannot remove it: it stays in the pod, stopped, until the pod is deleted"
)
_ORDINAL = re.compile(r"-(\d{1,6})$")
_SEP = "__DIAG_PYSPY_PID__"


class KubectlError(DiagError):
    """kubectl could not list the pods."""


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    namespace: str
    node: str | None
    container: str
    server: str  # "lws/NAME/GROUP", "statefulset/NAME", or "pods"
    index: int | None  # LWS worker index or StatefulSet ordinal (0 = leader)
    size: int | None  # the LWS group's size, where the annotation says
    phase: str
    ready: bool
    reason: str | None  # why a container is not running (CrashLoopBackOff, ...)

    @property
    def running(self) -> bool:
        return self.phase == "Running" and self.reason is None


@dataclass(frozen=True, slots=True)
class Server:
    key: str
    pods: tuple[Pod, ...]
    missing: tuple[str, ...]  # "worker-index 2 (no pod)"
    others: tuple[str, ...]  # the other servers the selector matched


def _int(value: object) -> int | None:
    if isinstance(value, str) and value.isdigit() and len(value) <= 6:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _pod(item: Mapping[str, Any], container: str | None) -> Pod | None:
    meta = item.get("metadata") or {}
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    containers = [c.get("name") for c in spec.get("containers") or () if isinstance(c, dict)]
    chosen = container or notes.get(DEFAULT_CONTAINER) or (containers[0] if containers else "")
    owners = [o for o in meta.get("ownerReferences") or () if isinstance(o, dict)]
    sts = next((o.get("name") for o in owners if o.get("kind") == "StatefulSet"), None)
    index: int | None = None
    size: int | None = None
    if LWS_NAME in labels:
        server = f"lws/{labels[LWS_NAME]}/{labels.get(LWS_GROUP, '0')}"
        index = _int(labels.get(LWS_WORKER))
        size = _int(notes.get(LWS_SIZE)) or _int(labels.get(LWS_SIZE))
    elif sts:
        server = f"statefulset/{sts}"
        index = _int(labels.get(POD_INDEX))
        if index is None and (m := _ORDINAL.search(name)):
            index = int(m.group(1))
    else:
        server = "pods"
    reason = None
    ready = False
    for cs in status.get("containerStatuses") or ():
        if not isinstance(cs, dict) or cs.get("name") != chosen:
            continue
        ready = bool(cs.get("ready"))
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            if isinstance(state.get(kind), dict):
                reason = str(state[kind].get("reason") or kind)
    return Pod(
        name=name,
        namespace=str(meta.get("namespace") or ""),
        node=spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None,
        container=str(chosen),
        server=server,
        index=index,
        size=size,
        phase=str(status.get("phase") or "Unknown"),
        ready=ready,
        reason=reason,
    )


def pods_from_json(doc: object, *, container: str | None = None) -> list[Pod]:
    """The pods of ``kubectl get pods -o json`` (a List, or one Pod)."""
    if not isinstance(doc, dict):
        raise InputError("kubectl get pods: not a JSON object")
    items = doc.get("items") if doc.get("kind") != "Pod" else [doc]
    if not isinstance(items, list):
        raise InputError("kubectl get pods: no items list")
    return [p for item in items if isinstance(item, dict) and (p := _pod(item, container))]


def select_server(pods: Sequence[Pod], group: str | None = None) -> Server:
    """The pods of one server (see the module's text)."""
    if not pods:
        raise InputError("--k8s: the selector matches no pod",
                         help_text="kubectl get pods -n NS -l SELECTOR --show-labels")
    keys = list(dict.fromkeys(p.server for p in pods))
    if group is not None:
        chosen = [k for k in keys if k == group or k.endswith(f"/{group}")]
        if len(chosen) != 1:
            raise InputError(f"--k8s-group {group}: matches {len(chosen)} of the servers "
                             f"({', '.join(keys)})", help_text="pass one of them")
        key = chosen[0]
    elif len(keys) > 1:
        raise InputError(
            f"--k8s: the selector matches {len(keys)} servers: {', '.join(keys)}",
            help_text="pick one with --k8s-group (e.g. --k8s-group " + keys[0] + "), or narrow -l",
        )
    else:
        key = keys[0]
    mine = sorted((p for p in pods if p.server == key),
                  key=lambda p: (p.index is None, p.index or 0, p.name))
    missing: list[str] = []
    sizes = {p.size for p in mine if p.size is not None}
    have = {p.index for p in mine if p.index is not None}
    if sizes:
        missing = [f"worker-index {i} (no pod)" for i in range(max(sizes)) if i not in have]
    elif have:
        missing = [f"ordinal {i} (no pod)" for i in range(max(have)) if i not in have]
    return Server(key, tuple(mine), tuple(missing), tuple(k for k in keys if k != key))


def get_pods(namespace: str, selector: str, *, kubectl: str = "kubectl",
             context: str | None = None, timeout_s: float = 30.0) -> object:
    argv = [kubectl, *(["--context", context] if context else []), "get", "pods",
            "-n", namespace, "-l", selector, "-o", "json"]
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise KubectlError("--k8s: kubectl is not installed here",
                           help_text="install kubectl and point it at the cluster") from None
    except subprocess.TimeoutExpired:
        raise KubectlError(f"--k8s: kubectl get pods gave no answer in {timeout_s:.0f} s",
                           help_text="kubectl cluster-info") from None
    if r.returncode != 0:
        why = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise KubectlError(f"--k8s: kubectl get pods failed: {why[-1] if why else r.returncode}",
                           help_text="kubectl auth can-i get pods -n " + namespace)
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise KubectlError("--k8s: kubectl get pods did not print JSON") from None


def exec_argv(pod: Pod, remote: str, *, kubectl: str = "kubectl",
              context: str | None = None) -> list[str]:
    """``kubectl exec -i`` of a shell command in the pod's server container."""
    return [kubectl, *(["--context", context] if context else []), "exec", "-i",
            "-n", pod.namespace, pod.name, "-c", pod.container, "--", "sh", "-c", remote]


def debug_argv(pod: Pod, pids: Sequence[int], image: str, *, kubectl: str = "kubectl",
               context: str | None = None, name: str = "diag-pyspy") -> list[str]:
    """``kubectl debug --profile=general --target=<container>``: an ephemeral container
    of ``image`` in the server container's process namespace dumps each pid with py-spy."""
    loop = "; ".join(
        f"echo {_SEP} {int(pid)}; py-spy dump --json --pid {int(pid)} || true" for pid in pids
    )
    return [kubectl, *(["--context", context] if context else []), "debug", "-n",
            pod.namespace, pod.name, f"--image={image}", "--profile=general",
            f"--target={pod.container}", f"--container={name}", "--quiet", "--attach=true",
            "--", "sh", "-c", loop]


def parse_debug_output(text: str) -> dict[int, object]:
    """pid -> py-spy's JSON, from the ephemeral container's output."""
    out: dict[int, object] = {}
    for chunk in text.split(_SEP)[1:]:
        head, _, body = chunk.strip().partition("\n")
        if not head.strip().isdigit():
            continue
        try:
            out[int(head.strip())] = json.loads(body)
        except ValueError:
            continue
    return out


def _with_pyspy(result: HostResult, pod: Pod, image: str, *, kubectl: str,
                context: str | None, timeout_s: float) -> tuple[HostResult, str | None]:
    """The pod's snapshot with py-spy stacks from an ephemeral debug container."""
    import secrets

    from diag.collect import stackapi

    snap = result.snapshot
    if snap is None:
        return result, None
    ranks = [p for p in snap.processes if p.role in ("scheduler", "worker", "engine_core")]
    if not ranks:
        return result, None
    argv = debug_argv(pod, [p.pid for p in ranks], image, kubectl=kubectl, context=context,
                      name=f"diag-pyspy-{secrets.token_hex(3)}")
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return result, f"{pod.name}: kubectl debug failed ({type(exc).__name__})"
    dumps = parse_debug_output(r.stdout.decode("utf-8", "replace"))
    if not dumps:
        why = r.stderr.decode("utf-8", "replace").strip().splitlines()
        return result, f"{pod.name}: no py-spy dump from kubectl debug ({why[-1] if why else ''})"
    procs = []
    for p in snap.processes:
        data = dumps.get(p.pid)
        if data is None:
            procs.append(p)
            continue
        try:
            sp = stackapi.classify(stackapi.parse(data, pid=p.pid, title=p.title, mode="python"))
        except ValueError:
            procs.append(p)
            continue
        procs.append(replace(p, stack=replace(sp, rank=p.rank)))
    return replace(result, snapshot=replace(snap, processes=tuple(procs))), None


def snapshot_k8s(
    namespace: str,
    selector: str,
    *,
    group: str | None = None,
    container: str | None = None,
    remote_args: Sequence[str] = ("snapshot", "--json"),
    timeout_s: float = 60.0,
    debug_image: str | None = None,
    kubectl: str = "kubectl",
    context: str | None = None,
    diag_cmd: str = "diag",
) -> tuple[JobView, Server]:
    """The pods of one server, each snapshot through kubectl exec, merged."""
    server = select_server(
        pods_from_json(get_pods(namespace, selector, kubectl=kubectl, context=context),
                       container=container),
        group,
    )
    running = [p for p in server.pods if p.running]
    by_name = {p.name: p for p in server.pods}
    transport = Transport(
        "kubectl",
        lambda host, remote: exec_argv(by_name[host], remote, kubectl=kubectl, context=context),
        install="install kubectl",
        missing_remedy="kubectl exec -n " + shlex.quote(namespace)
        + " {host} -- pip install diag (or put diag in the server image)",
        unreachable_remedy="kubectl get pod -n " + shlex.quote(namespace) + " {host} -o wide",
        unreachable_codes=(1,),
    )
    view = snapshot_hosts([p.name for p in running], remote_args=remote_args,
                          timeout_s=timeout_s, diag_cmd=diag_cmd, transport=transport)
    results = list(view.hosts)
    notes: list[str] = []
    if debug_image:
        results2 = []
        for res in results:
            if res.ok:
                res, why = _with_pyspy(res, by_name[res.host], debug_image, kubectl=kubectl,
                                       context=context, timeout_s=timeout_s)
                if why:
                    notes.append(why)
            results2.append(res)
        results = results2
        notes.append(DEBUG_NOTE)
    for p in server.pods:
        if not p.running:
            results.append(HostResult(
                p.name, False, error=f"pod not running ({p.reason or p.phase})",
                remedy=f"kubectl describe pod -n {namespace} {p.name}"))
    results += [HostResult(m, False, error="missing from the group", remedy="kubectl get lws,sts "
                           f"-n {namespace}") for m in server.missing]
    merged = merge(results, elapsed_s=view.elapsed_s)
    extra = [f"server {server.key}: pods {', '.join(p.name for p in server.pods)}"]
    if server.others:
        extra.append(f"the selector also matches {', '.join(server.others)} (not collected)")
    return replace(merged, notes=(*extra, *merged.notes, *notes)), server
