"""Round trip: ``diag analyze BUNDLE`` gives what analysing the original log gave.

Same finding ids, ranks, evidence lines and texts, and the same last phase, for the
built-in example, corpus cases, and a large log that the bundle keeps only as an excerpt
(its line index puts every kept line back at its original number)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import diag.bundle.write as bundle_write
from diag.analyze import analyze
from diag.bundle.read import log_members
from diag.model import Analysis

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "diag" / "data" / "example.log"
CORPUS = ROOT / "fixtures" / "real"
CASES = [
    CORPUS / "sglang" / "watchdog-timeout-sigquit-killed" / "log.txt",
    CORPUS / "vllm" / "tp2-customallreduce-p2p-check-gloo-timeout" / "log.txt",
    CORPUS / "sglang" / "pd-decode-dp-ep-gloo-enforce-abort" / "log.txt",
]


def _bundle_prefix(a: Analysis) -> str:
    """A source read from a bundle is named BUNDLE:LOG; messages may quote it."""
    prefixes = {s.rsplit(":", 1)[0] + ":" for s in a.sources if ".tar.gz:" in s}
    return prefixes.pop() if len(prefixes) == 1 else "\0"


def _facts(a: Analysis) -> tuple[object, ...]:
    findings = [
        (
            f.id,
            f.ranks,
            f.severity,
            f.message.replace(_bundle_prefix(a), ""),
            [(Path(e.source.rsplit(":", 1)[-1]).name, e.line, e.text, e.rank) for e in f.evidence],
        )
        for f in a.findings
    ]
    ranks = [(r.rank.label, r.last_phase) for r in a.ranks]
    return (findings, a.last_phase, ranks, a.framework, a.missing_ranks, a.stragglers)


def _copy(src: Path, tmp_path: Path, name: str = "server.log") -> Path:
    dst = tmp_path / name
    shutil.copyfile(src, dst)
    return dst


def _roundtrip(log: Path, tmp_path: Path) -> tuple[Analysis, Analysis]:
    original = analyze([log])
    out = tmp_path / "b.tar.gz"
    bundle_write.write_bundle(out, logs=[log], analysis=original, snapshot=None)
    return original, analyze([out])


def test_example_roundtrip(tmp_path: Path) -> None:
    original, again = _roundtrip(_copy(EXAMPLE, tmp_path), tmp_path)
    assert original.findings, "the example should produce findings"
    assert _facts(again) == _facts(original)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.parent.name)
def test_corpus_roundtrip(case: Path, tmp_path: Path) -> None:
    original, again = _roundtrip(_copy(case, tmp_path), tmp_path)
    assert original.findings
    assert _facts(again) == _facts(original)


def _padded(case: Path, tmp_path: Path, noise: int) -> Path:
    """The case with `noise` lines of chatter after its first 2 lines."""
    lines = case.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
    filler = [f"calibration row {i}: ok\n" for i in range(noise)]  # untagged chatter
    path = tmp_path / "big.log"
    path.write_text("".join(lines[:2] + filler + lines[2:]), encoding="utf-8",
                    errors="surrogateescape")
    return path


@pytest.mark.parametrize("case", [EXAMPLE, *CASES[:2]], ids=lambda p: p.parent.name)
def test_excerpt_roundtrip(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log too big to keep whole: the excerpt keeps evidence at its original lines."""
    monkeypatch.setattr(bundle_write, "WHOLE_LOG_BYTES", 64 * 1024)
    monkeypatch.setattr(bundle_write, "HEAD_LINES", 50)
    monkeypatch.setattr(bundle_write, "TAIL_LINES", 50)
    log = _padded(case, tmp_path, noise=20_000)
    original = analyze([log])
    out = tmp_path / "b.tar.gz"
    info = bundle_write.write_bundle(out, logs=[log], analysis=original, snapshot=None)
    (member,) = info.logs
    assert member.cut and member.mode == "excerpt"
    assert member.lines_total == 20_000 + len(case.read_bytes().splitlines())
    assert member.lines_kept < member.lines_total // 10
    assert out.stat().st_size < log.stat().st_size // 20
    again = analyze([out])
    assert _facts(again) == _facts(original)
    evidence_lines = {e.line for f in original.findings for e in f.evidence}
    assert max(evidence_lines) > 20_000  # the evidence sits after the omitted chatter


def test_excerpt_lines_keep_their_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_write, "WHOLE_LOG_BYTES", 1024)
    monkeypatch.setattr(bundle_write, "HEAD_LINES", 3)
    monkeypatch.setattr(bundle_write, "TAIL_LINES", 2)
    log = tmp_path / "n.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    info = bundle_write.write_bundle(tmp_path / "b.tar.gz", logs=[log], analysis=None,
                                     snapshot=None)
    assert info.logs[0].lines_kept == 5
    assert any("5 of 1000 lines kept" in n for n in info.notes)
    ((name, data),) = log_members(tmp_path / "b.tar.gz")
    lines = data.decode().split("\n")
    assert name == "n.log"
    assert lines[:3] == ["line 1", "line 2", "line 3"]
    assert lines[3:998] == [""] * 995
    assert lines[998:1000] == ["line 999", "line 1000"]


def test_full_logs_cap_is_noted(tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    log.write_text("".join(f"line {i:05d}\n" for i in range(1, 20_001)))  # 220 kB
    info = bundle_write.write_bundle(tmp_path / "b.tar.gz", logs=[log], analysis=None,
                                     snapshot=None, full_logs=True, log_cap=100_000)
    (member,) = info.logs
    assert member.cut and 0 < member.bytes_kept <= 100_000
    assert any("n.log" in note and "cap" in note for note in info.notes)
    whole = bundle_write.write_bundle(tmp_path / "w.tar.gz", logs=[log], analysis=None,
                                      snapshot=None, full_logs=True)
    assert not whole.logs[0].cut
    assert log_members(tmp_path / "w.tar.gz")[0][1] == log.read_bytes()


def test_compressed_input_and_undecodable_bytes(tmp_path: Path) -> None:
    import gzip

    raw = b"[2025-03-09 00:57:15 TP4] caf\xe9 \xff\xfe bytes kept as they were\r\nlast"
    log = tmp_path / "server.log.gz"
    log.write_bytes(gzip.compress(raw))
    bundle_write.write_bundle(tmp_path / "b.tar.gz", logs=[log], analysis=None, snapshot=None)
    ((name, data),) = log_members(tmp_path / "b.tar.gz")
    assert name == "server.log"
    assert data == raw + b"\n"


def test_damaged_and_unnamed_compressed_logs(tmp_path: Path) -> None:
    import gzip

    lines = b"".join(b"[2025-03-09 00:57:%02d TP0] line %d\n" % (i % 60, i) for i in range(5000))
    packed = gzip.compress(lines)
    damaged = tmp_path / "a.log.gz"
    damaged.write_bytes(packed[: len(packed) // 2])  # cut mid-stream
    unnamed = tmp_path / "b.log"  # gzip content, no .gz suffix: decided by magic bytes
    unnamed.write_bytes(packed)
    info = bundle_write.write_bundle(tmp_path / "x.tar.gz", logs=[damaged, unnamed],
                                     analysis=None, snapshot=None)
    assert any("a.log.gz: read stopped early" in n for n in info.notes)
    logs = dict(log_members(tmp_path / "x.tar.gz"))
    assert logs["b.log"] == lines
    kept = logs["a.log"]
    assert 0 < len(kept) < len(lines) and lines.startswith(kept[:-1])


def test_same_name_on_two_nodes(tmp_path: Path) -> None:
    """node0/server.log and node1/server.log stay two logs with two names."""
    for node in ("node0", "node1"):
        (tmp_path / node).mkdir()
        (tmp_path / node / "server.log").write_text(f"[2025-03-09 00:57:15 TP0] on {node}\n")
    logs = [tmp_path / "node0" / "server.log", tmp_path / "node1" / "server.log"]
    bundle_write.write_bundle(tmp_path / "b.tar.gz", logs=logs, analysis=None, snapshot=None)
    got = log_members(tmp_path / "b.tar.gz")
    assert [name for name, _ in got] == ["server.log", "node1-server.log"]
    assert [data for _, data in got] == [p.read_bytes() for p in logs]


def test_excerpt_keeps_each_ranks_last_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TP3 and then TP2 go quiet while the others chatter on: the excerpt keeps each
    rank's last lines, so every rank's silence reads as in the original, even with no
    analysis to say which lines matter."""
    monkeypatch.setattr(bundle_write, "WHOLE_LOG_BYTES", 64 * 1024)
    monkeypatch.setattr(bundle_write, "HEAD_LINES", 20)
    monkeypatch.setattr(bundle_write, "TAIL_LINES", 20)
    monkeypatch.setattr(bundle_write, "RANK_TAIL_LINES", 5)
    lines = [f"[2026-02-22 22:35:0{r} TP{r}] Init torch distributed begin.\n" for r in range(4)]
    lines += [f"[2026-02-22 22:35:10 TP{r}] Load weight begin. avail mem=70.00 GB\n"
              for r in range(4)]
    for i in range(6000):  # all four chatter; TP3 stops at a third, TP2 at two thirds
        minute, second = divmod(i // 10, 60)
        rank = i % 4 if i < 2000 else (i % 3 if i < 4000 else i % 2)
        lines.append(f"[2026-02-22 {23 + minute // 60:02d}:{minute % 60:02d}:{second:02d} "
                     f"TP{rank}] heartbeat {i}\n")
    log = tmp_path / "ranks.log"
    log.write_text("".join(lines))
    original = analyze([log])
    # no analysis handed to the writer (as when the analyser failed): the excerpt has only
    # the log itself to go by, not the evidence lines
    info = bundle_write.write_bundle(tmp_path / "b.tar.gz", logs=[log], analysis=None,
                                     snapshot=None)
    assert info.logs[0].cut and info.logs[0].lines_kept < 200
    again = analyze([tmp_path / "b.tar.gz"])
    silence = {r.rank.label: (r.last_ts, r.silent_s) for r in original.ranks}
    assert {r.rank.label: (r.last_ts, r.silent_s) for r in again.ranks} == silence
    assert silence["TP3"][1] == 400 and silence["TP2"][1] == 200
    assert _facts(again) == _facts(original)
