"""Real dumps of real blocked processes (fixtures/stacks/made/, written by
tools/stack_lab.py and by pytest-timeout): every dumper's view names the wait site the
program set up, and paste damage around the py-spy text view changes nothing.

Each case.toml says the site (decided from what the program does); ``native_only`` marks
a wait that is a C call made straight from the program's own frame (``fcntl.flock``,
``TCPStore.get``): only a ``--native`` view can show it, and the other views must then name
no site rather than a wrong one. ``sites`` overrides the answer per file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from diag.model import StackProcess
from diag.stacks.classify import classified
from diag.stacks.pyspy_json import parse_pyspy_json
from diag.stacks.textdump import parse_stack_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MADE = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "made"
VIEWS = (
    "pyspy.txt",
    "pyspy-native.txt",
    "pyspy-locals.txt",
    "pyspy.json",
    "pystack.txt",
    "faulthandler.txt",
    "pytest-timeout-thread.txt",
    "pytest-timeout-signal.txt",
    "gdb-bt.txt",
    "eu-stack.txt",
)


# the views that show native frames (a wait made by a C call straight from the program's
# frame is visible there only)
NATIVE_VIEWS = frozenset({"pyspy-native.txt", "gdb-bt.txt", "eu-stack.txt"})
# gdb's and eu-stack's views have no Python frame: what the native frames alone say
PYTHONLESS: dict[tuple[str, str], str] = {
    # the idle event loop is its epoll_wait on the listening socket: a socket wait
    ("asyncio-server-idle", "gdb-bt.txt"): "stack.ipc_wait",
    ("asyncio-server-idle", "eu-stack.txt"): "stack.ipc_wait",
    # filelock polls with time.sleep: without the Python frames it is a sleep
    ("filelock-acquire-held-by-peer", "gdb-bt.txt"): "stack.idle_loop",
    ("filelock-acquire-held-by-peer", "eu-stack.txt"): "stack.idle_loop",
}


def _cases() -> list[tuple[str, str, str]]:
    out = []
    for d in sorted(MADE.iterdir()):
        if not (d / "case.toml").is_file():
            continue
        case = tomllib.loads((d / "case.toml").read_text())
        for view in VIEWS:
            if not (d / view).is_file():
                continue
            want = case["wait_site"]
            if case.get("native_only") and view not in NATIVE_VIEWS:
                want = ""
            want = case.get("sites", {}).get(view, want)
            want = PYTHONLESS.get((d.name, view), want)
            out.append((d.name, view, want))
    return out


CASES = _cases()


def _parse(path: Path) -> list[StackProcess]:
    text = path.read_text()
    if path.suffix == ".json":
        return [classified(parse_pyspy_json(json.loads(text), pid=None, title=None, mode="json"))]
    return parse_stack_text(text, source=path.name)


def test_the_lab_made_every_view_of_every_scenario() -> None:
    names = {c[0] for c in CASES}
    assert len(names) >= 12
    for name in names:
        views = {c[1] for c in CASES if c[0] == name}
        if name.startswith(("pytest-timeout", "gdb-")):
            continue
        assert {"pyspy.txt", "pyspy-native.txt", "pyspy.json", "faulthandler.txt"} <= views, name


@pytest.mark.parametrize(("case", "view", "want"), CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_each_view_names_the_wait_site(case: str, view: str, want: str) -> None:
    procs = _parse(MADE / case / view)
    assert len(procs) == 1, [p.title for p in procs]
    assert (procs[0].wait_site or "") == want


def _pyspy_cases() -> list[tuple[str, str]]:
    return [(c[0], c[2]) for c in CASES if c[1] == "pyspy.txt"]


def _damaged(text: str) -> dict[str, str]:
    lines = text.splitlines()
    body = [ln for ln in lines if not ln.startswith(("Process ", "Python v"))]
    while body and not body[0].strip():
        body.pop(0)
    return {
        "compose prefix": "\n".join(f"vllm-worker-1  | {ln}" for ln in lines),
        "markdown quote": "\n".join(f"> {ln}" for ln in lines),
        "fenced in a details block": "<details>\n\n```\n" + text + "```\n</details>\n",
        "no Process/Python header": "\n".join(body),
        "CRLF": text.replace("\n", "\r\n"),
        "newlines lost": " ".join(ln.strip() for ln in body),
        "tabs": text.replace("    ", "\t"),
    }


@pytest.mark.parametrize(("case", "want"), _pyspy_cases(), ids=[c[0] for c in _pyspy_cases()])
def test_paste_damage_around_a_real_dump_changes_nothing(case: str, want: str) -> None:
    text = (MADE / case / "pyspy.txt").read_text()
    # the program text in py-spy's `Process N: python -c ...` title is part of the dump
    # only in this lab; a pasted dump's title is one line
    first, _, rest = text.partition("\nPython v")
    text = first.splitlines()[0] + "\nPython v" + rest
    for how, damaged in _damaged(text).items():
        procs = parse_stack_text(damaged)
        assert [p.wait_site or "" for p in procs] == [want], how


def test_an_eu_stack_file_alone_is_read_as_a_dump() -> None:
    # no line of eu-stack's output is a log line: `diag analyze` still reads its frames
    from diag.analyze import analyze

    a = analyze([MADE / "torch-gloo-all-reduce-peer-sleeps" / "eu-stack.txt"])
    assert [p.wait_site for p in a.stack_processes] == ["stack.nccl_collective"]
