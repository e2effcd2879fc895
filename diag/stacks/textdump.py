"""Stack dumps found in text: py-spy text dumps, faulthandler dumps, tracebacks.

Recognised, standalone or embedded in a log:

- py-spy's text view (``Process N: title`` / ``Python v3.x`` / ``Thread 187 (idle):
  "MainThread"`` / ``    recv (zmq/sugar/socket.py:812)``), with or without ``--native``
  frames and ``--locals`` blocks, several dumps after one another;
- SGLang's watchdog embedding (``[ts TP3] Pyspy dump for PID 187 (py-spy dump --native
  --pid 187):`` then the dump), whose log prefix gives the rank;
- faulthandler (``Thread 0x00007f71b9fff640 (most recent call first):`` / ``Current thread
  0x...`` / ``Stack (most recent call first):`` / ``  File "x.py", line 12 in f``), also
  with its header lost;
- pystack (``Traceback for thread N (...) (most recent call last):`` / ``(Python) File``);
- a Python traceback that ends in ``KeyboardInterrupt`` (someone pressed Ctrl-C on the hung
  process: where it was is where it hung). Other tracebacks are errors, not stack dumps.
- py-spy ``--json`` output pasted into a text file;
- torch c10d's ``Stack trace of the failed collective:`` report (``#0 all_reduce from
  .../distributed_c10d.py:3068``) after a collective timeout, with the rank of its prefix,
  also with its header cut off;
- gdb's ``py-bt`` (``Traceback (most recent call first):``, innermost first) and vLLM's
  ``VLLM_TRACE_FUNCTION`` call log (the calls still open at its end);
- a dump that failed (py-spy's ``Error: ...`` after the header, SGLang's ``Pyspy failed
  (... --pid N). Error: ...``): a process with no threads, its ``outcome`` and ``error``.

Lines carrying a per-line process prefix (torch's ``[rank3]:``, vLLM's ``(VllmWorker rank=3
pid=12)``, Ray's ``(RayWorkerWrapper pid=12, ip=...)``) are demultiplexed by that prefix, so
dumps of several processes interleaved in one stream come apart again. Parsing is
tolerant: a few foreign lines inside a dump (a log line written by another process) do not
end it, frames whose header was cut off become a process with no pid, and nothing raises.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from diag.model import RankId, Record, StackFrame, StackProcess, StackThread
from diag.parse.coords import TAGS_RE_SRC, Coords, match_proc_prefix, match_torch_rank, parse_tags
from diag.parse.text import fold_typography
from diag.parse.unwrap import SourceUnwrapper, unescape_entities, unwrap_line
from diag.stacks.frames import make_frame, rank_from_title, split_pyspy_frame
from diag.stacks.pyspy_json import parse_pyspy_json

__all__ = [
    "dump_lines_in",
    "extract_stack_processes",
    "parse_stack_text",
    "records_from_text",
    "split_glued_dump",
]


# (speed) the classifier and the merger are imported when a dump is found: the
# classifier's import compiles its ~120 frame patterns
def classified(p: StackProcess) -> StackProcess:
    from diag.stacks.classify import classified as classify

    return classify(p)


def merge_samples(samples: Sequence[StackProcess]) -> StackProcess:
    from diag.stacks.merge import merge_samples as merge

    return merge(samples)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# SGLang's log prefix before an embedded dump line: "[2026-07-14 08:34:44 TP3] "
_SGLANG_PREFIX = re.compile(
    r"^\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?"
    r"(?P<coords>" + TAGS_RE_SRC + r")?\]\s?",
    re.A,
)

# A log collector's bare stamp before a line (`2025-06-22 03:09:55  `, ISO `...T...Z`,
# Python logging's asctime `2025-06-22 03:09:55,123`), which the log reader's wrappers do
# not take off where it begins inside a dump (a collector that stamps only the lines after
# its own start): taken off with one separator, the dump line's own indentation kept
_BARE_STAMP = re.compile(
    r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?(?: UTC)?"
    r"(?:[ \t]|$)"
)
_WATCHDOG = re.compile(r"Pyspy dump for PID (\d+)(?: \(([^)]*)\))?")
_PROCESS = re.compile(r"^Process (\d+): ?(.*)$")
# SGLang: `Pyspy failed (py-spy dump --native --pid 12). Error: ...` (0.5.x) or
# `Pyspy failed to dump PID 12. Error: ...` (older)
_WATCHDOG_FAILED = re.compile(
    r"Pyspy failed (?:\([^)]*--pid (\d+)\)|to dump PID (\d+))\.? Error: (?:Error: )?(.*)$"
)
_PYSPY_ERROR = re.compile(r"^Error: (.+)$")
# torch c10d's collective-timeout report: `[rank0]:[E... ProcessGroupNCCL.cpp:733] Stack
# trace of the failed collective:` then `#0 all_reduce from /x/distributed_c10d.py:3068`
_C10D_HEADER = re.compile(r"Stack trace of the failed collective:")
# glibc's backtrace_symbols_fd, as a crash handler prints it (Ray's and abseil's after a
# fatal signal, torch's terminate handler): one frame a line, innermost first,
# `/x/libc.so.6(+0x94ac3) [0x7f..]` or `/x/lib.so(sym+0x1c) [0x7f..]`, the demangled name
# after it where the printer has one (`... [0x7f..] c10d::ProcessGroupNCCL::ncclCommWatchdog()`)
_BT_SYMBOLS = re.compile(
    r"^(\S*\.so[\w.]*)\(([^()\s]*)\) \[(0x[0-9a-fA-F]+)\](?: +(\S.*?))?\s*$"
)
# c10::Error's what(): "Exception raised from F at FILE:N (most recent call first):" and
# one "frame #N: symbol + 0xoff (0xaddr in lib.so)" line per native frame, innermost first
_C10_RAISED = re.compile(
    r"^Exception raised from (\S+) at (\S+?)(?::\d+)?(?: \(most recent call first\):)?$"
)
_C10_FRAME = re.compile(
    r"^frame #(\d+): (.+?)(?: \+ 0x[0-9a-fA-F]+)?(?: \((0x[0-9a-fA-F]+)(?: in ([^)]*)(\))?)?)?\s*$"
)
_C10D_FRAME = re.compile(r"^#(\d+) (.+?) from (.+):(\d+)$")
# UCX's backtrace of a caught signal (ucs/debug/debug.c, ucs_debug_backtrace_log: printed
# by any process that loaded UCX, NCCL's and NIXL's transports included):
#   [host:25036:0:25645] Caught signal 11 (Segmentation fault: ...)
#   ==== backtrace (tid:  25645) ====
#    1 0x000000000006a920 SaveProxy()  /path/src/proxy.cc:518
#   =================================
_UCX_SIGNAL = re.compile(r"^\[[^\]\s:]+:(\d+):\d+:\d+\] +Caught signal \d+")
_UCX_HEADER = re.compile(r"^=+ ?backtrace \(tid: *(\d+)\) ?=+$")
_UCX_FRAME = re.compile(r"^(\d{1,4}) +(0x[0-9a-fA-F]{4,16}) +(.*?)(?:  +(\S+))?$")
_UCX_END = re.compile(r"^={20,}$")
# a frame line of it that may open a dump whose header the paste cut: the full shape
_UCX_HEADLESS = re.compile(r"^\d{1,4} +0x[0-9a-fA-F]{8,16} +\S.*\(\)  +\S+:\d+$")
_PYSPY_CAUSE = re.compile(r"^\d+: (.+)$")
# gdb's `thread apply all bt`: `Thread 4 (Thread 0x7f33 (LWP 2618) "pt_nccl_watchdg"):`
# then `#0  0x00007f33 in __GI___poll (fds=..., nfds=1) at ../poll.c:29` / `#4  0x.. in ??
# () from /lib/libstdc++.so.6` / `#1  __futex_abstimed_wait_common (...) at x.c:87`,
# innermost first; with CPython's gdb extension also `#12 Frame 0x7f.., for file x.py,
# line 327, in wait (self=...)`
_GDB_THREAD = re.compile(
    r"^Thread (\d+) \((?:Thread (?:0x[0-9a-fA-F]+) )?\(LWP (\d+)\)(?: \"([^\"]*)\")?\):$"
)
_GDB_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-fA-F]+) in )?(.+)$")
# elfutils' eu-stack (`eu-stack -p PID`, also what some distributions' `pstack` runs):
# "PID 48211 - process", then per thread "TID 48211:" and "#0  0x00007f.. symbol" frames
# (a module after " - " with -m), innermost first
_EU_PROCESS = re.compile(r"^PID (\d+) - (\S.*)$")
_EU_THREAD = re.compile(r"^TID (\d+):$")
_EU_FRAME = re.compile(r"^#(\d+)\s+(0x[0-9a-fA-F]+)\s+(?!in\b)(\S.*?)(?: - (\S+))?$")
# lldb's `bt` / `bt all` / `thread backtrace all` (its default thread-stop-format and
# frame-format, lldb 10-19): "* thread #1, name = 'python3', stop reason = signal SIGSTOP"
# (`thread list`'s "thread #1: tid = 0x1a2b, 0x7f.. libc.so.6`sym + 9, name = '..'"), then
# "  * frame #0: 0x00007f3c5a4a3117 libc.so.6`__futex_abstimed_wait_common + 199" and
# "    frame #4: 0x000100003f2c a.out`main(argc=1, argv=0x7ff7) at main.c:10:5", innermost
# first; "Process 4242 stopped" before them names the process
_LLDB_THREAD = re.compile(r"^\*?\s*thread #(\d+)(?:[:,] (.*))?$")
_LLDB_FRAME = re.compile(
    r"^\*?\s*frame #(\d+): (0x[0-9a-fA-F]+)(?: ([^\s`]+)`(.+?))?"
    r"(?: at (\S+?:\d+)(?::\d+)?)?\s*$"
)
_LLDB_PROCESS = re.compile(r"^Process (\d+) (?:stopped|exited|resuming)\b")
_LLDB_TID = re.compile(r"\btid = (0x[0-9a-fA-F]+|\d+)")
_LLDB_NAME = re.compile(r"\bname = '([^']*)'")
# macOS `sample PID` (and Activity Monitor's "Sample Process"): after "Call graph:", each
# thread "    2630 Thread_6245862   DispatchQueue_1: com.apple.main-thread  (serial)", then
# its call tree OUTERMOST first, one node a line, deeper nodes further right behind tree
# marks ("    + 2630 start  (in dyld) + 1942  [0x18a6a60e0]", "    +   ! 12 ..."); a node's
# children are sorted by sample count, so the first child at each depth is the heaviest
# path: the stack where the thread sits
_SAMPLE_GRAPH = re.compile(r"^Call graph:$")
_SAMPLE_THREAD = re.compile(r"^(\s*)\d+ Thread_(\d+)(?:[: ]\s*(.*?))?\s*$")
_SAMPLE_FRAME = re.compile(
    r"^([\s+!:|]*?)\d+ (.+?)  \(in ([^)]*)\)(?: \+ \d+)?"
    r"(?:(?:,\w+)*  (?:load address 0x[0-9a-fA-F]+ \+ 0x[0-9a-fA-F]+  )?\[(0x[0-9a-fA-F]+)"
    r"(?:,0x[0-9a-fA-F]+)*\].*)?$"
)
_SAMPLE_END = re.compile(r"^(Total number in stack|Sort by top of stack|Binary Images:)")
_GDB_PY_FRAME = re.compile(r"Frame 0x[0-9a-fA-F]+, for file (.+?), line (\d+), in ([\w<>.]+)")
_IGNORED = re.compile(
    r"^(Parent Process \d+:|Python v\d[\w.+]*\b|py-spy \d|Error: |Caused by:)"
    # banners people put between dumps: `----- pid 1 (vllm) -----`, `===== py-spy dump
    # --pid 12`, `####### user@host #######` (they neither end nor split a dump)
    r"|^(?:-{3,}|={3,}|#{3,}|\*{3,}|\+{3,})(?:\s.*)?$"
)
# py-spy's thread header; reporters re-typing it drop the id: `Thread (idle) "MainThread"`,
# or put the name first: `Thread "engine-0" (active):`
_PYSPY_THREAD = re.compile(
    r"^Thread (?:(0x[0-9a-fA-F]+|\d+) )?(?:\"(?P<first>[^\"]*)\" )?"
    r"\(((?:idle|active|gil)(?:\+[a-z]+)*)\):?"
    r'(?: "(.*)")?:?$'
)
# Python >= 3.14 adds the OS thread name: `Thread 0x7f.. [pt_nccl_watchdg] (most ...):`
_FH_THREAD = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-fA-F]+|\d+)(?: [\[<](.*)[\]>])? "
    r"\(most recent call first\):$"
)
_FH_STACK = re.compile(r"^Stack \(most recent call first\):$")
# what faulthandler writes in a thread's place instead of frames (CPython Python/traceback.c
# dump_traceback, 3.3-3.14): "  <no Python frame>" (a thread that runs no Python: a native
# helper, or one that has not entered Python yet), "  <tstate is freed>" (3.9+); and
# _Py_DumpTracebackThreads' "  Garbage-collecting" (3.13+) under the current thread's header
_FH_NO_FRAME = frozenset({"<no Python frame>", "<tstate is freed>"})
_FH_GC = "Garbage-collecting"
# the frames left out: faulthandler's own after MAX_FRAME_DEPTH (100) frames, or a
# reporter's elision (`...`, `…`, `[...]`) under a thread's frames
# (a line a paste glued after it kept: `...# Received cancellation signal`)
_ELISION = re.compile(r"^(?:\.\.\.|\u2026|\[\.\.\.\]|\(\.\.\.\))(?!\.)")
# torch's fatal-signal stack printer: `!!!!!!! Segfault encountered !!!!!!!`, then frames as
# `File "<unknown>", line 0, in cudaMemcpyBatchAsync` (C++ symbols; Python frames with
# their file), innermost first
_SIGNAL_TRACE = re.compile(r"^!{3,} ?\w[\w ]* encountered ?!{3,}$")
_FH_C_STACK = re.compile(r"^Current thread's C stack trace|^<.*C stack trace")
# its frames (Python/traceback.c _Py_backtrace_symbols_fd, 3.14): `Binary file "/x/libc.so.6",
# at pthread_kill+0x11c [0x7f..]`, `at +0x45330 [0x7f..]` where dladdr found no symbol
_FH_C_FRAME = re.compile(
    r'^Binary file "([^"]*)", at ([^\s\[]*?)(?:[+-]0x[0-9a-fA-F]+)? \[(0x[0-9a-fA-F]+)\]$'
)
_FH_FRAME = re.compile(r'^\s*File "(.*)", line (\d+|\?\?\?) in (.+?)\s*$')
# the same frame with its start cut off (an excerpt that begins mid-line): its path's tail
_FH_FRAME_CUT = re.compile(r'^([^"\s]*\.py)", line (\d+) in ([\w<>.]+)$')
# the same frame as a reporter retyped it, the `File` word and the quotes gone and a note
# after it (`torch/storage.py line 471 in __getitem__ (UntypedStorage...)`): read only
# under an open faulthandler header, where nothing else is expected
_FH_FRAME_BARE = re.compile(r'^\s*([^\s"]+\.pyx?)"?,? line (\d+),? in ([\w<>.]+)(?:[\s:].*)?$')
_TB_HEADER = re.compile(r"^Traceback \(most recent call last\):$")
# gdb's `py-bt`: `Traceback (most recent call first):` then `  File "x.py", line 145, in f`
# (innermost first; `line ?` where gdb could not read it), `<built-in method ...>` lines
_PYBT_HEADER = re.compile(r"^Traceback \(most recent call first\):$")
# py-bt's lines for frames that are not Python code (CPython's Tools/gdb/libpython.py:
# `Waiting for the GIL` for a frame in take_gil, `<built-in method f of T object at remote
# 0x..>` for a C function); "at remote" and the GIL line are gdb's own words, so they also
# begin a py-bt whose header the paste cut
_PYBT_GIL = re.compile(r"^\s*Waiting for the GIL\s*$")
_PYBT_BUILTIN = re.compile(
    r"^\s*<built-in (?:method|function) ([\w.]+)(?: of [^<>]* at remote 0x[0-9a-fA-F]+)?>\s*$"
)
# gdb's `bt` frame `#8  0x00007f51 in cuMemcpyDtoHAsync_v2 () from /lib/libcuda.so.1`:
# one whose `Thread N (...)` header the paste cut still begins a backtrace
_GDB_HEADLESS = re.compile(r"^#(\d+)\s+(0x[0-9a-fA-F]+) in (\S.*)$")
# the same without its address, as gdb prints a frame whose pc starts a source line (frame
# #0 in a syscall wrapper, an inlined frame): `#1  __GI___lll_lock_wait (futex=..., private=0)
# at ./nptl/lowlevellock.c:49`; only with gdb's ` (args)` and a place, `at file:line` or
# `from /lib.so`, to begin a backtrace (torch's `#3 f from file:line` has neither)
_GDB_HEADLESS_BARE = re.compile(
    r"^#(\d+)\s+()(\S+ \(.*\) (?:at \S+:\d+|from /\S+\.so[\w.]*))$"
)
# a backtrace pasted with its symbols only (`#0  __sched_yield`, `#1  ncclLocalOpAppend(
# ncclComm*, ncclProxyConnector*, ncclProxyOp*)`: eu-stack's or gdb's frames with their
# addresses and places cut off by the reporter): its innermost frame, #0, a C or C++ symbol
# and nothing else, begins it
_GDB_HEADLESS_SYMBOL = re.compile(r"^#(0)\s+()([A-Za-z_~][\w:~<>]*(?:\(.*\))?)$")
# gdb's own wrap of a long frame: its place on the next line, indented (`    at
# ../nptl/pthread_mutex_lock.c:80`, `   from /x/libtorch_cpu.so`)
_GDB_WHERE = re.compile(r"^(?:at|from) (\S+)$")
_PYBT_FRAME = re.compile(r'^\s*File "(.*)", line (\d+|\?+), in (.+?)\s*$')
# (a function's name ends at a space: what follows it on the line is another line's residue,
# a progress bar a terminal drew over the traceback)
_TB_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (\S+)(?:\s.*)?$')
_PYSTACK_HEADER = re.compile(
    r"^Traceback for thread (\d+)(?: \(([^)]*)\))?.*\(most recent call last\):$"
)
# pystack's status bracket after the OS thread name: `[Has the GIL]`, `[Waiting for the GIL]`,
# `[Dropping the GIL]`, `[Garbage collecting]`, `[Thread terminated]`, or `[]`
_PYSTACK_STATUS = re.compile(r"\[([^\]]*)\] \(most recent call last\):$")
# pytest-timeout's thread method (pytest_timeout.py dump_stacks): a `~~~ Stack of NAME
# (IDENT) ~~~` title per thread, then traceback.format_stack (outermost first), between
# `+++ Timeout +++` titles
_PT_STACK = re.compile(r"^~{3,} Stack of (.+?) \((\d+)\) ~{3,}$")
_PYSTACK_FRAME = re.compile(r'^\s*\((Python|C)\) File "(.*)", line (\d+), in (.+?)\s*$')
# A signal handler's dump of sys._current_frames() (the "dumpstacks" recipe that web UIs
# and services install on SIGINT/SIGUSR1: traceback.extract_stack per thread, outermost
# first): `# Thread: NAME(IDENT)` (or `# ThreadID: IDENT`) then `File: "x.py", line 12, in
# f` and the source line indented under it
_DS_THREAD = re.compile(r"^# Thread(?:ID)?: (?:(.*?)\((\d+)\)|(\d+))$")
# (speed) every pattern _Channel._feed_header tries with ``match``, as one alternation
# (each is anchored at the line's start: the alternation matches a line iff one of them
# does): a line none of them matches, most of the lines a dump channel is fed, skips the
# chain of 23 calls (tests/test_stacks_textdump.py keeps the list in step with the chain)
_HEADER_PATTERNS = (
    _BT_SYMBOLS, _EU_PROCESS, _EU_THREAD, _EU_FRAME, _GDB_THREAD, _GDB_FRAME, _GDB_HEADLESS,
    _GDB_HEADLESS_BARE, _GDB_HEADLESS_SYMBOL,
    _C10D_FRAME, _PROCESS, _PYSPY_ERROR, _PYSPY_CAUSE, _IGNORED, _PYSPY_THREAD, _FH_THREAD,
    _FH_STACK, _FH_C_STACK, _FH_C_FRAME, _PYSTACK_HEADER, _DS_THREAD, _PT_STACK, _PYBT_HEADER,
    _SIGNAL_TRACE, _TB_HEADER,
)
_ANY_HEADER = re.compile("|".join(f"(?:{p.pattern})" for p in _HEADER_PATTERNS))
_DS_FRAME = re.compile(r'^\s*File: "(.*)", line (\d+), in (\S+)\s*$')
_INTERRUPT = re.compile(r"^\s*(?:[\w.]+\.)?KeyboardInterrupt\s*$")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::.*)?$")
_LOCALS_HEAD = re.compile(r"^\s+(Arguments|Locals):\s*$")
_LOCAL_VAR = re.compile(r"^\s*[A-Za-z_]\w*: ")
# What py-spy puts in the parentheses: file:line, or a shared object / executable.
_WHERE = re.compile(r"(:\d+|\.so[\w.\-]*|\bpython[\d.]*|\.dylib|\.dll|\.pyd|\.exe)$")
# A py-spy frame line whose indentation (and thread header) a paste lost, the frame's
# place a file:line or a shared object; an arrow or hash and words after it are the
# reporter's note on that frame ("wait   (shm_broadcast.py:196)   <- the spin"), left out
_BARE_FRAME = re.compile(
    r"^([A-Za-z_<][\w<>.:~]*\s+\((?:[^()\s]+\.pyx?:\d+|[^()\s]+\.so[\w.\-]*)\))"
    r"(?:\s+(?:<-+|\u2190|#)\s.*)?\s*$"
)
_BARE_HINT = re.compile(r"\w\s+\([^()\s]+(?:\.pyx?:\d+|\.so[\w.\-]*)\)")
_NOTE = re.compile(r"(\))\s+(?:<-+|\u2190|#)\s.*$")
# a markdown code fence (``` or ~~~, a language tag after it), up to three spaces in
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}) *([\w+\-.]*)[\w+\-. ]*$")
_FOREIGN_LIMIT = 3  # this many foreign lines in a row end a dump
_TITLE_LIMIT = 200  # lines between `Process N: title` and its first thread


@dataclass(slots=True)
class _Line:
    text: str
    source: str
    line: int
    channel: str
    rank: RankId | None = None
    title: str | None = None


def _unstamped(text: str) -> str:
    """``text`` without the bare stamps before it (:data:`_BARE_STAMP`, two at most: a
    stamp under a second collector's stamp)."""
    for round_ in range(2):
        probe = text.lstrip(" \t") if round_ else text
        if not (probe[:1].isdigit() and probe[4:5] == "-"):
            break
        m = _BARE_STAMP.match(probe)
        if m is None:
            break
        text = probe[m.end() :]
    return text


def _split_prefixes(text: str) -> tuple[str, str, RankId | None, str | None]:
    """(rest, channel, rank, title hint) of one line after its wrappers
    (:func:`diag.parse.unwrap.unwrap_line`: compose service names, container stamps ...)
    and its per-line process prefixes (:mod:`diag.parse.coords`)."""
    channel = ""
    rank: RankId | None = None
    title: str | None = None
    if text[:1] not in (" ", "\t", ""):
        text, _ = unwrap_line(text)
        text = _unstamped(text)
    outer: Coords | None = None
    for _ in range(3):
        pp = match_proc_prefix(text)
        if pp is not None:
            channel += f"pid{pp.pid}/"
            # the prefix's own words ("VllmWorker rank=3") name the process
            title = text[1 : pp.end].rsplit("pid=", 1)[0].strip() or title
            coords = pp.coords.under(outer) if pp.coords is not None else outer
            rank = (coords.rank() if coords is not None else None) or rank
            outer = coords
            text = text[pp.end :]
            continue
        tr = match_torch_rank(text)
        if tr is not None:
            channel += f"rank{tr[0]}/"
            rank = rank or RankId(tp=tr[0])
            text = text[tr[1] :]
            continue
        break
    if channel:
        text = _unstamped(text)  # a collector's stamp under a process prefix
    m = _SGLANG_PREFIX.match(text)
    if m:
        c = parse_tags(m.group("coords") or "")
        rank = (c.rank() if c is not None else None) or rank
        text = text[m.end() :]
    return text, channel, rank, title


# A line can start or continue a dump only if it is indented, is a lone "[" or contains
# one of these; while no dump is open, other lines are skipped unparsed (one search).
_CANDIDATE = re.compile(
    r'Thread |Current thread|Process \d|File "|File: (?:"|&quot;)|# Thread(?:ID)?: |Traceback|'
    r'Pyspy |Stack \(|'
    r'Stack trace|'
    r'KeyboardInterrupt|\.py", line \d+ in |^PID \d+ - |^TID \d+:|'
    r"^#\d+ |(?<=\s)#\d+ \S+ from \S|(?<=\s)#\d+ +0x[0-9a-fA-F]+ in |Stack of | encountered !|"
    r"(?<=\s)#0 +[A-Za-z_~][\w:~<>]*(?:\(.*\))?$|"  # a symbols-only backtrace's first frame
    r"\] +Caught signal \d|backtrace \(tid:|(?:^|\s)\d{1,4} 0x[0-9a-fA-F]{8,16} \S.*\(\) "  # UCX
    r"|Waiting for the GIL|<built-in (?:method|function) [\w.]+ of .* at remote 0x"  # gdb py-bt
    r"|\.so[\w.]*\([^()\s]*\) \[0x[0-9a-fA-F]+\]"  # glibc backtrace_symbols
    r"|(?:^|\s)frame #\d+: \S|Exception raised from \S+ at \S"  # c10::Error's C++ stack
    r"|^\*?\s*thread #\d+\b|^Process \d+ stopped"  # lldb
    r"|^Call graph:$"  # macOS sample
)
# Every match of _CANDIDATE holds one of these, or "#" and a digit: tested first (a few
# substring tests cost far less than the search, which has no literal prefix to skip by)
_CANDIDATE_NEEDS = ("Thread ", "Current thread", "Process ", 'File "', "File: ", "# Thread",
                    "Traceback", "Pyspy ",
                    "Stack ", "KeyboardInterrupt", '.py", line ', " encountered !",
                    "Caught signal ", "backtrace (tid:", " 0x", "PID ", "TID ",
                    "Waiting for the GIL", ") [0x", "Exception raised from ", "thread #",
                    "Call graph:")
_HASH_DIGIT = re.compile(r"#\d")


def _candidate(text: str) -> bool:
    """Whether ``_CANDIDATE`` matches somewhere in ``text`` (after the literal guard)."""
    for lit in _CANDIDATE_NEEDS:
        if lit in text:
            break
    else:
        if "#" not in text or _HASH_DIGIT.search(text) is None:
            return False
    return _CANDIDATE.search(text) is not None


def is_dump_line(text: str) -> bool:
    """Whether a line can start or carry a stack dump (a thread header, a frame)."""
    return _candidate(text)


def dump_lines_in(text: str) -> int:
    """How many dump lines (thread headers, frames) one line holds: 1 or 0, or, for a dump
    whose newlines the paste lost, the lines it is cut into again."""
    if _maybe_glued(text) and len(split_glued_dump(text)) > 1:
        # a frame place (``(file.py:12)``, ``File "x", line 12``) or a thread header each
        # began a line of the dump
        return (
            len(_GLUED_FRAMES.findall(text, 0, 20_000))
            + len(_GLUED_HEADER.findall(text, 0, 20_000))
            + len(_GLUED_GDB.findall(text, 0, 20_000))
        )
    return 1 if _candidate(text) else 0


# Ray's log deduplication (ray/_private/ray_logging.py, Ray 2.x) appends this to a line
# other workers printed too
_RAY_REPEATED = re.compile(r"\s*\[repeated \d{1,9}x across cluster\](?:\s*\(Ray dedup.*)?$")


_Split = tuple[str, str, RankId | None, str | None]


def _split_line(text: str) -> _Split:
    """:func:`_split_prefixes` of one line cleaned (ANSI codes, Ray's dedup note, no-break
    spaces)."""
    clean = _ANSI.sub("", text).rstrip("\r\n ")
    if clean.endswith("]") or "(Ray dedup" in clean:
        clean = _RAY_REPEATED.sub("", clean)
    if not clean.isascii():  # a paste through a web page or an app: no-break spaces,
        clean = fold_typography(clean)  # typographic quotes
    if "&" in clean and ";" in clean:
        # copied from an HTML view: a record's raw line keeps its entities (the log reader
        # decodes its message only): `File: &quot;x.py&quot;, line 12, in f`
        clean = unescape_entities(clean)
    return _split_prefixes(clean)


def _line_of(rec: Record, text: str, offset: int, seen: dict[str, _Split] | None = None) -> _Line:
    """The line ``text`` (line ``offset`` of record ``rec``); ``seen``: the lines split
    so far, by their text (a dump's lines recur: every rank prints the same frames)."""
    split = None if seen is None else seen.get(text)
    if split is None:
        split = _split_line(text)
        if seen is not None:
            seen[text] = split
    rest, channel, rank, title = split
    if rank is None and not channel and rec.rank is not None and offset == 0:
        rank = rec.rank
    return _Line(rest, rec.source, rec.line + offset, channel, rank, title)


@dataclass(slots=True)
class _Thread:
    tid: int | None
    name: str | None
    status: str | None
    frames: list[StackFrame] = field(default_factory=list)
    outer_first: bool = False
    current: bool = False  # faulthandler's `Current thread` (or its lone `Stack`)
    cstack: list[StackFrame] = field(default_factory=list)  # its C stack, innermost first
    calls: dict[int, str] = field(default_factory=dict)  # frame index -> source line under it
    no_python: bool = False  # faulthandler wrote `<no Python frame>` in its frames' place
    elided: bool = False  # `...` under its frames: the outer ones left out


@dataclass(slots=True)
class _Proc:
    kind: str  # text | faulthandler | pystack | traceback | c10 | ...
    source: str
    line: int
    pid: int | None = None
    title: str | None = None
    rank: RankId | None = None
    threads: list[_Thread] = field(default_factory=list)
    error: str | None = None  # the dump failed: py-spy's own message

    def build(self) -> StackProcess | None:
        threads = []
        for t in self.threads:
            frames_in = t.frames
            call = t.calls.get(len(t.frames) - 1) if t.outer_first and t.frames else None
            if call is not None:
                # the innermost frame's source line: the call that raised (a C function
                # has no frame of its own: `.tolist()`, `store.get()`)
                frames_in = [*t.frames[:-1], replace(t.frames[-1], call=call)]
            frames = tuple(reversed(frames_in)) if t.outer_first else tuple(frames_in)
            if t.cstack:
                frames = (*_crash_site(t.cstack), *frames)
            threads.append(
                StackThread(
                    thread_id=t.tid,
                    name=t.name,
                    frames=frames,
                    idle=_idle(t.status),
                    owns_gil=None if t.status is None else "gil" in t.status.split("+"),
                    current=t.current,
                    elided=t.elided,
                )
            )
        rank = rank_from_title(self.title) or self.rank
        if not any(t.frames for t in threads) and not (
            # faulthandler's threads that run no Python (each says `<no Python frame>`):
            # a process in sight, its threads native helpers (classify: an idle loop)
            self.kind == "faulthandler" and self.threads
            and all(t.no_python and not t.cstack for t in self.threads)
        ):
            if self.error is None or self.pid is None:
                return None
            return StackProcess(
                pid=self.pid,
                title=self.title,
                threads=(),
                rank=rank,
                outcome=_failure_outcome(self.error),
                mode=self.kind,
                error=self.error,
                source=self.source,
                line=self.line,
            )
        return classified(
            StackProcess(
                pid=self.pid,
                title=self.title,
                threads=tuple(threads),
                rank=rank,
                mode=self.kind,
                source=self.source,
                line=self.line,
            )
        )


# The frames of a C stack trace before the crash site: faulthandler's own (_Py_DumpStack,
# the handler, in the interpreter's binary) and the C library's signal trampoline.
_PY_BINARY = re.compile(r"(^|/)(python[\d.]*t?d?|libpython[\w.]*\.so[\w.]*)$")
_LIBC = re.compile(r"(^|/)(libc|libpthread)[.-]")


def _c_frame(path: str, symbol: str, address: str) -> StackFrame:
    """One frame of faulthandler's C stack trace; a C++ symbol as dladdr gives it (mangled)
    is read back to its qualified name, a frame without a symbol is its address."""
    name = _demangle(symbol) if symbol else address
    return replace(make_frame(name, path), native=True)


def _crash_site(frames: list[StackFrame]) -> list[StackFrame]:
    """The C frames from where the signal was raised: the handler's frames in the
    interpreter and the C library's before it are cut (an abort's raise/pthread_kill in
    the C library stays, from the first frame of another library on)."""
    for i, f in enumerate(frames):
        if not (_PY_BINARY.search(f.filename) or _LIBC.search(f.filename)):
            return frames[i:]
    return []


def _demangle(symbol: str) -> str:
    """``_ZN4c10d16ProcessGroupNCCL9allreduceERSt6vectorI...`` -> ``c10d::ProcessGroupNCCL::
    allreduce``: the Itanium ABI's nested name (or plain ``_Z<len><name>``) read far enough
    for the rules' names; anything else is returned as it is (extern "C" names are plain)."""
    if not symbol.startswith("_Z"):
        return symbol
    text, i = symbol, 2
    nested = text.startswith("_ZN")
    if nested:
        i = 3
        while i < len(text) and text[i] in "rVKRO":
            i += 1
    parts: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            n = int(text[i:j])
            if n <= 0 or j + n > len(text):
                break
            parts.append(text[j : j + n])
            i = j + n
            if not nested:
                break
        elif ch in "CD" and i + 1 < len(text) and text[i + 1] in "0123" and parts:
            parts.append(("~" if ch == "D" else "") + parts[-1])
            i += 2
        elif ch == "I":  # template arguments: not needed for a name the rules read
            depth, i = 1, i + 1
            while i < len(text) and depth:
                depth += {"I": 1, "E": -1}.get(text[i], 0)
                i += 1
        elif ch == "S" and text.startswith("St", i):  # std::
            parts.append("std")
            i += 2
        else:
            break
    return "::".join(parts) if parts else symbol


# the start of a traceback, faulthandler, py-bt or pystack frame line
_FRAME_HEAD = re.compile(r'^\s*(?:\((?:Python|C)\) )?File(?::? "|:?$)')


def _calls(line: str, func: str) -> bool:
    """Whether a frame's source line calls a function of this name."""
    name = func.rsplit(".", 1)[-1]
    return bool(name) and re.search(rf"(?<![\w]){re.escape(name)}\s*\(", line) is not None


def _inner_first(thread: _Thread) -> bool:
    """Whether a headerless frame run's source lines prove it innermost first: some frame's
    call names the frame printed before it, none names the frame printed after it."""
    frames, calls = thread.frames, thread.calls
    inner = outer = 0
    for i in range(len(frames) - 1):
        upper, lower = frames[i], frames[i + 1]
        if upper.name == lower.name:
            continue  # recursion (or a super() call) proves no order
        if i + 1 in calls and _calls(calls[i + 1], upper.name):
            inner += 1
        if i in calls and _calls(calls[i], lower.name):
            outer += 1
    return inner > 0 and outer == 0


def _join_wrapped(pieces: list[str]) -> str | None:
    """A frame line's pieces joined again, or None: inside the quoted file name (an odd
    number of quotes so far) with nothing, a path holds no space; elsewhere with a space (a
    word wrap) or nothing (a wrap at a fixed width, mid-word), whichever makes a whole
    frame whose function name has no space."""
    first = pieces[0].rstrip()
    rest = [p.strip() for p in pieces[1:]]
    for seps in itertools.product((" ", ""), repeat=len(rest)):
        out = first
        for sep, piece in zip(seps, rest, strict=True):
            out += ("" if out.count('"') % 2 else sep) + piece
        m = _complete_frame(out)
        if m is not None and not any(ch.isspace() for ch in m.group(m.lastindex or 0)):
            return out
    return None


def _complete_frame(text: str) -> re.Match[str] | None:
    return (
        _FH_FRAME.match(text)
        or _TB_FRAME.match(text)
        or _PYSTACK_FRAME.match(text)
        or _PYBT_FRAME.match(text)
        or _DS_FRAME.match(text)
    )


def _idle(status: str | None) -> bool | None:
    """py-spy's thread state: ``idle``, ``active``, ``active+gil``, ``idle+gil``, ``gil``."""
    if status is None:
        return None
    parts = status.split("+")
    if "idle" in parts:
        return True
    if "active" in parts:
        return False
    return None


def _strip_group(text: str) -> str:
    """``name (args)`` -> ``name``: the final balanced parenthesised group off."""
    text = text.rstrip()
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip()
    return text


def _gdb_frame(address: str | None, rest: str) -> StackFrame | None:
    """One frame of gdb's ``bt``: a Python frame of CPython's gdb extension, or a native
    frame named without its arguments and C++ signature (``c10d::TCPStore::doWait``), its
    place ``at file:line`` or ``from lib.so``; ``??`` is the address in its library."""
    m = _GDB_PY_FRAME.search(rest)
    if m:
        return make_frame(m.group(3), f"{m.group(1)}:{m.group(2)}")
    where = ""
    for sep in (" from ", " at "):
        head, found, tail = rest.rpartition(sep)
        if found and ("/" in tail or "." in tail) and " " not in tail.strip():
            rest, where = head, tail.strip()
            break
    name = _strip_group(rest)  # the arguments
    if "::" in name or name.endswith(")"):
        name = _strip_group(name)  # a C++ signature
    name = re.sub(r"^__GI_+", "__", name).strip()
    if not name or name == "??":
        if address is None:
            return None
        name = address
    frame = make_frame(name, where or "??")
    return replace(frame, native=True)


def _ucx_frame(address: str, name: str, where: str | None) -> StackFrame:
    """One frame of UCX's backtrace: ``SaveProxy()`` at ``proxy.cc:518``; ``???()`` is
    the address in its library; a name the paste cut (``operator()<``) is kept as cut.
    The signal trampoline (``__sigaction``) stays the innermost frame: the site is above."""
    name = name.strip()
    if name.endswith("()"):
        name = name[:-2]
    if not name or name.strip("?") == "":
        name = f"{address} in {where}" if where else address
    if where is not None and where.endswith(":0"):
        where = where[:-2]  # no line known
    return replace(make_frame(name, where or "??"), native=True)


def _pystack_status(header: str) -> str | None:
    """py-spy's vocabulary for pystack's status bracket: a thread that has the GIL runs
    Python (``active+gil``); any other bracket says nothing about whether it runs."""
    m = _PYSTACK_STATUS.search(header)
    if m is None:
        return None
    flags = {f.strip() for f in m.group(1).split(",")}
    return "active+gil" if "Has the GIL" in flags else None


def _failure_outcome(error: str) -> str:
    """StackProcess.outcome for a dump py-spy could not take, from its message."""
    low = error.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return "permission_denied"
    if "no such file" in low or "no such process" in low or "is running" in low:
        return "not_found"
    return "partial"


def _int_id(text: str) -> int:
    return int(text[:40], 16) if text.lower().startswith("0x") else _small(text)


def _small(text: str) -> int:
    """A pid, thread id or line number from a dump: a digit run past 18 digits (a hostile
    or garbled dump) reads as 0 instead of reaching ``int()``'s 4300-digit limit."""
    return int(text) if len(text) <= 18 else 0


@dataclass(slots=True)
class _Pending:
    pid: int
    rank: RankId | None


# lldb's `bt`: `frame #2: 0x00007fb090db0b85 libtorch_cuda.so`c10d::X::f(args) + 725` (and
# ` at file.cc:217:18` where it has the line): address, module and symbol
_LLDB_SYMBOL = re.compile(r"^0x[0-9a-fA-F]+ ([^\s`]+)`(.+?)(?: \+ \d+)?(?: at \S+)?$")


def _c10_frame(m: re.Match[str]) -> StackFrame:
    """One ``frame #N: symbol + 0xoff (0xaddr in lib.so)`` line of c10::Error's stack (or
    of lldb's backtrace, which numbers its frames the same way)."""
    name = m.group(2).strip()
    lldb = _LLDB_SYMBOL.match(name)
    if lldb:
        return replace(make_frame(_strip_group(lldb.group(2).strip()), lldb.group(1)), native=True)
    if "::" in name or name.endswith(")"):
        name = _strip_group(name)
    if not name or name.startswith("<unknown"):
        name = m.group(3) or name
    lib = (m.group(4) or "??").rsplit("/", 1)[-1]
    return replace(make_frame(name, lib), native=True)


class _Channel:
    """The parser state of one demultiplexed stream of lines."""

    def __init__(
        self, out: list[StackProcess], key: tuple[str, str],
        raised: list[StackProcess] | None = None,
        cut: list[StackProcess] | None = None,
        text_start: list[int] | None = None,
    ) -> None:
        self.out = out
        # the line the source's text begins after: 0, or a code fence's (shared)
        self.text_start = text_start if text_start is not None else [0]
        self.key = key
        # tracebacks that ended in an exception (or were cut): where a thread was when it
        # raised; processes of their own where the source holds no dump (extract_stack_processes)
        self.raised: list[StackProcess] = raised if raised is not None else []
        # those of them that the text's end cut before any exception line
        self.cut: list[StackProcess] = cut if cut is not None else []
        self.tb_frame_at: tuple[str, int] | None = None  # the open traceback's last frame
        self.proc: _Proc | None = None
        self.thread: _Thread | None = None
        self.pending: _Pending | None = None
        self.locals = False
        self.foreign = 0
        self.tb: _Proc | None = None
        self.json: list[str] | None = None
        self.json_at: _Line | None = None
        self.pybt = False  # the open thread is gdb py-bt's (innermost first)
        self.gdb = False  # the open process is gdb's native `bt`
        self.ucx = False  # the open process is UCX's signal backtrace
        self.btsym = False  # the open process is glibc's backtrace_symbols list
        self.lldb = False  # the open process is lldb's backtrace
        self.sample: int | None = None  # macOS sample's call tree: the column of its last node
        self.ucx_pid: int | None = None  # the pid of UCX's 'Caught signal' line before it
        self.cstack: _Thread | None = None  # the thread a C stack trace being read is of
        self.partial: list[_Line] = []  # a frame line held (a word wrap may have cut it)
        # torch's C++ frames under a raised exception (c10::Error's "Exception raised from"):
        # the index in self.raised of the traceback they belong to, the lines they may
        # still be apart from it, and the frames read so far
        self.c10_for: int | None = None
        self.c10_gap = 0
        self.c10_frames: list[StackFrame] | None = None
        self.c10_open = False  # the last header or frame line may go on in the next line

    @property
    def in_c10d(self) -> bool:
        return self.proc is not None and self.proc.kind == "c10d"

    @property
    def busy(self) -> bool:
        return not (
            self.proc is None
            and self.tb is None
            and self.json is None
            and self.pending is None
            and not self.partial
            and self.c10_for is None
        )

    # -- emitting ----------------------------------------------------------------------
    def close(self) -> None:
        if self.proc is not None:
            built = self.proc.build()
            if built is not None:
                self.out.append(built)
        self.proc = None
        self.thread = None
        self.locals = False
        self.foreign = 0
        self.pybt = False
        self.gdb = False
        self.ucx = False
        self.btsym = False
        self.lldb = False
        self.sample = None
        self.cstack = None

    def _open(
        self, ln: _Line, kind: str, pid: int | None = None, title: str | None = None
    ) -> _Proc:
        self.close()
        rank = ln.rank
        if self.pending is not None and (pid is None or self.pending.pid == pid):
            rank = self.pending.rank or rank
            pid = pid if pid is not None else self.pending.pid
            self.pending = None
        self.proc = _Proc(kind, ln.source, ln.line, pid, title or ln.title, rank)
        return self.proc

    def _new_thread(
        self,
        proc: _Proc,
        tid: int | None,
        name: str | None,
        status: str | None,
        outer_first: bool = False,
    ) -> None:
        self.thread = _Thread(tid, name, status, outer_first=outer_first)
        proc.threads.append(self.thread)
        self.locals = False
        self.cstack = None

    # -- feeding -------------------------------------------------------------------------
    def feed(self, ln: _Line) -> None:
        """One line; a frame line a word wrap broke (``File "/x/site-`` /
        ``packages/torch/...py", line 12 in`` / ``all_reduce``) is held, up to three more
        lines, until they complete it; lines that do not are fed as they came."""
        held = self.partial
        if held:
            head = held[0]
            parts = [*held, ln]
            joined = _join_wrapped([x.text for x in parts])
            if joined is not None:
                self.partial = []
                self._feed(
                    _Line(joined, head.source, head.line, head.channel, head.rank, head.title)
                )
                return
            if len(parts) <= 3 and not _FRAME_HEAD.match(ln.text) and ln.text.strip():
                self.partial = parts
                return
            self.partial = []
            for x in held:
                self._feed(x)
        if _FRAME_HEAD.match(ln.text) and not _complete_frame(ln.text):
            self.partial = [ln]
            return
        self._feed(ln)

    def _feed(self, ln: _Line) -> None:
        text = ln.text
        stripped = text.strip()
        if self.json is not None and self._feed_json(ln, stripped):
            return
        if stripped == "[" and self.tb is None:
            self.json, self.json_at = [text], ln
            return
        if self.tb is not None and self._feed_traceback(ln, text, stripped):
            return
        if self.c10_for is not None and self._feed_c10(stripped):
            return
        m = _WATCHDOG.search(text) if "Pyspy " in text else None
        if m:
            self.close()
            self.pending = _Pending(_small(m.group(1)), ln.rank)
            return
        m = _WATCHDOG_FAILED.search(text) if "Pyspy " in text else None
        if m:
            # SGLang's watchdog could not dump this pid: record the failure, with its rank
            self.close()
            pid = _small(m.group(1) or m.group(2))
            failed = _Proc("text", ln.source, ln.line, pid, None, ln.rank, error=m.group(3))
            built = failed.build()
            if built is not None:
                self.out.append(built)
            self.pending = None
            return
        if self.gdb and self.thread is not None and self._feed_gdb_where(stripped):
            return
        if self._feed_header(ln, stripped):
            self.foreign = 0
            return
        if self._feed_frame(ln, text, stripped):
            self.foreign = 0
            return
        if not stripped:
            return
        self.foreign += 1
        # a process title may span lines (`python -c` with a multi-line program)
        header_only = self.proc is not None and not self.proc.threads and self.proc.error is None
        limit = _TITLE_LIMIT if header_only else _FOREIGN_LIMIT
        if self.foreign >= limit:
            self.close()
            self.pending = None  # a watchdog header whose dump never came

    def _feed_gdb_where(self, stripped: str) -> bool:
        """gdb's wrapped frame: the place (``at file:line`` / ``from lib.so``) of the frame
        before, alone on the next line."""
        m = _GDB_WHERE.match(stripped)
        frames = self.thread.frames if self.thread is not None else None
        if m is None or not frames or frames[-1].filename != "??" or not frames[-1].native:
            return False
        last = frames[-1]
        frames[-1] = replace(make_frame(last.name, m.group(1)), native=True)
        return True

    def _take_ucx_pid(self) -> int | None:
        """The pid of the 'Caught signal' line before a UCX dump: its dump's, once."""
        pid, self.ucx_pid = self.ucx_pid, None
        return pid

    def _feed_ucx(self, ln: _Line, stripped: str) -> bool:
        """UCX's signal backtrace: its header (or, where the paste cut it, a frame 0),
        its frames innermost first, its closing rule."""
        m = _UCX_SIGNAL.match(stripped)
        if m:
            self.ucx_pid = _small(m.group(1))
            return True
        m = _UCX_HEADER.match(stripped)
        if m:
            proc = self._open(ln, "ucx", self._take_ucx_pid())
            self._new_thread(proc, _small(m.group(1)), None, None)
            self.thread.current = True  # type: ignore[union-attr]  # the signal's thread
            self.ucx = True
            return True
        m = _UCX_FRAME.match(stripped)
        if m is None:
            if self.ucx and _UCX_END.match(stripped):
                self.close()
                return True
            return False
        if not self.ucx:
            if self.proc is not None or self.tb is not None or not _UCX_HEADLESS.match(stripped):
                return False
            # frames whose header the paste cut: frame 0 is UCX's own signal trampoline
            proc = self._open(ln, "ucx", self._take_ucx_pid())
            self._new_thread(proc, None, None, None)
            self.thread.current = True  # type: ignore[union-attr]
            self.ucx = True
        if self.thread is not None:
            self.thread.frames.append(_ucx_frame(m.group(2), m.group(3), m.group(4)))
        return True

    def _eu_thread(self, ln: _Line, tid: int | None) -> None:
        """eu-stack's ``TID n:``: a thread of the open eu-stack process (or a new one)."""
        cur = self.proc if self.proc is not None and self.proc.kind == "gdb" else None
        if cur is None or any(t.tid == tid for t in cur.threads):
            cur = self._open(ln, "gdb")
            cur.pid = cur.pid or tid
        main = cur.pid is not None and tid == cur.pid
        self._new_thread(cur, tid, "MainThread" if main else None, None)
        self.gdb = True

    def _feed_sample(self, ln: _Line, stripped: str) -> bool:
        """macOS sample's call graph (:data:`_SAMPLE_GRAPH`): per thread, the first child
        at each depth (the heaviest path), outermost first."""
        if _SAMPLE_GRAPH.match(stripped):
            self._open(ln, "sample")
            self.sample = -1
            return True
        if self.sample is None or self.proc is None or self.proc.kind != "sample":
            return False
        if _SAMPLE_END.match(stripped):
            self.close()
            return True
        m = _SAMPLE_THREAD.match(ln.text)
        if m:
            rest = m.group(3) or ""
            name = "MainThread" if "com.apple.main-thread" in rest else (rest.strip() or None)
            self._new_thread(self.proc, _small(m.group(2)), name, None, outer_first=True)
            self.sample = -1
            return True
        m = _SAMPLE_FRAME.match(ln.text)
        if m and self.thread is not None:
            column = len(m.group(1))
            if column > self.sample >= -1:
                self.sample = column
                symbol, lib, address = m.group(2).strip(), m.group(3), m.group(4) or "0x0"
                if symbol == "???":
                    symbol = ""
                self.thread.frames.append(_c_frame(lib, _strip_group(symbol), address))
            else:
                self.sample = -2  # a sibling of a node on the path: the path ended
            return True
        return not stripped  # blank lines inside the graph

    def _feed_lldb(self, ln: _Line, stripped: str) -> bool:
        """lldb's process, thread and frame lines (:data:`_LLDB_THREAD`)."""
        m = _LLDB_PROCESS.match(stripped)
        if m:
            self._open(ln, "lldb", _small(m.group(1)))
            self.lldb = True
            return True
        m = _LLDB_THREAD.match(stripped)
        if m:
            proc = self.proc if self.lldb and self.proc is not None else None
            if proc is None:
                proc = self._open(ln, "lldb")
                self.lldb = True
            rest = m.group(2) or ""
            tid_m = _LLDB_TID.search(rest)
            name_m = _LLDB_NAME.search(rest)
            tid = _int_id(tid_m.group(1)) if tid_m else None
            # lldb numbers the process's first thread 1 (the main thread)
            name = "MainThread" if m.group(1) == "1" else (name_m.group(1) if name_m else None)
            if m.group(1) == "1" and proc.title is None and name_m is not None:
                comm = name_m.group(1)
                if not re.match(r"^(python[\d.]*|pt_main_thread)$", comm):
                    proc.title = comm
            self._new_thread(proc, tid, name, None)
            return True
        if self.lldb and self.thread is not None:
            m = _LLDB_FRAME.match(stripped)
            if m:
                address, module, symbol, where = m.group(2), m.group(3), m.group(4), m.group(5)
                if symbol is not None:
                    symbol = re.sub(r" \+ \d+$", "", symbol.strip())
                    if symbol.startswith("___lldb_unnamed_symbol"):
                        symbol = ""
                    elif symbol.endswith(")"):
                        symbol = _strip_group(symbol)
                frame = _c_frame(module or "??", symbol or "", address)
                if where and symbol:
                    frame = replace(frame, filename=module or where)
                self.thread.frames.append(frame)
                return True
        return False

    def _feed_header(self, ln: _Line, stripped: str) -> bool:
        if (
            stripped[:1] in "<G" and self.thread is not None and self.proc is not None
            and self.proc.kind == "faulthandler" and not self.thread.frames
            and (stripped == _FH_GC or stripped in _FH_NO_FRAME)
        ):
            if stripped != _FH_GC:
                self.thread.no_python = True
            return True
        if (
            stripped[:1] in ".[(\u2026" and self.thread is not None and self.thread.frames
            and _ELISION.search(stripped)
            and self.proc is not None and self.proc.kind == "faulthandler"
        ):
            self.thread.elided = True
            return True
        if (self.ucx or stripped[:1].isdigit() or stripped[:1] in "=[") and self._feed_ucx(
            ln, stripped
        ):
            return True
        if stripped[:1] in ("*", "t", "f", "P") and self._feed_lldb(ln, stripped):
            return True
        if (stripped[:1] == "C" or self.sample is not None) and self._feed_sample(ln, stripped):
            return True
        if stripped[:1] in ("E", "f") and self._feed_c10_alone(ln, stripped):
            return True
        if _C10D_HEADER.search(stripped):
            self._new_thread(self._open(ln, "c10d"), None, None, None)
            return True
        if self.cstack is None and _ANY_HEADER.match(stripped) is None:
            return False  # (speed) what the chain below returns when no pattern matches
        m = _BT_SYMBOLS.match(stripped)
        if m:
            if not (self.btsym and self.thread is not None):
                self._new_thread(self._open(ln, "gdb"), None, None, None)
                self.btsym = True
            assert self.thread is not None
            path, symbol, address, shown = m.groups()
            if shown:
                name = _strip_group(shown) if shown.endswith(")") else shown
                bt_frame = replace(make_frame(name, path), native=True)
            else:
                plain = "" if symbol.startswith("+") else symbol.split("+")[0]
                bt_frame = _c_frame(path, plain, address)
            self.thread.frames.append(bt_frame)
            return True
        m = _EU_PROCESS.match(stripped)
        if m:
            self._open(ln, "gdb").pid = _small(m.group(1))
            self.gdb = True
            return True
        m = _EU_THREAD.match(stripped)
        if m:
            self._eu_thread(ln, _small(m.group(1)))
            return True
        if self.gdb and self.thread is not None:
            m = _EU_FRAME.match(stripped)
            if m:
                where = f" from {m.group(4)}" if m.group(4) else ""
                frame = _gdb_frame(m.group(2), m.group(3) + where)
                if frame is not None:
                    self.thread.frames.append(frame)
                return True
        m = _GDB_THREAD.match(stripped)
        if m:
            proc = self.proc if self.proc is not None and self.proc.kind == "gdb" else None
            lwp = _small(m.group(2))
            if proc is None or any(t.tid == lwp for t in proc.threads):
                proc = self._open(ln, "gdb")
            main = m.group(1) == "1"  # gdb numbers the main thread 1 (its LWP is the pid)
            if main:
                proc.pid = lwp
                comm = m.group(3)
                if comm and not re.match(r"^(python[\d.]*|pt_main_thread)$", comm):
                    proc.title = proc.title or comm  # the process title: VLLM::Worker_TP0
            self._new_thread(proc, lwp, "MainThread" if main else m.group(3), None)
            self.gdb = True
            self.pybt = False
            return True
        if self.gdb and self.thread is not None:
            m = _GDB_FRAME.match(stripped)
            if m:
                frame = _gdb_frame(m.group(2), m.group(3))
                if frame is not None:
                    self.thread.frames.append(frame)
                return True
        m = (
            _GDB_HEADLESS.match(stripped) or _GDB_HEADLESS_BARE.match(stripped)
            or _GDB_HEADLESS_SYMBOL.match(stripped)
        )
        if m and not self.gdb and self.proc is None and self.tb is None:
            # gdb frames whose thread header the paste cut: one thread of an unknown process
            self._new_thread(self._open(ln, "gdb"), None, None, None)
            self.gdb = True
            frame = _gdb_frame(m.group(2) or None, m.group(3))
            if frame is not None and self.thread is not None:
                self.thread.frames.append(frame)
            return True
        m = _C10D_FRAME.match(stripped)
        if m and not self.in_c10d and self.proc is None and self.tb is None:
            # torch's `#N f from file:line` frames whose header was cut off: only torch's
            # failed-collective report (ProcessGroupNCCL) prints this shape
            self._new_thread(self._open(ln, "c10d"), None, None, None)
        if m and self.in_c10d and self.thread is not None:
            where = f"{m.group(3)}:{m.group(4)}"
            self.thread.frames.append(make_frame(m.group(2), where))
            return True
        m = _PROCESS.match(stripped)
        if m:
            self._open(ln, "text", _small(m.group(1)), m.group(2).strip() or None)
            return True
        proc = self.proc
        if proc is not None and proc.kind == "text" and not proc.threads:
            m = _PYSPY_ERROR.match(stripped)
            if m:  # py-spy's own failure, after the header (or SGLang's failure line)
                proc.error = m.group(1) if proc.error is None else proc.error
                return True
            m = _PYSPY_CAUSE.match(stripped)
            if m and proc.error is not None:
                if m.group(1) not in proc.error:
                    proc.error += f"; {m.group(1)}"
                return True
        if _IGNORED.match(stripped):
            return True
        m = _PYSPY_THREAD.match(stripped)
        if m:
            proc = self.proc if self.proc is not None and self.proc.kind == "text" else None
            if proc is None:
                proc = self._open(ln, "text")
            tid = _int_id(m.group(1)) if m.group(1) else None
            self._new_thread(proc, tid, m.group(4) or m.group("first"), m.group(3))
            return True
        m = _FH_THREAD.match(stripped)
        if m or _FH_STACK.match(stripped):
            tid = _int_id(m.group(2)) if m else None
            proc = self.proc if self.proc is not None and self.proc.kind == "faulthandler" else None
            if proc is None or (tid is not None and any(t.tid == tid for t in proc.threads)):
                proc = self._open(ln, "faulthandler")
            self._new_thread(proc, tid, m.group(3) if m else None, None)
            assert self.thread is not None
            self.thread.current = m is None or m.group(1) == "Current thread"
            return True
        if _FH_C_STACK.match(stripped):
            # Python >= 3.14: the C stack of the current thread, after its Python frames
            proc = self.proc if self.proc is not None and self.proc.kind == "faulthandler" else None
            current = [t for t in proc.threads if t.current] if proc is not None else []
            self.cstack = current[-1] if current else None
            self.thread = None
            return True
        if self.cstack is not None:
            m = _FH_C_FRAME.match(stripped)
            if m:
                self.cstack.cstack.append(_c_frame(m.group(1), m.group(2), m.group(3)))
                return True
            if stripped.startswith("<") and stripped.endswith(">"):
                return True  # <truncated rest of calls>, <system returned no stack trace>
        m = _PYSTACK_HEADER.match(stripped)
        if m:
            proc = self.proc if self.proc is not None and self.proc.kind == "pystack" else None
            tid = _small(m.group(1))
            if proc is None or any(t.tid == tid for t in proc.threads):
                proc = self._open(ln, "pystack")
            self._new_thread(proc, tid, None, _pystack_status(stripped), outer_first=True)
            return True
        m = _DS_THREAD.match(stripped)
        if m:
            proc = self.proc if self.proc is not None and self.proc.kind == "dumpstacks" else None
            tid = _small(m.group(2) or m.group(3))
            if proc is None or any(t.tid == tid for t in proc.threads):
                proc = self._open(ln, "dumpstacks")
            self._new_thread(proc, tid, m.group(1) or None, None, outer_first=True)
            return True
        m = _PT_STACK.match(stripped)
        if m:
            kind = "pytest_timeout"
            proc = self.proc if self.proc is not None and self.proc.kind == kind else None
            tid = _small(m.group(2))
            if proc is None or any(t.tid == tid for t in proc.threads):
                proc = self._open(ln, kind)
            name = None if m.group(1) == "<unknown>" else m.group(1)
            self._new_thread(proc, tid, name, None, outer_first=True)
            return True
        if _PYBT_HEADER.match(stripped) and self.gdb and self.thread is not None and (
            not self.thread.frames
        ):
            # `thread apply all py-bt`: the Python stack of the gdb thread just headed
            self.pybt = True
            return True
        if _PYBT_HEADER.match(stripped) or _SIGNAL_TRACE.match(stripped):
            self._new_thread(self._open(ln, "faulthandler"), None, None, None)
            self.pybt = True
            return True
        if _TB_HEADER.match(stripped):
            self.tb = _Proc("traceback", ln.source, ln.line, None, ln.title, ln.rank)
            self.tb.threads.append(_Thread(None, None, None, outer_first=True))
            return True
        return False

    def _feed_frame(self, ln: _Line, text: str, stripped: str) -> bool:
        gil = _PYBT_GIL.match(text)
        builtin = None if gil else _PYBT_BUILTIN.match(text)
        if (gil or (builtin and "at remote 0x" in text)) and not self.pybt and (
            self.proc is None and self.tb is None
        ):
            self._new_thread(self._open(ln, "faulthandler"), None, None, None)
            self.pybt = True  # a py-bt whose `Traceback (most recent call first):` was cut
        if self.pybt and self.thread is not None and (gil or builtin):
            name = "take_gil" if gil else builtin.group(1)  # type: ignore[union-attr]
            self.thread.frames.append(replace(make_frame(name, ""), native=True))
            return True
        if self.pybt and self.thread is not None and self.proc is not None:
            m = _PYBT_FRAME.match(text)
            if m:
                lineno = m.group(2)
                where = f"{m.group(1)}:{lineno}" if lineno.isdigit() else m.group(1)
                frame = make_frame(m.group(3), where)
                if m.group(1) == "<unknown>":  # a C/C++ symbol of torch's signal printer
                    frame = replace(frame, native=True)
                self.thread.frames.append(frame)
                return True
        m = _PYSTACK_FRAME.match(text)
        if m and (self.thread is None or self.proc is None or self.proc.kind != "pystack"):
            # pystack frames whose `Traceback for thread` header was cut off
            self._new_thread(self._open(ln, "pystack"), None, None, None, outer_first=True)
        if m and self.thread is not None and self.proc is not None and self.proc.kind == "pystack":
            name = re.sub(r" \([^()]*\)$", "", m.group(4)) if m.group(1) == "C" else m.group(4)
            if name != "???":
                line = _small(m.group(3)) or None
                where = (
                    m.group(2) if m.group(1) == "Python" else m.group(4)[len(name) :].strip(" ()")
                )
                frame = make_frame(name, f"{where}:{line}" if line else where)
                if m.group(1) == "C":
                    frame = replace(frame, native=True)
                self.thread.frames.append(frame)
            return True
        m = _DS_FRAME.match(text)
        if m and self.tb is None:
            if self.thread is None or self.proc is None or self.proc.kind != "dumpstacks":
                # frames whose `# Thread:` header the paste cut
                self._new_thread(self._open(ln, "dumpstacks"), None, None, None, outer_first=True)
            assert self.thread is not None
            self.thread.frames.append(make_frame(m.group(3), f"{m.group(1)}:{m.group(2)}"))
            return True
        if (
            self.thread is not None and self.proc is not None and self.proc.kind == "dumpstacks"
            and self.tb is None and text[:1] in (" ", "\t")
        ):
            return True  # the source line under a frame
        if (
            self.thread is not None
            and self.proc is not None
            and self.proc.kind == "pytest_timeout"
            and self.tb is None
        ):
            m = _TB_FRAME.match(text)
            if m:
                self.thread.frames.append(make_frame(m.group(3), f"{m.group(1)}:{m.group(2)}"))
                return True
            if text[:1] in (" ", "\t"):
                return True  # the source line under a frame
        m = _TB_FRAME.match(text)
        if (
            m and (m.group(1) == "<unknown>" or m.group(3).endswith("()"))
            and self.tb is None and not self.pybt
        ):
            # torch's fatal-signal printer (C++ symbols as `File "<unknown>", line 0, in
            # f`, innermost first) whose `!!!!!!! Segfault encountered !!!!!!!` was cut off
            self._new_thread(self._open(ln, "faulthandler"), None, None, None)
            self.pybt = True
            return self._feed_frame(ln, text, stripped)
        if m:
            if self.tb is None:  # header cut off
                self.tb = _Proc("traceback", ln.source, ln.line, None, ln.title, ln.rank)
                self.tb.threads.append(_Thread(None, None, None, outer_first=True))
            self.tb.threads[0].frames.append(make_frame(m.group(3), f"{m.group(1)}:{m.group(2)}"))
            self.tb_frame_at = (ln.source, ln.line)
            return True
        m = _FH_FRAME.match(text) or (
            _FH_FRAME_CUT.match(text) if self.proc is None and self.tb is None else None
        )
        if (
            m is None and self.thread is not None and self.proc is not None
            and self.proc.kind == "faulthandler" and not self.pybt and self.tb is None
        ):
            m = _FH_FRAME_BARE.match(text)
        if m:
            if self.thread is None or self.proc is None or self.proc.kind != "faulthandler":
                proc = self._open(ln, "faulthandler")
                self._new_thread(proc, None, None, None)
            assert self.thread is not None
            lineno = m.group(2)
            where = f"{m.group(1)}:{lineno}" if lineno.isdigit() else m.group(1)
            self.thread.frames.append(make_frame(m.group(3), where))
            return True
        in_text_thread = (
            self.thread is not None and self.proc is not None and self.proc.kind == "text"
        )
        if in_text_thread and _LOCALS_HEAD.match(text):
            self.locals = True
            return True
        if self.locals and _LOCAL_VAR.match(text):
            return True
        indented = text[:1] in (" ", "\t")
        if not (in_text_thread or indented):
            return False
        if stripped[-1:] != ")" and ")" in stripped:
            stripped = _NOTE.sub(r"\1", stripped)  # the reporter's note after the frame
        parts = split_pyspy_frame(stripped)
        if parts is None or not _WHERE.search(parts[1]) or stripped[0] in "=#[":
            return False
        if not in_text_thread:  # frames whose headers were cut off
            orphan = self.proc
            if orphan is None or orphan.kind != "text" or orphan.error is not None:
                orphan = None
            if orphan is None:
                orphan = self._open(ln, "text")
            self._new_thread(orphan, None, None, None)
        assert self.thread is not None
        self.locals = False
        self.thread.frames.append(make_frame(*parts))
        return True

    def _feed_traceback(self, ln: _Line, text: str, stripped: str) -> bool:
        """Lines inside a traceback: source lines and carets are skipped; the exception
        line ends it. Returns False for a line the traceback does not own."""
        tb = self.tb
        assert tb is not None
        if _TB_FRAME.match(text):
            return False
        if not stripped:
            return True
        under = self.tb_frame_at == (ln.source, ln.line - 1)
        if set(stripped) <= set("^~ "):
            return True  # carets
        indented = text[:1] in (" ", "\t")
        m = None if indented else _EXCEPTION.match(stripped)
        if indented or (m is None and under):
            # a source line (under a frame: its call, also when the paste lost its indent)
            if under and tb.threads:
                tb.threads[0].calls[len(tb.threads[0].frames) - 1] = stripped[:240]
            return True
        self.tb = None
        if m is None and self._stack_not_traceback(tb):
            return False
        # no exception line under the frames (another stream's line, a log prefix the
        # reader kept on it): a traceback cut there, kept as one cut at the text's end is
        built = tb.build()
        if m and m.group(1).rsplit(".", 1)[-1] == "KeyboardInterrupt":
            if built is not None:
                self.out.append(replace(built, mode="traceback"))
            return True
        if built is not None:
            self.raised.append(replace(built, mode="traceback"))
            if m:
                self.c10_for, self.c10_gap, self.c10_frames = len(self.raised) - 1, 3, None
        return bool(m)

    def _stack_not_traceback(self, tb: _Proc) -> bool:
        """A run of `File "...", line N, in f` frames with no exception line under it whose
        source lines show it innermost first (a frame's call names the frame listed above
        it, and no frame's call names the one below) is a thread's stack as gdb's py-bt
        prints it, its `Traceback (most recent call first):` header cut, not a traceback:
        it becomes a process of its own (where that thread waits). True where it did."""
        if not tb.threads or not _inner_first(tb.threads[0]):
            return False
        thread = tb.threads[0]
        thread.outer_first = False
        proc = _Proc("faulthandler", tb.source, tb.line, None, tb.title, tb.rank, [thread])
        built = proc.build()
        if built is not None:
            self.out.append(built)
        return True

    def _feed_c10(self, stripped: str) -> bool:
        """torch's C++ stack under an exception it raised (c10/util/Exception.cpp:
        ``Exception raised from doWait at .../TCPStore.cpp:550 (most recent call first):``,
        then ``frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f.. in
        libtorch_cpu.so)``): where in C++ the thread was, inside the traceback's innermost
        Python frame. Returns False for a line that is not one of it."""
        if _C10_RAISED.search(stripped):
            self.c10_frames, self.c10_open = [], not stripped.endswith("):")
            return True
        m = _C10_FRAME.match(stripped)
        if m is not None and self.c10_frames is not None:
            self.c10_frames.append(_c10_frame(m))
            self.c10_open = m.group(5) is None  # a hard wrap cut its "(0x.. in lib.so)"
            return True
        if self.c10_frames is not None and self.c10_open and stripped:
            # the rest of a header or frame line a hard wrap cut: "(most recent call
            # first):", "/x/torch/lib/libtorch_cpu.so)"
            self.c10_open = False
            return True
        if self.c10_frames is None and self.c10_gap > 0 and stripped:
            self.c10_gap -= 1  # the exception's message may run over a few lines
            return False
        self._end_c10()
        return False

    def _feed_c10_alone(self, ln: _Line, stripped: str) -> bool:
        """torch's C++ stack with no Python traceback above it: the exception a C++ thread
        raised (ProcessGroupNCCL's watchdog or heartbeat monitor: ``Exception raised from
        run at .../ProcessGroupNCCL.cpp:2074 (most recent call first):``), or a paste that
        starts with its ``frame #N:`` lines. One process of one thread, innermost first."""
        alone = self.proc is not None and self.proc.kind == "c10"
        raised = _C10_RAISED.search(stripped)
        if raised:
            if self.tb is not None or self.c10_for is not None:
                return False
            self._new_thread(self._open(ln, "c10"), None, None, None)
            assert self.thread is not None
            # the function that raised, named by the header: the innermost frame whose
            # symbol the list itself often leaves "<unknown function>"
            where = raised.group(2).rsplit("/", 1)[-1]
            self.thread.frames.append(replace(make_frame(raised.group(1), where), native=True))
            return True
        m = _C10_FRAME.match(stripped)
        if m is None:
            return False
        if not alone:
            # a list whose header the paste cut: only where the text starts with it (a
            # frame line further on, its header far above, is another list's tail, and
            # whether a reader met what came between depends on which lines it read)
            if ln.line - self.text_start[0] > 3 or self.proc is not None or self.tb is not None or (
                self.c10_for is not None
            ):
                return False
            self._new_thread(self._open(ln, "c10"), None, None, None)
        if self.thread is not None:
            self.thread.frames.append(_c10_frame(m))
        return True

    def _end_c10(self) -> None:
        at, frames = self.c10_for, self.c10_frames
        self.c10_for = self.c10_frames = None
        if at is None or not frames or at >= len(self.raised):
            return
        proc = self.raised[at]
        if not proc.threads:
            return
        first = proc.threads[0]
        thread = replace(first, frames=(*frames, *first.frames))
        self.raised[at] = replace(proc, threads=(thread, *proc.threads[1:]))

    def _feed_json(self, ln: _Line, stripped: str) -> bool:
        assert self.json is not None and self.json_at is not None
        if stripped != "]" and not ln.text[:1].isspace() and stripped not in ("{", "}", "},"):
            self.json = None  # not py-spy's pretty-printed JSON after all
            return False
        self.json.append(ln.text)
        if stripped == "]" and not ln.text[:1].isspace():
            at, lines = self.json_at, self.json
            self.json = self.json_at = None
            try:
                data = json.loads("\n".join(lines))
            except ValueError:
                return True
            if (
                isinstance(data, list)
                and data
                and isinstance(data[0], dict)
                and "frames" in data[0]
            ):
                pid = data[0].get("pid")
                try:
                    proc = parse_pyspy_json(
                        data, pid=pid if isinstance(pid, int) else None, title=at.title, mode="json"
                    )
                except ValueError:
                    return True
                self.out.append(
                    replace(proc, source=at.source, line=at.line, rank=proc.rank or at.rank)
                )
        return True

    def finish(self) -> None:
        held, self.partial = self.partial, []
        for x in held:
            self._feed(x)
        self._end_c10()
        self.close()
        if self.tb is not None and self._stack_not_traceback(self.tb):
            self.tb = None
        if self.tb is not None:  # a traceback the text cut before its exception line
            built = self.tb.build()
            if built is not None:
                self.raised.append(replace(built, mode="traceback"))
                self.cut.append(self.raised[-1])
        self.tb = None
        self.json = None


# vLLM's VLLM_TRACE_FUNCTION log (vllm/logger.py _trace_calls, 0.4+): one line per Python
# call and return, `Call to F in a.py:12 from G in b.py:34` / `Return from F in a.py:20 to
# G in b.py:34`. The calls still open at the end of the trace are where the thread sits.
_TRACE = re.compile(
    r"\b(Call to|Return from) (\S+) in (\S+?):(\d+)(?: (?:from|to) (\S+) in (\S+?):(\d+))?\s*$"
)


def _trace_processes(records: Sequence[Record]) -> list[StackProcess]:
    """One process per source holding a VLLM_TRACE_FUNCTION trace: its open calls,
    innermost first (mode "trace": no thread state, like faulthandler)."""
    stacks: dict[str, list[StackFrame]] = {}
    first: dict[str, int] = {}
    seen: dict[str, int] = {}  # trace lines per source
    for rec in records:
        for text in (rec.raw or rec.message, *rec.continuation):
            if "Call to " not in text and "Return from " not in text:
                continue
            m = _TRACE.search(text)
            if m is None:
                continue
            kind, name, where, line, caller, cwhere, cline = m.groups()
            stack = stacks.setdefault(rec.source, [])
            first.setdefault(rec.source, rec.line)
            seen[rec.source] = seen.get(rec.source, 0) + 1
            # (vLLM 0.4.0-0.4.1 logged no caller: "Call to f in a.py:12")
            if kind == "Call to":
                if not stack and caller:  # the excerpt starts inside the caller
                    stack.append(make_frame(caller, f"{cwhere}:{cline}"))
                stack.append(make_frame(name, f"{where}:{line}"))
                continue
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].name == name:
                    del stack[i:]
                    break
            if not stack and caller:
                stack.append(make_frame(caller, f"{cwhere}:{cline}"))
    out = []
    for source, stack in stacks.items():
        # one frame left: every call of the window returned, the last one to this caller,
        # which runs on at that line (a trace of a few lines is no trace to read)
        if not stack or (len(stack) < 2 and seen[source] < 3):
            continue
        thread = StackThread(thread_id=None, name=None, frames=tuple(reversed(stack)))
        out.append(
            classified(
                StackProcess(
                    pid=None,
                    title=None,
                    threads=(thread,),
                    mode="trace",
                    source=source,
                    line=first[source],
                )
            )
        )
    return out


def extract_stack_processes(
    records: Sequence[Record], *, tracebacks: bool = False
) -> list[StackProcess]:
    """Every stack dump in a stream of records, classified (``wait_site`` set).

    With ``tracebacks`` (the analyser's call), each traceback of a source with no dump
    (ending in an error, or cut) is a process too: where its thread was when the error
    surfaced (mode ``traceback``).

    Dumps of the same pid in the same source are merged into one process (see
    :func:`diag.stacks.merge.merge_samples`); processes come in the order they first appear."""
    found: list[StackProcess] = []
    # one parser per (source, per-line prefix): a dump never runs on into another file
    channels: dict[tuple[str, str], _Channel] = {}
    raised: list[StackProcess] = []
    cut: list[StackProcess] = []  # raised ones the text's end cut before an exception line
    busy: set[tuple[str, str]] = set()  # channels with a dump (or a pending header) open
    c10d_open: dict[str, _Channel] = {}  # source -> channel with torch's report open
    candidate = _candidate
    indent = (" ", "\t")

    seen: dict[str, _Split] = {}

    def feed(
        rec: Record, piece: str, offset: int, head: _Line | None, text: str | None = None
    ) -> None:
        ln = _line_of(rec, piece, offset, seen)
        if text is not None:
            ln.text = text  # the line as it should have read (a frame's lost indentation)
        if head is not None and not ln.channel:
            # A log parser attached this line to the record because it belongs to the
            # record's stream (prefix already stripped): it inherits the head's stream.
            ln.channel, ln.rank, ln.title = head.channel, ln.rank or head.rank, head.title
        ckey = (ln.source, ln.channel)
        chan = channels.get(ckey)
        if ln.text[:1] == "#" and _C10D_FRAME.match(ln.text) and (
            chan is None or not chan.in_c10d
        ):
            # the frames of torch's report carry no rank prefix: they belong to the
            # report opened last in this source
            opener = c10d_open.get(ln.source)
            if opener is not None and opener.in_c10d:
                chan = opener
        if (chan is None or chan.tb is None) and "KeyboardInterrupt" in ln.text and (
            _INTERRUPT.match(ln.text)
        ):
            # The interrupted traceback's lines may have been attached (prefix stripped)
            # to a record of another stream: end the one open traceback of this rank.
            open_tbs = [c for c in channels.values() if c.tb is not None and c.key[0] == ln.source]
            same = [c for c in open_tbs if c.tb is not None and c.tb.rank == ln.rank]
            pick = same if len(same) == 1 else open_tbs
            if len(pick) == 1:
                chan = pick[0]
        if chan is None:
            chan = channels[ckey] = _Channel(found, ckey, raised, cut, text_start)
        chan.feed(ln)
        proc = chan.proc  # (chan.in_c10d, inline: speed)
        if proc is not None and proc.kind == "c10d":
            c10d_open[ln.source] = chan
        if chan.busy:
            busy.add(chan.key)
        else:
            busy.discard(chan.key)

    source: str | None = None
    # the line a paste's text begins after (a code fence's), for the dump forms read only
    # at the text's start
    text_start = [0]
    fenced: list[str | None] = [None]  # the open code fence's mark
    # py-spy frames a paste left with no thread header and no indentation: one is held
    # until a second follows (then both, and the run after them, go in as frames)
    held: tuple[Record, str, int, _Line | None, str] | None = None
    bare_run = False
    for rec in records:
        if rec.source != source:
            for done in [k for k in channels if k[0] == source]:
                channels.pop(done).finish()
                busy.discard(done)
            source = rec.source
            held, bare_run = None, False
            text_start[0], fenced[0] = 0, None
        offset = 0
        head = rec.raw or rec.message
        texts = (head, *rec.continuation) if rec.continuation else (head,)
        head_line = _line_of(rec, head, 0, seen) if rec.continuation else None
        for i, text in enumerate(texts):
            if "\n" in text:
                pieces: Sequence[str] = text.split("\n")
                if any(_maybe_glued(piece) for piece in pieces):
                    pieces = [cut for piece in pieces for cut in split_glued_dump(piece)]
            elif _maybe_glued(text):
                pieces = split_glued_dump(text)
            else:
                pieces = (text,)
            for piece in pieces:
                fence = (
                    _FENCE.match(_split_line(piece)[0])
                    if "```" in piece or "~~~" in piece else None
                )
                if fence is not None:
                    # a markdown code fence bounds a paste: a dump may begin right after
                    # the one that opens it (a header before it stays open: `Stack (most
                    # recent call first):` then the fenced frames), and what is open ends at
                    # the one that closes it as at the text's end
                    mark = fence.group(1)
                    if fenced[0] is None:
                        fenced[0] = mark
                        text_start[0] = rec.line + offset
                    elif mark[:1] == fenced[0][:1] and len(mark) >= len(fenced[0]) and (
                        not fence.group(2)
                    ):
                        fenced[0] = None
                        for done in [k for k in channels if k[0] == source]:
                            channels.pop(done).finish()
                            busy.discard(done)
                        held, bare_run = None, False
                    offset += 1
                    continue
                bare = None
                if (".py" in piece or ".so" in piece) and "(" in piece and (
                    _BARE_HINT.search(piece)
                ):
                    split = seen.get(piece)
                    if split is None:
                        split = seen[piece] = _split_line(piece)
                    bare = _BARE_FRAME.match(split[0])  # after its wrappers and prefixes
                if bare is not None and (
                    bare_run or held is not None or not (busy or candidate(piece))
                ):
                    # "sched_yield   (vllm/distributed/utils.py:48)" at the line's start
                    frame = "    " + bare.group(1)
                    if held is not None:
                        feed(*held[:4], text=held[4])
                        held, bare_run = None, True
                    if bare_run:
                        feed(rec, piece, offset, head_line if i else None, text=frame)
                    else:
                        held = (rec, piece, offset, head_line if i else None, frame)
                    offset += 1
                    continue
                held, bare_run = None, False
                if busy or piece.startswith(indent) or candidate(piece) or piece == "[":
                    feed(rec, piece, offset, head_line if i else None)
                offset += 1
    for chan in channels.values():
        chan.finish()
    found.extend(_trace_processes(records))
    # Ctrl-C reaches every process of the group, and each prints its own traceback ending
    # in KeyboardInterrupt: in a source holding such a dump, a traceback the paste cut
    # before its exception line is one more of them (where that process was), not an error.
    interrupted = {p.source for p in found if p.mode == "traceback"}
    found.extend(p for p in cut if p.source in interrupted)
    if raised and tracebacks:
        # A traceback is where its thread was when the error surfaced (an exception out of
        # a CUDA sync, a JIT build, a pipe read): in a bare paste of one, the only stack
        # there is; in a log, beside the error it ends in (python.exception). Each is of its
        # own moment, so the collective-wait rule leaves them out (mode traceback).
        dumped = {p.source for p in found}
        found.extend(classified(p) for p in raised if p.source not in dumped)
    found.sort(key=lambda p: (p.source or "", p.line or 0))
    by_pid: dict[tuple[str | None, int], list[StackProcess]] = {}
    order: list[tuple[str | None, int] | int] = []
    for i, p in enumerate(found):
        if p.pid is None:
            order.append(i)
            continue
        key = (p.source, p.pid)
        if key not in by_pid:
            by_pid[key] = []
            order.append(key)
        by_pid[key].append(p)
    result: list[StackProcess] = []
    for item in order:
        if isinstance(item, int):
            result.append(found[item])
        else:
            group = by_pid[item]
            result.append(group[0] if len(group) == 1 else merge_samples(group))
    return result


# A dump whose newlines were lost (a paste flattened into one line): cut it again before
# every header and frame py-spy, faulthandler and pystack begin a line with, and after
# every py-spy frame's ``(file:line)`` / ``(lib.so)``. Only a line holding two or more
# frames is cut (a log line that mentions one frame stays whole).
_GLUED_FRAMES = re.compile(
    r"\((?:[^()\s]+:\d+|[^()\s]+\.so[\w.\-]*|python[\d.]*)\)|\bFile:? \"[^\"]*\", line \d+"
    r"|\bframe #\d+: \S"  # c10::Error's C++ frames
)
_GLUED_CUT = re.compile(
    r"(?:(?<!\s)(?<!\(Python\))(?<!\(C\))\s+|(?<=[)\"\w>])|(?<=\):))"
    r"(?P<head>(?=Thread (?:0x[0-9a-fA-F]+|\d+) \((?:idle|active|gil|most recent)"
    r"|Thread \"[^\"]*\" \((?:idle|active|gil)|<no Python frame>|<tstate is freed>"
    r"|Current thread 0x|Process \d+: |Python v\d|Stack \(most recent|"
    r"Traceback for thread \d+|\(Python\) File \"|\(C\) File \"|File:? \"|# Thread(?:ID)?: |"
    r"#\d+ [\w<>.]+ from \S|#\d+\s+0x[0-9a-fA-F]+ in |Traceback \(most recent call first\)|"
    # gdb's thread header and its inlined frames (no address: `#2  commCleanup (comm=..`)
    r"Thread \d+ \((?:Thread 0x[0-9a-fA-F]+ )?\(LWP \d+\)|#\d+\s+[A-Za-z_][\w:~]* \(|"
    r"Waiting for the GIL|<built-in (?:method|function) |"
    r"Exception raised from \S+ at |frame #\d+: ))"
    r"|(?<=[)\"])\s+(?=\S)|(?<=\):)\s+(?=[^\s\"])"  # (a py-spy header's name after it)
)
# gdb's `#3  0x00007f.. in f ()` (or, without the address, `#0  __lll_lock_wait () at
# x.S:135`) and torch c10d's `#3 f from file.py:12`
_GLUED_GDB = re.compile(
    r"#\d+\s+0x[0-9a-fA-F]+ in |#\d+ [\w<>.]+ from \S|#\d+\s+[A-Za-z_][\w:~]* \([^()]*\) at \S+:\d"
)
_GLUED_HEADER = re.compile(
    r"Thread (?:0x[0-9a-fA-F]+|\d+) \((?:idle|active|gil|most recent)|Current thread 0x|"
    r"Thread \"[^\"]*\" \((?:idle|active|gil)|"
    r"Traceback \(most recent call first\)|Waiting for the GIL|"
    r"Traceback for thread \d+|Stack \(most recent|# Thread(?:ID)?: |"
    r"Thread \d+ \((?:Thread 0x[0-9a-fA-F]+ )?\(LWP \d+\)"
)
# what the part before a cut after ``)`` or ``"`` must end with: a py-spy frame's place or
# a thread header
# `(Python) File "x.py", line 12, in f         return g()`: a frame, then its source line
_GLUED_SOURCE = re.compile(
    r"^((?:\((?:Python|C)\) )?File:? \"[^\"]*\", line \d+, in [\w<>.]+)\s+(\S.*)$"
)
# pystack's thread header names its command in parentheses before its flags: not an end
_PYSTACK_TITLE_END = re.compile(r"Traceback for thread \d+ \([^()]*\)$")
_GLUED_PART_END = re.compile(
    r"\((?:[^()\s]+:\d+|[^()\s]+\.so[\w.\-]*|[^()\s]*python[\d.]*)\)$"
    r"|\((?:idle|active|gil)[+\w]*\):?(?: \"[^\"]*\")?$"
)


_GLUED_HEADS = ("Thread ", "thread 0x", "Stack (", "# Thread")
# py-spy's process header, or a py-spy or faulthandler thread header, glued after another
# line: `... (py-spy dump --pid 187): Process 187: sglang::scheduler_TP6 Python v3.12.3
# (/usr/bin/python3.12)`, `Stack dump for ray_worker 2076 Thread 0x7FB6 (active)`
# (never after a per-line prefix: a process's `(Actor pid=12) `, a rank's `[rank3]: `; nor
# py-spy's own `Parent Process 9041: torchrun ...`)
_GLUED_PROCESS = re.compile(
    r"[^\s)\]>](?<!\]:)(?<!Parent)\s+"
    r"(?:Process \d+: \S|Thread (?:0x[0-9a-fA-F]+|\d+) \((?:idle|active|gil|most recent)"
    r"|Thread \"[^\"]*\" \((?:idle|active|gil))"
)


def _maybe_glued(text: str) -> bool:
    """Cheap guard before :func:`split_glued_dump` (it runs on every line of a log): two
    frame places at least (``.py:``, ``.so``, ``<string>:``, ``File "``), or one and a
    thread header. A log line names one place at most (``[gpu_model_runner.py:1234]``)."""
    if len(text) < 40:
        return False
    n = text.count(".py:") + text.count('File "') + text.count('File: "')
    if n < 2:
        # py-spy's native frames in the interpreter: `PyThread_acquire_lock_timed (python3.12)`
        n += text.count(".so") + text.count("<string>:") + text.count(" (python")
    if n < 2 and ("Process " in text or "Thread " in text) and _GLUED_PROCESS.search(text):
        return True  # a dump's header after another line (a watchdog's, a title)
    if n < 2 and "#" in text:
        n += len(_GLUED_GDB.findall(text, 0, 2_000))  # gdb's `#3  0x00007f.. in f ()`
    return n >= 2 or n == 1 and (
        "Thread " in text or "thread 0x" in text or "Stack (" in text or "# Thread" in text
    )  # (_GLUED_HEADS, spelt out: speed)


def split_glued_dump(text: str) -> list[str]:
    """One flattened line of a dump -> its lines again (see :data:`_GLUED_CUT`); any other
    line -> ``[text]`` (a line needs two frames, or a thread header and one). A cut after
    ``)`` or ``"`` is kept only where the part before it ends a py-spy frame or thread
    header (``file:line)``, ``lib.so)``, ``(idle): "name"``)."""
    if len(text) < 40:
        return [text]
    one = text.strip()
    if (
        _PYSTACK_FRAME.match(one) or _FH_FRAME.match(one) or _PYBT_FRAME.match(one)
        or _DS_FRAME.match(one)
    ) and (
        one.count('File "') + one.count('File: "') < 2 and not _GLUED_HEADER.search(one)
    ):
        return [text]  # one whole frame line (pystack's names its file and its library)
    frames = len(_GLUED_FRAMES.findall(text, 0, 20_000))
    frames += len(_GLUED_GDB.findall(text, 0, 20_000))
    if (frames < 1 or (frames < 2 and not _GLUED_HEADER.search(text))) and (
        _GLUED_PROCESS.search(text) is None
    ):
        return [text]
    parts: list[str] = []
    start = 0
    for m in _GLUED_CUT.finditer(text):
        head = text[start : m.start()]
        if m.group("head") is None and (
            not _GLUED_PART_END.search(head) or _PYSTACK_TITLE_END.search(head)
        ):
            continue
        if head.strip():
            parts.append(head.strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    if not parts:
        return [text]
    # a traceback-form frame (pystack's, Python's) glued to its source line: two lines
    out: list[str] = []
    for part in parts:
        src = _GLUED_SOURCE.match(part)
        if src:
            out.append(src.group(1))
            out.append("    " + src.group(2))
        else:
            out.append(part)
    return out


def records_from_text(text: str, *, source: str = "<text>") -> list[Record]:
    """One plain record per line: how a standalone dump file arrives without a log parser
    (a gutter the whole text carries, such as a markdown quote, removed)."""
    lines = text.splitlines()
    unwrapper = SourceUnwrapper(lines[:60])
    if unwrapper.gutters:  # a quoted or line-numbered paste: the gutter off every line
        lines = [unwrapper.strip_gutters(line)[0] for line in lines]
    return [
        Record(source=source, line=i, message=line, raw=line)
        for i, line in enumerate(lines, start=1)
    ]


def parse_stack_text(text: str, *, source: str = "<text>") -> list[StackProcess]:
    """:func:`extract_stack_processes` over a text (a dump file's contents)."""
    return extract_stack_processes(records_from_text(text, source=source))
