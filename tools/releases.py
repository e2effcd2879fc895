"""What the source-reading tools (stack_catalogue.py, frame_catalogue.py) share: the
releases they are given on the command line and the order of release versions."""

from __future__ import annotations

from pathlib import Path

__all__ = ["release_key", "release_sources"]


def release_key(v: str) -> tuple[int, ...]:
    """Release order: ``0.4.6`` < ``0.4.6.post1`` < ``0.4.6.post5`` < ``0.4.7``."""
    out: list[int] = []
    for p in v.replace("+", ".").split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def release_sources(specs: list[str], tree: Path | None) -> list[tuple[str, str, Path]]:
    """(name, version, folder) of each ``NAME==VERSION@DIR`` spec, then of each
    ``NAME-VERSION/NAME/`` release unpacked under ``tree`` (vllm and sglang only)."""
    specs = list(specs)
    if tree is not None:
        for d in sorted(tree.iterdir()):
            name, _, version = d.name.partition("-")
            if name in ("vllm", "sglang") and version and (d / name).is_dir():
                specs.append(f"{name}=={version}@{d}")
    out: list[tuple[str, str, Path]] = []
    for src in specs:
        spec, _, where = src.partition("@")
        name, _, version = spec.partition("==")
        if not (name and version and where):
            raise SystemExit(f"{src}: expected NAME==VERSION@DIR")
        out.append((name, version, Path(where)))
    return out
