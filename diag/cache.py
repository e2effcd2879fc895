"""A small on-disk cache of parsed data files (the rule library, the phase catalogue).

Entries are plain data (dicts, lists, strings, numbers) written with :mod:`marshal`, so
loading one runs no code; each is keyed by a hash of the files it was made from, diag's
version and the Python version, and is ignored when the key differs. The folder is
``$DIAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/diag``, else ``~/.cache/diag``;
``DIAG_NO_CACHE=1`` turns the cache off. Any problem reading or writing it (a read-only
home, a damaged entry) is silent: the caller parses the files as if there were no cache.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["cache_dir", "content_key", "load", "store"]

_FORMAT = 1


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off."""
    if os.environ.get("DIAG_NO_CACHE"):
        return None
    explicit = os.environ.get("DIAG_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diag"


def content_key(parts: Iterable[str | bytes], *extra: str) -> str:
    """A hash of ``parts`` (file contents, names) plus diag's and Python's versions."""
    from diag import __version__

    h = hashlib.sha256()
    for item in (str(_FORMAT), __version__, sys.version, *extra):
        h.update(item.encode() + b"\0")
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()


_KEEP = 12  # entries kept per name (the oldest beyond are deleted)


def _entry(folder: Path, name: str, key: str) -> Path:
    # the key is part of the file name: runs over different rule or catalogue files (other
    # checkouts, other versions) keep their own entries instead of overwriting one
    return folder / f"{name}@{key[:20]}.marshal"


def load(name: str, key: str) -> object | None:
    """The data stored under ``name`` with ``key``, or None (no entry, another key,
    a damaged file, no cache)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        raw = _entry(folder, name, key).read_bytes()
        stored = marshal.loads(raw)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(stored, tuple) or len(stored) != 2 or stored[0] != key:
        return None
    data: object = stored[1]
    return data


def store(name: str, key: str, data: object) -> None:
    """Store ``data`` (plain data only) under ``name``; silently does nothing on failure.
    Only the newest :data:`_KEEP` entries of a name are kept."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        blob = marshal.dumps((key, data))  # type: ignore[arg-type]
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes(blob)
        os.replace(tmp, _entry(folder, name, key))
        old = sorted(folder.glob(f"{name}@*.marshal"), key=_mtime, reverse=True)[_KEEP:]
        old.append(folder / f"{name}.marshal")  # the entry as diag named it before
        for path in old:
            path.unlink(missing_ok=True)
    except (OSError, ValueError):
        return


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
