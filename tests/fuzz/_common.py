"""Shared pieces of the fuzz harnesses: structure-aware generators for the inputs random
bytes never reach (long digit runs, Unicode digits, deep nesting, huge sizes, control
sequences), and the one exception every harness accepts (DiagError: a one-line refusal).
Anything else escaping a harness is a crash.

Each harness is ``fuzz_<name>.py`` with ``one_input(data: bytes)``; ``run.sh NAME SECONDS``
runs it under atheris (coverage-guided) or, when atheris is missing, under a seeded
random driver with the same generators.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["HERE", "Gen", "drive", "instrumented", "seeds"]

HERE = Path(__file__).resolve().parent

DIGITS = [
    "9" * 5000,
    "1" * 4301,
    "²",
    "٣",
    "𝟗",
    "0" * 30,
    "-" + "9" * 400,
    "1e309",
    "0x" + "f" * 40,
]
CONTROLS = ["\x1b]52;c;AAAA\x07", "\x1b[2J", "\x00", "\r", "\u202e", "\x9b", "\ufeff", "\ufffd"]
NESTS = ["[" * 3000 + "]" * 3000, "{" * 3000, "(" * 3000, '{"a":' * 2000 + "1" + "}" * 2000]


class Gen:
    """A deterministic source of choices over one fuzz input (FuzzedDataProvider-like)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        b = self.data[self.pos]
        self.pos += 1
        return b

    def pick(self, options: list[str]) -> str:
        return options[self.byte() % len(options)]

    def rest(self) -> bytes:
        out = self.data[self.pos :]
        self.pos = len(self.data)
        return out

    def mutate_text(self, text: str) -> str:
        """Insert a hostile token (digits, controls, nesting) at a few positions."""
        for _ in range(self.byte() % 4):
            at = (self.byte() * 256 + self.byte()) % (len(text) + 1)
            kind = self.byte() % 3
            token = self.pick([DIGITS, CONTROLS, NESTS][kind])
            if self.byte() % 2:  # replace the number at that place, if any
                j = at
                while j < len(text) and text[j].isdigit():
                    j += 1
                text = text[:at] + token + text[j:]
            else:
                text = text[:at] + token + text[at:]
        return text


def instrumented() -> contextlib.AbstractContextManager[object]:
    """Import diag's modules under atheris' coverage instrumentation (when available)."""
    if os.environ.get("DIAG_FUZZ_INSTRUMENT") == "0":  # mutation only: more executions
        return contextlib.nullcontext()
    try:
        import atheris
    except ImportError:
        return contextlib.nullcontext()
    return atheris.instrument_imports(include=["diag"])  # type: ignore[no-any-return]


def seeds(name: str) -> list[bytes]:
    folder = HERE / "corpus" / name
    return (
        [p.read_bytes() for p in sorted(folder.glob("*")) if p.is_file()] if folder.is_dir() else []
    )


def drive(name: str, one_input: Callable[[bytes], None], seconds: float) -> None:
    """Run ``one_input`` for ``seconds``: atheris when importable, else seeded random
    mutation of the seeds. Prints the executions done (the README's table reads it)."""
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None and os.environ.get("DIAG_FUZZ_FALLBACK") != "1":
        corpus = HERE / "corpus" / name
        work = Path(os.environ.get("DIAG_FUZZ_WORK", f"/tmp/diag-fuzz-{name}"))
        work.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.argv[0], str(work), str(corpus),
            f"-max_total_time={int(seconds)}", "-rss_limit_mb=2048", "-timeout=30",
            f"-runs={int(os.environ.get('DIAG_FUZZ_RUNS', '-1'))}",
            "-print_final_stats=1", f"-artifact_prefix={work}/",
        ]  # fmt: skip
        atheris.Setup(argv, one_input)
        atheris.Fuzz()
        return
    rng = random.Random(int(os.environ.get("DIAG_FUZZ_SEED", "12")))  # one per worker
    work = Path(os.environ.get("DIAG_FUZZ_WORK", f"/tmp/diag-fuzz-{name}"))
    work.mkdir(parents=True, exist_ok=True)
    # the seeds, and the corpus a coverage-guided run left in the work folder
    pool = seeds(name) + [
        p.read_bytes() for p in sorted(work.glob("*")) if p.is_file() and len(p.name) == 40
    ]
    pool = pool or [b""]
    runs = int(os.environ.get("DIAG_FUZZ_RUNS", "-1"))
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and (runs < 0 or n < runs):
        base = bytearray(rng.choice(pool))
        for _ in range(rng.randrange(1, 8)):
            op = rng.randrange(4)
            at = rng.randrange(len(base) + 1)
            if op == 0:
                base[at:at] = os.urandom(rng.randrange(1, 16))
            elif op == 1 and base:
                del base[at : at + rng.randrange(1, 32)]
            elif op == 2 and base:
                base[at : at + 1] = bytes([rng.randrange(256)])
            else:
                token = rng.choice(DIGITS + CONTROLS + NESTS)
                base[at:at] = token.encode("utf-8")
        data = bytes(base)
        try:
            one_input(data)
        except Exception:
            crash = work / f"crash-{hashlib.sha1(data).hexdigest()}"
            crash.write_bytes(data)
            print(f"fallback driver: crash after {n} executions; input in {crash}")
            raise
        n += 1
    print(f"fallback driver: {n} executions in {seconds:.0f} s, 0 crashes")
