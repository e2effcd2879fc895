"""Hostile bundles past the structural checks of test_bundle_hostile: sizes taken from the
index, malformed and deeply nested JSON, a lying manifest (issue 12). Each is one line and
exit 2 through the CLI, never a traceback or an allocation the input chose."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from diag.bundle.read import log_members
from diag.bundle.verify import verify_bundle
from diag.cli import main
from diag.errors import BundleError
from tests.test_bundle_hostile import LOG, _manifest, _write


def _cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["diag", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _indexed(tmp_path: Path, segments: object) -> Path:
    members = {
        "env.json": b"{}",
        "logs/a.log": LOG,
        "logs/a.log.index.json": json.dumps({"segments": segments}).encode(),
    }
    logs = [{"member": "logs/a.log", "source": "a.log", "index": "logs/a.log.index.json"}]
    return _write(tmp_path / "idx.tar.gz", members, manifest=_manifest(members, logs=logs))


def test_index_gap_under_the_byte_cap_is_bounded(tmp_path: Path) -> None:
    """A 9 KB bundle whose index gap is just under 1 GiB built a 900 M entry list."""
    bundle = _indexed(tmp_path, [[900_000_000, 1]])
    t0 = time.monotonic()
    with pytest.raises(BundleError, match="omitted lines"):
        log_members(bundle)
    assert time.monotonic() - t0 < 10


def test_index_with_a_modest_gap_still_expands(tmp_path: Path) -> None:
    bundle = _indexed(tmp_path, [[1000, 1]])
    ((_name, data),) = log_members(bundle)
    assert data.count(b"\n") == 1000
    assert data.endswith(LOG)


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000, b"{\"x\": 1"],
)
def test_deep_or_malformed_manifest_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    body: bytes,
) -> None:
    bundle = _write(tmp_path / "deep.tar.gz", {"env.json": b"{}"}, manifest=body)
    err = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert "manifest.json" in err


def test_deep_member_json_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    members = {"env.json": b"[" * 200_000 + b"]" * 200_000, "logs/a.log": LOG}
    bundle = _write(tmp_path / "deep.tar.gz", members)
    err = _cli(capsys, monkeypatch, "bundle", "verify", str(bundle))
    assert "env.json" in err and "not valid JSON" in err


def test_schema_float_is_refused(tmp_path: Path) -> None:
    members = {"env.json": b"{}", "logs/a.log": LOG}
    bundle = _write(tmp_path / "f.tar.gz", members, manifest=_manifest(members, schema=1.0))
    with pytest.raises(BundleError, match="unsupported bundle schema version 1.0"):
        verify_bundle(bundle)


def test_manifest_lying_about_which_member_is_a_log(tmp_path: Path) -> None:
    members = {"env.json": b"{}", "logs/a.log": LOG}
    logs = [{"member": "env.json", "source": "a.log"}]
    bundle = _write(tmp_path / "lie.tar.gz", members, manifest=_manifest(members, logs=logs))
    with pytest.raises(BundleError, match="as a log"):
        verify_bundle(bundle)


@pytest.mark.parametrize("index", [5, "env.json", "logs/a.log"])
def test_malformed_index_name(tmp_path: Path, index: object) -> None:
    members = {"env.json": b"{}", "logs/a.log": LOG}
    logs = [{"member": "logs/a.log", "source": "a.log", "index": index}]
    bundle = _write(tmp_path / "ix.tar.gz", members, manifest=_manifest(members, logs=logs))
    with pytest.raises(BundleError, match="malformed index name"):
        verify_bundle(bundle)
