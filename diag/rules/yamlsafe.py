"""A YAML rule file is input too: one that expands past a bound through aliases
("billion laughs": nine levels of ten aliases each make 10^9 nodes from a 1 KB file) is
refused, naming the file, before anything walks the expanded document.

The check composes the node graph (aliases stay shared nodes, so this is linear in the
text) and counts the nodes the document would have once every alias is expanded,
memoised per node and stopped at the bound. A file with no alias is not composed at all.
"""

from __future__ import annotations

import re
from typing import Any

from diag.errors import RuleError
from diag.limits import MAX_YAML_NODES

__all__ = ["check_expansion"]


_LONG_DIGITS = re.compile(r"[0-9]{4300}")


def check_expansion(text: str, path: str, *, max_nodes: int = MAX_YAML_NODES) -> None:
    """Raise RuleError when ``text`` expands to more than ``max_nodes`` YAML nodes, or
    holds a number the YAML loader would hand to ``int()`` past Python's digit limit."""
    if len(text) >= 4300 and _LONG_DIGITS.search(text) is not None:
        raise RuleError(f"{path}: refused, it holds a number of more than 4300 digits")
    if "*" not in text or "&" not in text:  # no alias, no anchor: the size is the text's
        return
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError:
        return  # the loader reports the syntax error itself
    if root is None:
        return
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are being sized (a cycle comes back)

    def size(node: Any) -> int:
        # iterative post-order walk: deep nesting must not recurse either
        stack: list[tuple[Any, bool]] = [(node, False)]
        while stack:
            cur, done = stack.pop()
            key = id(cur)
            if key in sizes:
                continue
            children = _children(cur)
            if not done:
                if key in open_:
                    raise RuleError(
                        f"{path}: refused, a YAML alias refers to a node that holds it "
                        "(a recursive document)",
                        help_text="Write the rule without YAML anchors and aliases.",
                    )
                open_.add(key)
                stack.append((cur, True))
                stack.extend((c, False) for c in children if id(c) not in sizes)
                continue
            open_.discard(key)
            total = 1
            for c in children:
                total += sizes.get(id(c), 1)
                if total > max_nodes:
                    break
            sizes[key] = min(total, max_nodes + 1)
        return sizes[id(node)]

    if size(root) > max_nodes:
        raise RuleError(
            f"{path}: refused, its YAML aliases expand to more than {max_nodes} nodes "
            "(a billion-laughs file?)",
            help_text="Write the rule without YAML anchors and aliases (&name / *name).",
        )


def _children(node: Any) -> list[Any]:
    value = getattr(node, "value", None)
    if not isinstance(value, list):
        return []
    out: list[Any] = []
    for item in value:
        if isinstance(item, tuple):  # a mapping's (key, value) pair
            out.extend(item)
        else:
            out.append(item)
    return out
