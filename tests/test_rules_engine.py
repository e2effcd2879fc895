"""The rules engine on hand-built records and analyses: grouping, cascades, limits,
timeouts, sorting, user rule folders, and the aggregate checks."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from pathlib import Path

import pytest

from diag.errors import RuleError
from diag.model import (
    Analysis,
    Event,
    PhaseInterval,
    RankId,
    RankTimeline,
    Record,
)
from diag.rules import apply_rules, needles
from diag.rules.engine import hits_for_line
from diag.rules.loader import load_dir, load_rules
from diag.rules.specdec import parse_spec_line, speedup, summarize

T0 = dt.datetime(2026, 2, 22, 22, 35, 0)
SRC = "server.log"


def rec(
    line: int,
    message: str,
    *,
    tp: int | None = None,
    s: float = 0.0,
    level: str = "INFO",
    logger: str | None = None,
    cont: tuple[str, ...] = (),
) -> Record:
    return Record(
        source=SRC,
        line=line,
        message=message,
        raw=message,
        ts=T0 + dt.timedelta(seconds=s),
        rank=RankId(tp=tp) if tp is not None else None,
        level=level,
        logger_file=logger,
        continuation=cont,
    )


def analysis(
    *,
    ranks: tuple[RankTimeline, ...] = (),
    events: tuple[Event, ...] = (),
    log_end: dt.datetime | None = None,
    framework: str = "sglang",
    config: dict[str, object] | None = None,
    stragglers: tuple[RankId, ...] = (),
) -> Analysis:
    if not events:  # the phase events behind the timelines
        events = tuple(
            Event(SRC, iv.last_line, iv.end, r.rank, iv.phase, "end", "test.phase", "x")
            for r in ranks
            for iv in r.phases
        )
    return Analysis(
        sources=(SRC,),
        framework=framework,
        version=None,
        config=config or {},
        ranks=ranks,
        expected_ranks=tuple(r.rank for r in ranks),
        missing_ranks=(),
        stragglers=stragglers,
        log_end=log_end,
        records=0,
        events=events,
    )


def timeline(
    tp: int, phase: str, *, end_s: float, ended: bool = True, lines: int = 20, line: int = 100
) -> RankTimeline:
    iv = PhaseInterval(
        phase=phase,
        start=T0,
        end=T0 + dt.timedelta(seconds=end_s),
        first_line=line - 10,
        last_line=line,
        source=SRC,
        ended=ended,
    )
    return RankTimeline(
        rank=RankId(tp=tp),
        phases=(iv,),
        last_ts=T0 + dt.timedelta(seconds=end_s),
        silent_s=None,
        line_count=lines,
    )


def ids(a: Analysis) -> list[str]:
    return [f.id for f in a.findings]


def write_rule(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


GOOD_RULE = """\
id: custom.disk_full
title: Disk full
severity: warning
role: root
frameworks: [any]
summary: The disk filled up.
why: Nothing can be written.
remedy: Free space (`df -h`).
references: [https://example.org/disk]
needles: ["no space left"]
match:
  patterns: ['No space left on device']
examples:
  match: ['OSError: [Errno 28] No space left on device']
  no_match: ['all good']
"""


# ---------------------------------------------------------------------------
# grouping, cascades, sorting


def test_one_finding_per_rule_with_ranks_collapsed_and_evidence_capped() -> None:
    records = [
        rec(10 + tp, "Watchdog timeout (self.watchdog_timeout=300)", tp=tp, s=tp, level="ERROR")
        for tp in range(8)
    ]
    out = apply_rules(analysis(), records)
    (finding,) = [f for f in out.findings if f.id == "watchdog.timeout"]
    assert finding.ranks == tuple(f"TP{i}" for i in range(8))
    assert finding.evidence_total == 8
    assert 1 <= len(finding.evidence) <= 5
    assert finding.evidence[0].line == 10 and finding.evidence[0].rank == "TP0"
    assert "300 s" in finding.message and "8 ranks" in finding.message
    assert "watchdog.timeout" in out.rules_checked


def test_oom_then_launcher_sigquit_is_one_root_and_one_cascade() -> None:
    records = [
        rec(
            5,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            tp=3,
            s=1,
            level="ERROR",
        ),
        rec(9, "Received sigquit from a child proces. It usually means the child failed.", s=3),
    ]
    out = apply_rules(analysis(), records)
    by_id = {f.id: f for f in out.findings}
    assert by_id["cuda.oom"].role == "root"
    assert by_id["cuda.oom"].ranks == ("TP3",)
    assert by_id["process.killed"].role == "cascade"
    assert by_id["process.killed"].cascade_of == "cuda.oom"
    assert by_id["process.killed"].caveat


def test_sigquit_alone_stands_as_root() -> None:
    out = apply_rules(analysis(), [rec(9, "Received sigquit from a child proces.", s=3)])
    (f,) = [f for f in out.findings if f.id == "process.killed"]
    assert f.role == "root" and f.cascade_of is None


def test_findings_sorted_by_severity_then_time() -> None:
    records = [
        rec(1, "Attention backend not set. Use triton backend by default.", s=0),
        rec(
            2,
            "Acceleration for non-quantized schemes is not supported by Compressed Tensors. "
            "Falling back to UnquantizedLinearMethod",
            tp=3,
            s=1,
            level="WARNING",
        ),
        rec(
            3,
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            tp=1,
            s=9,
            level="ERROR",
        ),
        rec(4, "zmq.error.ZMQError: Address already in use", tp=0, s=5, level="ERROR"),
    ]
    out = apply_rules(analysis(), records)
    order = ids(out)
    assert order.index("dist.port_in_use") < order.index("cuda.error")  # both errors, earlier first
    assert order.index("cuda.error") < order.index("quant.fallback_unquantized")
    assert order[-1] == "attention.backend_fallback"
    sev = [f.severity for f in out.findings]
    assert sev == sorted(sev, key=["error", "warning", "info"].index)


def test_traceback_continuation_lines_are_searched_and_located() -> None:
    tb = (
        '  File "/x/model_runner.py", line 12, in forward',
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    out = apply_rules(analysis(), [rec(40, "Traceback (most recent call last):", cont=tb)])
    (f,) = [f for f in out.findings if f.id == "cuda.error"]
    assert f.evidence[0].line == 42
    assert f.evidence[0].text.startswith("RuntimeError: CUDA error")


def test_keyboard_interrupt_traceback_is_not_an_exception_finding() -> None:
    tb = ('  File "uvloop/loop.pyx", line 1512, in run_until_complete', "KeyboardInterrupt")
    out = apply_rules(analysis(), [rec(7, "[rank0]: Traceback (most recent call last):", cont=tb)])
    assert "python.exception" not in ids(out)


# ---------------------------------------------------------------------------
# limits, user folders, schema, timeouts


def test_level_phase_and_logger_limits(tmp_path: Path) -> None:
    write_rule(
        tmp_path,
        "limited.yaml",
        GOOD_RULE.replace(
            "  patterns: ['No space left on device']",
            "  patterns: ['No space left on device']\n  levels: [ERROR]\n  phases: [weights_load]\n"
            "  loggers: [weight_utils.py]",
        ),
    )
    line = "OSError: [Errno 28] No space left on device"
    ev = Event(SRC, 5, T0, None, "weights_load", "begin", "p", "Load weight begin.")
    a = analysis(events=(ev,))
    hit = rec(9, line, level="ERROR", logger="weight_utils.py:300")
    assert "custom.disk_full" in ids(apply_rules(a, [hit], extra_dirs=[tmp_path]))
    for miss in (
        rec(9, line, level="INFO", logger="weight_utils.py:300"),  # level
        rec(3, line, level="ERROR", logger="weight_utils.py:300"),  # before the phase began
        rec(9, line, level="ERROR", logger="other.py:1"),  # logger
    ):
        assert "custom.disk_full" not in ids(apply_rules(a, [miss], extra_dirs=[tmp_path]))


def test_user_folder_adds_rules_and_needles(tmp_path: Path) -> None:
    write_rule(tmp_path, "disk.yaml", GOOD_RULE)
    assert "no space left" in needles([tmp_path])
    assert "no space left" not in needles()
    out = apply_rules(
        analysis(), [rec(1, "OSError: No space left on device")], extra_dirs=[tmp_path]
    )
    assert "custom.disk_full" in ids(out)


def test_user_rule_replaces_builtin_of_same_id(tmp_path: Path) -> None:
    write_rule(tmp_path, "w.yaml", GOOD_RULE.replace("custom.disk_full", "watchdog.timeout"))
    rules = {r.id: r for r in load_rules([tmp_path])}
    assert rules["watchdog.timeout"].title == "Disk full"


@pytest.mark.parametrize(
    ("mutation", "needle"),
    [
        (lambda t: t + "colour: red\n", "colour"),
        (lambda t: t.replace("remedy: Free space (`df -h`).\n", ""), "remedy"),
        (lambda t: t.replace("'No space left on device'", "'(unclosed'"), "bad regex"),
        (lambda t: t.replace("severity: warning", "severity: fatal"), "severity"),
        (lambda t: t.replace("role: root", "role: cascade"), "cascade_of"),
        (lambda t: t.replace('needles: ["no space left"]', 'needles: ["No Space"]'), "lowercase"),
        (
            lambda t: t.replace("match:\n  patterns", "check: nonsense\nmatch:\n  patterns"),
            "unknown check",
        ),
        (lambda t: "id: [unclosed\n", "YAML"),
    ],
)
def test_bad_rule_files_are_rejected_naming_the_file(
    tmp_path: Path, mutation: object, needle: str
) -> None:
    assert callable(mutation)
    path = write_rule(tmp_path, "bad.yaml", mutation(GOOD_RULE))
    with pytest.raises(RuleError) as info:
        load_dir(tmp_path)
    assert str(path) in info.value.message
    assert needle in info.value.message


def test_duplicate_ids_in_one_folder_are_rejected(tmp_path: Path) -> None:
    write_rule(tmp_path, "a.yaml", GOOD_RULE)
    write_rule(tmp_path, "b.yaml", GOOD_RULE)
    with pytest.raises(RuleError, match="duplicate rule id"):
        load_rules([tmp_path])


def test_a_catastrophic_pattern_times_out_instead_of_hanging(tmp_path: Path) -> None:
    write_rule(
        tmp_path,
        "slow.yaml",
        GOOD_RULE.replace("['No space left on device']", "['(a|aa)+$']")
        .replace('needles: ["no space left"]', 'needles: ["aaaa"]')
        .replace("match: ['OSError: [Errno 28] No space left on device']", "match: ['aaaa']"),
    )
    records = [rec(i, "a" * 60 + "b") for i in range(20)]
    start = time.monotonic()
    out = apply_rules(analysis(), records, extra_dirs=[tmp_path])
    assert time.monotonic() - start < 5
    assert any("custom.disk_full" in n and "timed out" in n for n in out.notes)
    assert "custom.disk_full" not in ids(out)
    # the first line a timeout cost is named (a timeout depends on the machine's load)
    first = [n for n in out.notes if "timed out on" in n]
    assert len(first) == 1 and "server.log:0 (" in first[0] and "not matched" in first[0]


def test_rule_patterns_fold_case_simply() -> None:
    """Case-insensitive rule patterns fold case character by character: `regex`'s full
    folding (version 1's default) matched "ß" to "SS" and made a class repeat such as
    `[\\w./ -]{3,60}? requires` about 50x slower on a long line, close to the timeout."""
    from diag.rules.loader import _compile

    assert _compile("straße", ignore_case=True, where="t").search("STRASSE") is None
    assert _compile("straße", ignore_case=True, where="t").search("STRAßE") is not None
    lazy = _compile("straße", ignore_case=True, where="t", lazy=True)
    assert lazy.search("STRASSE") is None and lazy.search("Straße") is not None


# ---------------------------------------------------------------------------
# aggregate checks


def test_stalled_with_a_later_reference_time_names_the_silence() -> None:
    ranks = tuple(timeline(tp, "weights_load", end_s=55) for tp in range(8))
    log_end = T0 + dt.timedelta(seconds=55, hours=3, minutes=12)
    out = apply_rules(analysis(ranks=ranks, log_end=log_end), [])
    (f,) = [f for f in out.findings if f.id == "startup.stalled"]
    assert "every rank (8) finished weights_load at 22:35:55" in f.message
    assert "0 lines from any rank or process for 3 h 12 min" in f.message
    assert "no port was opened" in f.message
    assert "startup.no_listen_port" in ids(out)


def test_a_log_cut_after_a_step_ended_is_not_a_stall() -> None:
    """LABELS.md: a log that ends right after a step finished is a cut excerpt: where it
    ends is reported (info), neither a stall nor a port that never opened."""
    ranks = tuple(timeline(tp, "weights_load", end_s=55) for tp in range(2))
    end = rec(120, "Load weight end. type=LlamaForCausalLM, avail mem=20.87 GB", tp=1, s=55)
    out = apply_rules(analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=55)), [end])
    assert "startup.stalled" not in ids(out) and "startup.no_listen_port" not in ids(out)
    (f,) = [f for f in out.findings if f.id == "startup.cut_excerpt"]
    assert f.severity == "info"
    assert "the log ends after" in f.message and "Load weight end" in f.message
    assert "not proven stalled" in f.message and "later timestamp" in f.message


def test_the_interpreters_exit_notice_ends_the_run_not_the_excerpt() -> None:
    """CPython's resource tracker warns of leaked objects only once the processes exited:
    a log ending on it before `listening`, with no error, is a run that shut down
    (startup.exited), not a window cut short."""
    ranks = (timeline(0, "weights_load", end_s=55, ended=False),)
    bar = rec(
        120,
        "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:20<00:20, 5.0s/it]",
        tp=0,
        s=55,
    )
    notice = rec(
        120,
        "UserWarning: resource_tracker: There appear to be 2 leaked shared_memory objects to "
        "clean up at shutdown",
        tp=0,
        logger="resource_tracker.py",
        cont=("  warnings.warn('resource_tracker: There appear to be %d '",),
    )
    out = apply_rules(analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=55)), [bar, notice])
    (f,) = [f for f in out.findings if f.id == "startup.exited"]
    assert f.severity == "info" and "shut down before the server listened" in f.message
    assert "reached weights_load" in f.message and [e.line for e in f.evidence] == [120]
    assert "startup.cut_excerpt" not in ids(out) and "startup.stalled" not in ids(out)
    # the same bar with nothing after it: a cut excerpt, as before
    out = apply_rules(analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=55)), [bar])
    assert "startup.cut_excerpt" in ids(out) and "startup.exited" not in ids(out)


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        # the last line begins a step that never ends
        (("Capture cuda graph begin. This can take up to several minutes.",), "starts a step"),
        (
            ("flashinfer.jit: Loading JIT ops: batch_prefill_with_kv_cache_dtype_q_bf16",),
            "starts a step",
        ),
        (("Connecting to 10.0.0.2:29500",), "starts a step"),
        # a wait message that repeats with nothing between
        (
            (
                "No available shared memory broadcast block found in 60 seconds.",
                "No available shared memory broadcast block found in 60 seconds.",
            ),
            "2 times with no progress between",
        ),
        # a bar that does not move
        (("Capturing batches (avail_mem=7.08 GB):   0%|          | 0/17 [00:00<?, ?it/s]",), "0%"),
        (
            (
                "Loading checkpoint shards:  47% Completed | 8/17 [00:45<00:52, 5.8s/it]",
                "Loading checkpoint shards:  47% Completed | 8/17 [02:45<00:52, 5.8s/it]",
            ),
            "frozen",
        ),
    ],
)
def test_a_stall_needs_a_reason_and_says_which(lines: tuple[str, ...], why: str) -> None:
    ranks = tuple(timeline(tp, "weights_load", end_s=55, ended=False) for tp in range(2))
    recs = [rec(200 + i, text, tp=0, s=55) for i, text in enumerate(lines)]
    out = apply_rules(analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=55)), recs)
    (f,) = [f for f in out.findings if f.id == "startup.stalled"]
    assert why in f.message
    assert {e.line for e in f.evidence} & {200, 200 + len(lines) - 1}  # the reason's line
    assert "startup.cut_excerpt" not in ids(out)


def test_an_advancing_bar_or_a_lone_wait_is_no_stall() -> None:
    ranks = tuple(timeline(tp, "weights_load", end_s=55, ended=False) for tp in range(2))
    end = T0 + dt.timedelta(seconds=55)
    for text in (
        "Loading safetensors checkpoint shards:  26% Completed | 22/85 [09:23<29:54, 28.49s/it]",
        "No available shared memory broadcast block found in 60 seconds.",
        "Uncatalogued INFO line after the last marker",
    ):
        out = apply_rules(analysis(ranks=ranks, log_end=end), [rec(200, text, tp=0, s=55)])
        assert "startup.stalled" not in ids(out), text
        assert "startup.cut_excerpt" in ids(out), text


def test_a_lone_wait_that_states_a_long_wait_is_a_stall() -> None:
    # vLLM's Ray executor says how long it has waited for its placement group (int seconds
    # since it asked, backing off 10, 30, 70 ...): the wait measures itself
    ranks = (timeline(0, "launch", end_s=5, ended=False),)
    end = T0 + dt.timedelta(seconds=5)
    pg = (
        "Waiting for creating a placement group of specs for {} seconds. specs=[{{'GPU': 1.0}},"
        " {{'GPU': 1.0}}]. Check `ray status` to see if you have enough resources."
    )
    out = apply_rules(analysis(ranks=ranks, log_end=end), [rec(40, pg.format(630), s=5)])
    (f,) = [f for f in out.findings if f.id == "startup.stalled"]
    assert "10 min" in f.message and 40 in {e.line for e in f.evidence}
    # its first notice (10 s) is only the group not placed yet
    out = apply_rules(analysis(ranks=ranks, log_end=end), [rec(40, pg.format(10), s=5)])
    assert "startup.stalled" not in ids(out)
    assert "startup.cut_excerpt" in ids(out)


def test_a_long_wait_that_gave_up_is_a_stall() -> None:
    # vLLM's Ray placement-group wait repeats for 42 min, then its timeout and the
    # executor's shutdown follow in the same second: the start-up stalled in the wait
    ranks = (timeline(0, "model_config", end_s=5, ended=False),)
    pg = "Waiting for creating a placement group of specs for {} seconds. specs=[{{'GPU': 1.0}}]"
    waited = (10, 30, 70, 150, 310, 630, 1270, 2550)
    waits = [rec(30 + i, pg.format(w), s=5 + w) for i, w in enumerate(waited)]

    def ending(after_s: float) -> list[Record]:
        at = 5 + waited[-1] + after_s
        return [
            rec(40, "Error: Cannot provide a placement group within 1800 seconds.", s=at),
            rec(41, "Shutting down Ray distributed executor.", s=at),
        ]

    end = T0 + dt.timedelta(seconds=5 + waited[-1])
    out = apply_rules(analysis(ranks=ranks, log_end=end), [*waits, *ending(0)])
    (f,) = [f for f in out.findings if f.id == "startup.stalled"]
    assert "42 min" in f.message and "the run ended right after" in f.message
    assert {30, 37} <= {e.line for e in f.evidence}
    # the run went on long after its last wait: not a wait that gave up
    later = T0 + dt.timedelta(seconds=5 + waited[-1] + 600)
    out = apply_rules(analysis(ranks=ranks, log_end=later), [*waits, *ending(600)])
    assert all("the run ended right after" not in f.message for f in out.findings)
    # a short wait (10 s to 30 s) that ended: no stall
    out = apply_rules(
        analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=35)),
        [*waits[:2], rec(40, "Shutting down Ray distributed executor.", s=35)],
    )
    assert "startup.stalled" not in ids(out)


def test_silence_is_measured_from_the_last_line_of_any_kind() -> None:
    """An uncatalogued line 10 min after the last phase marker is activity, not silence;
    wait lines after it are not."""
    ranks = tuple(timeline(tp, "weights_load", end_s=55, ended=False) for tp in range(2))
    late = rec(300, "Using default MoE kernel config", tp=0, s=655)
    end = T0 + dt.timedelta(seconds=655)
    assert "startup.stalled" not in ids(apply_rules(analysis(ranks=ranks, log_end=end), [late]))
    waits = [
        rec(
            301 + i,
            "No available shared memory broadcast block found in 60 seconds.",
            s=715 + 60 * i,
        )
        for i in range(3)
    ]
    end = T0 + dt.timedelta(seconds=835)
    out = apply_rules(analysis(ranks=ranks, log_end=end), [late, *waits])
    (f,) = [f for f in out.findings if f.id == "startup.stalled"]
    assert "for 3 min" in f.message
    assert 300 in {e.line for e in f.evidence}


def test_no_stall_claim_when_an_error_explains_or_progress_continues() -> None:
    ranks = (timeline(0, "weights_load", end_s=55, ended=False),)
    end = T0 + dt.timedelta(seconds=55)
    err = rec(
        101,
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        tp=0,
        s=55,
        level="ERROR",
    )
    assert "startup.stalled" not in ids(apply_rules(analysis(ranks=ranks, log_end=end), [err]))
    bar = rec(
        150,
        "Loading safetensors checkpoint shards:  47% Completed | 8/17 [00:45<00:52,  5.86s/it]",
        s=55,
    )
    out = apply_rules(analysis(ranks=ranks, log_end=end), [bar])
    assert "startup.stalled" not in ids(out)
    stuck_bar = rec(
        150, "Capturing batches (avail_mem=7.08 GB):   0%|          | 0/17 [00:00<?, ?it/s]", s=55
    )
    assert "startup.stalled" in ids(apply_rules(analysis(ranks=ranks, log_end=end), [stuck_bar]))


def test_no_stall_claim_without_any_startup_line() -> None:
    """A bare stack dump gets only the analyser's fallback event: nothing to stall in."""
    fallback = Event(SRC, 1, None, None, "launch", "mark", "fallback.logged", "Thread 0x7f")
    out = apply_rules(analysis(events=(fallback,)), [])
    assert "startup.stalled" not in ids(out)


def test_dist_init_stall_is_an_init_hang() -> None:
    ranks = tuple(timeline(tp, "dist_init", end_s=10, ended=False, line=40) for tp in range(2))
    start = rec(30, "Init torch distributed begin.", tp=0, s=0)
    later = rec(35, "Using a custom store.", tp=0, s=5)
    begin = rec(40, "Init torch distributed begin.", tp=1, s=10)
    out = apply_rules(
        analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=10)), [start, later, begin]
    )
    assert {"dist.init_hang", "startup.stalled", "startup.no_listen_port"} <= set(ids(out))
    # its evidence names where the ranks began the step that never ended
    (hang,) = [f for f in out.findings if f.id == "dist.init_hang"]
    assert 30 in [e.line for e in hang.evidence]


def test_straggler_message_names_the_ranks_behind() -> None:
    ranks = tuple(timeline(tp, "kv_cache", end_s=60) for tp in range(6)) + (
        timeline(6, "weights_load", end_s=20),
        timeline(7, "weights_load", end_s=20),
    )
    a = analysis(
        ranks=ranks, stragglers=(RankId(tp=6), RankId(tp=7)), log_end=T0 + dt.timedelta(seconds=60)
    )
    (f,) = [f for f in apply_rules(a, []).findings if f.id == "rank.straggler"]
    assert f.ranks == ("TP6", "TP7")
    assert (
        "TP6 last reached weights_load" in f.message
        and "6 other ranks reached kv_cache" in f.message
    )


def test_slow_shard_loading() -> None:
    bars = [
        rec(
            10 + i,
            f"Loading safetensors checkpoint shards:  {i * 2}% Completed | {i}/46 "
            f"[{i * 18 // 60:02d}:{i * 18 % 60:02d}<13:38, 18.{i}0s/it]",
            s=i * 18,
        )
        for i in range(2, 6)
    ]
    (f,) = [f for f in apply_rules(analysis(), bars).findings if f.id == "weights.slow_load"]
    assert "18." in f.message and "46 shards" in f.message
    fast = [
        rec(
            1,
            "Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:05<00:00,  1.51it/s]",
        )
    ]
    assert "weights.slow_load" not in ids(apply_rules(analysis(), fast))


def test_a_bar_line_read_again_gives_each_record_its_own_update() -> None:
    """The bars of a message are remembered (the same bar line from every rank): each
    record still gets its own updates (its line), and a message too long to remember
    is read as before."""
    from diag.rules.checks import parse_progress

    line = "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:18<00:18, 18.0s/it]"
    first, again = parse_progress(rec(3, line)), parse_progress(rec(9, line))
    assert [(p.line, p.done, p.total, p.s_per_it) for p in first] == [(3, 1, 2, 18.0)]
    assert [(p.line, p.done, p.total, p.s_per_it) for p in again] == [(9, 1, 2, 18.0)]
    long = "x" * 2000 + " " + line
    assert [(p.line, p.done) for p in parse_progress(rec(4, long))] == [(4, 1)]


@pytest.mark.parametrize("text", [
    "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:18<00:18, 18.0s/it]",
    "(Worker_TP0 pid=111) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|   "
    "       | 0/5 [00:00<?, ?it/s]Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  "
    "20%|██        | 1/5 [00:00<00:00,  8.82it/s]Capturing CUDA graphs:  40%|████      | "
    "2/5 [00:00<00:00,  8.89it/s]",
    "[rank3]: Processed prompts: 100%|██████████| 8/8 [00:02<00:00,  3.61it/s, est. speed "
    "input: 1.2 toks/s]\rProcessed prompts:  12%|█▎ | 1/8 [00:01<00:09, 1.3s/it]",
    "x" * 300 + " Loading pt checkpoint shards: 3/8 [01:02<01:40, 20.1s/it]",
    "Step 3 12/34 [05<07, 1.5it/s] and then 7/9 [00:01<00:00, 2.0it/s]",
    "a" * 95 + " 1/2 [00:01<00:01, 1.00s/it]",
    "no bar: 3/8 files, 12.5 it/s on average",
])
def test_bar_updates_read_as_the_one_pattern_reads_them(text: str) -> None:
    """bar_updates (counts first, then each label read backwards: linear time) finds the
    updates _BAR's leftmost matches find, with the same groups."""
    from diag.rules.checks import _BAR, bar_updates

    names = ("label", "done", "total", "elapsed", "left", "rate", "unit")
    want = [tuple(m.group(g) for g in names) for m in _BAR.finditer(text)]
    got = [tuple(u.group(g) for g in names) for u in bar_updates(text)]
    assert got == want


def test_shard_pace_is_the_bars_elapsed_time_over_its_count() -> None:
    """tqdm's s/it is a moving average of the last items: a loader of many threads whose
    first wave of shards finishes together after a long read shows 37.5 s/it at 5/64, and
    the bar is at 51/64 three seconds later (2.5 min in all: 3 s a shard). The pace over
    the whole bar decides; a bar that is slow over its whole length still is."""
    burst = [
        (3, "5/64 [02:29<36:52, 37.50s/it]"),
        (4, "6/64 [02:29<26:23, 27.31s/it]"),
        (5, "51/64 [02:32<00:01, 12.47it/s]"),
    ]
    bars = [rec(n, f"Multi-thread loading shards:  8% Completed | {b}") for n, b in burst]
    assert "weights.slow_load" not in ids(apply_rules(analysis(), bars))
    slow = [rec(n, f"Multi-thread loading shards:  8% Completed | {b}") for n, b in (
        (3, "5/64 [02:29<36:52, 37.50s/it]"), (4, "9/64 [04:30<27:30, 30.00s/it]"))]
    (f,) = [f for f in apply_rules(analysis(), slow).findings if f.id == "weights.slow_load"]
    assert "30.0 s per shard" in f.message and "9 of 64 in 4 min 30 s" in f.message
    assert [e.line for e in f.evidence] == [3, 4]


def test_a_stretch_of_slow_shards_is_slow_though_the_bar_ends_fast() -> None:
    """Several shards in a row at the limit or more, read from consecutive updates, make a
    slow load though the bar's overall pace ends under the limit (later shards fast); one
    slow step before a burst (a many-threaded loader's first wave) does not."""
    steps = [(0, 0), (1, 3), (2, 6), (3, 40), (4, 80), (5, 115), (6, 150), (7, 152),
             (20, 170), (40, 190)]
    bar = "Multi-thread loading shards:  {p}% Completed | {d}/40 [{m:02d}:{s:02d}<00:10, 1.0s/it]"
    line = "".join(bar.format(p=d * 100 // 40, d=d, m=t // 60, s=t % 60) for d, t in steps)
    (f,) = [
        f for f in apply_rules(analysis(), [rec(42, line)]).findings if f.id == "weights.slow_load"
    ]
    assert "shards 3 to 6 of 40" in f.message and "36.0 s per shard" in f.message
    assert "4.8 s per shard" in f.message and [e.line for e in f.evidence] == [42]
    # three slow shards in a row are no stretch (min_slow_run 4); one slow wave is none
    short = [(0, 0), (1, 3), (2, 40), (3, 80), (4, 115), (40, 190)]
    wave = [(0, 0), (4, 23), (5, 149), (30, 152), (40, 160)]
    for pts in (short, wave):
        text = "".join(bar.format(p=d * 100 // 40, d=d, m=t // 60, s=t % 60) for d, t in pts)
        assert "weights.slow_load" not in ids(apply_rules(analysis(), [rec(42, text)])), pts


# ---------------------------------------------------------------------------
# speculative decoding


@pytest.mark.parametrize(
    ("line", "rate", "mean_len", "positions"),
    [
        (
            "Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, "
            "Number of speculative tokens: 5, Number of accepted tokens: 9876, "
            "Number of draft tokens: 15360, Number of emitted tokens: 11234.",
            0.642,
            None,
            5,
        ),
        (
            "SpecDecoding metrics: Draft acceptance rate: 88.8%, Mean acceptance length: 5.44, "
            "Accepted: 1000 tokens, Drafted: 1126 tokens",
            0.888,
            5.44,
            None,
        ),
        (
            "SpecDecoding metrics: Mean acceptance length: 1.03, "
            "Accepted throughput: 2.50 tokens/s, "
            "Drafted throughput: 365.14 tokens/s, Accepted: 25 tokens, Drafted: 3652 tokens, "
            "Per-position acceptance rate: 0.027, 0.000, 0.000, 0.000, "
            "Avg Draft acceptance rate: 0.7%",
            0.007,
            1.03,
            4,
        ),
        (
            "Decode batch, #running-req: 3, #token: 1234, token usage: 0.01, accept len: 2.17, "
            "accept rate: 0.54, gen throughput (token/s): 80.1",
            0.54,
            2.17,
            None,
        ),
    ],
)
def test_spec_lines_of_every_generation(
    line: str, rate: float, mean_len: float | None, positions: int | None
) -> None:
    report = parse_spec_line(rec(1, line))
    assert report is not None
    assert report.rate == pytest.approx(rate)
    assert report.mean_len == mean_len
    assert report.positions == positions


def test_story_break_even_numbers() -> None:
    # 15% acceptance with 3 draft steps: L = 1.45, 1.45 / (1 + 3 * 0.4) = 0.66x
    assert speedup(1.45, 3) == pytest.approx(0.659, abs=0.001)
    lines = [
        rec(i, "Decode batch, #running-req: 8, accept len: 1.45, accept rate: 0.15", s=i)
        for i in range(5)
    ]
    summary = summarize(lines, {"speculative": {"num_steps": 3}})
    assert summary is not None and summary.steps == 3 and summary.below_break_even
    out = apply_rules(analysis(config={"speculative": {"num_steps": 3}}), lines)
    (f,) = [f for f in out.findings if f.id == "specdec.low_acceptance"]
    assert "1.45" in f.message and "15.0%" in f.message and "0.66x" in f.message
    assert "3 draft steps" in f.message


def test_good_acceptance_is_not_flagged() -> None:
    lines = [
        rec(
            1,
            "SpecDecoding metrics: Draft acceptance rate: 88.8%, Mean acceptance length: "
            "5.44, Accepted: 1000 tokens, Drafted: 1126 tokens",
        )
    ]
    assert "specdec.low_acceptance" not in ids(apply_rules(analysis(framework="vllm"), lines))


def test_a_cut_off_traceback_names_its_innermost_frame() -> None:
    cont = (
        '  File "/sgl/scheduler.py", line 1999, in run_scheduler_process',
        "    scheduler = Scheduler(server_args)",
        '  File "/sgl/tp_worker.py", line 74, in __init__',
        "                ^^^^^^^^^^",
    )
    out = apply_rules(
        analysis(),
        [
            rec(
                3,
                "Scheduler hit an exception: Traceback (most recent call last):",
                tp=0,
                level="ERROR",
                cont=cont,
            )
        ],
    )
    (f,) = [f for f in out.findings if f.id == "python.exception"]
    assert f.message == (
        "Scheduler hit an exception; the traceback is cut off at: "
        'File "/sgl/tp_worker.py", line 74, in __init__'
    )


def test_rules_checked_lists_finding_ids_once() -> None:
    out = apply_rules(analysis(), [])
    assert "cuda.oom" in out.rules_checked and "cuda.oom_kv_cache" not in out.rules_checked
    assert len(out.rules_checked) == len(set(out.rules_checked))
    assert out.findings == ()


def test_story_spec_decode_end_to_end_from_an_sglang_log() -> None:
    from diag.analyze import analyze_text

    args = (
        "[2026-02-23 10:00:00] server_args=ServerArgs(model_path='kimi', tp_size=8, "
        "speculative_algorithm='EAGLE3', speculative_num_steps=3, port=30000)"
    )
    decode = (
        "[2026-02-23 10:05:{s:02d} TP0] Decode batch, #running-req: 8, #token: 9000, "
        "token usage: 0.02, accept len: {n}, accept rate: 0.15, cuda graph: True, "
        "gen throughput (token/s): 40.1, #queue-req: 0,"
    )
    text = "\n".join([args, decode.format(s=0, n="1.44"), decode.format(s=10, n="1.46")])
    (f,) = [f for f in analyze_text(text).findings if f.id == "specdec.low_acceptance"]
    assert "1.45 tokens/step" in f.message and "3 draft steps (config)" in f.message
    assert "0.66x" in f.message
    assert [e.line for e in f.evidence] == [2, 3]


def test_a_timeout_after_a_rank_died_is_a_cascade_of_that_death() -> None:
    oom = rec(
        5,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        tp=3,
        s=1,
        level="ERROR",
    )
    timeouts = [
        rec(
            20 + tp,
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600051 "
            "milliseconds before timing out.",
            tp=tp,
            s=601,
            level="ERROR",
        )
        for tp in (0, 1, 2)
    ]
    by_id = {f.id: f for f in apply_rules(analysis(), [oom, *timeouts]).findings}
    assert by_id["cuda.oom"].role == "root"
    assert by_id["nccl.timeout"].role == "cascade"
    assert by_id["nccl.timeout"].cascade_of == "cuda.oom"
    assert by_id["nccl.timeout"].ranks == ("TP0", "TP1", "TP2")


def test_a_timeout_first_stays_the_root_of_what_follows() -> None:
    timeout = rec(
        2,
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=10000) ran for 10090 "
        "milliseconds before timing out.",
        tp=0,
        s=10,
        level="ERROR",
    )
    exc = rec(
        30,
        "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated "
        "with signal SIGABRT",
        s=70,
        level="ERROR",
    )
    by_id = {f.id: f for f in apply_rules(analysis(), [timeout, exc]).findings}
    assert by_id["nccl.timeout"].role == "root"
    assert by_id["python.exception"].role == "cascade"
    assert by_id["python.exception"].cascade_of == "nccl.timeout"


def test_missing_ranks_only_when_the_present_ones_say_enough() -> None:
    def with_missing(lines: int) -> Analysis:
        ranks = tuple(timeline(tp, "kv_cache", end_s=60, lines=lines) for tp in range(6))
        a = analysis(ranks=ranks, log_end=T0 + dt.timedelta(seconds=60))
        return dataclasses.replace(
            a,
            expected_ranks=tuple(RankId(tp=i) for i in range(8)),
            missing_ranks=(RankId(tp=6), RankId(tp=7)),
        )

    (f,) = [f for f in apply_rules(with_missing(20), []).findings if f.id == "rank.missing"]
    assert f.ranks == ("TP6", "TP7")
    assert f.message.startswith("TP6, TP7 never logged a line; 6 of 8 expected ranks did")
    # an excerpt with two lines per rank proves nothing about absence
    assert "rank.missing" not in ids(apply_rules(with_missing(2), []))


def test_patterns_are_gated_by_their_literals() -> None:
    """Each pattern carries the literals one of which its matches contain; a line without
    them never reaches the regex (speed), and gating never drops a real match."""
    from diag.rules.loader import builtin_rules

    rules = {r.id: r for r in builtin_rules()}
    spec = rules["cuda.error"].match
    assert spec is not None
    assert spec.gates[0] == ("cuda error: ",)
    gated = [g for r in rules.values() if r.match for g in r.match.gates]
    assert sum(g is not None for g in gated) >= 0.9 * len(gated)


def test_a_serving_log_ending_on_an_error_line_is_not_a_crash() -> None:
    ranks = (timeline(0, "serving", end_s=60),)
    last = rec(
        500, "Aborted request chatcmpl-1 due to client disconnect", tp=0, s=60, level="ERROR"
    )
    assert "python.exception" not in ids(apply_rules(analysis(ranks=ranks), [last]))
    starting = (timeline(0, "cuda_graph", end_s=60, ended=False),)
    cut = rec(500, "ERROR scheduler.run_sch", tp=0, s=60, level="ERROR")
    (f,) = [
        f
        for f in apply_rules(analysis(ranks=starting), [cut]).findings
        if f.id == "python.exception"
    ]
    assert "traceback cut off" in f.message


def test_a_huge_glued_progress_line_neither_hangs_nor_raises() -> None:
    bar = "Loading safetensors checkpoint shards: 1/2 [00:20<00:20, 20.0s/it] "
    huge = rec(1, bar * 200_000)  # ~13 MB of updates with no newline between them
    start = time.monotonic()
    out = apply_rules(analysis(), [huge])
    assert time.monotonic() - start < 10
    assert "weights.slow_load" in ids(out)  # read from the first 64 KiB


def test_good_acceptance_is_reported_as_info_with_its_numbers() -> None:
    lines = [
        rec(i, f"Decode batch, #running-req: 8, accept len: {v}, accept rate: 0.72", s=i * 10)
        for i, v in enumerate(("3.10", "3.20", "3.30"))
    ]
    out = apply_rules(analysis(config={"speculative": {"num_steps": 3}}), lines)
    (f,) = [f for f in out.findings if f.id == "specdec.acceptance"]
    assert f.severity == "info"
    assert "mean acceptance length 3.20 tokens/step" in f.message
    assert "1.45x" in f.message  # 3.2 / (1 + 3 * 0.4)
    assert "specdec.low_acceptance" not in ids(out)


def test_advice_at_info_level_is_no_oom_or_init_hang() -> None:
    """INFO lines that mention running out of memory (advice) or a timeout (settings) do
    not fire cuda.oom / dist.init_hang; the same text as an error does."""
    advice = rec(
        10,
        "CUDA graphs reserve memory: out of memory on the GPU is possible with large batch "
        "sizes; consider lowering gpu_memory_utilization",
        level="INFO",
    )
    setting = rec(11, "init_process_group: timeout set to 1800 s", level="INFO")
    rules = {r.id: r for r in load_rules()}
    assert hits_for_line(rules["cuda.oom"], advice.message)  # the pattern alone would fire
    assert hits_for_line(rules["dist.init_hang"], setting.message)
    out = apply_rules(analysis(), [advice, setting])
    assert "cuda.oom" not in ids(out) and "dist.init_hang" not in ids(out)
    error = rec(
        12, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", level="INFO"
    )
    assert "cuda.oom" in ids(apply_rules(analysis(), [error]))


def test_a_faulthandler_dump_without_its_header_is_a_kill() -> None:
    dump = [
        rec(20, "Decode batch, #running-req: 3", tp=0, s=5),
        Record(
            SRC,
            21,
            "Thread 0x00007f71b9fff640 (most recent call first):",
            continuation=(
                '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
                '  File "/usr/lib/python3.10/threading.py", line 607 in wait',
                "",
                "Current thread 0x00007f7f00001000 (most recent call first):",
                '  File "/sgl/srt/managers/scheduler.py", line 900 in event_loop_overlap',
            ),
        ),
    ]
    out = apply_rules(analysis(), dump)
    (f,) = [f for f in out.findings if f.id == "process.killed"]
    assert f.evidence[0].line == 21 and "fatal signal" in f.message
    # a watchdog's timed dump (faulthandler.dump_traceback_later) is not a kill
    timed = [dump[0], Record(SRC, 21, "Timeout (0:05:00)!"), dataclasses.replace(dump[1], line=22)]
    assert "process.killed" not in ids(apply_rules(analysis(), timed))


def test_keyerror_in_transformers_config_mapping_is_an_unknown_model_type() -> None:
    from diag.analyze import analyze_text

    tb = (
        "[2026-02-26 15:56:59] ERROR: Traceback (most recent call last):\n"
        '[2026-02-26 15:56:59] ERROR:   File "/usr/lib/python3/transformers/models/auto/'
        'configuration_auto.py", line 1048, in __getitem__\n'
        "[2026-02-26 15:56:59] ERROR:     raise KeyError(key)\n"
        "[2026-02-26 15:56:59] ERROR: KeyError: 'glm_moe_dsa'\n"
        "[2026-02-26 15:56:59] ERROR: \n"
        "[2026-02-26 15:56:59] ERROR: During handling of the above exception, another exceptio\n"
    )
    found = {f.id: f for f in analyze_text(tb).findings}
    assert "glm_moe_dsa" in found["model.unsupported"].message
    assert found["model.unsupported"].evidence[0].line == 4
    # a KeyError elsewhere is no model type
    other = tb.replace("transformers/models/auto/configuration_auto.py", "app/cache.py")
    assert "model.unsupported" not in {f.id for f in analyze_text(other).findings}


def test_a_traceback_ending_in_the_registry_raise_is_an_unsupported_architecture() -> None:
    from diag.analyze import analyze_text

    head = "(VllmWorkerProcess pid=77) ERROR 03-02 11:20:05 [multiproc_worker_utils.py:239] "
    tb = "".join(
        head + line + "\n"
        for line in (
            '  File "/opt/venv/lib/python3.12/site-packages/vllm/model_executor/models/'
            'registry.py", line 470, in resolve_model_cls',
            "    return self._raise_for_unsupported(architectures)",
            '  File "/opt/venv/lib/python3.12/site-packages/vllm/model_executor/models/'
            'registry.py", line 415, in _raise_for_unsupported',
            "    raise ValueError(",
        )
    )
    found = {f.id: f for f in analyze_text(tb).findings}
    assert [e.line for e in found["model.unsupported"].evidence] == [3]
    # a deeper frame below it: raised elsewhere (building the message), no refusal shown
    deeper = tb + head + '  File "/opt/venv/lib/python3.12/site-packages/vllm/x.py", line 9, in f\n'
    assert "model.unsupported" not in {f.id for f in analyze_text(deeper).findings}
    # the same function name in another package's file is not the registry
    other = tb.replace("vllm/model_executor/models/registry.py", "myapp/registry.py")
    assert "model.unsupported" not in {f.id for f in analyze_text(other).findings}
    # the same function's other raise: a registered architecture whose class failed to
    # import or be inspected (vLLM 0.6.6+, SGLang 0.4.1+) is no unsupported model
    inspected = tb + (
        head + "ValueError: Model architectures ['LlamaForCausalLM'] failed to be inspected. "
        "Please check the logs for more details.\n"
    )
    assert "model.unsupported" not in {f.id for f in analyze_text(inspected).findings}


def test_a_child_process_header_and_a_repeated_wait_are_evidence() -> None:
    from diag.analyze import analyze_text

    text = (
        "INFO 07-02 22:32:19 [utils.py:364] Started DP Coordinator process (PID: 279)\n"
        "Process VLLM_DP_Coordinator:\n"
        "Traceback (most recent call last):\n"
        '  File "/v/vllm/entrypoints/openai/api_server.py", line 1387, in <module>\n'
        "    uvloop.run(run_server(args))\n"
        '  File "/v/uvloop/__init__.py", line 109, in run\n'
    )
    exc = {f.id: f for f in analyze_text(text).findings}["python.exception"]
    assert [e.line for e in exc.evidence] == [2, 3]


def test_logger_exception_outside_except_is_no_exception() -> None:
    # vLLM V0 client.py logs the engine's death with logger.exception() outside an except
    # block: Python prints "NoneType: None" where the traceback would be
    from diag.analyze import analyze_text

    died = "ERROR 12-01 13:05:02 client.py:282] RuntimeError('Engine process (pid 76) died.')\n"
    none = "ERROR 12-01 13:05:02 client.py:282] NoneType: None\n"
    ids = {f.id for f in analyze_text(died + none).findings}
    assert "python.exception" not in ids and "process.killed" in ids
    raised = "ERROR 12-01 13:05:02 engine.py:158] AssertionError('Only FlashAttention.')\n"
    assert "python.exception" in {f.id for f in analyze_text(raised).findings}


def test_a_last_line_cut_mid_word_is_no_stall() -> None:
    from diag.analyze import analyze_text

    head = (
        "[2025-02-17 14:07:28 TP0] Capture cuda graph begin. This can take up to several "
        "minutes.\n"
        "2025-02-17 14:07:29,838 - INFO - flashinfer.jit: Loading JIT ops: batch_prefill_bf16_x\n"
        "2025-02-17 14:07:29,874 - INFO - flashinfer.jit: Finished loading JIT ops: "
        "batch_prefill_bf16_x\n"
    )
    cut = "2025-02-17 14:07:29,953 - INFO - flashinfer.jit: Loading JIT ops: batch_prefill_bf\n"
    whole = "2025-02-17 14:07:29,953 - INFO - flashinfer.jit: Loading JIT ops: batch_decode_bf16\n"
    assert "startup.stalled" not in {f.id for f in analyze_text(head + cut).findings}
    # the same step start, whole, is where the log stopped
    assert "startup.stalled" in {f.id for f in analyze_text(head + whole).findings}


def test_a_begin_line_printed_after_its_own_progress_is_no_stall() -> None:
    from diag.analyze import analyze_text

    bars = "".join(
        f"Capturing batches (avail_mem=34.9 GB):   {p}%|          | {k}/23 [00:00<?, ?it/s]\n"
        for p, k in ((0, 0), (4, 1), (9, 2))
    )
    late = (
        "(WorkerDict pid=859185) [2025-05-23 18:02:32] Memory pool end. avail mem=34.40 GB "
        "[repeated 7x across cluster]\n"
        "(WorkerDict pid=859185) [2025-05-23 18:02:32] Capture cuda graph begin. This can "
        "take up to several minutes. [repeated 7x across cluster]\n"
    )
    assert "startup.stalled" not in {f.id for f in analyze_text(bars + late).findings}
    # in time order (the begin first, then a bar at 0) it is a stall
    assert "startup.stalled" in {
        f.id for f in analyze_text(late + bars.split("\n")[0] + "\n").findings
    }


def test_a_5xx_after_the_engine_died_is_no_request_served() -> None:
    from diag.analyze import analyze_text

    up = 'INFO:     10.0.0.1:6534 - "GET /health HTTP/1.1" 200 OK\n'
    dead = (
        "ERROR 02-05 10:00:00 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
    )
    post = 'INFO:     10.0.0.1:65344 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server'
    post += " Error\n"
    assert analyze_text(up + dead + post).last_phase == "listening"
    assert analyze_text(up + post + dead).last_phase == "serving"
    rejected = 'INFO:     10.0.0.1:3945 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
    assert analyze_text(up + rejected).last_phase == "listening"


def test_a_cut_traceback_whose_indentation_was_lost() -> None:
    from diag.analyze import analyze_text

    frames = (
        'File "/x/sglang/srt/layers/quantization/deep_gemm_wrapper/compile_utils.py", line 332,'
        " in deep_gemm_execution_hook\n"
        "_maybe_compile_deep_gemm_one_type_all(kernel_type, n, k, num_groups)\n"
        'File "/usr/lib/python3.12/concurrent/futures/_base.py", line 619, in result_iterator\n'
        "yield _result_or_cancel(fs.pop())\n"
        "^^^^^^^^^^^^^^^^^^^^^\n"
    )
    assert "python.exception" in {f.id for f in analyze_text(frames).findings}


def test_an_exception_cpython_ignored_is_no_python_exception() -> None:
    """PyErr_WriteUnraisable's "Exception ignored in: <obj>" traceback (a __del__ that
    raised) did not end anything; the same traceback without that head does."""
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/model_executor/parallel_utils/pynccl.py", line 264, in __del__\n'
        "    _c_ncclCommDestroy(self.comm)\n"
        "AttributeError: 'NCCLCommunicator' object has no attribute 'comm'\n"
    )
    from diag.analyze import analyze_text

    ignored = "Exception ignored in: <function NCCLCommunicator.__del__ at 0x7f4d8c3212d0>\n"
    assert "python.exception" not in {f.id for f in analyze_text(ignored + tb).findings}
    assert "python.exception" in {f.id for f in analyze_text(tb).findings}


_LISTENING = (
    "[2025-09-29 06:28:15] INFO:     Started server process [18346]\n"
    "[2025-09-29 06:28:15] INFO:     Uvicorn running on http://127.0.0.1:30000 "
    "(Press CTRL+C to quit)\n"
    '[2025-09-29 06:28:16] INFO:     127.0.0.1:46704 - "GET /get_model_info HTTP/1.1" 200 OK\n'
    "[2025-09-29 06:28:16 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, "
    "token usage: 0.00, #running-req: 0, #queue-req: 0,\n"
)
_DIES = (
    "[2025-09-29 06:28:31 TP0] TpModelWorkerClient hit an exception: "
    "Traceback (most recent call last):\n"
    'File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", '
    "line 135, in forward_thread_func\n"
    "self.forward_thread_func_()\n"
    'File "/usr/local/lib/python3.10/dist-packages/torch/utils/_contextlib.py", line 116, '
    "in decorate_context\n"
)


@pytest.mark.parametrize(
    ("between", "failed"),
    [
        ("", True),  # the warm-up's own probe and prefill only
        ('[2025-09-29 06:28:17] INFO:     127.0.0.1:46704 - "POST /generate HTTP/1.1" 200 OK\n',
         False),  # the warm-up request returned
        ('[2025-09-29 06:28:20] INFO:     10.0.0.7:5100 - "POST /v1/chat/completions HTTP/1.1" '
         "200 OK\n", False),  # a client's request: past the warm-up
        ("[2025-09-29 06:28:17] The server is fired up and ready to roll!\n", False),
    ],
)
def test_sglang_dying_before_its_warm_up_returned_is_warmup_failed(
    between: str, failed: bool
) -> None:
    """SGLang prints "fired up" only once its own warm-up request returned
    (http_server.py _wait_and_warmup): a death after listening with none of that before it
    is the warm-up failing. The traceback here is cut, its header glued to the line that
    announces it, its indentation lost: python.exception all the same."""
    from diag.analyze import analyze_text

    found = {f.id: f for f in analyze_text(_LISTENING + between + _DIES).findings}
    assert "python.exception" in found
    assert ("warmup.failed" in found) is failed
    if failed:
        assert "hit an exception" in found["warmup.failed"].evidence[0].text


def test_a_traceback_ending_in_any_qualified_exception_class_is_python_exception() -> None:
    """CPython prints an exception by its module-qualified class name whatever it is
    called (zmq.error.Again, triton's OutOfResources, JAX's traced-value errors)."""
    from diag.analyze import analyze_text

    frames = (
        "Traceback (most recent call last):\n"
        '  File "/x/sgl_jax/srt/mem_cache/memory_pool.py", line 603, in kv_cache_update_kernel\n'
        "    async_copy.start()\n"
    )
    for line, exc in (
        ("jax._src.source_info_util.JaxStackTraceBeforeTransformation: TypeError: Shapes must "
         "be 1D sequences of concrete values", "JaxStackTraceBeforeTransformation"),
        ("zmq.error.Again: Resource temporarily unavailable", "zmq.error.Again"),
        ("triton.runtime.autotuner.OutOfResources: out of resource: shared memory, Required: "
         "262144", "OutOfResources"),
    ):
        found = {f.id: f for f in analyze_text(frames + line + "\n").findings}
        assert "python.exception" in found, line
        assert exc in found["python.exception"].message
    # a dotted name that follows no frame is no exception line
    plain = "[2025-01-01 10:00:00] sglang.srt.server_args.ServerArgs: model_path='x'\n"
    assert "python.exception" not in {f.id for f in analyze_text(plain).findings}


def test_a_cpp_librarys_glog_error_line_ending_the_log_is_no_python_exception() -> None:
    """glog's E lines (Mooncake's transfer engine, Ray's core) are a C++ library's errors,
    not a scheduler announcing its fatal exception before its traceback."""
    from diag.analyze import analyze_text

    text = "".join(
        f"E0529 23:22:59.55371{i} 67580 rdma_context.cpp:203] Failed to register memory "
        f"0x7c0906000000: Bad address [14]\n" for i in range(4)
    )
    assert "python.exception" not in {f.id for f in analyze_text(text).findings}


def test_a_traceback_cut_after_a_hard_wrap_inside_a_frame_line_is_still_cut() -> None:
    """A frame line a terminal wrapped (``in R`` / ``untime``) leaves a one-word record
    with the traceback's lines under it: the traceback is still the one the log ends in."""
    from diag.analyze import analyze_text

    p = "2024-06-02 00:26:10 | ERROR | stderr | "
    text = (
        f"{p}Traceback (most recent call last):\n"
        f'{p}  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        f"{p}    runtime = sgl.Runtime(\n"
        f'{p}  File "/x/site-packages/sglang/api.py", line 39, in R\n'
        "untime\n"
        f"{p}    return Runtime(*args, **kwargs)\n"
    )
    assert "python.exception" in {f.id for f in analyze_text(text).findings}


@pytest.mark.parametrize(
    ("path", "last", "fires"),
    [
        ("/opt/venv/lib/python3.11/site-packages/sglang/srt/server.py",
         "requests.exceptions.JSONDecodeError: Expecting value: line 1 column 1 (char 0)", True),
        ("/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py",
         "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: "
         "http://127.0.0.1:30000/generate", True),
        # Ctrl-C during the warm-up stops it; it did not fail
        ("/opt/venv/lib/python3.11/site-packages/sglang/srt/server.py", "KeyboardInterrupt",
         False),
        # a function of the same name in another package
        ("/opt/app/mywrapper/server.py",
         "requests.exceptions.JSONDecodeError: Expecting value: line 1 column 1 (char 0)", False),
        # the traceback is cut before its exception line
        ("/opt/venv/lib/python3.11/site-packages/sglang/srt/server.py", "", False),
    ],
)
def test_sglang_warm_up_thread_raising_is_warmup_failed(
    path: str, last: str, fires: bool
) -> None:
    """SGLang's warm-up runs in a thread (``_wait_and_warmup``); an exception out of it is
    the warm-up request failing, read from the traceback's frames and its exception line
    (both are the evidence), with no listening or scheduler line in the paste."""
    from diag.analyze import analyze_text

    text = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner\n'
        "    self.run()\n"
        f'  File "{path}", line 410, in _wait_and_warmup\n'
        "    model_info = res.json()\n"
        '  File "/opt/venv/lib/python3.11/site-packages/requests/models.py", line 978, in json\n'
        "    raise RequestsJSONDecodeError(e.msg, e.doc, e.pos)\n"
        + (last + "\n" if last else "")
    )
    found = {f.id: f for f in analyze_text(text).findings}
    assert ("warmup.failed" in found) is fires
    if fires:
        assert [e.line for e in found["warmup.failed"].evidence] == [4, 8]


def test_a_chained_traceback_header_printed_inside_a_loggers_traceback() -> None:
    """A child's traceback header written raw to stderr (process prefix only) between an
    ERROR logger's traceback lines is a record of its own inside the logger's record; the
    file ends in the logger's frames, cut before the exception line."""
    from diag.analyze import analyze_text

    head = "(EngineCore_DP0 pid=7) ERROR 03-04 10:00:00 [core.py:700] "
    text = (
        head + '  File "/x/actor.py", line 5, in call\n'
        + head + "    result = func(*args)\n"
        + "(EngineCore_DP0 pid=7) Traceback (most recent call last):\n"
        + head + '  File "/x/vllm/v1/worker/gpu_worker.py", line 9, in load_model\n'
        + head + "    self.model_runner.load_model()\n"
    )
    found = {f.id: f for f in analyze_text(text).findings}
    assert "python.exception" in found
    assert [e.line for e in found["python.exception"].evidence] == [3]


def test_a_log_ending_on_a_bare_traceback_header_names_it() -> None:
    """The file ends on "Traceback (most recent call last):" under the ERROR line that
    announced it (vLLM's 'EngineCore failed to start.'): the header is the traceback's
    evidence too, cut before its first frame."""
    from diag.analyze import analyze_text

    head = "(EngineCore_DP0 pid=9) ERROR 05-06 11:00:00 [core.py:800] "
    text = head + "EngineCore failed to start.\n" + head + "Traceback (most recent call last):\n"
    found = {f.id: f for f in analyze_text(text).findings}
    assert {e.line for e in found["python.exception"].evidence} >= {2}


def test_a_bare_assertion_in_a_weight_loader_on_the_loaded_tensor_is_a_load_error() -> None:
    from diag.analyze import analyze_text

    tb = (
        "Traceback (most recent call last):\n"
        '  File "/v/vllm/model_executor/models/llama.py", line 500, in load_weights\n'
        "    weight_loader(param, loaded_weight, shard_id)\n"
        '  File "/v/vllm/model_executor/layers/linear.py", line 640, in weight_loader\n'
        "    assert param_data.shape == loaded_weight.shape\n"
        "AssertionError\n"
    )
    found = {f.id: f for f in analyze_text(tb).findings}
    assert [e.line for e in found["weights.load_error"].evidence] == [5, 6]
    # an assert on anything else, or one outside a weight loader, is no load error
    other = tb.replace("param_data.shape == loaded_weight.shape", "self.tp_size > 0")
    assert "weights.load_error" not in {f.id for f in analyze_text(other).findings}
    app = tb.replace("vllm/model_executor/layers/linear.py", "app/loader.py")
    assert "weights.load_error" not in {f.id for f in analyze_text(app).findings}


def test_the_engine_core_exiting_is_a_death_unless_a_shutdown_was_asked_for() -> None:
    from diag.analyze import analyze_text

    died = (
        "(APIServer pid=7) INFO 09-14 10:00:00 [api_server.py:100] Starting vLLM API server 0"
        " on http://0.0.0.0:8000\n"
        "(APIServer pid=7) WARNING 09-14 10:05:00 [core_client.py:869] [shutdown] MPClient:"
        " engine core exited unexpectedly; starting cleanup\n"
    )
    found = {f.id: f for f in analyze_text(died).findings}
    assert [e.line for e in found["process.killed"].evidence] == [2]
    stopped = (
        "(EngineCore pid=9) INFO 09-14 10:04:59 [core.py:1698] [shutdown] EngineCore: trigger"
        " received signal=15\n" + died
    )
    assert "process.killed" not in {f.id for f in analyze_text(stopped).findings}


def test_an_ipython_traceback_header_names_the_cells_exception() -> None:
    """IPython/Jupyter prints a cell's unhandled exception as '<Class>   Traceback (most
    recent call last)' (IPython/core/ultratb.py, the class first, its message after the
    frames): a paste cut inside the frames still names the exception."""
    from diag.analyze import analyze_text

    text = (
        "INFO 03-02 10:00:00 llm_engine.py:70] Initializing an LLM engine with config: "
        "model='org/tiny', tokenizer='org/tiny', tensor_parallel_size=1, seed=0)\n"
        "-----------------------------------------------------------------------\n"
        "ValueError                                Traceback (most recent call last)\n"
        "Cell In[7], line 2\n"
        "----> 2 llm = LLM(model=\"org/tiny\")\n"
    )
    found = {f.id: f for f in analyze_text(text).findings}
    assert found["python.exception"].message.startswith("ValueError")
    assert [e.line for e in found["python.exception"].evidence] == [3]
    # a header glued to a container's prefix, or Python's own, is no IPython header
    for header in ("kserve-container Traceback (most recent call last):",
                   "Traceback (most recent call last):"):
        other = text.replace(
            "ValueError                                Traceback (most recent call last)", header
        )
        assert "python.exception" not in {f.id for f in analyze_text(other).findings}


_V0_CONFIG = (
    "INFO 02-03 10:00:00 llm_engine.py:70] Initializing an LLM engine with config: "
    "model='org/m', tokenizer='org/m', tokenizer_mode=auto, dtype=torch.float16, "
    "max_seq_len={max_len}, tensor_parallel_size=1, seed=0)\n"
)


@pytest.mark.parametrize(
    ("max_len", "blocks", "args", "short"),
    [
        (8192, 500, "", True),  # 8000 tokens of 16-token blocks < 8192
        (8192, 512, "", False),  # 8192 tokens: one sequence fits
        (8192, 300, "block_size=32, ", False),  # the args' block size: 9600 tokens
        (8192, 0, "", True),  # no block at all
    ],
)
def test_v0_gpu_blocks_below_one_max_length_sequence_is_an_oom(
    max_len: int, blocks: int, args: str, short: bool
) -> None:
    """vLLM V0 checks block_size x num_gpu_blocks >= max_model_len right after logging
    the block counts (llm_engine.py _init_cache, worker.py raise_if_cache_size_invalid):
    the counts and the config's max length prove the ValueError a cut paste lost."""
    from diag.analyze import analyze_text

    text = (
        (
            f"INFO 02-03 09:59:58 api_server.py:600] args: Namespace(model='org/m', {args}seed=0)\n"
            if args
            else ""
        )
        + _V0_CONFIG.format(max_len=max_len)
        + f"INFO 02-03 10:00:20 llm_engine.py:275] # GPU blocks: {blocks}, # CPU blocks: 512\n"
    )
    found = {f.id: f for f in analyze_text(text).findings}
    assert ("cuda.oom" in found) is short
    if short:
        assert found["cuda.oom"].evidence[0].line == (3 if args else 2)
        assert found["cuda.oom"].role == "root"


def test_gpu_blocks_without_a_max_length_or_of_v1_are_no_oom() -> None:
    from diag.analyze import analyze_text

    lines = [
        "INFO 02-03 10:00:20 llm_engine.py:275] # GPU blocks: 10, # CPU blocks: 512\n",
        _V0_CONFIG.format(max_len=4096)
        + "INFO 02-03 10:00:20 [kv_cache_utils.py:578] # GPU blocks: 10\n",
        _V0_CONFIG.format(max_len=4096)
        + "INFO 02-03 10:00:20 hpu_executor.py:76] # HPU blocks: 10, # CPU blocks: 40\n",
    ]
    for text in lines:
        assert "cuda.oom" not in {f.id for f in analyze_text(text).findings}, text
