"""Where the watched lines come from: a file that grows (and rotates), a stream, or a
program ``diag watch`` launched itself.

Every source is polled (``poll()`` returns the complete lines that arrived since the last
call, never blocks) so the watcher's one loop can also check the clock, the port and the
launched process. Streams and the launched program are read by a daemon thread into a
queue; files are read directly from their last offset.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from diag.errors import InputError

__all__ = ["FileFollower", "Launched", "LineSource", "StreamFollower", "decode_line"]

MAX_LINE = 1 << 20  # a physical line longer than this is cut (its rest dropped)
READ_BYTES = 4 << 20  # at most this much is read from a file per poll


def decode_line(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")


class LineSource(Protocol):
    name: str

    def poll(self) -> list[str]: ...

    @property
    def closed(self) -> bool: ...


class _Splitter:
    """Bytes in, complete lines out; a partial last line waits for its newline."""

    def __init__(self) -> None:
        self._rest = b""

    def push(self, data: bytes) -> list[str]:
        data = self._rest + data
        parts = data.split(b"\n")
        self._rest = parts.pop()
        if len(self._rest) > MAX_LINE:  # a line with no end (a progress bar's \r updates)
            parts.append(self._rest[-MAX_LINE:])
            self._rest = b""
        return [decode_line(p[:MAX_LINE]) for p in parts]

    def flush(self) -> list[str]:
        rest, self._rest = self._rest, b""
        return [decode_line(rest)] if rest else []


class FileFollower:
    """``tail -F`` of one file: waits for it to exist, follows appends, reopens it when it
    is replaced (rotation: another inode at the path) and starts over when it shrinks
    (truncation, ``copytruncate``). ``notes`` says when either happened."""

    def __init__(self, path: Path, *, from_start: bool = True) -> None:
        self.path = path
        self.name = str(path)
        self.notes: list[str] = []
        self._fh: BinaryIO | None = None
        self._ino: int | None = None
        self._pos = 0
        self._split = _Splitter()
        self._from_start = from_start
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _open(self) -> bool:
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return False
        except (IsADirectoryError, PermissionError) as exc:
            raise InputError(f"{self.path}: cannot follow: {exc.strerror}") from None
        st = os.fstat(fh.fileno())
        self._fh, self._ino = fh, st.st_ino
        self._pos = 0 if self._from_start else st.st_size
        fh.seek(self._pos)
        self._from_start = True  # a file that appears later is read from its start
        return True

    def mtime(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def poll(self) -> list[str]:
        if self._fh is None and not self._open():
            return []
        assert self._fh is not None
        out = self._read()
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return out  # moved away; keep reading the old one until a new one appears
        if st.st_ino != self._ino:
            out += self._read() + self._split.flush()
            self._fh.close()
            self._fh = None
            self.notes.append(f"{self.path}: rotated (a new file took its place)")
            if self._open():
                out += self._read()
        elif st.st_size < self._pos:
            out += self._split.flush()
            self.notes.append(f"{self.path}: truncated at byte {self._pos}; read from the start")
            self._pos = 0
            self._fh.seek(0)
            out += self._read()
        return out

    def _read(self) -> list[str]:
        assert self._fh is not None
        data = self._fh.read(READ_BYTES)
        if not data:
            return []
        self._pos += len(data)
        return self._split.push(data)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._closed = True


class StreamFollower:
    """Lines of a stream (stdin, a pipe), read by a daemon thread."""

    def __init__(self, stream: BinaryIO, name: str = "<stdin>") -> None:
        self.name = name
        self._q: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._done = False
        self._split = _Splitter()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: BinaryIO) -> None:
        try:
            while True:
                chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
                if not chunk:
                    break
                self._q.put(chunk)
        except (OSError, ValueError):
            pass
        self._q.put(None)

    @property
    def closed(self) -> bool:
        return self._done

    def poll(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return out
            if item is None:
                self._done = True
                return out + self._split.flush()
            out += self._split.push(item)


class Launched:
    """A program ``diag watch -- CMD`` started: its own session and process group, stdout
    and stderr combined straight into ``log`` (a file, not a pipe: the server keeps
    logging when the watcher exits). The watcher follows that file like any other."""

    def __init__(self, argv: Sequence[str], log: Path) -> None:
        from diag.runner import spawn_group

        if not argv:
            raise InputError("nothing to launch", help_text="diag watch -- python -m ...")
        self.log = log
        with log.open("ab") as out:
            try:
                self.proc = spawn_group(argv, stdout=out)
            except (FileNotFoundError, PermissionError) as exc:
                raise InputError(
                    f"{argv[0]}: cannot start: {exc.strerror}",
                    help_text="Check the command after `--` (is it on PATH?).",
                ) from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def returncode(self) -> int | None:
        return self.proc.poll()

    def exit_status(self) -> int:
        """The server's exit code as a shell reports it (128 + N for signal N)."""
        rc = self.proc.poll()
        if rc is None:
            return 0
        return 128 - rc if rc < 0 else rc

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to the group, SIGKILL after ``grace_s``; reaps the launcher."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        # whatever is left of the group (children that ignore SIGTERM, orphans)
        self.signal(signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        return self.proc.poll()
