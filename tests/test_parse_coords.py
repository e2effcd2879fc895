"""The one coordinates parser: every rank tag form, with the line forms of FORMATS.md."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.model import RankId
from diag.parse.coords import (
    Coords,
    key_coords,
    match_message_rank,
    match_nccl_prefix,
    match_proc_prefix,
    match_stage,
    match_torch_rank,
    parse_name,
    parse_tags,
    rank_from_path,
    rank_from_title,
    rank_key,
    rank_keys,
    small_int,
)
from diag.parse.grammars import parse_line
from diag.parse.records import SourceParser, apply_layout, assign_path_ranks, ranks_from_paths


@pytest.mark.parametrize(
    ("tags", "rank", "extra"),
    [
        ("TP3", RankId(tp=3), ()),
        ("DP0 TP3 EP3", RankId(dp=0, tp=3, ep=3), ()),
        ("PP1 TP0", RankId(pp=1, tp=0), ()),
        ("TP2 PP0", RankId(pp=0, tp=2), ()),  # older versions put PP after TP
        ("DP4 PP0 TP4", RankId(dp=4, pp=0, tp=4), ()),
        ("PP1", RankId(pp=1), ()),
        ("NP1 TP9", RankId(node="1", tp=9), ()),
        # sglang scheduler.py: DP, PP, ATTN_CP, MOE_DP, TP, EP
        ("DP0 PP1 ATTN_CP1 MOE_DP1 TP3 EP3", RankId(dp=0, pp=1, tp=3, ep=3),
         (("ATTN_CP", 1), ("MOE_DP", 1))),
        ("ATTN_DP1 TP3", RankId(tp=3), (("ATTN_DP", 1),)),  # not the DP rank
        ("MOE_DP2 TP5 EP5", RankId(tp=5, ep=5), (("MOE_DP", 2),)),
        ("CP1 TP2", RankId(tp=2), (("CP", 1),)),
        ("PD0 TP1", RankId(tp=1), (("PD", 0),)),
    ],
)
def test_sglang_tags(tags: str, rank: RankId, extra: tuple[tuple[str, int], ...]) -> None:
    c = parse_tags(tags)
    assert c is not None and c.rank() == rank and c.extra == extra
    line = f"[2026-05-07 05:56:32 {tags}] Capture cuda graph begin."
    p = parse_line(line)
    assert p.grammar == "sglang" and p.rank == rank and p.message == "Capture cuda graph begin."


def test_extras_alone_name_no_rank_and_attn_dp_is_never_dp() -> None:
    c = parse_tags("ATTN_DP1 MOE_DP2")
    assert c is not None and c.rank() is None and c.dp is None
    assert parse_line("[2026-05-07 05:56:32 ATTN_DP1 TP3] x").rank == RankId(tp=3)


@pytest.mark.parametrize(
    ("title", "rank"),
    [
        ("sglang::scheduler_TP3", RankId(tp=3)),
        ("sglang::scheduler_DP0_TP3_EP3", RankId(dp=0, tp=3, ep=3)),
        ("sglang::scheduler_PP2_TP1", RankId(pp=2, tp=1)),
        ("sglang::scheduler_DP0_PP1_ATTN_CP0_MOE_DP1_TP3_EP3", RankId(dp=0, pp=1, tp=3, ep=3)),
        ("VLLM::Worker_TP0", RankId(tp=0)),
        ("Worker_PP1_TP0", RankId(pp=1, tp=0)),
        ("Worker_DP1_TP0_EP2", RankId(dp=1, tp=0, ep=2)),
        ("VllmWorker rank=3", RankId(tp=3)),
        ("[rank3]", RankId(tp=3)),
        ("sglang::detokenizer", None),
        ("VLLM::EngineCore", None),
        ("EngineCore_DP1", None),  # a replica: its workers are the ranks
        ("", None),
    ],
)
def test_titles(title: str, rank: RankId | None) -> None:
    assert rank_from_title(title) == rank


def test_engine_core_is_a_replica_that_completes_its_workers() -> None:
    c = parse_name("EngineCore_DP1")
    assert c is not None and c.replica and c.dp == 1 and c.rank() is None
    p = parse_line(
        "(EngineCore_DP1 pid=2557) (VllmWorker rank=0 pid=4194) INFO 05-01 10:00:00 [gpu_worker.py:1] x"
    )
    assert p.rank == RankId(dp=1, tp=0) and p.pid == 4194 and p.message == "x"


@pytest.mark.parametrize(
    ("line", "name", "pid", "ip", "rank"),
    [
        ("(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] x",
         "VllmWorker", 1090, None, RankId(tp=3)),
        ("(Worker_TP3 pid=1700) INFO 08-14 12:59:46 [gpu_model_runner.py:2592] x",
         "Worker_TP3", 1700, None, RankId(tp=3)),
        ("(Worker_PP1_TP0 pid=23220) ERROR 07-15 21:01:01 [multiproc_executor.py:1007] x",
         "Worker_PP1_TP0", 23220, None, RankId(pp=1, tp=0)),
        ("(EngineCore_DP1 pid=5839) INFO 03-10 16:19:26 [core.py:58] x",
         "EngineCore_DP1", 5839, None, None),
        ("(RayWorkerWrapper pid=67451, ip=10.1.0.7) ERROR 04-16 01:01:44 [worker_base.py:620] x",
         "RayWorkerWrapper", 67451, "10.1.0.7", None),
        ("(pid=10414) INFO 04-13 10:17:32 llm_engine.py:1] x", None, 10414, None, None),
    ],
)
def test_process_prefixes(
    line: str, name: str | None, pid: int, ip: str | None, rank: RankId | None
) -> None:
    pp = match_proc_prefix(line)
    assert pp is not None and (pp.name, pp.pid, pp.ip) == (name, pid, ip)
    assert (pp.coords.rank() if pp.coords else None) == rank
    assert line[pp.end :].split(" ", 1)[0] in ("INFO", "ERROR")
    p = parse_line(line)
    assert p.pid == pid and p.message == "x" and p.rank == rank


def test_pp_workers_are_not_labelled_tp() -> None:
    p = parse_line("(Worker_PP1 pid=7) INFO 07-15 21:01:01 [gpu_worker.py:1] x")
    assert p.rank == RankId(pp=1) and p.rank.label == "PP1"
    p = parse_line("[2026-06-20 11:33:56 PP1] Scheduler hit an exception:")
    assert p.rank == RankId(pp=1) and p.rank.tp is None


def test_torch_and_nccl_prefixes() -> None:
    assert match_torch_rank("[rank3]:[W1222 15:01:54.1 ProcessGroupNCCL.cpp:1] x") == (3, 8)
    assert match_torch_rank("[rank]: x") is None
    n = match_nccl_prefix("node-0:270:271 [3] NCCL INFO Bootstrap: Using eth0")
    assert n is not None and (n.host, n.pid, n.tid, n.device) == ("node-0", 270, 271, 3)
    assert match_nccl_prefix("no prefix here") is None


@pytest.mark.parametrize(
    ("path", "rank"),
    [
        ("rank2.log", RankId(tp=2)),
        ("logs/tp3.log", RankId(tp=3)),
        ("worker_3.log", RankId(tp=3)),
        ("node1/rank0.log", RankId(node="1", tp=0)),
        ("scheduler_DP0_TP3_EP3.log", RankId(dp=0, tp=3, ep=3)),
        ("out/pp1_tp0.txt", RankId(pp=1, tp=0)),
        ("server.log", None),
        ("node2/server.log", None),
        ("x/rank0/log.txt", None),  # a folder's rank-like name alone is too loose
    ],
)
def test_rank_from_path(path: str, rank: RankId | None) -> None:
    assert rank_from_path(path) == rank


def test_per_rank_files_get_their_rank_and_a_lone_file_does_not() -> None:
    assert ranks_from_paths(["dsv3-tp8.log"]) == {}
    assert ranks_from_paths(["a/rank0.log", "a/rank0.txt"]) == {}  # not distinct
    drafts = []
    for name in ("logs/rank0.log", "logs/rank1.log"):
        sp = SourceParser(name)
        sp.feed(1, "INFO 03-10 16:19:26 [gpu_worker.py:1] Loading weights took 3.1 seconds")
        sp.feed(2, "[2025-01-01 00:00:00 TP5] tagged line keeps its tag")
        sp.feed(3, "INFO:     Uvicorn running on http://0.0.0.0:8000")
        drafts += sp.drafts
    note = assign_path_ranks(drafts, ["logs/rank0.log", "logs/rank1.log"])
    assert note is not None
    assert [d.rank for d in drafts] == [
        RankId(tp=0), RankId(tp=5), None, RankId(tp=1), RankId(tp=5), None
    ]
    assert drafts[0].rank_reason is not None and "rank0.log" in drafts[0].rank_reason


def test_rank_keys_cover_every_tag_form() -> None:
    text = (
        "[2025-01-01 00:00:00 DP0 ATTN_CP1 MOE_DP0 TP3 EP3] Decode batch, #running-req: 1\n"
        "[2025-01-01 00:00:00.123 PD1 TP2] x\n"
        "(VllmWorker rank=3 pid=12) INFO 03-10 16:19:26 [gpu_worker.py:1] x\n"
        "[rank3]:[W1222 15:01:54.1 ProcessGroupNCCL.cpp:1] x\n"
        "[2025-01-01 00:00:00] no rank\n"
    )
    keys = rank_keys(text)
    assert keys == {
        " DP0 ATTN_CP1 MOE_DP0 TP3 EP3] ", " PD1 TP2] ", "(VllmWorker rank=3 pid=12) ", "[rank3]:",
    }
    for k in keys:
        assert k in text  # a literal substring: rfind finds the rank's last line
    assert rank_key(text.splitlines()[0]) == " DP0 ATTN_CP1 MOE_DP0 TP3 EP3] "
    assert rank_key("plain text with no prefix") is None
    c = key_coords(" DP0 ATTN_CP1 MOE_DP0 TP3 EP3] ")
    assert c is not None and c.rank() == RankId(dp=0, tp=3, ep=3)
    assert key_coords("(VllmWorker rank=3 pid=12) ") == Coords(tp=3, global_rank=True)
    assert key_coords("[rank3]:") == Coords(tp=3, global_rank=True)


@pytest.mark.parametrize("digits", ["²", "٣", "1" * 10, "9" * 5000, "", "1a"])
def test_ints_are_ascii_and_bounded(digits: str) -> None:
    assert small_int(digits) is None
    assert parse_tags(f"TP{digits}") is None
    assert match_proc_prefix(f"(Worker_TP0 pid={digits}) x") is None or digits == ""
    p = parse_line(f"[2025-01-01 00:00:00 TP{digits}] x")
    assert p.rank is None
    parse_line(f"(VllmWorker rank={digits} pid={digits}) INFO 03-10 16:19:26 [a.py:1] x")
    parse_line(f"host:{digits}:{digits} [{digits}] NCCL INFO x")
    parse_line(f"[rank{digits}]: x")
    rank_from_path(f"rank{digits}.log")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_coords_never_raise(s: str) -> None:
    parse_tags(s)
    parse_name(s)
    rank_from_title(s)
    rank_from_path(s)
    match_proc_prefix(s)
    match_torch_rank(s)
    match_nccl_prefix(s)
    match_message_rank(s)
    rank_key(s)
    rank_keys(s)
    key_coords(s)


def test_global_ranks_with_pipeline_parallelism_are_pp_times_tp() -> None:
    sp = SourceParser("x")
    sp.feed(1, "(VllmWorker rank=5 pid=12) INFO 06-05 06:18:13 [gpu_worker.py:1] Loading weights took 3.1 seconds")
    sp.feed(2, "[rank2]:[W1222 15:01:54.1 ProcessGroupNCCL.cpp:1] Warning")
    sp.feed(3, "(Worker_PP1_TP0 pid=13) INFO 06-05 06:18:13 [gpu_worker.py:1] tagged")
    sp.feed(4, "(VllmWorker rank=9 pid=14) INFO 06-05 06:18:13 [gpu_worker.py:1] outside the layout")
    drafts = sp.drafts
    assert [d.rank for d in drafts] == [RankId(tp=5), RankId(tp=2), RankId(pp=1, tp=0), RankId(tp=9)]
    assert apply_layout(drafts, 2, 1) is None  # no pipeline: a global rank is the TP rank
    assert apply_layout(drafts, 4, 2) is not None
    assert [d.rank for d in drafts] == [
        RankId(pp=1, tp=1), RankId(pp=0, tp=2), RankId(pp=1, tp=0), RankId(tp=9)
    ]
    assert drafts[0].rank_reason == "tag"
    assert drafts[1].rank_reason == "global rank 2 of tp=4 pp=2"


def test_the_portable_key_pattern_finds_the_same_keys_in_polars() -> None:
    import polars as pl

    from diag.parse.coords import RANK_KEY_PORTABLE

    lines = [
        "[2025-01-01 00:00:00 DP0 ATTN_CP1 MOE_DP0 TP3 EP3] Decode batch, #running-req: 1",
        "(VllmWorker rank=3 pid=12) INFO 03-10 16:19:26 [gpu_worker.py:1] x",
        "[rank3]:[W1222 15:01:54.1 ProcessGroupNCCL.cpp:1] x",
        "[2025-01-01 00:00:00] no rank",
    ]
    got = pl.Series(lines).str.extract(RANK_KEY_PORTABLE, 1).to_list()
    want = [rank_key(ln) for ln in lines]
    assert [g.rstrip() if g else g for g in got] == [w.rstrip() if w else w for w in want]


def test_vllm_engine_cores_are_the_ranks_when_tp_is_one() -> None:
    sp = SourceParser("x")
    sp.feed(1, "(EngineCore_DP1 pid=5839) INFO 03-10 16:19:26 [gpu_model_runner.py:1] Model loading took 15.2 GiB")
    sp.feed(2, "(APIServer pid=1) INFO 03-10 16:19:26 [api_server.py:1] vLLM API server version 0.9.1")
    drafts = sp.drafts
    assert [d.rank for d in drafts] == [None, None]
    assert apply_layout(drafts, 2, 1, 2) is None  # tp=2: the workers are the ranks
    assert apply_layout(drafts, 1, 1, 2) is not None
    assert [d.rank for d in drafts] == [RankId(dp=1, tp=0), None]


def test_a_folder_of_per_rank_files_is_read_per_rank(tmp_path: Path) -> None:
    from diag.analyze import analyze

    (tmp_path / "rank0.log").write_text(
        "INFO 03-10 16:19:26 [gpu_worker.py:1] Loading weights took 3.1 seconds\n"
        "INFO 03-10 16:19:30 [gpu_worker.py:2] Available KV cache memory: 26.91 GiB\n"
    )
    (tmp_path / "rank1.log").write_text(
        "INFO 03-10 16:19:26 [gpu_worker.py:1] Loading weights took 3.1 seconds\n"
    )
    a = analyze([tmp_path])
    assert {r.rank for r in a.ranks} == {RankId(tp=0), RankId(tp=1)}
    assert any("per-rank files" in n for n in a.notes)


def test_last_timestamps_of_attn_cp_moe_dp_tagged_ranks_equal_on_both_paths() -> None:
    import datetime as dt

    from diag.analyze import analyze_text

    lines = ["[2025-06-23 15:00:00] server_args=ServerArgs(model_path='m', tp_size=4, dp_size=2)"]
    t0 = dt.datetime(2025, 6, 23, 15, 0, 1)
    for i in range(6000):
        t = (t0 + dt.timedelta(seconds=i // 8)).strftime("%Y-%m-%d %H:%M:%S")
        r = i % 4
        if r == 3 and i > 1000:
            continue  # TP3 goes quiet early
        lines.append(
            f"[{t} DP{r // 2} ATTN_CP{r % 2} MOE_DP{r % 2} TP{r} EP{r}] Decode batch, "
            "#running-req: 12, #token: 3456, token usage: 0.12, #queue-req: 0"
        )
    text = "\n".join(lines)
    full, pf = (analyze_text(text, prefilter=p) for p in (False, True))
    last = {str(r.rank): r.last_ts for r in full.ranks}
    assert last == {str(r.rank): r.last_ts for r in pf.ranks}
    assert last["DP1 TP3 EP3"] is not None and last["DP0 TP0 EP0"] is not None
    assert (last["DP0 TP0 EP0"] - last["DP1 TP3 EP3"]).total_seconds() > 500


def test_vllm_pp_workers_named_by_global_rank_are_pp_by_tp() -> None:
    from diag.analyze import analyze_text

    lines = [
        "INFO 06-05 06:18:00 [api_server.py:1] non-default args: {'model': 'm', "
        "'tensor_parallel_size': 2, 'pipeline_parallel_size': 2}"
    ]
    lines += [
        f"(VllmWorker rank={r} pid={100 + r}) INFO 06-05 06:18:13 [gpu_model_runner.py:1] "
        "Model loading took 15.2 GiB and 4.1 seconds"
        for r in range(4)
    ]
    a = analyze_text("\n".join(lines))
    assert {r.rank for r in a.ranks} == {
        RankId(pp=p, tp=t) for p in range(2) for t in range(2)
    }
    assert a.missing_ranks == ()


def test_vllm_omni_stage_tags_are_read_as_the_engine_stage() -> None:
    p = parse_line(
        "(Worker pid=2291010) [Stage-0] ERROR 03-12 08:22:28 [multiproc_executor.py:800] "
        "ValueError: Free memory on device cuda:0"
    )
    assert (p.grammar, p.level, p.pid, p.stage) == ("vllm", "ERROR", 2291010, 0)
    assert p.message.startswith("ValueError") and p.rank is None  # a stage is not a rank
    p = parse_line("[Stage-1] INFO 03-12 08:22:28 [diffusion_model_runner.py:133] Model loading took 26.4738 GiB")
    assert (p.grammar, p.stage) == ("vllm", 1)
    assert match_stage("[Stage-99999] x") is None


# SGLang 0.1-0.2 logged "%(message)s" only, with the rank in the message: 'Rank {tp_rank}: '
# (0.1.5-0.1.17, managers/router/model_rpc.py and model_runner.py) and '[gpu_id={gpu_id}] '
# (0.1.17-0.2.x, managers/controller/tp_worker.py and model_runner.py); lines as those
# sources print them
@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("Rank 0: load weight begin.", 0),
        ("Rank 1: load weight end.", 1),
        ("Rank 1: max_total_num_token=52656, max_prefill_num_token=8776, context_len=4096, model_mode=[]", 1),
        ("[gpu_id=0] Set cuda device.", 0),
        ("[gpu_id=3] Init nccl begin.", 3),
        ("[gpu_id=1] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=15.95 GB", 1),
        ("[gpu_id=1] max_total_num_tokens=328021, max_prefill_tokens=16384, max_running_requests=5124, context_len=32768", 1),
        ("[gpu_id=0] Capture cuda graph begin. This can take up to several minutes.", 0),
    ],
)
def test_sglang_0_1_message_ranks(line: str, rank: int) -> None:
    m = match_message_rank(line)
    assert m is not None and m[0].rank() == RankId(tp=rank) and m[0].global_rank
    assert line[m[1] :] and line[m[1] - 1] == " "
    p = parse_line(line)
    # the message keeps its prefix: the catalogue's entries read it with it
    assert (p.rank, p.rank_reason, p.global_rank, p.message) == (RankId(tp=rank), "tag", True, line)
    # behind a wrapper (docker compose, a container runtime's stamp) too
    assert parse_line(f"sglang-1  | {line}").rank == RankId(tp=rank)
    assert parse_line(f"2024-05-01T10:00:00.123456789Z {line}").rank == RankId(tp=rank)


@pytest.mark.parametrize(
    "line",
    [
        "Rank 0 has no experts assigned to it.",  # a raise's message, no colon
        "[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7",
        "Ranking: 1",
        "Rank x: load weight end.",
        "Rank 1:load weight end.",
        "rank 1: load weight end.",
        "[gpu_id=] Init nccl begin.",
        "[gpu_id=1]Init nccl begin.",
        "Context: self.device=cuda self.gpu_id=3 os.environ.get('CUDA_VISIBLE_DEVICES')=None",
        f"Rank {'9' * 10}: x",
    ],
)
def test_no_sglang_0_1_message_rank(line: str) -> None:
    assert match_message_rank(line) is None
    assert parse_line(line).rank is None


def test_a_tag_or_prefix_outranks_the_message_rank() -> None:
    # a rank from the line's own prefix is kept: the message's is read only on a bare line
    p = parse_line("[2024-08-01 10:00:00 TP2] Rank 0: x")
    assert p.rank == RankId(tp=2)
    p = parse_line("(VllmWorker rank=3 pid=12) Rank 0: x")
    assert p.rank == RankId(tp=3)


def test_sglang_0_1_ranks_are_the_log_s_ranks() -> None:
    from diag.analyze import analyze_text

    a = analyze_text(
        "Rank 0: load weight begin.\nRank 1: load weight begin.\n"
        "Rank 0: load weight end.\nRank 1: load weight end.\n"
        "[gpu_id=0] Init nccl begin.\n[gpu_id=1] Init nccl begin.\n"
    )
    assert {r.rank for r in a.ranks} == {RankId(tp=0), RankId(tp=1)}
    assert not any(r.inferred for r in a.ranks)
