"""Fuzz whole-file analysis: a file (plain, compressed, an archive, NUL-padded, CR-only,
with hostile tokens in real log lines) through resolve_inputs and analyze. A refusal is
an InputError/DiagError (one line); anything else is a crash."""

from __future__ import annotations

import bz2
import gzip
import io
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from _common import Gen, drive, instrumented  # noqa: E402

with instrumented():
    from diag.analyze import analyze
    from diag.errors import DiagError

_TMP = Path(tempfile.mkdtemp(prefix="diag-fuzz-analyze-"))


def _wrap(g: Gen, body: bytes) -> bytes:
    kind = g.byte() % 10
    if kind == 0:
        return gzip.compress(body, compresslevel=1)
    if kind == 1:
        return bz2.compress(body, compresslevel=1)
    if kind == 2:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tf:
            for i in range(1 + g.byte() % 3):
                info = tarfile.TarInfo(f"r{i}.log")
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
        return raw.getvalue()
    if kind == 3:
        return b"\0" * (g.byte() * 64) + body
    if kind == 4:
        return body.replace(b"\n", b"\r")
    return body


def one_input(data: bytes) -> None:
    g = Gen(data)
    mode = g.byte()
    body = g.rest()
    if mode % 3:
        text = Gen(data[::-1]).mutate_text(body.decode("utf-8", "replace"))
        body = text.encode("utf-8", "surrogatepass")
    path = _TMP / "in.log"
    path.write_bytes(_wrap(Gen(data[:8]), body[: 1 << 18]))
    with contextlib.suppress(DiagError):
        analyze([path])


if __name__ == "__main__":
    drive("analyze_file", one_input, float(sys.argv[1]) if len(sys.argv) > 1 else 60)
