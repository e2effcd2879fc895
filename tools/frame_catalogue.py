#!/usr/bin/env python3
"""The frame -> phase catalogue from the sources: the start-up step each framework function
runs in, for a traceback frame no hand-written rule of :mod:`diag.frames` names.

This script reads the sources of several releases WITHOUT importing them (``ast`` only, as
tools/stack_catalogue.py does), builds an approximate static call graph of each package
(a call resolved by the callee's name within the package, conservatively: ``self.m()`` to
the class's own methods and its bases', ``f()`` to the module's or an imported function,
``Cls()`` to ``Cls.__init__``, ``obj.m()`` only where few methods bear that name) and walks
it from each start-up step's roots (the functions LABELS.md and diag/frames.py name:
``init_distributed_environment`` -> dist_init, ``load_model`` -> weights_load,
``profile_run`` -> kv_cache, ``compile_or_warm_up_model`` -> compile, ``capture_model`` ->
cuda_graph, the engine cores' and schedulers' loops -> serving). A walk stops at another
step's root (a step nested in another is its own). A function gets the phase of the roots
that reach it only where they all are of one phase, in every release read that reaches it;
one reached from two steps (a utility, a layer's forward, a collective) or from serving and
a start-up step gets none and no row.

One row per function: framework, package-relative path, qualified name (``__qualname__``),
phase, the releases it was derived from. :func:`diag.frames.frame_phase` looks a frame up
there (path from ``vllm/`` or ``sglang/`` on, and the function's own name) only after every
hand-written rule said nothing.

usage:
  tools/frame_catalogue.py [--out diag/data/frame_phases.tsv] [--tree DIR] [SRC...]
SRC is ``NAME==VERSION@DIR`` (DIR holds the ``vllm/`` or ``sglang/`` package: an unpacked
wheel), or ``--tree DIR`` for every ``vllm-X``/``sglang-Y`` folder there, e.g. the wheels of
/work/cache/wheels unpacked with ``unzip -q W 'vllm/*.py' -d /tmp/fc_src/vllm-0.8.5``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "diag" / "data" / "frame_phases.tsv"
sys.path.insert(0, str(ROOT / "tools"))
from releases import release_key, release_sources  # noqa: E402

__all__ = ["PHASES", "ROOTS", "build", "main"]

PHASES = ("dist_init", "weights_load", "kv_cache", "compile", "cuda_graph", "serving")

# Each step's roots: a function's own name, optionally only in a class whose name holds a
# given text (``capture`` is CUDAGraphRunner.capture, not any capture) or in a file whose
# path holds one.
ROOTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    # (name, class-name substring, path substring); "" is any
    "dist_init": (
        ("init_distributed_environment", "", ""),
        ("initialize_model_parallel", "", ""),
        ("ensure_model_parallel_initialized", "", ""),
        ("init_worker_distributed_environment", "", ""),
        ("_init_distributed_environment", "", ""),
        ("init_torch_distributed", "", ""),
        ("init_world_group", "", ""),
        ("init_model_parallel_group", "", ""),
        ("init_process_group", "", ""),
    ),
    "weights_load": (
        ("load_model", "", ""),
        ("get_model", "", "model_loader"),
        ("initialize_model", "", ""),
        ("_initialize_model", "", ""),
        ("load_weights", "", ""),
        ("weight_loader", "", ""),
        ("load_weights_and_postprocess", "", ""),
        ("process_weights_after_loading", "", ""),
        ("download_weights_from_hf", "", ""),
    ),
    "kv_cache": (
        ("profile_run", "", ""),
        ("determine_available_memory", "", ""),
        ("determine_num_available_blocks", "", ""),
        ("_initialize_kv_caches", "", ""),
        ("initialize_kv_cache", "", ""),
        ("initialize_from_config", "", ""),
        ("init_memory_pool", "", ""),
        ("profile_max_num_token", "", ""),
        ("initialize_cache", "", ""),
        ("_init_cache_engine", "", ""),
        ("init_cache_engine", "", ""),
        ("init_cache_with_memory_pool", "", ""),
        ("get_kv_cache_config", "", ""),
        ("get_kv_cache_configs", "", ""),
    ),
    "compile": (
        ("compile_or_warm_up_model", "", ""),
        ("kernel_warmup", "", ""),
        ("deep_gemm_warmup", "", ""),
        ("_maybe_compile_deep_gemm_one_type_all", "", ""),
    ),
    "cuda_graph": (
        ("capture_model", "", ""),
        ("capture", "Graph", ""),
        ("init_cuda_graphs", "", ""),
        ("init_device_graphs", "", ""),
        ("capture_one_batch_size", "", ""),
        ("_capture_cudagraphs", "", ""),
        ("init_piecewise_cuda_graphs", "", ""),
        ("initialize_cudagraph_capture", "", ""),
    ),
    "serving": (
        ("run_busy_loop", "", ""),
        ("_process_engine_step", "", ""),
        ("step_with_batch_queue", "", ""),
        ("step", "Engine", ""),
        ("step_async", "", ""),
        ("engine_step", "", ""),
        ("run_engine_loop", "", ""),
        ("_handle_client_request", "", ""),
        ("process_input_sockets", "", ""),
        ("process_output_sockets", "", ""),
        ("event_loop_normal", "", ""),
        ("event_loop_overlap", "", ""),
        ("event_loop_pp", "", ""),
        ("run_event_loop", "", ""),
        ("dispatch_event_loop", "", ""),
        ("forward_thread_func", "", ""),
        ("forward_thread_func_", "", ""),
        ("process_input_requests", "", ""),
        ("handle_generate_request", "", ""),
        ("handle_embedding_request", "", ""),
        ("get_next_batch_to_run", "", ""),
        ("run_batch", "Scheduler", ""),
        ("process_batch_result", "", ""),
        ("start_worker_execution_loop", "", ""),
        ("execute_model_async", "", ""),
        ("generate", "AsyncLLM", ""),
        ("generate", "TokenizerManager", ""),
        ("generate_request", "", ""),
        ("create_chat_completion", "", ""),
        ("create_completion", "", ""),
        ("create_embedding", "", ""),
        ("output_handler", "", ""),
        ("handle_loop", "", ""),
    ),
}
# SGLang's disaggregated event loops (event_loop_normal_disagg_decode ...) are serving too
SERVING_PREFIX = "event_loop_"
# a method name borne by more than this many methods in the package is not followed from
# an ``obj.m()`` call (``forward``, ``get``, ``update``: no telling which one runs)
FANOUT = 3
# names never followed by name alone (builtins and containers' methods)
GENERIC = frozenset(
    {
        "get", "set", "items", "keys", "values", "append", "extend", "pop", "update", "add",
        "remove", "clear", "copy", "join", "split", "format", "run", "start", "close", "wait",
        "put", "send", "recv", "read", "write", "to", "cuda", "cpu", "item", "view", "reshape",
        "forward", "__call__", "__init__", "call", "apply", "main", "setup", "init", "reset",
        "info", "debug", "warning", "error", "exception", "encode", "decode", "build", "load",
        "save", "step", "sort", "index", "count", "register", "process", "execute", "handle",
    }
)


@dataclass(slots=True)
class Func:
    fid: int
    path: str
    qual: str
    name: str
    cls: str | None
    node: ast.AST
    nested: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Package:
    funcs: list[Func] = field(default_factory=list)
    by_name: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    # module-level functions: name -> ids; per module: name -> id
    top_by_name: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    top_in_module: dict[tuple[str, str], int] = field(default_factory=dict)
    # classes: name -> [(path, {method name: id}, base names)]
    classes: dict[str, list[tuple[str, dict[str, int], list[str]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    subclasses: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    memo: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)


def _base_name(b: ast.expr) -> str | None:
    if isinstance(b, ast.Name):
        return b.id
    if isinstance(b, ast.Attribute):
        return b.attr
    if isinstance(b, ast.Subscript):
        return _base_name(b.value)
    return None


def _index(pkg: Package, rel: str, tree: ast.Module) -> None:
    def walk(node: ast.AST, prefix: str, cls: str | None, parent: Func | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}{child.name}"
                f = Func(len(pkg.funcs), rel, q, child.name, cls, child)
                pkg.funcs.append(f)
                pkg.by_name[child.name].append(f.fid)
                if parent is not None:
                    parent.nested.append(f.fid)
                elif cls is None and "<locals>" not in q:
                    pkg.top_by_name[child.name].append(f.fid)
                    pkg.top_in_module[(rel, child.name)] = f.fid
                walk(child, f"{q}.<locals>.", None, f)
            elif isinstance(child, ast.ClassDef):
                methods: dict[str, int] = {}
                start = len(pkg.funcs)
                # a class defined in a function: its methods run when called, not with it
                walk(child, f"{prefix}{child.name}.", child.name, None)
                for f in pkg.funcs[start:]:
                    if f.cls == child.name and f.qual == f"{prefix}{child.name}.{f.name}":
                        methods[f.name] = f.fid
                bases = [n for b in child.bases if (n := _base_name(b)) is not None]
                pkg.classes[child.name].append((rel, methods, bases))
                for b in bases:
                    pkg.subclasses[b].add(child.name)
            else:
                walk(child, prefix, cls, parent)

    walk(tree, "", None, None)


def _class_methods(pkg: Package, cls: str, name: str, seen: set[str] | None = None) -> list[int]:
    """``name`` in class ``cls`` (every class so named) or, where it has none, its bases."""
    if seen is None:
        key = ("c", cls, name)
        got = pkg.memo.get(key)
        if got is None:
            got = pkg.memo[key] = _class_methods(pkg, cls, name, set())
        return got
    if cls in seen or len(seen) > 12:
        return []
    seen.add(cls)
    out: list[int] = []
    for _rel, methods, bases in pkg.classes.get(cls, ()):
        if name in methods:
            out.append(methods[name])
            continue
        for b in bases:
            out += _class_methods(pkg, b, name, seen)
    return out


def _sub_methods(pkg: Package, cls: str, name: str) -> list[int]:
    """``name`` as the subclasses of ``cls`` define it (an abstract method's overrides)."""
    key = ("s", cls, name)
    if key in pkg.memo:
        return pkg.memo[key]
    out: list[int] = pkg.memo.setdefault(key, [])
    todo, seen = [cls], {cls}
    while todo and len(seen) < 60:
        c = todo.pop()
        for sub in pkg.subclasses.get(c, ()):
            if sub in seen:
                continue
            seen.add(sub)
            todo.append(sub)
            for _rel, methods, _bases in pkg.classes.get(sub, ()):
                if name in methods:
                    out.append(methods[name])
    return out


def _calls(node: ast.AST) -> Iterable[ast.Call]:
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, ast.Call):
            yield n
        stack.extend(ast.iter_child_nodes(n))


def _resolve(pkg: Package, f: Func, call: ast.Call) -> list[int]:
    fn = call.func
    if isinstance(fn, ast.Name):
        name = fn.id
        local = [i for i in f.nested if pkg.funcs[i].name == name]
        if local:
            return local
        if name in pkg.classes:
            inits = [
                m["__init__"] for _r, m, _b in pkg.classes[name] if "__init__" in m
            ] or _class_methods(pkg, name, "__init__")
            return inits if len(inits) <= FANOUT else []
        own = pkg.top_in_module.get((f.path, name))
        if own is not None:
            return [own]
        tops = pkg.top_by_name.get(name, [])
        return tops if 0 < len(tops) <= FANOUT and name not in GENERIC else []
    if not isinstance(fn, ast.Attribute):
        return []
    name = fn.attr
    base = fn.value
    if isinstance(base, ast.Name) and base.id in ("self", "cls") and f.cls is not None:
        got = _class_methods(pkg, f.cls, name)
        if not got:
            got = _sub_methods(pkg, f.cls, name)
            if len(got) > FANOUT:
                got = []
        return got
    if (
        isinstance(base, ast.Call)
        and isinstance(base.func, ast.Name)
        and base.func.id == "super"
        and f.cls is not None
    ):
        out: list[int] = []
        for _rel, _m, bases in pkg.classes.get(f.cls, ()):
            for b in bases:
                out += _class_methods(pkg, b, name)
        return out
    if isinstance(base, ast.Name) and base.id in pkg.classes:
        got = _class_methods(pkg, base.id, name)  # Cls.static_or_class_method()
        if got:
            return got
    if name in GENERIC or name.startswith("__"):
        return []
    cands = pkg.by_name.get(name, [])
    cands = [i for i in cands if pkg.funcs[i].cls is not None or pkg.funcs[i].qual == name]
    return cands if 0 < len(cands) <= FANOUT else []


def _is_root(f: Func) -> str | None:
    if f.name.startswith(SERVING_PREFIX) and "<locals>" not in f.qual:
        return "serving"
    for phase, roots in ROOTS.items():
        for name, cls, path in roots:
            if f.name != name:
                continue
            if cls and (f.cls is None or cls not in f.cls):
                continue
            if path and path not in f.path:
                continue
            return phase
    return None


def load_package(name: str, root: Path) -> Package:
    pkg_dir = root / name
    if not pkg_dir.is_dir():
        raise SystemExit(f"{root}: no {name}/ package inside")
    pkg = Package()
    for path in sorted(pkg_dir.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/tests/" in rel or "/test/" in rel or "/benchmarks/" in rel:
            continue
        try:
            tree = ast.parse(path.read_bytes(), filename=rel)
        except (SyntaxError, ValueError, RecursionError):
            continue
        _index(pkg, rel, tree)
    return pkg


def phases_of(pkg: Package) -> dict[int, str | None]:
    """Function id -> the one phase of the step roots that reach it (None: several, or a
    caller outside that step)."""
    edges: dict[int, list[int]] = {}
    # the names each function calls, resolved or not (``self.model_executor.execute_model``)
    called: dict[int, set[str]] = {}
    for f in pkg.funcs:
        out = set(f.nested)
        names: set[str] = set()
        for call in _calls(f.node):
            out.update(_resolve(pkg, f, call))
            if isinstance(call.func, ast.Attribute):
                names.add(call.func.attr)
            elif isinstance(call.func, ast.Name):
                names.add(call.func.id)
        called[f.fid] = names
        out.discard(f.fid)
        edges[f.fid] = sorted(out)
    roots = {f.fid: ph for f in pkg.funcs if (ph := _is_root(f)) is not None}
    reached: dict[int, set[str]] = defaultdict(set)
    callers: dict[int, list[int]] = defaultdict(list)
    for src, dsts in edges.items():
        for d in dsts:
            callers[d].append(src)
    for fid, phase in roots.items():
        seen = {fid}
        todo = deque([fid])
        while todo:
            cur = todo.popleft()
            reached[cur].add(phase)
            for nxt in edges[cur]:
                if nxt in seen:
                    continue
                seen.add(nxt)
                other = roots.get(nxt)
                if other is not None and other != phase:
                    continue  # another step's root: its own step
                todo.append(nxt)
    # conservative: a function keeps its phase only while every caller the graph knows
    # has that same phase (a caller outside every step, or of two, may run it any time)
    phase: dict[int, str | None] = {
        fid: next(iter(ph)) if len(ph) == 1 else None for fid, ph in reached.items()
    }
    # conservative: a name another step (or serving) calls, through an object the graph
    # could not follow (``self.model_runner.execute_model()``), may be this function
    names_of: dict[str, set[str]] = defaultdict(set)
    for fid, phs in reached.items():
        for ph in phs:
            names_of[ph] |= called[fid]
    for fid, ph in phase.items():
        if ph is not None and fid not in roots:
            name = pkg.funcs[fid].name
            if any(name in names for other, names in names_of.items() if other != ph):
                phase[fid] = None
    todo = deque(fid for fid in phase if fid not in roots)
    while todo:
        fid = todo.popleft()
        ph = phase.get(fid)
        if ph is None:
            continue
        if any(phase.get(c) != ph for c in callers[fid]):
            phase[fid] = None
            todo.extend(d for d in edges[fid] if d not in roots and phase.get(d) is not None)
    return phase


def build(sources: list[tuple[str, str, Path]]) -> list[tuple[str, str, str, str, str]]:
    """The catalogue's rows from (framework, version, folder) sources."""
    per: dict[tuple[str, str, str], dict[str, str | None]] = defaultdict(dict)
    for fw, version, where in sources:
        pkg = load_package(fw, where)
        reached = phases_of(pkg)
        n = 0
        for fid, one in reached.items():
            f = pkg.funcs[fid]
            key = (fw, f.path, f.qual)
            prev = per[key].get(version, "")
            if prev is None:
                continue
            if prev and prev != one:
                one = None  # two functions of one qualified name (a redefinition)
            per[key][version] = one
            n += 1
        print(f"{fw} {version}: {len(pkg.funcs)} functions, {n} reached", file=sys.stderr)
    rows: list[tuple[str, str, str, str, str]] = []
    for (fw, path, qual), by_version in sorted(per.items()):
        phases = set(by_version.values())
        if len(phases) != 1 or None in phases:
            continue  # ambiguous in a release, or releases disagree
        phase = next(iter(phases))
        assert phase is not None
        versions = ",".join(sorted(by_version, key=release_key))
        rows.append((fw, path, qual, phase, versions))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("sources", nargs="*", help="NAME==VERSION@DIR")
    ap.add_argument("--tree", type=Path, help="a folder of NAME-VERSION/NAME/ unpacked releases")
    a = ap.parse_args(argv)
    sources = release_sources(a.sources, a.tree)
    if not sources:
        ap.error("no sources (SRC... or --tree)")
    versions: dict[str, list[str]] = defaultdict(list)
    for name, version, _ in sources:
        versions[name].append(version)
    rows = build(sources)
    head = [
        "# frame -> phase catalogue: the start-up step (or serving) whose roots alone reach"
        " each function",
        "# written by tools/frame_catalogue.py from the sources of: "
        + "; ".join(
            f"{k} {', '.join(sorted(v, key=release_key))}" for k, v in sorted(versions.items())
        ),
        "framework\tpath\tfunction\tphase\treleases",
    ]
    a.out.write_text("\n".join([*head, *("\t".join(r) for r in rows)]) + "\n")
    print(f"{len(rows)} rows -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
