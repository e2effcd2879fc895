"""Fuzz the bundle reader: a stranger's .tar.gz (member order, names, sizes, the
manifest's fields, log indexes with huge or negative segments, deep JSON) must verify or
raise BundleError; nothing else, and nothing sized by the input."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Gen, drive, instrumented  # noqa: E402

with instrumented():
    from diag.bundle.read import bundle_logs, read_bundle
    from diag.bundle.verify import verify_bundle
    from diag.errors import BundleError

LOG = b"[2026-02-22 22:35:01 TP0] Init torch distributed begin.\n" * 3
_ODD: list[object] = [None, True, 1.0, -1, 0, 10**12, 2**63, "x", "1", [], {}, [[1, 1]],
                      [[10**9, 1]], [[1, -5]], [["1", 1]], "../x", "/etc/passwd"]  # fmt: skip
_TMP = Path(tempfile.mkdtemp(prefix="diag-fuzz-bundle-"))


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return raw.getvalue()


def _structured(g: Gen) -> bytes:
    def odd() -> object:
        return _ODD[g.byte() % len(_ODD)]

    index = {"segments": [[1, 2], [10, 1]]}
    if g.byte() % 3 == 0:
        index["segments"] = odd()  # type: ignore[assignment]
    body = {
        "env.json": b"{}" if g.byte() % 6 else Gen(b"x").mutate_text("{}").encode(),
        "logs/a.log": LOG,
        "logs/a.log.index.json": json.dumps(index).encode(),
    }
    members = {
        n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in body.items()
    }
    manifest: dict[str, object] = {
        "format": "diag-bundle", "schema": 1, "diag_version": "0.1", "created": "x",
        "logs": [{"member": "logs/a.log", "source": "a.log", "index": "logs/a.log.index.json"}],
        "members": members,
    }  # fmt: skip
    for key in list(manifest):
        if g.byte() % 6 == 0:
            manifest[key] = odd()
    logs = manifest.get("logs")
    if g.byte() % 5 == 0 and isinstance(logs, list) and logs and isinstance(logs[0], dict):
        manifest["logs"] = [{k: odd() if g.byte() % 2 else v for k, v in logs[0].items()}]
    text = json.dumps(manifest)
    if g.byte() % 4 == 0:
        text = Gen(bytes(g.rest()[:16])).mutate_text(text)
    entries = [("manifest.json", text.encode()), *body.items()]
    if g.byte() % 3 == 0:
        entries.append(entries.pop(0))  # manifest not first
    return _tar(entries)


def one_input(data: bytes) -> None:
    g = Gen(data)
    blob = g.rest() if g.byte() % 4 == 0 else _structured(g)
    path = _TMP / "b.tar.gz"
    path.write_bytes(blob)
    try:
        verify_bundle(path)
        bundle_logs(read_bundle(path))
    except BundleError:
        pass


if __name__ == "__main__":
    drive("bundle", one_input, float(sys.argv[1]) if len(sys.argv) > 1 else 60)
