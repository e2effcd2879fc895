"""`diag analyze BUNDLE`: the log analysis and the bundle's snapshot as one view.

The inputs are a real capture (fixtures/gpu/h200x2/cpu-w8): the log of an 8-rank mini
server that really hung in a TCPStore wait on an H200 host, and the snapshot `diag
snapshot --json` took of its live processes 10 s after the log's last line.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from test_cli_analyze import run

from diag.analyze import analyze
from diag.bundle.write import write_bundle
from diag.model import Snapshot
from diag.report.combined import combine, focus
from diag.report.combined_json import combined_to_dict
from diag.report.markdown import render_markdown
from diag.report.snapshot_read import snapshot_from_dict

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "fixtures" / "gpu" / "h200x2" / "cpu-w8"
LOG = CAPTURE / "server.log"


def _snapshot() -> Snapshot:
    return snapshot_from_dict(json.loads((CAPTURE / "snapshot-json.json").read_text()))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("bundles")
    snap = _snapshot()
    with_log = tmp / "log-and-snapshot.tar.gz"
    write_bundle(with_log, logs=[LOG], analysis=analyze([LOG]), snapshot=snap)
    alone = tmp / "snapshot-only.tar.gz"  # what `diag snapshot --out` writes
    write_bundle(alone, snapshot=snap)
    return with_log, alone


def test_snapshot_round_trips_through_its_json() -> None:
    snap = _snapshot()
    from diag.report.snapshot_json import snapshot_to_dict

    again = snapshot_from_dict(snapshot_to_dict(snap))
    assert again.processes == snap.processes
    assert again.groups == snap.groups
    assert [f.id for f in again.findings] == ["startup.cpu_side_hang", "startup.no_listen_port"]


def test_the_snapshot_proves_the_stall_the_log_alone_cannot() -> None:
    log_only = analyze([LOG])
    assert [f.id for f in log_only.findings] == ["startup.cut_excerpt"]
    view = combine(log_only, _snapshot())
    ids = [f.id for f in view.analysis.findings]
    assert ids[0] == "startup.stalled" and "startup.cut_excerpt" not in ids
    assert {"startup.cpu_side_hang", "startup.no_listen_port"} <= set(ids)
    stalled = view.analysis.findings[0]
    assert "18:19:00, 10 s after the log's last line (18:18:50)" in stalled.message
    assert "stuck (same frames in every sample)" in stalled.message
    assert stalled.evidence[0].line == 65  # the log's last line is the evidence
    assert view.stall_proven and view.stall_s == pytest.approx(10.03, abs=0.01)
    # every rank's silence now runs to the snapshot
    assert {round(r.silent_s or 0) for r in view.analysis.ranks} == {10}
    # the live table: one row per rank, its wait site, state, RSS, GPU
    tp3 = next(r for r in view.live if r.label == "TP3")
    assert (tp3.pid, tp3.wait_site, tp3.state, tp3.moving) == (1713, "stack.dist_init", "S", False)
    assert tp3.gpu_index == 1 and tp3.rss_bytes and tp3.rss_bytes > 2 << 30
    assert view.analysis.stack_groups[0].members == tuple(f"TP{i}" for i in range(8))
    assert "startup.no_listen_port" in view.analysis.rules_checked


def test_analyze_opens_both_bundles_and_names_the_wait_sites(
    bundles: tuple[Path, Path], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_log, alone = bundles
    code, out, err = run(["analyze", str(with_log)], capsys, monkeypatch)
    assert code == 0, err
    assert "Stalled: the log's last line is 10 s older than the snapshot." in out
    tp5 = next(x for x in out.splitlines() if x.startswith("TP5 ") and "stack.dist_init" in x)
    assert "S stuck" in tp5 and "kv_cache" in tp5
    assert " ERROR  startup.stalled" in out and "startup.cut_excerpt" not in out
    code, out, err = run(["analyze", str(alone)], capsys, monkeypatch)
    assert code == 0, err  # was: "not a log (binary data)"
    assert "All 8 ranks wait at stack.dist_init" in out
    assert sum("stack.dist_init" in x for x in out.splitlines() if x.startswith("TP")) == 8


def test_bundle_holds_raw_stacks_and_a_report_from_the_combined_view(
    bundles: tuple[Path, Path],
) -> None:
    with_log, _ = bundles
    with tarfile.open(with_log) as tar:
        names = tar.getnames()
        report = tar.extractfile("report.md").read().decode()  # type: ignore[union-attr]
        stack = json.loads(tar.extractfile("stacks/1710-TP0.json").read())  # type: ignore[union-attr]
    assert "stacks/1713-TP3.txt" in names and "stacks/1708-launcher.json" in names
    assert stack["threads"][0]["frames"][2]["name"] == "c10d::TCPStore::doWait"
    assert report.startswith("## diag: sglang startup stalled at `kv_cache` (proven by a live")
    assert "| TP3 | `kv_cache` | 10 s | S stuck |" in report
    assert "<summary><code>stack.dist_init</code>: TP0, TP1, TP2" in report
    # the silence to the snapshot (18:19:00), after the last phase as drawn (1 s long)
    assert (
        "    kv_cache :done, 2026-11-30 18:18:50, 1s\n    silent :crit, 2026-11-30 18:18:51, 9s"
        in report
    )


def test_markdown_stays_under_the_github_limit_and_says_what_it_left_out() -> None:
    view = combine(analyze([LOG]), _snapshot())
    f = view.analysis.findings[0]
    ev = dataclasses.replace(f.evidence[0], text="x" * 300)
    big = tuple(
        dataclasses.replace(f, id=f"custom.f{i}", evidence=(ev,) * 20, evidence_total=20)
        for i in range(60)
    )
    view = dataclasses.replace(view, analysis=dataclasses.replace(view.analysis, findings=big))
    md = render_markdown(view, limit=20_000)
    assert len(md) <= 20_000
    assert "Left out to fit GitHub's 20,000-character limit: evidence past" in md
    assert render_markdown(combine(analyze([LOG]), _snapshot())).count("Left out") == 0


def test_context_reads_the_log_inside_the_bundle(bundles: tuple[Path, Path]) -> None:
    from diag.report.combined import context_lines, load_case

    view = load_case([bundles[0]])
    lines = context_lines(view, 2)
    key = next(k for k in lines if k[1] == 65)
    assert key[0].endswith(".tar.gz:server.log")
    assert [n for n, _ in lines[key]] == [63, 64, 65]  # line 65 is the log's last
    assert "KV Cache is allocated" in dict(lines[key])[64]


def test_one_rank_and_the_json_of_the_combined_view() -> None:
    view = combine(analyze([LOG]), _snapshot())
    one = focus(view, "tp3")
    assert [r.rank.label for r in one.analysis.ranks] == ["TP3"]
    assert [r.label for r in one.live] == ["TP3"]
    data = combined_to_dict(view)
    assert data["live"]["stall_proven"] is True
    assert data["live"]["snapshot_finding_ids"] == [
        "startup.cpu_side_hang",
        "startup.no_listen_port",
    ]
    assert len([p for p in data["live"]["processes"] if p["wait_site"] == "stack.dist_init"]) == 8


def test_json_redacts_secrets_from_the_args_line(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = LOG.read_text().replace(
        "server_args=ServerArgs(model_path='diag-mini',",
        "server_args=ServerArgs(model_path='diag-mini', api_key='sk-live-12345678abcdef',",
    )
    assert "api_key" in text
    log = tmp_path / "server.log"
    log.write_text(text)
    code, out, err = run(["analyze", str(log), "--json"], capsys, monkeypatch)
    assert code == 0, err
    assert "sk-live-12345678abcdef" not in out
    assert '"api_key": "<redacted:field>"' in out
    json.loads(out)  # still the JSON contract


def test_two_servers_on_the_host_each_view_is_its_own() -> None:
    snap = _snapshot()
    # a second server on the host: the same processes under other pids, port and server
    other = tuple(
        dataclasses.replace(p, pid=p.pid + 1000, server=1, state="T" if p.rank else p.state)
        for p in snap.processes
    )
    second = dict(snap.servers[0], port=31000, launcher_pid=2708, outlier_tp_ranks=[3])
    both = dataclasses.replace(
        snap,
        processes=snap.processes + other,
        servers=(snap.servers[0], second),
        outlier_tp_ranks=(3,),
    )
    view = combine(analyze([LOG]), both)  # the log's args line says port 30000
    assert {r.pid for r in view.live} == {p.pid for p in snap.processes}
    assert not any(r.outlier for r in view.live)  # the other server's odd rank is not starred
    assert "launcher pid 1708" in view.verdict and "2708" not in view.verdict
    assert all(len(f.ranks) == len(set(f.ranks)) for f in view.analysis.findings)
    assert "1 other server(s) on the host left out of this view" in " ".join(view.analysis.notes)


def _with_snapshot_json(src: Path, out: Path, snapshot: bytes, *, drop_logs: bool) -> Path:
    """A copy of a bundle whose snapshot.json is replaced (the manifest kept consistent,
    so only the snapshot's content is wrong)."""
    import hashlib
    import io

    with tarfile.open(src) as tar:
        members = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    members["snapshot.json"] = snapshot
    manifest = json.loads(members.pop("manifest.json"))
    if drop_logs:
        members = {k: v for k, v in members.items() if not k.startswith("logs/")}
        manifest["logs"] = []
    manifest["members"] = {
        k: {"size": len(v), "sha256": hashlib.sha256(v).hexdigest()} for k, v in members.items()
    }
    with tarfile.open(out, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


@pytest.mark.parametrize(
    "damage",
    [
        {"processes": [{"pid": "x"}]},
        {"processes": {"a": 1}},
        {"taken_at": 5},
        {"gpus": [{"index": "zz"}]},
        {"schema_version": 2},
    ],
)
def test_a_damaged_snapshot_is_one_line_or_a_note(
    bundles: tuple[Path, Path],
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
    damage: dict[str, Any],
) -> None:
    doc = json.loads((CAPTURE / "snapshot-json.json").read_text())
    doc.update(damage)
    data = json.dumps(doc).encode()
    alone = _with_snapshot_json(bundles[0], tmp_path / "alone.tar.gz", data, drop_logs=True)
    code, out, err = run(["analyze", str(alone)], capsys, monkeypatch)
    assert code == 2 and "snapshot.json is unreadable" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2  # the line and its hint
    with_log = _with_snapshot_json(bundles[0], tmp_path / "log.tar.gz", data, drop_logs=False)
    code, out, err = run(["analyze", str(with_log), "-v"], capsys, monkeypatch)
    assert code == 0, err  # the log still tells its part, and a note says what was left out
    assert "snapshot.json left out" in out and "startup.cut_excerpt" in out


def test_a_strangers_snapshot_cannot_put_html_or_escapes_in_the_report() -> None:
    doc = json.loads((CAPTURE / "snapshot-json.json").read_text())
    doc["verdict"] = "<script>alert(1)</script> \x1b]52;c;cGF5bG9hZA==\x07"
    doc["servers"][0]["framework"] = "<img src=x onerror=alert(1)>"
    doc["processes"][2]["rank"] = "<img src=y> TP0"
    doc["processes"][2]["title"] = "</details><b>x</b>"
    view = combine(analyze([LOG]), snapshot_from_dict(doc))
    md = render_markdown(view)
    assert "<script>" not in md and "<img" not in md and "<b>x" not in md
    assert "\x1b" not in md and "\x07" not in md
    assert md.count("<details>") == md.count("</details>")


def test_diag_snapshot_rules_run_per_server() -> None:
    """(diag/collect/snapshot.py::_apply_rules) Two servers on one host: each gets its own
    findings; run host-wide, the rules counted 16 workers and missed the second port."""
    from diag.collect.snapshot import _apply_rules

    snap = _snapshot()
    other = tuple(dataclasses.replace(p, pid=p.pid + 1000, server=1) for p in snap.processes)
    second = dict(snap.servers[0], port=31000, launcher_pid=2708)
    both = dataclasses.replace(
        snap, processes=snap.processes + other, servers=(snap.servers[0], second)
    )
    messages = [f.message for f in _apply_rules(both)]
    assert sum(m.startswith("8 workers alive") for m in messages) == 2
    assert not any(m.startswith("16 workers") for m in messages)
    assert any("port 30000" in m and "pid 1708" in m for m in messages)
    assert any("port 31000" in m and "pid 2708" in m for m in messages)
