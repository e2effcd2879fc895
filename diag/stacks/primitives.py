"""Calls that enter C with no Python frame of their own, and the wait site each one means.

A Python-only stack (py-spy without ``--native``, faulthandler, a traceback) ends in the
function that made such a call: ``tensor.item()``, a ZeroMQ ``socket.recv()``,
``TCPStore.get``, ``fcntl.flock``, ``safe_open(...).get_tensor``, ``lock.acquire()``. Only
the call itself says what the thread waits for. One table serves both readers of calls:
``tools/stack_catalogue.py`` finds these calls in the frameworks' sources (``ast`` nodes),
and :func:`diag.stacks.classify.call_rule` reads the one a traceback prints under its
innermost frame (a line of source text).
"""

from __future__ import annotations

import ast
import functools
import re

__all__ = ["PRIMITIVES", "primitive_in_line", "primitive_of", "primitive_of_call"]

_INIT = "stack.dist_init"
_SYNC = "stack.cuda_sync"
_JIT = "stack.jit_compile"
_WEIGHTS = "stack.weights_io"
_IPC = "stack.ipc_wait"
_LOCK = "stack.gil_or_lock"

# what the loaders call a safetensors handle (``with safe_open(p) as f: f.get_slice(k)``)
_SAFE_HANDLES = ("safe", "st_file", "reader", "handle")
_SAFE_SHORT = frozenset({"f", "fp", "sf", "st"})
_SOCKETS = ("sock", "socket", "zmq")

# (method or function name, words one of which the receiver's text must hold ("" = any),
# site, primitive label). Only calls that enter C with no Python frame of their own (pyzmq's
# recv_multipart / recv_pyobj are Python, but a traceback cut below them names only them).
PRIMITIVES: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("item", ("",), _SYNC, "tensor.item()"),
    ("tolist", ("",), _SYNC, "tensor.tolist()"),
    ("cpu", ("",), _SYNC, "tensor.cpu()"),
    ("numpy", ("",), _SYNC, "tensor.numpy()"),
    ("synchronize", ("",), _SYNC, "synchronize()"),
    ("get", ("store",), _INIT, "store.get()"),
    ("wait", ("store",), _INIT, "store.wait()"),
    ("add", ("store",), _INIT, "store.add()"),
    ("compare_set", ("store",), _INIT, "store.compare_set()"),
    ("TCPStore", ("",), _INIT, "TCPStore()"),
    ("recv", _SOCKETS, _IPC, "zmq socket.recv()"),
    ("recv_multipart", _SOCKETS, _IPC, "zmq socket.recv()"),
    ("recv_pyobj", _SOCKETS, _IPC, "zmq socket.recv()"),
    ("recv_string", _SOCKETS, _IPC, "zmq socket.recv()"),
    ("recv_json", _SOCKETS, _IPC, "zmq socket.recv()"),
    ("send", _SOCKETS, _IPC, "zmq socket.send()"),
    ("poll", _SOCKETS, _IPC, "zmq socket.poll()"),
    ("recv_bytes", ("sock", "socket", "conn", "pipe"), _IPC, "recv_bytes()"),
    ("select", ("select",), _IPC, "select.select()"),
    ("waitpid", ("os",), _IPC, "os.waitpid()"),
    ("flock", ("fcntl",), _JIT, "fcntl.flock()"),
    ("lockf", ("fcntl",), _JIT, "fcntl.lockf()"),
    ("safe_open", ("",), _WEIGHTS, "safetensors safe_open()"),
    ("get_tensor", _SAFE_HANDLES, _WEIGHTS, "safetensors get_tensor()"),
    ("get_slice", _SAFE_HANDLES, _WEIGHTS, "safetensors get_slice()"),
    ("acquire", ("lock", "mutex", "sem"), _LOCK, "lock.acquire()"),
)
# what c10d stores are called where the frameworks keep them
_STORES = frozenset(
    {
        "store",
        "_store",
        "tcp_store",
        "_tcp_store",
        "prefix_store",
        "master_store",
        "c10d_store",
        "dist_store",
        "pg_store",
    }
)
_BY_NAME: dict[str, list[tuple[tuple[str, ...], str, str]]] = {}
for _n, _words, _site, _label in PRIMITIVES:
    _BY_NAME.setdefault(_n, []).append((_words, _site, _label))


def primitive_of(name: str, recv: str, has_args: bool) -> tuple[str, str] | None:
    """(site, label) of a call of ``name`` on a receiver whose source text (lower case) is
    ``recv`` ("" for a bare function), or None when it is no primitive."""
    for words, site, label in _BY_NAME.get(name, ()):
        if name in ("item", "tolist", "cpu", "numpy") and has_args:
            continue  # dict.item? no: .item() takes no argument
        if name == "synchronize" and not recv:
            continue
        if "store" in words and recv.rsplit(".", 1)[-1] not in _STORES:
            continue  # a dict-like store of something else
        if words is _SAFE_HANDLES:
            if recv in _SAFE_SHORT or any(w in recv for w in words):
                return site, label
            continue  # CuTe/other tensors' get_slice
        if words == ("",) or any(w in recv for w in words if w):
            return site, label
    return None


def _callee(node: ast.Call) -> tuple[str, str] | None:
    """(name, receiver text) of a call: ``a.b.item()`` -> ("item", "a.b")."""
    f = node.func
    if isinstance(f, ast.Attribute):
        try:
            recv = ast.unparse(f.value)
        except (ValueError, RecursionError):
            recv = ""
        return f.attr, recv.lower()
    if isinstance(f, ast.Name):
        return f.id, ""
    return None


def primitive_of_call(node: ast.Call) -> tuple[str, str] | None:
    """:func:`primitive_of` for a call node of a parsed source."""
    got = _callee(node)
    if got is None:
        return None
    return primitive_of(got[0], got[1], bool(node.args or node.keywords))


# a call in a line that does not parse on its own (an open bracket continues below it):
# the dotted receiver, the name, and whether the bracket closes at once
_TEXT_CALL = re.compile(r"((?:[A-Za-z_]\w*(?:\(\))?\.)*)([A-Za-z_]\w*)\s*\((\s*\))?")


@functools.lru_cache(maxsize=4096)  # (speed) the same source lines recur in every rank
def primitive_in_line(line: str) -> tuple[str, str] | None:
    """(site, label) of the first primitive called in one line of source text, as a
    traceback prints it under a frame."""
    text = line.strip()
    if not text:
        return None
    for candidate in (text, text.rstrip(":")):
        try:
            tree = ast.parse(candidate)
        except (SyntaxError, ValueError, RecursionError):
            continue
        calls = sorted(
            (n for n in ast.walk(tree) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for node in calls:
            got = primitive_of_call(node)
            if got is not None:
                return got
        return None
    for m in _TEXT_CALL.finditer(text):
        recv = m.group(1).rstrip(".").replace("()", "").lower()
        got = primitive_of(m.group(2), recv, m.group(3) is None)
        if got is not None:
            return got
    return None
