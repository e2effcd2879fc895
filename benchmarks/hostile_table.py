"""Run every hostile input and fault class of issue 12 against diag and print the
README's "Hardening" table (Markdown), measured, not typed.

usage: python benchmarks/hostile_table.py [--quick] [--fuzz-logs DIR] [--json OUT]

Each case is a real run of ``python -m diag ...`` (or, for the live faults, a small
Python program that calls the collector with a real fake py-spy on a real target), in a
fresh process whose wall time and peak RSS (``os.wait4``) are recorded. A case passes
when diag ends within its bound with the expected result (a note, a one-line refusal
with exit 2, a partial dump) and never with a traceback. Per class the table gives the
count, how many passed, and the worst case's time and peak RSS. ``--fuzz-logs`` adds the
fuzz executions per harness from libFuzzer's final stats (``stat::number_of_executed_units``
lines of ``tests/fuzz/run.sh`` outputs named ``HARNESS.*.log``). ``--quick`` skips the
two largest inputs (5 M lines, the 1 GiB gzip).
"""

from __future__ import annotations

import argparse
import bz2
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
T0 = "[2025-03-14 06:55:09 TP0] "
INIT = T0 + "Init torch distributed begin.\n"
OOM = "[2025-03-14 06:57:09 TP0] RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")


@dataclass
class Outcome:
    rc: int
    out: str
    err: str
    wall_s: float
    rss_mb: float


@dataclass
class Case:
    cls: str
    name: str
    run: Callable[[Path], Outcome]
    check: Callable[[Outcome], bool]
    limit_s: float = 120.0
    # the bound for an input under 10 MB (None: a larger input, time bound only)
    max_rss_mb: float | None = 500.0


def _measure(
    argv: list[str],
    *,
    stdin: bytes | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> Outcome:
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=err,
            cwd=ROOT,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        if stdin is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin)
            proc.stdin.close()
        deadline = t0 + timeout
        status, rusage = 0, None
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, 9)
                pid, status, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Outcome(
            rc=proc.returncode,
            out=out.read().decode("utf-8", "replace"),
            err=err.read().decode("utf-8", "replace"),
            wall_s=time.monotonic() - t0,
            rss_mb=(rusage.ru_maxrss / 1024) if rusage is not None else 0.0,
        )


def diag(*args: str, stdin: bytes | None = None, timeout: float = 300) -> Outcome:
    return _measure([PY, "-m", "diag", *args], stdin=stdin, timeout=timeout)


def program(code: str, timeout: float = 120) -> Outcome:
    return _measure([PY, "-c", code], timeout=timeout)


def clean(o: Outcome) -> bool:
    return "Traceback" not in o.err and "Traceback" not in o.out


def refused(o: Outcome) -> bool:
    return o.rc == 2 and clean(o) and o.err.count("\n") <= 3


def analysed(o: Outcome) -> bool:
    return o.rc in (0, 1) and clean(o)


# -- inputs -------------------------------------------------------------------------------


class _Newlines(io.RawIOBase):
    """``head`` then newlines up to ``size`` bytes, streamed (a 1 GiB member, no 1 GiB)."""

    def __init__(self, head: bytes, size: int) -> None:
        super().__init__()
        self._head = head
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buf), self._left)
        if n <= 0:
            return 0
        data = (self._head + b"\n" * n)[:n]
        self._head = self._head[n:]
        buf[:n] = data
        self._left -= n
        return n


def _tar_gz(
    path: Path, members: list[tuple[str, bytes | tuple[bytes, int]]], *, level: int = 6
) -> Path:
    if path.exists():  # (built once, by the --prepare child: this process stays small)
        return path
    with (
        path.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level) as gz,
        tarfile.open(fileobj=gz, mode="w") as tf,
    ):
        for name, body in members:
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                info.size = body[1]
                tf.addfile(info, _Newlines(*body))
            else:
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
    return path


def _bundle(
    path: Path,
    members: dict[str, bytes],
    manifest: dict[str, object] | None = None,
    *,
    manifest_last: bool = False,
    raw_manifest: bytes | None = None,
) -> Path:
    if path.exists():
        return path
    m: dict[str, object] = {
        "format": "diag-bundle",
        "schema": 1,
        "diag_version": "0.1",
        "created": "x",
        "logs": [{"member": "logs/a.log", "source": "a.log"}] if "logs/a.log" in members else [],
        "members": {
            n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()
        },
    }
    m.update(manifest or {})
    data = raw_manifest if raw_manifest is not None else json.dumps(m).encode()
    entries = [("manifest.json", data), *members.items()]
    if manifest_last:
        entries.append(entries.pop(0))
    return _tar_gz(path, entries)


def _gzip_stream(path: Path, chunk: bytes, count: int, head: bytes = b"") -> Path:
    if path.exists():
        return path
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as fh:
        fh.write(comp.compress(head))
        for _ in range(count):
            fh.write(comp.compress(chunk))
        fh.write(comp.flush())
    return path


def cases(tmp: Path, quick: bool) -> list[Case]:  # noqa: PLR0915 - one list of cases
    c: list[Case] = []
    log = tmp / "base.log"
    log.write_text(INIT + OOM)

    # ---- sizes taken from the input
    S = "sizes taken from the input"
    idx = json.dumps({"segments": [[900_000_000, 1]]}).encode()
    gap = _bundle(
        tmp / "gap.tar.gz",
        {"env.json": b"{}", "logs/a.log": INIT.encode(), "logs/a.log.index.json": idx},
        {"logs": [{"member": "logs/a.log", "source": "a.log", "index": "logs/a.log.index.json"}]},
    )
    c.append(
        Case(
            S,
            "bundle index gap of 900 M lines (9 KB)",
            lambda _t: diag("analyze", str(gap)),
            refused,
        )
    )
    for tp in (10_000_000, 100_000_000):
        p = tmp / f"tp{tp}.log"
        p.write_text(f"{T0[:-5]}] server_args=ServerArgs(model_path='/m', tp_size={tp})\n" + INIT)
        c.append(
            Case(
                S,
                f"args line tp_size={tp:,}",
                lambda _t, p=p: diag("analyze", str(p), "--json"),
                lambda o: analysed(o) and "implausible" in o.out,
            )
        )
    big = tmp / "zero.log.gz"
    if not quick:
        _gzip_stream(big, b"\n" * (1 << 20), 1024, head=INIT.encode())  # 1 GiB of empty lines
        c.append(
            Case(
                S,
                f".gz of 1 GiB empty lines ({big.stat().st_size >> 10} KB)",
                lambda _t: diag("analyze", str(big)),
                lambda o: analysed(o) and "input cut at" in o.out,
            )
        )
    order = _tar_gz(
        tmp / "order.tar.gz",
        [("logs/a.log", (INIT.encode(), 1 << 30)), ("manifest.json", b"{}")],
        level=9,
    )
    c.append(
        Case(
            S,
            f"bundle-like .tar.gz, 1 GiB member before manifest.json "
            f"({order.stat().st_size >> 10} KB)",
            lambda _t: diag("analyze", str(order)),
            lambda o: analysed(o) and "input cut at" in o.out,
        )
    )
    empty = tmp / "empty-lines.log"
    if not empty.exists():
        empty.write_bytes(INIT.encode() + b"\n" * (8 << 20))
    c.append(
        Case(
            S,
            "8 M empty lines (plain 8 MB file)",
            lambda _t: diag("analyze", str(empty)),
            analysed,
        )
    )
    many = _tar_gz(tmp / "many.tar.gz", [(f"m{i}.bin", b"") for i in range(200_000)])
    c.append(
        Case(
            S,
            f"archive of 200,000 members ({many.stat().st_size >> 10} KB)",
            lambda _t: diag("analyze", str(many)),
            lambda o: refused(o) or analysed(o),
        )
    )
    small = _tar_gz(tmp / "small.tar.gz", [(f"r{i}.log", INIT.encode()) for i in range(1000)])
    c.append(Case(S, ".tar.gz of 1000 tiny logs", lambda _t: diag("analyze", str(small)), analysed))
    if not quick:
        rep = tmp / "rep.log"
        line = (T0 + "WARNING: The tokenizer has no pad token, using eos.\n").encode()
        if not rep.exists():
            with rep.open("wb") as fh:
                fh.write(INIT.encode())
                for _ in range(50):
                    fh.write(line * 100_000)
        c.append(
            Case(
                S,
                "5 M identical warning lines (390 MB)",
                lambda _t: diag("analyze", str(rep), timeout=600),
                analysed,
                60,  # the bound: bounded, i.e. not minutes
                None,  # (a 390 MB input: no RSS bound)
            )
        )
    rules = tmp / "slowrule"
    rules.mkdir(exist_ok=True)
    (rules / "slow.yaml").write_text(
        "id: custom.slow\ntitle: Slow\nseverity: warning\nrole: root\nframeworks: [sglang, vllm]\n"
        'summary: s\nwhy: w\nremedy: r\nreferences: []\nneedles: ["zzz"]\n'
        "match:\n  patterns:\n    - '(z|zz)+y'\nexamples:\n  match: []\n  no_match: []\n"
    )
    slow = tmp / "slow.log"
    slow.write_text(INIT + "".join(f"{T0}{'z' * 20} {i}\n" for i in range(2000)))
    c.append(
        Case(
            S,
            "rule regex just under its per-line timeout, 2000 lines",
            lambda _t: diag("analyze", str(slow), "--rules", str(rules)),
            lambda o: analysed(o) and "budget" in o.out,
        )
    )

    # ---- terminal injection
    S = "terminal injection"
    evil = "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
    ev = tmp / "evil.log"
    ev.write_text(INIT + OOM.replace("Tried", evil + " Tried"))
    c.extend(
        Case(
            S,
            f"OSC 52 / title / clear screen in an evidence line ({fmt or 'terminal'})",
            lambda _t, f=fmt: diag("analyze", str(ev), *f),
            lambda o: analysed(o) and not RAW_CONTROL.search(o.out),
        )
        for fmt in ([], ["--format=markdown"])
    )
    vb = _bundle(
        tmp / "evilm.tar.gz",
        {"env.json": b"{}", "logs/a.log": INIT.encode()},
        {"diag_version": evil, "created": evil, "summary": {"framework": evil}},
    )
    c.append(
        Case(
            S,
            "escape sequences in manifest fields (bundle verify)",
            lambda _t: diag("bundle", "verify", str(vb)),
            lambda o: o.rc == 0 and not RAW_CONTROL.search(o.out),
        )
    )

    # ---- parsers that trust Python's conversions
    S = "numbers, JSON and YAML from the input"
    big_n = "9" * 5000
    lines = {
        "rank tag": f"[2025-03-14 06:55:09 TP{big_n}] Init torch distributed begin.",
        "DP/EP tags": f"[2025-03-14 06:55:09 DP{big_n} TP0 EP{big_n}] Load weight begin.",
        "vLLM pid": f"(VllmWorker rank=0 pid={big_n}) INFO 03-14 06:55:09 [x.py:1] Loading weights",
        "Ray pid": f"(RayWorkerWrapper pid={big_n}, ip=10.0.0.1) INFO 03-14 06:55:09 hi",
        "repeat count": f"(pid=1) INFO 03-14 06:55:09 warn [repeated {big_n}x across cluster]",
        "torch rank": f"[rank{big_n}]: RuntimeError: NCCL error",
        "frame line": f'  File "/x/y.py", line {big_n}, in f',
        "py-spy text pid": f"Process {big_n}: python -m sglang.launch_server",
        "thread id": f'Thread {big_n} (idle): "MainThread"',
        "tp size": f"[2025-03-14 06:55:00] server_args=ServerArgs(tp_size={big_n})",
        "Unicode digits": "[2025-03-14 06:55:09 TP²] Init torch distributed begin. --port ²",
        "garbled progress bar": "Loading safetensors checkpoint shards: 50% 1/2 "
        "[00:01<00:01, ..14it/s]",
    }
    for what, text in lines.items():
        p = tmp / f"num-{what.replace(' ', '_').replace('/', '_')}.log"
        p.write_text(INIT + text + "\n" + OOM)
        c.append(
            Case(
                S,
                f"5000-digit / odd number: {what}",
                lambda _t, p=p: diag("analyze", str(p), "--json"),
                analysed,
            )
        )
    deep = _bundle(tmp / "deep.tar.gz", {"env.json": b"{}"}, raw_manifest=b"[" * 100_000)
    c.append(
        Case(
            S,
            "deeply nested manifest.json",
            lambda _t: diag("bundle", "verify", str(deep)),
            refused,
        )
    )
    bad = _bundle(
        tmp / "badjson.tar.gz", {"env.json": b"{}"}, raw_manifest=b'{"format": 1, "logs": 5'
    )
    c.append(
        Case(S, "malformed manifest.json", lambda _t: diag("bundle", "verify", str(bad)), refused)
    )
    lol = tmp / "lol"
    lol.mkdir(exist_ok=True)
    (lol / "lol.yaml").write_text(
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(
            f"{k}: &{k} [{', '.join(['*' + p] * 9)}]\n"
            for p, k in zip("abcdefgh", "bcdefghi", strict=True)
        )
    )
    c.append(
        Case(
            S,
            "YAML billion laughs rule file",
            lambda _t: diag("analyze", str(log), "--rules", str(lol)),
            lambda o: refused(o) and "lol.yaml" in o.err,
        )
    )

    # ---- inputs that are not regular files
    S = "inputs that are not regular files"
    c.append(Case(S, "/dev/zero", lambda _t: diag("analyze", "/dev/zero"), refused, 30))
    c.append(
        Case(
            S,
            "/dev/stdin (a pipe)",
            lambda _t: diag("analyze", "/dev/stdin", stdin=(INIT + OOM).encode()),
            lambda o: analysed(o) and "cuda.oom" in o.out,
        )
    )
    c.append(
        Case(
            S,
            "<(cmd) process substitution",
            lambda _t: _measure(["bash", "-c", f"{PY} -m diag analyze <(cat {log})"]),
            lambda o: analysed(o) and "cuda.oom" in o.out,
        )
    )
    fifo = tmp / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    c.append(
        Case(
            S,
            "named FIFO with no writer",
            lambda _t: diag("analyze", str(fifo)),
            lambda o: refused(o) and "no data within" in o.err,
            60,
        )
    )
    nul = tmp / "nul.log"
    nul.write_bytes(b"\0" * (1 << 20) + (INIT + OOM).encode())
    c.append(
        Case(
            S,
            "1 MiB of leading NUL bytes (copytruncate)",
            lambda _t: diag("analyze", str(nul)),
            lambda o: analysed(o) and "cuda.oom" in o.out,
        )
    )
    cr = tmp / "cr.log"
    cr.write_bytes(((INIT * 30000) + OOM).replace("\n", "\r").encode())
    c.append(
        Case(
            S,
            "CR-only line ends, 1.7 MB",
            lambda _t: diag("analyze", str(cr)),
            lambda o: analysed(o) and "cuda.oom" in o.out,
        )
    )
    for comp, name in ((gzip.compress, "gz"), (bz2.compress, "bz2")):
        p = tmp / f"small.log.{name}"
        p.write_bytes(comp((INIT + OOM).encode()))
        c.append(
            Case(
                S,
                f".{name} log",
                lambda _t, p=p: diag("analyze", str(p)),
                lambda o: analysed(o) and "cuda.oom" in o.out,
            )
        )

    # ---- live faults (real processes; a fake py-spy that is a real program)
    S = "live faults"
    fake = tmp / "fakespy"
    fake.mkdir(exist_ok=True)

    def spy(name: str, body: str) -> str:
        path = fake / name
        path.write_text(f"#!{PY}\nimport json, subprocess, sys, time\nargs = sys.argv[1:]\n" + body)
        path.chmod(0o755)
        return str(path)

    live = (
        "import subprocess, sys, time, json\n"
        "from pathlib import Path\n"
        "from diag.collect.pyspy import DumpTarget, dump_all\n"
        "from diag.collect.procfs import read_stat\n"
        "from diag.runner import SubprocessRunner\n"
        "t = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "try:\n"
        "    st = read_stat(t.pid, Path('/proc'))\n"
        "    root = Path('/proc')\n"
        "    if {dstate}:\n"
        "        root = Path({tmp!r}) / 'proc{n}'\n"
        "        (root / str(t.pid)).mkdir(parents=True)\n"
        "        head, tail = Path(f'/proc/{{t.pid}}/stat').read_text().rsplit(')', 1)\n"
        "        f = tail.split(); f[0] = 'D'\n"
        "        (root / str(t.pid) / 'stat').write_text(head + ') ' + ' '.join(f))\n"
        "    r = dump_all([DumpTarget(t.pid, st.starttime_ticks, native=False)],\n"
        "                 runner=SubprocessRunner(), pyspy={exe!r}, timeout_s=5, samples=1,\n"
        "                 proc_root=root)[t.pid]\n"
        "    print(r.outcome, [a.mode for a in r.attempts], r.elapsed_s)\n"
        "finally:\n"
        "    t.kill(); t.wait()\n"
    )
    frame = (
        '{"name": "w", "filename": "/x.py", "module": None, "short_filename": "x.py", '
        '"line": 1, "locals": None, "is_entry": True}'
    )
    ok_json = (
        "pid = int(args[args.index('--pid') + 1])\n"
        f"print(json.dumps([{{'pid': pid, 'thread_id': pid, 'thread_name': 'MainThread', "
        f"'os_thread_id': pid, 'active': False, 'owns_gil': False, 'frames': [{frame}]}}]))\n"
    )
    faults = {
        "py-spy flooding its output": (
            spy("flood", "while True:\n    sys.stdout.write('x' * 65536)\n"),
            False,
            "partial",
        ),
        "py-spy child holding the pipe": (
            spy(
                "hold",
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)'], "
                "start_new_session=True)\ntime.sleep(60)\n",
            ),
            False,
            "timeout",
        ),
        "py-spy printing deep JSON": (spy("deep", "print('[' * 100000)\n"), False, "partial"),
        "py-spy printing an odd shape": (
            spy("odd", "print(json.dumps([{'frames': 5}]))\n"),
            False,
            "partial",
        ),
        "target in state D": (
            spy("dstate", "if '--nonblocking' not in args:\n    time.sleep(60)\n" + ok_json),
            True,
            "ok",
        ),
    }
    for i, (what, (exe, dstate, want)) in enumerate(faults.items()):
        code = live.format(dstate=dstate, tmp=str(tmp), n=i, exe=exe)
        c.append(
            Case(
                S,
                what,
                lambda _t, code=code: program(code),
                lambda o, want=want: clean(o) and o.out.startswith(want) and o.wall_s < 15,
            )
        )
    mention = (
        "import subprocess, sys\n"
        "from diag.collect.discover import discover\n"
        "ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', "
        "'sglang.launch_server', '--port', a]) for a in ('²', '9' * 5000)]\n"
        "try:\n"
        "    d = discover()\n"
        "    print('servers-taken', len({p.pid for p in ps} & {f.pid for f in d.processes}))\n"
        "finally:\n"
        "    [p.kill() for p in ps]; [p.wait() for p in ps]\n"
    )
    c.append(
        Case(
            S,
            "process with `--port ²` / 5000 digits that mentions a launcher",
            lambda _t: program(mention),
            lambda o: clean(o) and "servers-taken 0" in o.out,
        )
    )

    # ---- secrets
    S = "secrets"
    c.append(
        Case(
            S,
            "67 forms planted in a live process's argv and env and in its log "
            "(tests/test_hostile_secrets.py: bundle bytes, --json, report, detect-secrets)",
            lambda _t: _measure(
                [
                    PY,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "tests/test_hostile_secrets.py",
                ]
            ),
            lambda o: o.rc == 0 and " passed" in o.out and "failed" not in o.out,
        )
    )

    # ---- trust
    S = "bundle trust"
    lie = _bundle(
        tmp / "lie.tar.gz",
        {"env.json": b"{}", "logs/a.log": INIT.encode()},
        {"logs": [{"member": "env.json", "source": "a.log"}]},
    )
    c.append(
        Case(
            S,
            "manifest lying about which member is a log",
            lambda _t: diag("bundle", "verify", str(lie)),
            refused,
        )
    )
    flt = _bundle(
        tmp / "float.tar.gz", {"env.json": b"{}", "logs/a.log": INIT.encode()}, {"schema": 1.0}
    )
    c.append(Case(S, "schema: 1.0", lambda _t: diag("bundle", "verify", str(flt)), refused))
    return c


def _fuzz_rows(folder: Path) -> list[str]:
    counts: dict[str, list[tuple[str, int, int]]] = {}
    for log in sorted(folder.rglob("*.log")):
        parts = log.name.split(".")
        if len(parts) < 3:
            continue
        harness, mode = parts[0], re.sub(r"[-_]?\d+$", "", parts[1])  # (workers summed)
        text = log.read_text(errors="replace")
        runs = [int(n) for n in re.findall(r"stat::number_of_executed_units: (\d+)", text)]
        runs += [int(n) for n in re.findall(r"fallback driver: (\d+) executions", text)]
        crashes = len(re.findall(r"Test unit written to .*crash-|fallback driver: crash", text))
        if runs:
            counts.setdefault(harness, []).append((mode, sum(runs), crashes))
    out = []
    for harness, modes in counts.items():
        total = sum(n for _m, n, _c in modes)
        by_mode: dict[str, int] = {}
        for m, n, _c in modes:
            by_mode[m] = by_mode.get(m, 0) + n
        detail = ", ".join(f"{n:,} {m}" for m, n in by_mode.items())
        crashes = sum(c for _m, _n, c in modes)
        out.append(
            f"| fuzz: `{harness}` | {total:,} executions ({detail}) | {crashes} crashes | | | |"
        )
    return out


def _table(results: list[dict[str, object]]) -> list[str]:
    lines = [
        "| class | inputs / faults tried | result | worst time | worst peak RSS | worst case |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    classes = list(dict.fromkeys(str(r["class"]) for r in results))
    for cls in classes:
        rows = [r for r in results if r["class"] == cls]
        n = len(rows)
        passed = sum(1 for r in rows if r["ok"])
        slow = max(rows, key=lambda r: float(str(r["wall_s"])))
        fat = max(rows, key=lambda r: float(str(r["rss_mb"])))
        failed = [str(r["case"]) for r in rows if not r["ok"]]
        result = f"{passed}/{n} handled" + (f" (not: {'; '.join(failed)})" if failed else "")
        worst = str(slow["case"]) if slow is fat else f"{slow['case']} / {fat['case']}"
        lines.append(
            f"| {cls} | {n} | {result} | {float(str(slow['wall_s'])):.1f} s "
            f"| {float(str(fat['rss_mb'])):.0f} MB | {worst} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fuzz-logs", type=Path)
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--reuse", type=Path, help="print the table from an earlier --json")
    ap.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare is not None:
        cases(args.prepare, args.quick)  # builds the inputs (the big ones here, not below)
        return
    results = json.loads(args.reuse.read_text()) if args.reuse is not None else _run(args.quick)
    lines = _table(results)
    if args.fuzz_logs is not None:
        lines += _fuzz_rows(args.fuzz_logs)
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


def _run(quick: bool) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="diag-hostile-") as td:
        tmp = Path(td)
        # the inputs are built by a child: a child's peak RSS starts from its parent's
        # (Linux keeps the high-water mark across fork and exec), so this one stays small
        prep = [PY, __file__, "--prepare", td] + (["--quick"] if quick else [])
        subprocess.run(prep, check=True)
        for case in cases(tmp, quick):
            o = case.run(tmp)
            ok = (
                case.check(o)
                and o.wall_s <= case.limit_s
                and (case.max_rss_mb is None or o.rss_mb <= case.max_rss_mb)
            )
            results.append(
                {"class": case.cls, "case": case.name, "ok": ok, "wall_s": round(o.wall_s, 2),
                 "rss_mb": round(o.rss_mb), "rc": o.rc}
            )  # fmt: skip
            mark = "ok " if ok else "FAIL"
            print(
                f"{mark} {o.wall_s:6.1f} s {o.rss_mb:7.0f} MB  {case.cls}: {case.name}"
                + ("" if ok else f"  rc={o.rc} {o.err.strip()[-300:]!r}"),
                file=sys.stderr,
            )
    return results


if __name__ == "__main__":
    main()
