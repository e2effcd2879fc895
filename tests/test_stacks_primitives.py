"""diag/stacks/primitives.py: one table of calls into C, read from source text (a
traceback's line under its innermost frame) and from parsed sources (the catalogue tool)."""

from __future__ import annotations

import ast

import pytest

from diag.stacks.primitives import primitive_in_line, primitive_of_call


@pytest.mark.parametrize(
    ("line", "site"),
    [
        ("q = ctx.q_seqlens.tolist()", "stack.cuda_sync"),
        ("self.transfer_event.synchronize()", "stack.cuda_sync"),
        ("value = self._store.get(key)", "stack.dist_init"),
        ("store = TCPStore(host, port, world_size, is_master)", "stack.dist_init"),
        ("msg = self.socket.recv_pyobj()", "stack.ipc_wait"),
        ("fcntl.flock(f, fcntl.LOCK_EX)", "stack.jit_compile"),
        ("with safe_open(path, framework='pt') as f:", "stack.weights_io"),
        ("tensor = f.get_tensor(name)", "stack.weights_io"),
        ("self._lock.acquire()", "stack.gil_or_lock"),
        # a line that does not parse alone (its bracket closes below): read as text
        ("x = torch.cat([a.cpu(),", "stack.cuda_sync"),
        ("out = self.tcp_store.wait([key], timedelta(", "stack.dist_init"),
    ],
)
def test_a_primitive_in_a_line_names_its_site(line: str, site: str) -> None:
    got = primitive_in_line(line)
    assert got is not None and got[0] == site


@pytest.mark.parametrize(
    "line",
    [
        "for k, v in d.items():",  # items(), not item()
        "x = d.item(3)",  # an .item that takes an argument is no tensor's
        "value = cache.get(key)",  # a dict-like get, no store
        "torch.cuda.synchronize",  # no call
        "tile = cute_tensor.get_slice(idx)",  # another library's get_slice
        "synchronize()",  # a bare synchronize of the framework's own
        "",
    ],
)
def test_other_calls_name_no_site(line: str) -> None:
    assert primitive_in_line(line) is None


def test_parsed_calls_and_text_agree() -> None:
    for line in ("x.item()", "self.store.get('k')", "sock.recv()", "safe_open(p)"):
        (node,) = [n for n in ast.walk(ast.parse(line)) if isinstance(n, ast.Call)][:1]
        assert primitive_of_call(node) == primitive_in_line(line)
