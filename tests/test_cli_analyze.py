"""`diag analyze` end to end: through cli.main (exit codes, one-line errors) and the
built-in example (the DESIGN.md story)."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from diag import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "diag" / "data" / "example.log"
REAL = ROOT / "fixtures" / "real"
TIMEOUT_CASE = REAL / "vllm" / "tp2-customallreduce-p2p-check-gloo-timeout" / "log.txt"


def run(
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: bytes | None = None,
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["diag", *args])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code: Any = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


@pytest.fixture(scope="module")
def example_json() -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "--example", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # a pipe gets the result and nothing else: no progress bar
    data: dict[str, Any] = json.loads(r.stdout)
    return data


# ---------------------------------------------------------------------------
# the story


def test_example_timeline(example_json: dict[str, Any]) -> None:
    d = example_json
    assert d["schema_version"] == 1
    assert d["framework"] == "sglang"
    assert d["config"]["tp"] == 8
    assert d["config"]["quantization"] == "compressed-tensors"
    assert d["last_phase"] == "weights_load"
    assert [r["id"] for r in d["ranks"]] == [f"TP{i}" for i in range(8)]
    assert d["missing_ranks"] == [] and d["stragglers"] == []
    for r in d["ranks"]:
        assert r["last_phase"] == "weights_load"
        phases = {p["phase"]: p for p in r["phases"]}
        assert phases["weights_load"]["start"] == "2026-02-22T22:35:21"
        assert phases["weights_load"]["end"] == "2026-02-22T22:35:55"
        assert phases["dist_init"]["end"] == "2026-02-22T22:35:20"
    assert d["log_end"] == "2026-02-22T22:35:55"


def test_example_reports_the_three_findings(example_json: dict[str, Any]) -> None:
    by_id = {f["id"]: f for f in example_json["findings"]}
    quant = by_id["quant.fallback_unquantized"]
    assert quant["severity"] == "warning"
    assert sorted(quant["ranks"]) == ["TP3", "TP6"]
    assert {e["rank"] for e in quant["evidence"]} <= {"TP3", "TP6"}
    assert all("Falling back to UnquantizedLinearMethod" in e["text"] for e in quant["evidence"])
    attn = by_id["attention.backend_fallback"]
    assert attn["severity"] == "info"
    assert attn["evidence"][0]["line"] == 1
    # the excerpt ends right after every rank's "Load weight end": a cut excerpt, not a
    # proven stall (LABELS.md), so it says where it ends and what would prove a stall
    assert "startup.stalled" not in by_id and "startup.no_listen_port" not in by_id
    cut = by_id["startup.cut_excerpt"]
    assert cut["severity"] == "info"
    assert sorted(cut["ranks"]) == [f"TP{i}" for i in range(8)]
    assert "Load weight end" in cut["message"] and "not proven stalled" in cut["message"]
    assert cut["evidence"][-1]["line"] == 185
    assert set(by_id) <= set(example_json["rules_checked"])


def test_example_terminal_view(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(["analyze", "--example"], capsys, monkeypatch)
    assert code == 0, err
    lines = out.splitlines()
    tp3 = next(x for x in lines if x.startswith("TP3 "))
    # in a pipe (no colour) each phase is drawn with its letter: D dist_init, W weights_load
    assert "DDD" in tp3 and "WWW" in tp3 and tp3.rstrip().split()[-1] != "TP3"
    assert "weights_load" in tp3
    quant = out.index(" WARNING  quant.fallback_unquantized")
    attn = out.index(" INFO  attention.backend_fallback")
    cut = out.index(" INFO  startup.cut_excerpt")
    assert quant < attn < cut
    assert "[TP3, TP6]" in out[quant:attn]
    assert "[all 8 ranks]" in out[cut:]
    # the short view counts the quiet rules; -v lists them (and why/remedy/caveat)
    assert "Checked and did not fire:" not in out
    assert "more rules checked and did not fire; -v lists them" in out
    assert len(lines) <= 40  # one screen
    code, verbose, err = run(["analyze", "--example", "-v"], capsys, monkeypatch)
    assert code == 0, err
    assert "Checked and did not fire:" in verbose and "remedy: " in verbose
    assert "tp 8" in out and "Kimi-K2.5" in out
    assert "Weights: 64/64 shards in 34 s" in out  # the story's 64 shards in ~34 s


# ---------------------------------------------------------------------------
# formats, output file, exit codes


@pytest.mark.parametrize(
    ("fail_on", "expected"), [("none", 0), ("error", 0), ("warning", 1), ("info", 1)]
)
def test_fail_on_exit_codes(
    fail_on: str,
    expected: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, _ = run(
        ["analyze", "--example", "--json", "--fail-on", fail_on], capsys, monkeypatch
    )
    assert code == expected
    assert json.loads(out)["findings"]  # the result is printed whatever the exit code


def test_fail_on_error_passes_when_only_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first lines of the story: the attention fallback (info) only, then serving
    log = tmp_path / "ok.log"
    log.write_text(
        "[2026-02-22 22:34:47] Attention backend not specified. Use triton backend by default.\n"
        "[2026-02-22 22:35:01 TP0] Init torch distributed begin.\n"
        "[2026-02-22 22:35:20 TP0] Init torch distributed ends. mem usage=1.17 GB\n"
        "[2026-02-22 22:36:40] INFO:     Uvicorn running on http://0.0.0.0:30000 "
        "(Press CTRL+C to quit)\n"
        "[2026-02-22 22:36:41] The server is fired up and ready to roll!\n"
    )
    code, out, err = run(["analyze", str(log), "--json", "--fail-on", "error"], capsys, monkeypatch)
    d = json.loads(out)
    assert not [f for f in d["findings"] if f["severity"] == "error"], d["findings"]
    assert code == 0, err
    code, _, _ = run(["analyze", str(log), "--json", "--fail-on", "info"], capsys, monkeypatch)
    assert code == 1


def test_markdown_to_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.md"
    code, out, _ = run(
        ["analyze", "--example", "--format", "markdown", "--out", str(target)], capsys, monkeypatch
    )
    assert code == 0
    assert out == ""
    md = target.read_text()
    assert md.startswith("## diag analyze: sglang startup reached `weights_load`")
    assert "```mermaid\n---\ndisplayMode: compact" in md and "\ngantt\n" in md  # front matter first
    assert "    section TP7" in md
    assert "<code>quant.fallback_unquantized</code>" in md


def test_perfetto_format(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(["analyze", "--example", "-f", "perfetto"], capsys, monkeypatch)
    assert code == 0
    trace = json.loads(out)
    tracks = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert [t for t in tracks if t.startswith("TP")] == [f"TP{i}" for i in range(8)]
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "weights_load"]
    assert len({e["pid"] for e in slices}) >= 8
    assert all(e["dur"] == 34_000_000 for e in slices if e["pid"] != 1)


def test_json_is_the_same_as_format_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, a, _ = run(["analyze", str(TIMEOUT_CASE), "--json", "--year", "2024"], capsys, monkeypatch)
    _, b, _ = run(
        ["analyze", str(TIMEOUT_CASE), "--format", "json", "--year", "2024"], capsys, monkeypatch
    )
    assert json.loads(a) == json.loads(b)
    stamps = [e["ts"] for f in json.loads(a)["findings"] for e in f["evidence"] if e["ts"]]
    assert stamps and all(s.startswith("2024-07-10T") for s in stamps)  # --year applied


# ---------------------------------------------------------------------------
# inputs: stdin, folders, compressed files, user rules


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run(["analyze", "-", "--json"], capsys, monkeypatch, stdin=EXAMPLE.read_bytes())
    assert code == 0
    d = json.loads(out)
    assert d["last_phase"] == "weights_load" and len(d["ranks"]) == 8


def test_folder_of_compressed_and_plain_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = EXAMPLE.read_text().splitlines(keepends=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "part1.log").write_text("".join(lines[:100]))
    (logs / "part2.log.gz").write_bytes(gzip.compress("".join(lines[100:]).encode()))
    code, out, _ = run(["analyze", str(logs), "--json"], capsys, monkeypatch)
    assert code == 0
    d = json.loads(out)
    assert len(d["sources"]) == 2
    assert d["last_phase"] == "weights_load"
    assert "quant.fallback_unquantized" in {f["id"] for f in d["findings"]}


def test_user_rules_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "site.chat_template.yaml").write_text(
        """id: site.chat_template
title: Default chat template in use
severity: info
role: root
frameworks: [sglang]
summary: The server fell back to the tokenizer's default chat template.
why: Our fine-tunes need their own template.
remedy: Pass --chat-template.
references: []
needles: ["chat template"]
match:
  patterns:
    - 'Using default HuggingFace chat template'
message: 'default chat template: {line}'
examples:
  match:
    - '[2026-02-22 22:34:53] Using default HuggingFace chat template with detected content'
  no_match:
    - '[2026-02-22 22:34:53] Load weight begin. avail mem=93.52 GB'
"""
    )
    code, out, err = run(
        ["analyze", "--example", "--json", "--rules", str(rules)], capsys, monkeypatch
    )
    assert code == 0, err
    found = {f["id"]: f for f in json.loads(out)["findings"]}
    assert found["site.chat_template"]["evidence"][0]["line"] == 3
    _, out, _ = run(["analyze", "--example", "--json"], capsys, monkeypatch)
    assert "site.chat_template" not in {f["id"] for f in json.loads(out)["findings"]}


# ---------------------------------------------------------------------------
# bad input: one clear line, exit 2, never a traceback


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["analyze"], "no input"),
        (["analyze", "/nonexistent/server.log"], "/nonexistent/server.log"),
    ],
)
def test_bad_input_one_line_exit_2(
    args: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run(args, capsys, monkeypatch)
    assert code == 2
    assert out == ""
    assert err.startswith("diag: error:") and needle in err.splitlines()[0]
    assert "Traceback" not in err
    assert "hint:" in err


def test_binary_and_empty_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    for path in (binary, empty):
        code, out, err = run(["analyze", str(path)], capsys, monkeypatch)
        assert code == 2, err
        assert err.startswith("diag: error:") and "Traceback" not in err
        assert out == ""


def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for args in (
        ["analyze", "--example", "--json", "--format", "markdown"],
        ["analyze", "--example", str(EXAMPLE)],
        ["analyze", "--example", "--format", "pdf"],
        ["analyze", "--example", "--fail-on", "sometimes"],
    ):
        code, out, err = run(args, capsys, monkeypatch)
        assert code == 2, args
        assert out == ""
        assert "Traceback" not in err


def test_unwritable_out_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "missing-dir" / "r.md"
    code, _, err = run(["analyze", "--example", "--out", str(target)], capsys, monkeypatch)
    assert code == 2
    assert err.startswith(f"diag: error: cannot write {target}")


def test_json_pipe_through_a_real_process(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    shutil.copy(TIMEOUT_CASE, log)
    r = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "--json", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["last_phase"] == "dist_init"


def test_progress_bar_only_on_a_terminal_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.commands import analyze as command

    calls: list[tuple[int, int]] = []
    real = command._progress

    def spy(enabled: bool) -> Any:
        calls.append((int(enabled), 0))
        return real(enabled)

    monkeypatch.setattr(command, "_progress", spy)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, _ = run(["analyze", "--example", "--format", "markdown"], capsys, monkeypatch)
    assert code == 0 and out.startswith("## diag analyze")
    code, out, err = run(["analyze", "--example", "--json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)
    # a bar for markdown on a tty, none for --json (the plain --json run does not even
    # build the CLI: diag.commands.fast)
    assert calls in ([(1, 0), (0, 0)], [(1, 0)]) and "reading logs" not in err


def test_wheel_ships_the_example_and_the_rules(tmp_path: Path) -> None:
    """Built as a wheel and installed elsewhere, `--example` still finds its log and rules."""
    import importlib.util

    # offline when hatchling is at hand; otherwise pip fetches it into an isolated build
    flags = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            *flags,
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(tmp_path.glob("diag-*.whl"))
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = subprocess.run(
        [sys.executable, "-c", "import diag, sys; print(diag.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert probe.stdout.startswith(str(target)), probe.stdout + probe.stderr
    r = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "--example", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["sources"][0].startswith(str(target))
    assert {"startup.cut_excerpt", "quant.fallback_unquantized"} <= {f["id"] for f in d["findings"]}


GOLDEN = ROOT / "fixtures" / "golden" / "example.positions.json"


def _positions(d: dict[str, Any]) -> dict[str, Any]:
    """What must not move: each rank's phases (start, end, first line) and each finding's
    evidence (file:line, rank, time)."""
    return {
        "last_phase": d["last_phase"],
        "ranks": {
            r["id"]: [[p["phase"], p["start"], p["end"], p["first_line"]] for p in r["phases"]]
            for r in d["ranks"]
        },
        "findings": {
            f["id"]: [
                [f"{Path(e['source']).name}:{e['line']}", e["rank"], e["ts"]] for e in f["evidence"]
            ]
            for f in d["findings"]
        },
    }


def test_example_golden_positions(example_json: dict[str, Any]) -> None:
    """Regenerate for review with: DIAG_REGEN_GOLDEN=1 pytest tests/test_cli_analyze.py -k golden"""
    got = _positions(example_json)
    if os.environ.get("DIAG_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got["last_phase"] == want["last_phase"]
    assert got["ranks"] == want["ranks"]
    # every finding of the golden file is still reported, with the same evidence lines;
    # new findings may appear (review them and regenerate)
    for fid, evidence in want["findings"].items():
        assert fid in got["findings"], f"{fid} is no longer reported on the example"
        assert got["findings"][fid] == evidence, fid


def test_quoted_glob_is_expanded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = EXAMPLE.read_text().splitlines(keepends=True)
    (tmp_path / "rank-a.log").write_text("".join(lines[:100]))
    (tmp_path / "rank-b.log").write_text("".join(lines[100:]))
    (tmp_path / "other.txt").write_text("not selected\n")
    code, out, _ = run(["analyze", str(tmp_path / "rank-*.log"), "--json"], capsys, monkeypatch)
    assert code == 0
    d = json.loads(out)
    assert [Path(s).name for s in d["sources"]] == ["rank-a.log", "rank-b.log"]
    code, _, err = run(["analyze", str(tmp_path / "none-*.log")], capsys, monkeypatch)
    assert code == 2 and "none-*.log" in err


def test_invalid_utf8_and_an_ascii_stdout(tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(
        b"[2026-02-22 22:35:01 TP0] Init torch distributed begin. \xff\xfe bad\n"
        b"[2026-02-22 22:35:05 TP0] Load weight begin. avail mem=1 GB \xc3\x28\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for args in (["--json"], []):
        r = subprocess.run(
            [sys.executable, "-m", "diag", "analyze", str(log), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
    assert "undecodable bytes replaced" in r.stdout


def test_width_applies_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(["analyze", "--example", "--width", "80"], capsys, monkeypatch)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    code, out, _ = run(["analyze", "--example"], capsys, monkeypatch)
    assert max(len(line) for line in out.splitlines()) > 80  # 120 in a pipe by default


def test_rules_folder_missing_or_without_rules_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's check: `--rules DIR` with no rule in DIR said nothing, and a missing
    DIR gave a usage box. A missing folder is one error line and exit 2; a folder with no
    rule is one warning line on stderr, and the run goes on."""
    missing = tmp_path / "no-such-rules"
    for args in (["analyze", "--example", "--rules", str(missing)],
                 ["rules", "list", "--rules", str(missing)]):
        code, out, err = run(args, capsys, monkeypatch)
        assert code == 2 and out == ""
        assert err.splitlines()[0] == f"diag: error: {missing}: no such folder (--rules)"
        assert err.splitlines()[1].startswith("hint: ") and len(err.splitlines()) == 2
    empty = tmp_path / "my-rules"
    empty.mkdir()
    (empty / "README.md").write_text("rules go here\n")
    warning = f"diag: warning: {empty}: no rule files (*.yaml, *.yml) in it: --rules adds no rule"
    code, out, err = run(["analyze", "--example", "--json", "--rules", str(empty)], capsys,
                         monkeypatch)
    assert code == 0 and json.loads(out)["framework"] == "sglang"
    assert err.splitlines() == [warning]
    code, out, err = run(["rules", "list", "--rules", str(empty)], capsys, monkeypatch)
    assert code == 0 and "startup.stalled" in out and err.splitlines() == [warning]
