"""`--format markdown`: a report to paste into a GitHub issue."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from report_samples import stacks_analysis, story_analysis, straggler_analysis, untimed_analysis

from diag.model import Evidence
from diag.report.markdown import mermaid_gantt, render_markdown

TASK = re.compile(
    r"^    (?P<name>[^:]+) :(?:(?P<tag>done|active|crit), )?"
    r"(?P<start>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d), (?P<dur>\d+)s$"
)


def test_summary_line_and_heading() -> None:
    md = render_markdown(story_analysis())
    lines = md.splitlines()
    assert lines[0] == "## diag analyze: sglang startup reached `weights_load`"
    assert lines[2].startswith("**sglang 0.5.6** · `/models/moonshotai/Kimi-K2.5-INT4`")
    assert "tp=8 pp=1 dp=1 ep=1 nodes=1" in lines[2]
    assert lines[2].endswith("3 findings (1 error, 1 warning, 1 info)")


def test_mermaid_gantt_block() -> None:
    md = render_markdown(story_analysis())
    block = md.split("```mermaid\n", 1)[1].split("\n```", 1)[0]
    lines = block.splitlines()
    # front matter first: displayMode compact puts each rank's tasks on one row
    assert lines[:6] == [
        "---",
        "displayMode: compact",
        "config:",
        "  gantt:",
        "    displayMode: compact",
        "---",
    ]
    lines = lines[6:]
    assert lines[0] == "gantt"
    assert "    dateFormat YYYY-MM-DD HH:mm:ss" in lines
    sections = [x.split("section ", 1)[1] for x in lines if x.startswith("    section ")]
    assert sections == ["no rank"] + [f"TP{i}" for i in range(8)]
    tasks = [TASK.match(x) for x in lines if not x.startswith(("gantt", "    section"))]
    tasks = [m for m in tasks if m]
    # every task line parses as mermaid "name :tag, start, duration"
    assert len(tasks) == len([x for x in lines if x.startswith("    ") and " :" in x])
    tp3 = lines[lines.index("    section TP3") + 1 : lines.index("    section TP4")]
    assert tp3 == [
        "    dist_init :done, 2026-02-22 22:35:01, 19s",
        "    weights_load :done, 2026-02-22 22:35:21, 34s",
    ]


def test_mermaid_marks_silence_and_skips_untimed() -> None:
    gantt = mermaid_gantt(straggler_analysis())
    assert gantt is not None
    tp5 = gantt.split("section TP5\n", 1)[1].split("    section", 1)[0].splitlines()
    assert tp5 == [
        "    dist_init :done, 2026-02-22 22:35:01, 19s",
        "    silent :crit, 2026-02-22 22:35:20, 35s",
    ]
    assert mermaid_gantt(untimed_analysis()) is None
    assert "```mermaid" not in render_markdown(untimed_analysis())


def test_mermaid_silence_is_crit_only_when_long_enough_to_be_a_finding() -> None:
    """The end silence is red (crit) only from the stall rule's own threshold on (a new
    user's check: 5 s of quiet before a log's end drawn red); shorter, a plain task."""
    from diag.report.common import stall_min_s
    from diag.rules.loader import builtin_rules

    stalled = next(r for r in builtin_rules() if r.id == "startup.stalled")
    assert stall_min_s() == stalled.params["min_gap_s"]
    base = straggler_analysis()

    def tp5(silent_s: float) -> list[str]:
        ranks = tuple(
            dataclasses.replace(r, silent_s=silent_s) if r.rank.label == "TP5" else r
            for r in base.ranks
        )
        gantt = mermaid_gantt(dataclasses.replace(base, ranks=ranks))
        assert gantt is not None
        return gantt.split("section TP5\n", 1)[1].split("    section", 1)[0].splitlines()

    assert tp5(35.0)[-1] == "    silent :2026-02-22 22:35:20, 35s"
    assert tp5(stall_min_s() - 1)[-1] == "    silent :2026-02-22 22:35:20, 35s"
    assert tp5(stall_min_s())[-1] == "    silent :crit, 2026-02-22 22:35:20, 35s"


def test_findings_in_details_sorted_with_evidence() -> None:
    md = render_markdown(story_analysis())
    blocks = re.findall(r"<details>\n<summary>(.*?)</summary>(.*?)</details>", md, re.S)
    summaries = [s for s, _ in blocks]
    assert summaries[0].startswith("<b>🔴 error</b> <code>startup.stalled</code>")
    assert summaries[0].endswith("— all 8 ranks")
    assert summaries[1] == (
        "<b>🟠 warning</b> <code>quant.fallback_unquantized</code> "
        "Layers fall back to the unquantized path — TP3, TP6"
    )
    assert summaries[2].startswith("<b>🔵 info</b> <code>attention.backend_fallback</code>")
    quant = blocks[1][1]
    assert "Evidence (2 of 2):" in quant
    assert "```text\nserver.log:120 TP3 22:35:22 Acceleration for non-quantized" in quant
    assert "**Remedy:** Check the quantization config's ignore list." in quant
    # (the environment block, collapsed, sits between the findings and the quiet rules)
    quiet = next(i for i, s in enumerate(summaries) if s.startswith("Checked and did not"))
    assert summaries[quiet] == "Checked and did not fire (3 rules)"
    assert "`cuda.oom`, `nccl.timeout`, `rank.straggler`" in blocks[quiet][1]


def test_markdown_escapes_html_and_fences() -> None:
    base = story_analysis()
    evil = dataclasses.replace(
        base.findings[0],
        title="<script>x</script>",
        evidence=(Evidence("a.log", 3, "```nested fence``` <b>"),),
        evidence_total=1,
    )
    md = render_markdown(dataclasses.replace(base, findings=(evil,)))
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "````text\na.log:3 ```nested fence``` <b>\n````" in md


def test_rank_table_and_missing() -> None:
    md = render_markdown(straggler_analysis())
    assert "| TP5 | `dist_init` ⚠ behind | dist_init (19 s) | 3 h 12 min |" in md
    assert "| TP7 | **missing** (never logged) | | |" in md
    assert "**Behind the others:** TP5" in md


def test_stacks_in_markdown() -> None:
    md = render_markdown(stacks_analysis())
    # each group collapsed in <details>, its frames inside
    assert (
        "<summary><code>stack.nccl_collective</code>: PP0 TP1, PP1 TP1 (2 members)</summary>" in md
    )


def test_mermaid_caps_the_number_of_sections() -> None:
    from diag.model import RankId
    from diag.report.markdown import MAX_MERMAID_SECTIONS

    base = story_analysis(global_phases=())
    many = tuple(
        dataclasses.replace(base.ranks[0], rank=RankId(dp=i // 8, tp=i % 8)) for i in range(80)
    )
    gantt = mermaid_gantt(dataclasses.replace(base, ranks=many))
    assert gantt is not None
    assert gantt.count("    section ") == MAX_MERMAID_SECTIONS
    title = next(x for x in gantt.splitlines() if x.startswith("    title "))
    assert f"(first {MAX_MERMAID_SECTIONS} of 80)" in title
    assert "    section DP0 TP0" in gantt and "    section DP4 TP0" not in gantt


def test_phase_table_in_markdown() -> None:
    md = render_markdown(straggler_analysis())
    assert "| `dist_init` | 7 | 22:35:01 | 22:35:20 | 19 s |  |" in md
    assert "| `weights_load` | 6 | 22:35:21 | 22:35:55 | 34 s |  |" in md
    assert "| `launch` | no rank | 22:34:47 | 22:34:53 | - |  |" in md


def test_log_text_cannot_break_the_details_block() -> None:
    base = story_analysis()
    hostile = dataclasses.replace(
        base.findings[0],
        message="line with </details> and <b>bold</b>\nsecond line",
        remedy="run `nc -zv <addr> <port>` then check <this>",
    )
    md = render_markdown(dataclasses.replace(base, findings=(hostile,), rules_checked=()))
    # the finding's block and the environment's: each closes once, none early
    assert md.count("</details>") == md.count("<details>") == 2
    assert "line with &lt;/details&gt; and &lt;b&gt;bold&lt;/b&gt; second line" in md
    assert "**Remedy:** run `nc -zv <addr> <port>` then check &lt;this&gt;" in md


def test_no_view_prints_a_secret_json_would_redact(tmp_path: Path) -> None:
    """The terminal, Markdown and Perfetto views redact the analysis (and the evidence's
    context lines) as --json does: an args line's api_key, a token in a URL, a bearer."""
    import subprocess
    import sys
    from importlib import resources

    text = resources.files("diag.data").joinpath("example.log").read_text().replace(
        "api_key=None", "api_key='sk-abcdef1234567890SECRET'"
    )
    text += (
        "[2025-01-01 10:00:05] ERROR: request failed GET /v1/x?token=hf_abcdefghijklmnopqrstu"
        "SECRET Authorization: Bearer sk-proj-abcdefghijklmnopSECRET\n"
    )
    log = tmp_path / "server.log"
    log.write_text(text)
    for fmt in ("terminal", "markdown", "perfetto", "json"):
        out = subprocess.run(
            [sys.executable, "-m", "diag", "analyze", "-v", "--format", fmt, str(log)],
            capture_output=True, text=True, timeout=120,
        )
        assert out.stdout and "SECRET" not in out.stdout, fmt


def test_log_text_in_prose_is_not_read_as_emphasis() -> None:
    """A finding's message is a log's text: ``__init__`` and ``*args`` stay as written
    (escaped), an underscore inside a word and a URL are left alone."""
    from diag.report.markdown import _md_text

    out = _md_text("TypeError: X.__init__() got *args for dist_init, see https://x.io/a_b")
    assert "X.\\_\\_init\\_\\_()" in out and "\\*args" in out
    assert "dist_init" in out and "https://x.io/a_b" in out


def test_markdown_sources_leave_out_the_reporters_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Markdown report (meant for a public issue) names its sources relative to the
    current folder, else by file name: no home folder or host layout (a new user's
    check); the JSON keeps the names as given."""
    from diag.report.json_out import analysis_to_dict

    monkeypatch.chdir(tmp_path)
    here = str(tmp_path.resolve())
    sources = (
        "/home/someone/private/server.log",
        f"{here}/logs/rank0.log",
        "/srv/cases/hang.tar.gz:logs/rank1.log",
        "rel/rank2.log",
        "<stdin>",
    )
    a = dataclasses.replace(story_analysis(), sources=sources)
    md = render_markdown(a)
    assert (
        "sources: `server.log`, `logs/rank0.log`, `hang.tar.gz:logs/rank1.log`, "
        "`rel/rank2.log`, `<stdin>`" in md
    )
    assert "/home/someone" not in md and here not in md and "/srv/cases" not in md
    assert analysis_to_dict(a)["sources"] == list(sources)
    # notes name sources too ("<path>: empty file"): the same names there
    noted = dataclasses.replace(
        a, notes=("/home/someone/private/server.log: empty file", f"{here}/logs/x: read once")
    )
    md = render_markdown(noted)
    assert "- server.log: empty file\n" in md and "- logs/x: read once\n" in md
