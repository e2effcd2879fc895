"""analyze(): records -> events -> timelines -> Analysis, end to end on small logs."""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import diag.rules
import diag.stacks.textdump
from diag.analyze import analyze, analyze_text
from diag.model import Analysis, RankId, Record

STORY = """\
[2026-02-22 22:35:21] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, pp_size=1, dp_size=1, nnodes=1, node_rank=0, quantization='compressed-tensors', port=30000, speculative_algorithm=None)
[2026-02-22 22:35:27 TP0] Attention backend not set. Use triton_attn backend by default.
[2026-02-22 22:35:27 TP0] Init torch distributed begin.
[2026-02-22 22:35:27 TP1] Init torch distributed begin.
[2026-02-22 22:35:27 TP2] Init torch distributed begin.
[2026-02-22 22:35:27 TP3] Init torch distributed begin.
[2026-02-22 22:35:31 TP0] Init torch distributed ends. mem usage=1.12 GB
[2026-02-22 22:35:31 TP1] Init torch distributed ends. mem usage=1.12 GB
[2026-02-22 22:35:31 TP2] Init torch distributed ends. mem usage=1.12 GB
[2026-02-22 22:35:31 TP0] Load weight begin. avail mem=176.43 GB
[2026-02-22 22:35:31 TP1] Load weight begin. avail mem=176.43 GB
[2026-02-22 22:35:31 TP2] Load weight begin. avail mem=176.43 GB
[2026-02-22 22:35:31 TP1] WARNING compressed_tensors.py:88: Acceleration for non-quantized schemes is not supported by Compressed Tensors. Falling back to UnquantizedLinearMethod
Loading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]
Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:17<00:17,  1.88it/s]
Loading safetensors checkpoint shards: 100% Completed | 64/64 [00:34<00:00,  1.88it/s]
[2026-02-22 22:36:05 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=108.21 GB, mem usage=68.22 GB.
[2026-02-22 22:36:05 TP1] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=108.21 GB, mem usage=68.22 GB.
[2026-02-22 22:36:06 TP2] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=108.21 GB, mem usage=68.22 GB.
[2026-02-22 22:40:00 TP0] KV Cache is allocated. #tokens: 1214528, KV size: 79.60 GB
[2026-02-22 22:40:00 TP1] KV Cache is allocated. #tokens: 1214528, KV size: 79.60 GB
"""


def test_story_layout_phases_stragglers_missing() -> None:
    a = analyze_text(STORY, "server.log", year=None)
    assert a.framework == "sglang"
    assert a.config["tp"] == 8 and a.config["quantization"] == "compressed-tensors"
    assert a.config["port"] == 30000
    assert len(a.expected_ranks) == 8
    assert [r.label for r in a.missing_ranks] == ["TP4", "TP5", "TP6", "TP7"]
    labels = {t.rank.label: t for t in a.ranks}
    assert set(labels) == {"TP0", "TP1", "TP2", "TP3"}
    assert labels["TP0"].last_phase == "kv_cache"
    assert labels["TP2"].last_phase == "weights_load"
    assert labels["TP3"].last_phase == "dist_init"
    # TP2 and TP3 stopped minutes before the others' last line
    assert a.stragglers == (RankId(tp=2), RankId(tp=3))
    assert labels["TP3"].silent_s == pytest.approx(273.0)
    assert labels["TP0"].silent_s == 0.0
    w = next(p for p in labels["TP0"].phases if p.phase == "weights_load")
    assert w.ended and w.duration_s == 34.0
    d = next(p for p in labels["TP3"].phases if p.phase == "dist_init")
    assert d.end is None  # never ended: open
    assert a.last_phase == "kv_cache"
    assert [p.phase for p in a.global_phases] == ["launch", "weights_load"]
    bars = [r for r in _records(STORY) if r.grammar == "progress"]
    assert bars and all(r.rank is None for r in bars)
    assert all(r.rank_reason and r.rank_reason.startswith("unattributed") for r in bars)


def _records(text: str, **kw: object) -> list[Record]:
    seen: list[Record] = []
    real = diag.rules.apply_rules

    def spy(analysis: Analysis, records: Sequence[Record], **kwargs: object) -> Analysis:
        seen.extend(records)
        return analysis

    diag.rules.apply_rules = spy  # type: ignore[assignment]
    try:
        analyze_text(text, **kw)  # type: ignore[arg-type]
    finally:
        diag.rules.apply_rules = real  # type: ignore[assignment]
    return seen


VLLM_V0 = """\
INFO 07-10 03:56:10 llm_engine.py:169] Initializing an LLM engine (v0.5.1) with config: model='deepseek-ai/DeepSeek-V2-Lite-Chat', tensor_parallel_size=2, pipeline_parallel_size=1, quantization=None
(VllmWorkerProcess pid=3773) INFO 07-10 03:56:15 pynccl.py:63] vLLM is using nccl==2.20.5
INFO 07-10 03:56:15 pynccl.py:63] vLLM is using nccl==2.20.5
INFO 07-10 03:56:16 custom_all_reduce_utils.py:202] generating GPU P2P access cache in /root/.config/vllm/gpu_p2p_access_cache_for_0,1.json
(VllmWorkerProcess pid=3773) ERROR 07-10 04:26:16 multiproc_worker_utils.py:226] Exception in worker VllmWorkerProcess while processing method init_device: Timed out waiting 1800000ms for recv operation to complete, Traceback (most recent call last):
(VllmWorkerProcess pid=3773) ERROR 07-10 04:26:16 multiproc_worker_utils.py:226]   File "/usr/local/lib/python3.8/dist-packages/vllm/worker/worker.py", line 126, in init_device
"""


def test_vllm_v0_driver_and_worker_ranks_with_reasons() -> None:
    a = analyze_text(VLLM_V0, year=2024)
    assert a.framework == "vllm" and a.version == "0.5.1"
    assert a.config["tp"] == 2
    recs = _records(VLLM_V0, year=2024)
    driver = [r for r in recs if r.process is None]
    assert driver and all(r.rank == RankId(tp=0) for r in driver)
    assert all("driver" in (r.rank_reason or "") for r in driver)
    worker = [r for r in recs if r.process == "VllmWorkerProcess"]
    assert worker and all(r.rank == RankId(tp=1) for r in worker)
    assert all("pid order" in (r.rank_reason or "") for r in worker)
    assert a.stragglers == (RankId(tp=0),)  # the driver went quiet 30 min before TP1 failed
    assert a.missing_ranks == ()


VLLM_V1_WORKERS = """\
(EngineCore pid=1531) INFO 08-27 02:41:39 [multiproc_executor.py:150] DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=192.168.181.24, world_size=16, local_world_size=8
(Worker pid=1890) INFO 08-27 02:41:50 [parallel_state.py:1638] world_size=16 rank=4 local_rank=4 distributed_init_method=tcp://192.168.181.24:29501 backend=nccl
(Worker pid=1886) INFO 08-27 02:41:51 [parallel_state.py:1638] world_size=16 rank=0 local_rank=0 distributed_init_method=tcp://192.168.181.24:29501 backend=nccl
(Worker pid=1890) INFO 08-27 02:42:51 [pynccl.py:70] vLLM is using nccl==2.27.3
"""


def test_vllm_worker_rank_from_its_own_rank_line() -> None:
    recs = _records(VLLM_V1_WORKERS, year=2025)
    last = recs[-1]
    assert last.rank == RankId(tp=4)
    assert last.rank_reason == "pid 1890 logged world_size=16 rank=4"
    engine = recs[0]
    assert engine.rank is None  # EngineCore is a process, not a rank
    a = analyze_text(VLLM_V1_WORKERS, year=2025)
    assert [t.rank.label for t in a.ranks] == ["TP0", "TP4"]
    assert all(t.inferred for t in a.ranks)


SINGLE = """\
[2025-06-16 16:07:30] server_args=ServerArgs(model_path='mistralai/Mistral-7B', tp_size=1, dp_size=1)
[2025-06-16 16:07:33] Load weight begin. avail mem=30.13 GB
Loading safetensors checkpoint shards: 100% Completed | 6/6 [00:02<00:00,  2.46it/s]
[2025-06-16 16:07:35] Load weight end. type=MistralForCausalLM, dtype=torch.bfloat16, avail mem=6.90 GB, mem usage=23.23 GB.
[2025-06-16 16:07:35] Capture cuda graph begin. This can take up to several minutes. avail mem=2.85 GB
"""


def test_single_rank_layout_attributes_with_reason() -> None:
    a = analyze_text(SINGLE)
    (t,) = a.ranks
    assert t.rank == RankId(tp=0) and t.inferred
    assert t.last_phase == "cuda_graph"
    assert t.shards is not None and (t.shards.done, t.shards.total) == (6, 6)
    recs = _records(SINGLE)
    assert all("single-rank" in (r.rank_reason or "") for r in recs)


def test_no_phase_marker_means_launch_with_a_note() -> None:
    text = "terminate called after throwing an instance of 'gloo::EnforceNotMet'\nFatal Python error: Aborted\n"
    a = analyze_text(text)
    assert a.last_phase == "launch"
    assert any("last phase taken as launch" in n for n in a.notes)


def test_uvicorn_lines_are_global_listening() -> None:
    text = (
        "INFO 04-23 14:49:33 [launcher.py:36] Route: /ping, Methods: POST, GET\n"
        "INFO:     Started server process [593]\nINFO:     Application startup complete.\n"
    )
    a = analyze_text(text, year=2025)
    assert a.ranks == ()
    assert a.last_phase == "listening"


def test_crash_phase_read_from_traceback_frames() -> None:
    text = (
        "[2025-06-16 16:07:35] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 1138, in init_cuda_graphs\n'
        "    self.cuda_graph_runner = CudaGraphRunner(self)\n"
        "RuntimeError: CUDA error: operation not permitted when stream is capturing\n"
    )
    assert analyze_text(text).last_phase == "cuda_graph"


CRASH_WITH_DUMP = """\
[2026-07-14 08:30:00 TP0] Load weight begin. avail mem=70 GB
[2026-07-14 08:34:44 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)
[2026-07-14 08:34:44] Pyspy dump for PID 187 (py-spy dump --native --pid 187):
Process 187: sglang::scheduler_TP0
Thread 0x7F1B0C1FF640 (idle): "MainThread"
    recv (zmq/sugar/socket.py:812)
[2026-07-14 08:34:45] Received sigquit from a child proces. It usually means the child failed.
Killed
"""


def test_records_for_stacks_and_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[Sequence[Record]] = []

    def fake_extract(records: Sequence[Record], **_: object) -> list:  # type: ignore[type-arg]
        got.append(records)
        return []

    monkeypatch.setattr(diag.stacks.textdump, "extract_stack_processes", fake_extract)
    recs = _records(CRASH_WITH_DUMP)
    assert got and [r.line for r in got[0]] == [r.line for r in recs]
    msgs = [r.message for r in recs]
    assert any(m.startswith("Process 187: sglang::scheduler_TP0") for m in msgs)
    thread = next(r for r in recs if r.message.startswith("Thread 0x7F1B0C1FF640"))
    assert thread.continuation == ("    recv (zmq/sugar/socket.py:812)",)
    assert msgs[-1] == "Killed"


def test_progress_callback_reaches_the_total(tmp_path: Path) -> None:
    p = tmp_path / "s.log"
    p.write_text(STORY * 50)
    calls: list[tuple[int, int]] = []
    analyze([p], progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] == p.stat().st_size
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_several_files_make_one_timeline(tmp_path: Path) -> None:
    (tmp_path / "node0.log").write_text(STORY)
    (tmp_path / "node1.log").write_text(
        "[2026-02-22 22:35:27 TP4] Init torch distributed begin.\n"
        "[2026-02-22 22:41:00 TP4] Load weight begin. avail mem=176.43 GB\n"
    )
    a = analyze([tmp_path / "node0.log", tmp_path / "node1.log"])
    assert "TP4" in {t.rank.label for t in a.ranks}
    assert a.log_end is not None and a.log_end.minute == 41
    assert len(a.sources) == 2


def test_nccl_lines_of_a_tagged_worker_get_its_rank() -> None:
    text = (
        "(VllmWorker rank=1 pid=2528104) INFO 06-05 10:47:37 [monitor.py:33] torch.compile takes 60.19 s in total\n"
        "paula09:2528104:2529742 [1] NCCL INFO ncclCommInitRankConfig comm 0x30efe4e0 rank 1 nranks 2 cudaDev 1 - Init START\n"
        "paula09:9999:9999 [0] NCCL INFO Using network IB\n"
    )
    recs = _records(text, year=2025)
    nccl = [r for r in recs if r.grammar == "nccl"]
    assert nccl[0].rank == RankId(tp=1)
    assert nccl[0].rank_reason == "pid 2528104 is TP1 (its other lines are tagged)"
    assert nccl[1].rank is None  # an unknown pid stays unattributed


def test_worker_pids_are_per_file(tmp_path: Path) -> None:
    # two nodes, one file each; the same pid is a different rank on each host
    (tmp_path / "node0.log").write_text(
        "(Worker pid=1890) INFO 08-27 02:41:50 [parallel_state.py:1638] world_size=16 rank=4 local_rank=4 distributed_init_method=tcp://10.0.0.1:29501 backend=nccl\n"
        "(Worker pid=1890) INFO 08-27 02:42:50 [pynccl.py:70] vLLM is using nccl==2.27.3\n"
    )
    (tmp_path / "node1.log").write_text(
        "(Worker pid=1890) INFO 08-27 02:41:50 [parallel_state.py:1638] world_size=16 rank=12 local_rank=4 distributed_init_method=tcp://10.0.0.1:29501 backend=nccl\n"
        "(Worker pid=1890) INFO 08-27 02:42:51 [pynccl.py:70] vLLM is using nccl==2.27.3\n"
    )
    a = analyze([tmp_path], year=2025)
    assert [t.rank.label for t in a.ranks] == ["TP4", "TP12"]


@pytest.mark.parametrize(
    ("text", "framework"),
    [
        ("Capturing batches (avail_mem=7.08 GB):   0%|          | 0/17 [00:00<?, ?it/s]\n", "sglang"),
        ("Loading model weights took 14.9888 GB\n# GPU blocks: 1478, # CPU blocks: 2048\n", "vllm"),
        ("INFO 10-12 00:26:58 launcher.py:27] Route: /v1/models, Methods: GET\n", "vllm"),
        ("node:1:1 [0] NCCL INFO Bootstrap: Using eth0\n", "unknown"),
    ],
)
def test_framework_from_what_only_one_of_them_prints(text: str, framework: str) -> None:
    assert analyze_text(text, year=2025).framework == framework


def test_args_line_hard_wrapped_by_a_paste() -> None:
    args = (
        "[2025-03-14 06:55:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', "
        "tokenizer_mode='auto', tp_size=16, dp_size=1, nnodes=2, node_rank=0, port=30000)"
    )
    wrapped = "\n".join(args[i : i + 80] for i in range(0, len(args), 80))
    a = analyze_text(wrapped + "\n[2025-03-14 06:55:09 TP1] Init torch distributed begin.\n")
    assert a.config["tp"] == 16 and a.config["nnodes"] == 2 and a.config["port"] == 30000


_BURST = """\
[2025-12-19 07:42:50 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.10 GB, mem usage=15.20 GB.
[2025-12-19 07:42:50 TP1] Load weight end. type=LlamaForCausalLM, avail mem=60.10 GB, mem usage=15.20 GB.
[2025-12-19 07:42:57 TP0] KV Cache is allocated. #tokens: 1496958, K size: 4.82 GB, V size: 3.21 GB
[2025-12-19 07:42:57 TP0] Memory pool end. avail mem=22.52 GB
[2025-12-19 07:42:57 TP1] KV Cache is allocated. #tokens: 1496958, K size: 4.82 GB, V size: 3.21 GB
[2025-12-19 07:42:57 TP1] Memory pool end. avail mem=22.56 GB
[2025-12-19 07:42:57 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=22.52 GB
"""


@pytest.mark.parametrize(
    ("tail", "stalled"),
    [
        # TP1 logs in the same second and has not begun the capture yet: the excerpt stopped
        # part-way through the ranks' burst of the same step (a cut, not a stall)
        ("", False),
        # TP1 had begun it too: every rank sits in a step that never ends
        ("[2025-12-19 07:42:57 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=22.56 GB\n", True),
    ],
)
def test_a_begin_line_cut_mid_burst_is_not_a_stall(tail: str, stalled: bool) -> None:
    text = _BURST + tail if not tail else _BURST.replace(
        "[2025-12-19 07:42:57 TP0] Capture", tail + "[2025-12-19 07:42:57 TP0] Capture")
    a = analyze_text(text, "server.log", year=None)
    ids = {f.id for f in a.findings}
    assert ("startup.stalled" in ids) is stalled
    if not stalled:
        (cut,) = [f for f in a.findings if f.id == "startup.cut_excerpt"]
        assert "had not yet begun" in cut.message


_ADVISORY = (
    "(SGLangEngine pid=32887) For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "(SGLangEngine pid=32887) Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    "(SGLangEngine pid=32887) [2025-12-25 10:14:03 TP1 EP1] Scheduler hit an exception: Traceback (most recent call last):\n"
    '(SGLangEngine pid=32887)   File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2683, in run_scheduler_process\n'
    "(SGLangEngine pid=32887)     scheduler.event_loop_normal()\n"
)


@pytest.mark.parametrize(
    ("head", "want"),
    [
        # torch's advisory alone: a CUDA call failed, its own line is not in the text
        ("", {"cuda.error"}),
        # the error's line is there: the pattern rule reads it (one finding, its line)
        ("(SGLangEngine pid=32887) RuntimeError: CUDA error: an illegal memory access was encountered\n",
         {"cuda.error"}),
        # an out-of-memory error carries the same advisory: it is cuda.oom's, not cuda.error
        ("(SGLangEngine pid=32887) torch.OutOfMemoryError: CUDA error: out of memory\n", set()),
    ],
)
def test_torchs_cuda_advisory_without_its_error_line(head: str, want: set[str]) -> None:
    a = analyze_text(head + _ADVISORY, "server.log", year=None)
    ids = {f.id for f in a.findings}
    assert ids & {"cuda.error"} == want
    if want and not head:
        (f,) = [f for f in a.findings if f.id == "cuda.error"]
        assert [e.line for e in f.evidence][:1] == [1] and "error's own line is not" in f.message


def test_a_process_group_watchdogs_failure_proves_dist_init() -> None:
    # torch 2.6+'s wording of the collective watchdog's exit (ProcessGroupNCCL.cpp)
    line = (
        "[rank6]:[E1113 23:24:11.476061221 ProcessGroupNCCL.cpp:2068] [PG ID 2 PG GUID 3 Rank 6] "
        "Process group watchdog thread terminated with exception: CUDA error: an illegal "
        "memory access was encountered\n"
    )
    a = analyze_text("Logs dump:\n\n" + line, "server.log", year=None)
    assert a.last_phase == "dist_init"
    assert "cuda.error" in {f.id for f in a.findings}


_WARMUP_UP = """\
[2026-03-01 10:00:00 TP0] Capture cuda graph end. Time elapsed: 3.10 s
[2026-03-01 10:00:02] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-03-01 10:00:03] INFO:     127.0.0.1:40000 - "GET /get_model_info HTTP/1.1" 200 OK
"""
_WARMUP_HANDLER = """\
[2026-03-01 10:00:03] Error in request: boom
Traceback (most recent call last):
  File "/x/sglang/srt/entrypoints/openai/serving_base.py", line 107, in handle_request
    return await self._handle_non_streaming_request(
ValueError: boom
"""
_WARMUP_POST = '[2026-03-01 10:00:03] INFO:     127.0.0.1:40002 - "POST /generate HTTP/1.1" 500 Internal Server Error\n'
_WARMUP_FAIL = """\
[2026-03-01 10:00:03] Initialization failed. warmup error: Traceback (most recent call last):
  File "/x/sglang/srt/entrypoints/http_server.py", line 1100, in _execute_server_warmup
    assert res.status_code == 200, f"{res}"
AssertionError: <Response [500]>
"""


@pytest.mark.parametrize(
    ("middle", "phase"),
    [
        # SGLang's own warm-up request failed: its 5xx access line and the handler's
        # traceback are the warm-up's, not a client's: the server listened, never served
        (_WARMUP_HANDLER + _WARMUP_POST, "listening"),
        (_WARMUP_POST, "listening"),
        # the engine ran a batch of it: serving, as before
        ("[2026-03-01 10:00:03 TP0] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0\n"
         + _WARMUP_POST, "serving"),
    ],
)
def test_a_failed_warmups_own_request_is_no_serving(middle: str, phase: str) -> None:
    a = analyze_text(_WARMUP_UP + middle + _WARMUP_FAIL, "server.log")
    assert a.last_phase == phase


def test_a_5xx_request_without_a_warmup_failure_still_serves() -> None:
    a = analyze_text(_WARMUP_UP + _WARMUP_POST, "server.log")
    assert a.last_phase == "serving"
