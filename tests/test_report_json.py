"""The JSON contract of `diag analyze --json` (schema_version 1) and its read-back."""

from __future__ import annotations

import dataclasses
import json

import pytest
from report_samples import stacks_analysis, story_analysis, straggler_analysis, untimed_analysis

from diag.errors import InputError
from diag.model import Analysis, RankId
from diag.report.json_out import (
    SCHEMA_VERSION,
    analysis_from_dict,
    analysis_to_dict,
    jsonable,
    parse_rank_label,
    render_json,
)

CONTRACT_KEYS = {
    "schema_version",
    "diag_version",
    "sources",
    "framework",
    "version",
    "config",
    "last_phase",
    "expected_ranks",
    "missing_ranks",
    "stragglers",
    "log_end",
    "ranks",
    "findings",
    "rules_checked",
    "stack_processes",
    "stack_groups",
    "notes",
}
RANK_KEYS = {"id", "tp", "dp", "pp", "ep", "node", "last_phase", "phases", "silent_s", "shards"}
RANK_KEYS |= {"inferred"}
PHASE_KEYS = {"phase", "start", "end", "duration_s"}
FINDING_KEYS = {
    "id",
    "severity",
    "title",
    "message",
    "role",
    "cascade_of",
    "ranks",
    "evidence",
    "evidence_total",
    "remedy",
    "why",
    "caveat",
    "references",
}
EVIDENCE_KEYS = {"source", "line", "rank", "ts", "text"}


def test_contract_keys_and_values_on_the_story() -> None:
    d = json.loads(render_json(story_analysis()))
    assert set(d) >= CONTRACT_KEYS
    assert d["schema_version"] == SCHEMA_VERSION == 1
    assert d["framework"] == "sglang"
    assert d["last_phase"] == "weights_load"
    assert d["log_end"] == "2026-02-22T22:35:55"
    assert d["config"]["tp_size"] == 8
    assert d["config"]["cuda_graph_bs"] == [1, 2, 4]  # tuple -> list
    tp3 = next(r for r in d["ranks"] if r["id"] == "TP3")
    assert set(tp3) >= RANK_KEYS
    assert (tp3["tp"], tp3["dp"], tp3["node"]) == (3, None, None)
    assert tp3["last_phase"] == "weights_load"
    assert tp3["silent_s"] == 11520.0
    assert tp3["shards"]["done"] == 64 and tp3["shards"]["complete"] is True
    load = tp3["phases"][1]
    assert set(load) >= PHASE_KEYS
    assert load == load | {
        "phase": "weights_load",
        "start": "2026-02-22T22:35:21",
        "end": "2026-02-22T22:35:55",
        "duration_s": 34.0,
    }
    quant = next(f for f in d["findings"] if f["id"] == "quant.fallback_unquantized")
    assert set(quant) >= FINDING_KEYS
    assert quant["ranks"] == ["TP3", "TP6"]
    assert set(quant["evidence"][0]) >= EVIDENCE_KEYS
    assert quant["evidence"][0]["rank"] == "TP3"
    assert quant["evidence"][0]["ts"] == "2026-02-22T22:35:22"
    assert quant["evidence"][0]["line"] == 120
    assert "startup.stalled" in d["rules_checked"]


def test_straggler_and_missing_are_labels() -> None:
    d = analysis_to_dict(straggler_analysis())
    assert d["stragglers"] == ["TP5"]
    assert d["missing_ranks"] == ["TP7"]
    assert d["expected_ranks"][:2] == ["TP0", "TP1"]


def test_stacks_serialised() -> None:
    d = analysis_to_dict(stacks_analysis())
    p = d["stack_processes"][1]
    assert p["pid"] == 88691 and p["rank"] == "PP1 TP1"
    assert p["wait_site"] == "stack.nccl_collective"
    frame = p["threads"][0]["frames"][0]
    assert frame == frame | {
        "name": "gloo::transport::tcp::UnboundBuffer::waitRecv",
        "native": True,
    }
    assert d["stack_groups"][0]["members"] == ["PP0 TP1", "PP1 TP1"]


@pytest.mark.parametrize(
    "build", [story_analysis, straggler_analysis, untimed_analysis, stacks_analysis]
)
def test_round_trip(build: object) -> None:
    original: Analysis = build()  # type: ignore[operator]
    through_json = json.loads(json.dumps(analysis_to_dict(original)))
    back = analysis_from_dict(through_json)
    # config values come back as JSON values (tuples as lists); events are not stored
    expected = dataclasses.replace(original, config=jsonable(dict(original.config)), events=())
    assert back == expected
    assert analysis_to_dict(back) == through_json


def test_round_trip_keeps_node_coordinates() -> None:
    rank = RankId(node="gpu-a", dp=1, tp=3)
    assert parse_rank_label(rank.label) == rank
    assert parse_rank_label(RankId(node="1", pp=0, tp=2, ep=2).label) == RankId(
        node="1", pp=0, tp=2, ep=2
    )


def test_read_back_rejects_other_schema_versions() -> None:
    d = analysis_to_dict(story_analysis())
    d["schema_version"] = 2
    with pytest.raises(InputError, match="schema_version 2"):
        analysis_from_dict(d)


def test_read_back_rejects_malformed() -> None:
    d = analysis_to_dict(story_analysis())
    d["findings"][0]["severity"] = "fatal"
    with pytest.raises(InputError, match="severity"):
        analysis_from_dict(d)
    d = analysis_to_dict(story_analysis())
    d["log_end"] = "yesterday"
    with pytest.raises(InputError, match="ISO 8601"):
        analysis_from_dict(d)


def test_jsonable_odd_values() -> None:
    assert jsonable({"a": {1, 2}, "b": float("nan"), 3: (None, True)}) == {
        "a": [1, 2],
        "b": "nan",
        "3": [None, True],
    }
    assert isinstance(jsonable(object()), str)
