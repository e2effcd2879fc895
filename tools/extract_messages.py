#!/usr/bin/env python3
"""Extract the log and exception messages of sglang / vllm / torch.distributed releases.

vLLM's out-of-tree platform plugins (vllm-ascend, tpu-inference, vllm-spyre, vllm-rbln) are
read too: their lines are vLLM-format log lines, so their rows have framework ``vllm``, the
file under the plugin's own package (``vllm_ascend/worker/model_runner_v1.py``) and versions
labelled with the plugin's distribution name (``vllm-ascend 0.9.1``; PLUGINS).

Reads wheels (.whl), sdists (.tar.gz, .zip) or unpacked folders WITHOUT importing or running
any of their code: every selected .py file is parsed with the standard library's `ast`, and
each logging call (``logger.info/warning/error/debug/exception/critical``, ``*_once``,
``logger.log(level, ...)``, ``print_warning_once``, ``rank0_log``, ``log_info_on_rank0``...),
each ``raise X("...")``, each ``assert cond, "..."`` and each progress bar's
``tqdm(..., desc="...")`` (level ``tqdm``) gives one message template:

- the literal text, with every f-string hole, %-format argument and ``str.format`` field
  turned into ``{}``; literal braces are doubled (``{{`` / ``}}``), as in ``str.format``;
- a hint per hole (``holes``: ``i`` int, ``f`` float, ``s`` text, ``d`` dict, ``?`` unknown), read
  from the format spec (``%d``, ``:.2f``) or the expression (``len(x)``, ``a - b``, names);
- the level (``info``, ``warning``, ... or ``raise:<ExcType>``), the file relative to the
  package root (``vllm/v1/worker/gpu_worker.py``), the line and function of the latest
  release that has it, and every release it appears in.

Usage:
    python3 tools/extract_messages.py -o fixtures/messages/messages.tsv \\
        /work/cache/wheels/*.whl torch==2.13.0@.venv/lib/python3.11/site-packages/torch

A PATH is a wheel or sdist (name and version read from the file name) or NAME==VERSION@PATH
(a folder, or an archive whose name says nothing). The output is a TSV sorted by framework,
file, line; fields are backslash-escaped (``\\t``, ``\\n``, ``\\\\``).
"""

from __future__ import annotations

import argparse
import ast
import io
import itertools
import re
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = ("framework", "level", "file", "line", "function", "holes", "versions", "template")

LOG_METHODS = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "exception": "exception",
    "critical": "critical",
    "fatal": "critical",
    "debug_once": "debug",
    "info_once": "info",
    "warning_once": "warning",
    "error_once": "error",
}
# helper functions that log their (first, or `arg`-th) argument
HELPERS = {
    "print_warning_once": ("warning", 0),
    "print_info_once": ("info", 0),
    "warn_once": ("warning", 0),
    "rank0_log": ("info", 0),
    "rank0_print": ("info", 0),
    "log_info_on_rank0": ("info", 1),
    "log_warning_on_rank0": ("warning", 1),
}
DEFAULT_LOGGERS = {"logger", "_logger", "LOGGER", "logging", "log"}
LEVEL_NAMES = {
    "DEBUG": "debug",
    "INFO": "info",
    "WARNING": "warning",
    "WARN": "warning",
    "ERROR": "error",
    "CRITICAL": "critical",
    "FATAL": "critical",
}

# the startup path, inclusively (package-relative prefixes); '' + top-level .py files too
SELECT = {
    "vllm": (
        "vllm/worker/",
        "vllm/v1/",
        "vllm/executor/",
        "vllm/engine/",
        "vllm/entrypoints/",
        "vllm/model_executor/",
        "vllm/distributed/",
        "vllm/platforms/",
        "vllm/attention/",
        "vllm/compilation/",
        "vllm/config",
        "vllm/transformers_utils/",
        "vllm/spec_decode/",
        "vllm/device_allocator/",
        "vllm/usage/",
        "vllm/utils/",
        "vllm/tokenizers/",
    ),
    "sglang": (
        "sglang/srt/",
        # SGLang Diffusion (`sglang generate` / `sglang serve` of an image or video model,
        # 0.5.5+): its runtime, the pipeline / model / sampling configs a run builds, its
        # registry and envs, and the web UI `serve --webui` starts; not its ComfyUI plugin
        # and realtime UI (other processes' code), benchmarks/, tools/ (offline checkpoint
        # scripts), csrc/ (a kernel package's setup and tests), third_party/ (a vendored
        # pynvml) or its test/ tree (SKIP_PARTS)
        "sglang/multimodal_gen/runtime/",
        "sglang/multimodal_gen/configs/",
        "sglang/multimodal_gen/apps/webui/",
        "sglang/multimodal_gen/registry.py",
        "sglang/multimodal_gen/envs.py",
        "sglang/multimodal_gen/utils.py",
        "sglang/multimodal_gen/__init__.py",
    ),
    "torch": ("torch/distributed/",),
}
# vLLM's platform plugins: package -> (framework column, release label in the versions column:
# "<label> <version>", e.g. "vllm-ascend 0.9.1"). Their whole package is read (not tests/,
# examples/, benchmarks/), and only the package folder of an sdist.
PLUGINS = {
    "vllm_ascend": ("vllm", "vllm-ascend"),
    "tpu_inference": ("vllm", "tpu-inference"),
    "vllm_spyre": ("vllm", "vllm-spyre"),
    "vllm_rbln": ("vllm", "vllm-rbln"),
    "vllm_omni": ("vllm", "vllm-omni"),
    "vllm_kunlun": ("vllm", "vllm-kunlun"),
    # libraries and serving stacks around the engines, with log formats of their own that
    # name the logger's file or module (LMCache '... (cache_engine.py:76:lmcache.v1...)',
    # NIXL '... NIXL INFO _api.py:281 ...', Dynamo's tracing 'INFO dynamo.vllm.main: ...'):
    # column vllm, the non-voting path (an entry from outside vllm/'s engine folders is
    # framework any); kt-kernel's lines print through SGLang's root logging format
    "lmcache": ("vllm", "lmcache"),
    "nixl_cu12": ("vllm", "nixl-cu12"),
    "dynamo": ("vllm", "ai-dynamo"),
    "kt_kernel": ("sglang", "kt-kernel"),
}
SKIP_PARTS = ("/tests/", "/test/", "/benchmarks/", "/examples/")

_PCT = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?"
    r"(?P<conv>[diouxXeEfFgGcrsa%])"
)
_FMT_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
_NUMERIC_NAME = re.compile(
    r"(?:^|_)(?:num|n|count|size|rank|ranks|world|port|len|length|bs|tp|pp|dp|ep|idx|index|"
    r"pid|tokens|blocks|layers|gpus|nodes|step|steps|max|min|total|batch|seq|id)(?:_|$|s$)",
    re.I,
)
_FLOAT_NAME = re.compile(
    r"(?:time|elapsed|seconds|secs|duration|_s$|ratio|fraction|util|gb|gib|mb|mib|mem|memory|"
    r"bytes|usage|rate|speed|throughput|latency|percent)",
    re.I,
)
_DICT_NAME = re.compile(r"(?:^|_)(?:args|kwargs|dict|mapping|overrides)$", re.I)
_MAX_VARIANTS = 4


@dataclass
class Row:
    framework: str
    level: str
    file: str
    template: str
    holes: str
    line: int = 0
    function: str = ""
    versions: set[str] = field(default_factory=set)
    best: tuple[int, ...] = ()


def version_key(v: str) -> tuple[int, ...]:
    out: list[int] = []
    v = v.rsplit(" ", 1)[-1]  # a plugin's release label: "vllm-ascend 0.9.1"
    for part in re.split(r"[.+-]", v):
        m = re.match(r"(\d+)|post(\d+)|rc(\d+)", part)
        if m is None:
            continue
        if m.group(1) is not None:
            out.append(int(m.group(1)))
        elif m.group(2) is not None:
            out.append(int(m.group(2)))
        else:
            out.append(-100 + int(m.group(3)))
    return tuple(out)


# ----------------------------------------------------------------------- templates


def _esc(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def _hint_expr(node: ast.AST | None) -> str:
    """i / f / s / ? for the value an expression gives (a guess, for rendering samples)."""
    if node is None:
        return "?"
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            return "s"
        if isinstance(node.value, int):
            return "i"
        if isinstance(node.value, float):
            return "f"
        return "s"
    if isinstance(node, ast.Call):
        fn = node.func
        name = _name_of(fn)
        if name in (
            "len",
            "int",
            "sum",
            "count",
            "getpid",
            "get_world_size",
            "get_rank",
            "device_count",
            "current_device",
            "numel",
            "get_tensor_model_parallel_rank",
            "get_tensor_model_parallel_world_size",
            "get_pp_group",
        ):
            return "i"
        if name in ("float", "round", "perf_counter", "time", "monotonic"):
            return "f"
        if name in ("str", "repr", "join", "type", "format", "lower", "upper"):
            return "s"
        if name in ("dict", "asdict", "vars"):
            return "d"
        return _hint_name(name)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):
            return "f"
        a, b = _hint_expr(node.left), _hint_expr(node.right)
        if "f" in (a, b):
            return "f"
        if a == b == "i":
            return "i"
        if isinstance(node.op, (ast.Sub, ast.Mult)):
            return "f"
        return "?"
    if isinstance(node, ast.Name):
        return _hint_name(node.id)
    if isinstance(node, ast.Attribute):
        return _hint_name(node.attr)
    if isinstance(node, (ast.Dict, ast.DictComp)):
        return "d"
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.ListComp)):
        return "s"
    return "?"


def _hint_name(name: str) -> str:
    if not name:
        return "?"
    if _DICT_NAME.search(name):
        return "d"
    if _FLOAT_NAME.search(name):
        return "f"
    if _NUMERIC_NAME.search(name):
        return "i"
    return "?"


def _hint_spec(spec: str, node: ast.AST | None) -> str:
    spec = spec.strip()
    if spec and spec[-1] in "eEfFgG%":
        return "f"
    if spec and spec[-1] in "dxXob" or spec.endswith(","):
        return "i"
    return _hint_expr(node)


def _pct_convert(fmt: str, args: list[ast.AST]) -> tuple[str, str]:
    """A %-format string with its specifiers turned into {} (and literal text escaped)."""
    out: list[str] = []
    holes: list[str] = []
    pos = 0
    k = 0
    dict_arg = args[0] if len(args) == 1 and isinstance(args[0], ast.Dict) else None
    for m in _PCT.finditer(fmt):
        out.append(_esc(fmt[pos : m.start()]))
        pos = m.end()
        conv = m.group("conv")
        if conv == "%":
            out.append("%")
            continue
        out.append("{}")
        if conv in "eEfFgG":
            holes.append("f")
        elif conv in "diouxXc":
            holes.append("i")
        else:
            arg: ast.AST | None = None
            if m.group("key") is not None:
                if dict_arg is not None:
                    for key, val in zip(dict_arg.keys, dict_arg.values, strict=True):
                        if isinstance(key, ast.Constant) and key.value == m.group("key"):
                            arg = val
            elif k < len(args):
                arg = args[k]
            holes.append(_hint_expr(arg) if arg is not None else "?")
        if m.group("key") is None:
            k += 1
    out.append(_esc(fmt[pos:]))
    return "".join(out), "".join(holes)


def _format_convert(fmt: str, call: ast.Call) -> tuple[str, str]:
    out: list[str] = []
    holes: list[str] = []
    pos = 0
    k = 0
    kw = {kwd.arg: kwd.value for kwd in call.keywords if kwd.arg}
    for m in _FMT_FIELD.finditer(fmt):
        out.append(_esc(fmt[pos : m.start()]))
        pos = m.end()
        tok = m.group(0)
        if tok in ("{{", "}}"):
            out.append(tok)
            continue
        inner = tok[1:-1]
        name, _, spec = inner.partition(":")
        name = name.split("!")[0].split(".")[0].split("[")[0]
        arg: ast.AST | None = None
        if name == "":
            arg = call.args[k] if k < len(call.args) else None
            k += 1
        elif name.isdigit():
            i = int(name)
            arg = call.args[i] if i < len(call.args) else None
        else:
            arg = kw.get(name)
        out.append("{}")
        holes.append(_hint_spec(spec, arg))
    out.append(_esc(fmt[pos:]))
    return "".join(out), "".join(holes)


class Scope:
    """String-valued assignments of one function (or module), to resolve `msg` names."""

    def __init__(self, body: list[ast.stmt]) -> None:
        # name -> (line, value, is `+=`, the statement list it sits in)
        self.assigns: dict[str, list[tuple[int, ast.AST, bool, int]]] = {}
        block: dict[int, int] = {}  # id(statement) -> id of the body holding it
        for node in _walk_no_defs(body):
            for fld in ("body", "orelse", "finalbody", "handlers"):
                stmts = getattr(node, fld, None)
                if isinstance(stmts, list):
                    for child in stmts:
                        block[id(child)] = id(node) * 8 + len(fld)
        for stmt in body:
            block[id(stmt)] = 0
        for node in _walk_no_defs(body):
            where = block.get(id(node), -1)
            if isinstance(node, ast.Assign):
                for tgt in node.targets:
                    if isinstance(tgt, ast.Name):
                        self._add(tgt.id, (node.lineno, node.value, False, where))
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.value is not None
            ):
                self._add(node.target.id, (node.lineno, node.value, False, where))
            elif (
                isinstance(node, ast.AugAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(node.op, ast.Add)
            ):
                self._add(node.target.id, (node.lineno, node.value, True, where))

    def _add(self, name: str, item: tuple[int, ast.AST, bool, int]) -> None:
        self.assigns.setdefault(name, []).append(item)

    def resolve(self, name: str, before: int) -> list[list[ast.AST]]:
        """The ways `name` may have been built before line `before`: each plain assignment
        with the `+=` that follow it; a `+=` in another block than its assignment (under an
        `if`) may not have run, so the value without it is a way too ([] when unknown)."""
        seq = [a for a in self.assigns.get(name, []) if a[0] < before]
        out: list[list[ast.AST]] = []
        for i, (_, value, aug, where) in enumerate(seq):
            if aug:
                continue
            exprs = [value]
            for _, later, later_aug, later_where in seq[i + 1 :]:
                if not later_aug:
                    break
                if later_where != where:
                    out.append(list(exprs))
                exprs.append(later)
            out.append(exprs)
        return out[-_MAX_VARIANTS:]


def _walk_no_defs(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of a body, not descending into nested defs and classes (they are
    yielded themselves, for the caller to visit as scopes of their own)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


Tmpl = tuple[str, str]  # (template, holes)


def templates(
    node: ast.AST | None,
    scope: Scope | None,
    line: int,
    depth: int = 0,
    pct_args: list[ast.AST] | None = None,
) -> list[Tmpl]:
    """The message templates an expression can give (several for an `a if c else b`)."""
    hole: list[Tmpl] = [("{}", _hint_expr(node))]
    if node is None or depth > 6:
        return hole
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            if pct_args:
                return [_pct_convert(node.value, pct_args)]
            return [(_esc(node.value), "")]
        return [("{}", _hint_expr(node))]
    if isinstance(node, ast.JoinedStr):
        parts: list[list[Tmpl]] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append([(_esc(v.value), "")])
            elif isinstance(v, ast.FormattedValue):
                spec = ""
                if isinstance(v.format_spec, ast.JoinedStr):
                    spec = "".join(
                        c.value
                        for c in v.format_spec.values
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    )
                inner = _literal_hole(v, scope, line, depth) if not spec else None
                parts.append(inner or [("{}", _hint_spec(spec, v.value))])
        return _concat(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _concat(
            [
                templates(node.left, scope, line, depth + 1),
                templates(node.right, scope, line, depth + 1),
            ]
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        right = node.right
        args = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            return [_pct_convert(node.left.value, args)]
        return hole
    if isinstance(node, ast.IfExp):
        return (
            templates(node.body, scope, line, depth + 1)
            + templates(node.orelse, scope, line, depth + 1)
        )[:_MAX_VARIANTS]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        base = node.func.value
        if (
            node.func.attr == "format"
            and isinstance(base, ast.Constant)
            and isinstance(base.value, str)
        ):
            return [_format_convert(base.value, node)]
        if node.func.attr in ("strip", "rstrip", "lstrip") and not node.args:
            return templates(base, scope, line, depth + 1)
        return hole
    if isinstance(node, ast.Name) and scope is not None:
        ways = scope.resolve(node.id, line)
        found: list[Tmpl] = []
        for exprs in ways:
            found.extend(_concat([templates(e, scope, line, depth + 1) for e in exprs]))
        return found[-_MAX_VARIANTS:] or hole
    return hole


def _literal_hole(
    v: ast.FormattedValue, scope: Scope | None, line: int, depth: int
) -> list[Tmpl] | None:
    """The text an f-string hole gives when it is itself a string literal, a choice of
    literals (``{'a' if c else 'b'}``) or a name bound to string templates; else None."""
    if v.conversion not in (-1, ord("s")):
        return None
    val = v.value
    if isinstance(val, ast.IfExp | ast.Constant | ast.JoinedStr) or (
        isinstance(val, ast.Name) and scope is not None and scope.resolve(val.id, line)
    ):
        if isinstance(val, ast.Constant) and not isinstance(val.value, str):
            return None
        found = templates(val, scope, line, depth + 1)
        if any(_useful(t) for t, _ in found):
            return found
    return None


def _concat(parts: list[list[Tmpl]]) -> list[Tmpl]:
    return [
        ("".join(c[0] for c in combo), "".join(c[1] for c in combo))
        for combo in itertools.islice(itertools.product(*parts), _MAX_VARIANTS)
    ]


def _useful(t: str) -> bool:
    """A template with some literal text (not only holes and punctuation)."""
    return re.search(r"[A-Za-z]{2}", t.replace("{}", "")) is not None


# ----------------------------------------------------------------------- walking a module


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _exc_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return "?"


def _loggers_of(tree: ast.Module) -> set[str]:
    names = set(DEFAULT_LOGGERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            fn = node.value.func
            if _name_of(fn) in ("init_logger", "getLogger", "get_logger"):
                for tgt in node.targets:
                    if isinstance(tgt, ast.Name):
                        names.add(tgt.id)
                    elif isinstance(tgt, ast.Attribute):
                        names.add("self." + tgt.attr)
    return names


def _receiver(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


def messages(src: str, path: str) -> Iterator[tuple[str, int, str, str, str]]:
    """(level, line, function, template, holes) of every message in one module's source."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return
    loggers = _loggers_of(tree)
    self_loggers = {n for n in loggers if n.startswith("self.")} | {"self.logger", "self._logger"}

    def visit(body: list[ast.stmt], func: str) -> Iterator[tuple[str, int, str, str, str]]:
        scope = Scope(body)
        for node in _walk_no_defs(body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from visit(node.body, node.name)
                continue
            if isinstance(node, ast.ClassDef):
                yield from visit(node.body, func)
                continue
            found = _one(node, scope)
            if found is None:
                continue
            level, expr, pct = found
            for tmpl, holes in templates(expr, scope, node.lineno, pct_args=pct):
                if _useful(tmpl):
                    yield level, node.lineno, func, tmpl, holes

    def _one(node: ast.AST, scope: Scope) -> tuple[str, ast.AST, list[ast.AST] | None] | None:
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            return f"raise:{_exc_name(node.exc.func)}", node.exc.args[0], None
        if isinstance(node, ast.Assert) and node.msg is not None:
            return "raise:AssertionError", node.msg, None
        if not isinstance(node, ast.Call):
            return None
        fn = node.func
        if isinstance(fn, ast.Attribute):
            recv = _receiver(fn.value)
            is_logger = recv in loggers or recv in self_loggers
            if not is_logger:
                return None
            if fn.attr in LOG_METHODS and node.args:
                args = node.args
                return LOG_METHODS[fn.attr], args[0], list(args[1:]) or None
            if fn.attr == "log" and len(node.args) >= 2:
                lvl = node.args[0]
                level = LEVEL_NAMES.get(_name_of(lvl).upper(), "info")
                return level, node.args[1], list(node.args[2:]) or None
            return None
        if _name_of(fn).lower().endswith("tqdm"):
            for kw in node.keywords:
                if kw.arg == "desc":
                    return "tqdm", kw.value, None
            return None
        if isinstance(fn, ast.Name) and fn.id in HELPERS:
            level, pos = HELPERS[fn.id]
            if len(node.args) > pos:
                return level, node.args[pos], list(node.args[pos + 1 :]) or None
        return None

    yield from visit(tree.body, "<module>")


# ----------------------------------------------------------------------- sources


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(member path, bytes) of every .py file in a wheel, sdist or folder."""
    if path.is_dir():
        base = path.parent
        for p in sorted(path.rglob("*.py")):
            yield str(p.relative_to(base)), p.read_bytes()
    elif path.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.endswith(".py"):
                    yield name, zf.read(name)
    elif path.name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as tf:
            for m in tf:
                if m.isfile() and m.name.endswith(".py"):
                    f = tf.extractfile(m)
                    if f is not None:
                        yield m.name, f.read()
    else:
        raise SystemExit(f"{path}: not a wheel, sdist or folder")


def _package_path(member: str, package: str) -> str | None:
    parts = member.replace("\\", "/").split("/")
    if package not in parts:
        return None
    at = parts.index(package)
    if package in PLUGINS and at > 1:
        return None  # an sdist's package folder only (not tests/<package>/...)
    return "/".join(parts[at:])


def _selected(rel: str, framework: str) -> bool:
    if any(s in "/" + rel for s in SKIP_PARTS):
        return False
    if framework in PLUGINS:
        return True
    if framework in ("vllm", "sglang") and rel.count("/") == 1:
        return True  # top-level modules (config.py, envs.py, utils.py, launch_server.py)
    return rel.startswith(SELECT[framework])


def parse_source(arg: str) -> tuple[str, str, Path]:
    if "@" in arg and "==" in arg.split("@", 1)[0]:
        spec, _, p = arg.partition("@")
        name, _, ver = spec.partition("==")
        return name.lower(), ver, Path(p)
    p = Path(arg)
    m = re.match(r"(?P<name>[A-Za-z0-9_]+)-(?P<ver>[0-9][^-]*?)(?:-|\.tar\.gz$|\.zip$)", p.name)
    if m is None:
        raise SystemExit(f"{arg}: cannot tell name and version (use NAME==VERSION@PATH)")
    return m.group("name").lower().replace("-", "_"), m.group("ver"), p


def extract(sources: list[str], *, with_debug: bool = True) -> tuple[list[Row], dict[str, int]]:
    rows: dict[tuple[str, str, str, str], Row] = {}
    stats: dict[str, int] = {}
    for arg in sources:
        package, version, path = parse_source(arg)
        framework = package
        if package in PLUGINS:
            framework, label = PLUGINS[package]
            version = f"{label} {version}"
        elif package not in SELECT:
            known = sorted(SELECT) + sorted(PLUGINS)
            raise SystemExit(f"{arg}: package {package!r} is not one of {known}")
        nfiles = nmsg = 0
        for member, data in _members(path):
            rel = _package_path(member, package)
            if rel is None or not _selected(rel, package):
                continue
            nfiles += 1
            src = data.decode("utf-8", errors="replace")
            for level, line, func, tmpl, holes in messages(src, rel):
                if level == "debug" and not with_debug:
                    continue
                nmsg += 1
                key = (framework, tmpl, level, rel)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = Row(framework, level, rel, tmpl, holes)
                vk = version_key(version)
                if vk >= row.best:
                    row.best, row.line, row.function, row.holes = vk, line, func, holes
                row.versions.add(version)
        name = version if package in PLUGINS else f"{package}=={version}"
        stats[name] = nmsg
        print(f"{name}: {nfiles} files, {nmsg} messages", file=sys.stderr)
    return sorted(rows.values(), key=lambda r: (r.framework, r.file, r.line, r.template)), stats


def _tsv(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def write_tsv(rows: list[Row], out: io.TextIOBase | io.TextIOWrapper) -> None:
    out.write("\t".join(COLUMNS) + "\n")
    for r in rows:
        vers = ",".join(sorted(r.versions, key=version_key))
        cells = (r.framework, r.level, r.file, str(r.line), r.function, r.holes, vers, r.template)
        out.write("\t".join(_tsv(c) for c in cells) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", help="wheel / sdist, or NAME==VERSION@PATH")
    ap.add_argument("-o", "--output", default="-", help="TSV file (default stdout)")
    ap.add_argument("--no-debug", action="store_true", help="leave out debug-level messages")
    args = ap.parse_args(argv)
    rows, _ = extract(args.sources, with_debug=not args.no_debug)
    write_output(rows, args.output)
    return 0


def write_output(rows: list[Row], output: str) -> None:
    """The table to ``output`` (``-``: stdout), and its row count to stderr."""
    if output == "-":
        write_tsv(rows, sys.stdout)
    else:
        with open(output, "w", encoding="utf-8", newline="\n") as f:
            write_tsv(rows, f)
    print(f"{len(rows)} rows", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
