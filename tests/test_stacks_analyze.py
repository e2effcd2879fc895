"""Stack dumps embedded in a log, through the real log parser and `analyze` (both the
line-by-line path and the streaming prefilter path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diag.analyze import analyze

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "corpus"
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
FILLER = "".join(
    f"[2026-01-29 13:{i // 60 % 60:02d}:{i % 60:02d} TP0] Decode batch. #running-req: 1, "
    f"#token: {i}, gen throughput (token/s): 41.2\n"
    for i in range(300)
)


PARAMS = [
    pytest.param(
        case,
        prefilter,
        id=f"{case}-{'prefilter' if prefilter else 'lines'}",
    )
    for case in CASES
    for prefilter in (False, True)
]


@pytest.mark.parametrize(("case", "prefilter"), PARAMS)
def test_dump_inside_a_log(case: str, prefilter: bool, tmp_path: Path) -> None:
    want = tomllib.loads((CORPUS / case / "case.toml").read_text())["wait_site"]
    log = tmp_path / "server.log"
    log.write_text(FILLER + (CORPUS / case / "dump.txt").read_text() + FILLER)
    result = analyze([log], prefilter=prefilter)
    sites = {p.wait_site for p in result.stack_processes}
    assert want in sites
    # each process points into the log, after the filler
    assert all(p.line is not None and p.line > 300 for p in result.stack_processes)


INTERLEAVED = """\
Current thread 0x00007f7285a4a480 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2050 in {fn}
  File "/workspace/vllm/model_executor/layers/linear.py", line 548 in forward
  File "<string>", line 1 in <module>
"""


def test_interleaved_rank_prefixed_faulthandler_through_the_log_parser(tmp_path: Path) -> None:
    a = INTERLEAVED.format(fn="all_reduce").splitlines()
    b = INTERLEAVED.format(fn="barrier").splitlines()
    lines = [f"[rank{r}]: {x}" for pair in zip(a, b, strict=True) for r, x in enumerate(pair)]
    log = tmp_path / "worker.log"
    log.write_text("\n".join(lines) + "\n")
    procs = analyze([log], prefilter=False).stack_processes
    leaves = sorted((p.rank.tp if p.rank else None, p.threads[0].frames[0].name) for p in procs)
    assert leaves == [(0, "all_reduce"), (1, "barrier")]


LAB_FR = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "lab"


@pytest.mark.parametrize(
    "prefilter",
    [
        pytest.param(False, id="lines"),
        pytest.param(True, id="prefilter"),
    ],
)
def test_torch_failed_collective_report_through_analyze(prefilter: bool) -> None:
    log = LAB_FR / "gpu-h200x2-flight-recorder" / "stdout.txt"
    procs = analyze([log], prefilter=prefilter).stack_processes
    reports = [p for p in procs if p.mode == "c10d"]
    assert [(p.rank.tp if p.rank else None, p.wait_site) for p in reports] == [
        (0, "stack.nccl_collective")
    ]
    assert len(reports[0].threads[0].frames) == 9


MADE = Path(__file__).resolve().parent.parent / "fixtures" / "stacks" / "made"
ALONE = [
    (case.name, view)
    for case in sorted(MADE.iterdir())
    if (case / "case.toml").is_file()
    and not tomllib.loads((case / "case.toml").read_text()).get("native_only")
    for view in (
        "pyspy.txt",
        "pyspy.json",
        "pystack.txt",
        "faulthandler.txt",
        "pytest-timeout-thread.txt",
    )
    if (case / view).is_file()
]


@pytest.mark.parametrize(("case", "view"), ALONE, ids=[f"{c}/{v}" for c, v in ALONE])
def test_a_real_dump_alone_is_analysed_not_refused(case: str, view: str) -> None:
    """`diag analyze dump.txt` on a dump with no log line around it (pystack, py-spy --json,
    pytest-timeout were refused as "not a log")."""
    want = tomllib.loads((MADE / case / "case.toml").read_text())["wait_site"]
    procs = analyze([MADE / case / view], prefilter=True).stack_processes
    assert {p.wait_site for p in procs} == {want}
