# ruff: noqa: E501  (real log lines are long)
"""Lines -> records: continuation lines, tracebacks, stack dumps, year inference."""

from __future__ import annotations

import datetime as dt

import pytest

from diag.parse.records import SourceParser, freeze, resolve_years


def _records(text: str, *, year: int | None = None, ref: dt.datetime | None = None) -> list:
    sp = SourceParser("x.log")
    for i, line in enumerate(text.split("\n"), start=1):
        sp.feed(i, line)
    resolve_years(sp.drafts, year=year, ref=ref)
    return [freeze(d) for d in sp.drafts]


SGLANG_TRACEBACK = """\
[2025-03-29 18:18:34 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1999, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 74, in __init__
    self.model_runner = ModelRunner(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.

[2025-03-29 18:18:35] Received sigquit from a child proces. It usually means the child failed.
Killed"""


def test_sglang_traceback_attaches_to_its_header() -> None:
    recs = _records(SGLANG_TRACEBACK)
    assert [r.line for r in recs] == [1, 8, 9]
    head = recs[0]
    assert head.rank is not None and head.rank.label == "TP0"
    assert len(head.continuation) == 5
    assert head.continuation[-1].startswith("RuntimeError: Not enough memory")
    assert "Received sigquit" in recs[1].message
    assert recs[2].message == "Killed"


PLAIN_TRACEBACK = """\
Process EngineCore_0:
Traceback (most recent call last):
  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 623, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
RuntimeError: CUDA error: no kernel image is available for execution on the device

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "x.py", line 1, in <module>
ValueError: boom"""


def test_plain_traceback_is_a_record_with_its_frames() -> None:
    recs = _records(PLAIN_TRACEBACK)
    tb = [r for r in recs if r.message.startswith("Traceback")]
    assert len(tb) == 2
    first = tb[0]
    assert first.grammar == "traceback"
    assert first.continuation[-3].strip().startswith("engine_core = EngineCoreProc")
    assert first.continuation[-2].startswith("RuntimeError: CUDA error: no kernel image")
    assert first.continuation[-1].startswith("During handling of the above exception")
    assert tb[1].continuation[-1] == "ValueError: boom"


VLLM_PREFIXED = """\
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] WorkerProc hit an exception.
(VllmWorker rank=2 pid=1089) INFO 06-05 06:18:13 [gpu_worker.py:1] unrelated line of rank 2
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 84, in capture_end
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]     super().capture_end()
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: out of memory"""


def test_prefixed_indented_body_joins_the_same_process_record() -> None:
    recs = _records(VLLM_PREFIXED, year=2025)
    assert [r.line for r in recs] == [1, 2, 5]
    assert recs[0].rank is not None and recs[0].rank.tp == 3
    assert len(recs[0].continuation) == 2
    assert recs[0].continuation[0].strip().startswith('File "/usr/local/lib/python3.10/site')
    assert recs[2].message.startswith("RuntimeError: CUDA error: out of memory")
    assert recs[0].ts == dt.datetime(2025, 6, 5, 6, 18, 13)


PYSPY_TEXT = """\
[2026-07-14 08:34:44] Pyspy dump for PID 187 (py-spy dump --native --pid 187):
Process 187: sglang::scheduler_TP0
Python v3.12.3 (/usr/bin/python3.12)

Thread 0x7F1B0C1FF640 (idle): "MainThread"
    recv (zmq/sugar/socket.py:812)
    recv_pyobj (zmq/sugar/socket.py:1006)
    event_loop_normal (sglang/srt/managers/scheduler.py:921)
Thread 0x7F1A0C1FF640 (active): "watchdog"
    watchdog_thread (sglang/srt/managers/scheduler.py:2377)"""


def test_pyspy_text_dump_lines_are_records_with_frames() -> None:
    recs = _records(PYSPY_TEXT)
    kinds = [r.grammar for r in recs]
    assert kinds == ["sglang", "pyspy", "pyspy", "pyspy", "pyspy"]
    main = recs[3]
    assert main.message.startswith('Thread 0x7F1B0C1FF640 (idle): "MainThread"')
    assert [c.strip() for c in main.continuation] == [
        "recv (zmq/sugar/socket.py:812)",
        "recv_pyobj (zmq/sugar/socket.py:1006)",
        "event_loop_normal (sglang/srt/managers/scheduler.py:921)",
    ]
    assert recs[4].continuation == ("    watchdog_thread (sglang/srt/managers/scheduler.py:2377)",)


def test_year_from_reference_and_rollover_back() -> None:
    text = "INFO 12-31 23:59:58 [a.py:1] before midnight\nINFO 01-01 00:00:03 [a.py:1] after"
    recs = _records(text, ref=dt.datetime(2026, 1, 1, 0, 5))
    assert recs[0].ts == dt.datetime(2025, 12, 31, 23, 59, 58)
    assert recs[1].ts == dt.datetime(2026, 1, 1, 0, 0, 3)


def test_year_given_rolls_over_forward() -> None:
    text = "INFO 12-31 23:59:58 [a.py:1] x\nINFO 01-01 00:00:03 [a.py:1] y"
    recs = _records(text, year=2024)
    assert recs[0].ts is not None and recs[0].ts.year == 2024
    assert recs[1].ts is not None and recs[1].ts.year == 2025


def test_year_from_full_dates_in_the_same_file() -> None:
    text = (
        "INFO 03-14 06:55:04 __init__.py:190] Automatically detected platform cuda.\n"
        "[2025-03-14 06:55:09 TP1] Init torch distributed begin."
    )
    recs = _records(text, ref=dt.datetime(2030, 1, 1))
    assert recs[0].ts == dt.datetime(2025, 3, 14, 6, 55, 4)


def test_reference_in_the_previous_year_of_a_later_month() -> None:
    # a log of November read in February: the stamps are from the year before
    recs = _records("INFO 11-02 10:00:00 [a.py:1] x", ref=dt.datetime(2026, 2, 1))
    assert recs[0].ts == dt.datetime(2025, 11, 2, 10, 0, 0)


def test_time_only_stamps_get_the_reference_date() -> None:
    recs = _records(
        "[23:59:59 TP0] Decode batch.\n[00:00:01 TP0] Decode batch.",
        ref=dt.datetime(2024, 7, 2, 1, 0),
    )
    assert recs[0].ts == dt.datetime(2024, 7, 1, 23, 59, 59)
    assert recs[1].ts == dt.datetime(2024, 7, 2, 0, 0, 1)


def test_unknown_lines_are_counted_and_kept() -> None:
    sp = SourceParser("x")
    sp.feed(1, "some banner")
    sp.feed(2, "[2025-01-01 00:00:00 TP0] Init torch distributed begin.")
    assert sp.unknown_lines == 1 and sp.first_unknown == 1
    assert len(sp.drafts) == 2


def test_multi_megabyte_line_is_cut_not_dropped() -> None:
    sp = SourceParser("x")
    sp.feed(1, "[2025-01-01 00:00:00 TP0] server_args=" + "x" * 3_000_000)
    (rec,) = [freeze(d) for d in sp.drafts]
    assert rec.message.startswith("server_args=")
    assert "chars cut" in rec.message
    assert len(rec.message) < 300_000


def test_bar_on_the_line_after_its_worker_prefix() -> None:
    recs = _records(
        "(VllmWorker rank=2 pid=77) \n"
        "Loading safetensors checkpoint shards:  26% Completed | 22/85 [09:23<29:54, 28.49s/it]\n"
        "Loading safetensors checkpoint shards:  27% Completed | 23/85 [09:52<29:25, 28.49s/it]"
    )
    bar = recs[1]
    assert bar.grammar == "progress"
    assert bar.rank is not None and bar.rank.tp == 2 and bar.pid == 77
    assert bar.rank_reason == "the bar follows its process prefix on the line before"
    assert recs[2].rank is None  # only the bar right after the prefix


def test_interleaved_rank_prefixed_tracebacks_stay_apart() -> None:
    recs = _records(
        "[2025-01-01 00:00:00 TP0] Decode batch. #running-req: 1\n"
        "[rank0]: Traceback (most recent call last):\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank0]:   File "a.py", line 1, in all_reduce\n'
        '[rank1]:   File "b.py", line 2, in barrier\n'
        "[rank0]: RuntimeError: NCCL error: unhandled system error\n"
        "[rank1]: KeyboardInterrupt"
    )
    assert [r.line for r in recs] == [1, 2, 3]
    r0, r1 = recs[1], recs[2]
    assert r0.rank is not None and r0.rank.tp == 0 and r1.rank is not None and r1.rank.tp == 1
    assert r0.continuation == ('  File "a.py", line 1, in all_reduce',
                               "RuntimeError: NCCL error: unhandled system error")
    assert r1.continuation == ('  File "b.py", line 2, in barrier', "KeyboardInterrupt")
    assert recs[0].continuation == ()  # SGLang's TP0 stream is not torch's [rank0]


def test_repeated_kinds_are_counted_not_parsed_once_a_source_is_large(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import diag.parse.records as records

    monkeypatch.setattr(records, "REPEAT_CAP_AFTER", 10)
    monkeypatch.setattr(records, "REPEAT_KEEP", 3)
    sp = SourceParser("spam.log")
    n = 0
    for i in range(100):
        n += 1
        sp.feed(n, f"[2026-02-23 01:00:{i % 60:02d} TP0] WARNING x.py:1: queue is long ({i})")
        n += 1
        sp.feed(n, f"    detail line {i}")  # follows its head: kept or skipped with it
    n += 1
    sp.feed(n, "[2026-02-23 01:02:00 TP0] Load weight end. type=X")  # a new kind: kept
    n += 1
    sp.feed(n, "[2026-02-23 01:02:01 TP0] WARNING x.py:1: queue is long (999)", force=True)
    msgs = [d.p.message for d in sp.drafts]
    assert len(msgs) == 10 + 3 + 2
    assert msgs[-2].startswith("Load weight end")
    assert msgs[-1].endswith("(999)")  # forced: a rank's last line is never skipped
    assert sp.repeats == 2 * (100 - 13)
    assert all(len(d.continuation) == 1 for d in sp.drafts[:13])


def test_frames_that_lost_their_indentation_still_attach() -> None:
    recs = _records(
        "Traceback (most recent call last):\n"
        'File "/vllm/model_executor/model_loader/weight_utils.py", line 406, in safetensors_weights_iterator\n'
        'with safe_open(st_file, framework="pt") as f:\n'
        "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer"
    )
    tb = recs[0]
    assert tb.continuation[0].startswith('File "/vllm/model_executor')
    assert recs[-1].message.startswith("safetensors_rust.SafetensorError") or tb.continuation[
        -1
    ].startswith("safetensors_rust.SafetensorError")


def test_the_parse_memo_pausing_on_texts_that_do_not_recur_changes_no_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(speed) A memo that seldom serves (a stamp on every line) stops remembering for a
    while, then looks again: the records are those of a parse that remembers nothing."""
    import diag.parse.records as records

    lines = [f"[2025-03-29 18:18:{i % 60:02d} TP{i % 4}] WARNING x.py:{i}: request {i:x} cut"
             for i in range(300)]
    lines += ["[2025-03-29 18:19:00 TP0] Load weight end. type=X, mem usage=1.2 GB"] * 100
    lines += SGLANG_TRACEBACK.split("\n") * 3
    text = "\n".join(lines)
    monkeypatch.setattr(records, "_MEMO_PROBE", 16)
    monkeypatch.setattr(records, "_MEMO_PAUSE", 64)
    sp = SourceParser("x.log")
    for i, line in enumerate(lines[:300], start=1):
        sp.feed(i, line)
    assert 16 <= len(sp._memo) < 100  # it paused on the warnings, and looked again
    remembered = _records(text)
    monkeypatch.setattr(records, "_MEMO_TEXT", -1)  # nothing remembered
    assert _records(text) == remembered
