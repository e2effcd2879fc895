"""Merge the stacks of many ranks into equivalence classes, as LLNL's STAT does.

Each process contributes one path: the frames of the thread that matters (the one its
wait site was read from, else its main thread), outermost first, normalised so that
ranks in the same place compare equal:

- native frames py-spy could not symbolise (``0x7f...``) are dropped (ASLR differs per
  process), and so are the innermost timer/yield calls of a busy-wait (``clock_gettime``,
  ``sched_yield``: a spinning rank is sampled at varying depths of its poll loop);
  named native frames are kept only when every process has some (so a ``--native``
  dump and a Python-only dump of the same place still match);
- a frame compares by function name and file *basename* (site-packages prefixes and
  Windows separators differ between dump kinds); line numbers only with ``lines=True``
  (a sender and a receiver in ``broadcast_pyobj`` sit at different lines of one call).

:func:`build_tree` gives STAT's prefix tree (each node lists the ranks whose path goes
through it); :func:`group_stacks` gives its leaves: ranks grouped by identical paths,
largest group first. :func:`outliers` names the ranks outside the majority group.
Processes without a stack (a dump that failed) take no part.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from diag.model import StackFrame, StackGroup, StackProcess, StackThread
from diag.stacks.classify import is_main_thread, pick_thread
from diag.stacks.frames import is_address, short_path

__all__ = [
    "RENDEZVOUS_SITES",
    "StackTree",
    "build_tree",
    "group_stacks",
    "member_label",
    "merge_samples",
    "outlier_tp_ranks",
    "outliers",
    "reference_group",
    "stack_path",
]

# Sites where a rank waits for all its peers: a group parked there is the side that
# waits, so in a tie it is the reference and the other side is the odd one out.
RENDEZVOUS_SITES: frozenset[str] = frozenset({"stack.nccl_collective", "stack.dist_init"})


@dataclass(frozen=True, slots=True)
class StackTree:
    """A node of the prefix tree: ``frame`` (None at the root) and the ranks through it."""

    frame: StackFrame | None
    members: tuple[str, ...]
    children: tuple[StackTree, ...] = ()


def member_label(p: StackProcess) -> str:
    """How a process is named in a group: its rank, else ``pid N``, else its title, else
    where its dump starts (``dump.txt:12``)."""
    if p.rank is not None and p.rank.label != "?":
        return p.rank.label
    if p.pid is not None:
        return f"pid {p.pid}"
    source = (p.source or "?").replace("\\", "/").rsplit("/", 1)[-1]
    return p.title or f"{source}:{p.line or 0}"


def _thread_of(p: StackProcess) -> StackThread | None:
    if p.wait_thread is not None:
        for t in p.threads:
            if t.thread_id == p.wait_thread:
                return t
    thread, _ = pick_thread(p)
    if thread is not None:
        return thread
    for t in p.threads:
        if is_main_thread(t, p.pid):
            return t
    return p.threads[0] if p.threads else None


# Innermost native calls of a busy-wait loop (libc / vDSO), trimmed from stack paths.
SPIN_LEAVES = frozenset(
    {
        "clock_gettime",
        "clock_gettime_v2",
        "GI_clock_gettime",
        "vdso_clock_gettime",
        "gettimeofday",
        "vdso_gettimeofday",
        "sched_yield",
        "GI_sched_yield",
        "nanosleep",
        "GI___nanosleep",
        "clock_nanosleep",
        "usleep",
        "rdtsc",
    }
)


def _has_named_native(frames: Iterable[StackFrame]) -> bool:
    return any(f.native and not is_address(f.name) for f in frames)


def stack_path(
    p: StackProcess, *, lines: bool = False, native: bool = True
) -> tuple[StackFrame, ...]:
    """The normalised frames of the process's thread that matters, innermost first."""
    thread = _thread_of(p)
    if thread is None:
        return ()
    frames = [f for f in thread.frames if not (f.native and (is_address(f.name) or not native))]
    # A rank spinning in a wait (cuCtxSynchronize, a spin-lock) is sampled at varying
    # depths of its poll: the innermost timer/yield calls say nothing about where it is.
    while len(frames) > 1 and frames[0].native and frames[0].name.lstrip("_") in SPIN_LEAVES:
        frames = frames[1:]
    return tuple(
        StackFrame(
            name=f.name,
            filename=short_path(f.filename),
            line=f.line if lines else None,
            native=f.native,
        )
        for f in frames
    )


def _key(frames: Sequence[StackFrame]) -> tuple[tuple[str, str, int | None], ...]:
    return tuple((f.name, f.filename.rsplit("/", 1)[-1], f.line) for f in frames)


def _sort_key(p: StackProcess) -> tuple[int, tuple[str, int, int, int, int], int]:
    if p.rank is not None:
        return (0, p.rank.sort_key, p.pid or 0)
    return (1, ("", 0, 0, 0, 0), p.pid or 0)


def _paths(
    processes: Sequence[StackProcess], lines: bool
) -> list[tuple[StackProcess, tuple[StackFrame, ...]]]:
    procs = sorted((p for p in processes if p.threads), key=_sort_key)
    with_native = all(
        _has_named_native(t.frames) for p in procs if (t := _thread_of(p)) is not None
    )
    return [(p, stack_path(p, lines=lines, native=with_native)) for p in procs]


def group_stacks(
    processes: Sequence[StackProcess], *, lines: bool = False
) -> tuple[StackGroup, ...]:
    """Equivalence classes of identical (normalised) paths, largest first; ties go to the
    group holding the lowest rank. ``frames`` is the common path, innermost first, with
    a frame's line number where every member is at that line (else None)."""
    classes: dict[object, list[tuple[StackProcess, tuple[StackFrame, ...]]]] = {}
    # keyed with or without lines; kept with lines, so a group can show the line numbers
    # all its members share
    for p, path in _paths(processes, True):
        key = _key(path) if lines else _key(tuple(replace(f, line=None) for f in path))
        classes.setdefault(key, []).append((p, path))
    groups = []
    for members in classes.values():
        sites = Counter(p.wait_site for p, _ in members)
        site = max(sites, key=lambda s: (sites[s], s is not None))
        common = tuple(
            f if all(path[i].line == f.line for _, path in members) else replace(f, line=None)
            for i, f in enumerate(members[0][1])
        )
        groups.append(
            StackGroup(
                wait_site=site,
                members=tuple(member_label(p) for p, _ in members),
                frames=common,
                pids=tuple(p.pid for p, _ in members if p.pid is not None),
            )
        )
    # classes keep first-seen order, and processes were sorted by rank: a stable sort on
    # size alone leaves ties in lowest-rank-first order.
    groups.sort(key=lambda g: -len(g.members))
    return tuple(groups)


def build_tree(processes: Sequence[StackProcess], *, lines: bool = False) -> StackTree:
    """STAT's prefix tree: from the outermost frame inwards, one child per distinct frame."""

    def grow(
        frame: StackFrame | None, items: list[tuple[str, tuple[StackFrame, ...]]], depth: int
    ) -> StackTree:
        children: dict[object, list[tuple[str, tuple[StackFrame, ...]]]] = {}
        heads: dict[object, StackFrame] = {}
        for label, outer_first in items:
            if depth < len(outer_first):
                f = outer_first[depth]
                k = _key((f,))
                heads.setdefault(k, f)
                children.setdefault(k, []).append((label, outer_first))
        return StackTree(
            frame=frame,
            members=tuple(label for label, _ in items),
            children=tuple(grow(heads[k], v, depth + 1) for k, v in children.items()),
        )

    items = [(member_label(p), tuple(reversed(path))) for p, path in _paths(processes, lines)]
    return grow(None, items, 0)


def merge_samples(samples: Sequence[StackProcess]) -> StackProcess:
    """Several dumps of one process (taken a second apart live, or found one after the
    other in a file) as one: the latest dump with Python and native frames (py-spy
    --native), else the latest with native frames (gdb), else the latest; with
    ``samples`` counted and ``moving`` set when the innermost Python frame of the thread
    that matters changed between them (slow, not stuck). None with a single sample."""
    if not samples:
        raise ValueError("merge_samples needs at least one dump")
    if len(samples) == 1:
        return samples[0]

    def has_native(p: StackProcess) -> bool:
        return any(f.native for t in p.threads for f in t.frames)

    def has_python(p: StackProcess) -> bool:
        return any(not f.native for t in p.threads for f in t.frames)

    usable = [p for p in samples if p.threads] or list(samples)  # failed dumps last
    # a py-spy --native dump (Python and native frames) over a native-only one (gdb bt)
    best = (
        [p for p in usable if has_native(p) and has_python(p)]
        or [p for p in usable if has_native(p)]
        or usable
    )[-1]
    leaves = set()
    for p in usable:
        thread = _thread_of(p)
        python = [f for f in thread.frames if not f.native] if thread is not None else []
        if python:
            leaves.add((python[0].name, python[0].filename.rsplit("/", 1)[-1], python[0].line))
    return replace(
        best,
        samples=len(samples),
        moving=len(leaves) > 1,
        rank=best.rank or next((p.rank for p in samples if p.rank), None),
        line=samples[0].line,
    )


def reference_group(
    groups: Sequence[StackGroup],
    running: frozenset[str] = frozenset(),
    progressing: frozenset[str] = frozenset(),
) -> int | None:
    """Index of the group the others are compared with, or None when no group can be.

    The largest group; a tie for largest goes to the one tied group parked at a
    rendezvous (a collective or a store wait: the side that waits), so with 2 ranks and 2
    stacks the rank *not* in the collective is the odd one out. A tie that this does not
    settle (both or neither at a rendezvous) names no reference: no outliers are claimed.
    ``running``: members py-spy saw running Python (or, serving, in their idle loop);
    ``progressing``: members whose stack moved between two looks of a serving server:
    a tied group of those, wherever it was caught outside a rendezvous, is a rank at work,
    not one that never came."""
    if not groups:
        return None
    top = max(len(g.members) for g in groups)
    tied = [i for i, g in enumerate(groups) if len(g.members) == top]
    if len(tied) == 1:
        return tied[0]
    waiting = [i for i in tied if groups[i].wait_site in RENDEZVOUS_SITES]
    for i in tied:
        g = groups[i]
        if i not in waiting and (
            (g.wait_site in (None, "stack.idle_loop") and set(g.members) <= running)
            or set(g.members) <= progressing
        ):
            # py-spy saw that side running Python, not waiting: one look cannot tell a
            # rank that never came from one mid-way through its loop (a healthy idle
            # SGLang scheduler TP0 between two broadcasts to TP1)
            return None
    return waiting[0] if len(waiting) == 1 else None


def outliers(
    groups: Sequence[StackGroup],
    running: frozenset[str] = frozenset(),
    progressing: frozenset[str] = frozenset(),
) -> list[str]:
    """Members of every group but the reference group (see :func:`reference_group`).

    Where no group is the reference (a tie of identical paths), the wait sites decide:
    if the one site held by the most members is a rendezvous, the members elsewhere are
    the odd ones (ranks parked in different collectives, and one rank in none of them)."""
    if len(groups) < 2:
        return []
    ref = reference_group(groups, running, progressing)
    if ref is not None:
        return [m for i, g in enumerate(groups) if i != ref for m in g.members]
    by_site = Counter[str | None]()
    for g in groups:
        by_site[g.wait_site] += len(g.members)
    ranked = by_site.most_common()
    site, count = ranked[0]
    if site not in RENDEZVOUS_SITES or (len(ranked) > 1 and ranked[1][1] == count):
        return []
    return [m for g in groups if g.wait_site != site for m in g.members]


def outlier_tp_ranks(
    processes: Sequence[StackProcess],
    groups: Sequence[StackGroup],
    serving: bool = False,
) -> tuple[int, ...]:
    """TP ranks of the outliers among the processes that have a TP rank; launchers,
    detokenizers and other rank-less processes in ``groups`` are left out first.
    ``serving``: the server's port is open, so a rank in its idle serving loop is where a
    healthy rank waits for work, and a 1-1 tie against it names nobody; so does one
    against a rank whose stack moved between two looks (``moving``), wherever the looks
    caught it (a healthy overlap scheduler TP0 is seen in its batch steps as often as in
    its idle poll, while TP1 waits in the broadcast TP0 feeds)."""
    tp_of = {
        member_label(p): p.rank.tp
        for p in processes
        if p.rank is not None and p.rank.tp is not None
    }
    ranked = [
        StackGroup(g.wait_site, tuple(m for m in g.members if m in tp_of), g.frames, g.pids)
        for g in groups
    ]
    ranked = [g for g in ranked if g.members]
    running = frozenset(
        member_label(p)
        for p in processes
        if ((t := _thread_of(p)) is not None and t.idle is False)
        or (serving and p.wait_site == "stack.idle_loop")
    )
    progressing = frozenset(
        member_label(p) for p in processes if serving and p.moving
    )
    return tuple(sorted({tp_of[m] for m in outliers(ranked, running, progressing)}))
