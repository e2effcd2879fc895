"""``diag bundle verify``: a bundle's checksums, schema and structure, without trusting it.

Everything :func:`diag.bundle.read.read_bundle` checks (safe members, caps, schema
version, sizes and sha256 of every member), plus: the members a bundle must have are
there, every ``.json`` member parses, and every log excerpt's line index matches its
excerpt. The result says what the bundle holds; any problem is a BundleError (exit 2).
Every text of the report comes from the bundle, so it passes the terminal sanitiser
(an escape sequence in a manifest field is shown, never run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag.bundle.read import DEFAULT_LIMITS, Limits, bundle_logs, read_bundle
from diag.errors import BundleError
from diag.limits import loads_json
from diag.report.sanitize import visible

__all__ = ["REQUIRED_MEMBERS", "VerifyReport", "verify_bundle"]

REQUIRED_MEMBERS: tuple[str, ...] = ("manifest.json", "env.json")


@dataclass(frozen=True, slots=True)
class VerifyReport:
    path: Path
    schema: int
    diag_version: str
    created: str
    members: int
    bytes: int
    logs: tuple[str, ...]
    cut_logs: tuple[str, ...]
    snapshot: bool
    analysis: bool
    redactions: Mapping[str, int] = field(default_factory=dict)
    summary: Mapping[str, object] = field(default_factory=dict)


def verify_bundle(path: Path, *, limits: Limits = DEFAULT_LIMITS) -> VerifyReport:
    """Check a bundle end to end; raises BundleError on the first problem."""
    bundle = read_bundle(path, limits=limits)
    for name in REQUIRED_MEMBERS:
        if name not in bundle.members:
            raise BundleError(f"{path.name}: required member {name} is missing")
    for name, data in bundle.members.items():
        if name.endswith(".json"):
            try:
                loads_json(data)
            except ValueError as exc:
                raise BundleError(f"{path.name}: member {name} is not valid JSON ({exc})") from None
    logs = bundle_logs(bundle, limits=limits)  # checks each excerpt against its index
    manifest = bundle.manifest
    entries = [e for e in manifest.get("logs", []) if isinstance(e, dict)]
    redactions = manifest.get("redactions", {})
    summary = manifest.get("summary")
    return VerifyReport(
        path=path,
        schema=int(manifest["schema"]),
        diag_version=visible(str(manifest.get("diag_version", "?"))),
        created=visible(str(manifest.get("created", "?"))),
        members=len(bundle.members),
        bytes=sum(len(d) for d in bundle.members.values()),
        logs=tuple(visible(name) for name, _data in logs),
        cut_logs=tuple(visible(str(e.get("member"))) for e in entries if e.get("cut")),
        snapshot="snapshot.json" in bundle.members,
        analysis="analysis.json" in bundle.members,
        summary=_visible_tree(summary) if isinstance(summary, dict) else {},
        redactions={
            visible(str(k)): v
            for k, v in (redactions.items() if isinstance(redactions, dict) else ())
            if type(v) is int
        },
    )


def _visible_tree(obj: Any) -> Any:
    """Every string of a decoded JSON value (keys too) through the sanitiser."""
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, dict):
        return {visible(str(k)): _visible_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_visible_tree(v) for v in obj]
    return obj
