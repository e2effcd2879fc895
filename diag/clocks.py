"""Clocks of several nodes, offline: align node logs on events every rank passes at the
same moment.

A multi-node job's logs carry each host's own clock. Before their times are compared
(who went quiet first, who is behind), each node's offset from a reference node is read
from *anchors*: log lines that every rank writes at the same moment, wherever it runs.

- leaving the rendezvous: SGLang ``Init torch distributed ends.``
  (sglang/srt/model_executor/model_runner.py, after the process groups are built, a
  collective step every rank leaves together);
- an NCCL communicator's ``commId 0x... - Init COMPLETE`` (NCCL's init.cc; the commId
  pairs the ranks of one communicator across hosts), where the line has a time stamp;
- the end of CUDA-graph capture: SGLang ``Capture cuda graph end.``, vLLM ``Graph
  capturing finished in`` (the capture runs collectives, so the ranks finish together).

Per anchor and node the median time over the node's ranks is taken; the node's offset is
the median over anchors of its time minus the reference node's. The error bound adds the
time stamps' resolution (1 s for ``HH:MM:SS`` stamps), how far apart the ranks of a node
passed the anchor, how simultaneous the event is (:data:`TOLERANCE_S`) and how far the
anchors disagree. An offset within its bound is reported, not applied. Cross-host
straggler claims whose time gap is within the two nodes' bounds are refused
(:func:`refuse_cross_host`).

The node of a record is its rank's node (``node1 TP3``), else the host NCCL names, else
the folder of its file where the logs come from several folders (``node0/server.log``).
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from diag.model import Event, RankId, RankTimeline, Record

__all__ = [
    "ANCHORS",
    "TOLERANCE_S",
    "ClockAlignment",
    "NodeClock",
    "align_events",
    "node_key",
    "refuse_cross_host",
    "several_folders",
    "shift_times",
]

# (kind, pattern, group naming the anchor's id or None: the k-th occurrence per rank)
ANCHORS: tuple[tuple[str, re.Pattern[str], str | None], ...] = (
    ("rendezvous", re.compile(r"^Init torch distributed ends\b"), None),
    ("nccl_init", re.compile(r"\bcommId (?P<id>0x[0-9a-fA-F]+)\b.*\bInit COMPLETE\b"), "id"),
    ("graph_capture_end", re.compile(r"^Capture cuda graph end\b|^Graph capturing finished in "),
     None),
)
# how far apart ranks pass each kind of anchor on one clock (the event's own width)
TOLERANCE_S: Mapping[str, float] = {
    "rendezvous": 0.05,
    "nccl_init": 0.05,
    "graph_capture_end": 0.5,
}


@dataclass(frozen=True, slots=True)
class NodeClock:
    node: str
    offset_s: float  # this node's clock minus the reference node's
    error_s: float
    anchors: int  # anchors shared with the reference node
    kinds: tuple[str, ...]
    applied: bool  # the node's times were shifted by -offset_s


@dataclass(frozen=True, slots=True)
class ClockAlignment:
    reference: str
    nodes: tuple[NodeClock, ...]  # every other node that shares an anchor with the reference
    unaligned: tuple[str, ...]  # nodes with no anchor in common
    notes: tuple[str, ...]
    node_of: Mapping[RankId, str] = field(default_factory=dict)  # each rank's node
    folders: bool = False  # a file's folder named its node

    @property
    def shifted(self) -> bool:
        return any(c.applied for c in self.nodes)

    def bound(self, node: str | None) -> float | None:
        """The error bound of a node's time (0 for the reference; None: not aligned)."""
        if node == self.reference:
            return 0.0
        return next((c.error_s for c in self.nodes if c.node == node), None)


_Stamped = TypeVar("_Stamped", Record, Event)


def node_key(folders: bool) -> Callable[[Record | Event], str | None]:
    """The node a record (or event) belongs to (see the module's text); ``folders``: the
    inputs come from several folders, so a file's folder names its node."""

    def key(r: Record | Event) -> str | None:
        if r.rank is not None and r.rank.node is not None:
            node = r.rank.node
            return f"node{node}" if node.isdigit() else node
        host = getattr(r, "host", None)
        if host:
            return str(host)
        if folders and "/" in r.source:
            folder = r.source.rsplit("/", 2)[-2]
            # a log inside a bundle: BUNDLE.tar.gz:FOLDER/NAME
            return folder.rsplit(".tar.gz:", 1)[-1] or None
        return None

    return key


def _label(node: str) -> str:
    """A node as :func:`node_key` names it (``1`` -> ``node1``)."""
    return f"node{node}" if node.isdigit() else node


def several_folders(sources: Sequence[str]) -> bool:
    """Do the inputs come from more than one folder (``node0/server.log``, ``node1/...``)?"""
    return len({s.replace("\\", "/").rsplit("/", 1)[0] for s in sources if "/" in s}) > 1


def _resolution(ts: dt.datetime) -> float:
    return 1.0 if ts.microsecond == 0 else 0.001


def _anchors(
    events: Sequence[Event], key: Callable[[Record | Event], str | None]
) -> tuple[dict[tuple[str, str], dict[str, list[dt.datetime]]], dict[RankId, str]]:
    """(kind, id) -> node -> the times the node's ranks passed it; and each rank's node."""
    out: dict[tuple[str, str], dict[str, list[dt.datetime]]] = {}
    seen: dict[tuple[str, str, str], int] = {}
    node_of: dict[RankId, str] = {}
    for e in events:
        node = key(e)
        if node is None:
            continue
        if e.rank is not None:
            node_of.setdefault(e.rank, node)
        if e.ts is None:
            continue
        for kind, pattern, group in ANCHORS:
            m = pattern.search(e.message)
            if m is None:
                continue
            who = e.rank.label if e.rank is not None else e.source
            if group is None:
                n = seen.get((kind, node, who), 0)
                seen[(kind, node, who)] = n + 1
                ident = f"#{n}"
            else:
                ident = m.group(group)
            out.setdefault((kind, ident), {}).setdefault(node, []).append(e.ts)
            break
    return out, node_of


def _secs(ts: dt.datetime) -> float:
    return ts.timestamp()


def align_events(
    events: Sequence[Event],
    *,
    folders: bool,
    known: Mapping[str, tuple[float, float]] | None = None,
) -> ClockAlignment | None:
    """Each node's clock against the reference node's, from the anchors among the
    catalogue's events; None when the events name fewer than two nodes. ``known``: node
    -> (offset, error) measured when the logs were collected (the fan-out's Cristian
    reading against the collecting machine); where it covers every node it is used
    instead, the collector's clock being the reference."""
    key = node_key(folders)
    anchors_all, node_of = _anchors(events, key)
    nodes = sorted({n for e in events if e.ts is not None and (n := key(e)) is not None})
    if len(nodes) < 2:
        return None
    measured = {_label(n): v for n, v in (known or {}).items()}
    if measured and all(n in measured for n in nodes):
        given = [NodeClock(n, round(measured[n][0], 3), round(measured[n][1], 3), 0,
                           ("measured",), abs(measured[n][0]) > measured[n][1])
                 for n in nodes]
        told = [
            f"clock of {c.node}: {c.offset_s:+.3f} s ± {c.error_s:.3f} s against the "
            "collecting machine (measured by the fan-out); "
            + (f"its times are shifted by {-c.offset_s:+.3f} s" if c.applied else "not shifted")
            for c in given
        ]
        return ClockAlignment("the collecting machine", tuple(given), (), tuple(told),
                              node_of=node_of, folders=folders)
    anchors = {k: v for k, v in anchors_all.items() if len(v) >= 2}
    if not anchors:
        return ClockAlignment(
            reference=nodes[0], nodes=(), unaligned=tuple(nodes[1:]),
            notes=(f"clocks of {len(nodes)} nodes ({', '.join(nodes)}) not aligned: no event "
                   "every rank passes at once (rendezvous, NCCL Init COMPLETE, end of graph "
                   "capture) has a time stamp on two nodes; times across nodes are each "
                   "node's own",),
            node_of=node_of, folders=folders,
        )
    count = {n: sum(1 for v in anchors.values() if n in v) for n in nodes}
    ref = max(nodes, key=lambda n: (count[n], -nodes.index(n)))
    clocks: list[NodeClock] = []
    unaligned: list[str] = []
    for node in nodes:
        if node == ref:
            continue
        diffs: list[float] = []
        widths: list[float] = []
        kinds: list[str] = []
        for (kind, _ident), by_node in anchors.items():
            if node not in by_node or ref not in by_node:
                continue
            mine = [_secs(t) for t in by_node[node]]
            theirs = [_secs(t) for t in by_node[ref]]
            spread = (max(mine) - min(mine) + max(theirs) - min(theirs)) / 2
            res = max(_resolution(t) for t in (*by_node[node], *by_node[ref]))
            diffs.append(statistics.median(mine) - statistics.median(theirs))
            widths.append(res + spread + TOLERANCE_S.get(kind, 0.5))
            kinds.append(kind)
        if not diffs:
            unaligned.append(node)
            continue
        offset = statistics.median(diffs)
        error = max(widths) + max(abs(d - offset) for d in diffs)
        clocks.append(NodeClock(node, round(offset, 3), round(error, 3), len(diffs),
                                tuple(dict.fromkeys(kinds)), abs(offset) > error))
    notes = []
    for c in clocks:
        what = ", ".join(c.kinds)
        if c.applied:
            notes.append(
                f"clock of {c.node}: {c.offset_s:+.3f} s ± {c.error_s:.3f} s against {ref} "
                f"(from {c.anchors} shared events: {what}); its times are shifted by "
                f"{-c.offset_s:+.3f} s"
            )
        else:
            notes.append(
                f"clock of {c.node}: within ± {c.error_s:.3f} s of {ref} (measured "
                f"{c.offset_s:+.3f} s from {c.anchors} shared events: {what}); not shifted"
            )
    if unaligned:
        notes.append(
            f"clock of {', '.join(unaligned)}: no event shared with {ref}; its times are its own"
        )
    return ClockAlignment(ref, tuple(clocks), tuple(unaligned), tuple(notes),
                          node_of=node_of, folders=folders)


def shift_times(items: Sequence[_Stamped], alignment: ClockAlignment) -> list[_Stamped]:
    """The records (or events) of each shifted node put on the reference node's clock."""
    shift = {c.node: dt.timedelta(seconds=c.offset_s) for c in alignment.nodes if c.applied}
    if not shift:
        return list(items)
    key = node_key(alignment.folders)
    return [
        replace(r, ts=r.ts - shift[n]) if r.ts is not None and (n := key(r) or "") in shift
        else r
        for r in items
    ]


def refuse_cross_host(
    stragglers: Sequence[RankId],
    ranks: Sequence[RankTimeline],
    alignment: ClockAlignment | None,
) -> tuple[tuple[RankId, ...], list[str]]:
    """Stragglers whose claim rests on a time gap to a rank of another node that is within
    the two nodes' error bounds are dropped (with a note saying so)."""
    if alignment is None or not stragglers:
        return tuple(stragglers), []
    node_of = alignment.node_of
    silent = {t.rank: t.silent_s for t in ranks if t.silent_s is not None}
    if not silent:
        return tuple(stragglers), []
    kept: list[RankId] = []
    notes: list[str] = []
    for s in stragglers:
        mine = silent.get(s)
        node = node_of.get(s)
        if mine is None or node is None:
            kept.append(s)
            continue
        others = [(v, r) for r, v in silent.items() if r not in stragglers]
        if not others:
            kept.append(s)
            continue
        floor, who = min(others, key=lambda x: x[0])
        other_node = node_of.get(who)
        if other_node is None or other_node == node:
            kept.append(s)
            continue
        a, b = alignment.bound(node), alignment.bound(other_node)
        gap = mine - floor
        if a is None or b is None:
            kept.append(s)
            continue
        if gap <= a + b:
            notes.append(
                f"{s.label}: not called a straggler: its {gap:.1f} s gap to {who.label} on "
                f"{other_node} is within the clocks' error bound (± {a + b:.3f} s)"
            )
            continue
        kept.append(s)
    return tuple(kept), notes
