"""More of the rules engine on hand-built records: a 0% bar followed only by notices, the
store-connect warnings a later phase clears, Dynamo's error footer, an offline engine's
end, and an exception's message the framework logged before its traceback."""

from __future__ import annotations

import dataclasses
import datetime as dt

from test_rules_engine import SRC, T0, analysis, ids, rec, timeline

from diag.model import Event, Record
from diag.rules import apply_rules

END = T0 + dt.timedelta(seconds=55)


def _event(r: Record, phase: str, kind: str = "progress") -> Event:
    return Event(SRC, r.line, r.ts, r.rank, phase, kind, "test.event", r.message)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# a 0% bar, then only notices


def _bar_then(*after: Record) -> list[Record]:
    begin = rec(54, "Capture cuda graph begin. This can take up to several minutes.", s=50)
    bar = rec(
        56, "Capturing batches (bs=64 avail_mem=30.10 GB):   0%|          | 0/12 [00:00<?, ?it/s]",
        s=55,
    )
    return [begin, dataclasses.replace(bar, ts=None, level=None), *after]


def _stall_out(records: list[Record]) -> list[str]:
    ranks = (timeline(0, "cuda_graph", end_s=55, ended=False, line=54),)
    events = (_event(records[0], "cuda_graph", "begin"),)
    return ids(apply_rules(analysis(ranks=ranks, events=events, log_end=END), records))


def test_a_zero_bar_followed_by_an_import_warning_is_still_the_last_step() -> None:
    warn = rec(
        57, "Unexpected error during package walk: some.optional.module", s=55, level="WARNING"
    )
    records = _bar_then(warn)
    ranks = (timeline(0, "cuda_graph", end_s=55, ended=False, line=54),)
    events = (_event(records[0], "cuda_graph", "begin"),)
    out = apply_rules(analysis(ranks=ranks, events=events, log_end=END), records)
    (f,) = [f for f in out.findings if f.id == "startup.stalled"]
    assert "0/12" in f.message and "never advanced" in f.message
    assert 56 in {e.line for e in f.evidence}  # the bar is the reason's line


def test_a_zero_bar_followed_by_a_finished_step_or_a_cut_line_is_no_stall() -> None:
    # a sub-step that finished: the log ends after a step that ended (a cut excerpt)
    done = rec(57, "flashinfer.jit: Finished loading JIT ops: batch_prefill_bf16", s=55)
    assert "startup.stalled" not in _stall_out(_bar_then(done))
    took = rec(57, "Compiling a graph for dynamic shape takes 1.18 s", s=55)
    assert "startup.stalled" not in _stall_out(_bar_then(took))
    # the excerpt cut a line printed whole before it: what it said is unknown
    warn = rec(57, "Unexpected error during package walk: some.optional.module", s=55)
    cut = rec(58, "Unexpected error during pack", s=55)
    assert "startup.stalled" in _stall_out(_bar_then(warn))
    assert "startup.stalled" not in _stall_out(_bar_then(warn, cut))
    # an error after the bar is no notice
    err = rec(57, "RuntimeError: CUDA error: out of memory", s=55, level="ERROR")
    assert "startup.stalled" not in _stall_out(_bar_then(err))


# ---------------------------------------------------------------------------
# torch's store-connect warnings


_CONNECT = (
    "[c10d] The client socket has failed to connect to [node-a]:29500 (errno: 99 - Cannot "
    "assign requested address)."
)


def test_a_connect_warning_followed_by_model_loading_was_retried_with_success() -> None:
    warn = rec(14, _CONNECT, s=2, level="WARNING")
    load = rec(18, "Starting to load model /models/m...", s=6)
    events = (_event(load, "weights_load", "begin"),)
    out = apply_rules(analysis(events=events, framework="vllm"), [warn, load])
    assert "dist.connect_failed" not in ids(out)


def test_a_connect_warning_with_nothing_after_it_or_a_raise_stays() -> None:
    warn = rec(14, _CONNECT, s=2, level="WARNING")
    world = rec(
        12, "world_size=2 rank=1 local_rank=1 distributed_init_method=tcp://x:1 backend=nccl"
    )
    events = (_event(world, "dist_init"),)
    out = apply_rules(analysis(events=events, framework="vllm"), [world, warn])
    assert "dist.connect_failed" in ids(out)
    # the raise after every address failed is no retry notice, whatever follows it
    raised = rec(
        14,
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
        "while trying to connect to (10.0.0.1, 29500).",
        s=2,
        level="ERROR",
    )
    load = rec(18, "Starting to load model /models/m...", s=600)
    events = (_event(load, "weights_load", "begin"),)
    out = apply_rules(analysis(events=events, framework="vllm"), [raised, load])
    assert "dist.connect_failed" in ids(out)


# ---------------------------------------------------------------------------
# Dynamo's error footer


_FOOTER = (
    "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if "
    "you're reporting a bug to PyTorch). For even more developer context, set "
    'TORCH_LOGS="+dynamo"'
)


def _user_code_frames() -> Record:
    return rec(
        1,
        'File "/venv/lib/python3.12/site-packages/sglang/srt/models/llama.py", line 10, in forward',
        level="",
        cont=(
            "    x = self.mlp(x)",
            'File "/venv/lib/python3.12/site-packages/torch/_dynamo/polyfills/__init__.py", '
            "line 392, in getattr_and_trace",
            "    return fn(*args[2:], **kwargs)",
            'File "/usr/lib/python3.12/subprocess.py", line 828, in __init__',
            "    self._waitpid_lock = threading.Lock()",
        ),
    )


def test_dynamos_footer_closing_cut_frames_is_a_compile_error() -> None:
    frames = _user_code_frames()
    footer = rec(9, _FOOTER, level="")
    events = (_event(frames, "compile", "mark"),)
    out = apply_rules(analysis(events=events), [frames, footer])
    (f,) = [f for f in out.findings if f.id == "compile.error"]
    assert [e.line for e in f.evidence] == [9]
    assert "Dynamo" in f.message and "__init__" in f.message


def test_dynamos_footer_is_no_compile_error_under_an_oom_or_before_later_progress() -> None:
    frames = _user_code_frames()
    footer = rec(9, _FOOTER, level="")
    oom = rec(
        8,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.00 GiB is free.",
        level="ERROR",
    )
    events = (_event(frames, "compile", "mark"),)
    out = apply_rules(analysis(events=events), [frames, oom, footer])
    assert "compile.error" not in ids(out) and "cuda.oom" in ids(out)
    # Dynamo suppressed the error and the start went on (a capture after it)
    capture = rec(12, "Capture cuda graph begin. This can take up to several minutes.")
    events = (_event(frames, "compile", "mark"), _event(capture, "cuda_graph", "begin"))
    out = apply_rules(analysis(events=events), [frames, footer, capture])
    assert "compile.error" not in ids(out)


# ---------------------------------------------------------------------------
# an offline LLM(...) engine ends at warmup


def test_an_offline_engine_ready_is_no_cut_excerpt_and_no_stall() -> None:
    def vllm(line: int, text: str, s: float, process: str | None, logger: str) -> Record:
        pid = 9900 if process else None
        return Record(
            SRC, line, text, text, T0 + dt.timedelta(seconds=s), process=process, pid=pid,
            level="INFO", logger_file=logger, grammar="vllm",
        )

    front = vllm(7, "Resolved architecture: Qwen2ForCausalLM", 0, None, "model.py")
    ready = vllm(
        40, "init engine (profile, create kv cache, warmup model) took 6.57 seconds", 30,
        "EngineCore", "core.py",
    )
    after = vllm(41, "Asynchronous scheduling is enabled.", 31, "EngineCore", "vllm.py")
    events = (
        Event(SRC, 7, T0, None, "model_config", "progress", "test.arch", front.message),
        Event(SRC, 40, ready.ts, None, "warmup", "end", "vllm.init_engine_took", ready.message),
    )
    a = dataclasses.replace(analysis(events=events, framework="vllm"), reached="warmup")
    out = ids(apply_rules(a, [front, ready, after]))
    assert "startup.cut_excerpt" not in out and "startup.stalled" not in out
    # vllm serve's API server in the same log: its port is still to come (a cut excerpt)
    api = dataclasses.replace(front, line=6, message="vLLM API server version 0.8.5",
                              logger_file="api_server.py")
    out = ids(apply_rules(a, [api, front, ready, after]))
    assert "startup.cut_excerpt" in out


# ---------------------------------------------------------------------------
# the framework logged the exception's message before its traceback


def test_an_exceptions_message_logged_before_the_traceback_joins_its_evidence() -> None:
    logged = rec(
        2,
        "Piecewise CUDA Graph failed with error: Attempted to call function marked as skipped",
        tp=0,
        cont=("  Explanation: Dynamo does not know how to trace the builtin `posix.stat.`",),
    )
    exc = rec(
        34, "torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped",
        level="",
    )
    events = (_event(exc, "compile", "mark"),)
    out = apply_rules(analysis(events=events), [logged, exc])
    (f,) = [f for f in out.findings if f.id == "compile.error"]
    assert [e.line for e in f.evidence] == [2, 34]
    # another message above is not the same error
    other = dataclasses.replace(logged, message="Piecewise CUDA Graph failed with error: boom")
    out = apply_rules(analysis(events=events), [other, exc])
    (f,) = [f for f in out.findings if f.id == "compile.error"]
    assert [e.line for e in f.evidence] == [34]
