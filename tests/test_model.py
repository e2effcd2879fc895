import dataclasses

from diag import model


def test_event_schema_matches_event_fields() -> None:
    schema = model.event_schema()
    fields = {f.name for f in dataclasses.fields(model.Event)} - {"fields"}
    assert set(schema) == fields


def test_rank_label() -> None:
    assert model.RankId(dp=0, tp=3).label == "DP0 TP3"
    assert model.RankId(node="1", tp=3).label == "node1 TP3"
    assert model.phase_index("listening") > model.phase_index("weights_load")
