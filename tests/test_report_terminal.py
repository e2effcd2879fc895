"""The terminal view, rendered through a fixed-width console: positions, not counts."""

from __future__ import annotations

import dataclasses

from report_samples import (
    T,
    stacks_analysis,
    story_analysis,
    straggler_analysis,
    untimed_analysis,
)
from rich.console import Console

from diag.model import Analysis, StackProcess
from diag.report.terminal import render_terminal


def render(
    a: Analysis, width: int = 120, color: bool = False, system: str = "standard"
) -> str:
    console = Console(
        width=width,
        record=True,
        force_terminal=color,
        color_system=system if color else None,  # type: ignore[arg-type]
        file=open("/dev/null", "w"),  # noqa: SIM115 - closed below
    )
    try:
        console.print(render_terminal(a))
        return console.export_text(styles=color)
    finally:
        console.file.close()


def row(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(label + " "))


def test_header_names_framework_model_layout_and_span() -> None:
    out = render(story_analysis())
    lines = out.splitlines()
    assert lines[0].rstrip() == "diag analyze"
    assert lines[1].startswith("framework  sglang 0.5.6")
    assert "/models/moonshotai/Kimi-K2.5-INT4" in out
    assert "quantization compressed-tensors" in out
    assert "tp 8 · pp 1 · dp 1 · ep 1 · nodes 1" in out
    assert "8 ranks seen, 8 expected" in out
    assert "2026-02-22 22:34:47 → 22:35:55" in out
    assert "weights_load  (the log never shows `listening`)" in out


def test_gantt_rows_share_one_time_axis() -> None:
    out = render(story_analysis())
    rows = [row(out, f"TP{i}") for i in range(8)]
    launch = row(out, "(no rank)")
    # every rank's first segment (dist_init, 22:35:01) starts in the same column,
    # after the launcher's segment (22:34:47), which starts at the left edge
    # (no colour: each phase is drawn with its letter, D for dist_init, L for launch)
    starts = {r.index("D") for r in rows}
    assert len(starts) == 1
    assert launch.index("L") < starts.pop()
    for r in rows:
        assert r.rstrip().endswith("weights_load silent 3 h 12 min")
        # the silence past the last line is drawn after a broken axis
        assert "┊░" in r
    axis = next(line for line in out.splitlines() if "22:34:47─" in line)
    assert axis.index("22:34:47") == launch.index("L")
    assert axis.rstrip().endswith("22:35:55 +3 h 12 min")


def test_gantt_colours_phases() -> None:
    out = render(story_analysis(), color=True, system="256")
    tp0 = next(line for line in out.splitlines() if line.startswith("\x1b[1mTP0"))
    assert "\x1b[38;5;27m█" in tp0  # dist_init, dodger_blue2
    assert "\x1b[38;5;136m█" in tp0  # weights_load, dark_goldenrod
    assert "\x1b[31m░" in tp0  # silence before `listening`, red


def test_straggler_and_missing_called_out() -> None:
    out = render(straggler_analysis())
    tp5, tp4 = row(out, "TP5"), row(out, "TP4")
    assert "dist_init    behind" in tp5
    # TP5's silence starts where the others start loading weights
    assert tp5.index("░") >= tp4.index("W") - 2  # (no colour: W is weights_load)
    assert "weights_load" not in tp5
    assert row(out, "TP7").startswith("TP7       missing: never logged")
    assert "Behind the others: TP5 at dist_init  (the others reached weights_load)" in out
    assert "Missing ranks: TP7  (8 expected from the config, 1 never logged)" in out
    assert "7 ranks seen, 8 expected" in out


def test_findings_sorted_by_severity_with_evidence() -> None:
    out = render(story_analysis())
    stalled = out.index(" ERROR  startup.stalled")
    quant = out.index(" WARNING  quant.fallback_unquantized")
    attn = out.index(" INFO  attention.backend_fallback")
    assert stalled < quant < attn
    assert "Findings (3)  1 error, 1 warning, 1 info" in out
    assert "Startup stalled after weights_load  [all 8 ranks]" in out
    assert "Layers fall back to the unquantized path  [TP3, TP6]" in out
    ev = out.splitlines()[out[:quant].count("\n") + 2]
    assert ev.startswith("    server.log:120  TP3  22:35:22  Acceleration for non-quantized")
    block = out[stalled:quant]
    assert "server.log:177  TP0  22:35:55  Load weight end." in block
    assert "server.log:180" not in block  # only a few lines ...
    assert "    … 5 more" in block  # ... and a count of the rest
    assert "remedy: Run `diag snapshot` on the host" in block
    assert "caveat: A slow step can look like a hang." in block
    assert "why: INT4 weights run through the unquantized path" in out[quant:attn]


def test_checked_and_did_not_fire_lists_only_the_quiet_rules() -> None:
    out = render(story_analysis())
    line = next(x for x in out.splitlines() if x.startswith("Checked and did not fire:"))
    assert line == "Checked and did not fire: cuda.oom, nccl.timeout, rank.straggler"
    assert out.rstrip().endswith("note: progress bars have no rank prefix: attributed to no rank")


def test_cascade_is_marked() -> None:
    base = story_analysis()
    cascade = dataclasses.replace(
        base.findings[0], id="process.killed", role="cascade", cascade_of="cuda.oom"
    )
    out = render(dataclasses.replace(base, findings=(cascade,)))
    assert "cascade of cuda.oom: likely a consequence, not the cause" in out


def test_untimed_log_shows_the_phase_chain() -> None:
    out = render(untimed_analysis())
    assert "phases in order, no times" in out
    assert row(out, "TP0").startswith("TP0  dist_init → weights_load → cuda_graph")
    assert "no time stamps" in out
    assert "No findings." in out


def test_stacks_grouped() -> None:
    out = render(stacks_analysis())
    assert "stack.nccl_collective  2 members: PP0 TP1, PP1 TP1  (sglang::scheduler_PP0_TP1, " in out
    assert "      recv (distributed_c10d.py:2070)" in out


def test_narrow_console_fits() -> None:
    out = render(story_analysis(), width=80)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert row(out, "TP0").rstrip().endswith("weights_load silent 3 h 12 min")


def test_straggler_in_the_same_phase_is_behind_in_time() -> None:
    base = story_analysis()
    tp0 = dataclasses.replace(base.ranks[0], last_ts=T("22:30:00"))
    a = dataclasses.replace(base, ranks=(tp0, *base.ranks[1:]), stragglers=(tp0.rank,), findings=())
    out = render(a)
    assert "Behind the others: TP0 at weights_load, last line 5 min 55 s before the others" in out
    assert "behind" in row(out, "TP0") and "behind" not in row(out, "TP1")


def test_weights_line_from_rank_shards() -> None:
    out = render(story_analysis())
    line = next(x for x in out.splitlines() if x.startswith("Weights: "))
    assert line == "Weights: 64/64 shards in 34 s (0.53 s/shard) (all 8 ranks)"


def test_phase_table_spans_and_slowest_rank() -> None:
    base = story_analysis()
    slow_load = dataclasses.replace(base.ranks[2].phases[1], end=T("22:37:01"))
    tp2 = dataclasses.replace(
        base.ranks[2], phases=(base.ranks[2].phases[0], slow_load), last_ts=T("22:37:01")
    )
    out = render(dataclasses.replace(base, ranks=(*base.ranks[:2], tp2, *base.ranks[3:])))
    lines = out.splitlines()
    header = next(x for x in lines if x.startswith("phase "))
    assert header.split() == ["phase", "ranks", "start", "end", "duration", "slowest"]
    dist = next(x for x in lines if x.startswith("dist_init "))
    assert dist.split() == ["dist_init", "8", "22:35:01", "22:35:20", "19", "s"]
    load = next(x for x in lines if x.startswith("weights_load "))
    assert load.split()[:4] == ["weights_load", "8", "22:35:21", "22:37:01"]
    assert "34 s (34 s–1 min 40 s)" in load
    assert load.rstrip().endswith("TP2")
    # columns line up under the header
    assert load.index("22:35:21") == header.index("start")


def test_stacks_name_processes_without_a_stack() -> None:
    base = stacks_analysis()
    lost = StackProcess(
        pid=4242,
        title="VLLM::Worker_TP3",
        threads=(),
        outcome="timeout",
        error="py-spy took over 10 s",
    )
    out = render(dataclasses.replace(base, stack_processes=(*base.stack_processes, lost)))
    assert "  pid 4242 VLLM::Worker_TP3: no stack (timeout: py-spy took over 10 s)" in out


def test_stacks_read_from_tracebacks_say_so() -> None:
    """A log's traceback is where its error surfaced: the terminal and Markdown views say
    the stacks come from tracebacks, not from a dump of ranks waiting together."""
    from diag.analyze import analyze_text
    from diag.report.markdown import render_markdown

    a = analyze_text(
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/worker/worker.py", line 132, in init_device\n'
        "    init_worker_distributed_environment(self.parallel_config, self.rank)\n"
        "RuntimeError: NCCL error: unhandled system error\n"
    )
    assert [p.mode for p in a.stack_processes] == ["traceback"]
    assert "from tracebacks: where each error surfaced" in render(a)
    assert "From tracebacks: where each error surfaced" in render_markdown(a)


def test_header_span_is_the_logs_first_to_last_time_stamp() -> None:
    """The header's span runs from the log's first time stamp to its last, not from the
    first phase event (a new user's check: a warning logged five minutes before the
    launch was left out), and says which span it is."""
    from importlib.resources import files

    from diag.analyze import analyze_text
    from diag.report.json_out import analysis_from_dict, analysis_to_dict
    from diag.report.markdown import render_markdown

    story = files("diag.data").joinpath("example.log").read_text(encoding="utf-8")
    a = analyze_text(
        "[2026-02-22 22:30:01] WARNING x.py:12: an early warning before anything\n"
        + story
        + "[2026-02-22 22:40:00] INFO tokenizer_manager.py:1: still here\n"
    )
    out = render(a)
    what = "(9 min 59 s, first to last time stamp)"
    assert f"log        2026-02-22 22:30:01 → 22:40:00  {what}" in out
    assert f"Log: 2026-02-22 22:30:01 → 2026-02-22 22:40:00 {what}" in render_markdown(a)
    d = analysis_to_dict(a)
    assert (d["log_start"], d["log_end"]) == ("2026-02-22T22:30:01", "2026-02-22T22:40:00")
    assert analysis_from_dict(d).log_start == a.log_start
    # an analysis without its first time stamp (an older analysis.json) says what it shows
    old = dict(d)
    del old["log_start"]
    span = "2026-02-22 22:34:47 → 22:40:00  (5 min 13 s, first to last phase event)"
    assert span in render(analysis_from_dict(old))


def _luminance(style: str) -> float:
    """WCAG relative luminance of a style's foreground colour, which must be fixed: a
    256-colour entry or true colour, not one of the 16 a terminal theme redefines."""
    from rich.color import ColorType
    from rich.style import Style

    color = Style.parse(style).color
    assert color is not None, style
    assert color.type in (ColorType.EIGHT_BIT, ColorType.TRUECOLOR), style
    rgb = color.get_truecolor()

    def channel(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(rgb.red) + 0.7152 * channel(rgb.green) + 0.0722 * channel(rgb.blue)


def test_phase_colours_read_on_dark_and_light_backgrounds() -> None:
    """Every phase colour keeps a 3:1 contrast (WCAG's floor for graphics) against black
    and against white (a new user's check: `serving` in bright white vanished on a light
    background)."""
    from diag.model import PHASES
    from diag.report import terminal

    assert set(terminal.PHASE_STYLES) == set(PHASES)
    for phase in [*PHASES, "a_phase_of_a_plugin"]:
        style = terminal._style(phase)
        lum = _luminance(style)
        on_white, on_black = 1.05 / (lum + 0.05), (lum + 0.05) / 0.05
        assert min(on_white, on_black) >= 3.0, (phase, style, on_white, on_black)
