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
import select
import stat
import sys
import tarfile
import tempfile
import weakref
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from diag import limits
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
    # notes about the source found before it is read (an archive cut at its caps, a pipe
    # that stopped): iter_chunks hands them on once
    pending_notes: list[str] = field(default_factory=list, compare=False)


def _sniff(head: bytes) -> str | None:
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return None


def _isal_gzip() -> type[gzip.GzipFile] | None:
    """ISA-L's gzip reader (the optional ``isal`` package: the same stream, decompressed
    about 3x faster than by ``zlib``), or None; ``DIAG_NO_ISAL=1`` turns it off."""
    if os.environ.get("DIAG_NO_ISAL"):
        return None
    try:
        from isal import igzip  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return cast("type[gzip.GzipFile]", igzip.GzipFile)


def _gzip_reader(raw: BinaryIO) -> BinaryIO:
    """A gzip stream's decompressed bytes (ISA-L's reader when installed, else zlib's)."""
    cls = _isal_gzip() or gzip.GzipFile
    return cast(BinaryIO, cls(fileobj=raw, mode="rb"))


def _gzip_path(path: Path, _mode: str) -> object:
    """``gzip.open(path, "rb")``, with ISA-L's reader when installed."""
    cls = _isal_gzip()
    if cls is None:
        return gzip.open(path, "rb")
    return cls(filename=path, mode="rb")


def _decompressing(raw: BinaryIO, kind: str | None, name: str) -> BinaryIO:
    if kind is None:
        return raw
    if kind == "gzip":
        return _gzip_reader(raw)
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
    "gzip": _gzip_path,
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


def _member_source(archive: Path, name: str, size: int, opener: Callable[[], BinaryIO],
                   mtime: dt.datetime | None, notes: list[str] | None = None) -> Source:
    def open_member() -> BinaryIO:
        stream = cast(BinaryIO, io.BufferedReader(cast(io.RawIOBase, opener())))
        head = stream.peek(8)[:8] if hasattr(stream, "peek") else b""
        try:
            return _decompressing(stream, _sniff(head), f"{archive}:{name}")
        except BaseException:
            stream.close()
            raise

    return Source(
        name=f"{archive}:{name}",
        open=open_member,
        size=size,
        mtime=mtime,
        pending_notes=notes if notes is not None else [],
    )


class _Capped(io.RawIOBase):
    """At most ``cap`` bytes of ``inner``; past that, EOF and a note on ``notes``."""

    def __init__(self, inner: BinaryIO, cap: int, notes: list[str], what: str) -> None:
        super().__init__()
        self._inner = inner
        self._left = cap
        self._cap = cap
        self._notes = notes
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        data = self._inner.read(min(len(buf), self._left))
        n = len(data)
        buf[:n] = data
        self._left -= n
        self._done = getattr(self, "_done", 0) + n
        if self._left <= 0 and self._inner.read(1):
            note = (
                f"{self._what}: input cut at {self._cap} bytes (decompression cap; "
                "decompress it yourself to read it whole)"
            )
            if note not in self._notes:
                self._notes.append(note)
        return n

    def tell(self) -> int:
        return int(getattr(self, "_done", 0))

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


class _Window(io.RawIOBase):
    """Bytes ``[start, start + length)`` of a shared temporary file, read with pread."""

    def __init__(self, fd: int, start: int, length: int, keep: object) -> None:
        super().__init__()
        self._fd = fd
        self._pos = start
        self._end = start + length
        self._keep = keep  # the owner of fd: kept alive while this window is open

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buf), self._end - self._pos)
        if n <= 0:
            return 0
        data = os.pread(self._fd, n, self._pos)
        buf[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos


class _CountingRaw(io.RawIOBase):
    """Counts the bytes read from a file (the compressed side of a tar stream)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(buf))
        buf[: len(data)] = data
        self.count += len(data)
        return len(data)


class _ArchiveStop(Exception):
    """A cap of the archive pass was reached."""


def _zip_sources(path: Path, mtime: dt.datetime | None) -> list[Source]:
    notes: list[str] = []
    zf = zipfile.ZipFile(path)  # noqa: SIM115 - shared by the members, closed when unused
    weakref.finalize(zf, zf.close)
    infos = [i for i in zf.infolist() if not i.is_dir()]
    if len(infos) > limits.MAX_ARCHIVE_MEMBERS:
        notes.append(
            f"{path}: {len(infos)} members; only the first {limits.MAX_ARCHIVE_MEMBERS} are read"
        )
        infos = infos[: limits.MAX_ARCHIVE_MEMBERS]
    out: list[Source] = []
    total = 0
    for info in infos:
        if not _log_like(Path(info.filename)):
            continue
        cap = min(
            limits.MAX_ARCHIVE_MEMBER_BYTES,
            max(
                limits.DECOMPRESSED_FLOOR_BYTES,
                int(info.compress_size * limits.MAX_DECOMPRESSION_RATIO),
            ),
            limits.MAX_ARCHIVE_TOTAL_BYTES - total,
        )
        if cap <= 0:
            notes.append(
                f"{path}: members past {limits.MAX_ARCHIVE_TOTAL_BYTES >> 20} MiB in all "
                "are not read"
            )
            break
        total += min(cap, info.file_size)
        member_notes: list[str] = []

        def zopen(
            name: str = info.filename, cap: int = cap, member_notes: list[str] = member_notes
        ) -> BinaryIO:
            inner = cast(BinaryIO, zf.open(name))
            return cast(BinaryIO, _Capped(inner, cap, member_notes, f"{path}:{name}"))

        # (the member's cap note lands in member_notes as it is read: iter_chunks hands it on)
        out.append(
            _member_source(
                path, info.filename, min(info.file_size, cap), zopen, mtime, member_notes
            )
        )
    if out:
        out[0].pending_notes.extend(notes)
    return out


def _tar_sources(path: Path, mtime: dt.datetime | None) -> list[Source]:
    """One pass over the archive (linear in its size, whatever the member order): each
    log-like member is copied into one temporary file, under the caps."""
    notes: list[str] = []
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - kept while a member is readable
    weakref.finalize(spool, spool.close)
    placed: list[tuple[str, int, int]] = []  # name, offset, length
    compressed_size = max(1, path.stat().st_size)
    produced = 0
    entries = 0
    written = 0
    with path.open("rb") as raw_file:
        counted = _CountingRaw(cast(BinaryIO, raw_file))
        buffered = io.BufferedReader(counted, buffer_size=1 << 20)
        try:
            # what the whole stream may expand to (decompression bombs)
            budget = min(
                limits.MAX_DECOMPRESSED_BYTES,
                max(
                    limits.DECOMPRESSED_FLOOR_BYTES,
                    int(compressed_size * limits.MAX_DECOMPRESSION_RATIO),
                ),
            )
            with tarfile.open(fileobj=buffered, mode="r|*") as tf:
                for m in tf:
                    entries += 1
                    if entries > limits.MAX_ARCHIVE_MEMBERS:
                        raise _ArchiveStop(
                            f"more than {limits.MAX_ARCHIVE_MEMBERS} members; the rest "
                            "are not read"
                        )
                    produced += 512
                    wanted = m.isfile() and _log_like(Path(m.name))
                    if produced + (0 if wanted else m.size) > budget:
                        # (a member that is skipped must still be decompressed to pass it)
                        raise _ArchiveStop(
                            f"expands past its cap ({produced + m.size} bytes from "
                            f"{compressed_size}); members from {m.name!r} on are not read"
                        )
                    if not wanted:
                        produced += m.size
                        continue
                    take = min(
                        m.size,
                        limits.MAX_ARCHIVE_MEMBER_BYTES,
                        limits.MAX_ARCHIVE_TOTAL_BYTES - written,
                        budget - produced,
                    )
                    produced += take
                    if take <= 0:
                        raise _ArchiveStop(
                            f"log members past {limits.MAX_ARCHIVE_TOTAL_BYTES >> 20} MiB "
                            "in all are not read"
                        )
                    inner = tf.extractfile(m)
                    if inner is None:
                        continue
                    start = spool.tell()
                    left = take
                    while left > 0:
                        piece = inner.read(min(left, 1 << 20))
                        if not piece:
                            break
                        spool.write(piece)
                        left -= len(piece)
                    length = spool.tell() - start
                    written += length
                    if take < m.size:
                        notes.append(f"{path}:{m.name}: input cut at {take} bytes (member cap)")
                    placed.append((m.name, start, length))
                    if take < m.size:
                        break  # the rest of this member would have to be decompressed
        except _ArchiveStop as stop:
            notes.append(f"{path}: {stop}")
        except (EOFError, tarfile.ReadError, zlib.error, lzma.LZMAError, OSError) as exc:
            if not placed:
                raise InputError(f"{path}: damaged archive ({exc})") from exc
            notes.append(f"{path}: damaged archive after {len(placed)} members ({exc})")
    spool.flush()
    fd = spool.fileno()
    out: list[Source] = []
    for name, start, length in placed:

        def topen(start: int = start, length: int = length) -> BinaryIO:
            return cast(BinaryIO, _Window(fd, start, length, spool))

        out.append(_member_source(path, name, length, topen, mtime))
    if out:
        out[0].pending_notes.extend(notes)
    elif notes and entries:
        raise InputError(f"{path}: {notes[0]}")
    return out


def _archive_sources(path: Path) -> list[Source] | None:
    """The log-like members of a .zip or .tar(.gz/.bz2/.xz) someone attached to a report,
    read under the archive caps of :mod:`diag.limits` whatever the order of its members."""
    try:
        with path.open("rb") as fh:
            if fh.read(1) == b"\0":
                return None  # a tar starts with a name; NULs first: a padded log
        is_zip = zipfile.is_zipfile(path)
        is_tar = not is_zip and tarfile.is_tarfile(path)
    except (OSError, EOFError, ValueError, tarfile.TarError, lzma.LZMAError, zlib.error):
        return None  # damaged compressed data: the log reader says so with a note
    if not (is_zip or is_tar):
        return None
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime)
    try:
        if is_zip:
            return _zip_sources(path, mtime)
        return _tar_sources(path, mtime)
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


class _TimedPipe(io.RawIOBase):
    """A FIFO, a process substitution (``<(cmd)``) or a pipe named ``/dev/stdin``, read
    with a timeout: no writer, or a writer silent for ``timeout_s``, ends the input
    (before any data: an InputError; after some: a note) instead of a wait forever."""

    def __init__(self, path: Path, timeout_s: float, notes: list[str]) -> None:
        super().__init__()
        # O_NONBLOCK: opening a FIFO with no writer does not block (poll then waits)
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._path = path
        self._timeout_s = timeout_s
        self._notes = notes
        self.total = 0

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        while True:
            ready, _w, _x = select.select([self._fd], [], [], self._timeout_s)
            if not ready:
                if self.total == 0:
                    raise InputError(
                        f"{self._path}: no data within {self._timeout_s:.0f} s "
                        "(a FIFO with no writer?)",
                        help_text="Start the program that writes to it first, or pass a file.",
                    )
                self._notes.append(
                    f"{self._path}: no data for {self._timeout_s:.0f} s; "
                    f"read stopped after {self.total} bytes"
                )
                return 0
            try:
                data = os.read(self._fd, len(buf))
            except BlockingIOError:
                continue
            buf[: len(data)] = data
            self.total += len(data)
            return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


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


def _read_stream(name: str, stream: BinaryIO, notes: list[str]) -> Source:
    head = stream.read(STDIN_HEAD_BYTES)
    if len(head) < STDIN_HEAD_BYTES:
        src = _bytes_source(name, head, None)
    else:  # a long stream: read on, never held whole in memory
        src = _stream_source(name, head, stream)
    src.pending_notes.extend(notes)
    return src


def _special_source(path: Path, mode: int, follow: bool) -> Source:
    """A path that is not a regular file or a folder: a FIFO or pipe is streamed like
    ``-`` (with a read timeout); a device only with ``follow``."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        if not follow:
            raise InputError(
                f"{path}: a device, not a log file (refused: it may never end)",
                help_text="Copy the log to a file first, or pipe it: cat DEVICE | diag analyze -",
            )
    elif not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise InputError(f"{path}: not a regular file")
    notes: list[str] = []
    try:
        pipe = _TimedPipe(path, limits.FIFO_READ_TIMEOUT_S, notes)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return _read_stream(str(path), cast(BinaryIO, io.BufferedReader(pipe)), notes)


def resolve_inputs(
    inputs: Sequence[str | Path], stdin: BinaryIO | None = None, *, follow: bool = False
) -> list[Source]:
    """Inputs -> sources, in the order given (folders sorted by name). FIFOs, process
    substitutions and a piped ``/dev/stdin`` are streamed like ``-``; character devices are
    refused unless ``follow``."""
    if not inputs:
        raise InputError("no input given")
    out: list[Source] = []
    # an input named twice (the same file, a folder and a file in it, two spellings of a
    # path) is read once, by its resolved path, with a note on its first source
    first: dict[object, tuple[int, str]] = {}
    others: dict[object, list[str]] = {}

    def again(key: object, name: str) -> bool:
        if key not in first:
            first[key] = (len(out), name)
            return False
        others.setdefault(key, []).append(name)
        return True

    for item in inputs:
        if str(item) == "-":
            if again("-", "<stdin>"):
                continue
            stream = stdin if stdin is not None else sys.stdin.buffer
            out.append(_read_stream("<stdin>", stream, []))
            continue
        path = Path(item)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise InputError(f"{path}: no such file or folder") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if path.is_dir():
            found = 0
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                more = _bundle_sources(f)
                if more is None and f.suffix.lower() in _ARCHIVE_SUFFIXES:
                    more = _archive_sources(f)
                if more is None and not _log_like(f):
                    continue
                if not again(f.resolve(), str(f)):
                    out.extend(more if more is not None else [_file_source(f)])
                found += 1
            if not found:
                raise InputError(f"{path}: folder holds no log files")
            continue
        if again(path.resolve(), str(path)):
            continue
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: not readable (permission denied)")
        if not stat.S_ISREG(mode):
            out.append(_special_source(path, mode, follow))
            continue
        more = _bundle_sources(path)
        if more is None:
            more = _archive_sources(path)
            if more == []:
                raise InputError(f"{path}: archive holds no log files")
        out.extend(more or [_file_source(path)])
    for key, names in others.items():
        at, shown = first[key]
        spelled = [n for n in dict.fromkeys(names) if n != shown]
        also = f" (also as {', '.join(spelled)})" if spelled else ""
        if at < len(out):
            out[at].pending_notes.append(f"{shown}: given {1 + len(names)} times{also}: read once")
    return [_nul_skipping(src) for src in out]


class _NulSkip(io.RawIOBase):
    """``inner`` without its leading NUL bytes (the hole logrotate's ``copytruncate``
    leaves when a writer keeps its offset); ``skipped`` counts them."""

    def __init__(self, inner: BinaryIO) -> None:
        super().__init__()
        self._inner = inner
        self.skipped = 0
        self._started = False
        raw = getattr(inner, "fileobj", None) or getattr(inner, "_fp", None)
        if raw is not None:
            self.fileobj = raw  # for _position: the compressed side's offset

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._started and hasattr(self._inner, "readinto"):
            return int(self._inner.readinto(buf) or 0)  # straight into the caller's buffer
        while True:
            data = self._inner.read(len(buf))
            if not data:
                return 0
            if not self._started:
                kept = data.lstrip(b"\0")
                self.skipped += len(data) - len(kept)
                if not kept:
                    continue
                self._started = True
                data = kept
            buf[: len(data)] = data
            return len(data)

    def read(self, size: int = -1) -> bytes:
        # past the leading NULs: hand the inner stream's bytes through (no copies)
        if self._started:
            return self._inner.read(size)
        return super().read(size) or b""

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def _nul_skipping(src: Source) -> Source:
    def opener(inner: Callable[[], BinaryIO] = src.open) -> BinaryIO:
        return cast(BinaryIO, _NulSkip(inner()))

    sniff = src.sniff
    sniffer: Callable[[], BinaryIO] | None = None
    if sniff is not None:

        def sniffer(inner: Callable[[], BinaryIO] = sniff) -> BinaryIO:
            return cast(BinaryIO, _NulSkip(inner()))

    return Source(
        name=src.name,
        open=opener,
        size=src.size,
        mtime=src.mtime,
        compressed=src.compressed,
        sniff=sniffer,
        pending_notes=src.pending_notes,
    )


def _damaged() -> tuple[type[BaseException], ...]:
    """The errors of a damaged compressed stream (ISA-L's own error class too; evaluated
    only when an error is raised, so ``isal`` is not imported for a plain file)."""
    out: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError, ValueError)
    if _isal_gzip() is not None:
        from isal import isal_zlib  # type: ignore[import-not-found, unused-ignore]

        out = (*out, cast("type[BaseException]", isal_zlib.error))
    return out



def _note_long(src: Source, notes: list[str]) -> None:
    note = (
        f"{src.name}: a line longer than {MAX_LINE_BYTES >> 20} MiB was cut into pieces "
        "(line numbers after it count the pieces)"
    )
    if note not in notes:
        notes.append(note)
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF16_SNIFF = 4096  # bytes of the head read for UTF-16 without its BOM


def utf16_codec(head: bytes) -> str | None:
    """The UTF-16 codec a file's first bytes are in, or None: "utf-16" where it opens with
    a byte-order mark (PowerShell's ``> file``, ``Out-File``), "utf-16-le" / "utf-16-be"
    where the mark was lost (a file cut at its head, a copy of its middle) but the text is
    ASCII held in two bytes each: nearly every second byte NUL, the others not."""
    if head[:2] in UTF16_BOMS:
        return "utf-16"
    sample = head[: _UTF16_SNIFF & ~1]
    if len(sample) < 64:
        return None
    even, odd = sample[0::2], sample[1::2]
    for zeros, chars, codec in ((odd, even, "utf-16-le"), (even, odd, "utf-16-be")):
        if zeros.count(0) * 100 >= len(zeros) * 95 and chars.count(0) * 2 < len(chars):
            return codec
    return None


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
    except _damaged():
        pass
    return bytes(out)


def _read_after(
    stream: BinaryIO, carry: bytes, size: int, pool: list[bytearray]
) -> bytearray:
    """``carry`` followed by up to ``size`` bytes read from ``stream`` into the same
    buffer (one copy from the stream, none after). A buffer of ``pool`` that nothing else
    references any more is reused (fresh memory costs a page fault per 4 KiB)."""
    need = len(carry) + size
    buf = None
    for i in range(len(pool)):
        # 2: the pool's reference and getrefcount's argument (no chunk, view or array
        # of it is alive)
        if sys.getrefcount(pool[i]) == 2:
            buf = pool[i]
            break
    if buf is None:
        buf = bytearray(need)
        if len(pool) < 4:
            pool.append(buf)
    elif len(buf) < need:
        buf.extend(bytes(need - len(buf)))
    buf[: len(carry)] = carry
    view = memoryview(buf)
    part = view[len(carry) : need]
    try:
        got = stream.readinto(part) or 0  # type: ignore[attr-defined]
    finally:
        part.release()
        view.release()
    del buf[len(carry) + got :]
    return buf


def iter_chunks(
    src: Source, notes: list[str], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[bytes | bytearray, int, int, int]]:
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
    utf16: codecs.IncrementalDecoder | None = None
    cr_only = False
    # past the first read, plain bytes are read straight after the carried partial line
    # into one buffer that is cut after its last newline: no chunk is copied
    plain = False
    pool: list[bytearray] = []
    with stream:
        while True:
            if src.compressed and consumed > limits.DECOMPRESSED_FLOOR_BYTES:
                packed = max(1, _position(stream, consumed))
                if (
                    consumed > limits.MAX_DECOMPRESSED_BYTES
                    or (packed != consumed
                        and consumed / packed > limits.MAX_DECOMPRESSION_RATIO)
                ):
                    notes.append(
                        f"{src.name}: input cut at {consumed} bytes (it expands more than "
                        f"{limits.MAX_DECOMPRESSION_RATIO:.0f}:1 from {packed} compressed "
                        "bytes; decompress it yourself to read it whole)"
                    )
                    break
            buf: bytearray | None = None
            try:
                if plain:
                    buf = _read_after(stream, carry, chunk_bytes, pool)
                    data = b""
                else:
                    data = stream.read(chunk_bytes)
            except _damaged() as exc:
                # a truncated or corrupt compressed stream: keep what can be read of it
                data = _salvage(src, consumed, chunk_bytes)
                consumed += len(data)
                notes.append(f"{src.name}: damaged compressed data after {consumed} bytes ({exc})")
                if carry or data:
                    rest = carry + data
                    carry = b""
                    yield rest, 0, len(rest), _position(stream, consumed)
                break
            if buf is not None:
                got = len(buf) - len(carry)
                if got <= 0:
                    break
                consumed += got
                cut = buf.rfind(b"\n")
                if cut < 0:
                    carry = bytes(buf)
                    if len(carry) >= MAX_LINE_BYTES:
                        _note_long(src, notes)
                        yield carry, 0, len(carry), _position(stream, consumed)
                        carry = b""
                    continue
                carry = bytes(buf[cut + 1 :])
                del buf[cut + 1 :]
                yield buf, 0, len(buf), _position(stream, consumed)
                if len(carry) >= MAX_LINE_BYTES:
                    _note_long(src, notes)
                    yield carry, 0, len(carry), _position(stream, consumed)
                    carry = b""
                continue
            if not data:
                break
            consumed += len(data)
            if consumed == len(data) and (codec := utf16_codec(data)) is not None:
                # PowerShell's `> file` / Out-File writes UTF-16: re-encode it as UTF-8
                utf16 = codecs.getincrementaldecoder(codec)(errors="replace")
                if codec != "utf-16":
                    notes.append(f"{src.name}: read as {codec.upper()} (no byte-order mark)")
            if utf16 is not None:
                data = utf16.decode(data).encode("utf-8", errors="replace")
            if consumed == len(data) and b"\n" not in data and data.count(b"\r") > 1:
                cr_only = True  # classic Mac line ends (or one endless progress bar)
                notes.append(f"{src.name}: lines end in CR only; read as line ends")
            if cr_only:
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            plain = utf16 is None and not cr_only and hasattr(stream, "readinto")
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
    skipped = getattr(stream, "skipped", 0)
    if skipped:
        notes.append(
            f"{src.name}: {skipped} leading NUL bytes skipped (the hole logrotate's "
            "copytruncate leaves)"
        )
    for note in src.pending_notes:
        if note not in notes:
            notes.append(note)
