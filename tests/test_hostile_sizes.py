"""Sizes and numbers taken from the input: an args line's tp_size, digit runs longer than
Python's int limit, Unicode digits, YAML alias bombs in rule files, rule regexes with no
total budget (issue 12). Each is bounded with a note or refused with one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from diag import limits
from diag.analyze import analyze, analyze_text
from diag.errors import RuleError
from diag.parse.config import normalise
from diag.rules import engine
from diag.rules.loader import load_dir
from diag.timeline import expected_ranks

ARGS = "[2025-03-14 06:55:00] server_args=ServerArgs(model_path='/m', tp_size={tp}, pp_size={pp})\n"
INIT = "[2025-03-14 06:55:09 TP0] Init torch distributed begin.\n"


def test_huge_tp_size_is_not_enumerated() -> None:
    """A 2-line log with tp_size=100000000 enumerated every rank (killed at 300 s)."""
    t0 = time.monotonic()
    a = analyze_text(ARGS.format(tp=100_000_000, pp=1) + INIT)
    assert time.monotonic() - t0 < 30
    assert a.expected_ranks == ()
    assert any("implausible parallel layout" in n for n in a.notes)


def test_large_world_is_capped_with_a_note() -> None:
    a = analyze_text(ARGS.format(tp=4096, pp=16) + INIT)
    assert a.expected_ranks == ()
    assert any("listed up to 4096" in n for n in a.notes)


def test_normal_world_still_enumerated() -> None:
    a = analyze_text(ARGS.format(tp=8, pp=1) + INIT)
    assert len(a.expected_ranks) == 8


def test_expected_ranks_cap_in_the_timeline() -> None:
    assert expected_ranks({"tp": 10_000, "pp": 10_000}) == ()
    assert len(expected_ranks({"tp": 4, "pp": 2})) == 8


@pytest.mark.parametrize("value", ["²", "٣", "9" * 5000, "1" * 19])
def test_config_ints_are_ascii_and_bounded(value: str) -> None:
    out = normalise({"tp_size": value, "port": value})
    assert "tp" not in out and "port" not in out


def test_config_implausible_sizes_listed() -> None:
    out = normalise({"tp_size": 70_000, "pp_size": 2})
    assert out["implausible"] == {"tp": 70_000} and out["pp"] == 2
    out = normalise({"tp_size": 1024, "pp_size": 1024})
    assert out["implausible"] == {"tp": 1024, "pp": 1024}


def test_digit_runs_in_an_args_line_do_not_crash() -> None:
    big = "9" * 5000
    a = analyze_text(ARGS.format(tp=big, pp="'²'") + INIT)
    assert a.expected_ranks == ()


@pytest.mark.parametrize(
    "value", ["1", "-3", "+7", "٣", "²", "9" * 5000, "0x10", "", " 12 ", b"12", b"\xff", 1.5]
)
def test_ascii_int(value: object) -> None:
    got = limits.ascii_int(value)
    if value in ("1", "-3", "+7", " 12 ", b"12"):
        assert isinstance(got, int)
    else:
        assert got is None


BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_yaml_billion_laughs_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "lol.yaml").write_text(BOMB)
    t0 = time.monotonic()
    with pytest.raises(RuleError, match=r"lol\.yaml: refused, its YAML aliases expand"):
        load_dir(tmp_path)
    assert time.monotonic() - t0 < 10


def test_yaml_recursive_alias_is_refused(tmp_path: Path) -> None:
    (tmp_path / "rec.yaml").write_text("a: &a [*a, 1]\n")
    with pytest.raises(RuleError, match=r"rec\.yaml: refused, a YAML alias refers"):
        load_dir(tmp_path)


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    from diag.rules.yamlsafe import check_expansion

    check_expansion("x: &x [1, 2]\ny: *x\nz: *x\n", "ok.yaml")  # no error


SLOW_RULE = """\
id: custom.slow
title: A slow pattern
severity: warning
role: root
frameworks: [sglang, vllm]
summary: A pattern that takes long on every line but never times out.
why: It tests the total regex budget.
remedy: Write a faster pattern.
references: []
needles: ["zzz"]
match:
  patterns:
    - '(z|zz)+y'
examples:
  match: []
  no_match: []
"""


def test_rule_regex_total_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pattern just under its per-line timeout ran on every line (2000 lines: 43 s)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "slow.yaml").write_text(SLOW_RULE)
    monkeypatch.setattr(engine, "RULE_REGEX_BUDGET_S", 0.3)
    log = tmp_path / "x.log"
    slow = "".join(f"[2025-03-14 06:55:10 TP0] {'z' * 19} {i}\n" for i in range(400))
    log.write_text(INIT + slow)
    t0 = time.monotonic()
    a = analyze([log], rules_dirs=[rules])
    assert any("rule custom.slow: its patterns used their" in n for n in a.notes)
    assert time.monotonic() - t0 < 60


def test_rule_file_with_a_5000_digit_number(tmp_path: Path) -> None:
    """Found by tests/fuzz/fuzz_rule_loader.py: the YAML loader's int() raised ValueError."""
    (tmp_path / "big.yaml").write_text("id: x\nseverity: " + "9" * 5000 + "\n")
    with pytest.raises(RuleError, match=r"big\.yaml: refused, it holds a number of more than"):
        load_dir(tmp_path)


BIG = "9" * 5000
OOM_LINE = "[2025-03-14 06:57:09 TP0] RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"


@pytest.mark.parametrize(
    "line",
    [
        f'  File "/x/y.py", line {BIG}, in f',
        f"Process {BIG}: python -m sglang.launch_server",
        f'Thread {BIG} (idle): "MainThread"',
        f"Pyspy dump for PID {BIG} (sglang::scheduler_TP0)",
        f"#0 c10d::ProcessGroupNCCL::wait from /lib/libtorch.so:{BIG}",
        "Loading safetensors checkpoint shards: 50% 1/2 [00:01<00:01, ..14it/s]",
        f"Capturing batches: 50% {BIG}/{BIG} [00:01<00:01, 14.0it/s]",
    ],
)
def test_digit_runs_and_garbled_bars_in_dumps(line: str) -> None:
    """Found by benchmarks/hostile_table.py: these raised ValueError tracebacks."""
    a = analyze_text(INIT + line + "\n" + OOM_LINE)
    assert "cuda.oom" in {f.id for f in a.findings}
