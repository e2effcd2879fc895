"""Bundles: one redacted ``.tar.gz`` with everything a maintainer asks for.

``write`` builds one (redacted on the way in, written atomically), ``read`` reads one
safely (``is_bundle``, ``log_members`` for ``diag analyze``), ``verify`` checks one end to
end, ``env`` collects env.json. The redactor itself is :mod:`diag.redact`.
"""

from __future__ import annotations

__all__: list[str] = []
