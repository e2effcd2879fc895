"""STAT-style merging: equivalence classes, the prefix tree, outliers and their ties."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diag.model import RankId, StackProcess, StackThread
from diag.stacks.classify import classified
from diag.stacks.frames import make_frame, split_pyspy_frame
from diag.stacks.merge import (
    build_tree,
    group_stacks,
    merge_samples,
    outlier_tp_ranks,
    outliers,
    reference_group,
    stack_path,
)

ALL_REDUCE = (
    "all_reduce (torch/distributed/distributed_c10d.py:3252)",
    "work (hang.py:8)",
    "main (hang.py:19)",
    "<module> (hang.py:23)",
)
SLEEP = ("main (hang.py:18)", "<module> (hang.py:23)")
STORE = (
    "c10d::TCPStore::doWait (libtorch_cpu.so)",
    "worker (probe.py:56)",
    "<module> (<string>:1)",
)
COMPILE = (
    "compile (triton/compiler/compiler.py:300)",
    "worker (probe.py:53)",
    "<module> (<string>:1)",
)


def proc(tp: int | None, lines: tuple[str, ...], *, pid: int | None = None) -> StackProcess:
    frames = []
    for line in lines:
        parts = split_pyspy_frame(line)
        assert parts is not None
        frames.append(make_frame(*parts))
    thread = StackThread(thread_id=pid, name="MainThread", frames=tuple(frames))
    rank = None if tp is None else RankId(tp=tp)
    return classified(StackProcess(pid=pid, title=None, threads=(thread,), rank=rank))


def test_majority_and_the_odd_rank_out() -> None:
    ranks = [proc(r, ALL_REDUCE, pid=100 + r) for r in range(7)] + [proc(7, SLEEP, pid=107)]
    groups = group_stacks(ranks)
    assert [len(g.members) for g in groups] == [7, 1]
    assert groups[0].wait_site == "stack.nccl_collective"
    assert groups[0].frames[0].name == "all_reduce" and groups[0].pids[0] == 100
    assert outliers(groups) == ["TP7"]
    assert outlier_tp_ranks(ranks, groups) == (7,)


def test_two_ranks_two_stacks_the_one_not_in_the_collective_is_odd() -> None:
    for order in ((0, 1), (1, 0)):
        ranks = [proc(order[0], ALL_REDUCE), proc(order[1], SLEEP)]
        assert outlier_tp_ranks(ranks, group_stacks(ranks)) == (order[1],)


def test_a_store_wait_is_a_rendezvous_too() -> None:
    ranks = [proc(0, STORE), proc(1, COMPILE)]
    groups = group_stacks(ranks)
    assert {g.wait_site for g in groups} == {"stack.dist_init", "stack.jit_compile"}
    assert outliers(groups) == ["TP1"]


def test_ties_that_cannot_be_settled_name_nobody() -> None:
    # both sides in a collective (mismatched collectives): no side is "the majority"
    bcast = tuple(s.replace("all_reduce", "broadcast") for s in ALL_REDUCE)
    ranks = [proc(0, ALL_REDUCE), proc(1, bcast)]
    groups = group_stacks(ranks)
    assert len(groups) == 2 and reference_group(groups) is None and outliers(groups) == []
    # neither side waits for peers
    ranks = [proc(0, SLEEP), proc(1, COMPILE), proc(2, SLEEP), proc(3, COMPILE)]
    assert outliers(group_stacks(ranks)) == []
    assert outliers(()) == [] and outliers(group_stacks([proc(0, SLEEP)])) == []


def test_ranks_in_different_collectives_and_one_in_none() -> None:
    bcast = tuple(s.replace("all_reduce", "broadcast") for s in ALL_REDUCE)
    barrier = tuple(s.replace("all_reduce", "barrier") for s in ALL_REDUCE)
    ranks = [proc(0, ALL_REDUCE), proc(1, bcast), proc(2, barrier), proc(3, SLEEP)]
    groups = group_stacks(ranks)
    assert len(groups) == 4 and reference_group(groups) is None
    assert outliers(groups) == ["TP3"]
    # the site held by the most members is no rendezvous: nobody is named
    compile2 = tuple(s.replace("worker (probe.py:53)", "warmup (probe.py:40)") for s in COMPILE)
    ranks = [proc(0, ALL_REDUCE), proc(1, STORE), proc(2, COMPILE), proc(3, compile2)]
    groups = group_stacks(ranks)
    assert len(groups) == 4 and reference_group(groups) is None
    assert outliers(groups) == []


def test_line_numbers_are_optional() -> None:
    other_line = tuple(s.replace("3252", "3260") for s in ALL_REDUCE)
    ranks = [proc(0, ALL_REDUCE), proc(1, other_line)]
    (group,) = group_stacks(ranks)
    # the common path keeps the lines all members share, and only those
    assert [(f.name, f.line) for f in group.frames[:2]] == [("all_reduce", None), ("work", 8)]
    assert len(group_stacks(ranks, lines=True)) == 2


def test_merge_samples_stuck_or_moving() -> None:
    a, b = proc(0, ALL_REDUCE, pid=5), proc(0, ALL_REDUCE, pid=5)
    merged = merge_samples([a, b])
    assert (merged.samples, merged.moving) == (2, False)
    moved = proc(0, tuple(s.replace("3252", "3199") for s in ALL_REDUCE), pid=5)
    assert merge_samples([a, moved]).moving is True
    native = proc(0, ("c10d::Work::wait (libtorch_cpu.so)", *ALL_REDUCE), pid=5)
    assert merge_samples([native, a]).threads == native.threads  # native beats later
    assert merge_samples([a]) is a


def test_addresses_dropped_and_a_python_only_dump_matches_a_native_one() -> None:
    native = ("0x7fbb512a3f16 (libc.so.6)", "c10d::Work::wait (libtorch_cpu.so)", *ALL_REDUCE)
    with_address = ("0x7f0000000001 (libc.so.6)", *ALL_REDUCE, "0x7f00000000ff (libc.so.6)")
    ranks = [proc(0, native), proc(1, ALL_REDUCE), proc(2, with_address)]
    (group,) = group_stacks(ranks)
    assert group.members == ("TP0", "TP1", "TP2")
    assert [f.name for f in group.frames] == ["all_reduce", "work", "main", "<module>"]
    # all native: the native frames take part (and addresses still do not)
    both = [proc(0, native), proc(1, native)]
    (group,) = group_stacks(both)
    assert group.frames[0].name == "c10d::Work::wait"
    assert all(not f.name.startswith("0x") for f in stack_path(both[0]))


def test_full_paths_and_short_paths_compare_equal() -> None:
    full = tuple(s.replace("(torch/", "(/usr/lib/python3/dist-packages/torch/") for s in ALL_REDUCE)
    assert len(group_stacks([proc(0, ALL_REDUCE), proc(1, full)])) == 1


def test_prefix_tree() -> None:
    ranks = [proc(0, ALL_REDUCE), proc(1, ALL_REDUCE), proc(2, SLEEP)]
    tree = build_tree(ranks)
    assert tree.frame is None and tree.members == ("TP0", "TP1", "TP2")
    (module,) = tree.children  # every path starts at <module> (hang.py)
    assert module.frame is not None and module.frame.name == "<module>"
    (main,) = module.children
    assert main.members == ("TP0", "TP1", "TP2")
    work = next(c for c in main.children if c.frame is not None and c.frame.name == "work")
    assert work.members == ("TP0", "TP1")
    leaf = work.children[0]
    assert leaf.frame is not None and leaf.frame.name == "all_reduce" and leaf.children == ()


def test_processes_without_rank_are_labelled_by_pid_and_left_out_of_tp_outliers() -> None:
    launcher = proc(None, SLEEP, pid=9041)
    ranks = [proc(0, ALL_REDUCE, pid=1), proc(1, ALL_REDUCE, pid=2), launcher]
    groups = group_stacks(ranks)
    assert groups[1].members == ("pid 9041",)
    assert outliers(groups) == ["pid 9041"]
    assert outlier_tp_ranks(ranks, groups) == ()


def test_dumps_without_pid_or_rank_are_labelled_by_where_they_start() -> None:
    anon = replace(proc(None, SLEEP), source="/var/log/x/dump.txt", line=12)
    assert group_stacks([anon])[0].members == ("dump.txt:12",)


def test_a_tie_with_a_rank_seen_running_python_names_nobody() -> None:
    """A healthy idle SGLang scheduler TP0 caught between two broadcasts (py-spy: active,
    no wait site) against TP1 waiting in the broadcast: nobody is odd; the same tie with
    a rank whose state py-spy did not give (a sleeper) still names it."""
    from dataclasses import replace

    ranks = [proc(0, ALL_REDUCE), proc(1, SLEEP)]
    running = [ranks[0], replace(ranks[1], threads=tuple(
        replace(t, idle=False) for t in ranks[1].threads))]
    assert outlier_tp_ranks(running, group_stacks(running)) == ()
    assert outlier_tp_ranks(ranks, group_stacks(ranks)) == (1,)


def test_a_serving_server_idle_rank_against_a_broadcast_waiter_names_nobody() -> None:
    """Port open: TP0 in its idle serving loop, TP1 waiting in the broadcast TP0 feeds
    (SGLang's idle TP=2 schedulers) is no hang; with the port closed the idle one is odd."""
    idle = ("poll (zmq/sugar/socket.py:800)", "recv_requests (scheduler.py:1000)",
            "event_loop_normal (scheduler.py:900)")
    ranks = [proc(0, idle), proc(1, ALL_REDUCE)]
    groups = group_stacks(ranks)
    if {g.wait_site for g in groups} != {"stack.idle_loop", "stack.nccl_collective"}:
        pytest.skip("the fixture frames do not classify as expected")
    assert outlier_tp_ranks(ranks, groups, serving=True) == ()
    assert outlier_tp_ranks(ranks, groups) == (0,)


def test_a_serving_rank_seen_moving_against_a_broadcast_waiter_names_nobody() -> None:
    """Port open: TP0's two looks differ (a healthy overlap scheduler caught in a batch
    step, not its idle poll), TP1 waits in the broadcast TP0 feeds: no hang to blame on
    TP0. The same stacks with the port closed, or with TP0 the same in both looks, still
    name TP0 (a rank busy elsewhere while its peer waits in a collective)."""
    ranks = [proc(0, SLEEP), proc(1, ALL_REDUCE)]
    groups = group_stacks(ranks)
    assert groups[0].wait_site != groups[1].wait_site == "stack.nccl_collective"
    moving = [replace(ranks[0], moving=True), ranks[1]]
    assert outlier_tp_ranks(moving, groups, serving=True) == ()
    assert outlier_tp_ranks(moving, groups) == (0,)
    assert outlier_tp_ranks(ranks, groups, serving=True) == (0,)
