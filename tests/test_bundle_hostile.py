"""Hostile bundles: each is refused with one clear line and exit code 2, through the CLI.

Every crafted bundle is otherwise valid (manifest first, right schema, right checksums),
so that the one defect under test is what the reader has to catch."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.bundle.read import Limits, is_bundle, log_members, read_bundle
from diag.bundle.verify import verify_bundle
from diag.bundle.write import write_bundle
from diag.cli import main
from diag.errors import BundleError

LOG = b"[2026-02-22 22:35:01 TP0] Init torch distributed begin.\n"


def _info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    info.mode = 0o644
    return info


def _manifest(members: dict[str, bytes], **over: object) -> bytes:
    manifest: dict[str, object] = {
        "format": "diag-bundle",
        "schema": 1,
        "diag_version": "0.1.0",
        "created": "2026-11-30T00:00:00+00:00",
        "logs": [{"member": "logs/a.log", "source": "a.log"}] if "logs/a.log" in members else [],
        "members": {
            n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()
        },
    }
    manifest.update(over)
    return json.dumps(manifest).encode()


def _write(
    path: Path,
    members: dict[str, bytes],
    *,
    extra: Callable[[tarfile.TarFile], None] | None = None,
    manifest: bytes | None = None,
) -> Path:
    with (
        path.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb") as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        data = manifest if manifest is not None else _manifest(members)
        tar.addfile(_info("manifest.json", len(data)), io.BytesIO(data))
        for name, body in members.items():
            tar.addfile(_info(name, len(body)), io.BytesIO(body))
        if extra is not None:
            extra(tar)
    return path


def _good_members() -> dict[str, bytes]:
    return {"env.json": b"{}", "logs/a.log": LOG}


def _cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["diag", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first = err.splitlines()[0]
    assert first.startswith("diag: error: ")
    return first


def _symlink(tar: tarfile.TarFile) -> None:
    info = _info("logs/passwd", kind=tarfile.SYMTYPE)
    info.linkname = "/etc/passwd"
    tar.addfile(info)


def _hardlink(tar: tarfile.TarFile) -> None:
    info = _info("logs/hard", kind=tarfile.LNKTYPE)
    info.linkname = "logs/a.log"
    tar.addfile(info)


def _device(tar: tarfile.TarFile) -> None:
    info = _info("logs/sda", kind=tarfile.BLKTYPE)
    info.devmajor, info.devminor = 8, 0
    tar.addfile(info)


def _chardev(tar: tarfile.TarFile) -> None:
    info = _info("logs/zero", kind=tarfile.CHRTYPE)
    info.devmajor, info.devminor = 1, 5
    tar.addfile(info)


def _fifo(tar: tarfile.TarFile) -> None:
    tar.addfile(_info("logs/pipe", kind=tarfile.FIFOTYPE))


def _sparse(tar: tarfile.TarFile) -> None:
    tar.addfile(_info("logs/sparse.log", kind=tarfile.GNUTYPE_SPARSE))


def _member(name: str) -> Callable[[tarfile.TarFile], None]:
    def add(tar: tarfile.TarFile) -> None:
        tar.addfile(_info(name, 3), io.BytesIO(b"bad"))

    return add


CASES: dict[str, tuple[Callable[[tarfile.TarFile], None], str]] = {
    "traversal": (_member("logs/../../etc/cron.d/x"), "leaves the bundle"),
    "traversal_top": (_member("../evil.log"), "leaves the bundle"),
    "absolute": (_member("/etc/passwd"), "absolute path"),
    "symlink": (_symlink, "symbolic link"),
    "hardlink": (_hardlink, "hard link"),
    "block_device": (_device, "device file"),
    "char_device": (_chardev, "device file"),
    "fifo": (_fifo, "FIFO"),
    "sparse": (_sparse, "unsupported member type"),
    "unlisted": (_member("logs/extra.log"), "not listed"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_member_refused(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra, expected = CASES[case]
    bundle = _write(tmp_path / f"{case}.tar.gz", _good_members(), extra=extra)
    assert is_bundle(bundle)  # it looks like one: the reader has to catch the defect
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert expected in line
    with pytest.raises(BundleError, match=expected):
        log_members(bundle)  # the path `diag analyze BUNDLE` takes
    assert not (tmp_path / "etc").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{case}.tar.gz"]  # nothing extracted


def test_wrong_checksum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    members = _good_members()
    manifest = _manifest(members)
    members["logs/a.log"] = LOG.replace(b"TP0", b"TP1")  # same size, other bytes
    bundle = _write(tmp_path / "sum.tar.gz", members, manifest=manifest)
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert "checksum mismatch for 'logs/a.log'" in line


def test_wrong_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    members = _good_members()
    manifest = _manifest(members)
    members["logs/a.log"] = LOG + b"appended\n"
    bundle = _write(tmp_path / "size.tar.gz", members, manifest=manifest)
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert "size mismatch for 'logs/a.log'" in line


def test_listed_but_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    members = _good_members()
    manifest = _manifest({**members, "report.md": b"# gone\n"})
    bundle = _write(tmp_path / "missing.tar.gz", members, manifest=manifest)
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert "'report.md' is listed but missing" in line


@pytest.mark.parametrize("schema", [2, 0, "1", None, True])
def test_unknown_schema_version(
    schema: object,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    members = _good_members()
    bundle = _write(tmp_path / "schema.tar.gz", members, manifest=_manifest(members, schema=schema))
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert f"unsupported bundle schema version {schema!r}" in line


def test_bomb_by_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 MiB of zeros in ~80 kB: refused while streaming, before it is all inflated."""
    members = _good_members()
    zeros = bytes(80 * 1024 * 1024)
    members["logs/a.log"] = zeros
    bundle = _write(tmp_path / "bomb.tar.gz", members)
    assert bundle.stat().st_size < 200_000
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert "decompression bomb" in line and "compression ratio" in line


def test_bomb_by_declared_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header that declares 2 TiB is refused from the header, before any data is read."""
    members = _good_members()
    path = tmp_path / "huge.tar.gz"
    header = _info("logs/huge.log", 2 << 40).tobuf(format=tarfile.PAX_FORMAT)
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w") as tar:
        data = _manifest(members)
        tar.addfile(_info("manifest.json", len(data)), io.BytesIO(data))
    body = good.getvalue().rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    path.write_bytes(gzip.compress(body + header + bytes(4096)))
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(path))
    assert "declares" in line and "decompression bomb" in line


def test_bomb_total_and_member_caps(tmp_path: Path) -> None:
    members = _good_members()
    members["logs/a.log"] = b"x" * 300_000
    bundle = _write(tmp_path / "caps.tar.gz", members)
    with pytest.raises(BundleError, match="declares 300000 bytes"):
        read_bundle(bundle, limits=Limits(max_member_bytes=100_000))
    with pytest.raises(BundleError, match="decompresses to more than"):
        read_bundle(bundle, limits=Limits(max_total_bytes=200_000, max_member_bytes=10**6))
    with pytest.raises(BundleError, match="more than 2 members"):
        read_bundle(bundle, limits=Limits(max_members=2))
    assert read_bundle(bundle).members["logs/a.log"] == b"x" * 300_000


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"not gzip at all\n", "not a readable .tar.gz bundle"),
        (gzip.compress(b"gzip but not tar" * 40), "not a readable .tar.gz bundle"),
    ],
)
def test_not_a_bundle(
    content: bytes,
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "x.tar.gz"
    path.write_bytes(content)
    assert not is_bundle(path)
    assert expected in _cli(capsys, monkeypatch, "bundle", "verify", str(path))


def test_truncated_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write_bundle(tmp_path / "good.tar.gz", logs=[], analysis=None, snapshot=None)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.path.read_bytes()[: good.size // 2])
    line = _cli(capsys, monkeypatch, "bundle", "verify", str(cut))
    assert "cut.tar.gz" in line


def test_tampered_log_index(tmp_path: Path) -> None:
    """An index that claims lines the excerpt does not have is refused."""
    members = {
        "env.json": b"{}",
        "logs/a.log": LOG,
        "logs/a.log.index.json": json.dumps({"segments": [[5, 3]]}).encode(),
    }
    logs = [{"member": "logs/a.log", "source": "a.log", "index": "logs/a.log.index.json"}]
    bundle = _write(tmp_path / "idx.tar.gz", members, manifest=_manifest(members, logs=logs))
    with pytest.raises(BundleError, match="does not match its excerpt"):
        verify_bundle(bundle)
    members["logs/a.log.index.json"] = json.dumps({"segments": [[10**12, 1]]}).encode()
    bundle = _write(tmp_path / "idx2.tar.gz", members, manifest=_manifest(members, logs=logs))
    with pytest.raises(BundleError, match="expands past the size cap"):
        verify_bundle(bundle)


def test_good_bundle_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(LOG)
    write_bundle(tmp_path / "ok.tar.gz", logs=[log], analysis=None, snapshot=None)
    monkeypatch.setattr(sys, "argv", ["diag", "bundle", "verify", str(tmp_path / "ok.tar.gz")])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert out.startswith("ok: ") and "schema 1" in out and "logs: server.log" in out


@pytest.mark.parametrize("case", ["traversal", "symlink", "hardlink", "block_device"])
def test_analyze_refuses_hostile_bundle(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`diag analyze BUNDLE` reads through the same checks: one line, exit 2."""
    extra, expected = CASES[case]
    bundle = _write(tmp_path / f"{case}.tar.gz", _good_members(), extra=extra)
    assert expected in _cli(capsys, monkeypatch, "analyze", str(bundle))


def test_analyze_refuses_tampered_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    members = _good_members()
    manifest = _manifest(members)
    members["logs/a.log"] = LOG.replace(b"TP0", b"TP9")
    bundle = _write(tmp_path / "sum.tar.gz", members, manifest=manifest)
    assert "checksum mismatch" in _cli(capsys, monkeypatch, "analyze", str(bundle))


_VALID_TAR: list[bytes] = []


def _valid_tar(tmp_path: Path) -> bytes:
    """One real bundle's tar stream, written once per test session: a bundle holds its
    creation time, so one written per example would change the draw bounds between
    hypothesis' runs of the same example (FlakyStrategyDefinition)."""
    if not _VALID_TAR:
        log = tmp_path / "server.log"
        log.write_bytes(LOG * 20)
        info = write_bundle(tmp_path / "seed.tar.gz", logs=[log], analysis=None, snapshot=None)
        _VALID_TAR.append(gzip.decompress(info.path.read_bytes()))
    return _VALID_TAR[0]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fuzzed_bundles_fail_cleanly(tmp_path: Path, data: st.DataObject) -> None:
    """Random damage to a real bundle's tar stream (and gzip layer): the reader either
    accepts it (and then every checksum held) or raises BundleError; never another
    exception."""
    tar = bytearray(_valid_tar(tmp_path))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(tar) - 1))
        tar[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        tar = tar[: data.draw(st.integers(0, len(tar)))]
    blob = bytearray(gzip.compress(bytes(tar)))
    if data.draw(st.booleans()):  # damage the gzip layer too
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] ^= data.draw(st.integers(1, 255))
    path = tmp_path / "fuzz.tar.gz"
    path.write_bytes(bytes(blob))
    try:
        bundle = verify_bundle(path)
    except BundleError as exc:
        assert exc.exit_code == 2 and "\n" not in exc.message
    else:
        assert bundle.schema == 1


def test_exit_code_of_the_real_command(tmp_path: Path) -> None:
    """The installed entry point, in its own process: one line on stderr, exit 2."""
    import subprocess

    bundle = _write(tmp_path / "evil.tar.gz", _good_members(), extra=_symlink)
    proc = subprocess.run(
        [sys.executable, "-m", "diag", "bundle", "verify", str(bundle)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0] == ("diag: error: evil.tar.gz: refused, member is a symbolic link "
                        "('logs/passwd' -> '/etc/passwd')")
    assert lines[1].startswith("hint: ") and len(lines) == 2
