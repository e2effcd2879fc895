"""Reading a bundle, possibly from a stranger, safely.

Members are read into memory, never extracted: the gzip stream is decompressed through a
counter that stops at a total cap and at a compression-ratio cap (decompression bombs);
each member is checked before its data is read (regular files only: links, devices,
FIFOs are rejected; no absolute paths, no ``..``, no duplicates; a size cap per member
and a cap on the number of members). Then the manifest is checked: known schema version,
every member listed with its size and sha256, nothing unlisted. JSON is the only format
decoded; nothing is unpickled or executed. Every failure is a :class:`BundleError` (exit
code 2) with one line that says what is wrong.

``log_members`` gives the logs back for ``diag analyze``: whole logs as stored, and
excerpts expanded to their original line numbers (omitted lines become empty lines), so
evidence in the new analysis points at the same lines as in the original.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from diag.errors import BundleError
from diag.limits import MAX_INDEX_PADDING_LINES, loads_json

__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "MANIFEST",
    "SCHEMA_VERSION",
    "Bundle",
    "Limits",
    "bundle_logs",
    "is_bundle",
    "log_members",
    "read_bundle",
]

FORMAT = "diag-bundle"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"

_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps that make a hostile bundle fail fast instead of filling memory."""

    max_member_bytes: int = 512 * _MiB
    max_total_bytes: int = 1024 * _MiB
    max_members: int = 10_000
    # decompressed / compressed, checked past ratio_floor_bytes (gzip tops out near
    # 1030:1; even a log of one repeated line stays under 500:1 at these sizes only
    # rarely, so the absolute caps above are the real guard and this one the early one)
    max_ratio: float = 500.0
    ratio_floor_bytes: int = 64 * _MiB
    max_manifest_bytes: int = 16 * _MiB


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle read into memory and checked."""

    path: Path
    manifest: Mapping[str, Any]
    members: Mapping[str, bytes] = field(default_factory=dict)

    def json(self, name: str) -> Any:
        try:
            return loads_json(self.members[name])
        except KeyError:
            raise BundleError(f"{self.path.name}: bundle has no member {name}") from None
        except ValueError as exc:
            raise BundleError(f"{self.path.name}: member {name} is not valid JSON: {exc}") from None


class _CountingReader(io.RawIOBase):
    """Decompresses a gzip file, refusing to produce more than the caps allow."""

    def __init__(self, path: Path, raw: io.BufferedReader, limits: Limits) -> None:
        self._path = path
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self._compressed = max(1, path.stat().st_size)
        self._limits = limits
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        data = self._gz.read(len(view))
        n = len(data)
        view[:n] = data
        self.total += n
        limits = self._limits
        if self.total > limits.max_total_bytes:
            raise BundleError(
                f"{self._path.name}: decompresses to more than "
                f"{limits.max_total_bytes // _MiB} MiB (a decompression bomb?)"
            )
        if (
            self.total > limits.ratio_floor_bytes
            and self.total / self._compressed > limits.max_ratio
        ):
            raise BundleError(
                f"{self._path.name}: compression ratio over {limits.max_ratio:.0f}:1 "
                f"({self.total // _MiB} MiB from {self._compressed} bytes; a decompression bomb?)"
            )
        return n


def _check_name(path: Path, name: str) -> None:
    bad = ""
    if not name or "\0" in name:
        bad = "an empty name"
    elif name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        bad = f"an absolute path ({name!r})"
    elif "\\" in name:
        bad = f"a backslash in its name ({name!r})"
    elif any(part == ".." for part in PurePosixPath(name).parts):
        bad = f"a path that leaves the bundle ({name!r})"
    elif len(name) > 512:
        bad = "a name longer than 512 characters"
    if bad:
        raise BundleError(f"{path.name}: refused, member with {bad}")


def _kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return f"a symbolic link ({info.name!r} -> {info.linkname!r})"
    if info.islnk():
        return f"a hard link ({info.name!r} -> {info.linkname!r})"
    if info.ischr() or info.isblk():
        return f"a device file ({info.name!r})"
    if info.isfifo():
        return f"a FIFO ({info.name!r})"
    return f"an unsupported member type {info.type!r} ({info.name!r})"


def _read_members(path: Path, limits: Limits) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    declared = 0
    try:
        with path.open("rb") as raw:
            reader = _CountingReader(path, raw, limits)
            buffered = io.BufferedReader(reader, buffer_size=256 * 1024)
            with tarfile.open(fileobj=buffered, mode="r|") as tar:
                for info in tar:
                    _check_name(path, info.name)
                    if info.isdir():
                        continue
                    if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                        # (plain files only: no links, devices, FIFOs, sparse files)
                        raise BundleError(f"{path.name}: refused, member is {_kind(info)}")
                    name = str(PurePosixPath(info.name))
                    if name in members:
                        raise BundleError(f"{path.name}: refused, duplicate member {name!r}")
                    if len(members) >= limits.max_members:
                        raise BundleError(
                            f"{path.name}: refused, more than {limits.max_members} members"
                        )
                    if info.size > limits.max_member_bytes:
                        raise BundleError(
                            f"{path.name}: refused, member {name!r} declares {info.size} bytes "
                            f"(cap {limits.max_member_bytes // _MiB} MiB; a decompression bomb?)"
                        )
                    declared += info.size
                    if declared > limits.max_total_bytes:
                        raise BundleError(
                            f"{path.name}: refused, members declare more than "
                            f"{limits.max_total_bytes // _MiB} MiB (a decompression bomb?)"
                        )
                    handle = tar.extractfile(info)
                    data = handle.read() if handle is not None else b""
                    if len(data) != info.size:
                        raise BundleError(f"{path.name}: member {name!r} is truncated")
                    members[name] = data
    except BundleError:
        raise
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: is a directory, not a bundle") from None
    except (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError, ValueError) as exc:
        raise BundleError(f"{path.name}: not a readable .tar.gz bundle ({exc})") from None
    except OSError as exc:
        raise BundleError(f"{path.name}: cannot read ({exc.strerror or exc})") from None
    return members


def _check_manifest(path: Path, members: Mapping[str, bytes], limits: Limits) -> dict[str, Any]:
    data = members.get(MANIFEST)
    if data is None:
        raise BundleError(f"{path.name}: not a diag bundle (no {MANIFEST})")
    if len(data) > limits.max_manifest_bytes:
        raise BundleError(f"{path.name}: {MANIFEST} is larger than its cap")
    try:
        manifest = loads_json(data)
    except ValueError as exc:
        raise BundleError(f"{path.name}: {MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path.name}: not a diag bundle ({MANIFEST} has no format {FORMAT!r})")
    schema = manifest.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:  # (not 1.0, not true)
        raise BundleError(
            f"{path.name}: unsupported bundle schema version {schema!r} "
            f"(this diag reads version {SCHEMA_VERSION}; upgrade diag or re-create the bundle)"
        )
    listed = manifest.get("members")
    if not isinstance(listed, dict):
        raise BundleError(f"{path.name}: {MANIFEST} has no member list")
    for name, data in members.items():
        if name == MANIFEST:
            continue
        entry = listed.get(name)
        if not isinstance(entry, dict):
            raise BundleError(f"{path.name}: member {name!r} is not listed in {MANIFEST}")
        if entry.get("size") != len(data):
            raise BundleError(
                f"{path.name}: size mismatch for {name!r} "
                f"({len(data)} bytes, manifest says {entry.get('size')!r})"
            )
        if entry.get("sha256") != hashlib.sha256(data).hexdigest():
            raise BundleError(f"{path.name}: checksum mismatch for {name!r} (sha256 differs)")
    missing = sorted(set(listed) - set(members))
    if missing:
        raise BundleError(f"{path.name}: member {missing[0]!r} is listed but missing")
    return manifest


def read_bundle(path: Path, *, limits: Limits = DEFAULT_LIMITS) -> Bundle:
    """Read every member into memory and check the manifest; raises BundleError."""
    members = _read_members(path, limits)
    manifest = _check_manifest(path, members, limits)
    return Bundle(path=path, manifest=manifest, members=members)


def is_bundle(path: Path) -> bool:
    """Cheap test: a gzip file whose first tar member is ``manifest.json``."""
    try:
        with path.open("rb") as raw:
            if raw.read(2) != b"\x1f\x8b":
                return False
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                header = gz.read(512)
    except (OSError, EOFError, zlib.error):
        return False
    if len(header) < 512:
        return False
    name = header[:100].split(b"\0", 1)[0]
    return name in (MANIFEST.encode(), b"./" + MANIFEST.encode())


def _expand(path: Path, data: bytes, index: Mapping[str, Any], limits: Limits) -> bytes:
    """Put an excerpt's lines back at their original line numbers."""
    segments = index.get("segments")
    if not isinstance(segments, list):
        raise BundleError(f"{path.name}: log index has no segment list")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = bytearray()
    size = 0
    padding = 0
    next_line = 1
    taken = 0
    for segment in segments:
        if (
            not isinstance(segment, list)
            or len(segment) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in segment)
        ):
            raise BundleError(f"{path.name}: malformed log index segment {segment!r}")
        first, count = segment
        if first < next_line or count < 1 or taken + count > len(lines):
            raise BundleError(f"{path.name}: log index does not match its excerpt")
        gap = first - next_line
        padding += gap
        if padding > MAX_INDEX_PADDING_LINES:
            raise BundleError(
                f"{path.name}: log index expands past the size cap (it puts back more "
                f"than {MAX_INDEX_PADDING_LINES} omitted lines; a hostile index?)"
            )
        kept = lines[taken : taken + count]
        size += gap + sum(len(line) + 1 for line in kept)
        if size > limits.max_total_bytes:
            raise BundleError(f"{path.name}: log index expands past the size cap")
        out += b"\n" * gap
        for line in kept:
            out += line
            out += b"\n"
        taken += count
        next_line = first + count
    if taken != len(lines):
        raise BundleError(f"{path.name}: log index does not match its excerpt")
    return bytes(out)


def log_members(path: Path, *, limits: Limits = DEFAULT_LIMITS) -> list[tuple[str, bytes]]:
    """The logs in a bundle as (source name, bytes), at their original line numbers."""
    return bundle_logs(read_bundle(path, limits=limits), limits=limits)


def bundle_logs(bundle: Bundle, *, limits: Limits = DEFAULT_LIMITS) -> list[tuple[str, bytes]]:
    """The logs of a bundle already read (see :func:`log_members`)."""
    path = bundle.path
    logs = bundle.manifest.get("logs", [])
    if not isinstance(logs, list):
        raise BundleError(f"{path.name}: {MANIFEST} has a malformed log list")
    out: list[tuple[str, bytes]] = []
    for entry in logs:
        if not isinstance(entry, dict) or not isinstance(entry.get("member"), str):
            raise BundleError(f"{path.name}: {MANIFEST} has a malformed log entry")
        member = entry["member"]
        if not member.startswith("logs/") or member.endswith(".index.json"):
            raise BundleError(
                f"{path.name}: {MANIFEST} lists {member!r} as a log (logs live under logs/)"
            )
        if member not in bundle.members:
            raise BundleError(f"{path.name}: log {member!r} is listed but missing")
        data = bundle.members[member]
        index_name = entry.get("index")
        if index_name is not None and (
            not isinstance(index_name, str)
            or not index_name.startswith("logs/")
            or not index_name.endswith(".index.json")
        ):
            raise BundleError(f"{path.name}: log {member!r} has a malformed index name")
        if isinstance(index_name, str):
            data = _expand(path, data, bundle.json(index_name), limits)
        source = entry.get("source")
        out.append((source if isinstance(source, str) else member, data))
    return out
