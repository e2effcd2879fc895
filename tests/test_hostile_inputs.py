"""Hostile inputs that are not plain log files: devices, pipes, FIFOs, NUL padding, CR-only
line ends, compression and archive bombs. Each is read within its limits or refused with
one line; none grows memory without a bound or waits forever (issue 12)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from diag import limits
from diag.analyze import analyze
from diag.errors import InputError
from diag.parse import reader
from diag.parse.reader import iter_chunks, resolve_inputs

LOG = (
    "[2025-03-14 06:55:09 TP0] Init torch distributed begin.\n"
    "[2025-03-14 06:55:25 TP0] Load weight begin. avail mem=78.81 GB\n"
)
OOM = "[2025-03-14 06:57:09 TP0] RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"


def _ids(a: object) -> set[str]:
    return {f.id for f in a.findings}  # type: ignore[attr-defined]


def test_dev_zero_is_refused_not_read() -> None:
    t0 = time.monotonic()
    with pytest.raises(InputError, match="a device, not a log file"):
        resolve_inputs(["/dev/zero"])
    assert time.monotonic() - t0 < 5  # refused before any read (a read never ends)


def test_process_substitution_is_streamed() -> None:
    """``diag analyze <(cmd)``: a /dev/fd/N pipe is read once, as a stream (was: empty)."""
    r, w = os.pipe()
    os.write(w, (LOG + OOM).encode())
    os.close(w)
    try:
        a = analyze([f"/dev/fd/{r}"])
    finally:
        os.close(r)
    assert a.last_phase == "weights_load"
    assert "cuda.oom" in _ids(a)


def test_dev_stdin_pipe_through_the_cli(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "diag", "analyze", "/dev/stdin", "--json"],
        input=(LOG + OOM).encode(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()
    assert b"cuda.oom" in out.stdout


def test_fifo_without_writer_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "FIFO_READ_TIMEOUT_S", 0.5)
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(InputError, match="no data within"):
        analyze([fifo])
    assert time.monotonic() - t0 < 10


def test_fifo_with_a_writer_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write((LOG + OOM).encode())

    t = threading.Thread(target=write)
    t.start()
    a = analyze([fifo])
    t.join(10)
    assert "cuda.oom" in _ids(a)


def test_fifo_writer_that_stalls_ends_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "FIFO_READ_TIMEOUT_S", 0.5)
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    stop = threading.Event()

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write((LOG + OOM).encode())
            fh.flush()
            stop.wait(10)  # keeps the FIFO open, silent

    t = threading.Thread(target=write)
    t.start()
    try:
        a = analyze([fifo])
    finally:
        stop.set()
        t.join(10)
    assert "cuda.oom" in _ids(a)
    assert any("read stopped" in n for n in a.notes)


def test_leading_nul_padding_is_skipped_and_counted(tmp_path: Path) -> None:
    p = tmp_path / "rotated.log"
    p.write_bytes(b"\0" * 300_000 + (LOG + OOM).encode())
    a = analyze([p])
    assert "cuda.oom" in _ids(a)
    assert any("300000 leading NUL bytes skipped" in n for n in a.notes)
    assert a.last_phase == "weights_load"


def test_nul_hole_between_lines_is_read_not_taken_for_binary(tmp_path: Path) -> None:
    # a second writer that kept its offset after the file was truncated under it: a
    # few lines, a hole of NULs larger than the sniffed head, then more lines
    p = tmp_path / "truncated-under-a-writer.log"
    p.write_bytes(LOG.encode() + b"\0" * 125_000 + OOM.encode())
    a = analyze([p])
    assert "cuda.oom" in _ids(a)
    assert any("125000 NUL bytes dropped" in n for n in a.notes)
    assert not any("binary" in n for n in a.notes)


def test_binary_file_with_nul_runs_is_still_binary(tmp_path: Path) -> None:
    # an ELF-like blob: NUL runs between control bytes and invalid UTF-8 stays binary
    blob = bytes(range(1, 32)) * 40 + b"\0" * 64 + bytes(range(128, 256)) * 40
    p = tmp_path / "lib.so"
    p.write_bytes(blob * 20)
    with pytest.raises(InputError):
        analyze([p])


@pytest.mark.parametrize("prefilter", [True, False])
def test_cr_only_line_ends_over_1mib_keep_findings(tmp_path: Path, prefilter: bool) -> None:
    body = (LOG * 12000 + OOM).replace("\n", "\r")
    assert len(body) > 1 << 20
    p = tmp_path / "mac.log"
    p.write_bytes(body.encode())
    a = analyze([p], prefilter=prefilter)
    assert "cuda.oom" in _ids(a)
    assert any("CR only" in n for n in a.notes)


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compression_bomb_is_cut_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: object
) -> None:
    monkeypatch.setattr(limits, "DECOMPRESSED_FLOOR_BYTES", 1 << 20)
    p = tmp_path / "bomb.log.x"
    p.write_bytes(compress((LOG + "\n" * (64 << 20)).encode()))  # type: ignore[operator]
    notes: list[str] = []
    (src,) = resolve_inputs([p])
    got = sum(hi - lo for _b, lo, hi, _pos in iter_chunks(src, notes))
    assert got < 40 << 20  # cut well before 64 MiB
    assert any("input cut at" in n for n in notes)


def _tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    return path


def test_tar_gz_of_many_members_is_read_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each member used to re-open and re-scan the archive (quadratic: 1000 members 50 s)."""
    p = _tar(tmp_path / "logs.tar.gz", [(f"r{i}.log", LOG.encode()) for i in range(1000)])
    opens: list[object] = []
    real_open = tarfile.open

    def counting_open(*args: object, **kw: object) -> tarfile.TarFile:
        opens.append(args)
        return real_open(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(tarfile, "open", counting_open)
    sources = resolve_inputs([p])
    assert len(sources) == 1000
    for src in sources:
        assert b"".join(b[lo:hi] for b, lo, hi, _ in iter_chunks(src, [])) == LOG.encode()
    assert len(opens) <= 2  # is_tarfile + the one streaming pass


def test_archive_caps_do_not_depend_on_member_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle-like .tar.gz whose manifest.json is not first is read as an archive: its
    caps hold (was: a 1 GiB member read whole)."""
    monkeypatch.setattr(limits, "MAX_ARCHIVE_MEMBER_BYTES", 1 << 20)
    big = b"x" * (3 << 20)
    p = _tar(tmp_path / "b.tar.gz", [("logs/a.log", LOG.encode() + big), ("manifest.json", b"{}")])
    notes: list[str] = []
    (src,) = resolve_inputs([p])
    got = sum(hi - lo for _b, lo, hi, _ in iter_chunks(src, notes))
    assert got <= 1 << 20
    assert any("input cut at 1048576 bytes (member cap)" in n for n in notes)


def test_archive_member_count_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_ARCHIVE_MEMBERS", 10)
    p = _tar(tmp_path / "many.tar", [(f"r{i}.log", LOG.encode()) for i in range(30)], mode="w")
    sources = resolve_inputs([p])
    assert len(sources) == 10
    notes: list[str] = []
    list(iter_chunks(sources[0], notes))
    assert any("more than 10 members" in n for n in notes)


def test_archive_expansion_ratio_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "DECOMPRESSED_FLOOR_BYTES", 1 << 20)
    members = [("a.log", LOG.encode()), ("pad.bin", b"\0" * (40 << 20)), ("b.log", LOG.encode())]
    p = _tar(tmp_path / "bomb.tar.gz", members)
    sources = resolve_inputs([p])
    assert [s.name.rsplit(":", 1)[1] for s in sources] == ["a.log"]
    notes: list[str] = []
    list(iter_chunks(sources[0], notes))
    assert any("expands past its cap" in n for n in notes)


def test_zip_member_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "DECOMPRESSED_FLOOR_BYTES", 1 << 20)
    p = tmp_path / "z.zip"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.log", LOG + "\n" * (32 << 20))
    (src,) = resolve_inputs([p])
    notes: list[str] = []
    got = sum(hi - lo for _b, lo, hi, _ in iter_chunks(src, notes))
    assert got < 32 << 20
    assert any("decompression cap" in n for n in notes)


def test_zip_of_many_members_parses_its_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "z.zip"
    with zipfile.ZipFile(p, "w") as zf:
        for i in range(300):
            zf.writestr(f"r{i}.log", LOG)
    made: list[object] = []
    real = zipfile.ZipFile

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: object, **kw: object) -> None:
            made.append(a)
            super().__init__(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(zipfile, "ZipFile", Counting)
    sources = resolve_inputs([p])
    for src in sources:
        list(iter_chunks(src, []))
    assert len(made) <= 2


def test_nul_padded_log_is_not_taken_for_an_empty_tar(tmp_path: Path) -> None:
    p = tmp_path / "padded.log"
    p.write_bytes(b"\0" * 10240 + LOG.encode())
    assert reader._archive_sources(p) is None
    assert analyze([p]).last_phase == "weights_load"
