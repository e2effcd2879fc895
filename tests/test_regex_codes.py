"""Patterns compiled from cached codes (diag.regex_codes) are the patterns re.compile makes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diag import cache
from diag.phases import load_catalogue
from diag.regex_codes import CodeTable, pattern_code


def _patterns() -> list[str]:
    cat = load_catalogue()
    return [e.pattern for e in cat.entries] + [r"(?P<a>x)(y)?\d+", r"(?i)ä[^\W\d]{2,}\b"]


def test_every_catalogue_pattern_equals_re_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DIAG_NO_CACHE", raising=False)
    pats = _patterns()
    asked: list[int] = []

    def patterns() -> list[str]:
        asked.append(1)
        return pats

    built = CodeTable("t-rx", "k", patterns)  # a miss: the codes are worked out and stored
    loaded = CodeTable("t-rx", "k", patterns)  # a hit: read from the cache
    for p in pats:
        want = re.compile(p)
        for table in (built, loaded):
            got = table.compile(p)
            assert got == want, p  # same pattern, flags and code
            assert got.groupindex == want.groupindex and got.groups == want.groups, p
    assert len(asked) == 1
    assert list(tmp_path.glob("t-rx@*.marshal"))


def test_unknown_pattern_no_cache_and_bad_code_fall_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path))
    table = CodeTable("t-rx", "k2", lambda: ["a+b"])
    assert table.compile("not(in)?it") == re.compile("not(in)?it")
    monkeypatch.setenv("DIAG_NO_CACHE", "1")
    assert CodeTable("t-rx", "k3", lambda: ["a+b"]).compile("a+b") == re.compile("a+b")
    monkeypatch.delenv("DIAG_NO_CACHE")
    code = pattern_code("a+b")
    assert code is not None
    flags, _raw, groups, gi, ig = code
    key = cache.content_key(["k4"], "regex-codes-1", *_engine_version())
    cache.store("t-rx", key, {"a+b": (flags, b"\xff\xff\xff\xff", groups, gi, ig)})
    assert CodeTable("t-rx", "k4", lambda: []).compile("a+b") == re.compile("a+b")


def _engine_version() -> tuple[str, str]:
    import _sre

    return str(_sre.MAGIC), str(_sre.CODESIZE)
