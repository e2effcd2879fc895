"""The JSON schema every rule file must satisfy.

A rule file holds one rule (a mapping) or a small family (``rules: [...]``). The schema
rejects unknown keys, a missing remedy or examples, and a cascade without ``cascade_of``
and ``caveat``; :mod:`diag.rules.loader` applies it and adds the checks a schema cannot
express (regexes compile, checks exist, ids are unique, needles cover the examples).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FILE_SCHEMA", "RULE_SCHEMA"]

_STR_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_NONEMPTY = {"type": "string", "minLength": 1}

_MATCH: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["patterns"],
    "properties": {
        # regexes (the `regex` module's syntax); a line matches when any one does
        "patterns": {"type": "array", "items": _NONEMPTY, "minItems": 1},
        # a matching line is dropped when any of these also matches it
        "exclude": _STR_LIST,
        "ignore_case": {"type": "boolean"},
        # limits: only records at these levels / in these phases / of these frameworks
        "levels": _STR_LIST,
        "phases": _STR_LIST,
        # ... and not in these phases (a line before any phase event is in none)
        "not_phases": _STR_LIST,
        "frameworks": _STR_LIST,
        # source file of the logger that printed the line (basename: "registry.py")
        "loggers": _STR_LIST,
    },
}

_EXAMPLES: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "match": _STR_LIST,
        "no_match": _STR_LIST,
        "todo_match": _STR_LIST,
        "todo_no_match": _STR_LIST,
    },
}

RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "id",
        "title",
        "severity",
        "role",
        "frameworks",
        "summary",
        "why",
        "remedy",
        "references",
    ],
    "properties": {
        "id": {"type": "string", "pattern": r"^[a-z0-9_]+(\.[a-z0-9_]+)+$"},
        # the finding id it reports when not its own id (two rules, one finding id)
        "finding": {"type": "string", "pattern": r"^[a-z0-9_]+(\.[a-z0-9_]+)+$"},
        "title": _NONEMPTY,
        "severity": {"enum": ["error", "warning", "info"]},
        "role": {"enum": ["root", "cascade"]},
        "cascade_of": {"type": "array", "items": _NONEMPTY, "minItems": 1},
        "caveat": _NONEMPTY,
        # a root rule whose finding is a cascade when one of these fired earlier in the log
        # (a collective timeout after a rank already died)
        "cascade_after": {"type": "array", "items": _NONEMPTY, "minItems": 1},
        "frameworks": {
            "type": "array",
            "items": {"enum": ["sglang", "vllm", "any"]},
            "minItems": 1,
        },
        "summary": _NONEMPTY,
        "why": _NONEMPTY,
        "remedy": _NONEMPTY,
        "references": {"type": "array", "items": _NONEMPTY},
        # a template, or several: the first whose {fields} the match fills is used
        "message": {"oneOf": [_NONEMPTY, {"type": "array", "items": _NONEMPTY, "minItems": 1}]},
        "needles": {"type": "array", "items": _NONEMPTY},
        "match": _MATCH,
        "check": _NONEMPTY,
        "params": {"type": "object"},
        "examples": _EXAMPLES,
    },
    "allOf": [
        # a rule is a pattern rule (match + needles + examples) or a check rule (check)
        {
            "anyOf": [
                {"required": ["check"]},
                {"required": ["match", "needles", "examples"]},
            ]
        },
        {
            "if": {"properties": {"role": {"const": "cascade"}}},
            "then": {"required": ["cascade_of", "caveat"]},
        },
    ],
}

FILE_SCHEMA: dict[str, Any] = {
    "oneOf": [
        RULE_SCHEMA,
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["rules"],
            "properties": {"rules": {"type": "array", "items": RULE_SCHEMA, "minItems": 1}},
        },
    ]
}
