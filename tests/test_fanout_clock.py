"""Clock skew, offline: two node logs written by real ranks in two network namespaces (the
hosts of tests/test_fanout_ssh.py), one node's log writer shifted by a known offset, are
put on one clock by `diag analyze node0/server.log node1/server.log` within the error bound
it states; without the alignment the shifted node's ranks would look 400 s quieter than
the others (stragglers by the 300 s rule), with it no rank is called one. Skips where
network namespaces cannot be made (see tests/test_fanout_ssh.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fanout_ssh import Cluster, _why_not  # (tests/ is on sys.path: rootdir-less tests)

from diag.clocks import ClockAlignment, NodeClock, align_events, refuse_cross_host
from diag.model import Event, RankId, RankTimeline

REPO = Path(__file__).resolve().parent.parent
live = pytest.mark.live
RANK = REPO / "tests" / "live" / "skew_rank.py"
SHIFT = -400.25  # node1's log writer runs this far behind


def _event(node: str, tp: int, message: str, ts: dt.datetime) -> Event:
    return Event(source=f"{node}/server.log", line=1, ts=ts, rank=RankId(tp=tp),
                 phase="dist_init", kind="end", pattern="p", message=message)


def test_alignment_from_events() -> None:
    t0 = dt.datetime(2026, 1, 1, 12, 0, 0, 500000)
    events = [
        _event("node0", 0, "Init torch distributed ends. mem usage=0.00 GB", t0),
        _event("node1", 1, "Init torch distributed ends. mem usage=0.00 GB",
               t0 + dt.timedelta(seconds=12.0)),
        _event("node0", 0, "Capture cuda graph end. Time elapsed: 1 s",
               t0 + dt.timedelta(seconds=60)),
        _event("node1", 1, "Capture cuda graph end. Time elapsed: 1 s",
               t0 + dt.timedelta(seconds=60 + 12.2)),
    ]
    a = align_events(events, folders=True)
    assert a is not None and a.reference == "node0"
    (c,) = a.nodes
    assert c.node == "node1" and c.applied and c.anchors == 2
    assert abs(c.offset_s - 12.1) <= 0.001 and c.error_s >= 0.1
    assert abs(c.offset_s - 12.0) <= c.error_s
    # one node's log only: nothing to align
    assert align_events(events[::2], folders=True) is None
    # offsets measured at collection stand in for the anchors where they cover every node
    m = align_events(events, folders=True, known={"node0": (0.01, 0.02), "node1": (12.0, 0.03)})
    assert m is not None and m.reference == "the collecting machine"
    assert [(c.node, c.offset_s, c.applied) for c in m.nodes] == [("node0", 0.01, False),
                                                                  ("node1", 12.0, True)]
    assert "measured by the fan-out" in m.notes[1]


def test_cross_host_straggler_within_the_bound_is_refused() -> None:
    a, b = RankId(tp=0), RankId(tp=1)
    alignment = ClockAlignment("node0", (NodeClock("node1", 5.0, 2.0, 1, ("rendezvous",), True),),
                               (), (), node_of={a: "node0", b: "node1"})

    def t(rank: RankId, silent: float) -> RankTimeline:
        return RankTimeline(rank=rank, phases=(), last_ts=None, silent_s=silent)

    kept, notes = refuse_cross_host((b,), [t(a, 10.0), t(b, 11.5)], alignment)
    assert kept == () and "within the clocks' error bound" in notes[0]
    kept, notes = refuse_cross_host((b,), [t(a, 10.0), t(b, 400.0)], alignment)
    assert kept == (b,) and not notes


@pytest.fixture(scope="module")
def node_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    why = _why_not()
    if why:
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("skew"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        c.up()
        ready = c.tmp / "ready"
        ready.mkdir()
        placement = {0: 0, 1: 0, 2: 1, 3: 1}  # rank -> host (node0: TP0-1, node1: TP2-3)
        for rank, host in placement.items():
            folder = c.tmp / f"node{host}"
            folder.mkdir(exist_ok=True)
            log = (folder / "server.log").open("ab")
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", c.ns[host], sys.executable, str(RANK), "--rank",
                 str(rank), "--world", "4", "--master-addr", "10.232.0.1", "--master-port",
                 "29650", "--clock-shift", str(SHIFT if host == 1 else 0.0), "--hang-rank", "3",
                 "--ready-dir", str(ready)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ,
                                                           "GLOO_SOCKET_IFNAME": "mesh0",
                                                           # (c10d's own C++ warnings carry
                                                           # the unshifted clock)
                                                           "TORCH_CPP_LOG_LEVEL": "ERROR"},
                start_new_session=True,
            ))
            log.close()
        deadline = time.monotonic() + 180
        while not all((ready / f"rank{r}").exists() for r in placement):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = {p.parent.name: p.read_text()[-800:]
                        for p in c.tmp.glob("node*/server.log")}
                raise RuntimeError(f"ranks not ready: {logs}")
            time.sleep(0.3)
        time.sleep(1.0)
        yield c.tmp
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9)
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        c.down()


@live
def test_node_logs_aligned_within_the_stated_bound(node_logs: Path) -> None:
    def last_stamp(name: str) -> dt.datetime:
        stamps = re.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) TP",
                            (node_logs / name).read_text(), re.M)
        return dt.datetime.fromisoformat(stamps[-1])

    # as written, node1's ranks went quiet 400 s before node0's (the 300 s straggler rule)
    raw_gap = (last_stamp("node0/server.log") - last_stamp("node1/server.log")).total_seconds()
    assert raw_gap > 300, raw_gap
    r = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "node0/server.log", "node1/server.log",
         "--json"], capture_output=True, text=True, timeout=180, cwd=node_logs,
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    view = json.loads(r.stdout)
    text = json.dumps(view, ensure_ascii=False)
    m = re.search(r"clock of node1: ([-+][\d.]+) s ± ([\d.]+) s against node0", text)
    assert m, text[:4000]
    offset, bound = float(m.group(1)), float(m.group(2))
    assert abs(offset - SHIFT) <= bound, (offset, bound)
    assert bound < 3.0, bound  # 1 s time stamps: about a second, not more
    assert f"its times are shifted by {-offset:+.3f} s" in text, text[:4000]
    # on one clock, every rank went quiet at the same moment: no straggler
    analysis = view.get("analysis", view)
    assert analysis["stragglers"] == [], analysis["stragglers"]
    silent = [r["silent_s"] for r in analysis["ranks"] if r.get("silent_s") is not None]
    assert len(silent) == 4 and max(silent) - min(silent) <= bound + 1.0, silent
