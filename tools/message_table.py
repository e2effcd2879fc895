"""The message table (fixtures/messages/messages.tsv) and the phase map
(fixtures/messages/phase_map.yaml), for tools/gen_catalogue.py and
tests/test_message_coverage.py.

- :func:`load_table` reads the table (one :class:`Message` per row);
- :func:`samples` renders a template to sample lines (holes -> plausible values), as the
  framework would print it (a raise as the traceback's last line ``ExcType: message``, a
  progress bar with its counter);
- :class:`PhaseMap` says which phase a message's source file and function mark (or why none).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "MAP",
    "TABLE",
    "Message",
    "PhaseMap",
    "load_table",
    "raw_line",
    "samples",
    "version_key",
]

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "fixtures" / "messages" / "messages.tsv"
MAP = ROOT / "fixtures" / "messages" / "phase_map.yaml"

HOLE = re.compile(r"\{\{|\}\}|\{\}")
LEVEL = {
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
    "debug": "DEBUG",
}
COLUMNS = ["framework", "level", "file", "line", "function", "holes", "versions", "template"]


@dataclass(frozen=True, slots=True)
class Message:
    framework: str
    level: str
    file: str
    line: int
    function: str
    holes: str
    versions: tuple[str, ...]
    template: str

    @property
    def kind(self) -> str:
        if self.level.startswith("raise:"):
            return "raise"
        return "info" if self.level in ("info", "tqdm") else "warn_error"

    def where(self) -> str:
        return f"{self.file}:{self.line} ({self.function}) [{self.level}]"


def _unescape(cell: str) -> str:
    return re.sub(
        r"\\([\\tnr])", lambda m: {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[m.group(1)], cell
    )


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


@lru_cache(maxsize=4)
def load_table(path: Path = TABLE) -> tuple[Message, ...]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    if header != COLUMNS:
        raise ValueError(f"{path}: unexpected header {header}")
    out = []
    for raw in lines[1:]:
        c = [_unescape(x) for x in raw.split("\t")]
        out.append(Message(c[0], c[1], c[2], int(c[3]), c[4], c[5], tuple(c[6].split(",")), c[7]))
    return tuple(out)


def samples(m: Message) -> Iterator[str]:
    """Sample lines for a template: holes filled by their hints (unknown ones by a word, a
    number, a dict repr), then every hole a number, then every hole a word."""
    values = {
        "i": "8",
        "f": "12.50",
        "s": "value",
        "d": "{'key': 1}",
        "t": "600000ms",
        "?": "value",
    }
    fills = [
        [values[h] for h in m.holes],
        [("8" if h == "?" else values[h]) for h in m.holes],
        [(values["d"] if h == "?" else values[h]) for h in m.holes],
        ["8"] * len(m.holes),
        ["value"] * len(m.holes),
    ]
    for fill in fills:
        it = iter(fill)

        def sub(mt: re.Match[str], it: Iterator[str] = it) -> str:
            tok = mt.group(0)
            if tok == "{{":
                return "{"
            if tok == "}}":
                return "}"
            return next(it, "value")

        text = HOLE.sub(sub, m.template)
        if m.level.startswith("raise:"):
            yield f"{m.level.split(':', 1)[1]}: {text}"
        elif m.level == "tqdm":  # vLLM's bar_format, then tqdm's default
            yield f"{text}:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]"
            yield f"{text}:  50%|#####     | 1/2 [00:01<00:01,  1.00it/s]"
        else:
            yield text


def raw_line(m: Message, text: str) -> str:
    """The sample as a whole vLLM-style log line (level, time, logger location, message)."""
    lvl = LEVEL.get(m.level, "ERROR")
    return f"{lvl} 01-01 00:00:00 [{m.file.rsplit('/', 1)[-1]}:{m.line}] {text}"


NONE = "none"


@dataclass(frozen=True, slots=True)
class _FileRule:
    default: str
    functions: tuple[tuple[re.Pattern[str], str], ...]
    templates: tuple[tuple[re.Pattern[str], str], ...]


class PhaseMap:
    """fixtures/messages/phase_map.yaml: the phase each source function's messages mark."""

    def __init__(self, data: dict[str, Any], phases: tuple[str, ...]) -> None:
        self._files: dict[str, dict[str, _FileRule]] = {}
        self._every: dict[str, tuple[tuple[re.Pattern[str], str], ...]] = {}
        for fw in ("vllm", "sglang"):
            rules: dict[str, _FileRule] = {}
            every: list[tuple[re.Pattern[str], str]] = []
            for key, spec in (data.get(fw) or {}).items():
                if key == "*":  # template rules for every file of the framework, first
                    every = [
                        (re.compile(k), self._phase(v, phases, f"{fw} * {k}"))
                        for k, v in (spec.get("templates") or {}).items()
                    ]
                    continue
                if isinstance(spec, str):
                    spec = {"default": spec}
                rule = _FileRule(
                    default=self._phase(spec.get("default"), phases, f"{fw} {key}"),
                    functions=tuple(
                        (re.compile(k), self._phase(v, phases, f"{fw} {key} {k}"))
                        for k, v in (spec.get("functions") or {}).items()
                    ),
                    templates=tuple(
                        (re.compile(k), self._phase(v, phases, f"{fw} {key} {k}"))
                        for k, v in (spec.get("templates") or {}).items()
                    ),
                )
                rules[key] = rule
            self._files[fw] = rules
            self._every[fw] = tuple(every)

    @staticmethod
    def _phase(value: Any, phases: tuple[str, ...], where: str) -> str:
        if not isinstance(value, str):
            raise ValueError(f"phase map {where}: no phase")
        if value in phases:
            return value
        if value.startswith(NONE + ":") and value[len(NONE) + 1 :].strip():
            return value
        raise ValueError(f"phase map {where}: {value!r} is no phase and no 'none: <why>'")

    def keys(self, framework: str) -> list[str]:
        return list(self._files.get(framework, {}))

    def rule_for(self, framework: str, path: str) -> tuple[str, _FileRule] | None:
        best: tuple[str, _FileRule] | None = None
        for key, rule in self._files.get(framework, {}).items():
            hit = path == key or (key.endswith("/") and path.startswith(key))
            if hit and (best is None or len(key) > len(best[0])):
                best = (key, rule)
        return best

    def phase_of(self, m: Message) -> str | None:
        """The phase id, 'none: why', or None when the map does not cover the file."""
        found = self.rule_for(m.framework, m.file)
        if found is None:
            return None
        rule = found[1]
        for rx, phase in (*self._every.get(m.framework, ()), *rule.templates):
            if rx.search(m.template):
                return phase
        for rx, phase in rule.functions:
            if rx.fullmatch(m.function):
                return phase
        return rule.default


@lru_cache(maxsize=2)
def load_map(path: Path = MAP) -> PhaseMap:
    import yaml

    from diag.model import PHASES

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")
    return PhaseMap(data, tuple(PHASES))


def write_or_check(out: Path, text: str, tool: str, what: str) -> int:
    """A generator's last step: with ``--check`` (on the command line), 1 when ``out`` is
    not ``text``; otherwise write it and say how many ``what`` it holds (its lines)."""
    import argparse

    ap = argparse.ArgumentParser(description=f"rewrite (or --check) {out.name}")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    if ap.parse_args().check:
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != text:
            print(f"{out}: not up to date (run tools/{tool})", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    print(f"{out}: {what}", file=sys.stderr)
    return 0
