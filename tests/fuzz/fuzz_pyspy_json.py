"""Fuzz the py-spy JSON reader: what a (hostile) py-spy on PATH prints goes through
loads_json and stackapi.parse; a shape py-spy never prints must be ValueError-like,
which the collector turns into a partial dump."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DIGITS, Gen, drive, instrumented  # noqa: E402

with instrumented():
    from diag.collect import stackapi
    from diag.limits import loads_json

_ODD: list[object] = [None, True, 1, -1, 10**30, 1.5, "x", "²", [], {}, [[]], {"a": {}}]
_ODD += DIGITS


def _structured(g: Gen) -> object:
    """A py-spy-shaped document with some values replaced by odd ones."""

    def odd() -> object:
        return _ODD[g.byte() % len(_ODD)]

    frame = {"name": "f", "filename": "/x.py", "module": None, "short_filename": "x.py",
             "line": 3, "locals": None, "is_entry": True}  # fmt: skip
    thread = {"pid": 1, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 1,
              "active": True, "owns_gil": False, "frames": [frame] * (g.byte() % 4)}  # fmt: skip
    for obj in (frame, thread):
        for key in list(obj):
            if g.byte() % 5 == 0:
                obj[key] = odd()
    threads: object = [thread] * (1 + g.byte() % 3)
    if g.byte() % 7 == 0:
        threads = odd()
    return threads


def one_input(data: bytes) -> None:
    g = Gen(data)
    mode = g.byte() % 3
    try:
        if mode == 0:
            doc = loads_json(g.rest())
        elif mode == 1:
            doc = loads_json(json.dumps(_structured(g)))
        else:
            doc = loads_json(Gen(data).mutate_text(json.dumps(_structured(g))))
    except (ValueError, UnicodeDecodeError):
        return
    # (what the collector turns into a partial dump: pyspy._Dumper.once)
    with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
        stackapi.parse(doc, pid=1, title=None, mode="python")


if __name__ == "__main__":
    drive("pyspy_json", one_input, float(sys.argv[1]) if len(sys.argv) > 1 else 60)
