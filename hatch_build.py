"""Build hook: compile diag's line scanner (diag/parse/_scan.c) into the package.

A wheel then carries it (and is tagged for the platform); an editable install gets it next
to the source. No compiler, or a failed build, is no error: diag builds the scanner into
its cache folder on first use instead, or runs without it (diag/parse/native.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ScannerHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        here = Path(self.root) / "diag" / "parse"
        spec = importlib.util.spec_from_file_location("_diag_native_build", here / "native.py")
        if spec is None or spec.loader is None:
            return
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
            built = mod.build(here)
        except Exception:  # noqa: BLE001 - never fail an install over an optional speed-up
            return
        if built is None:
            return
        if version != "editable":
            build_data["force_include"][str(built)] = f"diag/parse/{built.name}"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
