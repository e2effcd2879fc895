"""More of the rules engine on hand-built records: a 0% bar followed only by notices, the
store-connect warnings a later phase clears, Dynamo's error footer, an offline engine's
end, and an exception's message the framework logged before its traceback."""

from __future__ import annotations

import dataclasses
import datetime as dt

from test_rules_engine import SRC, T0, analysis, ids, rec, timeline

from diag.model import Event, Record
from diag.rules import apply_rules

END = T0 + dt.timedelta(seconds=55)


def _event(r: Record, phase: str, kind: str = "progress") -> Event:
    return Event(SRC, r.line, r.ts, r.rank, phase, kind, "test.event", r.message)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# torch's store-connect warnings


_CONNECT = (
    "[c10d] The client socket has failed to connect to [node-a]:29500 (errno: 99 - Cannot "
    "assign requested address)."
)


def test_a_connect_warning_followed_by_model_loading_was_retried_with_success() -> None:
    warn = rec(14, _CONNECT, s=2, level="WARNING")
    load = rec(18, "Starting to load model /models/m...", s=6)
    events = (_event(load, "weights_load", "begin"),)
    out = apply_rules(analysis(events=events, framework="vllm"), [warn, load])
    assert "dist.connect_failed" not in ids(out)


def test_a_connect_warning_with_nothing_after_it_or_a_raise_stays() -> None:
    warn = rec(14, _CONNECT, s=2, level="WARNING")
    world = rec(
        12, "world_size=2 rank=1 local_rank=1 distributed_init_method=tcp://x:1 backend=nccl"
    )
    events = (_event(world, "dist_init"),)
    out = apply_rules(analysis(events=events, framework="vllm"), [world, warn])
    assert "dist.connect_failed" in ids(out)
    # the raise after every address failed is no retry notice, whatever follows it
    raised = rec(
        14,
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
        "while trying to connect to (10.0.0.1, 29500).",
        s=2,
        level="ERROR",
    )
    load = rec(18, "Starting to load model /models/m...", s=600)
    events = (_event(load, "weights_load", "begin"),)
    out = apply_rules(analysis(events=events, framework="vllm"), [raised, load])
    assert "dist.connect_failed" in ids(out)


