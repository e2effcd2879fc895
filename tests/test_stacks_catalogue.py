"""The wait-site catalogue from the sources (diag/stacks/wait_catalogue.tsv, written by
tools/stack_catalogue.py from vLLM and SGLang releases): its shape, its coverage by the
classifier, and what it adds where a Python-only dump shows no wait of its own."""

from __future__ import annotations

from pathlib import Path

from diag.model import STACK_SITES, StackFrame
from diag.stacks.classify import RULES, catalogue_rule, classify_frames
from diag.stacks.frames import make_frame

ROOT = Path(__file__).resolve().parent.parent
TSV = ROOT / "diag" / "stacks" / "wait_catalogue.tsv"


def _rows() -> list[list[str]]:
    return [
        r.split("\t")
        for r in TSV.read_text().splitlines()
        if r and not r.startswith("#") and not r.startswith("framework\t")
    ]


ROWS = _rows()


def test_the_catalogue_covers_several_releases_of_both_frameworks() -> None:
    head = TSV.read_text().splitlines()[1]
    versions = head.split("sources of: ", 1)[1]
    assert versions.count(",") + versions.count(";") + 1 >= 10  # releases read
    assert {r[0] for r in ROWS} == {"sglang", "vllm"}
    assert len(ROWS) >= 1000
    for fw, rel, qual, site, prims, per in ROWS:
        assert qual and not qual.startswith(".")
        assert rel.startswith(f"{fw}/") and rel.endswith(".py")
        assert site in STACK_SITES and prims
        for chunk in per.split(";"):
            version, _, lines = chunk.partition(":")
            assert version and all(n.isdigit() for n in lines.split(","))


def _frame(rel: str, qual: str, line: int) -> StackFrame:
    return make_frame(qual, f"/usr/local/lib/python3.12/site-packages/{rel}:{line}")


def test_every_catalogued_wait_is_named_at_its_call_line() -> None:
    """A Python-only dump of a thread blocked in a catalogued call (innermost frame: the
    framework function at that line) gets the catalogue's site, unless a hand rule of the
    table names that frame first (a kv-transfer, collective or capture function, whose
    purpose says more than the primitive). None only where one line holds calls of two
    sites (over the versions read)."""
    silent = 0
    for _fw, rel, qual, site, _prims, per in ROWS:
        lines = {int(n) for c in per.split(";") for n in c.partition(":")[2].split(",") if n}
        line = min(lines)
        frames = (_frame(rel, qual, line), make_frame("<module>", "serve.py:1"))
        got, rule = classify_frames(frames)
        if rule is None:
            silent += 1
        elif rule.id == "catalogue":
            assert got == site, (rel, qual)
        else:
            assert rule in RULES, (rel, qual, rule.id)
    assert silent <= len(ROWS) // 100, silent


def test_a_catalogued_function_elsewhere_than_its_call_says_nothing() -> None:
    fw, rel, qual, site, _prims, per = next(r for r in ROWS if r[3] == "stack.ipc_wait")
    lines = {int(n) for c in per.split(";") for n in c.partition(":")[2].split(",") if n}
    free = next(n for n in range(1, 100_000) if n not in lines)
    assert catalogue_rule(_frame(rel, qual, min(lines))) is not None
    assert catalogue_rule(_frame(rel, qual, free)) is None
    # a frame of another package with the same path tail is not the framework's
    assert catalogue_rule(make_frame(qual, f"myproject/{rel.split('/', 1)[1]}:1")) is None


def test_a_python_only_dump_of_a_catalogued_zmq_receive_is_an_ipc_wait() -> None:
    """A ZeroMQ receive (Cython: no Python frame) of vLLM's engine client, seen from a
    source checkout's path (/workspace/vllm/vllm/...), with and without the class name."""
    row = next(
        (r for r in ROWS if r[3] == "stack.ipc_wait" and r[1].endswith("engine/core_client.py")),
        None,
    ) or next(r for r in ROWS if r[3] == "stack.ipc_wait")
    _fw, rel, qual, _site, _prims, per = row
    line = min(int(n) for c in per.split(";") for n in c.partition(":")[2].split(",") if n)
    bare = qual.rsplit(".", 1)[-1]  # faulthandler and py-spy before 3.11 show no class
    for name in (qual, bare):
        frames = (make_frame(name, f"/workspace/vllm/{rel}:{line}"),)
        assert classify_frames(frames)[0] == "stack.ipc_wait"
