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
    for fw, rel, qual, site, prims, per, *_ in ROWS:
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
    for _fw, rel, qual, site, _prims, per, *_ in ROWS:
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


def _spans(row: list[str]) -> list[tuple[int, int]]:
    out = []
    for chunk in row[6].split(";"):
        a, _, b = chunk.partition(":")[2].partition("-")
        out.append((int(a), int(b)))
    return out


def test_every_row_says_where_its_function_lies_in_each_release() -> None:
    """Lines and spans come per run of releases (``0.4.1..0.4.3:``), each end a release
    named in the header; every call line lies inside the function in some release."""
    head = TSV.read_text().splitlines()[1].split("sources of: ", 1)[1]
    read = {fw: set(vs.split(", ")) for fw, _, vs in (p.partition(" ") for p in head.split("; "))}
    for row in ROWS:
        assert len(row) == 7, row[:3]
        for col in (row[5], row[6]):
            for chunk in col.split(";"):
                run = chunk.partition(":")[0]
                assert set(run.split("..")) <= read[row[0]], (row[:3], run)
        lines = {int(n) for c in row[5].split(";") for n in c.partition(":")[2].split(",") if n}
        assert all(any(a <= n <= b for a, b in _spans(row)) for n in lines), row[:3]


def _one_site_rows(site: str) -> list[list[str]]:
    """Rows of that site whose function has no row of another site."""
    sites: dict[tuple[str, str], set[str]] = {}
    for r in ROWS:
        sites.setdefault((r[1], r[2]), set()).add(r[3])
    return [r for r in ROWS if r[3] == site and sites[(r[1], r[2])] == {site}]


def test_a_catalogued_function_elsewhere_than_its_call_says_nothing() -> None:
    row = _one_site_rows("stack.ipc_wait")[0]
    _fw, rel, qual, _site, _prims, per, _ = row
    lines = {int(n) for c in per.split(";") for n in c.partition(":")[2].split(",") if n}
    inside = next(
        n for a, b in _spans(row) for n in range(a, b + 1) if n not in lines
    )  # in the function, not at a call, in a release read
    assert catalogue_rule(_frame(rel, qual, min(lines))) is not None
    assert catalogue_rule(_frame(rel, qual, inside)) is None
    # a frame of another package with the same path tail is not the framework's
    assert catalogue_rule(make_frame(qual, f"myproject/{rel.split('/', 1)[1]}:1")) is None


def test_a_line_inside_the_function_in_no_release_read_is_a_release_not_read() -> None:
    """A dump from a release between two read ones: its call lines moved. Where the line
    lies inside the function in none of the releases read, the function's calls say the
    site if they agree; a function with calls of two sites says nothing there."""
    for site in ("stack.ipc_wait", "stack.dist_init", "stack.weights_io"):
        row = _one_site_rows(site)[0]
        _fw, rel, qual, _site, _prims, _per, _ = row
        outside = max(b for _a, b in _spans(row)) + 5_000
        rule = catalogue_rule(_frame(rel, qual, outside))
        assert rule is not None and (rule.id, rule.site) == ("catalogue-other-release", site)
    sites: dict[tuple[str, str], set[str]] = {}
    for r in ROWS:
        sites.setdefault((r[1], r[2]), set()).add(r[3])
    mixed = next(r for r in ROWS if len(sites[(r[1], r[2])]) > 1)
    far = max(b for r in ROWS if r[1:3] == mixed[1:3] for _a, b in _spans(r)) + 5_000
    assert catalogue_rule(_frame(mixed[1], mixed[2], far)) is None


def test_a_python_only_dump_of_a_catalogued_zmq_receive_is_an_ipc_wait() -> None:
    """A ZeroMQ receive (Cython: no Python frame) of vLLM's engine client, seen from a
    source checkout's path (/workspace/vllm/vllm/...), with and without the class name."""
    row = next(
        (r for r in ROWS if r[3] == "stack.ipc_wait" and r[1].endswith("engine/core_client.py")),
        None,
    ) or next(r for r in ROWS if r[3] == "stack.ipc_wait")
    _fw, rel, qual, _site, _prims, per, *_ = row
    line = min(int(n) for c in per.split(";") for n in c.partition(":")[2].split(",") if n)
    bare = qual.rsplit(".", 1)[-1]  # faulthandler and py-spy before 3.11 show no class
    for name in (qual, bare):
        frames = (make_frame(name, f"/workspace/vllm/{rel}:{line}"),)
        assert classify_frames(frames)[0] == "stack.ipc_wait"


def test_entries_parsed_on_first_use_are_the_rows_read_whole() -> None:
    """The classifier keeps the catalogue's rows as read and parses a key's entries when a
    frame asks (speed): for every key, the entries a whole parse of the file gives, in
    file order."""
    from diag.stacks.classify import _catalogue, _entries, _Entry

    whole: dict[tuple[str, str], list[_Entry]] = {}
    for row in TSV.read_text(encoding="utf-8").splitlines():
        if not row or row.startswith(("#", "framework\t")):
            continue
        parts = row.split("\t")
        if len(parts) not in (6, 7) or parts[3] not in STACK_SITES:
            continue
        lines = frozenset(int(n) for chunk in parts[5].split(";")
                          for n in chunk.partition(":")[2].split(",") if n)
        spans = tuple(
            (int(a), int(b))
            for chunk in (parts[6].split(";") if len(parts) == 7 else ())
            for a, _, b in [chunk.partition(":")[2].partition("-")]
            if a.isdigit() and b.isdigit()
        )
        entry = _Entry(parts[3], lines, spans)
        whole.setdefault((parts[1], parts[2]), []).append(entry)
        bare = parts[2].rsplit(".", 1)[-1]
        if bare != parts[2]:
            whole.setdefault((parts[1], bare), []).append(entry)
    assert set(_catalogue()) == set(whole) and len(whole) > 1000
    for key, entries in whole.items():
        assert _entries(key) == tuple(entries), key
