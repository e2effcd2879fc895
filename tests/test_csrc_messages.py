"""vLLM's C++ check messages (fixtures/messages/csrc_messages.tsv, extracted from the sdists'
csrc/ by tools/extract_csrc_messages.py) that say a kernel or quantization scheme has no
build for this GPU's architecture are read by the rule their finding maps them to
(fixtures/messages/csrc_rule_map.yaml), as test_message_coverage does for Python messages."""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.rules.loader import Rule, builtin_rules

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "fixtures" / "messages" / "csrc_messages.tsv"
MAP = ROOT / "fixtures" / "messages" / "csrc_rule_map.yaml"

_spec = importlib.util.spec_from_file_location("message_table", ROOT / "tools" / "message_table.py")
assert _spec is not None and _spec.loader is not None
_mt = sys.modules.get("message_table") or importlib.util.module_from_spec(_spec)
if "message_table" not in sys.modules:
    sys.modules["message_table"] = _mt
    _spec.loader.exec_module(_mt)

# what STD_TORCH_CHECK puts before the message (function, file:line), and vLLM's
# STD_TORCH_CHECK_NOT_IMPLEMENTED's marker (csrc/torch_utils.h)
_PREFIX = re.compile(r"^\{\}, \{\}:\{\}, (?:NotImplementedError: )?")
# measured (a ratchet): rows the map selects, per finding
MIN_SELECTED = {"quant.unsupported": 14, "cuda.arch_unsupported": 72}


def message_of(template: str) -> str:
    return _PREFIX.sub("", template)


@lru_cache(maxsize=1)
def table() -> tuple[Any, ...]:
    return tuple(_mt.load_table(TABLE))


@lru_cache(maxsize=1)
def rule_map() -> dict[str, list[re.Pattern[str]]]:
    data = yaml.safe_load(MAP.read_text(encoding="utf-8"))
    return {k: [re.compile(p) for p in v["select"]] for k, v in data.items()}


def finding_of(template: str) -> str | None:
    msg = message_of(template)
    for finding, pats in rule_map().items():
        if any(p.search(msg) for p in pats):
            return finding
    return None


def _hits(rule: Rule, line: str) -> bool:
    assert rule.match is not None
    low = line.lower()
    if not any(n in low for n in rule.needles):
        return False
    if not any(p.search(line, timeout=1.0) for p in rule.match.patterns):
        return False
    return not any(ex.search(line, timeout=1.0) for ex in rule.match.exclude)


@lru_cache(maxsize=1)
def pattern_rules() -> tuple[Rule, ...]:
    return tuple(r for r in builtin_rules() if r.match is not None and r.applies_to("vllm"))


def readers(line: str) -> set[str]:
    """The findings of the pattern rules (vLLM's) that read the line."""
    return {r.finding_id for r in pattern_rules() if _hits(r, line)}


def selected() -> list[tuple[str, Any]]:
    return [(f, m) for m in table() if (f := finding_of(m.template)) is not None]


def test_table_is_present_and_sane() -> None:
    rows = table()
    assert len(rows) > 1000
    assert all(m.framework == "vllm" and m.file.startswith("csrc/") for m in rows)
    assert all(m.level.startswith("raise:") for m in rows)
    assert all(
        len(m.holes) == len(_mt.HOLE.findall(m.template.replace("{{", "").replace("}}", "")))
        for m in rows
    )
    # the example the map was written for: cutlass_scaled_mm with no kernel for the GPU
    assert any(
        m.template.endswith(
            "No compiled cutlass_scaled_mm for a compute capability less than CUDA device "
            "capability: {}"
        )
        for m in rows
    )


def test_every_select_pattern_selects_rows() -> None:
    for finding, pats in rule_map().items():
        for p in pats:
            assert any(p.search(message_of(m.template)) for m in table()), (finding, p.pattern)
    counts: dict[str, int] = {}
    for f, _ in selected():
        counts[f] = counts.get(f, 0) + 1
    for f, floor in MIN_SELECTED.items():
        assert counts.get(f, 0) >= floor, (f, counts)


@pytest.mark.parametrize("finding", sorted(MIN_SELECTED))
def test_selected_messages_are_read_by_their_rule(finding: str) -> None:
    others = set(rule_map()) - {finding}
    missed = []
    for f, m in selected():
        if f != finding:
            continue
        lines = list(_mt.samples(m))
        got = [readers(line) for line in lines]
        # read as its finding (one rendering is enough, as in test_message_coverage), never
        # as the other mapped finding
        if not any(finding in g for g in got) or any(g & others for g in got):
            missed.append(f"{m.where()} {sorted(set().union(*got))}: {lines[0][:160]}")
    assert not missed, f"{len(missed)} messages not read as {finding}:\n" + "\n".join(missed)
