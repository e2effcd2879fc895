"""Inputs: files, folders, stdin, compression by magic bytes, damaged and non-log input."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from pathlib import Path

import pytest

import diag.parse.reader
from diag.analyze import analyze
from diag.errors import InputError
from diag.parse.reader import iter_chunks, resolve_inputs

LOG = (
    "[2025-03-14 06:55:09 TP0] Init torch distributed begin.\n"
    "[2025-03-14 06:55:09 TP1] Init torch distributed begin.\n"
    "[2025-03-14 06:55:25 TP0] Load weight begin. avail mem=78.81 GB\n"
    "[2025-03-14 06:56:42 TP1] Load weight begin. avail mem=78.81 GB\n"
)


@pytest.mark.parametrize(
    ("compress", "name"),
    [
        (gzip.compress, "server.log.gz"),
        (bz2.compress, "server.log.bz2"),
        (lzma.compress, "server.log.xz"),
        (gzip.compress, "server.txt"),  # magic bytes decide, not the name
    ],
)
def test_compressed_by_magic(tmp_path: Path, compress, name: str) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / name
    p.write_bytes(compress(LOG.encode()))
    a = analyze([p])
    assert a.last_phase == "weights_load"
    assert [t.rank.label for t in a.ranks] == ["TP0", "TP1"]


@pytest.fixture(params=["isal", "zlib"])
def gzip_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each gzip test with ISA-L's reader (when installed) and with the standard one."""
    if request.param == "isal":
        pytest.importorskip("isal")
        monkeypatch.delenv("DIAG_NO_ISAL", raising=False)
    else:
        monkeypatch.setenv("DIAG_NO_ISAL", "1")
    return str(request.param)


def test_gzip_reader_choice(gzip_engine: str) -> None:
    from diag.parse import reader

    got = reader._isal_gzip()
    assert (got is not None) == (gzip_engine == "isal")


def test_gzip_reads_the_same_with_either_engine(tmp_path: Path, gzip_engine: str) -> None:
    from diag.parse.reader import iter_chunks, resolve_inputs

    text = "".join(f"{LOG}{i}\n" for i in range(3000)).encode()
    p = tmp_path / "a.log.gz"
    p.write_bytes(gzip.compress(text, compresslevel=1) + gzip.compress(b"second member\n"))
    (src,) = resolve_inputs([p])
    notes: list[str] = []
    got = b"".join(bytes(buf[lo:hi]) for buf, lo, hi, _ in iter_chunks(src, notes, 4096))
    assert got == text + b"second member\n"
    assert notes == []


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path, gzip_engine: str) -> None:
    data = gzip.compress((LOG * 2000).encode())
    p = tmp_path / "cut.log.gz"
    p.write_bytes(data[: len(data) // 2])
    a = analyze([p])
    assert a.last_phase == "weights_load"
    assert any("damaged compressed data" in n for n in a.notes)


def test_folder_of_per_rank_files(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(LOG.replace("TP1", "TP0"))
    (tmp_path / "rank1.log").write_text(LOG.replace("TP0", "TP1"))
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
    a = analyze([tmp_path])
    assert len(a.sources) == 2
    assert {t.rank.label for t in a.ranks} == {"TP0", "TP1"}


def test_stdin_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeStdin:
        buffer = io.BytesIO(LOG.encode())

    monkeypatch.setattr("sys.stdin", FakeStdin)
    a = analyze(["-"])
    assert a.sources == ("<stdin>",)
    assert a.last_phase == "weights_load"


def test_missing_path() -> None:
    with pytest.raises(InputError, match="no such file"):
        analyze(["/nonexistent/server.log"])


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        analyze([p])


def test_an_empty_file_is_named(tmp_path: Path) -> None:
    """A new user's check: an empty file said "input is empty", not which input. Alone it
    is "<path>: empty file"; beside a log, a note says so and the log is read."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(InputError) as info:
        analyze([empty])
    assert info.value.message == f"{empty}: empty file"
    log = tmp_path / "server.log"
    log.write_text("[2026-02-22 22:35:01 TP0] Init torch distributed begin.\n")
    a = analyze([empty, log])
    assert f"{empty}: empty file" in a.notes
    assert a.last_phase == "dist_init"


def test_whitespace_only_is_empty(tmp_path: Path) -> None:
    p = tmp_path / "blank.log"
    p.write_bytes(b"\n\n   \n\r\n")
    with pytest.raises(InputError, match="empty"):
        analyze([p])


def test_binary_is_not_a_log(tmp_path: Path) -> None:
    p = tmp_path / "model.bin.log"
    p.write_bytes(bytes(range(256)) * 64 + os.urandom(4096))
    with pytest.raises(InputError, match="not a log"):
        analyze([p])


def test_zstd_without_the_module_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "x.log.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 32)
    try:
        import zstandard  # noqa: F401
    except ImportError:
        with pytest.raises(InputError, match="zstandard"):
            analyze([p])
    else:  # pragma: no cover - depends on the environment
        pytest.skip("zstandard is installed")


def test_invalid_utf8_and_nul_are_counted(tmp_path: Path) -> None:
    p = tmp_path / "dirty.log"
    p.write_bytes(
        b"[2025-03-14 06:55:09 TP0] Init torch distributed begin. \xff\xfe\n"
        b"\x00\x00[2025-03-14 06:55:25 TP0] Load weight begin.\n"
    )
    a = analyze([p])
    assert a.undecodable_bytes == 2
    assert any("2 bytes of invalid UTF-8 replaced" in n for n in a.notes)
    assert any("NUL" in n for n in a.notes)
    assert a.last_phase == "weights_load"


def test_partly_readable_input_gives_a_note(tmp_path: Path) -> None:
    p = tmp_path / "mixed.log"
    p.write_text("some banner text\nanother banner line\n" + LOG)
    a = analyze([p])
    assert a.last_phase == "weights_load"
    assert any("lines 1-2" in n and "matched no known log format" in n for n in a.notes)


def test_chunks_end_on_line_boundaries(tmp_path: Path) -> None:
    p = tmp_path / "lines.log"
    lines = [f"line {i} " + "x" * (i % 97) for i in range(5000)]
    p.write_text("\n".join(lines) + "\n")
    (src,) = resolve_inputs([p])
    got: list[str] = []
    for buf, lo, hi, _ in iter_chunks(src, [], chunk_bytes=1000):
        piece = buf[lo:hi].decode()
        assert piece.endswith("\n")
        got.extend(piece.splitlines())
    assert got == lines


def test_line_longer_than_a_chunk(tmp_path: Path) -> None:
    p = tmp_path / "long.log"
    big = "y" * 50_000
    p.write_text(f"a\n{big}\nb")
    (src,) = resolve_inputs([p])
    pieces = [buf[lo:hi] for buf, lo, hi, _ in iter_chunks(src, [], chunk_bytes=4096)]
    assert b"".join(pieces) == f"a\n{big}\nb".encode()
    assert any(len(x) > 50_000 for x in pieces)


def test_bundles_are_read_through_diag_bundle_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import diag.bundle.read as bundle_read

    bundle = tmp_path / "evidence.tar"
    bundle.write_bytes(b"not really a tar")
    monkeypatch.setattr(bundle_read, "is_bundle", lambda p: Path(p).name == "evidence.tar")
    monkeypatch.setattr(
        bundle_read,
        "log_members",
        lambda p: [("logs/server.log", LOG.encode()), ("logs/old.log.gz", gzip.compress(b"x\n"))],
    )
    a = analyze([tmp_path])  # found inside a folder too, despite the .tar suffix
    assert a.sources == (f"{bundle}:logs/server.log", f"{bundle}:logs/old.log.gz")
    assert a.last_phase == "weights_load"


def test_progress_of_a_compressed_file_counts_its_compressed_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", 64 << 10)
    p = tmp_path / "big.log.gz"
    noisy = "".join(
        f"[2025-03-14 06:55:{i % 60:02d} TP{i % 2}] Decode batch. #token: {os.urandom(24).hex()}\n"
        for i in range(20000)
    )
    p.write_bytes(gzip.compress((LOG + noisy).encode()))
    calls: list[tuple[int, int]] = []
    a = analyze([p], progress=lambda done, total: calls.append((done, total)))
    assert a.last_phase == "serving"
    assert a.records == 20004
    size = p.stat().st_size
    assert all(total == size for _, total in calls)
    assert calls[-1][0] == size
    # not pinned at the end from the first chunk on: the decompressed stream is far larger
    assert len({done for done, _ in calls}) > 1


def test_utf16_log_from_powershell(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(LOG.replace("\n", "\r\n").encode("utf-16"))  # BOM + UTF-16LE, CRLF
    a = analyze([p])
    assert a.last_phase == "weights_load"
    assert [t.rank.label for t in a.ranks] == ["TP0", "TP1"]
    assert a.undecodable_bytes == 0


def test_utf16_log_without_its_byte_order_mark(tmp_path: Path) -> None:
    # the mark lost (a file cut at its head): nearly every second byte NUL is UTF-16 text
    p = tmp_path / "server.log"
    p.write_bytes(LOG.replace("\n", "\r\n").encode("utf-16-le"))
    a = analyze([p])
    assert a.last_phase == "weights_load"
    assert [t.rank.label for t in a.ranks] == ["TP0", "TP1"]
    assert any("UTF-16-LE (no byte-order mark)" in n for n in a.notes)


def test_utf16_codec_sniffing() -> None:
    from diag.parse.reader import utf16_codec

    text = "INFO 05-01 10:00:00 [core.py:1] Model loading took 14.2 GiB and 10.5 seconds\n" * 3
    assert utf16_codec(text.encode("utf-16")) == "utf-16"
    assert utf16_codec(text.encode("utf-16-le")) == "utf-16-le"
    assert utf16_codec(text.encode("utf-16-be")) == "utf-16-be"
    assert utf16_codec(text.encode()) is None
    assert utf16_codec(b"\x00" * 4096) is None  # a hole of NULs is no text
    assert utf16_codec("short".encode("utf-16-le")) is None


def test_zip_and_tar_attachments_are_read_member_by_member(tmp_path: Path) -> None:
    import tarfile
    import zipfile

    z = tmp_path / "logs.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("logs/rank0.log", LOG.replace("TP1", "TP0"))
        zf.writestr("logs/rank1.log.gz", gzip.compress(LOG.replace("TP0", "TP1").encode()))
        zf.writestr("logs/screenshot.png", b"\x89PNG....")
    a = analyze([z])
    assert a.sources == (f"{z}:logs/rank0.log", f"{z}:logs/rank1.log.gz")
    assert {t.rank.label for t in a.ranks} == {"TP0", "TP1"}

    t = tmp_path / "logs.tar.gz"
    src = tmp_path / "server.log"
    src.write_text(LOG)
    with tarfile.open(t, "w:gz") as tf:
        tf.add(src, arcname="server.log")
    b = analyze([t])
    assert b.sources == (f"{t}:server.log",)
    assert b.last_phase == "weights_load"


def test_archive_without_logs(tmp_path: Path) -> None:
    import zipfile

    z = tmp_path / "pics.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("a.png", b"x")
    with pytest.raises(InputError, match="no log files"):
        analyze([z])


def test_source_code_and_prose_are_not_logs(tmp_path: Path) -> None:
    p = tmp_path / "probe.py"
    p.write_text(
        "import os\n\n\ndef main():\n    try:\n        os.kill(1, 0)\n"
        "    except OSError as e:  # an Error in prose is not a log line\n        raise\n"
    )
    with pytest.raises(InputError, match="not a log"):
        analyze([p])


@pytest.mark.parametrize(
    "text",
    [
        # vLLM's messages as a viewer's message column shows them (no time, level or
        # logger file): vllm/config/compilation.py's custom_op_log_check debug lines
        # (0.11.0-0.34.0; vllm/config.py's set_current_vllm_config in 0.6.6-0.10.2)
        "enabled custom ops: Counter({'rms_norm': 1})\ndisabled custom ops: Counter()\n",
        # SGLang's scheduler at debug level, printed by a wrapper without the
        # '[time TP0]' prefix (srt/managers/scheduler.py handle_batch_generate_request,
        # 0.5.1.post3-0.5.23; abort_request, 0.4.1.post7-0.5.23)
        "Processing batch generate request with 4 requests\n"
        "Abort queued request. req.rid=7f3e2b\n",
        # one message is the whole paste
        "Abort queued request. req.rid=7f3e2b\n",
    ],
)
def test_a_paste_of_the_sources_messages_is_a_log(tmp_path: Path, text: str) -> None:
    # no line has a log's shape and no catalogue entry or rule reads them, but they are
    # messages of the sources (diag/data/message_heads.txt): a log, not refused
    p = tmp_path / "paste.txt"
    p.write_text(text)
    a = analyze([p])
    assert a.last_phase == "launch"
    assert any("messages of the sources" in n for n in a.notes)


def test_prose_that_quotes_one_message_is_not_a_log(tmp_path: Path) -> None:
    # one line of five begins like a message of the sources: prose around a quote
    p = tmp_path / "issue.txt"
    p.write_text(
        "We started the server as the docs say and it printed\n"
        "enabled custom ops: Counter()\n"
        "and then nothing happened for an hour or so\n"
        "does anybody know why this happens\n"
        "thanks in advance for any help\n"
    )
    with pytest.raises(InputError, match="not a log"):
        analyze([p])


def test_a_known_message_without_a_log_shape_is_read(tmp_path: Path) -> None:
    # No time, level, rank or pid on any line and no catalogued message: the text is still
    # analysed, because a rule knows the message; it is refused only when nothing is found
    p = tmp_path / "paste.txt"
    p.write_text(
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.11 GiB total capacity)\n"
        "the rest of the paste\n"
    )
    a = analyze([p])
    assert [f.id for f in a.findings] == ["cuda.oom"]
    assert any("read as plain text" in n for n in a.notes)


def test_a_bare_traceback_is_a_log(tmp_path: Path) -> None:
    p = tmp_path / "tb.txt"
    p.write_text(
        'File "/x/weight_utils.py", line 406, in safetensors_weights_iterator\n'
        '    with safe_open(st_file, framework="pt") as f:\n'
        "safetensors_rust.SafetensorError: Error while deserializing header: "
        "MetadataIncompleteBuffer\n"
    )
    assert analyze([p]).last_phase == "weights_load"


@pytest.mark.parametrize(
    ("text", "phase"),
    [
        # a faulthandler dump whose header was lost in the paste; a thread inside a
        # collective proves at least dist_init (LABELS.md, frames -> phases), and one inside
        # a layer's forward that the model was loaded: at least weights_load
        (
            '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/'
            'distributed_c10d.py", line 2050 in all_reduce\n'
            '  File "/workspace/vllm/model_executor/layers/linear.py", line 548 in forward\n',
            "weights_load",
        ),
        (
            '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/'
            'distributed_c10d.py", line 2050 in all_reduce\n'
            '  File "/workspace/app/comm.py", line 48 in sync\n',
            "dist_init",
        ),
        # a traceback behind torch's per-rank prefix, ended by Ctrl-C
        (
            '[rank0]:   File "/usr/lib/python3.11/multiprocessing/connection.py", '
            "line 395, in _recv\n"
            "[rank0]:     chunk = read(handle, remaining)\n"
            "[rank0]: KeyboardInterrupt\n",
            "launch",
        ),
    ],
)
def test_stack_dumps_alone_are_logs(tmp_path: Path, text: str, phase: str) -> None:
    p = tmp_path / "dump.txt"
    p.write_text(text)
    assert analyze([p]).last_phase == phase


def test_giant_line_is_cut_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diag.parse.reader, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", 64 << 10)
    p = tmp_path / "giant.log"
    p.write_text(
        "[2025-03-14 06:55:25 TP0] Load weight begin. " + "x" * (3 << 20) + "\n"
        "[2025-03-14 06:56:25 TP0] Load weight end. type=X\n"
    )
    a = analyze([p])
    assert a.last_phase == "weights_load"
    assert any("was cut into pieces" in n for n in a.notes)
    (t,) = a.ranks
    assert t.phases[0].ended


@pytest.mark.parametrize("compress", [False, True])
def test_long_stdin_is_streamed(monkeypatch: pytest.MonkeyPatch, compress: bool) -> None:
    monkeypatch.setattr(diag.parse.reader, "STDIN_HEAD_BYTES", 4096)
    monkeypatch.setattr(diag.parse.reader, "CHUNK_BYTES", 8192)
    body = "".join(
        f"[2025-03-14 06:{i // 60 % 60:02d}:{i % 60:02d} TP{i % 2}] Decode batch. #token: {i}\n"
        for i in range(2000)
    )
    data = (LOG + body).encode()
    if compress:
        data = gzip.compress(data)

    class Pipe:
        """A pipe: read once, no seek, no peek."""

        def __init__(self, data: bytes) -> None:
            self._buf = io.BytesIO(data)

        def read(self, n: int = -1) -> bytes:
            return self._buf.read(n)

    class FakeStdin:
        buffer = Pipe(data)

    monkeypatch.setattr("sys.stdin", FakeStdin)
    calls: list[tuple[int, int]] = []
    a = analyze(["-"], progress=lambda done, total: calls.append((done, total)))
    assert a.sources == ("<stdin>",)
    assert a.records == 2004
    assert a.last_phase == "serving"
    assert calls and all(total == 0 for _, total in calls)  # size unknown
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)
    if not compress:
        assert calls[-1][0] == len(data)


def test_an_input_given_twice_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's check: the same log passed twice doubled its records. Inputs are
    deduplicated by resolved path (two spellings, a folder and a file in it, stdin), in
    the order first given, with a note."""
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "server.log"
    log.write_text(
        "[2026-02-22 22:35:01 TP0] Init torch distributed begin.\n"
        "[2026-02-22 22:35:02 TP0] Load weight begin. avail mem=78.00 GB\n"
    )
    once = analyze([log])
    twice = analyze(["logs/server.log", str(log), "./logs/../logs/server.log", "logs"])
    assert twice.sources == ("logs/server.log",)
    assert twice.records == once.records == 2
    also = f"{log}, logs/../logs/server.log"
    assert f"logs/server.log: given 4 times (also as {also}): read once" in twice.notes
    first_in_folder = resolve_inputs(["logs", "logs/server.log"])
    assert [s.name for s in first_in_folder] == ["logs/server.log"]
    assert first_in_folder[0].pending_notes == ["logs/server.log: given 2 times: read once"]
    piped = resolve_inputs(["-", "-"], stdin=io.BytesIO(b"a line\n"))
    assert [s.name for s in piped] == ["<stdin>"]
    assert piped[0].pending_notes == ["<stdin>: given 2 times: read once"]
