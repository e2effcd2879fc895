"""Logs of several nodes: which node each log (and rank) belongs to, and which expected
nodes have no log here.

A node is named, per source, by the first of: the ``node_rank`` on its own args line
(SGLang ``server_args=ServerArgs(... nnodes=2, node_rank=1 ...)``, vLLM ``non-default
args: {'nnodes': 2, 'node_rank': 1}``), the node its ranks carry (SGLang ``NP1 TP9``
tags, ``node1/rank0.log``), the host NCCL or Ray name on its lines (``host:pid:tid [0]
NCCL INFO``, ``(RayWorkerWrapper pid=1, ip=10.0.0.2)``), or the folder of its file where
the logs come from several folders (``node0/server.log``, ``node1/server.log``).

With ``--nnodes N`` (``nnodes`` in the config) the node ranks 0..N-1 are expected; those
with no log are named, with the ranks they hold when the layout says (SGLang numbers TP
ranks globally: node k of N holds TP ``k*tp/N`` .. ``(k+1)*tp/N - 1``). The ranks are
listed per node with their local rank (their place on the node) beside the global one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from diag.clocks import node_key, several_folders
from diag.model import Event, RankId
from diag.parse.records import Draft

__all__ = ["NodeView", "folder_node", "node_view", "with_folder_nodes"]

_NODE_RANK = re.compile(r"""['"]?node_rank['"]?\s*[=:]\s*(\d{1,5})\b""")
_NNODES = re.compile(r"""['"]?nnodes['"]?\s*[=:]\s*(\d{1,5})\b""")
_ARGS = ("server_args=", "non-default args:", "args: Namespace(", "vLLM API server version")


@dataclass(frozen=True, slots=True)
class NodeView:
    nodes: Mapping[str, tuple[RankId, ...]]  # node -> its ranks, in order
    sources: Mapping[str, str]  # source -> node
    expected: int | None  # --nnodes
    missing: tuple[str, ...]  # expected nodes with no log ("node1 (TP2-TP3)")
    notes: tuple[str, ...]


def _fold(tps: Sequence[int]) -> str:
    if not tps:
        return ""
    return f"TP{tps[0]}" if len(tps) == 1 else f"TP{tps[0]}-TP{tps[-1]}"


def node_view(events: Sequence[Event], config: Mapping[str, object]) -> NodeView | None:
    """The nodes of the logs (see the module's text); None for a log of one node whose
    config names no other."""
    folders = several_folders([e.source for e in events])
    key = node_key(folders)
    source_node: dict[str, str] = {}
    nnodes: int | None = None
    for e in events:
        if e.source not in source_node and any(a in e.message for a in _ARGS):
            m = _NODE_RANK.search(e.message)
            if m is not None:
                source_node[e.source] = f"node{int(m.group(1))}"
            n = _NNODES.search(e.message)
            if n is not None:
                nnodes = max(nnodes or 0, int(n.group(1)))
    cfg = config.get("nnodes")
    if isinstance(cfg, int) and not isinstance(cfg, bool) and cfg > 0:
        nnodes = max(nnodes or 0, cfg)
    ranks: dict[str, list[RankId]] = {}
    seen_in: dict[str, set[str]] = {}  # node -> its sources
    for e in events:
        # a rank's own node (tags, Ray's ip=, a folder) first, then its source's args line
        k = key(e)
        node = (f"node{k}" if k.isdigit() else k) if k is not None else source_node.get(e.source)
        if node is None:
            continue
        seen_in.setdefault(node, set()).add(e.source)
        if e.rank is None:
            continue
        have = ranks.setdefault(node, [])
        if e.rank not in have:
            have.append(e.rank)
    for src, node in source_node.items():
        seen_in.setdefault(node, set()).add(src)
    nodes = sorted(seen_in, key=_node_order)
    if len(nodes) < 2 and not (nnodes and nnodes > 1):
        return None
    notes: list[str] = []
    missing: list[str] = []
    if nnodes and nnodes > 1:
        numbered = {int(n[4:]) for n in nodes if n.startswith("node") and n[4:].isdigit()}
        tp = config.get("tp")
        per = tp // nnodes if isinstance(tp, int) and tp > 0 and tp % nnodes == 0 else None
        if len(numbered) == len(nodes):  # every log's node rank is known
            for i in range(nnodes):
                if i in numbered:
                    continue
                held = f" ({_fold(list(range(i * per, (i + 1) * per)))})" if per else ""
                missing.append(f"node{i}{held}")
        if missing:
            notes.append(
                f"{len(missing)} of {nnodes} nodes (--nnodes {nnodes}) have no log here: "
                f"{', '.join(missing)}; their ranks are not in this view (pass every node's "
                "log, or the job bundle of `diag snapshot --hosts ... --out`)"
            )
    parts = []
    for node in nodes:
        rs = sorted(ranks.get(node, []), key=lambda r: r.sort_key)
        srcs = sorted(seen_in.get(node, ()))
        listed = ", ".join(
            f"{r.label} (local {i})" if len(rs) > 1 else r.label for i, r in enumerate(rs)
        )
        parts.append(f"{node} [{', '.join(srcs)}]: {listed or 'no rank lines'}")
    if parts:
        notes.append(f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}: " + "; ".join(parts))
    return NodeView(
        nodes={n: tuple(sorted(ranks.get(n, []), key=lambda r: r.sort_key)) for n in nodes},
        sources={src: n for n, srcs in seen_in.items() for src in sorted(srcs)},
        expected=nnodes,
        missing=tuple(missing),
        notes=tuple(notes),
    )


def _node_order(name: str) -> tuple[int, int, str]:
    if name.startswith("node") and name[4:].isdigit():
        return (0, int(name[4:]), name)
    return (1, 0, name)


def folder_node(source: str) -> str | None:
    """The node a file's folder names: ``node1/server.log`` -> ``1``, a job bundle's
    ``hang.tar.gz:10.0.0.2/rank0.log`` -> ``10.0.0.2``; None for a file with no folder."""
    if "/" not in source:
        return None
    folder = source.replace("\\", "/").rsplit("/", 2)[-2].rsplit(".tar.gz:", 1)[-1]
    if not folder or folder in (".", ".."):
        return None
    if folder.lower().startswith("node") and folder[4:].isdigit():
        return str(int(folder[4:]))
    return folder


def with_folder_nodes(drafts: Sequence[Draft], sources: Sequence[str]) -> int:
    """Where the logs come from several folders (one per node), each rank with no node of
    its own gets its file's folder as node, so TP0 of node0 and TP0 of node1 stay two
    ranks (``node0 TP0``, ``node1 TP0``) and a job bundle's log ranks carry the host its
    live ranks carry. Sets the drafts' ranks in place (before they are frozen); returns
    how many it changed."""
    if not several_folders(list(sources)):
        return 0
    nodes: dict[str, str | None] = {}
    made: dict[tuple[RankId, str], RankId] = {}
    changed = 0
    for d in drafts:
        rank = d.rank
        if rank is None or rank.node is not None:
            continue
        if d.source not in nodes:
            nodes[d.source] = folder_node(d.source)
        node = nodes[d.source]
        if node is None:
            continue
        new = made.get((rank, node))
        if new is None:
            new = made[(rank, node)] = replace(rank, node=node)
        d.rank = new
        changed += 1
    return changed
