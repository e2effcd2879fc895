"""Properties of the rules engine on arbitrary input: it never raises, and what it reports
is well formed (known severities, evidence inside the input, sorted, each id once)."""

from __future__ import annotations

import datetime as dt

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.model import SEVERITIES, Analysis, RankId, Record
from diag.rules import apply_rules, needles

T0 = dt.datetime(2026, 1, 1)
# text built from the rules' own needles and log-ish noise, so that rules do fire
WORDS = st.sampled_from(
    [
        *needles(),
        "ERROR",
        "Traceback",
        "RuntimeError:",
        "CUDA",
        "NCCL",
        "TP3",
        ":",
        "(",
        ")",
        "\\",
        "[",
        "]",
        "0",
        "1.5",
        "it/s]",
        "s/it]",
        "%|",
        "Killed",
        " ",
    ]
)
LINES = st.lists(WORDS, max_size=12).map(" ".join)


@st.composite
def records(draw: st.DrawFn) -> list[Record]:
    out = []
    for i, line in enumerate(draw(st.lists(LINES | st.text(max_size=80), max_size=25))):
        cont = tuple(draw(st.lists(LINES, max_size=3)))
        tp = draw(st.none() | st.integers(0, 7))
        level = draw(st.sampled_from([None, "INFO", "WARNING", "ERROR"]))
        out.append(
            Record(
                source="x.log",
                line=1 + i * 5,
                message=line,
                raw=line,
                ts=T0 + dt.timedelta(seconds=i),
                rank=RankId(tp=tp) if tp is not None else None,
                level=level,
                continuation=cont,
            )
        )
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_arbitrary_records_never_raise_and_findings_are_well_formed(
    recs: list[Record],
) -> None:
    base = Analysis(
        sources=("x.log",),
        framework="unknown",
        version=None,
        config={},
        ranks=(),
        expected_ranks=(),
        missing_ranks=(),
        stragglers=(),
        log_end=None,
        records=len(recs),
    )
    out = apply_rules(base, recs)
    ids = [f.id for f in out.findings]
    assert len(ids) == len(set(ids))
    severities = [SEVERITIES.index(f.severity) for f in out.findings]
    assert severities == sorted(severities)
    last_line = max((r.line + len(r.continuation) for r in recs), default=0)
    for f in out.findings:
        assert f.remedy and f.title
        assert f.evidence_total >= len(f.evidence) >= 1
        assert all(1 <= e.line <= last_line for e in f.evidence)
        if f.role == "cascade":
            assert f.cascade_of in ids and f.cascade_of != f.id
            followed = out.findings[ids.index(f.cascade_of)]
            assert followed.cascade_of != f.id  # never two findings following each other
