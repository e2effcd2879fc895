"""Load rule files: YAML -> schema check -> compiled :class:`Rule` objects.

Built-in rules ship inside the wheel as ``diag/rule_library`` (hatch force-include of the
repository's top-level ``rules/`` folder); an editable install falls back to that folder.
Users add folders with ``--rules DIR``. Every problem is a :class:`RuleError` that names
the file.

A folder's checked rule data (YAML parsed, schema checked, regexes compiled once, each
pattern's gate literals) is cached by the content hash of its files (:mod:`diag.cache`):
a later run with the same files reads no YAML, imports no schema validator, and compiles
each regex the first time a line gets past its gate.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import regex

from diag import cache
from diag.errors import RuleError
from diag.model import PHASES, Severity
from diag.parse.literals import LITERALS_VERSION
from diag.rules.schema import FILE_SCHEMA
from diag.rules.yamlsafe import check_expansion

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # pragma: no cover
    from importlib.abc import Traversable

__all__ = [
    "REGEX_TIMEOUT_S",
    "Examples",
    "MatchSpec",
    "Rule",
    "builtin_rules",
    "builtin_rules_dir",
    "load_dir",
    "load_rules",
]

# Per search; a pattern that takes longer on one line is abandoned for that line.
REGEX_TIMEOUT_S = 0.05

_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "FATAL"})


class LazyRegex:
    """A `regex` pattern compiled on first use (the source was checked when cached)."""

    __slots__ = ("_rx", "flags", "pattern")

    def __init__(self, pattern: str, flags: int) -> None:
        self.pattern = pattern
        self.flags = flags
        self._rx: Any = None

    def search(self, text: str, *args: Any, **kw: Any) -> Any:
        if self._rx is None:
            self._rx = regex.compile(self.pattern, self.flags)
        return self._rx.search(text, *args, **kw)


@dataclass(frozen=True, slots=True)
class MatchSpec:
    patterns: tuple[Any, ...]  # compiled `regex` patterns
    exclude: tuple[Any, ...] = ()
    levels: frozenset[str] = frozenset()
    phases: frozenset[str] = frozenset()
    not_phases: frozenset[str] = frozenset()
    frameworks: frozenset[str] = frozenset()
    loggers: frozenset[str] = frozenset()
    sources: tuple[str, ...] = ()  # the pattern texts, for `diag rules show`
    # per pattern: lowercase literals one of which every match contains (None: unknown);
    # a pattern whose literals are all absent from a line is not run on it
    gates: tuple[tuple[str, ...] | None, ...] = ()

    def search(self, line: str, low: str | None = None) -> Any | None:
        """The first pattern's match on one line (None when excluded or no match);
        ``low``: ``line.lower()``, when the caller has it.

        Raises TimeoutError when a pattern runs past REGEX_TIMEOUT_S."""
        if low is None:
            low = line.lower()
        gates = self.gates
        for i, pattern in enumerate(self.patterns):
            gate = gates[i] if i < len(gates) else None
            if gate is not None:
                # (speed: most gates are one literal, tested without a generator)
                if len(gate) == 1:
                    if gate[0] not in low:
                        continue
                elif not any(g in low for g in gate):
                    continue
            m = pattern.search(line, timeout=REGEX_TIMEOUT_S)
            if m is not None:
                for ex in self.exclude:
                    if ex.search(line, timeout=REGEX_TIMEOUT_S) is not None:
                        return None
                return m
        return None


def _gate(expr: str, ignore_case: bool) -> tuple[str, ...] | None:
    """Literals one of which every match of ``expr`` contains, lowercased; None when the
    pattern has none (or cannot be read: it then always runs)."""
    if not ignore_case:
        return None
    try:
        from diag.parse.literals import required_literals

        # named groups do not change the literals; the `re` parser rejects duplicates
        found = required_literals(regex.sub(r"\(\?P<\w+>", "(?:", expr))
    except Exception:  # a `regex`-only construct the `re` parser does not know
        return None
    if not found:
        return None
    return tuple(sorted({lit.lower() for lit in found}))


@dataclass(frozen=True, slots=True)
class Examples:
    match: tuple[str, ...] = ()
    no_match: tuple[str, ...] = ()
    todo_match: tuple[str, ...] = ()
    todo_no_match: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    finding_id: str
    title: str
    severity: Severity
    role: str
    frameworks: tuple[str, ...]
    summary: str
    why: str
    remedy: str
    references: tuple[str, ...]
    path: str
    caveat: str = ""
    cascade_of: tuple[str, ...] = ()
    cascade_after: tuple[str, ...] = ()
    message: tuple[str, ...] = ()
    needles: tuple[str, ...] = ()
    match: MatchSpec | None = None
    check: str | None = None
    params: Mapping[str, object] = field(default_factory=dict)
    examples: Examples = field(default_factory=Examples)
    raw: Mapping[str, object] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "check" if self.check else "pattern"

    def applies_to(self, framework: str) -> bool:
        if "any" in self.frameworks or framework not in ("sglang", "vllm"):
            return True
        return framework in self.frameworks

    def to_json(self) -> dict[str, object]:
        """The rule as `diag rules list --json` prints it."""
        return {
            "id": self.id,
            "finding": self.finding_id,
            "title": self.title,
            "severity": self.severity,
            "role": self.role,
            "cascade_of": list(self.cascade_of),
            "cascade_after": list(self.cascade_after),
            "caveat": self.caveat,
            "frameworks": list(self.frameworks),
            "kind": self.kind,
            "check": self.check,
            "patterns": list(self.match.sources) if self.match else [],
            "needles": list(self.needles),
            "summary": self.summary,
            "why": self.why,
            "remedy": self.remedy,
            "references": list(self.references),
            "path": self.path,
        }


def _compile(expr: str, *, ignore_case: bool, where: str, lazy: bool = False) -> Any:
    flags = (regex.IGNORECASE if ignore_case else 0) | regex.VERSION1
    if ignore_case:
        # simple case folding: `regex`'s version 1 folds case in full under IGNORECASE
        # ("ß" matches "SS"), which no log message needs and which makes a class repeat
        # such as `[\w./ -]{3,60}?` 50-100x slower (30 ms on one 680-character line:
        # near REGEX_TIMEOUT_S, so whether the line matched depended on the machine's load)
        expr = "(?-f)" + expr
    if lazy:
        return LazyRegex(expr, flags)
    try:
        return regex.compile(expr, flags)
    except regex.error as exc:
        raise RuleError(f"{where}: bad regex {expr!r}: {exc}") from exc


def _match_spec(
    data: Mapping[str, Any], where: str, lazy: bool = False,
    gates: Sequence[Sequence[str] | None] | None = None,
) -> MatchSpec:
    ignore_case = bool(data.get("ignore_case", True))
    levels = frozenset(str(v).upper() for v in data.get("levels", ()))
    if levels - _LEVELS:
        raise RuleError(f"{where}: unknown level(s) {sorted(levels - _LEVELS)}")
    phases = frozenset(data.get("phases", ()))
    not_phases = frozenset(data.get("not_phases", ()))
    if (phases | not_phases) - set(PHASES):
        unknown = sorted((phases | not_phases) - set(PHASES))
        raise RuleError(f"{where}: unknown phase(s) {unknown}")
    if gates is None:
        gates = [_gate(p, ignore_case) for p in data["patterns"]]
    return MatchSpec(
        patterns=tuple(
            _compile(p, ignore_case=ignore_case, where=where, lazy=lazy) for p in data["patterns"]
        ),
        exclude=tuple(
            _compile(p, ignore_case=ignore_case, where=where, lazy=lazy)
            for p in data.get("exclude", ())
        ),
        gates=tuple(None if g is None else tuple(g) for g in gates),
        levels=levels,
        phases=phases,
        not_phases=not_phases,
        frameworks=frozenset(data.get("frameworks", ())),
        loggers=frozenset(data.get("loggers", ())),
        sources=tuple(data["patterns"]),
    )


def _templates(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return ()


def _rule(
    data: Mapping[str, Any], path: str, known_checks: Iterable[str], *, lazy: bool = False
) -> Rule:
    rid = data["id"]
    where = f"{path} (rule {rid})"
    gates = data.get("__gates__")
    match = _match_spec(data["match"], where, lazy, gates) if "match" in data else None
    needles = tuple(str(n) for n in data.get("needles", ()))
    if match is not None and not needles:
        raise RuleError(f"{where}: a rule with `match` needs `needles`")
    if any(n != n.lower() for n in needles):
        raise RuleError(f"{where}: needles must be lowercase literals")
    check = data.get("check")
    if check is not None and check not in set(known_checks):
        raise RuleError(f"{where}: unknown check {check!r}")
    ex = data.get("examples", {})
    return Rule(
        id=rid,
        finding_id=data.get("finding", rid),
        title=data["title"],
        severity=data["severity"],
        role=data["role"],
        frameworks=tuple(data["frameworks"]),
        summary=data["summary"].strip(),
        why=data["why"].strip(),
        remedy=data["remedy"].strip(),
        references=tuple(data["references"]),
        path=path,
        caveat=data.get("caveat", "").strip(),
        cascade_of=tuple(data.get("cascade_of", ())),
        cascade_after=tuple(data.get("cascade_after", ())),
        message=_templates(data.get("message")),
        needles=needles,
        match=match,
        check=check,
        params=dict(data.get("params", {})),
        examples=Examples(
            match=tuple(ex.get("match", ())),
            no_match=tuple(ex.get("no_match", ())),
            todo_match=tuple(ex.get("todo_match", ())),
            todo_no_match=tuple(ex.get("todo_no_match", ())),
        ),
        raw={k: v for k, v in data.items() if k != "__gates__"},
    )


def _parse_file(text: str, path: str, known_checks: Iterable[str]) -> list[Rule]:
    return [_rule(item, path, known_checks) for item in _checked_items(text, path)]


def _checked_items(text: str, path: str) -> list[dict[str, Any]]:
    """The rule mappings of one file, parsed and checked against the schema."""
    import jsonschema
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when built with it
    check_expansion(text, path)  # (hardening: alias bombs refused, naming the file)
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise RuleError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from exc
    errors = sorted(_file_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        # oneOf hides the useful message; re-check against the branch the file meant
        from diag.rules.schema import RULE_SCHEMA

        if isinstance(data, dict) and "rules" in data and isinstance(data["rules"], list):
            for i, item in enumerate(data["rules"]):
                sub = list(jsonschema.Draft202012Validator(RULE_SCHEMA).iter_errors(item))
                if sub:
                    raise RuleError(f"{path}: rules[{i}]: {_describe(sub[0])}")
            raise RuleError(f"{path}: {_describe(errors[0])}")
        sub = list(jsonschema.Draft202012Validator(RULE_SCHEMA).iter_errors(data))
        raise RuleError(f"{path}: {_describe(sub[0] if sub else errors[0])}")
    items: list[dict[str, Any]] = data.get("rules", [data])
    return items


@functools.cache
def _file_validator() -> Any:  # a jsonschema validator, built once per process
    import jsonschema

    return jsonschema.Draft202012Validator(FILE_SCHEMA)


def _describe(err: Any) -> str:  # a jsonschema.ValidationError
    where = ".".join(str(p) for p in err.absolute_path)
    msg = err.message
    if len(msg) > 200:
        msg = msg[:200] + "..."
    return f"{where}: {msg}" if where else msg


def _rule_files(folder: Traversable) -> list[Traversable]:
    found: list[Traversable] = []
    for entry in folder.iterdir():
        if entry.is_dir():
            found.extend(_rule_files(entry))
        elif entry.name.endswith((".yaml", ".yml")):
            found.append(entry)
    return sorted(found, key=lambda e: e.name)


def load_dir(folder: Path | Traversable, *, label: str | None = None) -> list[Rule]:
    """Every rule in a folder (recursively), in file-name order."""
    from diag.rules.checks import CHECKS
    from diag.rules.snapshot_checks import SNAPSHOT_CHECKS

    if isinstance(folder, Path) and not folder.is_dir():
        raise RuleError(f"{folder}: not a folder of rule files")
    known = [*CHECKS, *SNAPSHOT_CHECKS]
    files: list[tuple[str, str]] = []
    for entry in _rule_files(folder):
        path = f"{label}/{entry.name}" if label else str(entry)
        try:
            files.append((path, entry.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise RuleError(f"{path}: cannot read: {exc}") from exc
    key = cache.content_key(
        [x for pair in files for x in pair], regex.__version__, f"literals-{LITERALS_VERSION}",
        *sorted(known)
    )
    name = "rules-" + cache.content_key([str(folder)])[:16]
    hit = cache.load(name, key)
    if isinstance(hit, list):
        try:
            return [_rule(item, path, known, lazy=True) for path, item in hit]
        except (KeyError, TypeError, ValueError, RuleError):
            pass  # an entry of another shape: parse the files again
    rules: list[Rule] = []
    checked: list[tuple[str, dict[str, Any]]] = []
    for path, text in files:
        for item in _checked_items(text, path):
            rule = _rule(item, path, known)  # compiles every regex: a bad one is an error here
            rules.append(rule)
            gates = list(rule.match.gates) if rule.match is not None else None
            checked.append((path, {**item, "__gates__": gates}))
    cache.store(name, key, checked)
    return rules


def builtin_rules_dir() -> Traversable:
    """The built-in rule library: inside the installed package, else the repo's rules/."""
    packaged = resources.files("diag") / "rule_library"
    if packaged.is_dir():
        return packaged
    repo = Path(__file__).resolve().parents[2] / "rules"
    if repo.is_dir():
        return repo
    raise RuleError(
        "the built-in rule library is missing (no diag/rule_library in the package)",
        help_text="Reinstall diag (`pip install --force-reinstall diag`).",
    )


@functools.lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    rules = load_dir(builtin_rules_dir(), label="rules")
    _check_unique(rules)
    return tuple(rules)


def load_rules(extra_dirs: Sequence[Path] = ()) -> tuple[Rule, ...]:
    """Built-in rules plus those of ``extra_dirs``; a user rule with a built-in id
    replaces it."""
    rules: dict[str, Rule] = {r.id: r for r in builtin_rules()}
    for folder in extra_dirs:
        found = load_dir(Path(folder))
        _check_unique(found)
        for rule in found:
            rules[rule.id] = rule
    return tuple(rules.values())


def _check_unique(rules: Sequence[Rule]) -> None:
    seen: dict[str, str] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleError(f"{rule.path}: duplicate rule id {rule.id!r} (also in {seen[rule.id]})")
        seen[rule.id] = rule.path
