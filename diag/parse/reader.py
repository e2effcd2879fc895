"""Input resolution and byte streaming.

Inputs are files, folders (every log-like file inside), ``-`` for stdin, compressed files
(.gz/.bz2/.xz, and .zst when ``zstandard`` is importable; detected by magic bytes, not by
name) and diag bundles (through ``diag.bundle.read`` when that module exists).
"""

from __future__ import annotations

import bz2
import codecs
import datetime as dt
import gzip
import io
import lzma
import os
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from diag.errors import InputError

__all__ = [
    "CHUNK_BYTES",
    "Source",
    "iter_chunks",
    "resolve_inputs",
]

CHUNK_BYTES = 8 << 20
STDIN_HEAD_BYTES = 1 << 20  # stdin longer than this is streamed, not held in memory
MAX_LINE_BYTES = 16 << 20  # a line longer than this is cut (kept in pieces)

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_SKIP_SUFFIXES = {
    ".png", ".jpg", ".jpeg", ".gif", ".so", ".pyc", ".whl", ".pt",
    ".safetensors", ".bin", ".npy", ".pdf", ".sha256", ".sig",
}
_SKIP_NAMES = {"manifest.json", "checksums.txt", "SHA256SUMS"}
_ARCHIVE_SUFFIXES = {".zip", ".tar", ".tgz", ".tbz2", ".txz", ".gz", ".bz2", ".xz"}


@dataclass(frozen=True, slots=True)
class Source:
    """One stream of log bytes."""

    name: str
    open: Callable[[], BinaryIO]
    size: int | None
    mtime: dt.datetime | None
    compressed: bool = False
    # opens only the start of the source, for sniffing (a pipe cannot be read twice)
    sniff: Callable[[], BinaryIO] | None = None


def _sniff(head: bytes) -> str | None:
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return None


def _decompressing(raw: BinaryIO, kind: str | None, name: str) -> BinaryIO:
    if kind is None:
        return raw
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw, mode="rb")  # type: ignore[return-value]
    try:
        import zstandard  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise InputError(
            f"{name}: zstd-compressed, and the zstandard package is not installed",
            help_text="pip install zstandard, or decompress it first: zstd -d FILE",
        ) from exc
    return zstandard.ZstdDecompressor().stream_reader(raw)  # type: ignore[no-any-return]


_OPEN_BY_PATH: dict[str | None, Callable[[Path, str], object]] = {
    "gzip": gzip.open,
    "bzip2": bz2.open,
    "xz": lzma.open,
}


def _file_source(path: Path) -> Source:
    st = path.stat()
    mtime = dt.datetime.fromtimestamp(st.st_mtime)

    def opener() -> BinaryIO:
        raw = open(path, "rb")  # noqa: SIM115 - the caller closes it
        head = raw.peek(8)[:8] if hasattr(raw, "peek") else b""
        kind = _sniff(head)
        if kind in _OPEN_BY_PATH:  # these close the file they open (GzipFile(fileobj) won't)
            raw.close()
            return cast(BinaryIO, _OPEN_BY_PATH[kind](path, "rb"))
        try:
            return _decompressing(raw, kind, str(path))
        except BaseException:
            raw.close()
            raise

    try:
        with open(path, "rb") as fh:
            compressed = _sniff(fh.read(8)) is not None
    except OSError:
        compressed = False
    return Source(
        name=str(path), open=opener, size=st.st_size, mtime=mtime, compressed=compressed
    )


def _bytes_source(name: str, data: bytes, mtime: dt.datetime | None) -> Source:
    kind = _sniff(data[:8])

    def opener() -> BinaryIO:
        return _decompressing(io.BytesIO(data), kind, name)

    return Source(name=name, open=opener, size=len(data), mtime=mtime, compressed=kind is not None)


def _bundle_sources(path: Path) -> list[Source] | None:
    from diag.bundle.read import is_bundle, log_members

    try:
        if not is_bundle(path):
            return None
    except OSError:
        return None
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime)
    return [_bytes_source(f"{path}:{n}", data, mtime) for n, data in log_members(path)]


class _Member(io.RawIOBase):
    """A member of an archive, read as a stream; closing it closes the archive too."""

    def __init__(self, inner: BinaryIO, owner: zipfile.ZipFile | tarfile.TarFile) -> None:
        super().__init__()
        self._inner = inner
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
            self._owner.close()
        super().close()


def _member_source(archive: Path, name: str, size: int, opener: Callable[[], BinaryIO],
                   mtime: dt.datetime | None) -> Source:
    def open_member() -> BinaryIO:
        stream = cast(BinaryIO, io.BufferedReader(cast(io.RawIOBase, opener())))
        head = stream.peek(8)[:8] if hasattr(stream, "peek") else b""
        try:
            return _decompressing(stream, _sniff(head), f"{archive}:{name}")
        except BaseException:
            stream.close()
            raise

    return Source(name=f"{archive}:{name}", open=open_member, size=size, mtime=mtime)


def _archive_sources(path: Path) -> list[Source] | None:
    """The log-like members of a .zip or .tar(.gz/.bz2/.xz) someone attached to a report."""
    try:
        is_zip = zipfile.is_zipfile(path)
        is_tar = not is_zip and tarfile.is_tarfile(path)
    except (OSError, EOFError, ValueError, tarfile.TarError, lzma.LZMAError, zlib.error):
        return None  # damaged compressed data: the log reader says so with a note
    if not (is_zip or is_tar):
        return None
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime)
    out: list[Source] = []
    try:
        if is_zip:
            with zipfile.ZipFile(path) as zf:
                infos = [i for i in zf.infolist() if not i.is_dir()]
            for info in infos:
                if not _log_like(Path(info.filename)):
                    continue

                def zopen(name: str = info.filename) -> BinaryIO:
                    zf = zipfile.ZipFile(path)
                    return cast(BinaryIO, _Member(cast(BinaryIO, zf.open(name)), zf))

                out.append(_member_source(path, info.filename, info.file_size, zopen, mtime))
            return out
        with tarfile.open(path) as tf:
            members = [m for m in tf.getmembers() if m.isfile()]
        for m in members:
            if not _log_like(Path(m.name)):
                continue

            def topen(name: str = m.name) -> BinaryIO:
                tf = tarfile.open(path)  # noqa: SIM115 - _Member closes it
                inner = tf.extractfile(name)
                if inner is None:
                    tf.close()
                    return io.BytesIO(b"")
                return cast(BinaryIO, _Member(cast(BinaryIO, inner), tf))

            out.append(_member_source(path, m.name, m.size, topen, mtime))
        return out
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, lzma.LZMAError) as exc:
        raise InputError(f"{path}: damaged archive ({exc})") from exc


class _Chain(io.RawIOBase):
    """``head`` then the rest of ``rest`` (a pipe that cannot be rewound). Closing it
    leaves ``rest`` open: the head may be read again, the rest only once."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head = head
        self._pos = 0
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._pos < len(self._head):
            n = min(len(buf), len(self._head) - self._pos)
            buf[:n] = self._head[self._pos : self._pos + n]
            self._pos += n
            return n
        data = self._rest.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def _stream_source(name: str, head: bytes, rest: BinaryIO) -> Source:
    kind = _sniff(head[:8])

    def opener() -> BinaryIO:
        return _decompressing(
            cast(BinaryIO, io.BufferedReader(_Chain(head, rest))), kind, name
        )

    def sniffer() -> BinaryIO:
        return _decompressing(io.BytesIO(head), kind, name)

    return Source(
        name=name,
        open=opener,
        size=None,
        mtime=None,
        compressed=kind is not None,
        sniff=sniffer,
    )


def _log_like(path: Path) -> bool:
    if path.name.startswith(".") or path.name in _SKIP_NAMES:
        return False
    return path.suffix.lower() not in _SKIP_SUFFIXES


def resolve_inputs(inputs: Sequence[str | Path], stdin: BinaryIO | None = None) -> list[Source]:
    """Inputs -> sources, in the order given (folders sorted by name)."""
    if not inputs:
        raise InputError("no input given")
    out: list[Source] = []
    for item in inputs:
        if str(item) == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            head = stream.read(STDIN_HEAD_BYTES)
            if len(head) < STDIN_HEAD_BYTES:
                out.append(_bytes_source("<stdin>", head, None))
            else:  # a long stream: read on, never held whole in memory
                out.append(_stream_source("<stdin>", head, stream))
            continue
        path = Path(item)
        if not path.exists():
            raise InputError(f"{path}: no such file or folder")
        if path.is_dir():
            found = 0
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                more = _bundle_sources(f)
                if more is None and f.suffix.lower() in _ARCHIVE_SUFFIXES:
                    more = _archive_sources(f)
                if more is not None:
                    out.extend(more)
                elif _log_like(f):
                    out.append(_file_source(f))
                else:
                    continue
                found += 1
            if not found:
                raise InputError(f"{path}: folder holds no log files")
            continue
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: not readable (permission denied)")
        more = _bundle_sources(path)
        if more is None:
            more = _archive_sources(path)
            if more == []:
                raise InputError(f"{path}: archive holds no log files")
        out.extend(more or [_file_source(path)])
    return out


_DAMAGED = (OSError, EOFError, lzma.LZMAError, ValueError)


def _note_long(src: Source, notes: list[str]) -> None:
    note = (
        f"{src.name}: a line longer than {MAX_LINE_BYTES >> 20} MiB was cut into pieces "
        "(line numbers after it count the pieces)"
    )
    if note not in notes:
        notes.append(note)
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _position(stream: BinaryIO, consumed: int) -> int:
    """Bytes of the underlying file read so far (a decompressor's source file when there
    is one), else the bytes read from ``stream``."""
    raw = getattr(stream, "fileobj", None) or getattr(stream, "_fp", None)
    if raw is None:
        return consumed
    try:
        return int(raw.tell())
    except (OSError, ValueError, AttributeError, TypeError):
        return consumed


def _salvage(src: Source, skip: int, limit: int) -> bytes:
    """Re-read a damaged stream in small steps: what comes after ``skip`` before the damage."""
    out = bytearray()
    seen = 0
    try:
        with src.open() as stream:
            while len(out) < limit:
                piece = stream.read(1 << 16)
                if not piece:
                    break
                seen += len(piece)
                if seen > skip:
                    out += piece[max(0, len(piece) - (seen - skip)) :]
    except _DAMAGED:
        pass
    return bytes(out)


def iter_chunks(
    src: Source, notes: list[str], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[bytes, int, int, int]]:
    """Yield (buffer, start, end, position): ``buffer[start:end]`` is a run of
    whole lines (the last may lack its newline at the end of the input).

    Buffers are not copied: a line cut by a read comes back on its own, joined. A line
    longer than :data:`MAX_LINE_BYTES` is cut into pieces. A damaged compressed stream
    ends the source early with a note, not an error. ``position`` is how far into the
    source's bytes (compressed ones for a compressed file) the reading got: for progress."""
    try:
        stream = src.open()
    except OSError as exc:
        raise InputError(f"{src.name}: cannot read: {exc.strerror or exc}") from exc
    consumed = 0
    carry = b""
    utf16: codecs.BufferedIncrementalDecoder | None = None
    with stream:
        while True:
            try:
                data = stream.read(chunk_bytes)
            except _DAMAGED as exc:
                # a truncated or corrupt compressed stream: keep what can be read of it
                data = _salvage(src, consumed, chunk_bytes)
                consumed += len(data)
                notes.append(f"{src.name}: damaged compressed data after {consumed} bytes ({exc})")
                if carry or data:
                    rest = carry + data
                    carry = b""
                    yield rest, 0, len(rest), _position(stream, consumed)
                break
            if not data:
                break
            consumed += len(data)
            if consumed == len(data) and data[:2] in UTF16_BOMS:
                # PowerShell's `> file` / Out-File writes UTF-16: re-encode it as UTF-8
                utf16 = codecs.getincrementaldecoder("utf-16")(errors="replace")
            if utf16 is not None:
                data = utf16.decode(data).encode("utf-8", errors="replace")
            start = 0
            if carry:
                nl = data.find(b"\n")
                if nl < 0:
                    carry += data
                    if len(carry) >= MAX_LINE_BYTES:
                        _note_long(src, notes)
                        yield carry, 0, len(carry), _position(stream, consumed)
                        carry = b""
                    continue
                line = carry + data[: nl + 1]
                carry = b""
                yield line, 0, len(line), _position(stream, consumed)
                start = nl + 1
            cut = data.rfind(b"\n")
            if cut >= start:
                yield data, start, cut + 1, _position(stream, consumed)
                carry = data[cut + 1 :]
            else:
                carry = data[start:]
            if len(carry) >= MAX_LINE_BYTES:
                _note_long(src, notes)
                yield carry, 0, len(carry), _position(stream, consumed)
                carry = b""
        if carry:
            yield carry, 0, len(carry), _position(stream, consumed)
