#!/usr/bin/env python3
"""Extract the messages vLLM's compiled kernels raise from C++ (``csrc/``).

vLLM's custom ops check their inputs and the GPU they run on in C++; a failed check becomes
a Python exception in the process that called the op, and its message reaches the log as a
traceback's last line. This reads the ``csrc/`` tree of vLLM sdists (nothing is compiled or
run) and lists every such message, in the columns of ``fixtures/messages/messages.tsv``
(framework ``vllm``, file ``csrc/...``, level ``raise:<ExcType>``):

- ``TORCH_CHECK(cond, a, b, ...)`` (c10): ``RuntimeError: <a><b>...``; the arguments after
  the condition are printed one after another (``c10::str``), so string literals are the
  template's text and every other argument a ``{}`` hole;
- ``TORCH_CHECK_NOT_IMPLEMENTED(cond, ...)``: ``NotImplementedError: <...>``;
  ``TORCH_CHECK_VALUE`` / ``_TYPE`` / ``_INDEX``: ``ValueError`` / ``TypeError`` /
  ``IndexError``;
- ``STD_TORCH_CHECK(cond, ...)`` (torch's header-only API, the stable-ABI kernels of vLLM
  0.2x+): a ``std::runtime_error`` whose text is ``<function>, <file>:<line>, <...>``
  (torch/headeronly/util/Exception.h), so ``RuntimeError: {}, {}:{}, <...>``;
  vLLM's ``STD_TORCH_CHECK_NOT_IMPLEMENTED`` (csrc/torch_utils.h) puts
  ``NotImplementedError: `` before the message: ``RuntimeError: {}, {}:{},
  NotImplementedError: <...>``;
- ``AT_ERROR(...)`` (c10's older ``TORCH_CHECK(false, ...)``) and
  ``throw std::runtime_error("...")``: ``RuntimeError: <...>``.

A check with no literal words (``TORCH_CHECK(x.is_cuda())``: torch prints the condition)
is left out, as are the glog-style ``TORCH_CHECK_EQ`` family. A macro argument ``#NAME``
(stringised by the preprocessor) is a hole.

Usage:
    python3 tools/extract_csrc_messages.py -o fixtures/messages/csrc_messages.tsv \\
        /work/cache/wheels/sdist/vllm-0.10.2.tar.gz /work/cache/wheels/sdist/vllm-0.20.0.tar.gz \\
        /work/cache/wheels/sdist/vllm-0.34.0.tar.gz

A PATH is an sdist (``vllm-0.34.0.tar.gz``; version from its name) or VERSION@FOLDER (a
folder holding ``csrc/``).
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from extract_messages import Row, _hint_name, version_key, write_output  # noqa: E402

EXTENSIONS = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp", ".hip")
# macro -> (exception type, text put before the message)
MACROS: dict[str, tuple[str, str]] = {
    "TORCH_CHECK": ("RuntimeError", ""),
    "TORCH_CHECK_NOT_IMPLEMENTED": ("NotImplementedError", ""),
    "TORCH_CHECK_VALUE": ("ValueError", ""),
    "TORCH_CHECK_TYPE": ("TypeError", ""),
    "TORCH_CHECK_INDEX": ("IndexError", ""),
    "STD_TORCH_CHECK": ("RuntimeError", "{}, {}:{}, "),
    "STD_TORCH_CHECK_NOT_IMPLEMENTED": ("RuntimeError", "{}, {}:{}, NotImplementedError: "),
    "AT_ERROR": ("RuntimeError", ""),  # c10's deprecated TORCH_CHECK(false, ...): no condition
}
NO_CONDITION = {"AT_ERROR"}
STD_HOLES = "ssi"  # function, file, line of STD_TORCH_CHECK's prefix
_CALL = re.compile(
    r"\b(?P<macro>" + "|".join(sorted(MACROS, key=len, reverse=True)) + r")\s*\("
    r"|\bthrow\s+std::runtime_error\s*\("
)
_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "defined"}
_FUNC_HEAD = re.compile(
    r"([A-Za-z_~]\w*)\s*\([^;{}]*\)\s*(?:const|noexcept|override|final|->[^{;]*|\s)*$"
)
_STRING = re.compile(r'(?:u8|u|U|L)?"((?:[^"\\\n]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\", "0": "", "r": "\r"}


def strip_comments(src: str) -> str:
    """The source with comments blanked and a line continuation's backslash turned into a
    space (newlines kept, so line numbers hold)."""
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or (c == "'" and not (i and (src[i - 1].isalnum()))):
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "\\" and src.startswith("\\\n", i):
            out.append(" \n")
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _call_args(src: str, start: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose '(' is at `start`, and the end offset."""
    depth = 0
    args: list[str] = []
    cur: list[str] = []
    i, n = start, len(src)
    while i < n:
        c = src[i]
        if c == '"':
            m = _STRING.match(src, i)
            if m is None:
                return None
            cur.append(m.group(0))
            i = m.end()
            continue
        if c == "'":
            m = re.compile(r"'(?:[^'\\\n]|\\.)*'").match(src, i)
            if m is not None:
                cur.append(m.group(0))
                i = m.end()
                continue
        if c in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur))
                return _merge_templates(args), i + 1
        elif c == "," and depth == 1:
            args.append("".join(cur))
            cur = []
            i += 1
            continue
        elif c == ";" and depth <= 1:
            return None
        cur.append(c)
        i += 1
    return None


def _angles(s: str) -> int:
    s = re.sub(r"<<|>>|<=|>=|->|\"(?:[^\"\\]|\\.)*\"", "", s)
    return s.count("<") - s.count(">")


def _merge_templates(args: list[str]) -> list[str]:
    """Re-join arguments a comma inside template brackets split (``std::is_same_v<T, U>``)."""
    out: list[str] = []
    for a in args:
        if out and _angles(out[-1]) > 0:
            out[-1] += "," + a
        else:
            out.append(a)
    return out


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _esc(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def template_of(args: list[str]) -> tuple[str, str]:
    """(template, holes) of the message arguments (string literals are text, the rest holes)."""
    text: list[str] = []
    holes: list[str] = []
    for a in args:
        a = a.strip()
        if not a:
            continue
        # a run of adjacent literals, possibly with a stringised macro argument among them
        pieces = re.findall(r'(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*"|#\s*\w+|\S+?(?=\s*"|\s*#|$)', a)
        literal_only = all(p.endswith('"') or p.startswith("#") for p in pieces) and pieces
        if not literal_only:
            name = re.findall(r"[A-Za-z_]\w*", a)
            holes.append(_hint_name(name[-1]) if name else "?")
            text.append("{}")
            continue
        for p in pieces:
            if p.startswith("#"):
                text.append("{}")
                holes.append("s")
            else:
                m = _STRING.fullmatch(p)
                text.append(_esc(_unescape(m.group(1))) if m else "{}")
    return "".join(text), "".join(holes)


def _functions(src: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of function bodies (a '{' after ``name(...)``), any nesting."""
    out: list[tuple[int, int, str]] = []
    stack: list[tuple[int, str | None]] = []
    last = 0
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == '"':
            m = _STRING.match(src, i)
            i = m.end() if m else i + 1
            continue
        if c == "{":
            head = src[last:i]
            m = _FUNC_HEAD.search(head)
            name = m.group(1) if m and m.group(1) not in _KEYWORDS else None
            stack.append((i, name))
            last = i + 1
        elif c == "}":
            if stack:
                s, name = stack.pop()
                if name:
                    out.append((s, i, name))
            last = i + 1
        elif c == ";":
            last = i + 1
        i += 1
    return out


def messages(src: str) -> Iterator[tuple[str, int, str, str, str]]:
    """(level, line, function, template, holes) of every check message in one file."""
    code = strip_comments(src)
    funcs = _functions(code)
    for m in _CALL.finditer(code):
        macro = m.group("macro")
        got = _call_args(code, m.end() - 1)
        if got is None:
            continue
        args, _ = got
        if macro is None:  # throw std::runtime_error(...)
            exc, prefix, msg_args = "RuntimeError", "", args[:1]
        else:
            exc, prefix = MACROS[macro]
            msg_args = args if macro in NO_CONDITION else args[1:]
        tmpl, holes = template_of(msg_args)
        if not re.search(r"[A-Za-z]{2}", tmpl.replace("{}", "")):
            continue
        if prefix:
            tmpl, holes = prefix + tmpl, STD_HOLES + holes
        line = code.count("\n", 0, m.start()) + 1
        inner = [f for f in funcs if f[0] < m.start() < f[1]]
        func = max(inner, key=lambda f: f[0])[2] if inner else "<file>"
        yield f"raise:{exc}", line, func, tmpl, holes


def _members(path: Path) -> Iterator[tuple[str, str]]:
    """(path from csrc/ on, text) of every C/C++ source under csrc/."""
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            rel = str(p.relative_to(path))
            if p.is_file() and "csrc/" in "/" + rel and rel.endswith(EXTENSIONS):
                yield rel[rel.index("csrc/") :], p.read_text(encoding="utf-8", errors="replace")
        return
    with tarfile.open(path) as tf:
        for mem in tf:
            name = mem.name
            parts = name.split("/")
            if mem.isfile() and len(parts) > 2 and parts[1] == "csrc" and name.endswith(EXTENSIONS):
                f = tf.extractfile(mem)
                if f is not None:
                    yield "/".join(parts[1:]), f.read().decode("utf-8", errors="replace")


def parse_source(arg: str) -> tuple[str, Path]:
    if "@" in arg:
        ver, _, p = arg.partition("@")
        return ver, Path(p)
    p = Path(arg)
    m = re.match(r"vllm-(?P<ver>[0-9][^-]*?)\.tar\.gz$", p.name)
    if m is None:
        raise SystemExit(f"{arg}: not a vLLM sdist (use VERSION@FOLDER)")
    return m.group("ver"), p


def extract(sources: list[str]) -> list[Row]:
    rows: dict[tuple[str, str, str, str], Row] = {}
    for arg in sources:
        version, path = parse_source(arg)
        nfiles = nmsg = 0
        for rel, src in _members(path):
            nfiles += 1
            for level, line, func, tmpl, holes in messages(src):
                nmsg += 1
                key = ("vllm", tmpl, level, rel)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = Row("vllm", level, rel, tmpl, holes)
                vk = version_key(version)
                if vk >= row.best:
                    row.best, row.line, row.function, row.holes = vk, line, func, holes
                row.versions.add(version)
        print(f"vllm=={version}: {nfiles} C++ files, {nmsg} messages", file=sys.stderr)
    return sorted(rows.values(), key=lambda r: (r.framework, r.file, r.line, r.template))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", help="vLLM sdist, or VERSION@FOLDER")
    ap.add_argument("-o", "--output", default="-", help="TSV file (default stdout)")
    args = ap.parse_args(argv)
    write_output(extract(args.sources), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
