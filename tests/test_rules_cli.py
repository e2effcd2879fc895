"""`diag rules list|show|test` through the real entry point (exit codes included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_rules_engine import GOOD_RULE as RULE
from typer.testing import CliRunner

from diag.cli import app

runner = CliRunner()


def test_list_json_is_a_list_of_rule_objects() -> None:
    result = runner.invoke(app, ["rules", "list", "--json"])
    assert result.exit_code == 0, result.output
    rules = json.loads(result.output)
    assert isinstance(rules, list) and len(rules) >= 35
    oom = next(r for r in rules if r["id"] == "cuda.oom")
    assert oom["severity"] == "error" and oom["remedy"] and oom["patterns"]
    assert {"id", "title", "severity", "role", "remedy", "references"} <= set(oom)


def test_list_table_and_show() -> None:
    result = runner.invoke(app, ["rules", "list"])
    assert result.exit_code == 0 and "startup.stalled" in result.output
    shown = runner.invoke(app, ["rules", "show", "process.killed"])
    assert shown.exit_code == 0
    assert "cascade of: cuda.oom" in shown.output and "sigquit" in shown.output


def test_show_by_finding_id_lists_every_rule_reporting_it() -> None:
    shown = runner.invoke(app, ["rules", "show", "python.exception"])
    assert shown.exit_code == 0
    assert "python.exception_truncated" in shown.output


def test_builtin_examples_pass() -> None:
    result = runner.invoke(app, ["rules", "test"])
    assert result.exit_code == 0, result.output
    assert " 0 failed" in result.output


def test_failing_example_exits_1_with_a_table(tmp_path: Path) -> None:
    (tmp_path / "disk.yaml").write_text(
        RULE.replace("no_match: ['all good']", "no_match: ['No space left on device']")
    )
    result = runner.invoke(app, ["rules", "test", str(tmp_path)])
    assert result.exit_code == 1
    assert "FAIL" in result.output and "custom.disk_full" in result.output
    (tmp_path / "disk.yaml").write_text(RULE)
    ok = runner.invoke(app, ["rules", "test", str(tmp_path), "-v"])
    assert ok.exit_code == 0 and "2 passed, 0 failed" in ok.output


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["rules", "show", "no.such"], "no rule 'no.such'"),
        (["rules", "test", "/no/such/dir"], "/no/such/dir: no such folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], text: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "diag", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr


def test_invalid_rule_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(RULE.replace("remedy: Free space (`df -h`).\n", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "diag", "rules", "test", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert str(bad) in proc.stderr and "remedy" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_schema_command_prints_the_schema_the_loader_uses() -> None:
    import jsonschema
    import yaml

    result = runner.invoke(app, ["rules", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(yaml.safe_load(RULE)))
    assert list(validator.iter_errors(yaml.safe_load(RULE.replace("remedy:", "fix:"))))


def _ids() -> list[str]:
    from diag.rules.loader import load_rules

    return sorted(r.id for r in load_rules([]))


def test_list_in_a_pipe_never_cuts_a_rule_id() -> None:
    """Piped (not a terminal), `rules list` prints fixed columns that cut nothing, at any
    COLUMNS (a new user's check: ids cut at 24 characters in `diag rules list | grep`)."""
    for columns in ("40", "80", "200"):
        result = runner.invoke(app, ["rules", "list"], env={"COLUMNS": columns})
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].split() == ["id", "finding", "severity", "role", "kind", "title"]
        assert [line.split()[0] for line in lines[1:]] == _ids()
        assert "…" not in result.output
        stalled = next(line for line in lines if line.startswith("startup.stalled "))
        assert stalled.split()[1:6] == ["-", "error", "root", "stalled", "Startup"]


def test_list_on_an_80_column_terminal_keeps_ids_whole() -> None:
    import re

    result = runner.invoke(
        app, ["rules", "list"], env={"COLUMNS": "80", "FORCE_COLOR": "1", "NO_COLOR": ""}
    )
    assert result.exit_code == 0, result.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.output)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    firsts = [line.split()[0] for line in lines[1:-1] if line[:1].strip()]
    assert firsts == _ids()
    assert lines[-1] == f"{len(_ids())} rules"


def test_rules_test_says_what_is_wrong_with_its_folder(tmp_path: Path) -> None:
    """A missing folder, a file, a folder with no rule: one line each, with a hint that
    fits (not the invalid-rule-file hint), exit 2."""
    (tmp_path / "notes.txt").write_text("no rules here\n")
    cases = {
        tmp_path / "missing": "no such folder",
        tmp_path / "notes.txt": "not a folder",
        tmp_path: "no rule files (*.yaml, *.yml) found",
    }
    for folder, said in cases.items():
        proc = subprocess.run(
            [sys.executable, "-m", "diag", "rules", "test", str(folder)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert proc.returncode == 2, proc.stderr
        error, hint = proc.stderr.splitlines()
        assert error == f"diag: error: {folder}: {said}"
        assert hint.startswith("hint: ") and "Compare the rule file" not in hint
