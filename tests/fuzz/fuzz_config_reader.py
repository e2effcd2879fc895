"""Fuzz the config reader: args lines (ServerArgs(...), dict reprs, Namespace, vLLM's
engine config) through parse_config_message and normalise."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Gen, drive, instrumented  # noqa: E402

with instrumented():
    from diag.parse.config import detect_config_line, normalise, parse_config_message

HEADS = [
    "server_args=ServerArgs(", "server_args={", "non-default args: {", "args: Namespace(",
    "Initializing a V1 LLM engine (v0.9.0) with config: ",
]  # fmt: skip


def one_input(data: bytes) -> None:
    g = Gen(data)
    head = g.pick(HEADS) if g.byte() % 4 else ""
    body = g.rest().decode("utf-8", "replace")
    msg = Gen(data[::-1]).mutate_text(head + body)
    detect_config_line(msg)
    raw, _version = parse_config_message(msg)
    out = normalise(raw)
    for key in ("tp", "pp", "dp", "ep", "nnodes", "port"):
        v = out.get(key)
        assert v is None or (isinstance(v, int) and abs(v) < 10**18), (key, v)


if __name__ == "__main__":
    drive("config_reader", one_input, float(sys.argv[1]) if len(sys.argv) > 1 else 60)
