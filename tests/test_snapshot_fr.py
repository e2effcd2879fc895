"""Majority-vote collective attribution from Flight Recorder dumps.

The unit tests build entries the way torch 2.13's recorder writes them (the keys and
values of a real gloo dump: ``profiling_name 'gloo:all_reduce'``, ``input_sizes [[8192]]``,
``input_dtypes ['BFloat16']``, ``state 'scheduled'``, ``process_group ('0', 'default_pg')``,
and ``pg_config`` keyed ``''`` for gloo's default group). The live tests run real gloo
ranks of the mini server with the recorder on, where one rank issues a different
collective (type or size), also rank 0, and read the dumps the ranks' recorders wrote.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from live.harness import mini_server, require_live, snapshot_of

from diag.collect.collective import describe_entry, match_fr, summarise_fr
from diag.collect.snapshot import SnapshotOptions, take_snapshot
from diag.model import Unavailable


def entry(seq: int, op: str = "all_reduce", sizes: list[list[int]] | None = None,
          dtype: str = "BFloat16", out: list[list[int]] | None = None,
          state: str = "scheduled", pg: str = "0") -> dict[str, object]:
    sizes = sizes if sizes is not None else [[8192]]
    return {
        "record_id": seq, "pg_id": int(pg), "process_group": (pg, "default_pg"),
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
        "profiling_name": f"gloo:{op}", "input_sizes": sizes,
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": out if out is not None else sizes,
        "output_dtypes": [dtype] * len(out if out is not None else sizes),
        "state": state, "is_p2p": False, "timeout_ms": 1800000,
        "frames": [{"name": "forward", "filename": "/srv/model.py", "line": 41}],
    }


def dump(entries: list[dict[str, object]], world: int) -> dict[str, object]:
    return {
        "version": "2.10",
        "pg_config": {"": {"name": "", "desc": "", "ranks": str(list(range(world)))}},
        "pg_status": {"0": {"last_enqueued_collective": max(
            (int(str(e["collective_seq_id"])) for e in entries), default=-1)}},
        "entries": entries,
    }


def common(n: int = 40) -> list[dict[str, object]]:
    return [entry(s) for s in range(1, n + 1)]


def test_the_odd_rank_is_named_also_when_it_is_rank_0() -> None:
    world = 8
    dumps = {r: dump([*common(), entry(41)], world) for r in range(1, world)}
    dumps[0] = dump([*common(), entry(41, "all_gather", [[4096]], out=[[4096]] * world)], world)
    (mm,) = match_fr(dumps)
    assert mm["seq"] == 41 and mm["majority"]["ranks"] == list(range(1, 8))  # type: ignore[index]
    (odd,) = mm["minority"]  # type: ignore[misc]
    assert odd["rank"] == 0 and odd["kind"] == "type"
    assert odd["issued"] == "all_gather [4096] bf16"
    assert mm["text"] == (
        "rank 0: all_gather [4096] bf16 at seq 41 while 7/8 issued all_reduce [8192] bf16 "
        "(process group 0 (default_pg))"
    )


def test_size_and_dtype_differences_are_named_with_fr_trace_kinds() -> None:
    dumps = {r: dump([*common(3), entry(4)], 4) for r in range(4)}
    dumps[2] = dump([*common(3), entry(4, sizes=[[4096]])], 4)
    (mm,) = match_fr(dumps)
    (odd,) = mm["minority"]  # type: ignore[misc]
    assert (odd["rank"], odd["kind"]) == (2, "size")
    assert "expected input sizes [[8192]], found [[4096]]" in odd["why"]
    dumps[2] = dump([*common(3), entry(4, dtype="Float")], 4)
    (mm,) = match_fr(dumps)
    assert mm["minority"][0]["kind"] == "dtype"  # type: ignore[index]
    assert mm["minority"][0]["issued"] == "all_reduce [8192] fp32"  # type: ignore[index]


def test_a_rank_that_issued_nothing_and_a_rank_that_ran_ahead() -> None:
    # three ranks at seq 41, one stopped at 40: that one is missing
    dumps = {r: dump([*common(), entry(41)], 4) for r in range(3)}
    dumps[3] = dump(common(), 4)
    (mm,) = match_fr(dumps)
    (odd,) = mm["minority"]  # type: ignore[misc]
    assert (odd["rank"], odd["kind"], odd["last_seq"]) == (3, "missing", 40)
    # rank 0 alone issued a broadcast the others never did: rank 0 is named, not the rest
    dumps = {r: dump(common(), 4) for r in range(1, 4)}
    dumps[0] = dump([*common(), entry(41, "broadcast")], 4)
    (mm,) = match_fr(dumps)
    assert [(m["rank"], m["kind"]) for m in mm["minority"]] == [(0, "extra")]  # type: ignore[attr-defined]
    assert mm["majority"]["issued"] is None  # type: ignore[index]
    assert summarise_fr(dumps)["ahead"] == {"0": [0]}
    assert summarise_fr(dumps)["behind"] == {}  # the majority is not "behind" rank 0


def test_no_majority_is_said_not_guessed() -> None:
    dumps = {0: dump([*common(3), entry(4)], 2),
             1: dump([*common(3), entry(4, "all_gather", [[4096]], out=[[4096]] * 2)], 2)}
    (mm,) = match_fr(dumps)
    assert mm["majority"] is None and "no majority among 2 ranks" in str(mm["text"])
    assert {m["kind"] for m in mm["minority"]} == {"split"}  # type: ignore[attr-defined]


def test_agreeing_ranks_give_nothing_and_states_alone_do_not_split() -> None:
    world = 3
    gather = [entry(s, "all_gather", [[16]], out=[[16]] * world) for s in range(1, 4)]
    dumps = {r: dump(gather, world) for r in range(world)}
    assert match_fr(dumps) == []  # the list form of all_gather: numel over every output
    dumps[1] = dump([*gather[:2], {**gather[2], "state": "started"}], world)
    assert match_fr(dumps) == []
    assert describe_entry(gather[0]) == "all_gather [16] bf16"


def test_a_window_that_rotated_away_is_not_a_mismatch() -> None:
    # rank 1's ring buffer holds seqs 30..41, the others 1..41: only 30..41 are compared
    dumps = {0: dump([*common(), entry(41)], 2), 1: dump([*common()[29:], entry(41)], 2)}
    assert match_fr(dumps) == []


# ------------------------------------------------------------------------------ live


@pytest.mark.live
@pytest.mark.parametrize(
    ("kind", "odd", "issued", "frame"),
    [
        ("type", 0, "all_gather [4096] bf16", "rank_main (mini_server.py"),
        ("size", 0, "all_reduce [4096] fp32", "handle_first_request (mini_server.py"),
        ("type", 2, "all_gather [4096] bf16", "rank_main (mini_server.py"),
    ],
)
def test_snapshot_names_the_rank_that_issued_another_collective(
    kind: str, odd: int, issued: str, frame: str
) -> None:
    require_live()
    extra = ("--odd-rank", str(odd), "--odd-kind", kind)
    with mini_server(framework="sglang", tp=3, mode="fr_mismatch", extra=extra) as srv:
        srv.wait_ready(["rank0", "rank1", "rank2", "launcher"])
        deadline = time.monotonic() + 30
        while True:
            snap = snapshot_of(srv, samples=1)
            found = {f.id: f for f in snap.findings}
            if "nccl.collective_mismatch" in found or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        (fr,) = [e for e in snap.collective_evidence if e.get("kind") == "flight_recorder"]
        assert fr["files"] == {str(r): str(srv.ready_dir / f"fr_trace_rank_{r}")
                               for r in range(3)}
        (mm,) = fr["mismatches"]  # type: ignore[misc]
        assert mm["seq"] == 4 and [m["rank"] for m in mm["minority"]] == [odd]
        assert mm["majority"]["ranks"] == [r for r in range(3) if r != odd]
        finding = found["nccl.collective_mismatch"]
        assert finding.ranks == (f"TP{odd}",)
        assert finding.message.startswith(
            f"Flight Recorder: TP{odd}: {issued} at seq 4 ["
        ), finding.message
        assert "while 2/3 issued all_reduce [8192] bf16" in finding.message
        assert frame in finding.message  # joined with that rank's live stack
        assert "log phase weights_load]" in finding.message  # and its log's phase
        (log,) = [e for e in snap.collective_evidence if e.get("kind") == "log_phase"]
        assert log["file"] == str(srv.log)
        if kind == "size":  # then the others wait in seq 5, which TP0 never issued
            assert mm["later_seqs"] == [5] and fr["behind"] == {"0": [odd]}


def test_log_phase_of_each_rank_from_the_file_its_stdout_points_at(tmp_path: Path) -> None:
    from diag.collect.logphase import log_files, rank_log_phases
    from diag.model import ProcessInfo, RankId

    log = tmp_path / "server.log"
    log.write_text(
        "garbage first line cut by the tail\n" * 3
        + "[2026-02-22 22:35:21 TP0] Load weight begin. avail mem=20.00 GB\n"
        "[2026-02-22 22:35:21 TP1] Load weight begin. avail mem=20.00 GB\n"
        "[2026-02-22 22:35:55 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16\n"
        "[2026-02-22 22:36:01 TP0] KV Cache is allocated. #tokens: 8192\n"
    )
    root = tmp_path / "proc"
    procs = []
    for pid, tp in ((41, 0), (42, 1)):
        (root / str(pid) / "fd").mkdir(parents=True)
        (root / str(pid) / "fd" / "1").symlink_to(log)
        (root / str(pid) / "fd" / "2").symlink_to("/dev/null")  # not a regular file
        procs.append(ProcessInfo(pid=pid, ppid=1, role="scheduler", title=f"TP{tp}", cmdline=(),
                                 framework="sglang", rank=RankId(tp=tp), rank_source="title",
                                 state="S", rss_bytes=0, cpu_percent=0.0, threads=1,
                                 listening_ports=()))
    assert log_files(procs, root) == [str(log)]
    (ev,) = rank_log_phases(procs, root, max_bytes=400)  # the tail starts at a line start
    assert ev["file"] == str(log)
    ranks = ev["ranks"]
    assert ranks["TP0"]["last_phase"] == "kv_cache"  # type: ignore[index]
    assert ranks["TP1"]["last_phase"] == "weights_load"  # type: ignore[index]


def _nccl_gpus() -> int:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return 0
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        return 0
    return int(torch.cuda.device_count())


@pytest.mark.live
@pytest.mark.gpu
@pytest.mark.skipif(_nccl_gpus() < 3, reason="needs NCCL and 3+ GPUs (one per rank, a majority)")
@pytest.mark.parametrize("odd", [0, 2])
def test_nccl_flight_recorder_through_its_debug_pipe(odd: int) -> None:
    """The same hang on NCCL: the ranks' recorders dump when diag writes to their debug
    pipes (``--fr-dump``), and the rank that issued all_gather is named, also rank 0."""
    require_live()
    tp = min(4, _nccl_gpus())
    extra = ("--backend", "nccl", "--odd-rank", str(odd), "--odd-kind", "type")
    with mini_server(framework="sglang", tp=tp, mode="fr_mismatch", extra=extra) as srv:
        srv.wait_ready([f"rank{r}" for r in range(tp)] + ["launcher"], timeout=180)
        snap = take_snapshot(SnapshotOptions(pid=srv.pid, timeout_s=30.0, samples=1,
                                             fr_dump=True, fr_wait_s=20.0))
        (fr,) = [e for e in snap.collective_evidence if e.get("kind") == "flight_recorder"]
        assert fr["requested"]["answered"] == list(range(tp)), fr  # type: ignore[index]
        (mm,) = fr["mismatches"]  # type: ignore[misc]
        assert [m["rank"] for m in mm["minority"]] == [odd]
        finding = next(f for f in snap.findings if f.id == "nccl.collective_mismatch")
        assert finding.ranks == (f"TP{odd}",)
        assert f"TP{odd}: all_gather [4096] bf16 at seq 4" in finding.message
        assert f"while {tp - 1}/{tp} issued all_reduce [8192] bf16" in finding.message


def test_the_view_shows_the_mismatch_and_the_verdict_names_the_rank() -> None:
    import dataclasses

    from rich.console import Console
    from test_snapshot_report import story_snapshot

    from diag.report.snapshot_view import render_snapshot, verdict_text
    from diag.rules import apply_snapshot_rules

    world = 3
    dumps = {r: dump([*common(3), entry(4)], world) for r in range(world)}
    dumps[1] = dump(common(3), world)  # TP1 never issued seq 4
    ev = {"kind": "flight_recorder", "files": {}, **summarise_fr(dumps)}
    log = {"kind": "log_phase", "file": "/srv/server.log", "text": "log /srv/server.log: TP1 x",
           "ranks": {"TP1": {"last_phase": "cuda_graph"}}}
    snap = dataclasses.replace(story_snapshot(), collective_evidence=(ev, log))
    snap = dataclasses.replace(snap, findings=tuple(apply_snapshot_rules(snap)))
    finding = next(f for f in snap.findings if f.id == "nccl.collective_mismatch")
    assert finding.ranks == ("TP1",)
    assert "TP1: nothing (its last: all_reduce [8192] bf16 at seq 3) at seq 4" in finding.message
    assert "log phase cuda_graph" in finding.message
    assert finding.message in verdict_text(snap).replace(". ", ".\n") or (
        finding.message[:60] in verdict_text(snap))
    console = Console(width=200, record=True, color_system=None)
    for part in render_snapshot(snap):
        console.print(part)
    text = console.export_text()
    assert "mismatch: rank 1: nothing" in text and "log phase" in text
    # two ranks, one issued seq 4 and one not: no majority, and the finding names nobody
    two = {0: dump([*common(3), entry(4)], 2), 1: dump(common(3), 2)}
    ev2 = {"kind": "flight_recorder", "files": {}, **summarise_fr(two)}
    tied = dataclasses.replace(story_snapshot(), collective_evidence=(ev2,))
    found = {f.id: f for f in apply_snapshot_rules(tied)}
    assert found["nccl.collective_mismatch"].ranks == ()
    assert "no majority at seq 4" in found["nccl.collective_mismatch"].message


def test_the_json_form_of_a_dump_reads_like_the_pickle(tmp_path: Path) -> None:
    """torch 2.13's ``fr_trace_json`` (the debug worker server's handler, answered while
    the rank was blocked in a gloo all_reduce) writes pg_status counters as strings."""
    import json

    from diag.collect.collective import load_fr_dump

    def as_json(d: dict[str, object], seq: int) -> str:
        return json.dumps({**d, "pg_status": {"0": {"last_enqueued_collective": str(seq),
                                                    "last_started_collective": "-1"}}})

    world = 3
    for r in range(world):
        entries = [*common(3), entry(4)] if r else common(3)
        (tmp_path / f"t{r}").write_text(as_json(dump(entries, world), 4 if r else 3))
    dumps = {r: load_fr_dump(tmp_path / f"t{r}") for r in range(world)}
    assert not any(isinstance(d, Unavailable) for d in dumps.values())
    s = summarise_fr(dumps)  # type: ignore[arg-type]
    assert s["behind"] == {"0": [0]}
    (mm,) = s["mismatches"]  # type: ignore[misc]
    assert [(m["rank"], m["kind"]) for m in mm["minority"]] == [(0, "missing")]


@pytest.mark.parametrize("odd", range(8))
@pytest.mark.parametrize("kind", ["type", "size", "dtype", "missing", "extra"])
def test_the_culprit_is_named_wherever_it_sits(odd: int, kind: str) -> None:
    """First-rank matching blames the seven others when the culprit comes first; the
    majority names the culprit at every position, for every kind of difference."""
    world = 8
    ok = [*common(5), entry(6)]
    bad = {
        "type": [*common(5), entry(6, "all_gather", [[8192]], out=[[8192]] * world)],
        "size": [*common(5), entry(6, sizes=[[4096]])],
        "dtype": [*common(5), entry(6, dtype="Half")],
        "missing": common(5),
        "extra": [*common(5), entry(6), entry(7, "broadcast")],
    }[kind]
    dumps = {r: dump(bad if r == odd else ok, world) for r in range(world)}
    (mm,) = match_fr(dumps)
    assert [(m["rank"], m["kind"]) for m in mm["minority"]] == [(odd, kind)]  # type: ignore[attr-defined]
    assert mm["seq"] == (7 if kind == "extra" else 6)
    assert "while 7/8 issued" in str(mm["text"])
