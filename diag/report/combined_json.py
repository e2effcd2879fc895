"""``diag analyze --json`` of a log, or of a log and its snapshot (a bundle).

The JSON contract of :mod:`diag.report.json_out` (schema_version 1), with one key added
when a snapshot joined the analysis: ``live`` (the snapshot's time on the log's clock,
the silence it proves, the verdict of the log's server and one row per process). Every
string passes the bundle's :class:`~diag.redact.Redactor` first: an ``api_key`` on the
args line reaches stdout as ``<redacted:field>``, as it does in a bundle.
"""

from __future__ import annotations

import json
from typing import Any

from diag.model import Analysis, Combined
from diag.redact import Redactor
from diag.report.combined import as_combined
from diag.report.json_out import analysis_to_dict

__all__ = ["combined_to_dict", "render_combined_json"]


def combined_to_dict(view: Analysis | Combined) -> dict[str, Any]:
    v = as_combined(view)
    out = analysis_to_dict(v.analysis)
    if v.snapshot is not None:
        out["live"] = {
            "host": v.snapshot.host,
            "taken_at": v.snapshot.taken_at.isoformat(),
            "taken_at_log_clock": v.taken_at.isoformat() if v.taken_at is not None else None,
            "stall_s": round(v.stall_s, 3) if v.stall_s is not None else None,
            "stall_proven": v.stall_proven,
            "verdict": v.verdict,
            "server": dict(v.snapshot.servers[0]) if v.snapshot.servers else None,
            "log_finding_ids": list(v.log_finding_ids),
            "snapshot_finding_ids": [f.id for f in v.snapshot.findings],
            "processes": [
                {
                    "label": r.label,
                    "pid": r.pid,
                    "role": r.role,
                    "state": r.state,
                    "rss_bytes": r.rss_bytes,
                    "cpu_percent": r.cpu_percent,
                    "gpu_index": r.gpu_index,
                    "gpu_memory_bytes": r.gpu_memory_bytes,
                    "gpu_util_percent": r.gpu_util_percent,
                    "wait_site": r.wait_site,
                    "top_frames": r.top_frames,
                    "moving": r.moving,
                    "outlier": r.outlier,
                    "in_log": r.in_log,
                }
                for r in v.live
            ],
            "notes": list(v.notes),
        }
    redacted = Redactor().value(out)
    assert isinstance(redacted, dict)
    return redacted


def render_combined_json(view: Analysis | Combined, *, indent: int | None = 2) -> str:
    """The JSON text ``--json`` prints, secrets redacted."""
    return json.dumps(combined_to_dict(view), indent=indent, ensure_ascii=False, default=str)
