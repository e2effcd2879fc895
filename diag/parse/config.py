"""Server configuration from the args lines, read with ``ast`` (never eval, never import).

SGLang: ``server_args=ServerArgs(k=v, ...)`` (older) and ``server_args={'k': v, ...}``
(0.5.x). vLLM: ``non-default args: {...}``, ``args: Namespace(...)`` and the engine
config dump ``Initializing a V1 LLM engine (v0.32.0) with config: k=v, ...``.
Keys are normalised to tp, pp, dp, ep, nnodes, node_rank, quantization, speculative,
port, model (the raw keys are kept too). A parallel size past any real cluster (or a
tp x pp x dp past :data:`diag.limits.MAX_PLAUSIBLE_WORLD`) is left out of the normalised
keys and listed under ``implausible``: nothing downstream enumerates it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from diag.limits import MAX_PLAUSIBLE_WORLD, ascii_int

__all__ = ["detect_config_line", "normalise", "parse_config_message"]

_NAMES: dict[str, tuple[str, ...]] = {
    "tp": ("tp_size", "tensor_parallel_size"),
    "pp": ("pp_size", "pipeline_parallel_size"),
    "dp": ("dp_size", "data_parallel_size"),
    "ep": ("ep_size", "expert_parallel_size"),
    "nnodes": ("nnodes", "num_nodes"),
    "node_rank": ("node_rank",),
    "quantization": ("quantization",),
    "port": ("port",),
    "model": ("model_path", "model"),
    "dist_init_addr": ("dist_init_addr",),
    "attention_backend": ("attention_backend",),
    "dtype": ("dtype",),
    "kv_cache_dtype": ("kv_cache_dtype",),
    # vLLM V0's engine config dump (0.1-0.6) names the resolved length max_seq_len
    "max_model_len": ("max_model_len", "context_length", "max_seq_len"),
}
_SPEC_ALGO = ("speculative_algorithm", "speculative_method")
_SPEC_STEPS = ("speculative_num_steps", "num_speculative_tokens", "speculative_num_draft_tokens")

_MARKERS = re.compile(
    r"server_args=(?:ServerArgs\(|\{)|non-default args: \{|args: Namespace\(|"
    r"LLM engine (?:\(v[^)]*\) )?with config: "
)


def detect_config_line(message: str) -> bool:
    # (speed) every marker holds "args" but vLLM V0's "LLM engine ... with config: "
    if "args" not in message and "LLM engine " not in message:
        return False
    return _MARKERS.search(message) is not None


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        try:
            return ast.unparse(node)
        except Exception:  # noqa: BLE001 - unparse of odd nodes; keep going
            return None


def _call_kwargs(text: str) -> dict[str, object] | None:
    """``Name(k=v, ...)`` -> {k: v}; values that are not literals stay as source text."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(tree.body, ast.Call):
        return None
    return {kw.arg: _literal(kw.value) for kw in tree.body.keywords if kw.arg}


def _balanced(text: str, start: int) -> str | None:
    """The bracketed expression starting at text[start] (quotes respected)."""
    i = start
    while i < len(text) and text[i] not in "([{":  # `ServerArgs(`: skip the callee name
        i += 1
    if i >= len(text):
        return None
    closing = {"(": ")", "{": "}", "[": "]"}[text[i]]
    depth = 0
    quote: str | None = None
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1] if c == closing else None
        i += 1
    return None


_KEY = re.compile(r"\s*([A-Za-z_][\w.]*)=(.*)$", re.S)


def _top_level_parts(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes."""
    parts: list[str] = []
    depth = 0
    quote: str | None = None
    start = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _engine_config(text: str) -> dict[str, object]:
    """``k=v, k2=v2`` where values may hold brackets (``SpeculativeConfig(k=v, ...)``),
    JSON and quoted commas; only top-level keys count."""
    out: dict[str, object] = {}
    for part in _top_level_parts(text):
        m = _KEY.match(part)
        if not m:
            continue
        key, raw = m.group(1), m.group(2).strip()
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            out[key] = raw
    return out


def parse_config_message(message: str) -> tuple[dict[str, object], str | None]:
    """Raw key/values from one args line, and the vLLM version when the line names it."""
    version: str | None = None
    m = re.search(r"server_args=(ServerArgs\(|\{)", message)
    if m:
        start = m.start(1)
        expr = _balanced(message, start)
        if expr is None:
            return {}, None
        if expr.startswith("{"):
            try:
                val = ast.literal_eval(expr)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return {}, None
            return (dict(val) if isinstance(val, dict) else {}), None
        return _call_kwargs(expr) or {}, None
    m = re.search(r"non-default args: (\{)", message)
    if m:
        expr = _balanced(message, m.start(1))
        if expr:
            try:
                val = ast.literal_eval(expr)
                if isinstance(val, dict):
                    return {str(k): v for k, v in val.items()}, None
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return {}, None
        return {}, None
    m = re.search(r"args: (Namespace\()", message)
    if m:
        expr = _balanced(message, m.start(1))
        return (_call_kwargs(expr) or {}) if expr else {}, None
    m = re.search(r"LLM engine (?:\(v(?P<v>[^)]*)\) )?with config: ", message)
    if m:
        version = m.group("v")
        return _engine_config(message[m.end() :]), version
    return {}, None


def _first(raw: Mapping[str, object], names: tuple[str, ...]) -> object:
    for n in names:
        if n in raw and raw[n] is not None:
            return raw[n]
    return None


def _int(v: object) -> int | None:
    """An int, or ASCII digits of a sane length (never ``int()`` on ``²`` or 5000 digits)."""
    return ascii_int(v)


_PARALLEL = ("tp", "pp", "dp", "ep", "nnodes")


def normalise(raw: Mapping[str, object]) -> dict[str, Any]:
    """Normalised keys (tp, pp, dp, ep, nnodes, node_rank, quantization, speculative, port,
    model, ...) followed by every raw key under ``raw``."""
    out: dict[str, Any] = {}
    for key, names in _NAMES.items():
        v = _first(raw, names)
        if v is None:
            continue
        if key in ("tp", "pp", "dp", "ep", "nnodes", "node_rank", "port", "max_model_len"):
            iv = _int(v)
            if iv is not None:
                out[key] = iv
        else:
            out[key] = v
    # A layout past any real cluster (tp_size=100000000) is reported, never enumerated.
    implausible = {
        k: out[k] for k in _PARALLEL if k in out and not 0 <= out[k] <= MAX_PLAUSIBLE_WORLD
    }
    world = 1
    for k in ("tp", "pp", "dp"):
        if k in out and k not in implausible:
            world *= out[k]
    if world > MAX_PLAUSIBLE_WORLD:
        implausible.update({k: out[k] for k in ("tp", "pp", "dp") if k in out})
    if implausible:
        for k in implausible:
            out.pop(k, None)
        out["implausible"] = implausible
    spec: dict[str, object] = {}
    algo = _first(raw, _SPEC_ALGO)
    steps = _first(raw, _SPEC_STEPS)
    sc = raw.get("speculative_config")
    if isinstance(sc, dict):
        algo = algo or sc.get("method") or sc.get("model")
        steps = steps or sc.get("num_speculative_tokens")
    elif isinstance(sc, str) and sc not in ("None", ""):
        mm = re.search(r"method=['\"]?(\w+)", sc)
        if mm:
            algo = algo or mm.group(1)
        mm = re.search(r"num_speculative_tokens['\"]?[=:]\s*([0-9]{1,9})\b", sc)
        if mm:
            steps = steps or int(mm.group(1))
    if algo not in (None, "None", ""):
        spec["algorithm"] = algo
        if _int(steps) is not None:
            spec["num_steps"] = _int(steps)
    if spec:
        out["speculative"] = spec
    return out
